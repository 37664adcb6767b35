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

__all__ = ["NODE_IDS_FILE", "has_node_ids", "original_ids", "write_node_ids"]

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
    import pyarrow.parquet as pq

    ids = np.asarray(ids, dtype=np.int64)
    handle = pq.ParquetFile(artifact.file(NODE_IDS_FILE), memory_map=True)
    meta = handle.metadata
    starts = np.cumsum([0] + [meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
    if ids.size and (ids.min() < 0 or ids.max() >= starts[-1]):
        bad = int(np.flatnonzero((ids < 0) | (ids >= starts[-1]))[0])
        raise ValueError(f"'{artifact.file(NODE_IDS_FILE)}: ids[{bad}]' expected a node id in [0, {starts[-1]}) "
                         f"(got {ids[bad]})")
    groups = np.unique(np.searchsorted(starts, ids, side="right") - 1)
    out = np.empty(len(ids), dtype=object)
    for g in groups.tolist():
        names = handle.read_row_group(g, columns=["original_id"]).column(0).to_numpy(zero_copy_only=False)
        inside = (ids >= starts[g]) & (ids < starts[g + 1])
        out[inside] = names[ids[inside] - starts[g]]
    return out
