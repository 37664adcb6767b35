"""The Dagster definitions load, every job resolves, and the preprocessing assets run with their checks."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from pipelines.config import PipelineConfig
from pipelines.graph import (
    GROUP_INFERENCE,
    GROUP_PREPROCESS,
    GROUP_TRAINING,
    RUN_STAGE_NAMES,
    STAGE_NAMES,
    STAGES,
    get_stage,
)
from pipelines.orchestration.assets import ALL_ASSETS, ALL_CHECKS
from pipelines.orchestration.definitions import RETRAIN_JOB, STRATA_JOB, defs, make_definitions
from pipelines.orchestration.resources import RunReporter, StrataResource, build_resources

PREPROCESS = ["ingest", "reorder", "partition", "sample", "plan", "pack"]


def test_every_job_resolves() -> None:
    names = {job.name for job in defs.resolve_all_job_defs()}
    assert {STRATA_JOB, RETRAIN_JOB} <= names


def test_jobs_select_the_right_assets() -> None:
    full = defs.resolve_job_def(STRATA_JOB)
    assert {k.to_user_string() for k in full.asset_layer.executable_asset_keys} == set(STAGE_NAMES)
    # retrain re-resolves every stage but predict (a changed source is re-ingested; unchanged stages are lookups)
    retrain = defs.resolve_job_def(RETRAIN_JOB)
    assert {k.to_user_string() for k in retrain.asset_layer.executable_asset_keys} == set(RUN_STAGE_NAMES)
    assert set(STAGE_NAMES) - set(RUN_STAGE_NAMES) == {"predict"}
    shards = defs.resolve_job_def("sample_shards_job")
    assert {k.to_user_string() for k in shards.asset_layer.executable_asset_keys} == {"sample_shards"}
    packs = defs.resolve_job_def("pack_shards_job")
    assert {k.to_user_string() for k in packs.asset_layer.executable_asset_keys} == {"pack_shards"}


def test_assets_follow_the_stage_table() -> None:
    graph = defs.resolve_asset_graph()
    assert [a.key.to_user_string() for a in ALL_ASSETS] == list(STAGE_NAMES)
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == {*STAGE_NAMES, "sample_shards",
                                                                         "sample_merged", "pack_shards",
                                                                         "pack_merged"}
    for spec in STAGES:
        node = graph.get(dg.AssetKey(spec.name))
        assert {k.to_user_string() for k in node.parent_keys} == set(spec.upstream), spec.name
        assert node.code_version, f"{spec.name} needs a code_version"
        assert node.description, f"{spec.name} needs a description"
        expected_group = (GROUP_TRAINING if spec.name in ("train", "export")
                          else GROUP_INFERENCE if spec.name == "predict" else GROUP_PREPROCESS)
        assert node.group_name == expected_group


def test_blocking_checks_gate_every_asset() -> None:
    specs = [spec for checks_def in ALL_CHECKS for spec in checks_def.check_specs]
    assert specs and all(spec.blocking for spec in specs)
    checked = {spec.asset_key.to_user_string() for spec in specs}
    assert checked == set(RUN_STAGE_NAMES)  # the preprocessing assets, the model (train) and its export
    assert len({(s.asset_key, s.name) for s in specs}) == len(specs)


def test_weekly_retrain_schedule_is_stopped() -> None:
    schedule = defs.resolve_schedule_def("weekly_retrain")
    assert schedule.job_name == RETRAIN_JOB
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert schedule.cron_schedule == "0 3 * * 1"
    # a scheduled run has no run config of its own: the job's default config warm-starts from the champion
    settings = defs.resolve_job_def(RETRAIN_JOB).run_config["resources"]["strata"]["config"]["settings"]
    assert settings == {"train": {"warm_start": "champion"}}


def test_resource_defaults_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import pipelines.orchestration.definitions as module

    monkeypatch.setenv("STRATA_HOME", str(tmp_path))
    monkeypatch.setenv("STRATA_DATASET", "demo")
    monkeypatch.delenv("STRATA_CONFIG", raising=False)
    try:
        reloaded = importlib.reload(module)
        resource = reloaded.defs.resources["strata"]
        assert isinstance(resource, StrataResource)
        assert resource.root == str(tmp_path)
        assert resource.pipeline_config().dataset == "demo"
        assert resource.paths().root == tmp_path.resolve()
    finally:
        monkeypatch.undo()
        importlib.reload(module)


def _stages_available() -> str | None:
    """Why the preprocessing stages cannot run here (None when they can)."""
    if importlib.util.find_spec("storage_kernels._native") is None:
        return "the storage_kernels._native extension is not built"
    return None


class _Recorder(RunReporter):
    def __init__(self) -> None:
        self.finished: dict[str, tuple[str, bool]] = {}
        self.checks: list[tuple[str, str, bool]] = []

    def stage_finished(self, stage: str, version: str, reused: bool, seconds: float) -> None:
        self.finished[stage] = (version, reused)

    def check_finished(self, stage: str, check: str, passed: bool, detail: str) -> None:
        self.checks.append((stage, check, passed))


def _materialize(root: Path, reporter: RunReporter, assets: list[str] = PREPROCESS,
                 overrides: tuple[str, ...] = ()) -> dg.ExecuteInProcessResult:
    config = PipelineConfig.load(overrides=["sample.epochs=1", *overrides], dataset="tiny")
    resources = build_resources(root=str(root), config=config, reporter=reporter)
    job = make_definitions(resources).resolve_job_def(STRATA_JOB)
    selection = [dg.AssetKey(name) for name in assets]
    return job.execute_in_process(asset_selection=selection, raise_on_error=False,
                                  run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}})


@pytest.mark.skipif(_stages_available() is not None, reason=str(_stages_available()))
def test_preprocessing_materializes_with_checks_then_reuses(tmp_path: Path) -> None:
    first = _Recorder()
    result = _materialize(tmp_path, first)
    assert result.success, [e.step_failure_data.error.to_string() for e in result.get_step_failure_events()]
    events = {e.asset_key.to_user_string(): e for e in result.get_asset_materialization_events()}
    assert set(events) == set(PREPROCESS)
    for name, event in events.items():
        meta = event.materialization.metadata
        version = meta["version"].value
        assert meta["reused"].value is False
        assert event.materialization.tags["dagster/data_version"] == version
        assert (tmp_path / "tiny" / name / version / "manifest.json").exists()
    evaluations = result.get_asset_check_evaluations()
    preprocess_checks = [c for c in ALL_CHECKS for s in c.check_specs if s.asset_key.to_user_string() in PREPROCESS]
    assert len(evaluations) == len(preprocess_checks) and all(e.passed for e in evaluations)
    assert {stage for stage, _, _ in first.checks} == set(PREPROCESS)

    second = _Recorder()
    assert _materialize(tmp_path, second).success
    assert all(reused for _, reused in second.finished.values())
    assert {k: v for k, (v, _) in second.finished.items()} == {k: v for k, (v, _) in first.finished.items()}


@pytest.mark.skipif(_stages_available() is not None, reason=str(_stages_available()))
def test_failing_blocking_check_stops_downstream(tmp_path: Path) -> None:
    first = _Recorder()
    upto_partitioning = ["ingest", "reorder", "partition"]
    assert _materialize(tmp_path, first, upto_partitioning).success
    version, _ = first.finished["ingest"]
    indices = np.load(tmp_path / "tiny" / "ingest" / version / "indices.npy", mmap_mode="r+")
    indices[0] = 10**9  # corrupt the published CSR in place
    indices.flush()
    del indices

    # verification on reuse would stop the ingest step first (tests/pipelines/ops/test_verify.py): off, so the
    # blocking check is what catches it here
    result = _materialize(tmp_path, _Recorder(), upto_partitioning, ("verify.on_reuse=off",))
    assert not result.success
    failed = [e for e in result.get_asset_check_evaluations() if not e.passed]
    assert [(e.asset_key.to_user_string(), e.check_name) for e in failed] == [("ingest", "csr_valid")]
    assert "'indices[0]' expected a value in [0, 2500)" in (failed[0].description or "")
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert materialized == {"ingest"}  # reorder and everything after it did not run


def test_run_config_is_typed_and_overrides_single_fields(tmp_path: Path) -> None:
    """The launchpad's settings mirror PipelineConfig: defaults are the base config; a partial run config
    changes only the fields it names; a bad value fails with the setting's name."""
    base = PipelineConfig.load(overrides=["sample.epochs=1", "train.epochs=3"], dataset="tiny")
    resource = build_resources(root=str(tmp_path), config=base)["strata"]
    schema = type(resource).model_fields["settings"].annotation
    train_fields = schema.model_fields["train"].annotation.model_fields
    assert train_fields["eval_every"].description and train_fields["epochs"].default == 3
    assert train_fields["patience"].description and train_fields["checkpoint_every"].default == 0
    seen: dict[str, PipelineConfig] = {}

    @dg.asset
    def probe(strata: StrataResource) -> None:
        seen["cfg"] = strata.pipeline_config()

    defs_ = dg.Definitions(assets=[probe], resources={"strata": resource})
    job = defs_.resolve_implicit_global_asset_job_def()
    settings = {"train": {"lr": 0.5, "patience": 4, "checkpoint_every": 7, "checkpoint_path": "c.pt"},
                "policy": "naive"}
    assert job.execute_in_process(run_config={"resources": {"strata": {"config": {"settings": settings}}}}).success
    cfg = seen["cfg"]
    assert (cfg.train.lr, cfg.policy, cfg.train.epochs, cfg.sample.epochs, cfg.dataset) == (0.5, "naive", 3, 1, "tiny")
    assert (cfg.train.patience, cfg.train.checkpoint_every, cfg.train.checkpoint_path) == (4, 7, "c.pt")
    bad = {"resources": {"strata": {"config": {"settings": {"policy": "nope"}}}}}
    result = job.execute_in_process(run_config=bad, raise_on_error=False)
    assert not result.success
    assert "'policy' expected one of" in result.get_step_failure_events()[0].step_failure_data.error.to_string()


