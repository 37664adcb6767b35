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

from trainer.message_passing import add_self_loops, check_layer_dims, count_into, project_first, scatter_sum
from trainer.native_ops import csr_sum, native_applies
from trainer.split_forward import LayerwiseSplit  # forward, forward_dst_pos; forward_lower / forward_last (outre)

__all__ = ["GCN", "GCNConv"]


class GCNConv(nn.Module):
    """One symmetric-normalised graph convolution over a block (see the module docstring).

    It normalises and sums the input rows first and projects the destinations' sums: in a sampled block the
    sources outnumber the destinations (5.7x in ``demo``'s first layer, and E = 9 D), so projecting D summed
    rows costs far less than projecting S source rows, whatever the two widths. Given the block's CSR
    (``indptr``) on the CPU in float32, the sum runs in C (:func:`trainer.native_ops.csr_sum`).
    """

    takes_csr = True  # trainer.split_forward passes the block's indptr

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))

    def forward(self, h: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor, dst_pos: torch.Tensor,
                src_degree: torch.Tensor | None = None, indptr: torch.Tensor | None = None) -> torch.Tensor:
        """``h`` (num_src, in_dim) -> (num_dst, out_dim); ``num_dst`` is ``dst_pos.shape[0]``. ``src_degree``
        (num_src,) replaces the sources' out-degrees counted in the block (layer-wise inference over node
        chunks passes their full-graph degrees, so a chunk's block normalises as the whole graph does).
        ``indptr``: the block's edges as a CSR over the destinations (``edge_dst`` ascending)."""
        src, dst = add_self_loops(edge_src, edge_dst, dst_pos)  # (E + D,)
        out_degree = count_into(h, src) if src_degree is None else src_degree.to(h.dtype).unsqueeze(1)
        # divisions, not products with rsqrt: onnxruntime's DivMulFusion with EliminateIdentity breaks the
        # exported graph ("If_3_output_0 is not a graph input") on Mul(sum, Div(1, Sqrt(degree)))
        h_norm = h / out_degree.clamp(min=1.0).sqrt()  # (S, in), each source over sqrt(out-degree with loops)
        h_dst = h_norm.index_select(0, dst_pos)  # (D, in): the self loops' messages, and the output's shape
        if indptr is not None and native_applies(h_norm):
            total = csr_sum(h_norm, indptr, edge_src) + h_dst  # (D, in): the edges in order, then the loop
        else:
            total = scatter_sum(h_dst, dst, h_norm.index_select(0, src))  # (D, in)
        in_degree = count_into(h_dst, dst).clamp(min=1.0)  # (D, 1), in-degree + 1
        return self.lin(total / in_degree.sqrt()) + self.bias  # (D, out)

    @property
    def message_width(self) -> int:
        """Columns of the per-edge messages in :meth:`forward_dst_pos` (the ONNX form)."""
        return min(self.lin.in_features, self.lin.out_features)

    def forward_dst_pos(self, h: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor,
                        dst_pos: torch.Tensor) -> torch.Tensor:
        """The ONNX form of :meth:`forward`. Where ``out_dim < in_dim``
        (:func:`~trainer.message_passing.project_first`) ``lin`` (no bias: it commutes with the normalised sum)
        projects the source rows first, so the exported graph's messages are edges x :attr:`message_width`
        instead of edges x ``in_dim`` (equal up to float rounding)."""
        if not project_first(self.lin.in_features, self.lin.out_features):
            return self(h, edge_src, edge_dst, dst_pos)
        src, dst = add_self_loops(edge_src, edge_dst, dst_pos)  # (E + D,)
        z = self.lin(h) / count_into(h, src).clamp(min=1.0).sqrt()  # (S, out), over sqrt(out-degree with loops)
        z_dst = z.index_select(0, dst_pos)  # (D, out)
        total = scatter_sum(z_dst, dst, z.index_select(0, src))  # (D, out)
        return total / count_into(z_dst, dst).clamp(min=1.0).sqrt() + self.bias


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
