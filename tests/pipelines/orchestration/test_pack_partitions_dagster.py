"""Partitioned packing through Dagster: the ``pack_shards`` partitions, run one by one as a backfill runs them,
and ``pack_merged`` build the ``pack`` artifact ``strata_job`` then reuses, byte for byte the unpartitioned one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import dagster as dg
import pytest

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.orchestration.definitions import STRATA_JOB, make_definitions
from pipelines.orchestration.partitions import PACK_SHARDS
from pipelines.orchestration.resources import build_resources
from pipelines.runner import StageRunner
from pipelines.shards import pack as pack_shards
from pipelines.shards.pack import find_shards, prepare
from tests.pipelines.shards.test_pack_partitions import _assert_same

pytestmark = pytest.mark.skipif(importlib.util.find_spec("storage_kernels._native") is None,
                                reason="the storage_kernels._native extension is not built")

_QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def test_dagster_partitions_build_the_pack_strata_job_reuses(tmp_path: Path) -> None:
    cfg = PipelineConfig.load(dataset="tiny", overrides=["sample.epochs=2", "sample.batch_size=64",
                                                         "sample.eval_batch_size=512", "pack.disk_budget=1.3"])
    reference = StageRunner(cfg, StrataPaths.at(tmp_path / "a").store()).artifact("pack")
    defs = make_definitions(build_resources(root=str(tmp_path / "b"), config=cfg))
    instance = dg.DagsterInstance.ephemeral()
    shards_job = defs.resolve_job_def("pack_shards_job")
    assert shards_job.partitions_def is not None
    assert shards_job.partitions_def.get_partition_keys() == [str(i) for i in range(PACK_SHARDS)]
    merge_job = defs.resolve_job_def("pack_merge_job")
    early = merge_job.execute_in_process(run_config=_QUIET, instance=instance, raise_on_error=False)
    assert not early.success  # no shard yet: the merge says so
    for key in shards_job.partitions_def.get_partition_keys():
        assert shards_job.execute_in_process(partition_key=key, run_config=_QUIET, instance=instance).success
    merged = merge_job.execute_in_process(run_config=_QUIET, instance=instance)
    [event] = merged.get_asset_materialization_events()
    assert event.materialization.metadata["version"].value == reference.version
    store = StrataPaths.at(tmp_path / "b").store()
    runner = StageRunner(cfg, store)
    up = {name: runner.artifact(name) for name in ("reorder", "sample", "plan")}
    assert all(s is not None for s in find_shards(store, cfg, PACK_SHARDS, **up))
    assert store.find("tiny", pack_shards.PREP_STAGE, prepare(store, cfg, **up).version) is not None
    _assert_same(store.find("tiny", "pack", reference.version), reference)
    # the unpartitioned path is unchanged and reuses the merged artifact
    full = defs.resolve_job_def(STRATA_JOB).execute_in_process(
        run_config=_QUIET, instance=instance,
        asset_selection=[dg.AssetKey(n) for n in ("ingest", "reorder", "partition", "sample", "plan", "pack")])
    [packed] = [e for e in full.get_asset_materialization_events() if e.asset_key.to_user_string() == "pack"]
    assert packed.materialization.metadata["reused"].value is True
