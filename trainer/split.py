"""The split forward OUTRE's historical cache needs (``trainer.history``), for models whose layers are called
as ``layers[i](h, edge_src, edge_dst, dst_pos)`` and joined by ReLU + dropout (GCN, GAT).

``forward_lower(x, blocks[:-1])`` runs layers ``0..L-2`` and returns the last layer's input h^{L-1} before its
dropout; ``forward_last(h, blocks[-1])`` applies that dropout and the last layer. Together they are the
model's ``forward``: the same operations in the same order, random draws included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

if TYPE_CHECKING:  # trainer.models imports the models that use this mixin
    from trainer.models import TensorBlock

__all__ = ["LayerwiseSplit"]


class LayerwiseSplit:
    """Mixin: :meth:`forward_lower` and :meth:`forward_last` from ``layers``, ``num_layers`` and ``dropout``."""

    layers: Any
    num_layers: int
    dropout: float
    training: bool

    def forward_lower(self, x: torch.Tensor, blocks: Sequence[TensorBlock]) -> torch.Tensor:
        """Layers ``0..L-2`` -> the last layer's input (before its dropout); ``x`` for one layer."""
        h = x
        for i, (layer, b) in enumerate(zip(self.layers[:-1], blocks, strict=True)):
            h = F.relu(layer(h, b.edge_src, b.edge_dst, b.dst_pos()))  # (num_dst_i, hidden)
            if i < self.num_layers - 2:
                h = F.dropout(h, p=self.dropout, training=self.training)
        return h

    def forward_last(self, h: torch.Tensor, block: TensorBlock) -> torch.Tensor:
        """The last layer on its input ``h`` -> logits (num_seeds, out_dim)."""
        if self.num_layers > 1:
            h = F.dropout(h, p=self.dropout, training=self.training)
        return self.layers[-1](h, block.edge_src, block.edge_dst, block.dst_pos())
