"""A policy's cache block file (``<name>.npy``: the cached nodes' feature rows in node-list order), written in
blocks of bounded memory rather than gathered whole: a CPU cache is the budget's largest share, and a pack
that held it whole would hold it on top of everything else."""

from __future__ import annotations

from typing import Any

import numpy as np

from storage_kernels import kernels

__all__ = ["write_cache_rows"]


def write_cache_rows(builder: Any, name: str, features: np.ndarray, nodes: np.ndarray, memory_bytes: int) -> int:
    """Write ``name`` (``.npy``): ``features[nodes]`` as ``graph.features`` holds rows (float32, or a float16
    file's 4-byte words), gathered and appended ``memory_bytes`` at a time; returns the bytes of rows written."""
    dim = int(features.shape[1])
    out = builder.array_writer(name, np.float32, (dim,), capacity=len(nodes))
    step = max(1, int(memory_bytes) // max(dim * 4, 1))
    for lo in range(0, len(nodes), step):
        ids = np.ascontiguousarray(nodes[lo : lo + step], dtype=np.int64)
        block = np.empty((len(ids), dim), dtype=np.float32)
        kernels.gather_rows(features, ids, block)
        out.append(block)
    out.close()
    return len(nodes) * dim * 4
