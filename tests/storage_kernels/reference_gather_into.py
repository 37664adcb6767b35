"""NumPy twins of the gathers into given output rows (``io/gather_into.c``): one row at a time."""

from __future__ import annotations

import numpy as np


def gather_rows_into_ref(src: np.ndarray, idx, out: np.ndarray, pos) -> np.ndarray:
    """``out[pos[k]] = src[idx[k]]`` for every ``k`` in turn; returns ``out``."""
    for i, p in zip(np.asarray(idx, dtype=np.int64), np.asarray(pos, dtype=np.int64), strict=True):
        out[p] = src[i]
    return out


def gather_rows_at_into_ref(src: np.ndarray, offsets, out: np.ndarray, pos) -> np.ndarray:
    """``out[pos[k]]`` = the ``out.shape[1] * itemsize`` bytes at byte ``offsets[k]`` of the flat uint8 ``src``."""
    raw = out.view(np.uint8).reshape(out.shape[0], out.shape[1] * out.dtype.itemsize)
    for off, p in zip(np.asarray(offsets, dtype=np.int64), np.asarray(pos, dtype=np.int64), strict=True):
        raw[p] = src[off : off + raw.shape[1]]
    return out
