"""Edge chunks, the unit every source streams: ``(src, dst)`` int64 arrays, and their symmetrisation."""

from __future__ import annotations

import numpy as np

__all__ = ["EdgeChunk", "symmetrise_chunk"]

#: One chunk of edges: ``(src, dst)``.
EdgeChunk = tuple[np.ndarray, np.ndarray]


def symmetrise_chunk(src: np.ndarray, dst: np.ndarray) -> EdgeChunk:
    """Both directions of every non-loop edge of a chunk: ``(src|dst, dst|src)`` as int64, loops dropped."""
    keep = src != dst
    if not keep.all():
        src, dst = src[keep], dst[keep]
    return (
        np.concatenate([src, dst]).astype(np.int64, copy=False),
        np.concatenate([dst, src]).astype(np.int64, copy=False),
    )
