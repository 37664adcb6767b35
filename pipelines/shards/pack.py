"""Packing split into shards, and the merge that turns them into the ``pack`` artifact.

The policy's pack is cut into a global part and independent units (its ``Policy.sharded_pack``, the interface
in :mod:`pipelines.methods.policies.sharded`: batches for ``diskgnn``, superbatches for ``ginex``).
:func:`prepare` writes the global part once into a ``pack_prep`` artifact (under a lock, so shards started
together wait for one of them to write it instead of all writing it); shard ``i`` of ``k`` (:func:`run_shard`)
writes the units ``[i*U//k, (i+1)*U//k)`` into a ``pack_shard`` artifact; :func:`merge` checks every shard
(present, in order, intact: fully re-checksummed) before writing anything, then writes the ``pack`` artifact
under the version the pack stage gives it, byte for byte the unpartitioned one, which every stage downstream
reuses. No Dagster import here (:mod:`pipelines.orchestration.partitions` wires the shards as Dagster
partitions).
"""

from __future__ import annotations

import time
from typing import Any

from pipelines.config import PipelineConfig, artifact_params
from pipelines.core.graphio import load_graph
from pipelines.core.progress import Progress
from pipelines.methods.policies import POLICIES, PackInputs, Policy
from pipelines.methods.policies.auto import choice_stats, choice_version, resolved
from pipelines.methods.policies.sharded import NoLayout, ShardedPack
from pipelines.shards.sample import shard_bounds
from pipelines.stages import pack as pack_stage
from pipelines.stages.common import StageResult, materialize, peak_rss_mb
from storage_kernels.integrity import ArtifactCorrupted, find_verified
from storage_kernels.locks import root_lock
from storage_kernels.sampleset import SampleSet
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["FORMAT_VERSION", "PREP_STAGE", "SHARD_STAGE", "ShardError", "find_shards", "merge", "prepare",
           "run_shard", "sharded_pack_for"]

PREP_STAGE = "pack_prep"
SHARD_STAGE = "pack_shard"
FORMAT_VERSION = 1



def sharded_pack_for(policy_name: str) -> ShardedPack:
    """How ``policy_name``'s pack runs partitioned (``Policy.sharded_pack``; policies that lay nothing out shard
    trivially); ``ValueError`` naming the shardable policies otherwise."""
    policy = POLICIES.get(policy_name)()
    if type(policy).pack is Policy.pack:
        return NoLayout(policy.pack)
    sharded = policy.sharded_pack()
    if sharded is None:
        shardable = sorted(n for n in POLICIES.names() if n != "auto" and (  # auto packs as what it chose
            POLICIES.get(n).pack is Policy.pack or POLICIES.get(n)().sharded_pack() is not None))
        raise ValueError(f"'policy' expected one whose pack runs partitioned ({', '.join(shardable)}) (got "
                         f"{policy_name}: its pack is one global pass; materialize the unpartitioned pack asset)")
    return sharded

