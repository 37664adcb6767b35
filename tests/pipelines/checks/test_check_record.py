"""A reused, verified artifact is not re-checked by the same check code: its recorded pass stands. A changed
manifest, changed check code, ``verify.on_reuse=off`` or a built artifact run the checks again."""

from __future__ import annotations

import json

import pytest

from pipelines.checks import StageCheck, record
from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.graph import get_stage
from pipelines.runner import StageRunner

BASE = ["sample.epochs=1"]


@pytest.fixture
def counted(monkeypatch):
    """How many times each reorder check actually ran."""
    runs: dict[str, int] = {}
    original = StageCheck.run
    names = {c.name for c in get_stage("reorder").checks}

    def run(self, artifact, store):
        if self.name in names and artifact.stage == "reorder":  # features_finite checks ingest too
            runs[self.name] = runs.get(self.name, 0) + 1
        return original(self, artifact, store)

    monkeypatch.setattr(StageCheck, "run", run)
    return runs


def _cfg(*extra: str) -> PipelineConfig:
    return PipelineConfig.load(overrides=[*BASE, *extra], dataset="tiny")


def test_a_reused_artifact_keeps_its_recorded_pass(tmp_path, counted):
    store = StrataPaths.at(tmp_path).store()
    built = StageRunner(_cfg(), store).run_until("reorder")[-1]
    assert not built.reused and set(counted.values()) == {1}
    art = built.artifact
    assert record.recorded_passes(store.root, art) == {c.name for c in get_stage("reorder").checks}
    outcomes = StageRunner(_cfg(), store).check("reorder")  # reused: nothing runs again
    assert set(counted.values()) == {1} and all(o.finding.facts.get("recorded_pass") for o in outcomes)
    StageRunner(_cfg("verify.on_reuse=off"), store).check("reorder")  # bytes not verified: checked again
    assert set(counted.values()) == {2}


def test_a_changed_manifest_or_check_code_runs_the_checks_again(tmp_path, counted, monkeypatch):
    store = StrataPaths.at(tmp_path).store()
    art = StageRunner(_cfg(), store).run_until("reorder")[-1].artifact
    path = record._record_path(store.root, art)
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({**saved, "manifest": "0" * 64}))
    assert record.recorded_passes(store.root, art) == frozenset()
    StageRunner(_cfg(), store).check("reorder")
    assert set(counted.values()) == {2}  # and recorded again
    assert record.recorded_passes(store.root, art)
    monkeypatch.setattr(record, "checks_code_digest", lambda: "another version of the checks")
    assert record.recorded_passes(store.root, art) == frozenset()
    path.write_text("{not json")
    assert record.recorded_passes(store.root, art) == frozenset()
