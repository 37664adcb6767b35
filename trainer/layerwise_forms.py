"""Each supported layer written as a push computation, for streamed layer-wise inference (``trainer.layerwise``).

A layer's output for destination ``i`` is ``finish(sum_j w_ij * message(x_j), own(x_i))`` over its in-edges
``j -> i``: ``message`` and ``own`` see one input row at a time, so a source row's message can be computed as
the input table streams past and added into the destinations' accumulators; only the accumulators of the
destinations in hand stay in memory. The edge weights ``w_ij`` come from small per-node values (degrees, GAT's
attention scores), never from wide rows.

- GraphSAGE (:class:`trainer.models.SAGEConv`): ``lin_self(x_i) + lin_neigh(mean_j x_j)``. The mean is linear,
  so unless ``lin_neigh`` widens the rows the messages are projected first (``mean_j lin_neigh(x_j)``: the
  accumulators are ``out_dim`` wide), and the own term then joins the accumulator scaled by the degree
  (``(sum_j m_j + d_i * lin_self(x_i)) / d_i`` with ``d_i = max(deg_i, 1)``): one ``out_dim`` row per
  destination instead of two.
- GCN (:class:`trainer.gcn.GCNConv`): messages ``lin(x_j) / sqrt(deg_out(j))`` with a self loop, scaled by
  ``1 / sqrt(deg_in(i) + 1)``, plus the bias.
- GAT (:class:`trainer.gat.GATConv`): messages ``z_j = lin(x_j)`` per head, weighted by the edge softmax of
  ``LeakyReLU(a_src . z_j + a_dst . z_i)`` over ``i``'s in-edges and its self loop. The two scores per head are
  the per-node values; they are computed in a first pass over the input (:meth:`GATForm.scores`).

Each form reproduces its module's evaluation forward (dropout off) up to float rounding; the tests compare them.

A layer whose input is the previous layer's table can have that table written pre-projected (:func:`fold`): the
previous layer applies this layer's linear maps to each row it outputs (after its ReLU) and writes those instead
of the hidden row, and this layer reads them as they are (:class:`FoldedSAGE`, :class:`FoldedGCN`). A SAGE
layer of ``hidden -> classes`` then reads ``2 x classes`` columns a node (its neighbour and own projections) and
GCN ``classes``, not ``hidden``: at 100M nodes, a 128-wide hidden layer over 16 classes writes and reads a 12.8 GB
table, not 51 GB. Same operations on the same rows, so the same outputs up to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from trainer.gat import NEGATIVE_SLOPE, GATConv
from trainer.gcn import GCNConv
from trainer.message_passing import edge_softmax

__all__ = ["Fold", "FoldedGCN", "FoldedSAGE", "GATForm", "GCNForm", "LayerForm", "SAGEForm", "fold", "layer_form"]


class LayerForm(Protocol):
    """One layer as a push computation (see the module docstring)."""

    in_dim: int
    out_dim: int
    acc_dim: int  # width of a destination's accumulator
    own_dim: int  # width of the destination's own term (0: none)
    own_in_acc: bool  # the own term is added into the accumulator (then own_dim == acc_dim) instead of kept
    self_loops: bool  # whether each destination is also one of its own sources
    heads: int  # columns of the edge weights (0: no weights, a plain sum)

    def messages(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Source rows ``x`` (R, in_dim) with node ids ``ids`` (R,) -> messages (R, acc_dim)."""

    def own(self, x: torch.Tensor, in_degree: torch.Tensor) -> torch.Tensor:
        """Destination rows ``x`` (D, in_dim) with full in-degrees (D,) -> their own term (D, own_dim)."""

    def finish(self, acc: torch.Tensor, own: torch.Tensor, in_degree: torch.Tensor) -> torch.Tensor:
        """Accumulators (D, acc_dim), own terms (D, own_dim) and full in-degrees (D,) -> outputs (D, out_dim)."""


