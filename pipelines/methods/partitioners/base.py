"""The partitioner interface and registry, and the one function other code partitions with.

A partitioner is a :class:`Partitioner` entry of :data:`PARTITIONERS`: a function that labels every node of
a :class:`~pipelines.methods.partitioners.partgraph.PartGraph` (the streamed CSR, or a weighted coarse graph) with a
part in ``[0, num_parts)``. Entries that declare ``multilevel=True`` run inside the semi-external multilevel
scheme (:mod:`pipelines.methods.partitioners.multilevel`) when ``partition.multilevel`` is on: they then only
partition the coarsest graph. Adding one: a module that defines the function and registers it, plus one
import line in ``pipelines/methods/partitioners/__init__.py`` (``docs/EXTENDING.md`` has a worked example).

Entry contract: ``partition(graph, num_parts, cfg, run) -> labels`` (int32 or any integer array, length
``graph.num_nodes``); it may record statistics in ``run.info`` and report ``run.progress``. Capacities are
the caller's concern only in that every part must hold at most ``ceil((1+imbalance)·W/p)`` node weight
(``partgraph.capacity``; ``partgraph.enforce_capacity`` repairs a result).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.core.graphio import GraphArrays
from pipelines.methods.partitioners import multilevel
from pipelines.methods.partitioners.partgraph import PartGraph
from storage_kernels.registry import Registry

if TYPE_CHECKING:
    from pipelines.core.progress import Progress
    from pipelines.methods.partitioners.settings import PartitionConfig

__all__ = ["PARTITIONERS", "PartitionRun", "Partitioner", "partition_graph", "partition_graph_info",
           "range_parts"]


@dataclass
class PartitionRun:
    """Per-call options and outputs of a partitioner: progress, threads, FENNEL's counting, statistics."""

    progress: Progress | None = None
    num_threads: int = 0  # scoring threads; never changes the result
    counting: str = "auto"  # FENNEL: auto, exact or bloom
    info: dict[str, Any] = field(default_factory=dict)  # statistics the artifact records


PartitionFn = Callable[[PartGraph, int, "PartitionConfig", PartitionRun], np.ndarray]


@dataclass(frozen=True)
class Partitioner:
    """One registered partitioning method.

    ``reads``: the ``partition`` fields declared ``artifact="selected"`` that this method uses (they enter the
    artifact version only when it is the selected method). ``multilevel``: runs inside the multilevel scheme.
    ``train_balance``: multilevel refinement also bounds training nodes per part (OUTRE's FENNEL).
    ``bloom_counting``: may count neighbours with Bloom filters, which the multilevel scheme cannot use.
    """

    name: str
    partition: PartitionFn
    description: str = ""
    reads: tuple[str, ...] = ()
    multilevel: bool = False
    train_balance: bool = False
    bloom_counting: bool = False


_RANGE_CHUNK = 1 << 22

#: Every partitioning method, by ``partition.method`` name.
PARTITIONERS: Registry[Partitioner] = Registry("partition.method")


def range_parts(num_nodes: int, num_parts: int) -> np.ndarray:
    """Part label of each node when ids are cut into ``num_parts`` contiguous, near-equal ranges."""
    if num_parts <= 0:
        raise ValueError(f"'partition.num_parts' expected > 0 (got {num_parts})")
    out = np.empty(num_nodes, dtype=np.int32)
    for start in range(0, num_nodes, _RANGE_CHUNK):  # chunks: no int64 temporaries of N entries
        ids = np.arange(start, min(num_nodes, start + _RANGE_CHUNK), dtype=np.int64)
        out[start : start + len(ids)] = ids * num_parts // max(num_nodes, 1)
    return out


def partition_graph(graph: GraphArrays, method: str, num_parts: int, cfg: PartitionConfig,
                    progress: Progress | None = None, *, num_threads: int = 0, counting: str = "auto"
                    ) -> np.ndarray:
    """Part label (int32, in ``[0, num_parts)``) of every node of ``graph`` by ``method``.

    ``cfg`` supplies the method's knobs (imbalance, seed, chunk_nodes, multilevel, ...); ``method`` and
    ``num_parts`` override its own. ``counting`` (fennel only): ``auto``, ``exact`` or ``bloom``.
    ``num_threads`` (fennel scoring) never changes the result.
    """
    return partition_graph_info(graph, method, num_parts, cfg, progress, num_threads=num_threads,
                                counting=counting)[0]


def partition_graph_info(graph: GraphArrays, method: str, num_parts: int, cfg: PartitionConfig,
                         progress: Progress | None = None, *, num_threads: int = 0, counting: str = "auto"
                         ) -> tuple[np.ndarray, dict[str, Any]]:
    """:func:`partition_graph` plus the statistics the method recorded (``multilevel``, ``ml_*``, ...)."""
    entry = PARTITIONERS.get(method)
    if num_parts <= 0:
        raise ValueError(f"'partition.num_parts' expected > 0 (got {num_parts})")
    n = graph.num_nodes
    p = min(num_parts, max(n, 1))
    run = PartitionRun(progress=progress, num_threads=num_threads, counting=counting)
    if p == 1:
        return range_parts(n, 1), run.info
    fine = PartGraph.of(graph)
    labels = None
    if entry.multilevel and cfg.multilevel:
        reason = multilevel.unavailable(fine, p, cfg, counting if entry.bloom_counting else "exact")
        if reason is None:
            coarse_run = PartitionRun(progress=progress, num_threads=num_threads, counting="exact", info=run.info)
            labels, ml_info = multilevel.partition(fine, p, cfg, lambda g: entry.partition(g, p, cfg, coarse_run),
                                                   train_balance=entry.train_balance, progress=progress)
            run.info.update(ml_info)
        else:
            run.info["multilevel"] = f"skipped: {reason}"
    elif entry.multilevel:
        run.info["multilevel"] = "off"
    if labels is None:
        labels = entry.partition(fine, p, cfg, run)
    return np.ascontiguousarray(labels, dtype=np.int32), run.info
