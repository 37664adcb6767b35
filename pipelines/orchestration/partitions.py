"""Partitioned sampling and packing, opt-in variants of the ``sample`` and ``pack`` assets
(:mod:`pipelines.shards.sample`, :mod:`pipelines.shards.pack`).

``sample_shards`` is a Dagster asset with one static partition per shard of the batch plan
(:data:`SAMPLE_SHARDS`); a backfill launches one run per partition (no backfill policy: Dagster's default), so a
backfill of
``sample_shards_job`` samples the shards in parallel processes (as many at once as the run coordinator
allows). ``sample_merged`` (``sample_merge_job``) then assembles them into the ``sample`` artifact, byte for byte
the one ``strata_job`` would sample, which ``strata_job`` and ``retrain_job`` reuse from then on. These assets
form their own group and are left out of ``strata_job``, so the unpartitioned path is unchanged.

``pack_shards`` / ``pack_merged`` do the same for the pack stage (:data:`PACK_SHARDS` partitions, units of the
policy's pack: batches for ``diskgnn``, superbatches for ``ginex``, row groups of ``aligned.bin`` for
``hyperbatch``); the first shard to run writes the pack's global part once (``pack_prep``) while the others wait
for it. ``pack_merged`` writes the ``pack`` artifact
``strata_job`` would, byte for byte; a missing or corrupted shard fails it, naming the partition, before anything
is written. Policies whose pack is one global pass (``mariusgnn``, ``outre``) fail with an error naming the
shardable ones (:mod:`pipelines.methods.policies.sharded`).
"""

import dagster as dg

from pipelines.core.formatting import format_bytes
from pipelines.orchestration.resources import StrataResource
from pipelines.shards import pack as pack_shards
from pipelines.shards.sample import FORMAT_VERSION, find_shards, merge, run_shard
from pipelines.stages.common import StageResult

__all__ = ["GROUP_PARTITIONED", "PACK_SHARDS", "PARTITIONED_ASSETS", "PARTITIONED_JOBS", "SAMPLE_SHARDS",
           "pack_partitions", "shard_partitions"]

GROUP_PARTITIONED = "partitioned"
#: Shards of the batch plan (the partitions of ``sample_shards``).
SAMPLE_SHARDS = 4
shard_partitions = dg.StaticPartitionsDefinition([str(i) for i in range(SAMPLE_SHARDS)])
#: Shards of the policy's pack units (the partitions of ``pack_shards``).
PACK_SHARDS = 4
pack_partitions = dg.StaticPartitionsDefinition([str(i) for i in range(PACK_SHARDS)])


def _metadata(result: StageResult) -> dict[str, object]:
    artifact = result.artifact
    size = sum(info.bytes for info in artifact.files.values())
    return {"dataset": artifact.dataset, "version": artifact.version, "reused": result.reused,
            "path": dg.MetadataValue.path(str(artifact.path)), "bytes": size, "size": format_bytes(size),
            **{k: v for k, v in artifact.stats.items() if isinstance(v, (int, float, str, bool))}}


def _report(context: dg.AssetExecutionContext, what: str, result: StageResult, done: str) -> dg.MaterializeResult:
    """Log ``what``'s outcome (``reused`` or ``done``) and return it as the asset's materialization."""
    context.log.info(f"{what} {result.version}: {'reused' if result.reused else done} ({result.artifact.path})")
    return dg.MaterializeResult(metadata=_metadata(result), data_version=dg.DataVersion(result.version))


@dg.asset(
    name="sample_shards",
    deps=["reorder", "partition"],
    partitions_def=shard_partitions,
    group_name=GROUP_PARTITIONED,
    code_version=str(FORMAT_VERSION),
    kinds={"numpy", "parquet"},
    description=f"The sample stage's batch plan cut into {SAMPLE_SHARDS} contiguous ranges, one partition each; a "
                "backfill samples them in parallel runs.",
)
def sample_shards(context: dg.AssetExecutionContext, strata: StrataResource) -> dg.MaterializeResult:
    runner = strata.runner(context.log)
    result = run_shard(runner.store, runner.cfg, int(context.partition_key), SAMPLE_SHARDS,
                       reorder=runner.artifact("reorder"), partition=runner.artifact("partition"))
    return _report(context, f"shard {context.partition_key}/{SAMPLE_SHARDS}", result, "sampled")