class SAGEForm:
    """:class:`trainer.models.SAGEConv`: a mean over the in-edges, projected first unless that widens it."""

    self_loops, heads = False, 0

    def __init__(self, conv: nn.Module) -> None:
        self.conv = conv
        self.in_dim, self.out_dim = conv.lin_self.in_features, conv.lin_self.out_features
        self.project = self.out_dim <= self.in_dim
        self.acc_dim = self.out_dim if self.project else self.in_dim
        self.own_dim, self.own_in_acc = self.out_dim, self.project

    def messages(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.conv.lin_neigh(x) if self.project else x

    def own(self, x: torch.Tensor, in_degree: torch.Tensor) -> torch.Tensor:
        own = self.conv.lin_self(x)
        return own * _divisor(in_degree, own) if self.own_in_acc else own

    def finish(self, acc: torch.Tensor, own: torch.Tensor, in_degree: torch.Tensor) -> torch.Tensor:
        mean = acc / _divisor(in_degree, acc)  # (D, acc_dim); 0 without in-edges (the own term alone if folded)
        return mean if self.own_in_acc else own + self.conv.lin_neigh(mean)


def _divisor(in_degree: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``max(in_degree, 1)`` as a (D, 1) column of ``like``'s dtype: the mean's divisor."""
    return in_degree.to(like.dtype).clamp(min=1.0).unsqueeze(1)


class GCNForm:
    """:class:`trainer.gcn.GCNConv` with every source normalised by its full-graph out-degree (with its loop)."""

    self_loops, heads, own_dim, own_in_acc = True, 0, 0, False

    def __init__(self, conv: GCNConv, out_degree: torch.Tensor) -> None:
        self.conv = conv
        self.in_dim, self.out_dim = conv.lin.in_features, conv.lin.out_features
        self.acc_dim = self.out_dim
        self.out_degree = out_degree  # (N,) full-graph out-degree + 1 of every node

    def messages(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.normalised(self.conv.lin(x), ids)

    def normalised(self, z: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Projected source rows ``z`` (R, out_dim) scaled by ``1 / sqrt(deg_out)`` of their nodes ``ids``."""
        norm = self.out_degree.index_select(0, ids.to(self.out_degree.device)).to(z.device, z.dtype)  # (R,)
        return z * norm.clamp(min=1.0).rsqrt().unsqueeze(1)

    def own(self, x: torch.Tensor, in_degree: torch.Tensor) -> torch.Tensor:
        return x[:, :0]

    def finish(self, acc: torch.Tensor, own: torch.Tensor, in_degree: torch.Tensor) -> torch.Tensor:
        norm = (in_degree.to(acc.dtype) + 1.0).clamp(min=1.0).rsqrt().unsqueeze(1)  # (D, 1): in-degree + loop
        return acc * norm + self.conv.bias


class GATForm:
    """:class:`trainer.gat.GATConv`: messages ``z_j`` weighted per head by the edge softmax of the scores."""

    self_loops, own_dim, own_in_acc = True, 0, False

    def __init__(self, conv: GATConv) -> None:
        self.conv = conv
        self.heads, self.head_dim = conv.heads, conv.head_dim
        self.in_dim = conv.lin.in_features
        self.acc_dim = self.heads * self.head_dim
        self.out_dim = self.acc_dim if conv.concat else self.head_dim

    def scores(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows ``x`` (R, in_dim) -> their scores as a source and as a destination, (R, heads) each."""
        z = self.conv.lin(x).reshape(-1, self.heads, self.head_dim)  # (R, H, C)
        return (z * self.conv.att_src).sum(dim=-1), (z * self.conv.att_dst).sum(dim=-1)

    def weights(self, score_src: torch.Tensor, score_dst: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Edge weights (E, heads): the softmax over each destination's in-edges (its loop among them) of
        ``LeakyReLU(score_src[e] + score_dst[dst[e]])``, ``score_src`` (E, heads) per edge, ``score_dst``
        (D, heads) per destination."""
        scores = F.leaky_relu(score_src + score_dst.index_select(0, dst), NEGATIVE_SLOPE)  # (E, H)
        return edge_softmax(scores, dst, score_dst)

    def messages(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.conv.lin(x)

    def own(self, x: torch.Tensor, in_degree: torch.Tensor) -> torch.Tensor:
        return x[:, :0]

    def finish(self, acc: torch.Tensor, own: torch.Tensor, in_degree: torch.Tensor) -> torch.Tensor:
        out = acc if self.conv.concat else acc.reshape(-1, self.heads, self.head_dim).mean(dim=1)
        return out + self.conv.bias


class FoldedSAGE:
    """A projecting :class:`SAGEForm` reading rows ``[lin_neigh(x) | lin_self(x)]`` (``2 * out_dim`` wide)."""

    self_loops, heads, own_in_acc = False, 0, True

    def __init__(self, form: SAGEForm) -> None:
        self.form = form
        self.out_dim = self.acc_dim = self.own_dim = form.out_dim
        self.in_dim = 2 * form.out_dim

    def messages(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return x[:, : self.acc_dim]

    def own(self, x: torch.Tensor, in_degree: torch.Tensor) -> torch.Tensor:
        own = x[:, self.acc_dim :]
        return own * _divisor(in_degree, own)

    def finish(self, acc: torch.Tensor, own: torch.Tensor, in_degree: torch.Tensor) -> torch.Tensor:
        return self.form.finish(acc, own, in_degree)


class FoldedGCN:
    """A :class:`GCNForm` reading rows ``lin(x)`` (``out_dim`` wide)."""

    self_loops, heads, own_dim, own_in_acc = True, 0, 0, False

    def __init__(self, form: GCNForm) -> None:
        self.form = form
        self.in_dim = self.out_dim = self.acc_dim = form.out_dim

    def messages(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.form.normalised(x, ids)

    def own(self, x: torch.Tensor, in_degree: torch.Tensor) -> torch.Tensor:
        return x[:, :0]

    def finish(self, acc: torch.Tensor, own: torch.Tensor, in_degree: torch.Tensor) -> torch.Tensor:
        return self.form.finish(acc, own, in_degree)


@dataclass(frozen=True)
class Fold:
    """How the layer before writes a layer's input pre-projected: ``project`` maps its output rows (after their
    ReLU) to the ``width`` columns ``form`` (the layer, reading them) takes as input rows."""

    project: Callable[[torch.Tensor], torch.Tensor]
    form: LayerForm
    width: int


def fold(form: LayerForm) -> Fold | None:
    """The :class:`Fold` of ``form`` when its pre-projected rows are narrower than its input rows (a projecting
    SAGE layer, ``2 * out_dim < in_dim``; GCN, ``out_dim < in_dim``); None otherwise (GAT, widening layers)."""
    if isinstance(form, SAGEForm) and form.project and 2 * form.out_dim < form.in_dim:
        conv = form.conv
        return Fold(lambda h: torch.cat([conv.lin_neigh(h), conv.lin_self(h)], dim=1), FoldedSAGE(form),
                    2 * form.out_dim)
    if isinstance(form, GCNForm) and form.out_dim < form.in_dim:
        return Fold(form.conv.lin, FoldedGCN(form), form.out_dim)
    return None


def layer_form(layer: nn.Module, out_degree: torch.Tensor | None = None) -> LayerForm:
    """The push form of ``layer`` (a SAGE, GCN or GAT convolution); GCN needs the full graph's ``out_degree``
    (N,) with self loops. ``ValueError`` for any other layer."""
    from trainer.models import SAGEConv  # trainer.models imports the GCN and GAT modules this one does

    if isinstance(layer, SAGEConv):
        return SAGEForm(layer)
    if isinstance(layer, GCNConv):
        if out_degree is None:
            raise ValueError("'out_degree' expected the full graph's out-degrees for a GCN layer (got None)")
        return GCNForm(layer, out_degree)
    if isinstance(layer, GATConv):
        return GATForm(layer)
    raise ValueError(f"'train.eval_mode' layerwise expected layers of graphsage, gcn or gat "
                     f"(got {type(layer).__name__})")
