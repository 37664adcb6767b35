"""Static tiers from the offline access trace (DiskGNN): count accesses, rank, fill the caches in order.

Every node's access frequency is counted over the sampled *training* batches; the most popular nodes go to
the GPU cache, the next to the CPU cache, each within its byte budget; every other node a training batch
reads is ``PACKED`` (read from disk by the batch). Nodes only evaluation batches read are ``FILE``: an
evaluation batch covers most of the graph, so packing it would copy the feature file once per batch, while
coalesced page reads of the file cost about one sequential pass. The predicted hit rates are exact for the
sampled trace, because training replays it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from pipelines.methods.policies.inputs import PlanInputs, TierPlan
from storage_kernels import kernels
from storage_kernels.packstore import Tier

if TYPE_CHECKING:
    from pipelines.core.progress import Progress

__all__ = ["access_frequency", "accessed_mask", "assign_tiers", "frequency_plan", "ranked_nodes", "trace_chunks",
           "uncached_training_rows"]

_TRACE_CHUNK = 16_000_000  # node ids counted per bincount


def access_frequency(nodes: np.ndarray, ranges: list[tuple[int, int]], num_nodes: int,
                     progress: Progress | None = None) -> np.ndarray:
    """How many of the batches whose node lists are ``nodes[start:stop]`` read each node (streamed: counted in
    place by ``kernels.csr_count``, chunk by chunk, so nothing but the (N,) counts is O(N))."""
    freq = np.zeros(num_nodes, dtype=np.int64)
    for i, chunk in trace_chunks(nodes, ranges):
        kernels.csr_count(chunk, freq)
        if progress:
            progress("plan: counting accesses", i + 1, len(ranges))
    return freq


def accessed_mask(nodes: np.ndarray, ranges: list[tuple[int, int]], num_nodes: int) -> np.ndarray:
    """bool (N,): whether any of the batches whose node lists are ``nodes[start:stop]`` reads each node."""
    mask = np.zeros(num_nodes, dtype=bool)
    for _, chunk in trace_chunks(nodes, ranges):
        mask[chunk] = True
    return mask


def trace_chunks(nodes: np.ndarray, ranges: list[tuple[int, int]]) -> Iterator[tuple[int, np.ndarray]]:
    """``(i, ids)``: the node lists of ``ranges`` concatenated into int64 chunks of about ``_TRACE_CHUNK`` ids,
    each with the index of the last range it holds."""
    pending: list[np.ndarray] = []
    size = 0
    for i, (start, stop) in enumerate(ranges):
        pending.append(np.asarray(nodes[start:stop]))
        size += stop - start
        if size >= _TRACE_CHUNK or i == len(ranges) - 1:
            yield i, np.ascontiguousarray(np.concatenate(pending), dtype=np.int64)
            pending, size = [], 0


def ranked_nodes(freq: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` most read nodes (``freq > 0``), most read first, ties by id: the first ``k`` of every accessed
    node ranked so, found from a histogram of the counts (no sort of all accessed nodes)."""
    if k <= 0 or not len(freq):
        return np.empty(0, dtype=np.int64)
    hist = np.bincount(freq)
    hist[0] = 0  # never read: never ranked
    at_least = np.cumsum(hist[::-1])[::-1]  # at_least[v]: nodes read at least v times
    if at_least[0] <= k:
        top = np.flatnonzero(freq > 0)
    else:
        thr = int(np.flatnonzero(at_least >= k)[-1])  # the k-th largest count
        above = np.flatnonzero(freq > thr)
        need = k - len(above)
        ties: list[np.ndarray] = []
        for lo in range(0, len(freq), _TRACE_CHUNK):  # the smallest ids among those read exactly thr times
            if need <= 0:
                break
            tie = np.flatnonzero(freq[lo : lo + _TRACE_CHUNK] == thr)[:need] + lo
            ties.append(tie)
            need -= len(tie)
        top = np.sort(np.concatenate([above, *ties]))
    return top[np.argsort(-freq[top], kind="stable")].astype(np.int64, copy=False)


