"""Plan stage: DiskGNN's static tiers chosen from the offline access trace.

Every node's access frequency is counted over the sampled *training* batches; the most popular nodes go to
the GPU cache, the next to the CPU cache, each within its byte budget; every other node a training batch
reads comes from that batch's packed chunk. Nodes only evaluation batches read are served from the unpacked
feature file (``TIER_FILE``): an evaluation batch covers most of the graph, so packing it would copy the
feature file once per batch, while coalesced page reads of the file cost about one sequential pass.
The predicted hit rates are exact for the sampled trace, because training replays it.
"""

from __future__ import annotations

import numpy as np

from pipelines.config import PipelineConfig
from pipelines.stages.common import Progress, StageResult, materialize
from pipelines.stages.graphio import load_graph
from storage_kernels.sampleset import SampleSet
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["FORMAT_VERSION", "TIER_GPU", "TIER_CPU", "TIER_PACKED", "TIER_FILE", "TIER_NONE", "access_frequency",
           "assign_tiers", "run"]

FORMAT_VERSION = 1
TIER_GPU, TIER_CPU, TIER_PACKED, TIER_FILE, TIER_NONE = 0, 1, 2, 3, -1
_TRACE_CHUNK = 16_000_000


def access_frequency(nodes: np.ndarray, ranges: list[tuple[int, int]], num_nodes: int,
                     progress: Progress | None = None) -> np.ndarray:
    """How many of the batches whose node lists are ``nodes[start:stop]`` read each node (streamed)."""
    freq = np.zeros(num_nodes, dtype=np.int64)
    pending: list[np.ndarray] = []
    size = 0
    for i, (start, stop) in enumerate(ranges):
        pending.append(np.asarray(nodes[start:stop]))
        size += stop - start
        if size >= _TRACE_CHUNK or i == len(ranges) - 1:
            freq += np.bincount(np.concatenate(pending), minlength=num_nodes)
            pending, size = [], 0
            if progress:
                progress("plan: counting accesses", i + 1, len(ranges))
    return freq


def assign_tiers(freq: np.ndarray, gpu_rows: int, cpu_rows: int, eval_nodes: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(tier, slot, gpu_nodes, cpu_nodes): most frequent first; ties broken by id for determinism.

    ``eval_nodes`` (read only by evaluation batches when not cached) get ``TIER_FILE``.
    """
    accessed = np.flatnonzero(freq > 0)
    ranked = accessed[np.argsort(-freq[accessed], kind="stable")]
    gpu_nodes = np.sort(ranked[:gpu_rows])
    cpu_nodes = np.sort(ranked[gpu_rows : gpu_rows + cpu_rows])
    tier = np.full(len(freq), TIER_NONE, dtype=np.int8)
    if eval_nodes is not None:
        tier[eval_nodes] = TIER_FILE
    tier[accessed] = TIER_PACKED
    tier[cpu_nodes] = TIER_CPU
    tier[gpu_nodes] = TIER_GPU
    slot = np.full(len(freq), -1, dtype=np.int64)
    slot[gpu_nodes] = np.arange(len(gpu_nodes))
    slot[cpu_nodes] = np.arange(len(cpu_nodes))
    return tier, slot, gpu_nodes.astype(np.int64), cpu_nodes.astype(np.int64)


def run(store: ArtifactStore, cfg: PipelineConfig, *, ordering: Artifact, samples: Artifact,
        progress: Progress | None = None) -> StageResult:
    """Write the ``plan`` artifact: tier and slot per node, cache node lists, predicted hit rates."""
    pc = cfg.plan
    params = pc.model_dump(mode="json")

    def build(builder: ArtifactBuilder) -> None:
        graph = load_graph(ordering)
        row_bytes = graph.row_bytes
        feature_bytes = graph.num_nodes * row_bytes
        gpu_budget = pc.gpu_cache_bytes if pc.gpu_cache_bytes is not None else int(pc.gpu_cache_fraction *
                                                                                    feature_bytes)
        cpu_budget = pc.cpu_cache_bytes if pc.cpu_cache_bytes is not None else int(pc.cpu_cache_fraction *
                                                                                    feature_bytes)
        sample_set = SampleSet(samples.path)
        nodes = sample_set.nodes
        train_ranges = [sample_set.node_range(b) for b in sample_set.batch_ids("train")]
        eval_ranges = [sample_set.node_range(b) for s in ("val", "test") for b in sample_set.batch_ids(s)]
        freq = access_frequency(nodes, train_ranges, graph.num_nodes, progress)
        eval_nodes = np.flatnonzero(access_frequency(nodes, eval_ranges, graph.num_nodes)) if eval_ranges else None
        tier, slot, gpu_nodes, cpu_nodes = assign_tiers(freq, gpu_budget // row_bytes, cpu_budget // row_bytes,
                                                        eval_nodes)
        builder.save_array("tier.npy", tier)
        builder.save_array("slot.npy", slot)
        builder.save_array("gpu_nodes.npy", gpu_nodes)
        builder.save_array("cpu_nodes.npy", cpu_nodes)
        builder.save_array("frequency.npy", freq)
        total = int(freq.sum())
        gpu_hits, cpu_hits = int(freq[gpu_nodes].sum()), int(freq[cpu_nodes].sum())
        builder.stats.update(
            {
                "gpu_budget_bytes": gpu_budget,
                "cpu_budget_bytes": cpu_budget,
                "gpu_cache_bytes": len(gpu_nodes) * row_bytes,
                "cpu_cache_bytes": len(cpu_nodes) * row_bytes,
                "gpu_cache_rows": len(gpu_nodes),
                "cpu_cache_rows": len(cpu_nodes),
                "feature_bytes": feature_bytes,
                "row_bytes": row_bytes,
                "accessed_nodes": int(np.count_nonzero(freq)),
                "eval_only_nodes": int(np.count_nonzero(tier == TIER_FILE)),
                "total_accesses": total,
                "predicted_hit_rate_gpu": gpu_hits / total if total else 0.0,
                "predicted_hit_rate_cpu": cpu_hits / total if total else 0.0,
                "predicted_hit_rate": (gpu_hits + cpu_hits) / total if total else 0.0,
            }
        )

    return materialize(store, cfg.dataset_name, "plan", FORMAT_VERSION, params,
                       {"ordering": ordering, "samples": samples}, build)
