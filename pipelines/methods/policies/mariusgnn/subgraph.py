"""A partition set's in-memory subgraph, built out of core: the CSR a set's training batches are sampled from.

MariusGNN samples a set's batches from the graph restricted to the nodes of its partitions (the rows in the
buffer). Only those rows are ever read by the sampler (seeds are resident, and every neighbour it keeps is),
so the subgraph holds the adjacency of resident rows only, restricted to resident neighbours; other rows are
empty. It is written to two scratch ``.npy`` files in one sequential pass over the memory-mapped CSR (row
ranges of at most ``max_entries`` entries; ranges without a resident row are not read), then mapped for the
sampler's random reads: no O(E) array is ever held in memory (at 1.2B CSR entries a copy is 10 GB), and the
O(N) ``indptr`` lives in the page cache, not in the process.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from storage_kernels.arrays import ArrayWriter, advise_random, open_array, release_pages, row_ranges

__all__ = ["SubGraph", "resident_mask", "resident_subgraph"]

_NODE_CHUNK = 1 << 24  # nodes per step of the streamed passes over (N,) arrays


class SubGraph:
    """The CSR a sampler reads (``indptr``, ``indices``): the graph restricted to a partition set."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray) -> None:
        self.indptr, self.indices = indptr, indices

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1

    def degrees(self) -> np.ndarray:
        return np.diff(self.indptr)


def resident_mask(part: np.ndarray, members: np.ndarray, num_parts: int) -> np.ndarray:
    """bool (N,): whether each node's physical partition (``part``, possibly memory-mapped) is in ``members``."""
    member = np.zeros(max(num_parts, 1), dtype=bool)
    member[np.asarray(members, dtype=np.int64)] = True
    resident = np.empty(len(part), dtype=bool)
    for lo in range(0, len(part), _NODE_CHUNK):
        resident[lo : lo + _NODE_CHUNK] = member[np.asarray(part[lo : lo + _NODE_CHUNK])]
    return resident


def resident_subgraph(indptr: np.ndarray, indices: np.ndarray, resident: np.ndarray, scratch: Path,
                      max_entries: int) -> SubGraph:
    """The CSR of ``resident`` rows restricted to ``resident`` neighbours (other rows empty), written under
    ``scratch`` (``indptr.npy`` int64 (N+1,), ``indices.npy``) in row ranges of at most ``max_entries`` entries
    and returned memory-mapped (advised for random reads). The caller removes ``scratch``."""
    scratch.mkdir(parents=True, exist_ok=True)
    n = len(indptr) - 1
    total = 0
    ptr_out = ArrayWriter(scratch / "indptr.npy", np.int64, capacity=n + 1)
    idx_out = ArrayWriter(scratch / "indices.npy", np.asarray(indices[:0]).dtype)
    try:
        ptr_out.append(np.zeros(1, dtype=np.int64))
        bounds = row_ranges(indptr, max(int(max_entries), 1))
        for s, t in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            rows = resident[s:t]
            if not rows.any():  # no resident row: nothing of this range is read
                ptr_out.append(np.full(t - s, total, dtype=np.int64))
                continue
            ptr = np.asarray(indptr[s : t + 1], dtype=np.int64)
            cols = np.asarray(indices[ptr[0] : ptr[-1]])
            keep = resident[cols]
            keep &= np.repeat(rows, np.diff(ptr))
            kept = np.zeros(len(keep) + 1, dtype=np.int64)
            np.cumsum(keep, out=kept[1:])
            ptr_out.append(total + kept[ptr[1:] - ptr[0]])
            idx_out.append(cols[keep])
            total += int(kept[-1])
            release_pages(indices)  # streamed once: the pages stay in the cache, not in this process
        ptr_out.close(checksum=False)
        idx_out.close(checksum=False)
    except BaseException:
        ptr_out.abort()
        idx_out.abort()
        raise
    if total == 0:  # nothing to map
        return SubGraph(open_array(scratch / "indptr.npy", mmap=False), np.asarray(indices[:0]))
    sub = SubGraph(open_array(scratch / "indptr.npy"), open_array(scratch / "indices.npy"))
    advise_random(sub.indptr, sub.indices)
    return sub
