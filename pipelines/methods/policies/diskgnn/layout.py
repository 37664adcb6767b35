"""The ``diskgnn`` pack in three parts, so that it can also run partitioned (:mod:`pipelines.shards.pack`).

1. :func:`write_layout`, global: the cache blocks, the (m, s) search, the segment disk caches, the window
   schedule and ``batch_segment.npy``; returns the :class:`DiskLayout` every batch's addresses depend on.
2. :func:`write_addresses` and :func:`pack_chunks`, per batch range: the address tables of the batches and
   their packed chunks (the sequential pass over the feature file, ``kernels.pack_batches``).
3. :func:`finish`: checks what was written against the cost model and returns the pack's statistics.

:meth:`pipelines.methods.policies.diskgnn.policy.DiskGNN.pack` runs them in order over every batch; the partitioned
pack runs
(1) once, (2) per shard of batches, and concatenates the shards (chunks are padded to ``CHUNK_ALIGN``, so the
chunk files of consecutive batch ranges concatenate into the one file, offsets shifted by what precedes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.methods.policies.base import PackInputs
from pipelines.methods.policies.cacheblocks import write_cache_rows
from pipelines.methods.policies.diskgnn.search import (
    SEARCH_STAT,
    cache_layout,
    evaluate,
    recorded_choice,
    search,
    search_key,
    training_trace,
    write_segment_caches,
)
from pipelines.methods.policies.diskgnn.window import buffer_rows_for
from storage_kernels import kernels
from storage_kernels.packstore import (
    ADDR_SLOT,
    ADDR_TIER,
    BATCH_SEGMENT,
    CHUNK_ALIGN,
    DISK_CACHE_BIN,
    SEGMENT_OFFSET,
    SEGMENT_ROWS,
    batch_addresses,
    store_budget_bytes,
)
from storage_kernels.windowstore import write_window

if TYPE_CHECKING:
    from pipelines.core.graphio import GraphArrays
    from pipelines.core.progress import Progress
    from pipelines.core.sections import RunConfig
    from storage_kernels.sampleset import SampleSet
    from storage_kernels.store import Artifact, ArtifactBuilder

__all__ = ["PREP_FILES", "DiskLayout", "finish", "load_layout", "pack_chunks", "save_layout", "write_addresses",
           "write_layout"]

#: The files :func:`save_layout` adds to a prep artifact besides the pack's own (prefixed ``prep_``).
PREP_FILES = ("prep_batch_segment.npy", "prep_lookup_ptr.npy", "prep_lookup_nodes.npy", "prep_lookup_slots.npy",
              "prep_trace_batches.npy", "prep_chunk_rows.npy")


@dataclass(frozen=True)
class DiskLayout:
    """What the global part decided: the segment of every batch (-1: not packed), every segment's disk-cache
    lookup (its cached nodes sorted by id, ``lookup_nodes[lookup_ptr[g]:lookup_ptr[g + 1]]``, and their rows in
    its cache), the training batches in trace order with the chunk rows the cost model counted for them, and
    the statistics known before any chunk is written (``store_bytes``: disk caches + chunks, modelled)."""

    batch_segment: np.ndarray
    lookup_ptr: np.ndarray
    lookup_nodes: np.ndarray
    lookup_slots: np.ndarray
    trace_batches: np.ndarray
    chunk_rows: np.ndarray
    store_bytes: int
    stats: dict[str, Any]

    def lookup(self, g: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Segment ``g``'s ``(disk_nodes, disk_slots)`` for ``batch_addresses`` (None, None for ``g < 0``)."""
        if g < 0:
            return None, None
        lo, hi = int(self.lookup_ptr[g]), int(self.lookup_ptr[g + 1])
        return self.lookup_nodes[lo:hi], self.lookup_slots[lo:hi]


