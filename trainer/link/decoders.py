"""Edge decoders of link prediction: a score per (source, destination) pair of node representations.

``dot``
    ``s(u, v) = <h_u, h_v>``;
``distmult``
    ``s(u, v) = <h_u, r, h_v> = sum_d h_u[d] r[d] h_v[d]`` with a learned diagonal relation ``r`` (one relation:
    the graphs Strata reads are homogeneous), initialised to ones (so it starts as ``dot``).

Both score a positive pair with :meth:`Decoder.forward` and many candidates at once with
:meth:`Decoder.score_candidates` (``(B, D) x (M, D) -> (B, M)``: one chunk's shared negatives, or every node in
filtered evaluation), through the same ``query`` transform, so the two agree exactly. Plain matmuls and
elementwise products: they export to ONNX as they are.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["DECODERS", "Decoder", "DistMult", "Dot", "build_decoder"]


class Decoder(nn.Module):
    """Scores of node-representation pairs; subclasses define :meth:`query` (the source side's transform)."""

    dim: int

    def query(self, h_src: torch.Tensor) -> torch.Tensor:
        """``(B, D)``: the source representation as the decoder compares it with destinations."""
        raise NotImplementedError

    def forward(self, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        """``(B,)`` scores of the pairs ``(h_src[b], h_dst[b])``."""
        return (self.query(h_src) * h_dst).sum(dim=-1)

    def score_candidates(self, h_src: torch.Tensor, h_cand: torch.Tensor) -> torch.Tensor:
        """``(B, M)`` scores of every source against every candidate destination."""
        return self.query(h_src) @ h_cand.transpose(-1, -2)


class Dot(Decoder):
    """``<h_u, h_v>``; no parameters."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = int(dim)

    def query(self, h_src: torch.Tensor) -> torch.Tensor:
        return h_src


class DistMult(Decoder):
    """``<h_u, r, h_v>`` with a learned ``r`` (D,)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = int(dim)
        self.relation = nn.Parameter(torch.ones(self.dim))

    def query(self, h_src: torch.Tensor) -> torch.Tensor:
        return h_src * self.relation


DECODERS: dict[str, type[Decoder]] = {"dot": Dot, "distmult": DistMult}


def build_decoder(name: str, dim: int) -> Decoder:
    """The decoder ``train.decoder`` names, for ``dim``-wide representations."""
    if name not in DECODERS:
        raise ValueError(f"'train.decoder' expected one of {', '.join(DECODERS)} (got {name!r})")
    return DECODERS[name](dim)
