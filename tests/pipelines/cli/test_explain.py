"""``strata plan --explain`` and ``strata disk-profile``: why ``policy=auto`` chose what it chose, and the disk
profile it predicted reads with."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pipelines.cli import app

runner = CliRunner()
FAST = ["--set", "sample.epochs=1", "--set", "train.hidden_dim=8"]


def test_plan_explain_shows_every_candidate_and_the_summary_names_the_choice(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", "--dataset", "tiny", "--root", str(tmp_path), "--explain",
                                 "--memory-budget", "200K", *FAST], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "policy=auto chose" in out and "memory: 200.0 KiB usable (memory_budget 200.0 KiB)" in out
    for name in ("in_memory", "diskgnn", "ginex", "hyperbatch", "naive"):
        assert name in out, name
    assert "more than 200.0 KiB" in out  # in_memory refused: tiny's 1 MB of features exceed the budget
    assert "left out: trains other batches" in out  # mariusgnn, outre
    assert "policy auto chose" in out and "strata plan --explain" in out  # the summary line
    as_json = runner.invoke(app, ["plan", "--dataset", "tiny", "--root", str(tmp_path), "--explain", "--json",
                                  "--memory-budget", "200K", *FAST])
    doc = json.loads(as_json.stdout.strip().splitlines()[-1])
    assert doc["auto"]["policy"] == doc["policy"]["chosen"] != "in_memory"
    assert {c["policy"] for c in doc["auto"]["candidates"]} >= {"in_memory", "diskgnn", "naive"}


def test_a_forced_policy_explains_only_its_threads(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", "--dataset", "tiny", "--root", str(tmp_path), "--explain",
                                 "--policy", "naive", *FAST], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "policy naive was forced" in out and "compute threads" in out and "training reads the disk" in out


def test_disk_profile_is_measured_once_and_shown(tmp_path: Path, monkeypatch) -> None:
    from pipelines.core import disk_profile

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(disk_profile, "PROBE_BYTES", 8 << 20)
    first = runner.invoke(app, ["disk-profile", "--root", str(tmp_path), "--json"])
    assert first.exit_code == 0, first.output
    doc = json.loads(first.stdout)
    assert doc["seq_read_bytes_s"] > 0 and doc["random_iops"] > 0
    again = runner.invoke(app, ["disk-profile", "--root", str(tmp_path)])
    assert "MB/s sequential" in again.stdout and doc["measured_at"] in again.stdout  # the cached one
