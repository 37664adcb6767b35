"""``ginex``: Ginex's inspector-executor feature cache (Park et al., PVLDB 15(11), 2022).

The training trace (the sample set's training batches, sampled epoch by sampled epoch, each in step order) is
cut into superbatches of ``plan.superbatch_size`` batches that never span two sampled epochs (0: one per
sampled epoch). Because the batches of a superbatch are known before it trains (Strata samples offline; Ginex
samples a superbatch ahead), the cache decisions are precomputed: a CPU feature cache of
``plan.cpu_cache_fraction`` (or ``plan.cpu_cache_bytes``) of the feature rows is simulated under Belady's rule
-- after every batch keep the candidates (cached, or just read) whose next access is soonest --
by ``kernels.belady_changesets`` (the paper's two-pass occurrence CSR with an infinity dummy), starting from
the initial prefetch (the superbatch's first distinct nodes until the cache is full).

Plan: no static cache (every node a training batch reads is tier 2, read by the batch; evaluation-only nodes
tier 3); its statistics carry the dynamic cache's size and the simulated hit rate (exact for the trace).

Pack (``storage_kernels.changesets`` layout, versioned by its format): per superbatch the initial cache, per
training batch the changeset (``in_ids``, ``out_ids``, ``in_positions``) and its predicted hits. No feature
row is copied: training reads the reorder artifact's ``features.npy``.

Features (:class:`trainer.features.GinexFeatures`): per training batch, cached rows gathered from the cache in
node order, the others read from the feature file with block-merged aligned direct reads, then the in-place
cache update from the batch's rows (``kernels.cache_update``, no I/O); the initial prefetch at each
superbatch's first batch. Evaluation batches read the cached rows from the cache and the rest from the file.

Not here: the GPU budget (Ginex's feature cache lives in host memory; ``plan.gpu_cache_*`` is unused), the
superbatch pipelining (precomputation of superbatch k+1 during training of k: here it is offline, in pack),
and Ginex's neighbor cache. Strata samples every epoch offline in the ``sample`` stage, from a memory-mapped
CSR, so training reads no adjacency and a policy (plan, pack, features) has nothing to cache for it; the
neighbor cache would be a sampler (``pipelines/methods/samplers/``) reading uncached adjacency lists with direct
reads. Its ranking, out-degree / in-degree, is also 1 for every node of Strata's symmetrised graphs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.core.sections import Section
from pipelines.methods.policies.base import FeatureInputs, PackInputs, PlanInputs, Policy, TierPlan, register_policy
from pipelines.methods.policies.reads import EpochReads, row_reads
from pipelines.methods.policies.sharded import ShardedPack
from pipelines.methods.policies.tiers import frequency_plan
from storage_kernels import changesets as cs
from storage_kernels import kernels
from storage_kernels.kernels._common import DIRECT_ALIGN
from trainer.config import setting

if TYPE_CHECKING:
    from pipelines.core.sections import RunConfig
    from storage_kernels.store import Artifact
    from trainer.features import FeatureSource

__all__ = ["Ginex", "GinexPlanSettings", "GinexShards", "cache_rows", "pack_stats", "simulation_memory"]


class GinexPlanSettings(Section):
    """``ginex``'s part of the ``plan`` section (``--set plan.superbatch_size=8``)."""

    superbatch_size: int = setting(
        0, "ginex: training batches per superbatch, whose cache changesets are precomputed together (never "
        "spanning two sampled epochs); 0 = one superbatch per sampled epoch.", artifact="selected", ge=0,
    )


