"""Pack stage: cache blocks, per-batch packed chunks (DiskGNN batched packing) and address tables.

Each training batch's packed rows (its uncached nodes, sorted by id) are laid out contiguously in
``packed.bin`` at a 4096-aligned offset, so the trainer fetches a batch's disk features with one
sequential direct read. Evaluation batches are not packed (``chunk_rows`` 0): their uncached nodes are
addressed in the unpacked feature file (``TIER_FILE``, slot = node id), see ``plan``.
Batched packing streams the feature file once, partition by partition, appending to every batch's chunk
(``kernels.pack_batches``). The address tables say, for every node of every batch, which tier holds it and
at which row, so assembly needs no lookups at train time.
"""

from __future__ import annotations

import numpy as np

from pipelines.config import PipelineConfig
from pipelines.stages.common import Progress, StageResult, materialize
from pipelines.stages.graphio import load_graph
from pipelines.stages.plan import TIER_FILE, TIER_PACKED
from storage_kernels import kernels
from storage_kernels.arrays import align_up
from storage_kernels.sampleset import SampleSet
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["FORMAT_VERSION", "CHUNK_ALIGN", "run"]

FORMAT_VERSION = 1
CHUNK_ALIGN = 4096


def run(store: ArtifactStore, cfg: PipelineConfig, *, ordering: Artifact, samples: Artifact, plan: Artifact,
        progress: Progress | None = None) -> StageResult:
    """Write the ``packed`` artifact (layout in ``docs/CONTRACTS.md``)."""
    params = {"chunk_align": CHUNK_ALIGN}  # memory_mb and threads change speed, not content

    def build(builder: ArtifactBuilder) -> None:
        graph = load_graph(ordering)
        sample_set = SampleSet(samples.path)
        tier = np.asarray(plan.array("tier.npy"))
        slot = np.asarray(plan.array("slot.npy"))
        row_bytes = graph.row_bytes

        # Cache blocks: rows in plan order (node lists are sorted, so the feature file is read forwards).
        for name in ("gpu", "cpu"):
            cache_nodes = np.asarray(plan.array(f"{name}_nodes.npy"))
            block = np.empty((len(cache_nodes), graph.feature_dim), dtype=np.float32)
            if len(cache_nodes):
                kernels.gather_rows(graph.features, cache_nodes, block)
            builder.save_array(f"{name}_cache.npy", block)

        # Address tables, aligned with the sample set's nodes.npy; collect each batch's packed ids.
        addr_tier = builder.array_writer("addr_tier.npy", np.int8)
        addr_slot = builder.array_writer("addr_slot.npy", np.int64)
        packed_ids: list[np.ndarray] = []
        is_train = np.zeros(sample_set.num_batches, dtype=bool)
        is_train[sample_set.batch_ids("train")] = True
        for b in range(sample_set.num_batches):
            start, stop = sample_set.node_range(b)
            nodes = np.asarray(sample_set.nodes[start:stop])
            node_tier = tier[nodes].copy()
            if np.any(node_tier < 0):
                bad = int(np.flatnonzero(node_tier < 0)[0])
                raise ValueError(f"'{plan.path}/tier.npy' expected a tier for node {int(nodes[bad])} of batch "
                                 f"{b} (got none: plan and samples disagree)")
            node_slot = slot[nodes].copy()
            uncached = node_tier >= TIER_PACKED
            if is_train[b]:
                node_tier[uncached] = TIER_PACKED
                on_disk = np.sort(nodes[uncached])
                node_slot[uncached] = np.searchsorted(on_disk, nodes[uncached])
            else:
                node_tier[uncached] = TIER_FILE
                node_slot[uncached] = nodes[uncached]
                on_disk = np.empty(0, dtype=np.int64)
            addr_tier.append(node_tier)
            addr_slot.append(node_slot)
            packed_ids.append(on_disk)
            if progress:
                progress("pack: address tables", b + 1, sample_set.num_batches)
        addr_tier.close()
        addr_slot.close()

        # Batched packing: one sequential pass over the feature file.
        partition_rows = max(1, cfg.pack.memory_mb * 2**20 // row_bytes)
        packed_path = builder.add_file("packed.bin")
        chunk_offsets, chunk_rows = kernels.pack_batches(
            graph.features, packed_ids, packed_path, partition_rows=partition_rows,
            chunk_align=CHUNK_ALIGN, num_threads=cfg.pack.num_threads,
        )
        builder.save_array("chunk_offset.npy", np.asarray(chunk_offsets, dtype=np.int64))
        builder.save_array("chunk_rows.npy", np.asarray(chunk_rows, dtype=np.int64))

        packed_rows = int(np.sum(chunk_rows))
        train_ids = sample_set.batch_ids("train", 0)
        epoch_chunk_bytes = int(sum(align_up(int(chunk_rows[b]) * row_bytes, CHUNK_ALIGN) for b in train_ids))
        feature_bytes = graph.num_nodes * row_bytes
        builder.stats.update(
            {
                "num_batches": sample_set.num_batches,
                "packed_rows": packed_rows,
                "packed_bytes": packed_path.stat().st_size,
                "disk_blowup": packed_path.stat().st_size / feature_bytes if feature_bytes else 0.0,
                "epoch_read_bytes": epoch_chunk_bytes,
                "partition_rows": partition_rows,
                "partitions": -(-graph.num_nodes // partition_rows),
            }
        )

    return materialize(store, cfg.dataset_name, "packed", FORMAT_VERSION, params,
                       {"ordering": ordering, "samples": samples, "plan": plan}, build)

