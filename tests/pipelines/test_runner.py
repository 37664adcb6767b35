"""StageRunner: resolves each stage once per runner, runs checks, and derives runners for nearby configs."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.graph import get_stage
from pipelines.orchestration.definitions import STRATA_JOB, make_definitions
from pipelines.orchestration.resources import build_resources
from pipelines.runner import CheckFailed, StageRunner
from pipelines.stages import ingest

CFG = PipelineConfig.load(overrides=["sample.epochs=1", "partition.num_parts=4"], dataset="tiny")
# Verification on reuse would quarantine an artifact corrupted in place before its checks ran
# (tests/pipelines/ops/test_verify.py); the check tests below turn it off to reach the checks.
UNVERIFIED = PipelineConfig.load(overrides=["sample.epochs=1", "partition.num_parts=4", "verify.on_reuse=off"],
                                 dataset="tiny")


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts how often the ingest stage opens (parses and validates) its source."""
    calls: list[str] = []
    real = ingest.open_source

    def counting(cfg: PipelineConfig):
        calls.append(cfg.dataset)
        return real(cfg)

    monkeypatch.setattr(ingest, "open_source", counting)
    return calls


def test_a_runner_resolves_each_stage_once(tmp_path: Path, opened: list[str]) -> None:
    runner = StageRunner(CFG, StrataPaths.at(tmp_path).store())
    results = runner.run_until("sample")
    assert [r.artifact.stage for r in results] == ["ingest", "reorder", "partition", "sample"]
    assert runner.artifact("reorder") is results[1].artifact
    assert opened == ["tiny"]


def test_derive_keeps_the_stages_a_config_change_leaves_alone(tmp_path: Path, opened: list[str]) -> None:
    runner = StageRunner(CFG, StrataPaths.at(tmp_path).store())
    runner.run_until("plan")
    naive = runner.derive(CFG.model_copy(update={"policy": "naive"}))
    assert naive.artifact("sample") is runner.artifact("sample")
    assert naive.artifact("plan").version != runner.artifact("plan").version  # plan reads the policy
    other = runner.derive(PipelineConfig.load(overrides=["sample.epochs=1", "partition.num_parts=8"],
                                              dataset="tiny"))
    assert other.artifact("reorder") is runner.artifact("reorder")
    assert other.artifact("partition").version != runner.artifact("partition").version
    assert other.artifact("sample").version != runner.artifact("sample").version  # its upstream changed
    assert opened == ["tiny"]


def test_run_until_stops_at_a_failing_check(tmp_path: Path) -> None:
    store = StrataPaths.at(tmp_path).store()
    reorder = StageRunner(CFG, store).run_until("reorder")[-1].artifact
    perm = np.load(reorder.file("perm.npy"), mmap_mode="r+")
    perm[0] = perm[1]  # corrupt the published permutation in place
    perm.flush()
    del perm
    runner = StageRunner(UNVERIFIED, store)
    with pytest.raises(CheckFailed, match=r"check 'reorder:permutation_bijective' failed on .*reorder"):
        runner.run_until("sample")
    assert "partition" not in runner._results  # nothing downstream of the broken artifact ran


def test_the_steps_of_an_in_process_run_resolve_each_stage_once(tmp_path: Path, opened: list[str]) -> None:
    job = make_definitions(build_resources(str(tmp_path), CFG)).resolve_job_def(STRATA_JOB)
    selection = [dg.AssetKey(name) for name in ("ingest", "reorder", "partition", "sample")]
    result = job.execute_in_process(asset_selection=selection, raise_on_error=False,
                                    run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}})
    assert result.success
    expected = sum(len(get_stage(name).checks) for name in ("ingest", "reorder", "partition", "sample"))
    assert len(result.get_asset_check_evaluations()) == expected  # every step resolved through the shared runner
    assert opened == ["tiny"]


def test_nan_features_in_a_published_artifact_stop_the_run(tmp_path: Path) -> None:
    # sources reject NaN when they are read; a NaN written into an artifact afterwards is the check's to catch
    store = StrataPaths.at(tmp_path).store()
    reorder = StageRunner(CFG, store).run_until("reorder")[-1].artifact
    _nan_at(reorder.file("features.npy"))
    runner = StageRunner(UNVERIFIED, store)
    with pytest.raises(CheckFailed, match=r"'reorder:features_finite'.*expected finite values \(got 1 NaN/inf; "
                                          r"the first at row 7, column 3: nan\)") as info:
        runner.run_until("sample")
    assert "partition" not in runner._results  # nothing downstream of the broken artifact ran
    # quarantined like an artifact that fails its checksum: out of the way and the catalog, rebuilt next time
    moved = info.value.moved_to
    assert moved is not None and (moved / "features.npy").is_file() and not reorder.path.exists()
    assert store.catalog is not None and store.catalog.get(reorder.version, stage="reorder") is None
    rebuilt = StageRunner(UNVERIFIED, store).run_until("sample")
    assert [r.reused for r in rebuilt][:2] == [True, False]
    assert rebuilt[1].artifact.files["features.npy"].checksum == reorder.files["features.npy"].checksum


def test_a_failed_content_check_in_a_dagster_run_quarantines_its_artifact(tmp_path: Path) -> None:
    store = StrataPaths.at(tmp_path).store()
    reorder = StageRunner(CFG, store).run_until("reorder")[-1].artifact
    _nan_at(reorder.file("features.npy"))
    job = make_definitions(build_resources(str(tmp_path), UNVERIFIED)).resolve_job_def(STRATA_JOB)
    selection = [dg.AssetKey(name) for name in ("ingest", "reorder", "partition")]
    result = job.execute_in_process(asset_selection=selection, raise_on_error=False,
                                    run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}})
    assert not result.success
    failed = [e for e in result.get_asset_check_evaluations() if not e.passed]
    # only the check that failed: the ones after it check the same files where they went, and pass
    assert [(e.asset_key.to_user_string(), e.check_name) for e in failed] == [("reorder", "features_finite")]
    assert "(quarantined to " in (failed[0].description or "") and not reorder.path.exists()
    assert StageRunner(UNVERIFIED, store).run_until("partition")[1].reused is False  # rebuilt by the next run


def _nan_at(path: Path, row: int = 7, column: int = 3) -> None:
    features = np.load(path, mmap_mode="r+")
    features[row, column] = np.nan
    features.flush()
    del features