def write_layout(inputs: PackInputs) -> DiskLayout:
    """Write the global part of the diskgnn pack into ``inputs.builder`` (module docstring, part 1)."""
    graph, samples, plan, builder, cfg = inputs.graph, inputs.samples, inputs.plan, inputs.builder, inputs.cfg
    tier = np.asarray(plan.array("tier.npy"))
    row_bytes = graph.row_bytes
    feature_bytes = graph.num_nodes * row_bytes

    # Cache blocks: rows in plan order (node lists are sorted, so the feature file is read forwards).
    cache_bytes = 0
    for name in ("gpu", "cpu"):
        cache_bytes += write_cache_rows(builder, f"{name}_cache.npy", graph.features,
                                        np.asarray(plan.array(f"{name}_nodes.npy")), cfg.pack.memory_mb << 20)

    # The (m, s) search under the disk budget, then the segment disk caches.
    trace = training_trace(samples, tier)
    budget = cfg.pack.disk_budget
    store_budget = store_budget_bytes(budget, feature_bytes)  # in whole blocks: a tiny file is no exception
    budget_bytes = None if store_budget is None else int(store_budget) - cache_bytes
    if budget_bytes is not None and budget_bytes < 0:
        raise ValueError(f"'pack.disk_budget' expected at least the GPU/CPU cache blocks' "
                         f"{cache_bytes / feature_bytes:.4f} x the feature bytes (got {budget})")
    if inputs.progress:
        inputs.progress("pack: searching segment disk caches", 0, 1)
    buffer_bytes = cfg.plan.disk_cache_buffer(feature_bytes)
    key = search_key(budget_bytes, row_bytes, buffer_bytes // row_bytes, cfg.pack.minhash_k,
                     cfg.pack.disk_cache_order, cfg.pack.read_gap_blocks, samples.num_batches)
    # policy=auto searched already to predict this plan's reads: the same inputs, the same choice
    choice = recorded_choice(plan.stats.get(SEARCH_STAT), key, trace, cfg.pack.num_threads) or search(
        trace, row_bytes, budget_bytes, k=cfg.pack.minhash_k, num_threads=cfg.pack.num_threads,
        buffer_rows=buffer_bytes // row_bytes, order=cfg.pack.disk_cache_order, gap_blocks=cfg.pack.read_gap_blocks)
    segs = choice.segments
    caches = cache_layout(segs, choice.cache_rows)
    window_rows = buffer_rows_for(buffer_bytes, row_bytes, caches.segment_rows)  # 0: no disk cache or no buffer
    cost = evaluate(trace, segs, caches, row_bytes, cfg.pack.num_threads, window_rows, cfg.pack.read_gap_blocks)
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

    # Every segment's lookup at once (pairs are sorted by (segment, node): each segment's slice is by id).
    keep = caches.pair_slot >= 0
    lookup_ptr = np.zeros(segs.num_segments + 1, dtype=np.int64)
    np.cumsum(np.bincount(segs.pair_segment[keep], minlength=segs.num_segments), out=lookup_ptr[1:])
    epochs = max(int(trace.epoch.max(initial=-1)) + 1, 1)
    epoch0 = trace.epoch == 0
    stats = {
        "layout": "packed",
        "num_batches": samples.num_batches,
        "disk_cache_bytes": disk_path.stat().st_size,
        "disk_cache_rows": int(caches.segment_rows.sum()),
        "cache_block_bytes": cache_bytes,
        "store_bytes": cache_bytes + cost.store_bytes,
        "disk_budget": budget,
        "disk_blowup": (cache_bytes + cost.store_bytes) / feature_bytes if feature_bytes else 0.0,
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
    }
    return DiskLayout(batch_segment, lookup_ptr, segs.pair_node[keep].astype(np.int64),
                      caches.pair_slot[keep].astype(np.int64), np.asarray(trace.batches, np.int64),
                      np.asarray(cost.chunk_rows, np.int64), int(cost.store_bytes), stats)


def save_layout(builder: ArtifactBuilder, layout: DiskLayout) -> None:
    """Add ``layout``'s tables (:data:`PREP_FILES`) and statistics (``stats['diskgnn']``) to a prep artifact."""
    arrays = (layout.batch_segment, layout.lookup_ptr, layout.lookup_nodes, layout.lookup_slots,
              layout.trace_batches, layout.chunk_rows)
    for name, array in zip(PREP_FILES, arrays, strict=True):
        builder.save_array(name, array)
    builder.stats["diskgnn"] = {**layout.stats, "modelled_store_bytes": layout.store_bytes}


def load_layout(prep: Artifact) -> DiskLayout:
    """The :class:`DiskLayout` :func:`save_layout` stored in ``prep`` (``ValueError`` naming it otherwise)."""
    stats = dict(prep.stats.get("diskgnn") or {})
    missing = [n for n in PREP_FILES if n not in prep.files]
    if "modelled_store_bytes" not in stats or missing:
        raise ValueError(f"'{prep.path}' expected a diskgnn pack prep (stats 'diskgnn' and {', '.join(PREP_FILES)}) "
                         f"(got {'no stats' if 'modelled_store_bytes' not in stats else 'no ' + ', '.join(missing)})")
    store_bytes = int(stats.pop("modelled_store_bytes"))
    arrays = [np.asarray(prep.array(name), dtype=np.int64) for name in PREP_FILES]
    return DiskLayout(*arrays, store_bytes=store_bytes, stats=stats)


def write_addresses(builder: ArtifactBuilder, samples: SampleSet, tier: np.ndarray, slot: np.ndarray,
                    layout: DiskLayout, lo: int, hi: int, plan_path: Path,
                    progress: Progress | None = None) -> list[np.ndarray]:
    """Write the address tables of batches ``[lo, hi)`` (aligned with their nodes in the sample set) into
    ``builder``; returns each batch's packed node ids (sorted; empty for batches that are not packed)."""
    addr_tier = builder.array_writer(ADDR_TIER, np.int8)
    addr_slot = builder.array_writer(ADDR_SLOT, np.int64)
    packed_ids: list[np.ndarray] = []
    for b in range(lo, hi):
        start, stop = samples.node_range(b)
        g = int(layout.batch_segment[b])
        disk_nodes, disk_slots = layout.lookup(g)
        try:
            node_tier, node_slot, on_disk = batch_addresses(samples.nodes[start:stop], tier, slot, g >= 0,
                                                            disk_nodes, disk_slots)
        except ValueError as e:  # name the plan artifact and the batch
            raise ValueError(f"{plan_path}, batch {b}: {e}") from e
        addr_tier.append(node_tier)
        addr_slot.append(node_slot)
        packed_ids.append(on_disk)
        if progress:
            progress("pack: address tables", b + 1 - lo, hi - lo)
    addr_tier.close()
    addr_slot.close()
    return packed_ids


def pack_chunks(graph: GraphArrays, cfg: RunConfig, packed_ids: list[np.ndarray], path: Path
                ) -> tuple[np.ndarray, np.ndarray]:
    """Batched packing: every batch's packed rows as one aligned chunk of ``path``, in one sequential pass over
    the feature file (partitions of ``pack.memory_mb``); ``(chunk_offsets, chunk_rows)`` int64."""
    offsets, rows = kernels.pack_batches(graph.features, packed_ids, path, partition_rows=partition_rows(graph, cfg),
                                         chunk_align=CHUNK_ALIGN, num_threads=cfg.pack.num_threads)
    return np.asarray(offsets, dtype=np.int64), np.asarray(rows, dtype=np.int64)


def partition_rows(graph: GraphArrays, cfg: RunConfig) -> int:
    """Feature rows per step of the packing pass (``pack.memory_mb``)."""
    return max(1, cfg.pack.memory_mb * 2**20 // graph.row_bytes)


def finish(layout: DiskLayout, graph: GraphArrays, cfg: RunConfig, chunk_rows: np.ndarray,
           packed_bytes: int) -> dict[str, Any]:
    """The pack's statistics, once every chunk is written (``RuntimeError`` if the chunks are not the ones the
    (m, s) search counted)."""
    stats = layout.stats
    written = packed_bytes + int(stats["disk_cache_bytes"])
    if not np.array_equal(np.asarray(chunk_rows)[layout.trace_batches], layout.chunk_rows) \
            or written != layout.store_bytes:
        raise RuntimeError(f"'pack' expected the layout the (m, s) search counted ({layout.store_bytes} bytes of "
                           f"disk caches and chunks) (got {written} bytes written)")
    rows = partition_rows(graph, cfg)
    return {**stats, "packed_rows": int(np.sum(chunk_rows)), "packed_bytes": packed_bytes, "partition_rows": rows,
            "partitions": -(-graph.num_nodes // rows)}
