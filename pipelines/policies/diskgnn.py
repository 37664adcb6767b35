"""``diskgnn``: DiskGNN's four-level feature store (the default policy).

Plan: a GPU and a CPU cache of ``plan.*_cache_fraction`` (or ``*_cache_bytes``) filled with the rows the
sampled training trace reads most (:func:`pipelines.policies.tiers.frequency_plan`).

Pack (``storage_kernels.packstore`` layout):

1. the cache blocks in plan order;
2. the ``(m, s)`` search under ``pack.disk_budget`` (:func:`pipelines.policies.diskcache.search`): training
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
(:mod:`pipelines.policies.window`, :mod:`storage_kernels.windowstore`).

Features: GPU cache, CPU cache, the segment's disk cache (page-merged aligned reads; through the window's
buffer when scheduled), the batch's chunk (one aligned direct read), the feature file (block-merged aligned
reads) -- :class:`trainer.features.PackedFeatures`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.policies.base import FeatureInputs, PackInputs, PlanInputs, Policy, TierPlan, register_policy
from pipelines.policies.diskcache import (
    cache_layout,
    evaluate,
    search,
    segment_lookup,
    training_trace,
    write_segment_caches,
)
from pipelines.policies.tiers import frequency_plan
from pipelines.policies.window import buffer_rows_for
from storage_kernels import kernels
from storage_kernels.packstore import (
    ADDR_SLOT,
    ADDR_TIER,
    BATCH_SEGMENT,
    CHUNK_ALIGN,
    CHUNK_OFFSET,
    CHUNK_ROWS,
    DISK_CACHE_BIN,
    PACKED_BIN,
    SEGMENT_OFFSET,
    SEGMENT_ROWS,
    batch_addresses,
)
from storage_kernels.windowstore import write_window

if TYPE_CHECKING:
    from trainer.features import FeatureSource

__all__ = ["DiskGNN"]


@register_policy
class DiskGNN(Policy):
    name = "diskgnn"
    description = ("GPU/CPU caches chosen from the sampled trace; per segment of training batches a disk cache "
                   "(rows read together side by side, read through a Belady-scheduled RAM window) sized by the "
                   "(m, s) search under pack.disk_budget; each batch's other rows packed in one aligned chunk.")
    reads = frozenset({"disk_budget", "minhash_k", "disk_cache_order", "disk_cache_buffer_fraction",
                       "disk_cache_buffer_bytes"})

    def plan(self, inputs: PlanInputs) -> TierPlan:
        feature_bytes = inputs.graph.num_nodes * inputs.graph.row_bytes
        return frequency_plan(inputs, inputs.cfg.plan.budgets(feature_bytes))

    def pack(self, inputs: PackInputs) -> dict[str, Any]:
        graph, samples, plan, builder, cfg = inputs.graph, inputs.samples, inputs.plan, inputs.builder, inputs.cfg
        progress = inputs.progress
        tier, slot = np.asarray(plan.array("tier.npy")), np.asarray(plan.array("slot.npy"))
        row_bytes = graph.row_bytes
        feature_bytes = graph.num_nodes * row_bytes

        # Cache blocks: rows in plan order (node lists are sorted, so the feature file is read forwards).
        cache_bytes = 0
        for name in ("gpu", "cpu"):
            cache_nodes = np.asarray(plan.array(f"{name}_nodes.npy"))
            block = np.empty((len(cache_nodes), graph.feature_dim), dtype=np.float32)
            if len(cache_nodes):
                kernels.gather_rows(graph.features, cache_nodes, block)
            builder.save_array(f"{name}_cache.npy", block)
            cache_bytes += block.nbytes

        # The (m, s) search under the disk budget, then the segment disk caches.
        trace = training_trace(samples, tier)
        budget = cfg.pack.disk_budget
        budget_bytes = None if budget is None else int(budget * feature_bytes) - cache_bytes
        if budget_bytes is not None and budget_bytes < 0:
            raise ValueError(f"'pack.disk_budget' expected at least the GPU/CPU cache blocks' "
                             f"{cache_bytes / feature_bytes:.4f} x the feature bytes (got {budget})")
        if progress:
            progress("pack: searching segment disk caches", 0, 1)
        buffer_bytes = cfg.plan.disk_cache_buffer(feature_bytes)
        choice = search(trace, row_bytes, budget_bytes, k=cfg.pack.minhash_k, num_threads=cfg.pack.num_threads,
                        buffer_rows=buffer_bytes // row_bytes, order=cfg.pack.disk_cache_order)
        segs = choice.segments
        caches = cache_layout(segs, choice.cache_rows)
        window_rows = buffer_rows_for(buffer_bytes, row_bytes, caches.segment_rows)  # 0: no disk cache or no buffer
        cost = evaluate(trace, segs, caches, row_bytes, cfg.pack.num_threads, window_rows)
        if cost.window is not None:  # the segment window's schedule, read by WindowedDiskCacheTier
            write_window(builder, cost.window, trace.batches, samples.num_batches, row_bytes)
        disk_path = builder.add_file(DISK_CACHE_BIN)
        segment_offset = write_segment_caches(graph.features, segs, caches, disk_path,
                                              cfg.pack.memory_mb * 2**20, cfg.pack.num_threads)
        builder.save_array(SEGMENT_OFFSET, segment_offset)
        builder.save_array(SEGMENT_ROWS, caches.segment_rows)
        batch_segment = np.full(samples.num_batches, -1, dtype=np.int64)
        batch_segment[trace.batches] = np.arange(trace.num_batches) // segs.m
        builder.save_array(BATCH_SEGMENT, batch_segment)

        # Address tables, aligned with the sample set's nodes.npy; collect each training batch's packed ids.
        addr_tier = builder.array_writer(ADDR_TIER, np.int8)
        addr_slot = builder.array_writer(ADDR_SLOT, np.int64)
        packed_ids: list[np.ndarray] = []
        lookup: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for b in range(samples.num_batches):
            start, stop = samples.node_range(b)
            g = int(batch_segment[b])
            if g >= 0 and g not in lookup:
                lookup = {g: segment_lookup(segs, caches, g)}  # batches of a segment are mostly adjacent
            disk_nodes, disk_slots = lookup[g] if g >= 0 else (None, None)
            try:
                node_tier, node_slot, on_disk = batch_addresses(samples.nodes[start:stop], tier, slot, g >= 0,
                                                                disk_nodes, disk_slots)
            except ValueError as e:  # name the plan artifact and the batch
                raise ValueError(f"{plan.path}, batch {b}: {e}") from e
            addr_tier.append(node_tier)
            addr_slot.append(node_slot)
            packed_ids.append(on_disk)
            if progress:
                progress("pack: address tables", b + 1, samples.num_batches)
        addr_tier.close()
        addr_slot.close()

        # Batched packing: one sequential pass over the feature file.
        partition_rows = max(1, cfg.pack.memory_mb * 2**20 // row_bytes)
        packed_path = builder.add_file(PACKED_BIN)
        chunk_offsets, chunk_rows = kernels.pack_batches(
            graph.features, packed_ids, packed_path, partition_rows=partition_rows,
            chunk_align=CHUNK_ALIGN, num_threads=cfg.pack.num_threads,
        )
        builder.save_array(CHUNK_OFFSET, np.asarray(chunk_offsets, dtype=np.int64))
        builder.save_array(CHUNK_ROWS, np.asarray(chunk_rows, dtype=np.int64))

        packed_bytes, disk_cache_bytes = packed_path.stat().st_size, disk_path.stat().st_size
        # the model counted what was written: chunk rows and file sizes agree with it
        if (not np.array_equal(np.asarray(chunk_rows)[trace.batches], cost.chunk_rows)
                or packed_bytes + disk_cache_bytes != cost.store_bytes):
            raise RuntimeError(f"'pack' expected the layout the (m, s) search counted ({cost.store_bytes} bytes of "
                               f"disk caches and chunks) (got {packed_bytes + disk_cache_bytes} bytes written)")
        store_bytes = cache_bytes + cost.store_bytes
        epochs = max(int(trace.epoch.max(initial=-1)) + 1, 1)
        epoch0 = trace.epoch == 0
        return {
            "layout": "packed",
            "num_batches": samples.num_batches,
            "packed_rows": int(np.sum(chunk_rows)),
            "packed_bytes": packed_bytes,
            "disk_cache_bytes": disk_cache_bytes,
            "disk_cache_rows": int(caches.segment_rows.sum()),
            "cache_block_bytes": cache_bytes,
            "store_bytes": store_bytes,
            "disk_budget": budget,
            "disk_blowup": store_bytes / feature_bytes if feature_bytes else 0.0,
            "segment_batches": segs.m,  # m: training batches per segment
            "segments": segs.num_segments,
            "segment_cache_rows": choice.cache_rows,  # s: disk-cache rows per segment (at most)
            "epoch_read_bytes": int(cost.read_bytes[epoch0].sum()),  # sampled epoch 0, exact
            "mean_epoch_read_bytes": cost.total_read_bytes / epochs,  # what the search minimised, per epoch
            "epoch_read_bytes_disk_cache": int(cost.cache_blocks[epoch0].sum()) * CHUNK_ALIGN,
            "window_rows": window_rows,  # the segment window's buffer (0: none)
            "window_bytes": window_rows * row_bytes,
            "epoch_window_hits": int(cost.window.hits[epoch0].sum()) if cost.window is not None else 0,
            "epoch_disk_cache_rows": int(trace.rows[epoch0].sum() - cost.chunk_rows[epoch0].sum()),
            "search_candidates": choice.candidates,
            "search_feasible": choice.feasible,
            "search_evaluated": choice.evaluated,
            "partition_rows": partition_rows,
            "partitions": -(-graph.num_nodes // partition_rows),
        }

    def features(self, inputs: FeatureInputs) -> FeatureSource:
        from trainer.features import PackedFeatures

        if inputs.pack is None:
            raise ValueError(f"'policy' {self.name} expected its pack artifact (got None)")
        # Evaluation batches are not packed: their uncached rows come from the ordered feature file.
        return PackedFeatures(inputs.pack.path, inputs.samples, device=inputs.device,
                              features_path=inputs.reorder.file("features.npy"))