def cache_rows(cfg: RunConfig, num_nodes: int, row_bytes: int) -> int:
    """Rows of Ginex's feature cache: the CPU budget over the row size, at most every node."""
    feature_bytes = num_nodes * row_bytes
    return min(cfg.plan.budgets(feature_bytes)["cpu"] // max(row_bytes, 1), num_nodes)


def simulation_memory(cfg: RunConfig) -> int:
    """The memory the superbatches simulated at once may hold together: ``pack.memory_mb`` (sized from
    ``memory_budget``); one superbatch always runs, however large."""
    return int(cfg.pack.memory_mb) << 20


def pack_stats(stats: dict[str, Any], num_nodes: int, row_bytes: int) -> dict[str, Any]:
    """The pack artifact's statistics from the changeset store's (``write_changesets``)."""
    misses = stats["trace_rows"] - stats["predicted_hits"]
    return {
        "layout": "changesets",
        **stats,
        "row_bytes": row_bytes,
        "feature_bytes": num_nodes * row_bytes,
        "cache_bytes": stats["cache_rows"] * row_bytes,
        "predicted_miss_rows": misses,
        "mean_changes_per_batch": stats["changes"] / stats["trace_batches"] if stats["trace_batches"] else 0.0,
    }


def _prefetch_blocks(init_ids: np.ndarray, row_bytes: int) -> int:
    """The distinct 4 KiB blocks of the feature file holding ``init_ids``' rows (a switch's merged reads; any
    order: ``count_blocks`` stamps blocks, it does not sort)."""
    ids = np.asarray(init_ids, dtype=np.int64)
    return int(kernels.count_blocks(ids, np.array([0, len(ids)], dtype=np.int64), row_bytes)[0]) if len(ids) else 0


@register_policy
class Ginex(Policy):
    name = "ginex"
    description = ("A CPU feature cache changed after every training batch by Belady-optimal changesets "
                   "precomputed per superbatch; misses read from the feature file, insertions copied from the "
                   "batch (Ginex).")
    settings = {"plan": GinexPlanSettings}

    def plan(self, inputs: PlanInputs) -> TierPlan:
        graph, samples, cfg = inputs.graph, inputs.samples, inputs.cfg
        rows = cache_rows(cfg, graph.num_nodes, graph.row_bytes)
        # the simulated hit rate of the dynamic cache (pack repeats the simulation and stores its changesets);
        # simulated before the tiers are counted, so the two working sets are never held together
        trace, superbatch_ptr = cs.trace_superbatches(samples, cfg.plan.superbatch_size)
        hits = accesses = prefetch_blocks = 0
        for sb in cs.iter_changesets(samples, trace, superbatch_ptr, graph.num_nodes, rows, cfg.pack.num_threads,
                                     simulation_memory(cfg)):
            hits += int(sb.changes.hits.sum())
            accesses += int(sb.rows.sum())
            prefetch_blocks += _prefetch_blocks(sb.changes.init_ids, graph.row_bytes)
            if inputs.progress:
                inputs.progress("plan: simulating the cache", sb.index + 1, len(superbatch_ptr) - 1)
        rate = hits / accesses if accesses else 0.0
        plan = frequency_plan(inputs, {"gpu": 0, "cpu": 0})  # no static cache: tiers 2 (train) and 3 (eval)
        budget = cfg.plan.budgets(graph.num_nodes * graph.row_bytes)
        plan.stats.update({
            "cache": "dynamic (Belady changesets per superbatch, in the pack artifact)",
            "gpu_budget_bytes": 0,
            "cpu_budget_bytes": budget["cpu"],
            "cpu_cache_rows": rows,
            "cpu_cache_bytes": rows * graph.row_bytes,
            "superbatch_size": cfg.plan.superbatch_size,
            "superbatches": len(superbatch_ptr) - 1,
            "total_accesses": accesses,
            "predicted_hit_rate_cpu": rate,
            "predicted_hit_rate": rate,
            "predicted_prefetch_blocks": prefetch_blocks,
        })
        return plan

    def predict_reads(self, inputs: PlanInputs, plan: TierPlan) -> EpochReads:
        """Every miss of the simulated cache is one row read, and every superbatch's switch reads its initial
        cache (block-merged: the distinct 4 KiB blocks of its rows, an upper bound: rows the previous
        superbatch left cached are not read again). The simulation counts the initial cache as hits: without
        the switch's reads a cache that holds the whole working set predicted 0 bytes, and ``auto`` took
        ``ginex`` over ``diskgnn`` at 10M nodes (3.1x slower; 1.1 GB read an epoch). Per sampled epoch."""
        epochs = max(inputs.samples.epochs, 1)
        misses = int(plan.stats["total_accesses"] * (1.0 - plan.stats["predicted_hit_rate"]))
        rows = row_reads(inputs, misses // epochs, queue_depth=32)
        blocks = int(plan.stats.get("predicted_prefetch_blocks", 0)) // epochs  # 0 in plans made before it
        return EpochReads(rows.bytes + blocks * DIRECT_ALIGN, rows.requests + blocks, queue_depth=32,
                          model="one aligned read per missed row + the distinct 4 KiB blocks of each switch")

    def pack(self, inputs: PackInputs) -> dict[str, Any]:
        graph, cfg = inputs.graph, inputs.cfg
        rows = cache_rows(cfg, graph.num_nodes, graph.row_bytes)
        stats = cs.write_changesets(inputs.builder, inputs.samples, graph.num_nodes, rows, cfg.plan.superbatch_size,
                                    cfg.pack.num_threads, inputs.progress, simulation_memory(cfg))
        return pack_stats(stats, graph.num_nodes, graph.row_bytes)

    def sharded_pack(self) -> ShardedPack:
        return GinexShards()

    def features(self, inputs: FeatureInputs) -> FeatureSource:
        from trainer.features import GinexFeatures

        if inputs.pack is None:
            raise ValueError(f"'policy' {self.name} expected its pack artifact (got None)")
        return GinexFeatures(inputs.pack.path, inputs.samples, inputs.reorder.file("features.npy"),
                             device=inputs.device)


class GinexShards(ShardedPack):
    """``ginex``: units are superbatches; a shard is the changeset store of its superbatches."""

    def _trace(self, inputs: PackInputs) -> tuple[np.ndarray, np.ndarray]:
        return cs.trace_superbatches(inputs.samples, inputs.cfg.plan.superbatch_size)

    def prepare(self, inputs: PackInputs) -> int:
        return len(self._trace(inputs)[1]) - 1

    def shard(self, inputs: PackInputs, prep: Artifact, lo: int, hi: int) -> dict[str, Any]:
        graph, cfg = inputs.graph, inputs.cfg
        rows = cache_rows(cfg, graph.num_nodes, graph.row_bytes)
        trace, sb_ptr = self._trace(inputs)
        ptr = sb_ptr[lo : hi + 1]
        writer = cs.ChangesetWriter(inputs.builder, trace[ptr[0] : ptr[-1]], ptr - ptr[0], graph.num_nodes, rows,
                                    cfg.plan.superbatch_size)
        for sb in cs.iter_changesets(inputs.samples, trace, ptr, graph.num_nodes, rows, cfg.pack.num_threads,
                                     simulation_memory(cfg)):
            writer.add(sb)
            if inputs.progress:
                inputs.progress("pack shard: changesets", sb.index + 1, hi - lo)
        return writer.close()

    def merge(self, inputs: PackInputs, prep: Artifact, shards: Sequence[Artifact]) -> dict[str, Any]:
        graph, cfg = inputs.graph, inputs.cfg
        rows = cache_rows(cfg, graph.num_nodes, graph.row_bytes)
        trace, sb_ptr = self._trace(inputs)
        writer = cs.ChangesetWriter(inputs.builder, trace, sb_ptr, graph.num_nodes, rows, cfg.plan.superbatch_size)
        at = 0
        for shard in shards:
            part = np.asarray(shard.array(cs.TRACE))
            if not np.array_equal(part, trace[at : at + len(part)]):
                raise ValueError(f"'{shard.file(cs.TRACE)}' expected trace positions {at}..{at + len(part)} of "
                                 "this sample set (got other batches)")
            at += len(part)
            a = {name: shard.array(name) for name in (cs.INIT_PTR, cs.INIT_IDS, cs.UPDATE_PTR, cs.IN_IDS, cs.OUT_IDS,
                                                      cs.IN_POSITIONS, cs.HITS)}
            writer.extend(a[cs.INIT_PTR], a[cs.INIT_IDS], a[cs.UPDATE_PTR], a[cs.IN_IDS], a[cs.OUT_IDS],
                          a[cs.IN_POSITIONS], a[cs.HITS], int(shard.stats["trace_rows"]))
        return pack_stats(writer.close(), graph.num_nodes, graph.row_bytes)
