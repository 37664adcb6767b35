"""``hyperbatch``: AGNES-style hyperbatch training (design note ``docs``: ``seeds/hyperbatch.md``).

Plan: the hotset. Every node's score is ``degree x access frequency`` (the frequency counted over the sampled
training batches, the offline access trace); the highest scores that fit the CPU cache budget
(``plan.cpu_cache_fraction`` / ``plan.cpu_cache_bytes``, the budget every policy gets) are chosen greedily
(equal row sizes: the top scores, ties to the smaller id) and planned ``Tier.CPU``; the other nodes training
batches read are ``Tier.PACKED`` (read by their hyperbatch), nodes only evaluation batches read ``Tier.FILE``.
The GPU budget is not used (no GPU tier).

The predicted hit rate is not that hotset's share of the accesses: training keeps the planned hotset for the
first epoch only, then re-selects it from its own decayed counters (below), which know only the epochs already
trained, so rows the plan chose for later epochs are evicted (on a 200k-node graph with room for every accessed
row: 1.0 planned, 0.898 measured). :func:`simulate_hotset` replays what the feature source does over the sampled
epochs, once, in training order -- the same decay, refresh schedule, budget and selection rule -- and its hits
over the accesses are the prediction (what training with ``train.epochs == sample.epochs`` measures; later
epochs cycle the sampled ones from a hotset that no longer starts as the plan's).

Pack (``storage_kernels.alignedstore``):

- ``aligned.bin``: the ordered feature file rewritten block-aligned -- ``4096 // row_bytes`` rows per 4 KiB
  block (zero tail), or each row rounded up to whole blocks when it is larger -- so a row never straddles a
  block; one sequential pass of ``pack.memory_mb`` partitions, rows placed by the native ``place_rows_at``.
  ``aligned_layout.json`` holds the addressing rule's parameters (``BlockLayout.aligned_feature_offset``);
  the stats report the disk blow-up (``aligned_bytes / feature bytes``).
- the hyperbatch tables: each sampled training epoch's batches, in training order, cut into runs of
  consecutive batches whose distinct blocks fit ``plan.hyperbatch_bytes`` (the note's ConstructHyperbatch
  adapted to offline samples: Strata's batches are fixed by the sample stage, so a hyperbatch groups them
  instead of choosing nodes; the reorder stage's locality is what makes their blocks overlap).
- ``hotset_nodes.npy``: the planned hotset.

Features (:class:`trainer.features.hyperbatch.HyperbatchSource`): the hotset in RAM; for each hyperbatch its
cold rows' blocks read once with merged aligned direct reads, its batches served from that buffer and the
hotset in node order; the next hyperbatch loaded by a background thread meanwhile (two buffers). Access
counters decay by ``plan.hotset_decay`` per epoch and the hotset is re-selected every
``plan.hotset_refresh_epochs`` epochs (the difference evicted/loaded at the epoch boundary, deterministic).
Evaluation batches read the ordered feature file (block-merged aligned reads) like ``diskgnn``.

Not done from the note: choosing hyperbatch members (Strata's samples fix the batches), gradient accumulation
across hyperbatches, continual learning, dynamic hyperbatch sizing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.core.graphio import degree_chunks
from pipelines.core.sections import Bytes, Section
from pipelines.methods.policies.base import FeatureInputs, PackInputs, PlanInputs, Policy, TierPlan, register_policy
from pipelines.methods.policies.sharded import ShardedPack, copy_file
from pipelines.methods.policies.tiers import access_frequency, accessed_mask, assign_tiers, trace_chunks
from storage_kernels import kernels
from storage_kernels.alignedstore import (
    ALIGNED_BIN,
    LAYOUT_JSON,
    BlockLayout,
    group_hyperbatches,
    hotset_refresh_due,
    layout_stats,
    save_hyperbatch_tables,
    select_hotset,
    write_aligned,
)
from storage_kernels.arrays import release_pages
from storage_kernels.halfwords import as_words
from storage_kernels.packstore import Tier
from trainer.config import setting

if TYPE_CHECKING:
    from pipelines.core.progress import Progress
    from storage_kernels.sampleset import SampleSet
    from storage_kernels.store import Artifact
    from trainer.features import FeatureSource

__all__ = ["Hyperbatch", "HyperbatchPlanSettings", "cold_blocks_per_hyperbatch", "hotset_scores", "partition_rows",
           "HyperbatchShards", "simulate_hotset", "write_tables"]


class HyperbatchPlanSettings(Section):
    """``hyperbatch``'s part of the ``plan`` section (``--set plan.hyperbatch_bytes=256M``)."""

    hyperbatch_bytes: Bytes = setting(
        64 << 20, "hyperbatch: RAM budget of one hyperbatch (the distinct 4 KiB blocks of its batches' rows).",
        artifact="selected", ge=4096,
    )
    # both shape the hotset training holds, so the plan's predicted hit rate (it simulates them) depends on them
    hotset_refresh_epochs: int = setting(
        1, "hyperbatch: re-select the hotset from decayed access counters every this many epochs (0 = never).",
        artifact="selected", ge=0,
    )
    hotset_decay: float = setting(0.5, "hyperbatch: per-epoch decay of the hotset's access counters.",
                                  artifact="selected", ge=0, le=1)


