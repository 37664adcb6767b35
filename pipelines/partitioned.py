"""Partitioned sampling, an opt-in variant of the ``sample`` asset (:mod:`pipelines.sample_shards`).

``sample_shards`` is a Dagster asset with one static partition per shard of the batch plan
(:data:`SAMPLE_SHARDS`); a backfill launches one run per partition (no backfill policy: Dagster's default), so a
backfill of
``sample_shards_job`` samples the shards in parallel processes (as many at once as the run coordinator
allows). ``sample_merged`` (``sample_merge_job``) then assembles them into the ``sample`` artifact, byte for byte
the one ``strata_job`` would sample, which ``strata_job`` and ``retrain_job`` reuse from then on. These assets
form their own group and are left out of ``strata_job``, so the unpartitioned path is unchanged.
"""

import dagster as dg

from pipelines.formatting import format_bytes
from pipelines.resources import StrataResource
from pipelines.sample_shards import FORMAT_VERSION, find_shards, merge, run_shard
from pipelines.stages.common import StageResult

__all__ = ["GROUP_PARTITIONED", "PARTITIONED_ASSETS", "PARTITIONED_JOBS", "SAMPLE_SHARDS", "shard_partitions"]

GROUP_PARTITIONED = "partitioned"
#: Shards of the batch plan (the partitions of ``sample_shards``).
SAMPLE_SHARDS = 4
shard_partitions = dg.StaticPartitionsDefinition([str(i) for i in range(SAMPLE_SHARDS)])


def _metadata(result: StageResult) -> dict[str, object]:
    artifact = result.artifact
    size = sum(info.bytes for info in artifact.files.values())
    return {"dataset": artifact.dataset, "version": artifact.version, "reused": result.reused,
            "path": dg.MetadataValue.path(str(artifact.path)), "bytes": size, "size": format_bytes(size),
            **{k: v for k, v in artifact.stats.items() if isinstance(v, (int, float, str, bool))}}


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
    context.log.info(f"shard {context.partition_key}/{SAMPLE_SHARDS} {result.version}: "
                     f"{'reused' if result.reused else 'sampled'} ({result.artifact.path})")
    return dg.MaterializeResult(metadata=_metadata(result), data_version=dg.DataVersion(result.version))


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
    context.log.info(f"sample {result.version}: {'reused' if result.reused else 'merged'} from {SAMPLE_SHARDS} "
                     f"shards ({result.artifact.path})")
    return dg.MaterializeResult(metadata=_metadata(result), data_version=dg.DataVersion(result.version))


PARTITIONED_ASSETS = [sample_shards, sample_merged]
_IN_PROCESS = {"execution": {"config": {"in_process": {}}}}
PARTITIONED_JOBS = [
    dg.define_asset_job("sample_shards_job", selection=dg.AssetSelection.assets(sample_shards),
                        config=_IN_PROCESS,
                        description="One shard of the sample stage per partition (backfill all partitions to "
                                    "sample them in parallel runs); then run sample_merge_job."),
    dg.define_asset_job("sample_merge_job", selection=dg.AssetSelection.assets(sample_merged), config=_IN_PROCESS,
                        description="Assemble the sampled shards into the sample artifact strata_job reuses."),
]
