"""``mariusgnn``: MariusGNN's disk-based node classification (Waleffe, thesis ch. 5; digest ``seeds/mariusgnn.md``).

The feature file is laid out by *physical partition*; a CPU *partition buffer* holds ``c`` of them; training
walks a sequence of partition sets ``S_1, S_2, ...`` and every training batch of ``X_i`` is sampled from the
subgraph induced by the nodes of ``S_i`` (what is in memory), so its rows are all in the buffer.

Plan (``pipelines.methods.policies.mariusgnn.tuning``, ``marius_orders``)
    ``p``, ``c`` (and COMET's ``l``): ``plan.num_partitions`` / ``plan.buffer_partitions``, or the thesis's
    auto-tuning rules under the CPU budget (``plan.cpu_cache_bytes`` / ``cpu_cache_fraction``). Physical
    partitions: every node ordered by the partition stage's label (the sample artifact's upstream ``partition``;
    its locality), then id, and cut into ``p`` ranges of ``ceil(N / p)`` nodes. With ``plan.train_first`` the
    training nodes are ordered first, so they fill the first ``k`` partitions; when ``k < c`` the epoch is the
    static node-classification policy (one set: the ``k`` plus ``c - k`` random others, zero swaps within an
    epoch, re-drawn every epoch; ``plan.static_fill=connected`` draws them in proportion to their edges to the
    training partitions instead of uniformly). Otherwise (or ``train_first`` off: partitions by locality only) the order
    ``plan.partition_order``: ``alg7`` (default: node classification's Algorithm 7, every partition read once),
    ``beta``, ``comet`` or ``random`` (``marius_orders``; the last three make every pair of partitions
    co-resident, as link prediction needs). ``bucket_counts.npy``
    (p, p) counts the CSR entries of every edge bucket. Arrays: ``phys_part.npy`` (N,) int32, ``phys_ptr.npy``,
    ``phys_nodes.npy`` (ids ascending within a partition). Stats: ``p``, ``c``, ``l``, ``k``, the mode, BETA's
    Eq. 5.2 and the Eq. 5.1 bound for ``(p, c)``.

Pack
    ``partitions.bin``: each partition's rows contiguous (node order) at a 4 KiB-aligned offset
    (``kernels.pack_batches``, one pass over the feature file), ``part_offset.npy`` / ``part_rows.npy``,
    ``node_part.npy`` / ``node_row.npy``. Then, per sampled epoch, the order's sets (``set_ptr.npy`` /
    ``set_parts.npy``, ``set_epoch.npy``) and the training batches re-sampled per set: each training node
    goes to one set holding its partition (``beta``: the first; ``comet``/``random``/``alg7``: a random
    one; ``static``: the one), each set's nodes are shuffled and cut into ``sample.batch_size`` batches,
    and every batch is sampled by ``sample.sampler`` (``sample.fanouts``, the seed the sample stage would
    give it) from the CSR restricted to the set's nodes (entries whose neighbour is resident; built out of
    core into scratch files per set, :mod:`pipelines.methods.policies.mariusgnn.subgraph`). These
    batches form a sample set in the pack artifact (``batch_set.npy``: each one's set).
    **Design choice**: the offline ``samples`` artifact is kept for evaluation (full-graph neighbourhoods,
    as every other policy) and for the access trace; training batches are MariusGNN's per-set ones,
    written by this pack. Their number per epoch follows the sets (a set's last batch may be short), so
    the trainer takes them from the feature source's ``train_hook``. A set no training node was assigned
    to is never loaded (``partition_reads_per_epoch`` counts what is read; ``swaps_per_epoch`` is the
    order's own count, Eq. 5.2 for ``beta``; ``edge_permutation_bias`` the thesis's diagnostic B of the
    bucket assignment, weighted by ``bucket_counts``).

Features (:class:`trainer.features.partition_buffer.PartitionBufferSource`)
    The buffer of ``c`` partition slots (plus the staging slots one swap needs), filled with large sequential
    aligned direct reads of ``partitions.bin`` (ranges of at most 8 MiB, counted in ``bytes_read`` /
    ``read_requests``); a prefetch thread reads the next set's incoming partitions while the current set's
    batches train. Batches are served from the buffer (``packed`` rows); evaluation batches read the ordered
    feature file (block-merged direct reads, as ``diskgnn``). Node classification never writes features back:
    there is no writer thread (it is link prediction's learned embeddings that need one).
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.methods.policies.base import FeatureInputs, PackInputs, PlanInputs, Policy, TierPlan, register_policy
from pipelines.methods.policies.mariusgnn.settings import MariusGNNPlanSettings
from pipelines.methods.policies.mariusgnn.subgraph import resident_mask, resident_subgraph
from pipelines.methods.policies.mariusgnn.tuning import resolve
from pipelines.methods.policies.sharded import copy_file
from pipelines.methods.policies.tiers import frequency_plan
from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN, align_up
from storage_kernels.sampleset import SampleSetWriter
from trainer.partition_orders import (
    EpochOrder,
    beta_swaps,
    edge_permutation_bias,
    epoch_order,
    static_order,
    swap_lower_bound,
)

if TYPE_CHECKING:
    from pipelines.core.graphio import GraphArrays
    from pipelines.core.sections import RunConfig
    from storage_kernels.sampleset import SampleSet
    from trainer.features import FeatureSource

__all__ = ["MariusGNN", "PhysicalLayout", "assign_training_nodes", "physical_layout"]

PARTITIONS_BIN = "partitions.bin"
_ORDER_SALT = 0x4D47  # separates the order's random stream from the sample stage's
_NODE_CHUNK = 1 << 24  # nodes per step of the streamed passes over (N,) arrays


class PhysicalLayout:
    """Physical partitions: ``part`` (N,) int32, ``ptr`` (p+1,), ``nodes`` (ids ascending per partition), the
    training partitions ``k`` (0 when training nodes are not laid out first) and the resolved tuning."""

    def __init__(self, part: np.ndarray, ptr: np.ndarray, nodes: np.ndarray, k: int) -> None:
        self.part, self.ptr, self.nodes, self.k = part, ptr, nodes, int(k)

    @property
    def p(self) -> int:
        return len(self.ptr) - 1

    def members(self, q: int) -> np.ndarray:
        return self.nodes[self.ptr[q] : self.ptr[q + 1]]


def physical_layout(num_nodes: int, p: int, labels: np.ndarray | None, train_idx: np.ndarray | None
                    ) -> PhysicalLayout:
    """Order the nodes (training nodes first when ``train_idx`` is given; then by locality ``labels``, then
    id) and cut the order into ``p`` ranges of ``ceil(N / p)`` nodes.

    The order is one stable argsort of a small key (``(not first) * L + label``: 16 bits where the labels
    allow, NumPy's radix sort) rather than a lexsort of three (N,) keys, and each range is sorted in place to
    give the partition's ids ascending: about 22 bytes per node at the peak."""
    size = -(-num_nodes // p)
    groups = int(np.max(labels)) + 1 if labels is not None and num_nodes else 1
    span = 2 * groups if train_idx is not None else groups
    key = np.empty(num_nodes, dtype=np.uint16 if span <= 1 << 16 else np.int64)
    for lo in range(0, num_nodes, _NODE_CHUNK):
        hi = min(lo + _NODE_CHUNK, num_nodes)
        key[lo:hi] = 0 if labels is None else np.asarray(labels[lo:hi])
        if train_idx is not None:
            key[lo:hi] += groups
    if train_idx is not None:
        key[np.asarray(train_idx, dtype=np.int64)] -= groups  # first, then label, then id
    order = np.argsort(key, kind="stable")
    del key
    part = np.empty(num_nodes, dtype=np.int32)
    ptr = np.zeros(p + 1, dtype=np.int64)
    for q in range(p):  # ranges of the order; ids ascending within each
        lo, hi = min(q * size, num_nodes), min((q + 1) * size, num_nodes)
        part[order[lo:hi]] = q
        order[lo:hi].sort()
        ptr[q + 1] = hi
    k = -(-len(train_idx) // size) if train_idx is not None else 0
    return PhysicalLayout(part, ptr, order.astype(np.int64, copy=False), k)


def assign_training_nodes(order: EpochOrder, part: np.ndarray, train_idx: np.ndarray, greedy: bool,
                          rng: np.random.Generator) -> np.ndarray:
    """The set index of every training node: the first set holding its partition (``greedy``, BETA) or a
    uniformly random one of them (COMET, random); -1 for a node no set holds."""
    p = int(part.max()) + 1 if len(part) else 0
    member = np.zeros((len(order.sets), p), dtype=bool)
    for i, s in enumerate(order.sets):
        member[i, s] = True
    train_part = part[train_idx]
    out = np.full(len(train_idx), -1, dtype=np.int64)
    for q in np.unique(train_part).tolist():  # partitions, not nodes
        holders = np.flatnonzero(member[:, q])
        if not len(holders):
            continue
        at = np.flatnonzero(train_part == q)
        out[at] = holders[0] if greedy else rng.choice(holders, size=len(at))
    return out


def _locality_labels(samples: SampleSet, num_nodes: int) -> tuple[np.ndarray | None, str]:
    """The partition stage's labels the sample artifact was built from (``<root>/<dataset>/<stage>/<version>``),
    or None (then the node id order, the reorder stage's locality, alone decides)."""
    from storage_kernels.store import Artifact

    try:
        sample = Artifact(samples.path)
        part = Artifact(samples.path.parent.parent / "partition" / sample.upstream["partition"])
        labels = np.asarray(part.array("parts.npy"))
    except (KeyError, OSError, ValueError):
        return None, "node id order (no partition artifact upstream of the samples)"
    if len(labels) != num_nodes:
        return None, "node id order (the partition artifact has another node count)"
    return labels, f"partition artifact ({part.stats.get('method', '?')}, {part.stats.get('num_parts', '?')} parts)"


def _resolve(cfg: RunConfig, graph: GraphArrays) -> Any:
    budget = cfg.plan.budgets(graph.num_nodes * graph.row_bytes)["cpu"]
    return resolve(graph.num_nodes, graph.row_bytes, graph.num_edges, budget, cfg.plan.num_partitions,
                   cfg.plan.buffer_partitions)


@register_policy
class MariusGNN(Policy):
    name = "mariusgnn"
    exact_samples = False  # batches sampled within the partition buffer: another model
    description = ("MariusGNN: the feature file in physical partitions, a CPU buffer of c of them filled by large "
                   "direct reads with a prefetch thread; training batches sampled per partition set from the "
                   "in-memory subgraph (static set when the training partitions fit, else BETA/COMET/random).")
    settings = {"plan": MariusGNNPlanSettings}
    link_embeddings_out_of_core = True

    def plan(self, inputs: PlanInputs) -> TierPlan:
        from pipelines.methods.partitioners.cut import cut_statistics

        graph, cfg = inputs.graph, inputs.cfg
        tune = _resolve(cfg, graph)
        labels, source = _locality_labels(inputs.samples, graph.num_nodes)
        train = np.asarray(graph.train_idx, dtype=np.int64)
        layout = physical_layout(graph.num_nodes, tune.p, labels, train if cfg.plan.train_first else None)
        static = cfg.plan.train_first and 0 < layout.k < tune.c
        if not static and cfg.plan.train_first:  # the training partitions do not fit: lay out by locality
            del layout  # before the next one is built
            layout = physical_layout(graph.num_nodes, tune.p, labels, None)
        cut, buckets = cut_statistics(graph, layout.part, layout.p)[:2]  # not the (N,) cross counts
        plan = frequency_plan(inputs, {"gpu": 0, "cpu": 0})  # no static cache: training rows from the buffer
        plan.arrays.update({"phys_part.npy": layout.part, "phys_ptr.npy": layout.ptr, "phys_nodes.npy": layout.nodes,
                            "bucket_counts.npy": np.asarray(buckets).reshape(-1)})
        part_bytes = int(np.diff(layout.ptr).max(initial=0)) * graph.row_bytes
        budget = cfg.plan.budgets(graph.num_nodes * graph.row_bytes)
        plan.stats.update({
            "cache": "partition buffer (pack: partitions.bin; per-set training batches)",
            "gpu_budget_bytes": 0, "cpu_budget_bytes": budget["cpu"],
            "num_partitions": tune.p, "buffer_partitions": tune.c, "logical_partitions": tune.logical,
            "num_partitions_from": tune.p_from, "buffer_partitions_from": tune.c_from,
            "buffer_within_budget": tune.budget_ok,
            "train_partitions": layout.k if static else int(len(np.unique(layout.part[train]))),
            "mode": "static" if static else cfg.plan.partition_order,
            "locality": source,
            "partition_bytes": part_bytes,
            "buffer_bytes": tune.c * align_up(part_bytes, DATA_ALIGN),
            "edge_cut": cut["edge_cut"],
            "beta_swaps_eq52": beta_swaps(tune.p, tune.c) if tune.p > 1 else 0,
            "swap_lower_bound_eq51": swap_lower_bound(tune.p, tune.c) if tune.p > 1 else 0,
        })
        return plan

    def pack(self, inputs: PackInputs) -> dict[str, Any]:
        graph, samples, cfg, builder, plan = inputs.graph, inputs.samples, inputs.cfg, inputs.builder, inputs.plan
        ptr = np.asarray(plan.array("phys_ptr.npy"), dtype=np.int64)
        nodes = plan.array("phys_nodes.npy")  # memory-mapped: read once, in partition order
        part = plan.array("phys_part.npy")
        p, c = len(ptr) - 1, int(plan.stats["buffer_partitions"])
        mode, k = str(plan.stats["mode"]), int(plan.stats["train_partitions"])
        row_bytes = graph.row_bytes

        # partitions.bin: one aligned chunk per partition, written in one pass over the feature file
        members = [nodes[ptr[q] : ptr[q + 1]] for q in range(p)]
        partition_rows = max(1, cfg.pack.memory_mb * 2**20 // row_bytes)
        offsets, rows = kernels.pack_batches(graph.features, members, builder.add_file(PARTITIONS_BIN),
                                             partition_rows=partition_rows, chunk_align=DATA_ALIGN,
                                             num_threads=cfg.pack.num_threads)
        builder.save_array("part_offset.npy", np.asarray(offsets, dtype=np.int64))
        builder.save_array("part_rows.npy", np.asarray(rows, dtype=np.int64))
        # written in place on disk (8 bytes a node: 800 MB at 100M nodes, not held), a partition at a time
        node_row = builder.allocate_array("node_row.npy", np.int64, (graph.num_nodes,))
        for q in range(p):  # a partition's rows in node order: no (N,) temporaries
            node_row[nodes[ptr[q] : ptr[q + 1]]] = np.arange(ptr[q + 1] - ptr[q])
        node_row.flush()
        del node_row
        copy_file(builder, "node_part.npy", [plan.file("phys_part.npy")])  # the plan's (N,) int32 partitions
        part_bytes = align_up(np.asarray(rows, dtype=np.int64) * row_bytes, DATA_ALIGN)  # (p,) one read each
        stats = _write_set_batches(graph, samples, cfg, builder, part, p, c, k, mode, part_bytes,
                                   np.asarray(plan.array("bucket_counts.npy")), inputs.progress)
        return {
            "layout": "partitions",
            "num_partitions": p,
            "buffer_partitions": c,
            "mode": mode,
            "partitions_bytes": int(part_bytes.sum()),
            "feature_bytes": graph.num_nodes * row_bytes,
            "disk_blowup": float(part_bytes.sum()) / max(graph.num_nodes * row_bytes, 1),
            **stats,
        }

    def features(self, inputs: FeatureInputs) -> FeatureSource:
        from trainer.features.partition_buffer import PartitionBufferSource

        if inputs.pack is None:
            raise ValueError(f"'policy' {self.name} expected its pack artifact (got None)")
        return PartitionBufferSource(inputs.pack.path, inputs.samples, inputs.reorder.file("features.npy"),
                                     device=inputs.device)


def _write_set_batches(graph: GraphArrays, samples: SampleSet, cfg: RunConfig, builder: Any, part: np.ndarray,
                       p: int, c: int, k: int, mode: str, part_bytes: np.ndarray, bucket_counts: np.ndarray,
                       progress: Any) -> dict[str, Any]:
    """Per sampled epoch: the order's sets and the training batches sampled from each set's subgraph."""
    from pipelines.methods.samplers import SAMPLERS, batch_seed

    sc = cfg.sample
    sampler = SAMPLERS.get(sc.sampler)
    weights = None
    if mode == "static" and cfg.plan.static_fill == "connected":  # edges between each partition and the k
        buckets = np.asarray(bucket_counts, dtype=np.int64).reshape(p, p)
        weights = buckets[:k].sum(axis=0) + buckets[:, :k].sum(axis=1)
    fanouts = np.asarray(sc.fanouts, dtype=np.int64)
    train_idx = np.asarray(graph.train_idx, dtype=np.int64)
    buckets_pp = np.asarray(bucket_counts, dtype=np.int64).reshape(p, p)  # [neighbour's part, row's part]
    scratch = builder.scratch_sibling("subgraph")
    max_entries = max(1, cfg.pack.memory_mb * 2**20 // 32)  # ~26 bytes an entry of a row range while filtered
    writer = SampleSetWriter(builder)
    set_parts: list[np.ndarray] = []
    set_epoch: list[int] = []
    batch_set: list[int] = []
    swaps: list[int] = []
    reads: list[int] = []
    read_bytes: list[int] = []
    bias: list[float] = []
    max_resident = 0
    kept_edges = total_edges = inputs_sampled = 0
    for epoch in range(samples.epochs):
        rng = np.random.default_rng([sc.seed & 0xFFFFFFFF, epoch, _ORDER_SALT])
        order = static_order(p, c, k, rng, weights) if mode == "static" else epoch_order(mode, p, c, rng)
        which = assign_training_nodes(order, part, train_idx, greedy=order.name in ("beta", "static"), rng=rng)
        if np.any(which < 0):
            bad = int(train_idx[np.flatnonzero(which < 0)[0]])
            raise ValueError(f"'plan.partition_order' {mode} expected a set holding every training node's partition "
                             f"(got none for node {bad}, partition {int(part[bad])})")
        base = len(set_parts)
        step = 0
        for i, members in enumerate(order.sets):
            seeds = rng.permutation(train_idx[which == i])
            if len(seeds):
                resident = resident_mask(part, members, p)
                sub = resident_subgraph(graph.indptr, graph.indices, resident, scratch / str(len(set_parts)),
                                        max_entries)
                kept_edges += int(buckets_pp[np.unique(np.asarray(members, dtype=np.int64))].sum())
                total_edges += len(graph.indices)
            for lo in range(0, len(seeds), sc.batch_size):
                batch = np.ascontiguousarray(seeds[lo : lo + sc.batch_size])
                out = sampler.sample(sub, batch, fanouts, batch_seed(sc.seed, "train", epoch, step), sc.num_threads)
                blocks_nodes, hop_counts, indptrs, cols = out
                if not np.all(resident[blocks_nodes]):  # the contract the buffer relies on
                    raise RuntimeError(f"'sample.sampler' {sc.sampler} expected neighbours inside set {i} of epoch "
                                       f"{epoch} (got a node outside the in-memory subgraph)")
                writer.add("train", epoch, step, blocks_nodes, hop_counts, indptrs, cols)
                batch_set.append(base + i)
                inputs_sampled += len(blocks_nodes)
                step += 1
            if len(seeds):
                del sub
                shutil.rmtree(scratch / str(len(set_parts)), ignore_errors=True)
            set_parts.append(np.asarray(members, dtype=np.int64))
            set_epoch.append(epoch)
        swaps.append(order.swaps)
        bias.append(edge_permutation_bias(order, np.asarray(bucket_counts).reshape(p, p)))
        # what training reads: the sets with batches, in order (a set without training nodes is skipped)
        visited = [order.sets[g - base] for g in dict.fromkeys(batch_set[len(batch_set) - step :])]
        incoming = visited[:1] + [np.setdiff1d(b, a) for a, b in zip(visited[:-1], visited[1:], strict=True)]
        reads.append(sum(len(q) for q in incoming))
        read_bytes.append(int(sum(int(part_bytes[q].sum()) for q in incoming)))
        max_resident = max(max_resident, order.max_resident)
        if progress:
            progress("pack: per-set training batches", epoch + 1, samples.epochs)
    writer.close()
    shutil.rmtree(scratch, ignore_errors=True)
    sizes = np.asarray([len(s) for s in set_parts], dtype=np.int64)
    builder.save_array("set_ptr.npy", np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
    builder.save_array("set_parts.npy", np.concatenate(set_parts).astype(np.int64) if set_parts
                       else np.empty(0, np.int64))
    builder.save_array("set_epoch.npy", np.asarray(set_epoch, dtype=np.int64))
    builder.save_array("batch_set.npy", np.asarray(batch_set, dtype=np.int64))
    original = sum(int(np.diff(samples.node_range(b))[0]) for b in samples.batch_ids("train"))
    return {
        "sets_per_epoch": len(set_parts) / max(samples.epochs, 1),
        "swaps_per_epoch": float(np.mean(swaps)) if swaps else 0.0,  # the order's (Eq. 5.2 for beta)
        "partition_reads_per_epoch": float(np.mean(reads)) if reads else 0.0,  # sets with batches only
        "epoch_read_bytes": read_bytes[0] if read_bytes else 0,  # sample epoch 0 from a cold buffer, exact
        "mean_epoch_read_bytes": float(np.mean(read_bytes)) if read_bytes else 0.0,
        "max_resident_partitions": max_resident,
        "train_batches": len(batch_set),
        "train_batches_sampled_offline": len(samples.batch_ids("train")),
        "edge_permutation_bias": float(np.mean(bias)) if bias else 0.0,  # thesis section 5.4, per epoch
        "resident_edge_fraction": kept_edges / total_edges if total_edges else 1.0,
        "input_nodes_vs_full_graph": inputs_sampled / original if original else 0.0,
        "order_seed_salt": _ORDER_SALT,
    }
