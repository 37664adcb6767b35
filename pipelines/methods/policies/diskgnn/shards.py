"""``diskgnn``'s pack run partitioned (:mod:`pipelines.shards.pack`): the global layout in the prep (cache blocks,
the (m, s) search, the segment disk caches, the window schedule); units are the sample set's batches, a shard
writes their address tables and packed chunks; the merge copies the prep's files and concatenates the shards'.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.methods.policies.diskgnn import layout as disk
from pipelines.methods.policies.inputs import PackInputs
from pipelines.methods.policies.sharded import ShardedPack, append_rows, copy_file
from storage_kernels.packstore import ADDR_SLOT, ADDR_TIER, CHUNK_OFFSET, CHUNK_ROWS, PACKED_BIN

if TYPE_CHECKING:
    from storage_kernels.store import Artifact

__all__ = ["DiskGNNShards"]


class DiskGNNShards(ShardedPack):
    """``diskgnn``: the global layout in the prep; units are batches (address tables and packed chunks)."""

    def prepare(self, inputs: PackInputs) -> int:
        disk.save_layout(inputs.builder, disk.write_layout(inputs))
        return inputs.samples.num_batches

    def shard(self, inputs: PackInputs, prep: Artifact, lo: int, hi: int) -> dict[str, Any]:
        layout, builder = disk.load_layout(prep), inputs.builder
        tier, slot = np.asarray(inputs.plan.array("tier.npy")), np.asarray(inputs.plan.array("slot.npy"))
        packed_ids = disk.write_addresses(builder, inputs.samples, tier, slot, layout, lo, hi, inputs.plan.path,
                                          inputs.progress)
        path = builder.add_file(PACKED_BIN)
        offsets, rows = disk.pack_chunks(inputs.graph, inputs.cfg, packed_ids, path)
        builder.save_array(CHUNK_OFFSET, offsets)  # from the shard's own first chunk
        builder.save_array(CHUNK_ROWS, rows)
        return {"packed_rows": int(rows.sum()), "packed_bytes": path.stat().st_size}

    def merge(self, inputs: PackInputs, prep: Artifact, shards: Sequence[Artifact]) -> dict[str, Any]:
        layout, builder = disk.load_layout(prep), inputs.builder
        for name in sorted(prep.files):
            if name not in disk.PREP_FILES:
                copy_file(builder, name, [prep.file(name)])
        for name, dtype in ((ADDR_TIER, np.int8), (ADDR_SLOT, np.int64)):
            writer = builder.array_writer(name, dtype)
            for shard in shards:
                append_rows(writer, shard.array(name))
            writer.close()
        offsets, rows, base = [], [], 0
        for shard in shards:
            offsets.append(np.asarray(shard.array(CHUNK_OFFSET), dtype=np.int64) + base)
            rows.append(np.asarray(shard.array(CHUNK_ROWS), dtype=np.int64))
            base += shard.file(PACKED_BIN).stat().st_size  # every chunk is padded to CHUNK_ALIGN
        path = copy_file(builder, PACKED_BIN, [shard.file(PACKED_BIN) for shard in shards])
        chunk_rows = np.concatenate(rows) if rows else np.empty(0, np.int64)
        if len(chunk_rows) != inputs.samples.num_batches:
            raise ValueError(f"'pack shards' expected chunks of all {inputs.samples.num_batches} batches (got "
                             f"{len(chunk_rows)})")
        builder.save_array(CHUNK_OFFSET, np.concatenate(offsets))
        builder.save_array(CHUNK_ROWS, chunk_rows)
        return disk.finish(layout, inputs.graph, inputs.cfg, chunk_rows, os.path.getsize(path))
