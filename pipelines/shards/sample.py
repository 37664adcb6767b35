"""Sampling split into shards by batch range, and the merge that turns the shards into the ``sample`` artifact.

The sample stage's batches are a pure function of their (split, epoch, step) and the configuration
(:func:`pipelines.methods.samplers.batch_seed`), so any contiguous range of the batch plan can be sampled on its
own. Shard ``i`` of ``k`` samples the plan's batches ``[i*B//k, (i+1)*B//k)`` into a ``sample_shard`` artifact
(the sample-set layout of :mod:`storage_kernels.sampleset`, holding only its batches). :func:`merge` replays
the shards' batches in order through the same :class:`~storage_kernels.sampleset.SampleSetWriter` into the
``sample`` artifact, under the version the sample stage gives it: the result is the unpartitioned artifact,
byte for byte, and every stage downstream reuses it. No Dagster import here (:mod:`pipelines.orchestration.partitions`
wires the shards as Dagster partitions).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from pipelines.config import PipelineConfig, artifact_params
from pipelines.core.graphio import load_graph
from pipelines.core.progress import Progress
from pipelines.methods.samplers import SAMPLERS, batch_seed
from pipelines.methods.samplers.prefetch import prepare_csr_reads, sample_prefetched
from pipelines.stages import sample as sample_stage
from pipelines.stages.common import StageResult, materialize, peak_rss_mb
from storage_kernels.sampleset import SampleSet, SampleSetWriter
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["FORMAT_VERSION", "SHARD_STAGE", "find_shards", "merge", "run_shard", "shard_bounds"]

SHARD_STAGE = "sample_shard"
FORMAT_VERSION = 1


def shard_bounds(num_batches: int, shards: int) -> list[int]:
    """The ``shards + 1`` plan positions that cut ``num_batches`` batches into ``shards`` contiguous ranges."""
    if shards < 1:
        raise ValueError(f"'shards' expected >= 1 (got {shards})")
    return [i * num_batches // shards for i in range(shards + 1)]


def _plan(cfg: PipelineConfig, reorder: Artifact, partition: Artifact, derived: dict[str, Any]
          ) -> tuple[Any, list[tuple]]:
    """The graph and the sample stage's batch plan (same call as ``sample.run``)."""
    sc = cfg.sample
    graph = load_graph(reorder)
    if len(graph.train_idx) == 0:
        raise ValueError(f"'{reorder.path}/train_idx.npy' expected training nodes (got none)")
    parts = np.asarray(partition.array("parts.npy")) if sc.batching == "partition" else None
    return graph, sample_stage.plan_batches(graph.train_idx, graph.val_idx, graph.test_idx, sc.batch_size,
                                            derived["eval_batch_size"], sc.epochs, sc.seed, parts, sc.macro_parts)


def _derived(cfg: PipelineConfig, reorder: Artifact) -> dict[str, Any]:
    """The sample stage's derived parameters (``sample_stage.derived_params``): computed once per call here."""
    return sample_stage.derived_params(cfg, load_graph(reorder))


