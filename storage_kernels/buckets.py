"""Scratch buckets of an external distribution pass: append each bucket's slice of a grouped chunk to its own
files, then load a bucket back whole.

The pattern of every out-of-core rewrite here (reordering rows and edges, building a CSR larger than memory):
stream the input forwards, group each chunk by bucket in C (:func:`storage_kernels.kernels.bucket_rows`), append
every bucket's slice to ``<scratch>/<part>_<bucket>.bin`` (sequential appends), then process the buckets one
at a time, each small enough to hold in memory. Files are raw arrays with no header: the reader names the dtype.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["append_array", "load_bucket", "scratch_id_dtype", "spill_buckets"]


def scratch_id_dtype(num_nodes: int) -> type:
    """The id type of scratch buckets over ``num_nodes`` nodes: int32 when ids fit (half the scratch bytes)."""
    return np.int32 if num_nodes < 2**31 else np.int64


def append_array(path: Path, arr: np.ndarray) -> None:
    """Append ``arr``'s bytes (C order) to ``path``."""
    with open(path, "ab") as f:
        f.write(memoryview(np.ascontiguousarray(arr)).cast("B"))


def spill_buckets(scratch: Path, ptr: np.ndarray, **parts: np.ndarray) -> None:
    """Append bucket ``b``'s slice ``ptr[b]:ptr[b + 1]`` of each part to ``scratch/<part>_<b>.bin``, for every
    non-empty bucket (``ptr`` from :func:`~storage_kernels.kernels.bucket_rows`)."""
    for b in np.flatnonzero(np.diff(ptr)):
        for name, arr in parts.items():
            append_array(scratch / f"{name}_{b}.bin", arr[ptr[b]:ptr[b + 1]])


def load_bucket(scratch: Path, part: str, bucket: int, dtype: np.dtype | type, *, remove: bool = True
                ) -> np.ndarray:
    """Bucket ``bucket``'s ``part`` as a 1-D array of ``dtype`` (empty when nothing was spilled to it); the file
    is removed once read unless ``remove`` is false."""
    path = scratch / f"{part}_{bucket}.bin"
    if not path.exists():
        return np.empty(0, dtype=dtype)
    arr = np.fromfile(path, dtype=dtype)
    if remove:
        path.unlink()
    return arr
