"""What a partition costs: the edge cut, the balance, the edge buckets between parts, streamed over the CSR.

The partition stage records these for every partitioner, and ``mariusgnn`` for its physical partitions.
"""

from __future__ import annotations

import numpy as np

from pipelines.core.graphio import GraphArrays
from pipelines.core.progress import Progress
from storage_kernels.arrays import release_pages, row_ranges

__all__ = ["DENSE_BUCKETS", "cut_statistics", "part_sizes"]

_EDGE_CHUNK = 1 << 20  # CSR entries per chunk of the statistics pass
#: Up to this many parts the bucket counts are (p, p); above, flattened (p*p,).
DENSE_BUCKETS = 4096


def part_sizes(parts: np.ndarray, num_parts: int, chunk: int = 1 << 22) -> np.ndarray:
    """``np.bincount(parts, minlength=num_parts)`` (int64) in chunks: bincount widens its input to int64, which
    for int32 labels of every node would be a second, twice larger copy."""
    sizes = np.zeros(num_parts, dtype=np.int64)
    for start in range(0, len(parts), chunk):
        sizes += np.bincount(parts[start : start + chunk], minlength=num_parts)
    return sizes


def cut_statistics(graph: GraphArrays, parts: np.ndarray, num_parts: int, progress: Progress | None = None,
                   ) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Cut statistics, edge-bucket counts (p, p) and per-node cross-part neighbour counts, over edge chunks."""
    n, e = graph.num_nodes, graph.num_edges
    p = num_parts
    cross = np.zeros(n, dtype=np.int32)
    buckets = np.zeros(p * p, dtype=np.int64)
    cut = 0
    bounds = row_ranges(graph.indptr, _EDGE_CHUNK)
    for s, t in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        ptr = np.asarray(graph.indptr[s : t + 1], dtype=np.int64)
        deg = np.diff(ptr)
        row_part = np.repeat(parts[s:t], deg)
        col_part = parts[np.asarray(graph.indices[ptr[0] : ptr[-1]])]
        differs = row_part != col_part
        local_rows = np.repeat(np.arange(t - s), deg)
        cross[s:t] = np.bincount(local_rows[differs], minlength=t - s)
        cut += int(np.count_nonzero(differs))
        keys = col_part.astype(np.int64) * p + row_part
        if p * p <= 1 << 22:
            buckets += np.bincount(keys, minlength=p * p)
        else:
            uk, uc = np.unique(keys, return_counts=True)
            buckets[uk] += uc
        release_pages(graph.indices)  # streamed once: do not let the whole file pile up in the RSS
        if progress:
            progress("partition: measuring cut", int(ptr[-1]), e)
    sizes = part_sizes(parts, p)
    train_parts = np.bincount(parts[np.asarray(graph.train_idx)], minlength=p)
    n_train = len(graph.train_idx)
    stats = {
        "edge_cut": cut / e if e else 0.0,
        "balance": float(sizes.max() / (n / p)) if n and p else 1.0,
        "train_balance": float(train_parts.max() / (n_train / p)) if n_train and p else 1.0,
        "min_part_size": int(sizes.min()) if p else 0,
        "max_part_size": int(sizes.max()) if p else 0,
        "max_train_per_part": int(train_parts.max()) if p else 0,
    }
    return stats, (buckets.reshape(p, p) if p <= DENSE_BUCKETS else buckets), cross
