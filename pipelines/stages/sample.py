"""Sample stage: offline neighbour sampling of every mini-batch the trainer will see (DiskGNN, Ginex).

Training seeds are shuffled per epoch and cut into batches (``batching=random``), or grouped by partition
into OUTRE's macro batches (``batching=partition``) so a batch's seeds share neighbourhoods; validation and
test seeds are cut in order. Each batch is sampled by the configured sampler (``sample.sampler``, an entry of
:data:`pipelines.methods.samplers.SAMPLERS`) with a seed derived from (seed, split, epoch, step), so the artifact is a
pure function of its parameters whatever the thread count. The batches' node lists are the access trace the
planner counts.

Evaluation batches hold up to ``sample.eval_batch_size`` seeds, fewer when their estimated feature rows would
exceed ``sample.eval_memory_mb`` (:func:`eval_batch_size`): on a large graph with wide features 16,384 seeds
can sample gigabytes of rows. The batch size that results is a derived parameter of the artifact.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipelines.config import PipelineConfig, SampleConfig
from pipelines.core.formatting import markdown_table
from pipelines.core.graphio import GraphArrays, load_graph
from pipelines.core.progress import Progress
from pipelines.methods.samplers import SAMPLERS, batch_seed
from pipelines.methods.samplers.prefetch import prepare_csr_reads, sample_prefetched
from pipelines.stages.common import StageResult, materialize
from storage_kernels.sampleset import SPLITS, SampleSetWriter
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["FORMAT_VERSION", "derived_params", "eval_batch_size", "nodes_per_seed", "plan_batches", "run",
           "summary", "train_batches"]

FORMAT_VERSION = 1


def nodes_per_seed(fanouts: list[int], mean_degree: float, neighbour_degree: float | None = None) -> float:
    """Sampled nodes per seed, hop by hop (1 + f1 + f1*f2 + ...), counting every sampled node as new (overlap
    only lowers it). A fanout of -1, every neighbour, counts as ``mean_degree`` at the first hop and as
    ``neighbour_degree`` (the expected degree of a neighbour, E[d^2]/E[d]: hubs are reached more often;
    ``mean_degree`` when None) after it."""
    total, frontier = 1.0, 1.0
    for hop, f in enumerate(fanouts):
        every = mean_degree if hop == 0 or neighbour_degree is None else neighbour_degree
        frontier *= every if f < 0 else float(f)
        total += frontier
    return total


def eval_batch_size(sc: SampleConfig, graph: GraphArrays) -> int:
    """Seeds per validation/test batch: ``sc.eval_batch_size``, lowered while one batch's estimated feature rows
    (``min(num_nodes, seeds x nodes_per_seed)`` rows of ``graph.row_bytes``) exceed ``sc.eval_memory_mb``, but
    never below ``sc.batch_size`` (what a training batch already holds)."""
    fanouts = list(sc.fanouts)
    mean = graph.num_edges / max(graph.num_nodes, 1)
    neighbour = None
    if any(f < 0 for f in fanouts[1:]):  # every neighbour beyond the first hop: the degrees' second moment
        degrees = graph.degrees().astype(np.float64)
        neighbour = float(np.dot(degrees, degrees)) / max(float(degrees.sum()), 1.0)
    per_seed = nodes_per_seed(fanouts, mean, neighbour)
    row_bytes, limit = max(graph.row_bytes, 1), sc.eval_memory_mb << 20
    if min(float(graph.num_nodes), sc.eval_batch_size * per_seed) * row_bytes <= limit:
        return sc.eval_batch_size
    fits = int(limit // (per_seed * row_bytes))
    return max(min(sc.batch_size, sc.eval_batch_size), min(fits, sc.eval_batch_size))


def derived_params(cfg: PipelineConfig, graph: GraphArrays) -> dict[str, Any]:
    """The artifact parameters the stage computes from its input: the evaluation batch size it uses."""
    return {"eval_batch_size": eval_batch_size(cfg.sample, graph)}


def train_batches(train_idx: np.ndarray, batch_size: int, epoch: int, seed: int, parts: np.ndarray | None,
                   macro_parts: int) -> list[np.ndarray]:
    """One epoch of training seed batches: random shuffles, or OUTRE's partition-based macro batches.

    With ``parts``, the partitions are shuffled and grouped ``macro_parts`` at a time; each group's training
    nodes are shuffled and cut into batches, so a batch's seeds share partitions (and neighbourhoods).
    """
    rng = np.random.default_rng([seed & 0xFFFFFFFF, epoch])
    if parts is None:
        order = rng.permutation(train_idx)
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    train_parts = parts[train_idx]
    num_parts = int(parts.max()) + 1 if len(parts) else 0
    part_order = rng.permutation(num_parts)
    rank = np.empty(num_parts, dtype=np.int64)
    rank[part_order] = np.arange(num_parts)
    macro = rank[train_parts] // macro_parts  # macro batch of each training node
    # Shuffle within macro batches: sort by (macro batch, random key).
    order = train_idx[np.lexsort((rng.random(len(train_idx)), macro))]
    macro_sorted = np.sort(macro)
    batches = []
    bounds = np.flatnonzero(np.diff(macro_sorted)) + 1
    for group in np.split(order, bounds):
        batches.extend(group[i : i + batch_size] for i in range(0, len(group), batch_size))
    return batches


def plan_batches(train_idx: np.ndarray, val_idx: np.ndarray, test_idx: np.ndarray, batch_size: int,
                 eval_batch_size: int, epochs: int, seed: int, parts: np.ndarray | None = None,
                 macro_parts: int = 20) -> list[tuple[str, int, int, np.ndarray]]:
    """(split, epoch, step, seeds) of every batch: training epochs, then val and test in order."""
    batches = []
    train_idx = np.asarray(train_idx)
    for epoch in range(epochs):
        for step, seeds in enumerate(train_batches(train_idx, batch_size, epoch, seed, parts, macro_parts)):
            batches.append(("train", epoch, step, seeds))
    for split, ids in (("val", val_idx), ("test", test_idx)):
        ids = np.asarray(ids)
        for step, start in enumerate(range(0, len(ids), eval_batch_size)):
            batches.append((split, 0, step, ids[start : start + eval_batch_size]))
    return batches


def run(store: ArtifactStore, cfg: PipelineConfig, *, reorder: Artifact, partition: Artifact,
        progress: Progress | None = None) -> StageResult:
    """Write the ``sample`` artifact (see ``storage_kernels.sampleset`` for the layout)."""
    sc = cfg.sample
    sampler = SAMPLERS.get(sc.sampler)
    graph = load_graph(reorder)
    # a few entries per sampled row, far apart: without this each page fault reads 128 KiB+ around it, and a
    # CSR larger than memory (under a cgroup) thrashed: 30 batches at 10M nodes read over 500 GB, not 312 MB
    # ... and, when the CSR outgrows memory, each batch's rows are asked for ahead, a hop at a time
    prefetch = prepare_csr_reads(graph, cfg.memory_budget)
    derived = derived_params(cfg, graph)

    def build(builder: ArtifactBuilder) -> None:
        if len(graph.train_idx) == 0:
            raise ValueError(f"'{reorder.path}/train_idx.npy' expected training nodes (got none)")
        fanouts = np.asarray(sc.fanouts, dtype=np.int64)
        parts = np.asarray(partition.array("parts.npy")) if sc.batching == "partition" else None
        plan = plan_batches(graph.train_idx, graph.val_idx, graph.test_idx, sc.batch_size,
                            derived["eval_batch_size"], sc.epochs, sc.seed, parts, sc.macro_parts)
        writer = SampleSetWriter(builder)
        train_seeds = train_inputs = 0
        for i, (split, epoch, step, seeds) in enumerate(plan):
            nodes, hop_counts, indptrs, cols = sample_prefetched(
                sampler, graph, np.ascontiguousarray(seeds, dtype=np.int64), fanouts,
                batch_seed(sc.seed, split, epoch, step), sc.num_threads, prefetch)
            writer.add(split, epoch, step, nodes, hop_counts, indptrs, cols)
            if split == "train":
                train_seeds += len(seeds)
                train_inputs += len(nodes)
            if progress:
                progress("sample: batches", i + 1, len(plan))
        writer.close()
        num_train_batches = sum(1 for b in plan if b[0] == "train")
        builder.stats.update(
            {
                "num_batches": writer.num_batches,
                "train_batches_per_epoch": num_train_batches // sc.epochs,
                "eval_batch_size": derived["eval_batch_size"],
                "epochs": sc.epochs,
                "num_layers": len(fanouts),
                "total_input_nodes": writer.total_nodes,
                "total_edges": writer.total_edges,
                "avg_input_nodes_per_batch": writer.total_nodes / max(writer.num_batches, 1),
                # OUTRE's redundancy ratio: sampled neighbourhood size per training seed.
                "redundancy_ratio": train_inputs / max(train_seeds, 1),
            }
        )

    return materialize(store, cfg, "sample", FORMAT_VERSION, {"reorder": reorder, "partition": partition}, build,
                       derived=derived)


def summary(artifact: Artifact) -> dict[str, Any]:
    """Batches, seeds and sampled input nodes per split (asset metadata)."""
    table = artifact.parquet("batches.parquet")
    split = np.asarray(table.column("split").to_pylist(), dtype=object)
    seeds = table.column("num_seeds").to_numpy()
    inputs = np.asarray([h[-1] for h in table.column("hop_counts").to_pylist()], dtype=np.int64)
    rows = []
    for name in SPLITS:
        mask = split == name
        count = int(mask.sum())
        rows.append({"split": name, "batches": count, "seeds": int(seeds[mask].sum()),
                     "input nodes / batch": float(inputs[mask].mean()) if count else 0.0})
    return {"batches_by_split": markdown_table(rows)}