class ShardError(ValueError):
    """A shard the merge cannot use (missing, out of order, corrupted); ``index`` names its partition."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def _upstream(reorder: Artifact, sample: Artifact, plan: Artifact) -> dict[str, Artifact]:
    return {"reorder": reorder, "sample": sample, "plan": plan}


def _prep_version(store: ArtifactStore, cfg: PipelineConfig, upstream: dict[str, Artifact]
                  ) -> tuple[str, dict[str, Any], dict[str, str]]:
    # the pack's own parameters and format: a change to either is a new prep (and new shards)
    params = {**artifact_params(cfg, "pack", pack_stage.ALSO_READS), "pack_format": pack_stage.FORMAT_VERSION,
              **choice_version(upstream["plan"].stats)}
    versions = {name: art.version for name, art in upstream.items()}
    return store.version_for(PREP_STAGE, FORMAT_VERSION, params, versions), params, versions


def _shard_version(store: ArtifactStore, prep: Artifact, index: int, shards: int
                   ) -> tuple[str, dict[str, Any], dict[str, str]]:
    params, upstream = {"shard": index, "shards": shards}, {PREP_STAGE: prep.version}
    return store.version_for(SHARD_STAGE, FORMAT_VERSION, params, upstream), params, upstream


def _inputs(cfg: PipelineConfig, reorder: Artifact, sample: Artifact, plan: Artifact, builder: ArtifactBuilder,
            progress: Progress | None) -> PackInputs:
    return PackInputs(load_graph(reorder), SampleSet(sample.path), plan, resolved(cfg, plan.stats), builder, progress)


def prepare(store: ArtifactStore, cfg: PipelineConfig, *, reorder: Artifact, sample: Artifact, plan: Artifact,
            progress: Progress | None = None) -> StageResult:
    """The ``pack_prep`` artifact: the global part of the policy's pack and the number of units (reused when
    it exists; built by one process at a time)."""
    packer = sharded_pack_for(resolved(cfg, plan.stats).policy)  # an unshardable policy fails before any build
    upstream = _upstream(reorder, sample, plan)
    version, params, versions = _prep_version(store, cfg, upstream)
    with root_lock(store.root, f"{PREP_STAGE}-{cfg.dataset_name}-{version}"):
        existing = find_verified(store, cfg.dataset_name, PREP_STAGE, version, cfg.verify.on_reuse)
        if existing is not None:
            return StageResult(existing, reused=True, metadata={"version": version, "path": str(existing.path)})
        start = time.perf_counter()
        with store.builder(cfg.dataset_name, PREP_STAGE, version, params, versions,
                           format_version=FORMAT_VERSION) as builder:
            units = packer.prepare(_inputs(cfg, reorder, sample, plan, builder, progress))
            builder.stats.update({"policy": cfg.policy, "units": units, "peak_rss_mb": round(peak_rss_mb(), 1)})
            builder.timings["total_s"] = round(time.perf_counter() - start, 4)
            artifact = builder.publish()
    return StageResult(artifact, reused=False, metadata={"version": version, "path": str(artifact.path)})


def run_shard(store: ArtifactStore, cfg: PipelineConfig, index: int, shards: int, *, reorder: Artifact,
              sample: Artifact, plan: Artifact, progress: Progress | None = None) -> StageResult:
    """Pack shard ``index`` of ``shards`` (reused when it exists; the prep is built first when missing)."""
    if not 0 <= index < shards:
        raise ValueError(f"'shard' expected 0 <= index < {shards} (got {index})")
    packer = sharded_pack_for(resolved(cfg, plan.stats).policy)
    prep = prepare(store, cfg, reorder=reorder, sample=sample, plan=plan, progress=progress).artifact
    version, params, upstream = _shard_version(store, prep, index, shards)
    existing = find_verified(store, cfg.dataset_name, SHARD_STAGE, version, cfg.verify.on_reuse)
    if existing is not None:
        return StageResult(existing, reused=True, metadata={"version": version, "path": str(existing.path)})
    units = int(prep.stats["units"])
    lo, hi = shard_bounds(units, shards)[index : index + 2]
    start = time.perf_counter()
    with store.builder(cfg.dataset_name, SHARD_STAGE, version, params, upstream,
                       format_version=FORMAT_VERSION) as builder:
        stats = packer.shard(_inputs(cfg, reorder, sample, plan, builder, progress), prep, lo, hi)
        builder.stats.update({**stats, "policy": cfg.policy, "shard": index, "shards": shards, "first_unit": lo,
                              "num_units": hi - lo, "units": units, "peak_rss_mb": round(peak_rss_mb(), 1)})
        builder.timings["total_s"] = round(time.perf_counter() - start, 4)
        artifact = builder.publish()
    return StageResult(artifact, reused=False, metadata={"version": version, "path": str(artifact.path)})


def find_shards(store: ArtifactStore, cfg: PipelineConfig, shards: int, *, reorder: Artifact, sample: Artifact,
                plan: Artifact) -> list[Artifact | None]:
    """Every shard of this configuration, None where it was not packed yet (or no prep exists yet)."""
    version = _prep_version(store, cfg, _upstream(reorder, sample, plan))[0]
    prep = store.find(cfg.dataset_name, PREP_STAGE, version)
    if prep is None:
        return [None] * shards
    return [store.find(cfg.dataset_name, SHARD_STAGE, _shard_version(store, prep, i, shards)[0])
            for i in range(shards)]


def _checked(store: ArtifactStore, cfg: PipelineConfig, prep: Artifact, shards: int) -> list[Artifact]:
    """Every shard, present, fully re-checksummed and covering the units in order (``ShardError`` otherwise;
    a corrupted shard is quarantined, so materializing its partition again rebuilds it)."""
    out: list[Artifact] = []
    units, expected = int(prep.stats["units"]), 0
    for i in range(shards):
        version = _shard_version(store, prep, i, shards)[0]
        where = store.path(cfg.dataset_name, SHARD_STAGE, version)
        try:
            shard = find_verified(store, cfg.dataset_name, SHARD_STAGE, version, "full")
        except ArtifactCorrupted as e:
            raise ShardError(i, f"'pack_shards' partition {i} expected an intact shard (got {e}): materialize "
                                f"partition {i} again") from e
        except (OSError, ValueError) as e:  # an unreadable or truncated manifest
            raise ShardError(i, f"'pack_shards' partition {i} expected a readable shard at {where} (got {e})") from e
        if shard is None:
            raise ShardError(i, f"'pack_shards' partition {i} expected a shard at {where} (got none: materialize "
                                f"partition {i} first)")
        s = shard.stats
        if (s.get("shard"), s.get("shards"), s.get("first_unit"), s.get("units")) != (i, shards, expected, units):
            raise ShardError(i, f"'{shard.path}' expected shard {i} of {shards} starting at unit {expected} of "
                                f"{units} (got shard {s.get('shard')} of {s.get('shards')} starting at "
                                f"{s.get('first_unit')} of {s.get('units')})")
        expected += int(s["num_units"])
        out.append(shard)
    if expected != units:
        raise ShardError(shards - 1, f"'pack_shards' expected {units} units in all (got {expected})")
    return out


def merge(store: ArtifactStore, cfg: PipelineConfig, shards: int, *, reorder: Artifact, sample: Artifact,
          plan: Artifact, progress: Progress | None = None) -> StageResult:
    """The ``pack`` artifact from every shard (checked first: nothing is written unless all are usable)."""
    packer = sharded_pack_for(resolved(cfg, plan.stats).policy)
    upstream = _upstream(reorder, sample, plan)
    version = _prep_version(store, cfg, upstream)[0]
    try:  # fully re-checksummed, like the shards: the merge copies its files into the pack
        prep = find_verified(store, cfg.dataset_name, PREP_STAGE, version, "full")
    except ArtifactCorrupted as e:
        raise ShardError(0, f"'pack_shards' expected an intact pack prep (got {e}): materialize any partition "
                            "again") from e
    if prep is None:
        raise ShardError(0, f"'pack_shards' expected the pack prep {store.path(cfg.dataset_name, PREP_STAGE, version)}"
                            " (got none: materialize the pack_shards partitions first)")
    parts = _checked(store, cfg, prep, shards)

    def build(builder: ArtifactBuilder) -> None:
        stats = packer.merge(_inputs(cfg, reorder, sample, plan, builder, progress), prep, parts)
        builder.stats.update({"policy": cfg.policy, **stats, **choice_stats(plan.stats)})  # as pack.run does

    return materialize(store, cfg, "pack", pack_stage.FORMAT_VERSION, upstream, build, also=pack_stage.ALSO_READS,
                       derived=choice_version(plan.stats))