def strata_job_for_multiprocess() -> dg.JobDefinition:
    """The strata job as Dagster's multiprocess executor reconstructs it in each step's process (module level,
    so a child process can import it; the environment chooses root and config)."""
    from pipelines.orchestration.definitions import STRATA_JOB, defs

    return defs.resolve_job_def(STRATA_JOB)


@pytest.mark.skipif(_stages_available() is not None, reason=str(_stages_available()))
def test_loading_the_definitions_and_a_config_does_not_import_torch() -> None:
    """Every step process of the multiprocess executor and every run the UI launches imports the definitions
    and validates a config; torch (2-3 s to import) is for the train and export steps only."""
    code = ("import sys; import pipelines.orchestration.definitions; from pipelines.config import PipelineConfig; "
            "PipelineConfig.load(overrides=['train.model=gat', 'policy=ginex']); "
            "print(sorted(m for m in ('torch', 'mlflow', 'onnx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    with pytest.raises(ValueError, match=r"'train.model' expected one of graphsage, gcn, gat.* \(got 'mlp'\)"):
        PipelineConfig.load(overrides=["train.model=mlp"])


def test_multiprocess_executor_runs_independent_steps_in_parallel(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """No process-global memo: each step resolves its artifacts in its own process, and the checks of
    ``reorder`` (independent steps) run in their own processes, some at the same time."""
    config = tmp_path / "run.yaml"
    config.write_text("dataset: tiny\nsample:\n  epochs: 1\n")
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "root"))
    monkeypatch.setenv("STRATA_CONFIG", str(config))
    monkeypatch.delenv("STRATA_DATASET", raising=False)
    selection = ["ingest", "reorder"]
    run_config = {"execution": {"config": {"multiprocess": {"max_concurrent": 2}}},
                  "loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        result = dg.execute_job(dg.reconstructable(strata_job_for_multiprocess), instance=instance,
                                run_config=run_config, asset_selection=[dg.AssetKey(a) for a in selection])
        assert result.success
        events = instance.all_logs(result.run_id)
    starts = {e.step_key: e.timestamp for e in events if e.dagster_event and e.dagster_event.event_type_value ==
              "STEP_WORKER_STARTING"}
    ends = {e.step_key: e.timestamp for e in events if e.dagster_event and e.dagster_event.is_step_success}
    checks = [key for key in ends if key.startswith("reorder_")]
    assert len(checks) == len(get_stage("reorder").checks) >= 2, sorted(ends)
    overlapping = [(a, b) for a in checks for b in checks if a < b and starts[a] < ends[b] and starts[b] < ends[a]]
    assert overlapping, {k: (starts[k], ends[k]) for k in checks}  # independent check steps ran at the same time
    pids = {e.dagster_event.pid for e in events if e.step_key in checks and e.dagster_event
            and e.dagster_event.event_type_value == "STEP_START"}
    assert len(pids) == len(checks)  # each in its own process
    assert (tmp_path / "root" / "tiny" / "reorder").is_dir()