@dg.asset(
    name="sample_merged",
    deps=["sample_shards"],
    group_name=GROUP_PARTITIONED,
    code_version=str(FORMAT_VERSION),
    kinds={"numpy", "parquet"},
    description="The `sample` artifact assembled from every shard of sample_shards, identical to the one the "
                "unpartitioned sample asset writes (which then reuses it).",
)
def sample_merged(context: dg.AssetExecutionContext, strata: StrataResource) -> dg.MaterializeResult:
    runner = strata.runner(context.log)
    reorder, partition = runner.artifact("reorder"), runner.artifact("partition")
    shards = find_shards(runner.store, runner.cfg, SAMPLE_SHARDS, reorder=reorder, partition=partition)
    missing = [str(i) for i, shard in enumerate(shards) if shard is None]
    if missing:
        raise ValueError(f"'sample_shards' expected every partition materialized for this configuration (got none "
                         f"for partitions {', '.join(missing)}: backfill sample_shards_job first)")
    result = merge(runner.store, runner.cfg, [s for s in shards if s is not None], reorder=reorder,
                   partition=partition)
    return _report(context, "sample", result, f"merged from {SAMPLE_SHARDS} shards")


@dg.asset(
    name="pack_shards",
    deps=["reorder", "sample", "plan"],
    partitions_def=pack_partitions,
    group_name=GROUP_PARTITIONED,
    code_version=str(pack_shards.FORMAT_VERSION),
    kinds={"numpy"},
    description=f"The pack stage's units (diskgnn: batches, ginex: superbatches, hyperbatch: row groups) cut into "
                f"{PACK_SHARDS} contiguous ranges, one partition each; a backfill packs them in parallel runs (the "
                "global part once, by the first).",
)
def pack_shards_asset(context: dg.AssetExecutionContext, strata: StrataResource) -> dg.MaterializeResult:
    runner = strata.runner(context.log)
    result = pack_shards.run_shard(runner.store, runner.cfg, int(context.partition_key), PACK_SHARDS,
                                   reorder=runner.artifact("reorder"), sample=runner.artifact("sample"),
                                   plan=runner.artifact("plan"))
    return _report(context, f"pack shard {context.partition_key}/{PACK_SHARDS}", result, "packed")


@dg.asset(
    name="pack_merged",
    deps=["pack_shards"],
    group_name=GROUP_PARTITIONED,
    code_version=str(pack_shards.FORMAT_VERSION),
    kinds={"numpy"},
    description="The `pack` artifact assembled from every shard of pack_shards, identical to the one the "
                "unpartitioned pack asset writes (which then reuses it).",
)
def pack_merged(context: dg.AssetExecutionContext, strata: StrataResource) -> dg.MaterializeResult:
    runner = strata.runner(context.log)
    result = pack_shards.merge(runner.store, runner.cfg, PACK_SHARDS, reorder=runner.artifact("reorder"),
                               sample=runner.artifact("sample"), plan=runner.artifact("plan"))
    return _report(context, "pack", result, f"merged from {PACK_SHARDS} shards")


PARTITIONED_ASSETS = [sample_shards, sample_merged, pack_shards_asset, pack_merged]
_IN_PROCESS = {"execution": {"config": {"in_process": {}}}}


def _shard_jobs(stage: str, shards: dg.AssetsDefinition, merged: dg.AssetsDefinition) -> list:
    """``<stage>_shards_job`` (one shard per partition: backfill them all to run them in parallel) and
    ``<stage>_merge_job`` (the shards assembled into the artifact strata_job reuses)."""
    return [
        dg.define_asset_job(f"{stage}_shards_job", selection=dg.AssetSelection.assets(shards), config=_IN_PROCESS,
                            description=f"One shard of the {stage} stage per partition (backfill all partitions to "
                                        f"run them in parallel); then run {stage}_merge_job."),
        dg.define_asset_job(f"{stage}_merge_job", selection=dg.AssetSelection.assets(merged), config=_IN_PROCESS,
                            description=f"Assemble the {stage} shards into the {stage} artifact strata_job reuses."),
    ]


PARTITIONED_JOBS = [*_shard_jobs("sample", sample_shards, sample_merged),
                    *_shard_jobs("pack", pack_shards_asset, pack_merged)]
