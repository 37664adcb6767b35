"""GCN (Kipf & Welling) over layered sampled blocks, registered as ``gcn`` in :data:`trainer.models.MODELS`.

Each layer is ``h' = D_dst^-1/2 (A + I) D_src^-1/2 h W + b`` on the layer's block: ``A`` (num_dst x num_src) is
the sampled bipartite adjacency, ``I`` adds one self loop per destination (destination ``k`` is row
``dst_pos[k]`` of the layer input), and the degrees are those of the sampled block with its self loops --
a destination's in-degree + 1, a source's out-degree (+ 1 if it is also a destination). On a full
neighbourhood (every edge sampled, sources = destinations) this is the paper's symmetric normalisation.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainer.message_passing import add_self_loops, check_layer_dims, count_into, scatter_sum
from trainer.split import LayerwiseSplit  # forward, forward_dst_pos; forward_lower / forward_last (outre)

__all__ = ["GCN", "GCNConv"]


class GCNConv(nn.Module):
    """One symmetric-normalised graph convolution over a block (see the module docstring)."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))

    def forward(self, h: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor, dst_pos: torch.Tensor,
                src_degree: torch.Tensor | None = None) -> torch.Tensor:
        """``h`` (num_src, in_dim) -> (num_dst, out_dim); ``num_dst`` is ``dst_pos.shape[0]``. ``src_degree``
        (num_src,) replaces the sources' out-degrees counted in the block (layer-wise inference over node
        chunks passes their full-graph degrees, so a chunk's block normalises as the whole graph does)."""
        src, dst = add_self_loops(edge_src, edge_dst, dst_pos)  # (E + D,)
        hw = self.lin(h)  # (S, out): project first, the sum then moves out_dim-wide rows
        hw_dst = hw.index_select(0, dst_pos)  # (D, out), shapes the destination buffers
        out_degree = count_into(hw, src) if src_degree is None else src_degree.to(hw.dtype).unsqueeze(1)
        norm_src = out_degree.clamp(min=1.0).rsqrt()  # (S, 1), out-degree with loops
        norm_dst = count_into(hw_dst, dst).clamp(min=1.0).rsqrt()  # (D, 1), in-degree + 1
        msg = hw.index_select(0, src) * norm_src.index_select(0, src)  # (E + D, out)
        return scatter_sum(hw_dst, dst, msg) * norm_dst + self.bias  # (D, out)


class GCN(LayerwiseSplit, nn.Module):
    """``num_layers`` GCN layers with ReLU + dropout between them (the :class:`trainer.models.GraphSAGE` API).

    >>> model = GCN(in_dim=8, hidden_dim=16, out_dim=3, num_layers=2)
    >>> logits = model(x, blocks)   # x (num_nodes, 8), blocks: list[TensorBlock] input layer first
    """

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int, num_layers: int, dropout: float = 0.5) -> None:
        super().__init__()
        check_layer_dims("GCN", in_dim=in_dim, hidden_dim=hidden_dim, out_dim=out_dim, num_layers=num_layers)
        self.in_dim, self.hidden_dim, self.out_dim = int(in_dim), int(hidden_dim), int(out_dim)
        self.num_layers, self.dropout = int(num_layers), float(dropout)
        dims = [self.in_dim] + [self.hidden_dim] * (self.num_layers - 1) + [self.out_dim]
        self.layers = nn.ModuleList(GCNConv(dims[i], dims[i + 1]) for i in range(self.num_layers))

    @property
    def model_args(self) -> dict[str, Any]:
        """Constructor arguments (checkpoint ``model_args``)."""
        return {"in_dim": self.in_dim, "hidden_dim": self.hidden_dim, "out_dim": self.out_dim,
                "num_layers": self.num_layers, "dropout": self.dropout}