def hotset_scores(degree: np.ndarray, frequency: np.ndarray) -> np.ndarray:
    """``degree x access frequency`` per node (int64): the hotset's score."""
    return np.asarray(degree, dtype=np.int64) * np.asarray(frequency, dtype=np.int64)


def simulate_hotset(nodes: np.ndarray, epochs: Sequence[Sequence[tuple[int, int]]], indptr: np.ndarray,
                    hot: np.ndarray, budget_rows: int, decay: float, refresh_epochs: int,
                    progress: Progress | None = None) -> tuple[list[int], list[int]]:
    """Hits and accesses per epoch of the feature source's hotset (``trainer.features.hotset.Hotset`` as
    ``HyperbatchSource`` drives it) over training ``epochs``: each epoch's batches as ranges of ``nodes``;
    ``indptr`` (N + 1,) the graph's row pointers (degrees: their differences, read in chunks at a refresh).

    The hotset starts as ``hot`` with zero counters; each access adds one to its node's counter; when an epoch
    after the first starts, the counters decay by ``decay`` and, where ``hotset_refresh_due``, the hotset
    becomes ``select_hotset(degree x counters, budget_rows)``. Within an epoch the hotset is fixed, so an
    epoch's hits are its accesses of the hotset it starts with. The counters take one access at a time here and
    a hyperbatch's accesses at a time in training: equal for the default decay (0.5: every count is exact),
    within rounding otherwise (which can only reorder nodes of equal score). Memory: the counters (float64),
    the membership (bool) and, at a refresh, the scores (float64) and ``select_hotset``'s copy of the positive
    ones, all (N,).
    """
    num_nodes = len(indptr) - 1
    counts = np.zeros(num_nodes, dtype=np.float64)
    member = np.zeros(num_nodes, dtype=bool)
    member[hot] = True
    hits, accesses = [], []
    for e, ranges in enumerate(epochs):
        if e > 0:
            counts *= decay
            if hotset_refresh_due(e, refresh_epochs):
                score = _refresh_scores(counts, indptr)
                chosen = select_hotset(score, budget_rows)
                del score
                member[:] = False
                member[chosen] = True
        h = n = 0
        for _, chunk in trace_chunks(nodes, list(ranges)):
            h += kernels.count_hits(chunk, member, counts)
            n += len(chunk)
        hits.append(h)
        accesses.append(n)
        if progress:
            progress("plan: simulating the hotset", e + 1, len(epochs))
    return hits, accesses


