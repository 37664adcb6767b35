"""Pack stage: the on-disk layout training reads, written by the policy (DiskGNN: batched packing).

``cfg.policy`` (an entry of :data:`pipelines.methods.policies.POLICIES`) writes the files; the default policy's layout
is ``storage_kernels.packstore``'s (cache blocks, per-segment disk caches within ``pack.disk_budget``, per-batch
aligned chunks in ``packed.bin``, address tables aligned with the samples). A policy that reads the feature file
or RAM directly lays out nothing (stats ``layout: none``). The version carries the policy's name;
``pack.memory_mb`` and ``pack.num_threads`` change speed, not content, so they are not part of it.
"""

from __future__ import annotations

from typing import Any

from pipelines.config import PipelineConfig
from pipelines.core.formatting import format_bytes, markdown_table
from pipelines.core.graphio import load_graph
from pipelines.core.progress import Progress
from pipelines.methods.policies import POLICIES, PackInputs
from pipelines.methods.policies.auto import choice_stats, choice_version, resolved
from pipelines.stages.common import StageResult, materialize
from storage_kernels.sampleset import SampleSet
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["ALSO_READS", "FORMAT_VERSION", "run", "summary"]

FORMAT_VERSION = 4  # 2: segment disk caches (disk_cache.bin, segment_*.npy, batch_segment.npy); 3: the disk
# budget counts the feature file in whole 4 KiB blocks; 4: the (m, s) search refines m between powers of two
#: Configuration this stage reads beyond its own section (it enters the artifact version).
ALSO_READS = ("policy",)


def run(store: ArtifactStore, cfg: PipelineConfig, *, reorder: Artifact, sample: Artifact, plan: Artifact,
        progress: Progress | None = None) -> StageResult:
    """Write the ``pack`` artifact (layout in ``docs/CONTRACTS.md``)."""
    run_cfg = resolved(cfg, plan.stats)  # policy=auto: the policy and settings its plan chose
    policy = POLICIES.get(run_cfg.policy)()

    def build(builder: ArtifactBuilder) -> None:
        stats = policy.pack(PackInputs(load_graph(reorder), SampleSet(sample.path), plan, run_cfg, builder, progress))
        builder.stats.update({"policy": cfg.policy, **stats, **choice_stats(plan.stats)})

    return materialize(store, cfg, "pack", FORMAT_VERSION, {"reorder": reorder, "sample": sample, "plan": plan},
                       build, also=ALSO_READS, derived=choice_version(plan.stats))


def summary(artifact: Artifact) -> dict[str, Any]:
    """Layout size, disk blow-up and bytes one training epoch reads (asset metadata)."""
    s = artifact.stats
    if s.get("layout") == "none":
        return {"summary": markdown_table({"policy": s.get("policy", ""), "layout": "none (reads the feature "
                                                                                   "file or RAM)"})}
    if s.get("layout") == "hyperbatch":
        return {"summary": markdown_table({
            "aligned.bin": format_bytes(s.get("aligned_bytes", 0)),
            "disk blow-up (x features)": s.get("disk_blowup", ""),
            "rows per 4 KiB block": s.get("rows_per_block", ""),
            "hyperbatches": s.get("hyperbatches", ""),
            "batches per hyperbatch": s.get("batches_per_hyperbatch", ""),
            "bytes read per training epoch (planned hotset)": format_bytes(s.get("epoch_read_bytes", 0)),
        })}
    if s.get("layout") == "outre":  # pruned batches and the historical cache's schedule
        keys = ("staleness", "candidates", "pulls", "pushes", "train_rows_sampled", "train_rows_read",
                "pruned_fraction")
        return {"summary": markdown_table({k.replace("_", " "): s.get(k, "") for k in keys})}
    if s.get("layout") == "changesets":  # ginex: no rows written, the cache's changes per superbatch
        return {"summary": markdown_table({
            "policy": s.get("policy", ""), "cache rows": s.get("cache_rows", ""),
            "superbatches": s.get("superbatches", ""), "training batches": s.get("trace_batches", ""),
            "predicted hit rate": s.get("predicted_hit_rate", ""), "cache changes": s.get("changes", ""),
            "initial prefetch rows": s.get("prefetch_rows", ""),
        })}
    rows = {
        "batches": s.get("num_batches", ""),
        "packed rows": s.get("packed_rows", ""),
        "packed.bin": format_bytes(s.get("packed_bytes", 0)),
        "segments x batches (m)": f"{s.get('segments', '')} x {s.get('segment_batches', '')}",
        "disk-cache rows per segment (s)": s.get("segment_cache_rows", ""),
        "disk_cache.bin": format_bytes(s.get("disk_cache_bytes", 0)),
        "disk budget (x features)": s.get("disk_budget", ""),
        "disk blow-up (x features)": s.get("disk_blowup", ""),
        "bytes read per training epoch": format_bytes(s.get("epoch_read_bytes", 0)),
        "feature partitions while packing": s.get("partitions", ""),
    }
    return {"summary": markdown_table(rows)}