def _shard_version(store: ArtifactStore, cfg: PipelineConfig, index: int, shards: int, reorder: Artifact,
                   partition: Artifact, derived: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
    params = {**artifact_params(cfg, "sample"), **derived, "shard": index, "shards": shards}
    upstream = {"reorder": reorder.version, "partition": partition.version}
    return store.version_for(SHARD_STAGE, FORMAT_VERSION, params, upstream), params, upstream


def run_shard(store: ArtifactStore, cfg: PipelineConfig, index: int, shards: int, *, reorder: Artifact,
              partition: Artifact, progress: Progress | None = None) -> StageResult:
    """Sample shard ``index`` of ``shards`` (reused when it exists)."""
    if not 0 <= index < shards:
        raise ValueError(f"'shard' expected 0 <= index < {shards} (got {index})")
    derived = _derived(cfg, reorder)
    version, params, upstream = _shard_version(store, cfg, index, shards, reorder, partition, derived)
    existing = store.find(cfg.dataset_name, SHARD_STAGE, version)
    if existing is not None:
        return StageResult(existing, reused=True, metadata={"version": version, "path": str(existing.path)})
    sc = cfg.sample
    sampler = SAMPLERS.get(sc.sampler)
    start = time.perf_counter()
    with store.builder(cfg.dataset_name, SHARD_STAGE, version, params, upstream,
                       format_version=FORMAT_VERSION) as builder:
        graph, plan = _plan(cfg, reorder, partition, derived)
        lo, hi = shard_bounds(len(plan), shards)[index : index + 2]
        fanouts = np.asarray(sc.fanouts, dtype=np.int64)
        # as the sample stage: rows read at random, and read ahead a hop at a time when the CSR outgrows memory
        prefetch = prepare_csr_reads(graph, cfg.memory_budget)
        writer = SampleSetWriter(builder)
        train_seeds = train_inputs = 0
        for i, (split, epoch, step, seeds) in enumerate(plan[lo:hi]):
            nodes, hop_counts, indptrs, cols = sample_prefetched(
                sampler, graph, np.ascontiguousarray(seeds, dtype=np.int64), fanouts,
                batch_seed(sc.seed, split, epoch, step), sc.num_threads, prefetch)
            writer.add(split, epoch, step, nodes, hop_counts, indptrs, cols)
            if split == "train":
                train_seeds += len(seeds)
                train_inputs += len(nodes)
            if progress:
                progress(f"sample shard {index}/{shards}: batches", i + 1, hi - lo)
        writer.close()
        builder.stats.update({"shard": index, "shards": shards, "first_batch": lo, "num_batches": hi - lo,
                              "plan_batches": len(plan), "train_seeds": train_seeds, "train_inputs": train_inputs,
                              "peak_rss_mb": round(peak_rss_mb(), 1)})
        builder.timings["total_s"] = round(time.perf_counter() - start, 4)
        artifact = builder.publish()
    return StageResult(artifact, reused=False, metadata={"version": version, "path": str(artifact.path)})


def find_shards(store: ArtifactStore, cfg: PipelineConfig, shards: int, *, reorder: Artifact,
                partition: Artifact) -> list[Artifact | None]:
    """Every shard of this configuration, None where it was not sampled yet."""
    derived = _derived(cfg, reorder)
    return [store.find(cfg.dataset_name, SHARD_STAGE,
                       _shard_version(store, cfg, i, shards, reorder, partition, derived)[0]) for i in range(shards)]


def merge(store: ArtifactStore, cfg: PipelineConfig, shards: list[Artifact], *, reorder: Artifact,
          partition: Artifact, progress: Progress | None = None) -> StageResult:
    """The ``sample`` artifact assembled from every shard, in order (reused when it exists already)."""
    expected = 0
    for i, shard in enumerate(shards):
        s = shard.stats
        if (s.get("shard"), s.get("shards"), s.get("first_batch")) != (i, len(shards), expected):
            raise ValueError(f"'{shard.path}' expected shard {i} of {len(shards)} starting at batch {expected} (got "
                             f"shard {s.get('shard')} of {s.get('shards')} starting at {s.get('first_batch')})")
        expected += int(s["num_batches"])
    if shards and expected != int(shards[-1].stats["plan_batches"]):
        raise ValueError(f"'shards' expected {shards[-1].stats['plan_batches']} batches in all (got {expected})")
    sc = cfg.sample
    derived = _derived(cfg, reorder)

    def build(builder: ArtifactBuilder) -> None:
        writer = SampleSetWriter(builder)
        done = 0
        for shard in shards:
            samples = SampleSet(shard.path)
            for i in range(len(samples)):
                b = samples.batch(i)
                writer.add(b.split, b.epoch, b.step, b.nodes, b.hop_counts, b.indptrs, b.cols)
                done += 1
                if progress:
                    progress("sample: merging shards", done, expected)
        writer.close()
        train_seeds = sum(int(s.stats["train_seeds"]) for s in shards)
        train_inputs = sum(int(s.stats["train_inputs"]) for s in shards)
        num_train_batches = sum(len(SampleSet(s.path).batch_ids("train")) for s in shards)
        builder.stats.update({  # the same stats as sample.run's
            "num_batches": writer.num_batches,
            "train_batches_per_epoch": num_train_batches // sc.epochs,
            "eval_batch_size": derived["eval_batch_size"],
            "epochs": sc.epochs,
            "num_layers": len(sc.fanouts),
            "total_input_nodes": writer.total_nodes,
            "total_edges": writer.total_edges,
            "avg_input_nodes_per_batch": writer.total_nodes / max(writer.num_batches, 1),
            "redundancy_ratio": train_inputs / max(train_seeds, 1),
        })

    return materialize(store, cfg, "sample", sample_stage.FORMAT_VERSION, {"reorder": reorder, "partition": partition},
                       build, derived=derived)