def _refresh_scores(counts: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """``Hotset.scores``: degree (float64) x counters, the degrees taken from ``indptr`` a chunk at a time."""
    score = np.empty(len(counts), dtype=np.float64)
    for lo, degree in degree_chunks(indptr):
        hi = lo + len(degree)
        np.multiply(degree, counts[lo:hi], out=score[lo:hi], dtype=np.float64)
    release_pages(indptr)
    return score


def cold_blocks_per_hyperbatch(samples: SampleSet, batches: np.ndarray, ptr: np.ndarray, hyperbatches: range,
                               layout: BlockLayout, hot: np.ndarray) -> np.ndarray:
    """The distinct blocks of each hyperbatch's nodes outside ``hot`` (bool (N,)): what reading it costs."""
    out = np.zeros(len(hyperbatches), dtype=np.int64)
    for i, h in enumerate(hyperbatches):
        parts = [np.asarray(samples.nodes[slice(*samples.node_range(int(b)))]) for b in batches[ptr[h] : ptr[h + 1]]]
        nodes = np.unique(np.concatenate(parts)) if parts else np.empty(0, np.int64)
        out[i] = len(layout.blocks_of(nodes[~hot[nodes]]))
    return out


def partition_rows(inputs: PackInputs) -> int:
    """Feature rows per step of the aligned rewrite (``pack.memory_mb``)."""
    return max(1, inputs.cfg.pack.memory_mb * 2**20 // inputs.graph.row_bytes)


def write_tables(inputs: PackInputs, layout: BlockLayout) -> dict[str, Any]:
    """Everything of the pack but ``aligned.bin`` (written by ``write_aligned`` as ``layout``): the layout's
    parameters, the hyperbatch tables and the hotset; returns the pack's statistics."""
    graph, samples, cfg, builder = inputs.graph, inputs.samples, inputs.cfg, inputs.builder
    builder.write_json(LAYOUT_JSON, layout.to_json())
    epochs = [samples.batch_ids("train", e) for e in range(samples.epochs)]
    budget = cfg.plan.hyperbatch_bytes
    batches, ptr, epoch_ptr, hb_blocks = group_hyperbatches(samples.nodes, epochs, samples.node_range, layout,
                                                            budget)
    hot_nodes = np.asarray(inputs.plan.array("cpu_nodes.npy"), dtype=np.int64)
    save_hyperbatch_tables(builder.save_array, batches, ptr, epoch_ptr, hot_nodes)

    # what one epoch reads with the planned hotset (sample epoch 0; refreshes change it while training)
    hot = np.zeros(graph.num_nodes, dtype=bool)
    hot[hot_nodes] = True
    first = range(int(epoch_ptr[0]), int(epoch_ptr[1])) if len(epoch_ptr) > 1 else range(0)
    cold = cold_blocks_per_hyperbatch(samples, batches, ptr, first, layout, hot)
    sizes = np.diff(ptr)
    rows = partition_rows(inputs)
    return {
        "layout": "hyperbatch",
        "num_batches": samples.num_batches,
        "packed_rows": layout.num_rows,
        "packed_bytes": layout.file_bytes,
        **layout_stats(layout),
        "hyperbatch_budget_bytes": budget,
        "hyperbatches": len(sizes),
        "batches_per_hyperbatch": float(sizes.mean()) if len(sizes) else 0.0,
        "max_hyperbatch_bytes": int(hb_blocks.max(initial=0)) * layout.block_bytes,
        "over_budget_hyperbatches": int(np.count_nonzero(hb_blocks * layout.block_bytes > budget)),
        "hotset_rows": len(hot_nodes),
        "epoch_read_bytes": int(cold.sum()) * layout.block_bytes,
        "partition_rows": rows,
        "partitions": -(-graph.num_nodes // rows),
    }


@register_policy
class Hyperbatch(Policy):
    name = "hyperbatch"
    description = ("AGNES hyperbatches: a degree x frequency hotset in RAM; runs of batches read as the distinct "
                   "blocks of a block-aligned feature file, once each, prefetched by a background thread.")
    settings = {"plan": HyperbatchPlanSettings}

    def plan(self, inputs: PlanInputs) -> TierPlan:
        graph, samples = inputs.graph, inputs.samples
        row_bytes = graph.row_bytes
        budgets = inputs.cfg.plan.budgets(graph.num_nodes * row_bytes)
        train_ranges = [samples.node_range(b) for b in samples.batch_ids("train")]
        freq = access_frequency(samples.nodes, train_ranges, graph.num_nodes, inputs.progress)
        score = np.asarray(graph.degrees(), dtype=np.int64)  # a fresh (N,) array: hotset_scores, in place
        score *= freq
        budget_rows = budgets["cpu"] // row_bytes
        hot = select_hotset(score, budget_rows)
        del score
        # before the tiers exist, so that the simulation's (N,) arrays are never held beside them (the stage's peak
        # stays where it was: 440 MB of anonymous memory at 2M nodes, 456 MB before the simulation)
        plan = inputs.cfg.plan
        epochs = [[samples.node_range(b) for b in samples.batch_ids("train", e)] for e in range(samples.epochs)]
        epoch_hits, epoch_accesses = simulate_hotset(samples.nodes, epochs, graph.indptr, hot, budget_rows,
                                                     plan.hotset_decay, plan.hotset_refresh_epochs, inputs.progress)
        total, hits = sum(epoch_accesses), sum(epoch_hits)
        if total != int(freq.sum()):
            raise ValueError(f"'samples' expected the sampled epochs' training batches to be the training batches "
                             f"({int(freq.sum())} accesses; got {total} over {samples.epochs} epochs)")
        eval_ranges = [samples.node_range(b) for s in ("val", "test") for b in samples.batch_ids(s)]
        eval_nodes = accessed_mask(samples.nodes, eval_ranges, graph.num_nodes) if eval_ranges else None
        tier, slot, _, _ = assign_tiers(freq, 0, 0, eval_nodes)  # no cache yet: train nodes PACKED, eval FILE
        del eval_nodes
        tier[hot] = Tier.CPU
        slot[hot] = np.arange(len(hot))
        stats = {
            "gpu_budget_bytes": budgets["gpu"], "cpu_budget_bytes": budgets["cpu"],
            "gpu_cache_bytes": 0, "cpu_cache_bytes": len(hot) * row_bytes,
            "gpu_cache_rows": 0, "cpu_cache_rows": len(hot),
            "feature_bytes": graph.num_nodes * row_bytes, "row_bytes": row_bytes,
            "accessed_nodes": int(np.count_nonzero(freq)),
            "eval_only_nodes": int(np.count_nonzero(tier == Tier.FILE)),
            "total_accesses": total,
            "hotset_score": "degree x access frequency",
            # the planned hotset's share of the accesses; the prediction replays the refreshes that replace it
            "planned_hotset_hit_rate": int(freq[hot].sum()) / total if total else 0.0,
            "first_epoch_hit_rate": epoch_hits[0] / epoch_accesses[0] if epoch_accesses and epoch_accesses[0] else 0.0,
            "predicted_hit_rate_gpu": 0.0,
            "predicted_hit_rate_cpu": hits / total if total else 0.0,
            "predicted_hit_rate": hits / total if total else 0.0,
        }
        return TierPlan(tier, slot, np.empty(0, np.int64), hot, freq, stats)

    def pack(self, inputs: PackInputs) -> dict[str, Any]:
        graph, cfg, progress = inputs.graph, inputs.cfg, inputs.progress

        def written(done: int, total: int) -> None:
            if progress:
                progress("pack: block-aligned features", done, total)

        layout = write_aligned(graph.features, inputs.builder.add_file(ALIGNED_BIN), partition_rows(inputs),
                               cfg.pack.num_threads, written)
        return write_tables(inputs, layout)

    def sharded_pack(self) -> ShardedPack:
        return HyperbatchShards()

    def features(self, inputs: FeatureInputs) -> FeatureSource:
        from trainer.features.hyperbatch import HyperbatchSource

        if inputs.pack is None:
            raise ValueError(f"'policy' {self.name} expected its pack artifact (got None)")
        features = as_words(inputs.reorder.array("features.npy"))  # float16 files: rows of 4-byte words
        row_bytes = int(features.shape[1]) * 4
        plan = inputs.cfg.plan
        budget_rows = plan.budgets(int(features.shape[0]) * row_bytes)["cpu"] // row_bytes
        degree = np.diff(np.asarray(inputs.reorder.array("indptr.npy")))
        return HyperbatchSource(inputs.pack.path, inputs.samples, inputs.reorder.file("features.npy"), degree,
                                budget_rows, inputs.device, decay=plan.hotset_decay,
                                refresh_epochs=plan.hotset_refresh_epochs)


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
        part = write_aligned(features[first:stop], path, partition_rows(inputs), inputs.cfg.pack.num_threads)
        return {"first_row": first, "rows": part.num_rows, "aligned_bytes": part.file_bytes}

    def merge(self, inputs: PackInputs, prep: Artifact, shards: Sequence[Artifact]) -> dict[str, Any]:
        layout = self._layout(inputs)
        path = copy_file(inputs.builder, ALIGNED_BIN, [shard.file(ALIGNED_BIN) for shard in shards])
        if os.path.getsize(path) != layout.file_bytes:
            raise ValueError(f"'pack shards' expected {layout.file_bytes} bytes of {ALIGNED_BIN} in all (got "
                             f"{os.path.getsize(path)})")
        return write_tables(inputs, layout)
