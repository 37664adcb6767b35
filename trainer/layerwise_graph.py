"""The graph side of layer-wise inference (:mod:`trainer.layerwise`): the full CSR it reads
(:class:`LayerwiseGraph`), an interval's in-edges in source order, the frontiers, the cuts of a layer's targets into
intervals within a budget, and the listing of an interval's distinct sources (what staging writes to its ids file,
:mod:`trainer.layerwise_staging`). Every pass over in-edges goes a bounded piece of them at a time."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from storage_kernels import kernels
from storage_kernels.arrays import release_pages, row_ranges, segment_ranges

__all__ = ["EDGE_BYTES", "EDGE_PIECE", "ID_PIECE", "WIDE_EDGE_BYTES", "LayerwiseGraph", "by_source", "cuts",
           "in_degrees", "in_edges", "interval_cuts", "interval_sources", "packable", "positions_in", "with_neighbours"]

#: Bytes an in-edge of an interval costs at most while it is processed (:func:`by_source`): 16 at the peak
#: (the int64 sort key, then the int32 destination and source position beside it), 8 at rest, plus a margin.
EDGE_BYTES = 20
#: The same when node ids do not fit the packed sort key (2**31 nodes or more): int64 arrays and an argsort.
WIDE_EDGE_BYTES = 48
#: In-edges handled at once while a sort key is built or searched (bounds the int64 temporaries).
EDGE_PIECE = 1 << 20
#: Source ids handed out at once while an interval's sources are listed (bounds their int64 temporaries).
ID_PIECE = 1 << 18


@dataclass
class LayerwiseGraph:
    """What layer-wise evaluation reads: the full CSR, the feature file, labels and the evaluation splits.

    ``feature_dim`` is the model's input width (a float16 file's rows are decoded to it); ``memory_bytes`` the
    memory inference works in (see the module docstring; layer tables beyond their share go to aligned
    ``.npy`` files in ``scratch_dir``, default the system's temporary directory); ``chunk_nodes`` the smallest
    step: every interval holds at least this many destinations and every read window this many sources.
    """

    indptr: np.ndarray  # int64 (N + 1,)
    indices: np.ndarray  # int64 (E,)
    features_path: Path
    feature_dim: int
    labels: np.ndarray  # int64 (N,)
    splits: dict[str, np.ndarray] = field(default_factory=dict)  # split -> node ids
    scratch_dir: Path | None = None
    chunk_nodes: int = 8192
    memory_bytes: int = 256 << 20
    num_threads: int = 0

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1

    @functools.cached_property
    def out_degree(self) -> torch.Tensor:
        """Every node's out-degree in the full graph plus its self loop (N,) (GCN's normalisation), counted once
        per graph in slices of ``indices``."""
        step = 1 << 24
        count = np.ones(self.num_nodes, dtype=np.int64)
        for lo in range(0, len(self.indices), step):  # counted in place in C: no N-entry bincount per slice
            kernels.csr_count(np.asarray(self.indices[lo : lo + step]), count)
            release_pages(self.indices)  # streamed once
        return torch.from_numpy(count)


def in_edges(graph: LayerwiseGraph, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The in-edges of ``rows`` (node ids): their sources (node ids) and destinations (positions in ``rows``),
    in CSR order."""
    starts = np.asarray(graph.indptr[rows], dtype=np.int64)
    counts = np.asarray(graph.indptr[rows + 1], dtype=np.int64) - starts  # (len(rows),)
    offsets = segment_ranges(counts)  # edge k of row r sits at starts[r] + k in `indices`
    offsets += np.repeat(starts, counts)
    src = np.asarray(graph.indices[offsets], dtype=np.int64)  # sorted offsets: forward reads of a memmap
    return src, np.repeat(np.arange(len(rows), dtype=np.int64), counts)


def packable(graph: LayerwiseGraph, rows: int) -> bool:
    """Whether (source id, destination position) pairs fit one int64 sort key and int32 positions: 31 bits
    each."""
    return graph.num_nodes < 1 << 31 and rows < 1 << 31


