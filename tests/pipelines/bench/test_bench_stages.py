"""``strata bench --suite stages``: each stage in its own worker and memory cgroup, with its time, memory and
disk; a stage that exceeds the limit is reported as OOM-killed, and the later stages do not run."""

from __future__ import annotations

import json

import pytest

from pipelines.bench.stages import run_stage_bench
from pipelines.config import PipelineConfig
from pipelines.core.confine import cgroup_support
from pipelines.core.paths import StrataPaths

pytestmark = pytest.mark.skipif(not cgroup_support().available,
                                reason=f"no memory cgroup: {cgroup_support().reason}")

CFG = ["sample.epochs=1", "train.epochs=1", "train.device=cpu"]


def test_every_stage_is_confined_and_measured(tmp_path):
    cfg = PipelineConfig.load(overrides=CFG, dataset="tiny")
    out = tmp_path / "stages.json"
    report = run_stage_bench(cfg, StrataPaths.at(tmp_path / "root"), out, memory_budget=128 << 20,
                             stages=("ingest", "reorder", "partition", "sample"))
    assert json.loads(out.read_text()) == report
    assert list(report["stages"]) == ["ingest", "reorder", "partition", "sample"]
    assert report["cgroup_limit"] == (128 << 20) + (768 << 20)
    for name, row in report["stages"].items():
        assert not row["reused"] and row["built"][-1] == name
        assert 0 < row["peak_anon_mb"] <= row["peak_cgroup_mb"] <= report["cgroup_limit"] >> 20
        assert row["oom_kills"] == 0 and row["stage_s"] > 0 and row["artifact_bytes"] > 0
        assert row["write_bytes"] >= row["artifact_bytes"] * 0.5  # the artifact was written by this worker
    assert report["graph"]["num_nodes"] > 0
    disk = report["disk"]
    assert disk["total_bytes"] == sum(r["artifact_bytes"] for r in report["stages"].values())
    assert disk["total_over_features"] == disk["total_bytes"] / report["graph"]["feature_bytes"]
    again = run_stage_bench(cfg, StrataPaths.at(tmp_path / "root"), None, memory_budget=128 << 20,
                            stages=("reorder",))  # ingest is added (the graph's sizes); both reused
    assert list(again["stages"]) == ["ingest", "reorder"] and all(r["reused"] for r in again["stages"].values())
    assert again["stages"]["reorder"]["stage_s"] == report["stages"]["reorder"]["stage_s"]  # the build's own


def test_a_stage_over_its_limit_is_reported_oom_killed_and_stops_the_suite(tmp_path):
    cfg = PipelineConfig.load(overrides=CFG, dataset="tiny")
    report = run_stage_bench(cfg, StrataPaths.at(tmp_path / "root"), None, memory_budget=1 << 20,
                             memory_overhead=8 << 20, stages=("ingest", "reorder"))
    assert list(report["stages"]) == ["ingest"]  # the interpreter alone exceeds 9 MiB
    row = report["stages"]["ingest"]
    assert row["oom_killed"] and row["oom_kills"] == 1 and "OOM-killed" in row["error"]


def test_unknown_stage_names_are_refused(tmp_path):
    cfg = PipelineConfig.load(overrides=CFG, dataset="tiny")
    with pytest.raises(ValueError, match="'--stages' expected names among ingest, reorder"):
        run_stage_bench(cfg, StrataPaths.at(tmp_path / "root"), stages=("ingest", "shuffle"))
