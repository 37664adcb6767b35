"""Edge-list operations shared by the block models (GCN, GAT): self loops, degrees, sums and the edge softmax.

Every reduction is ``scatter_reduce(..., include_self=True)`` into a tensor shaped from an input tensor, never
``index_add_`` and never a Python int read from a tensor: the ONNX exporter turns these into
ScatterElements with a reduction ("add"/"max", opset >= 16/18), correct for repeated destination indices, and
the graph stays dynamic in the number of nodes and edges (``trainer.models`` explains the block layout).
"""

from __future__ import annotations

import torch

__all__ = ["add_self_loops", "check_layer_dims", "count_into", "edge_softmax", "project_first", "scatter_sum"]


def check_layer_dims(owner: str, **dims: int) -> None:
    """``ValueError`` naming ``owner.<dim>`` for any dimension below 1."""
    for name, value in dims.items():
        if int(value) < 1:
            raise ValueError(f"'{owner}.{name}' expected >= 1 (got {value})")


def project_first(in_dim: int, out_dim: int) -> bool:
    """Whether a layer whose aggregation is linear (a sum or a mean, then ``W``: ``in_dim -> out_dim``) should
    project its source rows before it aggregates them: ``mean_j(h_j) W = mean_j(h_j W)``, and the per-edge
    messages are then ``out_dim`` wide instead of ``in_dim``. True when that is narrower (wide input features:
    the first layer's messages would be edges x in_dim)."""
    return int(out_dim) < int(in_dim)


def add_self_loops(edge_src: torch.Tensor, edge_dst: torch.Tensor, dst_pos: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The block's edges plus one edge per destination from its own row: destination ``k`` sits at row
    ``dst_pos[k]`` of the layer input, so the loop is ``dst_pos[k] -> k``. Returns ``(src, dst)`` (E + D,)."""
    # arange over a traced size stays dynamic in the ONNX graph (Range(0, Shape(dst_pos)[0], 1))
    dst_index = torch.arange(dst_pos.shape[0], dtype=edge_dst.dtype, device=edge_dst.device)  # (D,)
    return torch.cat([edge_src, dst_pos]), torch.cat([edge_dst, dst_index])


def scatter_sum(like: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``out[i] = sum_{k: index[k] = i} values[k]``, ``out`` shaped ``like`` (rows) x ``values`` (columns).

    ``like`` (R, C) gives the output shape as a tensor; ``values`` (E, C); ``index`` (E,).
    """
    expanded = index.unsqueeze(1).expand_as(values)  # (E, C)
    # values' dtype: under autocast (train.autocast) a message may be bfloat16 while ``like`` is float32
    return torch.zeros_like(like, dtype=values.dtype).scatter_reduce(0, expanded, values, reduce="sum",
                                                                     include_self=True)


def count_into(like: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """How often each row of ``like`` (R, ...) appears in ``index`` (E,), as float ``(R, 1)``."""
    ones = torch.ones_like(index, dtype=like.dtype).unsqueeze(1)  # (E, 1)
    return scatter_sum(like[:, :1], index, ones)


def edge_softmax(scores: torch.Tensor, index: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Softmax of ``scores`` (E, H) over the edges sharing a destination ``index`` (E,), per column.

    ``like`` (D, H) shapes the per-destination buffers. The shift is the destinations' maximum score
    (``scatter_reduce(amax)`` from -inf, detached: it cancels in the ratio); a destination without edges
    gets nothing (its buffers are never read). Returns weights (E, H) that sum to 1 per destination.
    """
    expanded = index.unsqueeze(1).expand_as(scores)  # (E, H)
    floor = torch.full_like(like, float("-inf"), dtype=scores.dtype)  # (D, H)
    peak = floor.scatter_reduce(0, expanded, scores.detach(), reduce="amax", include_self=True)  # (D, H)
    weight = torch.exp(scores - peak.index_select(0, index))  # (E, H), each <= 1
    total = scatter_sum(like, index, weight)  # (D, H), >= 1 where a destination has edges
    return weight / total.index_select(0, index)