def by_source(graph: LayerwiseGraph, rows: np.ndarray, self_loops: bool, sources: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """The in-edges of ``rows`` (plus a self loop each when ``self_loops``) in source order: the sources'
    positions in ``sources`` (sorted node ids holding every source) and the destinations' positions in ``rows``.
    The pairs are packed into one int64 key, built a piece of rows at a time and sorted in place, and come back
    as int32 positions (:data:`EDGE_BYTES`); ordered by an argsort into int64 ones when they do not fit
    (:data:`WIDE_EDGE_BYTES`)."""
    loops = np.arange(len(rows) if self_loops else 0, dtype=np.int64)  # destination positions of the loops
    loop_src = rows if self_loops else rows[:0]
    if not packable(graph, len(rows)):
        src, dst = in_edges(graph, rows)
        src = np.concatenate([src, loop_src])
        dst = np.concatenate([dst, loops])
        order = np.argsort(src, kind="stable")
        return np.searchsorted(sources, src[order]), dst[order]
    in_degree = in_degrees(graph, rows)
    key = np.empty(int(in_degree.sum()) + len(loops), dtype=np.int64)
    at = 0
    for lo, hi in cuts(in_degree, EDGE_PIECE, 1):  # rows with at most a piece of in-edges (or one hub)
        src, dst = in_edges(graph, rows[lo:hi])
        np.left_shift(src, 32, out=key[at : at + len(src)])
        key[at : at + len(src)] |= dst + lo
        at += len(src)
    key[at:] = (loop_src << 32) | loops
    key.sort()  # by source, then destination
    dst = np.empty(len(key), dtype=np.int32)
    np.bitwise_and(key, 0xFFFFFFFF, out=dst, casting="unsafe")
    np.right_shift(key, 32, out=key)  # the sources' ids, in place
    pos = np.empty(len(key), dtype=np.int32)
    for lo in range(0, len(key), EDGE_PIECE):
        pos[lo : lo + EDGE_PIECE] = np.searchsorted(sources, key[lo : lo + EDGE_PIECE])
    return pos, dst


def in_degrees(graph: LayerwiseGraph, rows: np.ndarray) -> np.ndarray:
    """The full-graph in-degrees of ``rows`` (node ids), int64."""
    return np.asarray(graph.indptr[rows + 1], dtype=np.int64) - np.asarray(graph.indptr[rows], dtype=np.int64)


def positions_in(sources: np.ndarray, targets: np.ndarray, graph: LayerwiseGraph) -> np.ndarray:
    """Positions of ``targets`` in ``sources`` (sorted node ids holding them). When ``sources`` is every node (a
    pass over the whole graph) a node's position is its id: ``targets`` itself, not another N-entry array."""
    return targets if len(sources) == graph.num_nodes else np.searchsorted(sources, targets)


def interval_cuts(graph: LayerwiseGraph, targets: np.ndarray, row_bytes: int, edge_cost: int, self_loops: bool,
                   budget: int, min_rows: int) -> list[tuple[int, int]]:
    """:func:`cuts` of the targets' costs ``row_bytes + edge_cost * (in-degree + self loop)``, computed a piece of
    targets at a time: neither the costs nor their running sum over every target is held (at 100M targets the
    running sum alone was 800 MB)."""
    n = len(targets)
    bounds = [0]
    start = 0  # the open range's first row
    before: int | None = 0  # the cost of the rows before it (None: its piece not reached yet)
    total = 0  # the cost of the rows before the piece
    for lo in range(0, n, EDGE_PIECE):
        hi = min(n, lo + EDGE_PIECE)
        running = np.empty(hi - lo + 1, dtype=np.int64)  # the cost of the rows before row lo + k
        running[0] = total
        np.cumsum(row_bytes + edge_cost * (in_degrees(graph, targets[lo:hi]) + int(self_loops)), out=running[1:])
        running[1:] += total
        total = int(running[-1])
        while start < n and start <= hi:
            if before is None:
                before = int(running[start - lo])
            limit = before + budget  # the range [start, e) holds the rows whose running cost stays within it
            if hi < n and total <= limit:
                break  # the range reaches into the next piece
            e = lo + int(np.searchsorted(running, limit, side="right")) - 1
            start = min(n, max(e, start + max(min_rows, 1)))
            bounds.append(start)
            before = int(running[start - lo]) if start <= hi else None
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def cuts(costs: np.ndarray, budget: int, min_rows: int) -> list[tuple[int, int]]:
    """Consecutive ranges of ``costs``' rows whose summed cost stays within ``budget`` (:func:`row_ranges` over
    their running sum: a range holds at least ``min_rows`` rows, or one row over budget on its own)."""
    bounds = row_ranges(np.concatenate([[0], np.cumsum(costs, dtype=np.int64)]), budget, min_rows)
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))


def with_neighbours(graph: LayerwiseGraph, rows: np.ndarray, max_edges: int) -> np.ndarray:
    """``rows`` and their in-neighbours, sorted and distinct (in slices of at most ``max_edges`` edges)."""
    member = np.zeros(graph.num_nodes, dtype=bool)
    member[rows] = True
    for lo, hi in cuts(in_degrees(graph, rows), max_edges, 1):
        member[in_edges(graph, rows[lo:hi])[0]] = True
    return np.flatnonzero(member)


def interval_sources(graph: LayerwiseGraph, rows: np.ndarray, sources: np.ndarray, span: int, loops: bool,
                     own: bool, split: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The positions in ``sources`` (sorted node ids) an interval's windows read, distinct and ascending, in pieces
    of at most :data:`ID_PIECE`: ``(staged, extra)``. ``staged`` holds its rows' in-neighbours and the rows
    themselves when ``loops`` (self loops) or ``own`` (an own term reads them); with ``split`` the rows only an
    own term reads go to ``extra`` instead (empty otherwise): staged messages need no row for them. A byte marks
    each position of a range of ``span``; the in-edges are read once a range."""
    pieces = cuts(in_degrees(graph, rows), EDGE_PIECE, 1)
    mine = positions_in(sources, rows, graph) if loops or own else rows[:0]
    span = max(span, 1)
    mark = np.zeros(min(span, len(sources)), dtype=np.int8)  # 1: staged, 2: extra
    for s0 in range(0, len(sources), span):
        s1 = min(s0 + span, len(sources))
        mark[:] = 0
        for lo, hi in pieces:
            pos = positions_in(sources, in_edges(graph, rows[lo:hi])[0], graph)
            mark[pos[(pos >= s0) & (pos < s1)] - s0] = 1
        at = mine[(mine >= s0) & (mine < s1)] - s0
        if split and not loops:
            mark[at[mark[at] == 0]] = 2
        else:
            mark[at] = 1
        for lo in range(s0, s1, ID_PIECE):
            part = mark[lo - s0 : min(lo + ID_PIECE, s1) - s0]
            yield np.flatnonzero(part == 1) + lo, np.flatnonzero(part == 2) + lo
