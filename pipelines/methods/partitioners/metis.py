"""``metis``: pymetis on the whole graph, in memory (the quality reference of the locality benchmark).

Self loops are dropped and the adjacency symmetrised. Refused (``ValueError``) when the CSR it needs (int64
xadj + adjncy) times ``METIS_OVERHEAD`` (measured peak / CSR bytes, BENCHMARKS.md) exceeds
``partition.memory_mb``. :func:`symmetric_csr` and :func:`run_metis` also seed GREM's bisections.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from pipelines.core.graphio import GraphArrays
from pipelines.methods.partitioners.base import PARTITIONERS, Partitioner, PartitionRun
from pipelines.methods.partitioners.partgraph import PartGraph, capacity, enforce_capacity, rows

if TYPE_CHECKING:
    from pipelines.methods.partitioners.settings import PartitionConfig

try:  # optional: metis needs it; grem falls back to a BFS split of its first chunk
    import pymetis as _pymetis
except ImportError:  # pragma: no cover - depends on the environment
    _pymetis = None

__all__ = ["METIS_OVERHEAD", "available", "metis", "metis_csr_bytes", "metis_peak_bytes", "run_metis",
           "symmetric_csr"]

METIS_OVERHEAD = 16  # peak RSS / int64 CSR bytes of the metis method (BENCHMARKS.md: 200k nodes, 3.7M edges)


def available() -> bool:
    """Whether pymetis can be imported here."""
    return _pymetis is not None


def metis_csr_bytes(graph: GraphArrays | PartGraph) -> int:
    """Bytes of the int64 CSR (xadj + adjncy) handed to pymetis (estimate: the graph as stored)."""
    return 8 * (graph.num_nodes + 1) + 8 * int(graph.indptr[-1])


def metis_peak_bytes(graph: GraphArrays | PartGraph) -> int:
    """Estimated peak memory of the metis method: the CSR times ``METIS_OVERHEAD`` (symmetrising + METIS)."""
    return METIS_OVERHEAD * metis_csr_bytes(graph)


def metis(graph: PartGraph, p: int, cfg: PartitionConfig, run: PartitionRun) -> np.ndarray:
    """pymetis on the whole graph in memory, refused (ValueError) past ``partition.memory_mb``."""
    if _pymetis is None:
        raise ValueError("'partition.method' = 'metis' expected pymetis to be installed (got ImportError)")
    csr, need = metis_csr_bytes(graph), metis_peak_bytes(graph)
    budget = cfg.memory_mb * 1024 * 1024
    if need > budget:
        raise ValueError(
            f"'partition.memory_mb' expected >= {math.ceil(need / 2**20)} MiB for metis: the in-memory CSR of "
            f"{graph.num_nodes} nodes and {int(graph.indptr[-1])} edges is {csr} bytes, about {METIS_OVERHEAD}x that "
            f"at peak (got a budget of {cfg.memory_mb} MiB); use method 'fennel' or 'grem' (streaming)"
        )
    n = graph.num_nodes
    if run.progress:
        run.progress("partition: metis", 0, 1)
    xadj, adjncy, _ = symmetric_csr(graph, np.arange(n, dtype=np.int64))
    labels = run_metis(xadj, adjncy, p, cfg.seed, cfg.imbalance)
    return enforce_capacity(labels, capacity(n, p, cfg.imbalance, [1] * p))


def symmetric_csr(graph: PartGraph, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Induced subgraph on ascending ``nodes`` (local ids), self loops dropped, symmetrised, deduplicated.

    Returns ``(xadj, adjncy, edge weights)``; weights (summed over both directions and duplicates) only
    when the graph has edge weights, else None."""
    ptr, cols, ew = rows(graph, nodes)
    m = len(nodes)
    local = np.searchsorted(nodes, cols)
    local = np.minimum(local, max(m - 1, 0))
    src = np.repeat(np.arange(m, dtype=np.int64), np.diff(ptr))
    keep = (nodes[local] == cols) & (local != src) if m else np.zeros(0, bool)
    a, b = src[keep], local[keep]
    w = None if ew is None else ew[keep]
    del ptr, cols, local, src, keep
    pairs = np.concatenate([a * m + b, b * m + a])
    if w is None:
        keys, weights = np.unique(pairs), None
    else:
        keys, inverse = np.unique(pairs, return_inverse=True)
        weights = np.bincount(inverse, weights=np.concatenate([w, w]), minlength=len(keys)).astype(np.int64)
    src, dst = keys // max(m, 1), keys % max(m, 1)
    xadj = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=m), out=xadj[1:])
    return xadj, dst.astype(np.int64), weights


def run_metis(xadj: np.ndarray, adjncy: np.ndarray, p: int, seed: int, imbalance: float,
               tpwgts: list[float] | None = None, vweights: np.ndarray | None = None,
               eweights: np.ndarray | None = None) -> np.ndarray:
    m = len(xadj) - 1
    if p == 1 or m == 0:
        return np.zeros(m, dtype=np.int32)
    if len(adjncy) == 0:
        return (np.arange(m) * p // m).astype(np.int32)
    opts = _pymetis.Options(seed=int(seed), ufactor=max(1, int(imbalance * 1000)))
    zdt = getattr(_pymetis, "zero_copy_dtype", None)
    dt = np.dtype(zdt() if callable(zdt) else (zdt or np.int64))  # pymetis's idx_t: no copy
    kwargs: dict = {"tpwgts": tpwgts} if tpwgts is not None else {}
    if vweights is not None:
        kwargs["vweights"] = np.asarray(vweights).astype(dt, copy=False)
    if eweights is not None:
        kwargs["eweights"] = np.asarray(eweights).astype(dt, copy=False)
    xadj, adjncy = xadj.astype(dt, copy=False), adjncy.astype(dt, copy=False)
    if hasattr(_pymetis, "CSRAdjacency"):  # pymetis >= 2025: xadj=/adjncy= keywords are deprecated
        _, membership = _pymetis.part_graph(p, _pymetis.CSRAdjacency(xadj, adjncy), options=opts, **kwargs)
    else:  # pragma: no cover - older pymetis
        _, membership = _pymetis.part_graph(p, xadj=xadj, adjncy=adjncy, options=opts, **kwargs)
    return np.asarray(membership, dtype=np.int32)


PARTITIONERS.register("metis", Partitioner(
    "metis", metis, description="pymetis on the whole graph, in memory (refused past partition.memory_mb)."))
