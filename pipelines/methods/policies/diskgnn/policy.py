"""``diskgnn``: DiskGNN's four-level feature store (the default policy).

Plan: a GPU and a CPU cache of ``plan.*_cache_fraction`` (or ``*_cache_bytes``) filled with the rows the
sampled training trace reads most (:func:`pipelines.methods.policies.tiers.frequency_plan`).

Pack (``storage_kernels.packstore`` layout):

1. the cache blocks in plan order;
2. the ``(m, s)`` search under ``pack.disk_budget`` (:func:`pipelines.methods.policies.diskgnn.search.search`): training
   batches in segments of ``m``, per segment a disk cache of its ``s`` most-read uncached rows, ordered by their
   reads (``pack.disk_cache_order``: uses, or MinHash as in Alg. 1), written to ``disk_cache.bin``; ``s = 0``
   (pure packing) whenever it fits, since it reads least;
3. per training batch, its remaining uncached rows sorted by id in one chunk of ``packed.bin`` at an aligned
   offset, written by one sequential pass over the feature file (``kernels.pack_batches``, partitions of
   ``pack.memory_mb``);
4. the address table of every (batch, node). Evaluation batches are not packed: their uncached rows are
   addressed in the ordered feature file.

The store (cache blocks + disk caches + packed chunks) is at most ``pack.disk_budget`` times the feature file;
the stats give the chosen ``(m, s)``, the exact bytes read per training epoch and the disk blow-up.

With a segment window (``plan.disk_cache_buffer_fraction`` / ``_bytes`` > 0 and disk caches in the store), the
(m, s) search counts disk-cache reads through the window and the pack writes the window's per-batch schedule
(:mod:`pipelines.methods.policies.diskgnn.window`, :mod:`storage_kernels.windowstore`).

Features: GPU cache, CPU cache, the segment's disk cache (page-merged aligned reads; through the window's
buffer when scheduled), the batch's chunk (one aligned direct read), the feature file (block-merged aligned
reads) -- :class:`trainer.features.PackedFeatures`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.core.confine import memory_limit, resident_bytes
from pipelines.core.formatting import format_bytes
from pipelines.methods.policies.base import FeatureInputs, PackInputs, PlanInputs, Policy, TierPlan, register_policy
from pipelines.methods.policies.diskgnn.layout import finish, pack_chunks, write_addresses, write_layout
from pipelines.methods.policies.diskgnn.search import (
    SEARCH_STAT,
    search,
    search_key,
    search_record,
    training_trace,
)
from pipelines.methods.policies.diskgnn.settings import DiskGNNPackSettings, DiskGNNPlanSettings
from pipelines.methods.policies.diskgnn.shards import DiskGNNShards
from pipelines.methods.policies.reads import EpochReads, uncached_chunks
from pipelines.methods.policies.sharded import ShardedPack
from pipelines.methods.policies.tiers import frequency_plan
from storage_kernels.packstore import CHUNK_OFFSET, CHUNK_ROWS, PACKED_BIN, chunk_bytes, store_budget_bytes

if TYPE_CHECKING:
    from pipelines.core.sections import RunConfig
    from trainer.features import FeatureSource

__all__ = ["SEARCH_BYTES_PER_ENTRY", "SEARCH_MEMORY_SHARE", "DiskGNN"]

#: Bytes the (m, s) search holds per uncached read of the trace (node, position, one segment size's pair keys,
#: signatures and ranks, the bounds). Measured: 133 on a 300k-node graph of 16 float32 columns, 2.6M entries
#: (peak RSS +345 MB; issue 29), with a margin.
SEARCH_BYTES_PER_ENTRY = 160
#: The share of the memory left to this process (its limit less what it holds) the search may take.
SEARCH_MEMORY_SHARE = 0.75


@register_policy
class DiskGNN(Policy):
    name = "diskgnn"
    description = ("GPU/CPU caches chosen from the sampled trace; per segment of training batches a disk cache "
                   "(rows read together side by side, read through a Belady-scheduled RAM window) sized by the "
                   "(m, s) search under pack.disk_budget; each batch's other rows packed in one aligned chunk.")
    settings = {"plan": DiskGNNPlanSettings, "pack": DiskGNNPackSettings}

    def resident_bytes(self, cfg: RunConfig, feature_bytes: int) -> dict[str, int]:
        return {**super().resident_bytes(cfg, feature_bytes),
                "plan.disk_cache_buffer": int(cfg.plan.disk_cache_buffer(feature_bytes))}  # the segment window

    def plan(self, inputs: PlanInputs) -> TierPlan:
        feature_bytes = inputs.graph.num_nodes * inputs.graph.row_bytes
        return frequency_plan(inputs, inputs.cfg.plan.budgets(feature_bytes))

    def auto_variants(self, cfg: RunConfig, feature_bytes: int, reads: EpochReads) -> list[dict[str, Any]]:
        """Under pure packing, the segment window's RAM given to the CPU cache instead (the window serves only
        segment disk caches, which pure packing has none of; with them, the window is what reads them once)."""
        window = int(cfg.plan.disk_cache_buffer(feature_bytes))
        if window <= 0 or not reads.detail.get("pure_packing"):
            return []
        cpu = int(cfg.plan.budgets(feature_bytes)["cpu"])
        return [{"plan.cpu_cache_bytes": cpu + window, "plan.disk_cache_buffer_bytes": 0}]

    def predict_reads(self, inputs: PlanInputs, plan: TierPlan) -> EpochReads:
        """The pack's own read model (:mod:`pipelines.methods.policies.diskgnn.search`): with pure packing, one
        aligned chunk read per batch; under a disk budget that needs segment caches, the (m, s) search's exact
        read bytes and two requests a batch (its chunk, its segment cache's page-merged blocks)."""
        graph, cfg, samples = inputs.graph, inputs.cfg, inputs.samples
        row_bytes, epochs = graph.row_bytes, max(samples.epochs, 1)
        per_batch = [np.diff(ptr) - np.add.reduceat(rows < 0, ptr[:-1]) if len(rows) else np.diff(ptr)
                     for rows, ptr in uncached_chunks(inputs, plan)]  # uncached rows per batch, streamed
        uncached = np.concatenate(per_batch) if per_batch else np.zeros(0, np.int64)
        pure = int(chunk_bytes(uncached, row_bytes).sum())
        store = store_budget_bytes(cfg.pack.disk_budget, graph.num_nodes * row_bytes)
        budget = None if store is None else int(store) - (len(plan.gpu_nodes) + len(plan.cpu_nodes)) * row_bytes
        if budget is None or pure <= budget:
            return EpochReads(pure // epochs, len(uncached) // epochs, model="one aligned chunk read per batch",
                              detail={"pure_packing": True})
        entries = int(uncached.sum())
        left = max(memory_limit() - resident_bytes(), 0)
        if entries * SEARCH_BYTES_PER_ENTRY > left * SEARCH_MEMORY_SHARE:  # it holds the whole trace, and more
            raise ValueError(f"'pack.disk_budget' {cfg.pack.disk_budget} expected to hold pure packing, or a trace "
                             f"small enough for the (m, s) search in memory (got {entries:,} uncached reads over the "
                             f"sampled epochs, about {format_bytes(entries * SEARCH_BYTES_PER_ENTRY)} to search, "
                             f"more than {SEARCH_MEMORY_SHARE:.0%} of the {format_bytes(left)} this process has "
                             "left): raise pack.disk_budget")
        trace = training_trace(samples, plan.tier)  # segment caches: the pack's own search, its memory
        buffer_rows = cfg.plan.disk_cache_buffer(graph.num_nodes * row_bytes) // row_bytes
        choice = search(trace, row_bytes, max(budget, 0), k=cfg.pack.minhash_k, num_threads=cfg.pack.num_threads,
                        buffer_rows=buffer_rows, order=cfg.pack.disk_cache_order, gap_blocks=cfg.pack.read_gap_blocks)
        # the pack lays this choice out without searching again when its own inputs are these
        plan.stats[SEARCH_STAT] = search_record(choice, search_key(
            max(budget, 0), row_bytes, buffer_rows, cfg.pack.minhash_k, cfg.pack.disk_cache_order,
            cfg.pack.read_gap_blocks, samples.num_batches))
        return EpochReads(choice.read_bytes // epochs, 2 * trace.num_batches // epochs,
                          model=f"segment caches (m={choice.segment_batches}, s={choice.cache_rows}) + chunks")

    def pack(self, inputs: PackInputs) -> dict[str, Any]:
        # the global part, then every batch (pipelines.shards.pack runs the batches in shards instead)
        layout = write_layout(inputs)
        samples, builder = inputs.samples, inputs.builder
        tier, slot = np.asarray(inputs.plan.array("tier.npy")), np.asarray(inputs.plan.array("slot.npy"))
        packed_ids = write_addresses(builder, samples, tier, slot, layout, 0, samples.num_batches,
                                     inputs.plan.path, inputs.progress)
        packed_path = builder.add_file(PACKED_BIN)
        chunk_offsets, chunk_rows = pack_chunks(inputs.graph, inputs.cfg, packed_ids, packed_path)
        builder.save_array(CHUNK_OFFSET, chunk_offsets)
        builder.save_array(CHUNK_ROWS, chunk_rows)
        return finish(layout, inputs.graph, inputs.cfg, chunk_rows, packed_path.stat().st_size)

    def sharded_pack(self) -> ShardedPack:
        return DiskGNNShards()

    def features(self, inputs: FeatureInputs) -> FeatureSource:
        from trainer.features import PackedFeatures

        if inputs.pack is None:
            raise ValueError(f"'policy' {self.name} expected its pack artifact (got None)")
        # Evaluation batches are not packed: their uncached rows come from the ordered feature file.
        return PackedFeatures(inputs.pack.path, inputs.samples, device=inputs.device,
                              features_path=inputs.reorder.file("features.npy"))

