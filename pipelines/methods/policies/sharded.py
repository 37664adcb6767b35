"""A policy's pack split into a global part, shards of independent work and a merge (:mod:`pipelines.shards.pack`).

Which policies shard, and how:

- ``diskgnn``: the cache blocks, the (m, s) search, the segment disk caches and the window schedule are global
  (computed once, in the prep); the units are the sample set's batches: a shard writes its batches' address
  tables and packed chunks; the merge copies the prep's files and concatenates the shards'.
- ``ginex``: nothing is global but the trace; the units are superbatches (each one's Belady simulation is
  independent): a shard is the changeset store of its superbatches; the merge appends them in order.
- ``hyperbatch``: the units are the row groups of ``aligned.bin`` (the block-aligned rewrite of the feature file,
  the pack's byte work): a shard writes its groups, which is that byte range of the file; the merge
  concatenates them and computes the hyperbatch tables (global, but cheap: no feature bytes).
- every policy that lays nothing out (``in_memory``, ``mmap``, ``naive``): no units; the merge writes the
  (empty) layout.
- ``mariusgnn``, ``outre``: not shardable here (the partition file and its sets, the historical cache's
  schedule: passes over the whole feature file or trace);
  :func:`sharded_pack_for` raises, naming the policies that shard; materialize the unpartitioned ``pack`` asset instead.

Every merge writes the files and statistics the policy's own ``pack`` writes, byte for byte.
"""

from __future__ import annotations

import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.methods.policies import hyperbatch as hb
from pipelines.methods.policies.base import POLICIES, PackInputs, Policy
from pipelines.methods.policies.diskgnn import layout as disk
from pipelines.methods.policies.ginex import cache_rows, pack_stats
from storage_kernels import changesets as cs
from storage_kernels.alignedstore import ALIGNED_BIN, BlockLayout, write_aligned
from storage_kernels.packstore import ADDR_SLOT, ADDR_TIER, CHUNK_OFFSET, CHUNK_ROWS, PACKED_BIN

if TYPE_CHECKING:
    from storage_kernels.store import Artifact, ArtifactBuilder

__all__ = ["SHARDED", "ShardedPack", "sharded_pack_for"]

_COPY_ROWS = 1 << 22  # rows per append when concatenating shard arrays (bounds the merge's memory)


class ShardedPack(ABC):
    """How one policy's pack runs partitioned: :meth:`prepare` once, :meth:`shard` per range of its units,
    :meth:`merge` over every shard in order (each writes into ``inputs.builder``)."""

    @abstractmethod
    def prepare(self, inputs: PackInputs) -> int:
        """Write the global part into the prep artifact's builder; returns the number of units shards cut."""

    @abstractmethod
    def shard(self, inputs: PackInputs, prep: Artifact, lo: int, hi: int) -> dict[str, Any]:
        """Write units ``[lo, hi)`` into a shard artifact's builder; returns its statistics."""

    @abstractmethod
    def merge(self, inputs: PackInputs, prep: Artifact, shards: Sequence[Artifact]) -> dict[str, Any]:
        """Write the ``pack`` artifact from the prep and the shards (in order); returns what the policy's
        ``pack`` returns."""


def copy_file(builder: ArtifactBuilder, name: str, sources: Sequence[Path]) -> Path:
    """``name`` in ``builder``: the bytes of ``sources`` one after another (copied in 16 MiB pieces)."""
    path = builder.add_file(name)
    with open(path, "wb") as out:
        for source in sources:
            with open(source, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 24)  # large reads: no per-byte work in Python
    return path


def _append(writer: Any, array: np.ndarray) -> None:
    for lo in range(0, len(array), _COPY_ROWS):
        writer.append(np.asarray(array[lo : lo + _COPY_ROWS]))


class NoLayout(ShardedPack):
    """Policies that lay nothing out: no units, the merge writes what their ``pack`` writes (statistics)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def prepare(self, inputs: PackInputs) -> int:
        return 0

    def shard(self, inputs: PackInputs, prep: Artifact, lo: int, hi: int) -> dict[str, Any]:
        return {}

    def merge(self, inputs: PackInputs, prep: Artifact, shards: Sequence[Artifact]) -> dict[str, Any]:
        return self.policy.pack(inputs)


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
        for sb in cs.iter_changesets(inputs.samples, trace, ptr, graph.num_nodes, rows, cfg.pack.num_threads):
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
                _append(writer, shard.array(name))
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


class HyperbatchShards(ShardedPack):
    """``hyperbatch``: units are the row groups of ``aligned.bin`` (whole blocks each); a shard rewrites its
    groups' rows block-aligned, which is that byte range of the file; the merge concatenates them and writes the
    hyperbatch tables (global, from the samples and the layout)."""

    def _layout(self, inputs: PackInputs) -> BlockLayout:
        features = inputs.graph.features
        return BlockLayout(int(features.shape[0]), int(features.shape[1]) * 4)  # as write_aligned lays it out

    def prepare(self, inputs: PackInputs) -> int:
        layout = self._layout(inputs)
        return -(-layout.num_rows // layout.group_rows)

    def shard(self, inputs: PackInputs, prep: Artifact, lo: int, hi: int) -> dict[str, Any]:
        group = self._layout(inputs).group_rows
        features = inputs.graph.features
        first, stop = min(lo * group, len(features)), min(hi * group, len(features))
        path = inputs.builder.add_file(ALIGNED_BIN)
        part = write_aligned(features[first:stop], path, hb.partition_rows(inputs), inputs.cfg.pack.num_threads)
        return {"first_row": first, "rows": part.num_rows, "aligned_bytes": part.file_bytes}

    def merge(self, inputs: PackInputs, prep: Artifact, shards: Sequence[Artifact]) -> dict[str, Any]:
        layout = self._layout(inputs)
        path = copy_file(inputs.builder, ALIGNED_BIN, [shard.file(ALIGNED_BIN) for shard in shards])
        if os.path.getsize(path) != layout.file_bytes:
            raise ValueError(f"'pack shards' expected {layout.file_bytes} bytes of {ALIGNED_BIN} in all (got "
                             f"{os.path.getsize(path)})")
        return hb.write_tables(inputs, layout)


#: The sharded packs by policy name (policies that lay nothing out are handled by :class:`NoLayout`).
SHARDED: dict[str, type[ShardedPack]] = {"diskgnn": DiskGNNShards, "ginex": GinexShards,
                                          "hyperbatch": HyperbatchShards}


def sharded_pack_for(policy_name: str) -> ShardedPack:
    """The :class:`ShardedPack` of ``policy_name`` (``ValueError`` naming the shardable policies otherwise)."""
    policy = POLICIES.get(policy_name)()
    if type(policy).pack is Policy.pack:
        return NoLayout(policy)
    if policy_name not in SHARDED:
        shardable = sorted([*SHARDED, *(n for n in POLICIES.names() if POLICIES.get(n).pack is Policy.pack)])
        raise ValueError(f"'policy' expected one whose pack runs partitioned ({', '.join(shardable)}) (got "
                         f"{policy_name}: its pack is one global pass; materialize the unpartitioned pack asset)")
    return SHARDED[policy_name]()