def assign_tiers(freq: np.ndarray, gpu_rows: int, cpu_rows: int, eval_nodes: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(tier, slot, gpu_nodes, cpu_nodes): most frequent first; ties broken by id for determinism.

    ``eval_nodes`` (ids, or a bool mask over the nodes: read only by evaluation batches when not cached) get
    ``Tier.FILE``.
    """
    ranked = ranked_nodes(freq, gpu_rows + cpu_rows)
    gpu_nodes = np.sort(ranked[:gpu_rows])
    cpu_nodes = np.sort(ranked[gpu_rows : gpu_rows + cpu_rows])
    del ranked
    tier = np.full(len(freq), Tier.NONE, dtype=np.int8)
    if eval_nodes is not None:
        tier[eval_nodes] = Tier.FILE
    for lo in range(0, len(freq), _TRACE_CHUNK):
        part = tier[lo : lo + _TRACE_CHUNK]
        part[freq[lo : lo + _TRACE_CHUNK] > 0] = Tier.PACKED
    tier[cpu_nodes] = Tier.CPU
    tier[gpu_nodes] = Tier.GPU
    slot = np.full(len(freq), -1, dtype=np.int64)
    slot[gpu_nodes] = np.arange(len(gpu_nodes))
    slot[cpu_nodes] = np.arange(len(cpu_nodes))
    return tier, slot, gpu_nodes.astype(np.int64), cpu_nodes.astype(np.int64)


def frequency_plan(inputs: PlanInputs, budgets: dict[str, int]) -> TierPlan:
    """The plan that fills a GPU and a CPU cache of ``budgets`` bytes with the most-read rows."""
    graph, samples = inputs.graph, inputs.samples
    row_bytes = graph.row_bytes
    nodes = samples.nodes
    train_ranges = [samples.node_range(b) for b in samples.batch_ids("train")]
    eval_ranges = [samples.node_range(b) for s in ("val", "test") for b in samples.batch_ids(s)]
    freq = access_frequency(nodes, train_ranges, graph.num_nodes, inputs.progress)
    eval_nodes = accessed_mask(nodes, eval_ranges, graph.num_nodes) if eval_ranges else None
    tier, slot, gpu_nodes, cpu_nodes = assign_tiers(freq, budgets["gpu"] // row_bytes, budgets["cpu"] // row_bytes,
                                                    eval_nodes)
    del eval_nodes
    total = int(freq.sum())
    gpu_hits, cpu_hits = int(freq[gpu_nodes].sum()), int(freq[cpu_nodes].sum())
    stats = {
        "gpu_budget_bytes": budgets["gpu"],
        "cpu_budget_bytes": budgets["cpu"],
        "gpu_cache_bytes": len(gpu_nodes) * row_bytes,
        "cpu_cache_bytes": len(cpu_nodes) * row_bytes,
        "gpu_cache_rows": len(gpu_nodes),
        "cpu_cache_rows": len(cpu_nodes),
        "feature_bytes": graph.num_nodes * row_bytes,
        "row_bytes": row_bytes,
        "accessed_nodes": int(np.count_nonzero(freq)),
        "eval_only_nodes": int(np.count_nonzero(tier == Tier.FILE)),
        "total_accesses": total,
        "predicted_hit_rate_gpu": gpu_hits / total if total else 0.0,
        "predicted_hit_rate_cpu": cpu_hits / total if total else 0.0,
        "predicted_hit_rate": (gpu_hits + cpu_hits) / total if total else 0.0,
    }
    return TierPlan(tier, slot, gpu_nodes, cpu_nodes, freq, stats)


def uncached_training_rows(plan: TierPlan) -> bool:
    """Whether some row a training batch reads is in neither of ``plan``'s caches (so training reads it from
    disk, unless the policy holds every row in RAM); streamed over the nodes."""
    for lo in range(0, len(plan.tier), _TRACE_CHUNK):
        tier, freq = plan.tier[lo:lo + _TRACE_CHUNK], plan.frequency[lo:lo + _TRACE_CHUNK]
        if np.any((freq > 0) & (tier >= Tier.PACKED)):
            return True
    return False
