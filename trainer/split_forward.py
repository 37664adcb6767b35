"""The forward passes of models whose layers are called as ``layers[i](h, edge_src, edge_dst, dst_pos)`` and
joined by ReLU + dropout (GCN, GAT): ``forward``, its ONNX form ``forward_dst_pos``, and the split forward OUTRE's
historical cache needs (``trainer.history``).

``forward_lower(x, blocks[:-1])`` runs layers ``0..L-2`` and returns the last layer's input h^{L-1} before its
dropout; ``forward_last(h, blocks[-1])`` applies that dropout and the last layer. Together they are the
model's ``forward``: the same operations in the same order, random draws included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from trainer.blocks import TensorBlock
from trainer.native_ops import dropout

__all__ = ["LayerwiseSplit"]


class LayerwiseSplit:
    """Mixin: :meth:`forward`, :meth:`forward_dst_pos`, :meth:`forward_lower` and :meth:`forward_last` from
    ``layers``, ``in_dim``, ``num_layers`` and ``dropout``."""

    layers: Any
    in_dim: int
    num_layers: int
    dropout: float
    training: bool

    def forward(self, x: torch.Tensor, blocks: Sequence[TensorBlock]) -> torch.Tensor:
        """``x`` (num_nodes, in_dim) in the batch's node order -> logits (num_seeds, out_dim)."""
        if len(blocks) != self.num_layers:
            raise ValueError(f"'blocks' expected {self.num_layers} (one per layer) (got {len(blocks)})")
        if x.dim() != 2 or x.shape[1] != self.in_dim:
            raise ValueError(f"'x' expected shape (num_nodes, {self.in_dim}) (got {tuple(x.shape)})")
        h = x
        for i, (layer, b) in enumerate(zip(self.layers, blocks, strict=True)):
            h = _apply(layer, h, b.edge_src, b.edge_dst, b.dst_pos(), b.indptr)
            if i < self.num_layers - 1:
                h = dropout(F.relu(h), self.dropout, self.training)
        return h

    def forward_dst_pos(
        self, x: torch.Tensor, edges: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor:
        """The same computation with each layer's destinations given as positions ``dst_pos`` (ONNX form)."""
        h = x
        for i, (layer, (edge_src, edge_dst, dst_pos)) in enumerate(zip(self.layers, edges, strict=True)):
            # a layer's own ONNX form where it has one (GCN aggregates at the narrower width there)
            h = getattr(layer, "forward_dst_pos", layer)(h, edge_src, edge_dst, dst_pos)  # (num_dst_i, hidden/out)
            if i < self.num_layers - 1:
                h = dropout(F.relu(h), self.dropout, self.training)
        return h

    def forward_lower(self, x: torch.Tensor, blocks: Sequence[TensorBlock]) -> torch.Tensor:
        """Layers ``0..L-2`` -> the last layer's input (before its dropout); ``x`` for one layer."""
        h = x
        for i, (layer, b) in enumerate(zip(self.layers[:-1], blocks, strict=True)):
            h = F.relu(_apply(layer, h, b.edge_src, b.edge_dst, b.dst_pos(), b.indptr))  # (num_dst_i, hidden)
            if i < self.num_layers - 2:
                h = dropout(h, self.dropout, self.training)
        return h

    def forward_last(self, h: torch.Tensor, block: TensorBlock) -> torch.Tensor:
        """The last layer on its input ``h`` -> logits (num_seeds, out_dim)."""
        if self.num_layers > 1:
            h = dropout(h, self.dropout, self.training)
        return _apply(self.layers[-1], h, block.edge_src, block.edge_dst, block.dst_pos(), block.indptr)


def _apply(layer: Any, h: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor, dst_pos: torch.Tensor,
           indptr: torch.Tensor | None) -> torch.Tensor:
    """``layer(h, edge_src, edge_dst, dst_pos)``, with the block's CSR (``indptr=``) for a layer that takes it
    (``takes_csr``: it aggregates in C on the CPU, :mod:`trainer.native_ops`)."""
    if indptr is not None and getattr(layer, "takes_csr", False):
        return layer(h, edge_src, edge_dst, dst_pos, indptr=indptr)
    return layer(h, edge_src, edge_dst, dst_pos)
