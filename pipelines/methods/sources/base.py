"""The common shape of every graph source: a streaming-friendly :class:`GraphSource`.

A source describes one graph without materialising its edges or features: ``edge_chunks()`` and
``feature_chunks()`` return *fresh* iterators on every call, so ingest can make one pass to count CSR row
lengths and a second pass to place the edges, and stream features into an array file larger than RAM.

Edge convention (what ingest may rely on)
-----------------------------------------
Each edge chunk is a pair ``(src, dst)`` of equal-length 1-D C-contiguous ``int64`` arrays, and each pair is
one entry of the final CSR: row ``src`` lists ``dst``, i.e. ``dst`` is a neighbour whose message ``src``
aggregates (``docs/CONTRACTS.md``: row ``v`` lists the in-neighbours of ``v``). Ingest places the chunks as
given and never symmetrises again:

- ``undirected=True``: the source has already symmetrised; every chunk that holds ``(u, v)`` also holds
  ``(v, u)``, so the CSR is symmetric (row ``v`` is also the out-neighbour list).
- ``undirected=False``: a directed input edge ``u -> v`` (``u``'s message flows to ``v``) is yielded as
  ``(src=v, dst=u)``.
- Self loops are never yielded.
- ``deduplicated=True`` guarantees no ``(src, dst)`` pair is yielded twice. When it is ``False`` the same pair
  may appear more than once (possibly in different chunks), and ingest must drop duplicates row by row after
  placing, e.g. with :func:`dedupe_csr_rows` on blocks of rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.methods.sources.edges import EdgeChunk, symmetrise_chunk
from storage_kernels import kernels

if TYPE_CHECKING:
    from pipelines.methods.sources.linksplit import LinkSplit

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "EdgeChunk",
    "GraphSource",
    "array_edge_chunks",
    "array_row_chunks",
    "dataset_name",
    "dedupe_csr_rows",
    "feature_chunk_rows",
    "symmetrise_chunk",
]

DEFAULT_CHUNK_ROWS = 65_536
"""Default number of nodes (feature rows) per chunk; readers of files pick their own block sizes."""
FEATURE_CHUNK_BYTES = 64 << 20
"""At most this many float32 bytes of feature rows per chunk (:func:`feature_chunk_rows`)."""


def feature_chunk_rows(feature_dim: int, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> int:
    """Feature rows per chunk: ``chunk_rows``, fewer where that many rows of ``feature_dim`` float32 columns
    exceed :data:`FEATURE_CHUNK_BYTES` (wide features: 65,536 rows of 8,192 columns are 2 GiB), at least 1."""
    return max(1, min(int(chunk_rows), FEATURE_CHUNK_BYTES // (4 * max(int(feature_dim), 1))))

@dataclass
class GraphSource:
    """One input graph in streaming form (see the module docstring for the edge convention).

    Attributes:
        name: dataset name, safe as a directory name (``[A-Za-z0-9_.-]``).
        num_nodes: number of nodes ``N``; node ids are ``0..N-1``.
        feature_dim: feature columns ``F``.
        num_classes: label classes ``C``; labels are in ``[-1, C)``.
        edge_chunks: returns a fresh iterator of ``(src, dst)`` int64 chunks on every call.
        feature_chunks: returns a fresh iterator of float32 ``(rows, F)`` chunks in node order whose row
            counts add up to ``N``.
        labels: signed integers ``(N,)`` (int64, or narrower); ``-1`` = unlabelled.
        train_idx: sorted unique int64 node ids of labelled nodes; likewise ``val_idx`` and ``test_idx``
            (pairwise disjoint).
        description: parameters and provenance (JSON-serialisable); ingest records it.
        undirected: the chunks are symmetric (both directions present).
        deduplicated: no ``(src, dst)`` pair is yielded twice.
        files: role -> path (or spec) of what the source reads: ``"edges"``, ``"features"``, ``"labels"``,
            ... Validation messages name these.
        link_split: the source's own train/valid/test split of its edges (link prediction), or None: the
            link task then generates one (``pipelines.methods.sources.linksplit``).
        node_names: the original id of every node (a string ``pyarrow`` array of ``N``, in id order) when the
            input named its nodes (string ids), else None: ingest keeps it (``pipelines.core.nodeids``).
    """

    name: str
    num_nodes: int
    feature_dim: int
    num_classes: int
    edge_chunks: Callable[[], Iterator[EdgeChunk]]
    feature_chunks: Callable[[], Iterator[np.ndarray]]
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    description: dict = field(default_factory=dict)
    undirected: bool = True
    deduplicated: bool = False
    files: dict[str, str] = field(default_factory=dict)
    link_split: LinkSplit | None = None
    node_names: Any = None

    def where(self, role: str) -> str:
        """The file (or spec) that holds ``role`` (``"edges"``, ``"features"``, ...), for messages."""
        return self.files.get(role) or self.files.get("source") or self.name


_NAME_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def dataset_name(raw: str) -> str:
    """Turn ``raw`` into a dataset name usable as a directory: other characters become ``_``."""
    name = _NAME_BAD.sub("_", raw).strip("._")
    if not name:
        raise ValueError(f"'dataset name' expected at least one of [A-Za-z0-9_.-] (got {raw!r})")
    return name


def array_edge_chunks(
    src: np.ndarray, dst: np.ndarray, chunk_edges: int = 1 << 20
) -> Callable[[], Iterator[EdgeChunk]]:
    """An ``edge_chunks`` callable over in-memory edge arrays (slices, no copies)."""
    if chunk_edges <= 0:
        raise ValueError(f"'chunk_edges' expected a positive integer (got {chunk_edges})")

    def chunks() -> Iterator[EdgeChunk]:
        for start in range(0, len(src), chunk_edges):
            yield src[start : start + chunk_edges], dst[start : start + chunk_edges]

    return chunks


def array_row_chunks(
    rows: Callable[[int, int], np.ndarray], num_rows: int, chunk_rows: int = DEFAULT_CHUNK_ROWS
) -> Callable[[], Iterator[np.ndarray]]:
    """A ``feature_chunks`` callable that calls ``rows(start, stop)`` for consecutive row ranges."""
    if chunk_rows <= 0:
        raise ValueError(f"'chunk_rows' expected a positive integer (got {chunk_rows})")

    def chunks() -> Iterator[np.ndarray]:
        for start in range(0, num_rows, chunk_rows):
            yield rows(start, min(start + chunk_rows, num_rows))

    return chunks


def dedupe_csr_rows(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort every row's neighbours and drop repeated ones, for a block of CSR rows.

    ``indptr`` may start at any offset (a slice ``indptr[a:b+1]`` of a larger CSR with ``indices`` being the
    matching ``indices[indptr[a]:indptr[b]]``); the result is a fresh block with ``indptr[0] == 0``. In C
    (:func:`storage_kernels.kernels.csr_dedupe`, on a copy of ``indices``).
    """
    return kernels.csr_dedupe(np.asarray(indptr, dtype=np.int64), np.array(indices, dtype=np.int64))
