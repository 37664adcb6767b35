"""``outre``: OUTRE's historical-embedding cache with staleness-bounded reuse, subtree pruning of the offline
batches and the Eq. 5 split of the CPU budget between a feature cache and the historical cache
(OUTRE, PVLDB 17(11), 2024). Pair it with OUTRE's partition-based batches (``sample.batching=partition``, which
already exists): ``strata run --set policy=outre --set sample.batching=partition``.

Plan (the "profiling epoch": the whole sampled training trace, caches off)
    ``saved_IO_feat[v]`` = bytes of ``v``'s row x the training batches that read it; ``saved_IO_hist[v]`` =
    over the batches where ``v`` is a source of the last layer, the bytes of the rows and neighbour ids only
    ``v``'s (L-1)-deep subtree reaches (``outre_trace.exclusive_subtrees``), ``hist = sample * beta +
    gather``. beta is **not measured**: Strata samples offline, so the topology a pruned subtree no longer
    needs is only read back from the pack artifact, at the cost of feature bytes; ``beta = 1``. Eq. 5 sweeps
    alpha in steps of 0.01 over ``plan.cpu_cache_fraction``'s budget (``cpu_cache_bytes``): the top rows by
    ``saved_IO_feat`` fill ``(1 - alpha) B`` as the CPU feature cache, the top nodes by ``saved_IO_hist``
    (one ``train.hidden_dim`` float32 row plus an 8-byte iteration stamp each) fill ``alpha B`` as the
    candidate set. Plan stats: ``alpha``, ``predicted_saved_feat_bytes``, ``predicted_saved_hist_bytes``.
    There is no GPU feature cache (``plan.gpu_cache_*`` is ignored).

Pack
    The staleness FSM (``plan.staleness``, 1 = no reuse, 0 = ``outre_trace.effective_staleness``: min(100,
    training batches per epoch)) is a pure function of the iteration count, so it is
    run offline over the training batches in training order: a candidate among a batch's last-layer sources
    is *pulled* when it was pushed less than ``staleness`` iterations ago, else *pushed*. Each training batch
    is pruned (``outre_trace.prune_batch``, in C: pulled candidates' (L-1)-deep subtrees removed: their
    in-edges in the lower blocks and every node only they reach) and stored as a
    sample set in the pack artifact (``nodes.npy``, ``indptr.npy``, ``cols.npy``, ``batches.parquet``; batch
    ``j`` is the training batch ``pruned_batch.npy[j]``), with per batch the positions whose input row is
    not read (``skip_*``) and the pull and push lists (``pull_pos``/``pull_slot``, ``push_pos``/``push_slot``,
    CSR by ``*_offset.npy``; positions into the pruned node list, slots into ``candidates.npy``).
    ``cpu_cache.npy`` holds the feature cache, ``node_tier.npy``/``node_slot.npy`` every node's address (CPU
    cache slot or the feature file). Evaluation batches are not pruned.

Features and training
    :class:`trainer.features.outre.PrunedFeatures`: CPU cache, then the ordered feature file with merged
    aligned direct reads; skipped rows are zeros, never read. Its ``train_hook``
    (:class:`trainer.history.HistoryHook`) gives the trainer the pruned batches and its forward: layers
    0..L-2, pulled candidates' rows replaced by their cached h^{L-1} (no gradient), fresh candidate rows
    pushed (detached), then the last layer. The trainer re-runs the FSM online and refuses a pull whose entry
    is missing or too old (e.g. after resuming from a checkpoint: the cache is not checkpointed). Training
    epochs beyond the sampled ones replay the trace cyclically; every pull still finds its entry at the same
    age, because a sampled epoch's pulls only reach back into earlier sampled epochs (the FSM starts empty),
    and the replay runs those in the same order just before it.

Limits: no neighbour cache (sampling is offline); beta assumed; ``train.hidden_dim`` sizes the historical
rows but is not part of the plan's version (``plan.staleness`` is, for every policy); the profiling trace is
the whole sampled trace, not one epoch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.methods.policies.base import FeatureInputs, PackInputs, PlanInputs, Policy, TierPlan, register_policy
from pipelines.methods.policies.cacheblocks import write_cache_rows
from pipelines.methods.policies.outre.settings import OutrePlanSettings
from pipelines.methods.policies.outre.trace import (
    ID_BYTES,
    StalenessFSM,
    alpha_sweep,
    effective_staleness,
    exclusive_subtrees,
    prune_batch,
    top_ranked,
)
from pipelines.methods.policies.tiers import access_frequency, accessed_mask
from storage_kernels.packstore import Tier
from storage_kernels.sampleset import SampleSetWriter

if TYPE_CHECKING:
    from trainer.features import FeatureSource

__all__ = ["BETA", "Outre", "training_order"]

#: beta of ``saved_IO_hist = saved_IO_hist_sample * beta + saved_IO_hist_gather`` (assumed, not measured).
BETA = 1.0
_STAMP_BYTES = 8  # the historical cache's per-row iteration stamp (its "table")


def _staleness(cfg: Any, samples: Any) -> int:
    """The staleness bound the FSM runs (``plan.staleness``; 0: by the first sampled epoch's batch count)."""
    return effective_staleness(cfg.plan.staleness, len(samples.batch_ids("train", 0)))


def training_order(samples: Any) -> list[int]:
    """Training batch ids in the order training first replays them (sample epoch 0, 1, ..., step order)."""
    return [b for e in range(samples.epochs) for b in samples.batch_ids("train", e)]


@register_policy
class Outre(Policy):
    name = "outre"
    exact_samples = False  # pruned batches, historical embeddings: another model
    description = ("OUTRE: historical embeddings of the last layer's inputs reused for plan.staleness iterations, "
                   "their subtrees pruned from the batches; the CPU budget split (Eq. 5) with a feature cache.")
    settings = {"plan": OutrePlanSettings}
    own_training_step = "its historical embeddings replace part of the last layer's input inside Strata's training step"

    def plan(self, inputs: PlanInputs) -> TierPlan:
        graph, samples, cfg = inputs.graph, inputs.samples, inputs.cfg
        if samples.num_layers < 2:
            raise ValueError(f"'policy' outre expected at least 2 sampled hops (got {samples.num_layers})")
        n, row_bytes = graph.num_nodes, graph.row_bytes
        train_ids = training_order(samples)
        freq = access_frequency(samples.nodes, [samples.node_range(b) for b in train_ids], n, inputs.progress)
        hist_rows = np.zeros(n, dtype=np.int64)
        hist_edges = np.zeros(n, dtype=np.int64)
        for i, b in enumerate(train_ids):
            batch = samples.batch(b)
            rows, edges = exclusive_subtrees(batch.hop_counts, batch.indptrs, batch.cols)
            top = batch.nodes[: len(rows)]
            hist_rows[top] += rows  # nodes are distinct within a batch
            hist_edges[top] += edges
            if inputs.progress:
                inputs.progress("plan: profiling subtrees", i + 1, len(train_ids))
        # saved_hist = hist_edges * ID_BYTES * BETA + hist_rows * row_bytes, in place: one (N,) array at a time
        hist_edges *= ID_BYTES
        saved_hist = hist_edges * BETA
        del hist_edges
        hist_rows *= row_bytes
        saved_hist += hist_rows
        del hist_rows
        saved_feat = freq * row_bytes
        history_row_bytes = cfg.train.hidden_dim * 4 + _STAMP_BYTES
        budget = cfg.plan.budgets(n * row_bytes)["cpu"]
        split = alpha_sweep(saved_feat, saved_hist, budget, row_bytes, history_row_bytes)
        cpu_nodes = top_ranked(saved_feat, split.feature_rows)  # int64 ranks as its float64 copy did (< 2**53)
        candidates = top_ranked(saved_hist, split.history_rows)
        del saved_feat, saved_hist

        eval_ranges = [samples.node_range(b) for s in ("val", "test") for b in samples.batch_ids(s)]
        read = freq > 0
        if eval_ranges:
            read |= accessed_mask(samples.nodes, eval_ranges, n)
        tier = np.full(n, Tier.NONE, dtype=np.int8)
        tier[read] = Tier.FILE
        tier[cpu_nodes] = Tier.CPU
        slot = np.full(n, -1, dtype=np.int64)
        slot[cpu_nodes] = np.arange(len(cpu_nodes))
        total = int(freq.sum())
        stats = {
            "cpu_budget_bytes": budget, "gpu_budget_bytes": 0, "gpu_cache_rows": 0, "gpu_cache_bytes": 0,
            "cpu_cache_rows": len(cpu_nodes), "cpu_cache_bytes": len(cpu_nodes) * row_bytes,
            "history_rows": len(candidates), "history_bytes": len(candidates) * history_row_bytes,
            "history_row_bytes": history_row_bytes, "row_bytes": row_bytes, "feature_bytes": n * row_bytes,
            "alpha": split.alpha, "beta": BETA, "beta_measured": False,
            "predicted_saved_feat_bytes": split.saved_feat, "predicted_saved_hist_bytes": split.saved_hist,
            "staleness": _staleness(cfg, samples), "total_accesses": total,
            "predicted_hit_rate_cpu": int(freq[cpu_nodes].sum()) / total if total else 0.0,
            "predicted_hit_rate": int(freq[cpu_nodes].sum()) / total if total else 0.0,
        }
        return TierPlan(tier, slot, np.empty(0, np.int64), cpu_nodes, freq, stats,
                        arrays={"candidates.npy": candidates})

    def pack(self, inputs: PackInputs) -> dict[str, Any]:
        graph, samples, plan, builder = inputs.graph, inputs.samples, inputs.plan, inputs.builder
        tier, slot = np.asarray(plan.array("tier.npy")), np.asarray(plan.array("slot.npy"))
        cpu_nodes = np.asarray(plan.array("cpu_nodes.npy"))
        candidates = np.asarray(plan.array("candidates.npy"))
        write_cache_rows(builder, "cpu_cache.npy", graph.features, cpu_nodes, inputs.cfg.pack.memory_mb << 20)
        builder.save_array("node_tier.npy", tier)
        builder.save_array("node_slot.npy", slot)
        builder.save_array("candidates.npy", candidates)
        cand_slot = np.full(graph.num_nodes, -1, dtype=np.int32 if len(candidates) < 2**31 else np.int64)
        cand_slot[candidates] = np.arange(len(candidates))

        fsm = StalenessFSM(len(candidates), _staleness(inputs.cfg, samples))
        writer = SampleSetWriter(builder)
        lists = {k: builder.array_writer(f"{k}.npy", np.int64)
                 for k in ("skip_pos", "pull_pos", "pull_slot", "push_pos", "push_slot")}
        offsets = {k: [0] for k in ("skip", "pull", "push")}
        train_ids = training_order(samples)
        rows_before = rows_after = rows_read = rows_file = 0
        for i, b in enumerate(train_ids):
            batch = samples.batch(b)
            top = batch.nodes[: int(batch.hop_counts[1])]
            pos = np.flatnonzero(cand_slot[top] >= 0)  # candidates among the last layer's sources
            slots = cand_slot[top[pos]]
            pull = fsm.step(slots)
            pruned = prune_batch(batch.hop_counts, batch.indptrs, batch.cols, pos[pull])
            nodes = batch.nodes[pruned.keep]
            writer.add("train", batch.epoch, batch.step, nodes, pruned.hop_counts, pruned.indptrs, pruned.cols)
            for key, arr in (("skip_pos", pruned.skip), ("pull_pos", pruned.new_pos[pos[pull]]),
                             ("pull_slot", slots[pull]), ("push_pos", pruned.new_pos[pos[~pull]]),
                             ("push_slot", slots[~pull])):
                lists[key].append(arr)
            for key, count in (("skip", len(pruned.skip)), ("pull", int(pull.sum())), ("push", int((~pull).sum()))):
                offsets[key].append(offsets[key][-1] + count)
            read_mask = np.ones(len(nodes), dtype=bool)
            read_mask[pruned.skip] = False
            rows_before += len(batch.nodes)
            rows_after += len(nodes)
            rows_read += int(read_mask.sum())
            rows_file += int(np.count_nonzero(read_mask & (tier[nodes] != Tier.CPU)))
            if inputs.progress:
                inputs.progress("pack: FSM and pruning", i + 1, len(train_ids))
        writer.close()
        for w in lists.values():
            w.close()
        for key, offs in offsets.items():
            builder.save_array(f"{key}_offset.npy", np.asarray(offs, dtype=np.int64))
        builder.save_array("pruned_batch.npy", np.asarray(train_ids, dtype=np.int64))
        return {
            "layout": "outre",
            "staleness": fsm.staleness,
            "train_batches": len(train_ids),
            "candidates": len(candidates),
            "pulls": offsets["pull"][-1],
            "pushes": offsets["push"][-1],
            "train_rows_sampled": rows_before,
            "train_rows_pruned": rows_after,
            "train_rows_read": rows_read,
            "train_rows_from_file": rows_file,
            "pruned_fraction": 1.0 - rows_read / rows_before if rows_before else 0.0,
            "epoch_read_rows": rows_file / max(samples.epochs, 1),
        }

    def features(self, inputs: FeatureInputs) -> FeatureSource:
        from trainer.features.outre import PrunedFeatures

        if inputs.pack is None:
            raise ValueError(f"'policy' {self.name} expected its pack artifact (got None)")
        return PrunedFeatures(inputs.pack.path, inputs.samples, inputs.reorder.file("features.npy"),
                              device=inputs.device, staleness=int(inputs.pack.stats["staleness"]))
