"""The original ids of a graph whose input named its nodes (string ids: user names, URLs): ``node_ids.parquet``.

A source read with a node list (``edgelist:`` with ``nodes=FILE``) numbers its nodes ``0..N-1`` in the list's
order; the ``ingest`` artifact keeps the names as ``node_ids.parquet``, columns ``id`` (int64, ``0..N-1``, the
source's dense id) and ``original_id`` (string), one row per node in id order. ``reorder`` carries the file
unchanged: its ``perm.npy`` maps Strata's id to the source's id, so the name of Strata's node ``v`` is
``original_id[perm[v]]`` -- the same two steps for every artifact after ``reorder`` (the web export's
subgraph, :meth:`pipelines.batches.TrainingData.original_ids`). Graphs with integer ids have no such file:
their source id is the original id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

    from storage_kernels.store import Artifact, ArtifactBuilder

__all__ = ["NODE_IDS_FILE", "NodeNames", "has_node_ids", "original_ids", "write_node_ids"]

NODE_IDS_FILE = "node_ids.parquet"


def write_node_ids(builder: ArtifactBuilder, names: pa.Array) -> None:
    """Write ``node_ids.parquet`` (``id``, ``original_id``) for ``names`` (one string per node, in id order)."""
    import pyarrow as pa

    builder.write_parquet(NODE_IDS_FILE, pa.table({"id": pa.array(np.arange(len(names), dtype=np.int64)),
                                                   "original_id": names.cast(pa.string())}))


def has_node_ids(artifact: Artifact) -> bool:
    """Whether ``artifact`` (``ingest`` or ``reorder``) holds the original ids of a graph with named nodes."""
    return NODE_IDS_FILE in artifact.files


def original_ids(artifact: Artifact, ids: np.ndarray) -> np.ndarray | None:
    """The original ids (an object array of ``str``) of the source ids ``ids`` (the ingest ids; after
    ``reorder``: ``perm[v]``), or None for a graph without named nodes. Reads only the row groups holding
    ``ids``, so a lookup of a batch's nodes does not load every name."""
    if not has_node_ids(artifact):
        return None
    return NodeNames(artifact).take(ids).to_numpy(zero_copy_only=False)


class NodeNames:
    """Repeated lookups of original ids in one ``node_ids.parquet`` (``strata predict``: one per interval): the
    file is opened once, and decoded row groups (Arrow string arrays) are kept up to ``cache_bytes``, least
    recently used dropped first, so a graph whose names fit the cache is decoded once, not once per lookup."""

    def __init__(self, artifact: Artifact, cache_bytes: int = 0) -> None:
        import pyarrow.parquet as pq

        self.path = artifact.file(NODE_IDS_FILE)
        self.handle = pq.ParquetFile(self.path, memory_map=True)
        meta = self.handle.metadata
        self.starts = np.cumsum([0] + [meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
        self.cache_bytes = cache_bytes
        self._cache: dict[int, pa.Array] = {}  # insertion order = recency

    def _group(self, g: int) -> pa.Array:
        names = self._cache.pop(g, None)
        if names is None:
            names = self.handle.read_row_group(g, columns=["original_id"]).column(0).combine_chunks()
        if names.nbytes <= self.cache_bytes:
            self._cache[g] = names
            while sum(a.nbytes for a in self._cache.values()) > self.cache_bytes:
                self._cache.pop(next(iter(self._cache)))
        return names

    def take(self, ids: np.ndarray) -> pa.Array:
        """The original ids (an Arrow string array) of the source ids ``ids``, in their order; ValueError naming
        the first id outside ``[0, N)``."""
        import pyarrow as pa

        ids = np.asarray(ids, dtype=np.int64)
        end = int(self.starts[-1])
        if ids.size and (ids.min() < 0 or ids.max() >= end):
            bad = int(np.flatnonzero((ids < 0) | (ids >= end))[0])
            raise ValueError(f"'{self.path}: ids[{bad}]' expected a node id in [0, {end}) (got {ids[bad]})")
        of = np.searchsorted(self.starts, ids, side="right") - 1
        positions, parts = [], []
        for g in np.unique(of).tolist():
            inside = np.flatnonzero(of == g)
            positions.append(inside)
            parts.append(self._group(g).take(pa.array(ids[inside] - self.starts[g])))
        if not parts:
            return pa.array([], type=pa.string())
        order = np.argsort(np.concatenate(positions), kind="stable")
        return pa.concat_arrays(parts).take(pa.array(order))
