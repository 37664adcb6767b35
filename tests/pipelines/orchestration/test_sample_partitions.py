"""Partitioned sampling: the shards merged equal the unpartitioned ``sample`` artifact byte for byte, through the
stage functions and through the Dagster partitions (which ``strata_job`` then reuses)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import dagster as dg
import pytest

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.orchestration.definitions import STRATA_JOB, make_definitions
from pipelines.orchestration.partitions import SAMPLE_SHARDS
from pipelines.orchestration.resources import build_resources
from pipelines.runner import StageRunner
from pipelines.shards.sample import find_shards, merge, run_shard, shard_bounds
from storage_kernels.store import Artifact

pytestmark = pytest.mark.skipif(importlib.util.find_spec("storage_kernels._native") is None,
                                reason="the storage_kernels._native extension is not built")

_FILES = ("nodes.npy", "indptr.npy", "cols.npy", "batches.parquet")
_QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def _config() -> PipelineConfig:
    return PipelineConfig.load(dataset="tiny", overrides=["sample.epochs=2", "sample.batch_size=256",
                                                          "sample.eval_batch_size=512"])


def _assert_same(merged: Artifact, reference: Artifact) -> None:
    assert merged.version == reference.version
    for name in _FILES:
        assert (merged.path / name).read_bytes() == (reference.path / name).read_bytes(), name
    strip = lambda stats: {k: v for k, v in stats.items() if k != "peak_rss_mb"}  # noqa: E731
    assert strip(merged.stats) == strip(reference.stats)


def test_shard_bounds_cover_the_plan() -> None:
    assert shard_bounds(10, 4) == [0, 2, 5, 7, 10]
    assert shard_bounds(2, 4) == [0, 0, 1, 1, 2]  # more shards than batches: some are empty
    with pytest.raises(ValueError, match="'shards' expected >= 1"):
        shard_bounds(3, 0)


# 1.3 MB of features and 1 MiB for an evaluation batch: its 512 seeds are cut to the training batch's 256
_CUT_EVAL = PipelineConfig.load(dataset="synthetic:nodes=2500,degree=10,dim=128,classes=6,seed=0",
                                overrides=["sample.epochs=2", "sample.batch_size=256", "sample.eval_batch_size=512",
                                           "sample.eval_memory_mb=1"])


@pytest.mark.parametrize("cfg", [_config(), _CUT_EVAL], ids=["tiny", "eval-batches-cut-by-memory"])
def test_merged_shards_equal_the_unpartitioned_sample(tmp_path: Path, cfg: PipelineConfig) -> None:
    reference = StageRunner(cfg, StrataPaths.at(tmp_path / "a").store()).artifact("sample")
    runner = StageRunner(cfg, StrataPaths.at(tmp_path / "b").store())
    reorder, partition = runner.artifact("reorder"), runner.artifact("partition")
    shards = [run_shard(runner.store, cfg, i, 3, reorder=reorder, partition=partition).artifact for i in range(3)]
    assert sum(s.stats["num_batches"] for s in shards) == reference.stats["num_batches"] > 3
    with pytest.raises(ValueError, match="expected shard 0 of 2 starting at batch 0"):
        merge(runner.store, cfg, shards[1:], reorder=reorder, partition=partition)
    merged = merge(runner.store, cfg, shards, reorder=reorder, partition=partition)
    assert not merged.reused
    _assert_same(merged.artifact, reference)
    assert run_shard(runner.store, cfg, 1, 3, reorder=reorder, partition=partition).reused
    assert runner.artifact("sample").version == reference.version
    assert merged.artifact.stats["eval_batch_size"] == (256 if cfg.sample.eval_memory_mb == 1 else 512)


def test_dagster_partitions_build_the_sample_strata_job_reuses(tmp_path: Path) -> None:
    cfg = _config()
    reference = StageRunner(cfg, StrataPaths.at(tmp_path / "a").store()).artifact("sample")
    defs = make_definitions(build_resources(root=str(tmp_path / "b"), config=cfg))
    instance = dg.DagsterInstance.ephemeral()
    shards_job = defs.resolve_job_def("sample_shards_job")
    assert shards_job.partitions_def is not None
    assert shards_job.partitions_def.get_partition_keys() == [str(i) for i in range(SAMPLE_SHARDS)]
    merge_job = defs.resolve_job_def("sample_merge_job")
    early = merge_job.execute_in_process(run_config=_QUIET, instance=instance, raise_on_error=False)
    assert not early.success  # no shard yet: the merge names the missing partitions
    for key in shards_job.partitions_def.get_partition_keys():
        result = shards_job.execute_in_process(partition_key=key, run_config=_QUIET, instance=instance)
        assert result.success
    merged = merge_job.execute_in_process(run_config=_QUIET, instance=instance)
    [event] = merged.get_asset_materialization_events()
    assert event.materialization.metadata["version"].value == reference.version
    store = StrataPaths.at(tmp_path / "b").store()
    runner = StageRunner(cfg, store)
    assert all(s is not None for s in find_shards(store, cfg, SAMPLE_SHARDS, reorder=runner.artifact("reorder"),
                                                 partition=runner.artifact("partition")))
    _assert_same(store.find("tiny", "sample", reference.version), reference)
    # the unpartitioned path is unchanged and reuses the merged artifact
    full = defs.resolve_job_def(STRATA_JOB).execute_in_process(
        run_config=_QUIET, instance=instance,
        asset_selection=[dg.AssetKey(n) for n in ("ingest", "reorder", "partition", "sample")])
    [sample] = [e for e in full.get_asset_materialization_events() if e.asset_key.to_user_string() == "sample"]
    assert sample.materialization.metadata["reused"].value is True
