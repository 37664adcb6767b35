"""``diskgnn``: DiskGNN's static caches and batched packing (the default policy).

Plan: a GPU and a CPU cache of ``plan.*_cache_fraction`` (or ``*_cache_bytes``) filled with the rows the
sampled training trace reads most (:func:`pipelines.policies.tiers.frequency_plan`).

Pack (``storage_kernels.packstore`` layout): the cache blocks in plan order; per training batch, its
uncached rows sorted by id in one chunk of ``packed.bin`` at an aligned offset, written by one sequential
pass over the feature file (``kernels.pack_batches``, partitions of ``pack.memory_mb``); the address table of
every (batch, node). Evaluation batches are not packed: their uncached rows are addressed in the ordered
feature file.

Features: GPU cache, CPU cache, the batch's chunk (one aligned direct read), the feature file (block-merged
aligned reads) -- :class:`trainer.features.PackedFeatures`.

Not yet: DiskGNN's per-segment disk caches (MinHash-ordered) and the Alg. 2 search under a disk budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.policies.base import FeatureInputs, PackInputs, PlanInputs, Policy, TierPlan, register_policy
from pipelines.policies.tiers import frequency_plan
from storage_kernels import kernels
from storage_kernels.packstore import (
    ADDR_SLOT,
    ADDR_TIER,
    CHUNK_ALIGN,
    CHUNK_OFFSET,
    CHUNK_ROWS,
    PACKED_BIN,
    batch_addresses,
    chunk_bytes,
)

if TYPE_CHECKING:
    from trainer.features import FeatureSource

__all__ = ["DiskGNN"]


@register_policy
class DiskGNN(Policy):
    name = "diskgnn"
    description = ("GPU/CPU caches chosen from the sampled trace; each training batch's other rows packed in one "
                   "aligned chunk read with one direct read.")

    def plan(self, inputs: PlanInputs) -> TierPlan:
        feature_bytes = inputs.graph.num_nodes * inputs.graph.row_bytes
        return frequency_plan(inputs, inputs.cfg.plan.budgets(feature_bytes))

    def pack(self, inputs: PackInputs) -> dict[str, Any]:
        graph, samples, plan, builder = inputs.graph, inputs.samples, inputs.plan, inputs.builder
        progress = inputs.progress
        tier, slot = np.asarray(plan.array("tier.npy")), np.asarray(plan.array("slot.npy"))
        row_bytes = graph.row_bytes

        # Cache blocks: rows in plan order (node lists are sorted, so the feature file is read forwards).
        for name in ("gpu", "cpu"):
            cache_nodes = np.asarray(plan.array(f"{name}_nodes.npy"))
            block = np.empty((len(cache_nodes), graph.feature_dim), dtype=np.float32)
            if len(cache_nodes):
                kernels.gather_rows(graph.features, cache_nodes, block)
            builder.save_array(f"{name}_cache.npy", block)

        # Address tables, aligned with the sample set's nodes.npy; collect each training batch's packed ids.
        addr_tier = builder.array_writer(ADDR_TIER, np.int8)
        addr_slot = builder.array_writer(ADDR_SLOT, np.int64)
        packed_ids: list[np.ndarray] = []
        is_train = np.zeros(samples.num_batches, dtype=bool)
        is_train[samples.batch_ids("train")] = True
        for b in range(samples.num_batches):
            start, stop = samples.node_range(b)
            try:
                node_tier, node_slot, on_disk = batch_addresses(samples.nodes[start:stop], tier, slot, is_train[b])
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
        partition_rows = max(1, inputs.cfg.pack.memory_mb * 2**20 // row_bytes)
        packed_path = builder.add_file(PACKED_BIN)
        chunk_offsets, chunk_rows = kernels.pack_batches(
            graph.features, packed_ids, packed_path, partition_rows=partition_rows,
            chunk_align=CHUNK_ALIGN, num_threads=inputs.cfg.pack.num_threads,
        )
        builder.save_array(CHUNK_OFFSET, np.asarray(chunk_offsets, dtype=np.int64))
        builder.save_array(CHUNK_ROWS, np.asarray(chunk_rows, dtype=np.int64))

        train_ids = samples.batch_ids("train", 0)
        feature_bytes = graph.num_nodes * row_bytes
        packed_bytes = packed_path.stat().st_size
        return {
            "layout": "packed",
            "num_batches": samples.num_batches,
            "packed_rows": int(np.sum(chunk_rows)),
            "packed_bytes": packed_bytes,
            "disk_blowup": packed_bytes / feature_bytes if feature_bytes else 0.0,
            "epoch_read_bytes": int(chunk_bytes(np.asarray(chunk_rows)[train_ids], row_bytes).sum()),
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
