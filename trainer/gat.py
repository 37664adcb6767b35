"""Multi-head GAT (Velickovic et al.) over layered sampled blocks, registered as ``gat`` in
:data:`trainer.models.MODELS`.

Per layer and head ``k``: ``z = h W_k``; edge ``j -> i`` (the block's edges plus a self loop per destination)
scores ``e_ij = LeakyReLU_0.2(a_src_k . z_j + a_dst_k . z_i)``; ``alpha_ij`` is the softmax of ``e_ij`` over
``i``'s in-edges (:func:`trainer.message_passing.edge_softmax`: ``scatter_reduce`` amax then sum, correct in
ONNX for repeated destination indices); ``h'_i = sum_j alpha_ij z_j``. Hidden layers concatenate their
``heads`` heads (``hidden_dim / heads`` channels each, so a hidden layer is ``hidden_dim`` wide), the last
layer averages ``heads`` heads of ``out_dim`` channels. A bias follows; ReLU + dropout between layers and
dropout on the attention weights in training, as in the paper.

The head count is ``train.heads``, a setting only this model reads (:attr:`GAT.reads`): it enters the train
artifact's version, the checkpoint and ``model.json`` only when ``train.model=gat``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from trainer.message_passing import add_self_loops, check_layer_dims, edge_softmax, scatter_sum
from trainer.native_ops import dropout, gat_attend, native_applies
from trainer.split_forward import LayerwiseSplit  # forward, forward_dst_pos; forward_lower / forward_last (outre)

__all__ = ["GAT", "GATConv"]

NEGATIVE_SLOPE = 0.2  # LeakyReLU of the attention scores (the paper's)


class GATConv(nn.Module):
    """One multi-head attention layer over a block: ``heads`` heads of ``head_dim`` channels, concatenated
    (``concat=True``, output ``heads * head_dim``) or averaged (output ``head_dim``)."""

    takes_csr = True  # trainer.split_forward passes the block's indptr

    def __init__(self, in_dim: int, head_dim: int, heads: int, concat: bool, attn_dropout: float = 0.0) -> None:
        super().__init__()
        self.heads, self.head_dim, self.concat, self.attn_dropout = heads, head_dim, concat, attn_dropout
        self.lin = nn.Linear(in_dim, heads * head_dim, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, head_dim))
        self.att_dst = nn.Parameter(torch.empty(1, heads, head_dim))
        self.bias = nn.Parameter(torch.zeros(heads * head_dim if concat else head_dim))
        for w in (self.lin.weight, self.att_src, self.att_dst):
            nn.init.xavier_uniform_(w)

    def forward(self, h: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor, dst_pos: torch.Tensor,
                indptr: torch.Tensor | None = None) -> torch.Tensor:
        """``h`` (num_src, in_dim) -> (num_dst, heads * head_dim or head_dim); ``num_dst = dst_pos.shape[0]``.
        ``indptr`` (the block's edges as a CSR over the destinations) lets a float32 CPU layer attend in C
        (:func:`trainer.native_ops.gat_attend`: no edge-sized tensors, the same dropout masks)."""
        heads, head_dim = self.heads, self.head_dim
        z = self.lin(h).reshape(-1, heads, head_dim)  # (S, H, C)
        score_src = (z * self.att_src).sum(dim=-1)  # (S, H)
        z_dst = z.index_select(0, dst_pos)  # (D, H, C)
        score_dst = (z_dst * self.att_dst).sum(dim=-1)  # (D, H)
        p = self.attn_dropout if self.training else 0.0
        if indptr is not None and p < 1.0 and native_applies(z, score_src, score_dst):
            out = gat_attend(z, score_src, score_dst, indptr, edge_src, dst_pos, p, NEGATIVE_SLOPE)  # (D, H, C)
        else:
            src, dst = add_self_loops(edge_src, edge_dst, dst_pos)  # (E + D,)
            scores = F.leaky_relu(score_src.index_select(0, src) + score_dst.index_select(0, dst),
                                  NEGATIVE_SLOPE)  # (E + D, H)
            alpha = edge_softmax(scores, dst, score_dst)  # (E + D, H)
            alpha = dropout(alpha, self.attn_dropout, self.training)
            msg = (z.index_select(0, src) * alpha.unsqueeze(-1)).reshape(-1, heads * head_dim)  # (E + D, H*C)
            out = scatter_sum(z_dst.reshape(-1, heads * head_dim), dst, msg).reshape(-1, heads, head_dim)
        out = out.reshape(-1, heads * head_dim) if self.concat else out.mean(dim=1)
        return out + self.bias

    @property
    def message_width(self) -> int:
        """Columns of the per-edge messages: GAT projects before it aggregates (``z = h W``), in every form."""
        return self.heads * self.head_dim


class GAT(LayerwiseSplit, nn.Module):
    """``num_layers`` multi-head GAT layers (see the module docstring), the :class:`trainer.models.GraphSAGE`
    API plus ``heads``.

    >>> model = GAT(in_dim=8, hidden_dim=16, out_dim=3, num_layers=2, heads=4)
    >>> logits = model(x, blocks)   # x (num_nodes, 8), blocks: list[TensorBlock] input layer first
    """

    #: ``train`` settings this model takes beyond ``trainer.models.MODEL_ARGS`` (declared ``artifact="selected"``).
    reads: ClassVar[tuple[str, ...]] = ("heads",)

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int, num_layers: int, dropout: float = 0.5,
                 heads: int = 4) -> None:
        super().__init__()
        check_layer_dims("GAT", in_dim=in_dim, hidden_dim=hidden_dim, out_dim=out_dim, num_layers=num_layers,
                         heads=heads)
        if num_layers > 1 and hidden_dim % heads:
            raise ValueError(f"'GAT.hidden_dim' expected a multiple of heads ({heads}): hidden layers concatenate "
                             f"heads of hidden_dim / heads channels (got {hidden_dim})")
        self.in_dim, self.hidden_dim, self.out_dim = int(in_dim), int(hidden_dim), int(out_dim)
        self.num_layers, self.dropout, self.heads = int(num_layers), float(dropout), int(heads)
        widths = [self.in_dim] + [self.hidden_dim] * (self.num_layers - 1)  # each layer's input width
        self.layers = nn.ModuleList(
            GATConv(widths[i], self.hidden_dim // self.heads, self.heads, concat=True, attn_dropout=self.dropout)
            if i < self.num_layers - 1 else
            GATConv(widths[i], self.out_dim, self.heads, concat=False, attn_dropout=self.dropout)
            for i in range(self.num_layers)
        )

    @property
    def model_args(self) -> dict[str, Any]:
        """Constructor arguments (checkpoint ``model_args``, ``model.json``)."""
        return {"in_dim": self.in_dim, "hidden_dim": self.hidden_dim, "out_dim": self.out_dim,
                "num_layers": self.num_layers, "dropout": self.dropout, "heads": self.heads}
