"""The ``strata`` CLI surface: help, datasets, catalog on an empty root, ``--set`` errors, ui and bench wiring."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pipelines.cli import app

runner = CliRunner()


def test_top_level_help_lists_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("run", "ui", "catalog", "datasets", "bench"):
        assert command in result.stdout


def test_run_help() -> None:
    result = runner.invoke(app, ["run", "--help"])
    assert result.exit_code == 0
    for option in ("--dataset", "--root", "--config", "--set", "--json", "--verbose"):
        assert option in result.stdout


def test_datasets_lists_builtins_and_kinds() -> None:
    result = runner.invoke(app, ["datasets"])
    assert result.exit_code == 0, result.output
    for name in ("tiny", "demo", "synthetic", "planetoid", "ogb", "edgelist"):
        assert name in result.stdout


def test_datasets_json() -> None:
    result = runner.invoke(app, ["datasets", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["builtin"]["tiny"]["params"]["nodes"] == 2500
    assert "features" in doc["kinds"]["edgelist"]["options"]


def test_catalog_ls_json_on_empty_root(tmp_path: Path) -> None:
    result = runner.invoke(app, ["catalog", "ls", "--root", str(tmp_path / "empty"), "--json"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""


def test_catalog_ls_table_on_empty_root(tmp_path: Path) -> None:
    result = runner.invoke(app, ["catalog", "ls", "--root", str(tmp_path)])
    assert result.exit_code == 0
    assert "no artifacts" in result.stderr


def test_catalog_show_unknown_version(tmp_path: Path) -> None:
    result = runner.invoke(app, ["catalog", "show", "abcdef", "--root", str(tmp_path)])
    assert result.exit_code == 2  # bad input: the CLI's contract
    assert "expected an artifact" in result.stderr and "'abcdef'" in result.stderr


def test_catalog_rebuild_empty_root(tmp_path: Path) -> None:
    result = runner.invoke(app, ["catalog", "rebuild", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "indexed 0 artifacts" in result.stdout


@pytest.mark.parametrize("content", [b"", bytes(range(256)) * 64], ids=["0 bytes", "other bytes"])
def test_catalog_rebuild_moves_a_damaged_catalog_aside(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "catalog.duckdb").write_bytes(content)
    listed = runner.invoke(app, ["catalog", "ls", "--root", str(tmp_path)])
    assert listed.exit_code == 2
    assert listed.stderr.count("\n") == 1 and "`strata catalog rebuild` moves it aside" in listed.stderr
    result = runner.invoke(app, ["catalog", "rebuild", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "damaged: " in result.stderr and "moved to" in result.stderr
    assert "indexed 0 artifacts" in result.stdout
    (aside,) = tmp_path.glob("catalog.duckdb.damaged-*")
    assert aside.read_bytes() == content
    assert runner.invoke(app, ["catalog", "ls", "--root", str(tmp_path), "--json"]).exit_code == 0


def test_a_run_repairs_a_damaged_catalog_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "catalog.duckdb").write_bytes(b"not a database")
    result = runner.invoke(app, ["ingest", "--dataset", "tiny", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "catalog.duckdb was damaged" in result.stderr and "moved to catalog.duckdb.damaged-" in result.stderr
    listed = runner.invoke(app, ["catalog", "ls", "--root", str(tmp_path), "--json"])
    assert [json.loads(line)["stage"] for line in listed.stdout.splitlines()] == ["ingest"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["nonsense"], "'--set' expected key=value (got 'nonsense')"),
        (["bogus.key=1"], "expected a key starting with one of"),
        (["sample.batch_size=zero"], "batch_size"),
        (["sample.fanouts=[0]"], "'sample.fanouts' expected"),
        (["sample.fanouts=[]"], "'sample.fanouts' expected"),
    ],
)
def test_run_rejects_bad_set_before_running(tmp_path: Path, overrides: list[str], message: str) -> None:
    args = ["run", "--dataset", "tiny", "--root", str(tmp_path), "--json"]
    for item in overrides:
        args += ["--set", item]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "dagster_home").exists()  # nothing ran


def test_run_needs_a_dataset(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--root", str(tmp_path)])
    assert result.exit_code == 2
    assert "'--dataset' expected" in result.stderr


def test_run_missing_config_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--config", str(tmp_path / "nope.yaml"), "--root", str(tmp_path)])
    assert result.exit_code == 2
    assert "expected an existing YAML or JSON file" in result.stderr


def test_the_installed_dagster_runs_the_ui_without_dagster_dev() -> None:
    """`strata ui` calls what `dg dev` calls; had Dagster changed it, the fallback `dagster dev` would warn again."""
    from pipelines.cli.dagster_dev import dev_impl

    assert dev_impl() is not None


def test_ui_runs_the_dagster_ui_under_the_data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pipelines.cli.ui_process

    calls: list[dict[str, Any]] = []

    def record(command: list[str], env: dict[str, str], cwd: Any = None, shutdown_s: float = 0.0,
               log: Any = None) -> int:  # the command strata ui would run (a real one: test_ui_process.py)
        calls.append({"command": command, "env": env, "cwd": cwd, "shutdown_s": shutdown_s})
        return 0

    monkeypatch.setattr(pipelines.cli.ui_process, "run_process_group", record)
    result = runner.invoke(app, ["ui", "--root", str(tmp_path), "--port", "3333", "--dataset", "demo"])
    assert result.exit_code == 0, result.output
    (call,) = calls
    command = call["command"]
    assert command[:3] == [sys.executable, "-m", "pipelines.cli.dagster_dev"]  # what `dg dev -w FILE` runs
    assert command[command.index("--port") + 1] == "3333"
    assert command[command.index("-w") + 1].endswith("workspace.yaml")
    env = call["env"]
    assert env["DAGSTER_HOME"] == str(tmp_path.resolve() / "dagster_home")
    assert env["STRATA_HOME"] == str(tmp_path.resolve()) and env["STRATA_DATASET"] == "demo"
    assert (tmp_path / "dagster_home" / "dagster.yaml").read_text().startswith("telemetry:")
    assert call["shutdown_s"] > 0
    assert f"datasets under {tmp_path.resolve()}: none yet (default: demo)" in result.stderr


def test_bench_prints_one_row_per_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pipelines.bench.policies

    seen: dict[str, Any] = {}

    def fake_run_bench(cfg: Any, paths: Any, out_path: Any, progress: Any = None, **options: Any) -> dict[str, Any]:
        seen.update(cfg=cfg, root=paths.root, out=out_path, **options)
        progress("bench: training", 1, 2)
        row = {"epoch_s": 1.5, "bytes_read": 2048, "bytes_needed": 4096, "test_acc": 0.8, "hit_rate_measured": 0.5}
        return {"dataset": "tiny", "memory_budget": 512 << 20, "confinement": "cgroup-v1",
                "policies": {"in_memory": row, "diskgnn": row}, "disk": {"seq_read_mb_s": 900.0}}

    monkeypatch.setattr(pipelines.bench.policies, "run_bench", fake_run_bench)
    out = tmp_path / "bench.json"
    result = runner.invoke(app, ["bench", "--dataset", "tiny", "--out", str(out), "--root", str(tmp_path),
                                 "--set", "train.epochs=1", "--policies", "diskgnn,in_memory",
                                 "--memory-budget", "512M", "--repeats", "3"])
    assert result.exit_code == 0, result.output
    assert seen["cfg"].train.epochs == 1 and seen["out"] == out and seen["root"] == tmp_path.resolve()
    assert (seen["policies"], seen["memory_budget"], seen["repeats"]) == (("diskgnn", "in_memory"), 512 << 20, 3)
    for text in ("in_memory", "diskgnn", "2.0 KiB", "900", "epoch_s", "cgroup-v1"):
        assert text in result.stdout


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("--policies", "diskgnn,lru", "'--policies' expected 'all' or a comma-separated list of"),
    ("--memory-budget", "lots", "'--memory-budget' expected a size such as 512M"),
    ("--memory-budget", "0G", "'--memory-budget' expected a positive size"),
])
def test_bench_rejects_bad_policies_and_budgets(tmp_path: Path, option: str, value: str, expected: str) -> None:
    result = runner.invoke(app, ["bench", "--dataset", "tiny", "--out", str(tmp_path / "b.json"),
                                 "--root", str(tmp_path), option, value])
    assert result.exit_code == 2 and expected in result.output, result.output


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("--strategies", "random,zigzag", "'--strategies' expected a comma-separated list of"),
    ("--methods", "kahip", "'--methods' expected a comma-separated list of"),
    ("--partition-order", "sideways", "'--partition-order' expected one of"),
])
def test_locality_bench_rejects_unknown_names(tmp_path, option, value, expected):
    args = ["bench", "--suite", "locality", "--dataset", "tiny", "--root", str(tmp_path), "--out",
            str(tmp_path / "r.json"), option, value]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert expected in result.output
    assert not (tmp_path / "r.json").exists()


def test_every_stage_is_a_verb_and_run_has_until() -> None:
    from pipelines.graph import STAGE_NAMES

    top = runner.invoke(app, ["--help"]).stdout
    assert all(name in top for name in STAGE_NAMES)
    assert "--until" in runner.invoke(app, ["run", "--help"]).stdout
    assert "--dataset" in runner.invoke(app, ["sample", "--help"]).stdout


def test_stage_verb_runs_up_to_that_stage(tmp_path: Path) -> None:
    result = runner.invoke(app, ["partition", "--dataset", "tiny", "--root", str(tmp_path), "--json",
                                 "--set", "partition.num_parts=4"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert [a["stage"] for a in summary["artifacts"]] == ["ingest", "reorder", "partition"]
    assert summary["metrics"] == {}
    again = runner.invoke(app, ["run", "--until", "reorder", "--dataset", "tiny", "--root", str(tmp_path), "--json"])
    assert again.exit_code == 0, again.stderr
    assert [a["reused"] for a in json.loads(again.stdout)["artifacts"]] == [True, True]


def test_a_stage_verb_takes_the_memory_budget_and_the_plan_is_sized_by_it(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", "--dataset", "tiny", "--root", str(tmp_path), "--json",
                                 "--memory-budget", "64M", "--set", "sample.epochs=1", "--policy", "diskgnn"])
    assert result.exit_code == 0, result.stderr
    plan = json.loads(next((tmp_path / "tiny" / "plan").glob("*/manifest.json")).read_text())
    assert plan["params"]["cpu_cache_bytes"] == 32 << 20 and plan["stats"]["cpu_budget_bytes"] == 32 << 20
    refused = runner.invoke(app, ["plan", "--dataset", "tiny", "--root", str(tmp_path), "--memory-budget", "64K",
                                  "--policy", "diskgnn",
                                  "--set", "sample.epochs=1", "--set", "plan.cpu_cache_bytes=1048576"])
    assert refused.exit_code != 0 and "'memory_budget' expected to hold the policy's resident buffers" in (
        refused.stderr)
    bad = runner.invoke(app, ["run", "--dataset", "tiny", "--root", str(tmp_path), "--memory-budget", "lots"])
    assert bad.exit_code == 2 and "'memory_budget' expected a size such as 512M" in bad.stderr


def test_policy_flag_is_the_policy_setting(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", "--dataset", "tiny", "--root", str(tmp_path), "--json", "--policy", "ginex",
                                 "--set", "sample.epochs=1", "--set", "policy=naive"])  # the flag comes last: it wins
    assert result.exit_code == 0, result.stderr
    plan = json.loads(next((tmp_path / "tiny" / "plan").glob("*/manifest.json")).read_text())
    assert plan["params"]["policy"] == "ginex"
    bad = runner.invoke(app, ["run", "--dataset", "tiny", "--root", str(tmp_path), "-p", "lru"])
    assert bad.exit_code == 2 and "'policy' expected one of auto, in_memory, mmap, naive, diskgnn" in bad.stderr


def test_run_rejects_an_unknown_until(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--dataset", "tiny", "--root", str(tmp_path), "--until", "bake"])
    assert result.exit_code == 2 and "'--until' expected one of ingest, reorder" in result.stderr


def test_config_show_prints_the_effective_config(tmp_path: Path) -> None:
    as_json = runner.invoke(app, ["config", "show", "--json", "--dataset", "demo", "--set", "train.eval_every=3"])
    assert as_json.exit_code == 0, as_json.output
    doc = json.loads(as_json.stdout)
    assert doc["dataset"] == "demo" and doc["train"]["eval_every"] == 3 and doc["policy"] == "auto"
    every = runner.invoke(app, ["config", "show", "--json", "--set", "train.checkpoint_every=50",
                                "--set", "train.checkpoint_path=ckpt.pt", "--set", "train.patience=5"])
    assert every.exit_code == 0, every.output
    assert {k: json.loads(every.stdout)["train"][k] for k in ("checkpoint_every", "patience")} == {
        "checkpoint_every": 50, "patience": 5}
    table = runner.invoke(app, ["config", "show", "--set", "plan.cpu_cache_fraction=0.2"])
    assert table.exit_code == 0, table.output
    for text in ("plan.cpu_cache_fraction", "0.2", "0.1", "train.eval_every", "if used"):
        assert text in table.stdout
    assert "plan.cpu_cache_fraction = 0.2  (default: 0.1)" in table.stdout
    from pipelines.cli.options import out

    assert max(map(len, table.stdout.splitlines())) <= out.width  # the console's width: 80 through a pipe
    bad = runner.invoke(app, ["config", "show", "--set", "policy=nope"])
    assert bad.exit_code == 2 and "'policy' expected one of" in bad.stderr


@pytest.mark.parametrize("width", [40, 80, 132])
def test_config_show_reads_at_any_width(width: int) -> None:
    """One block per setting, nothing past the width: 80 columns and pipes used to get a 3-character column."""
    from pipelines.cli.config import settings_lines
    from pipelines.config import PipelineConfig, describe_settings

    rows = describe_settings(PipelineConfig.model_validate({"sample": {"seed": 3}}))
    lines = settings_lines(rows, width)
    assert max(map(len, lines)) <= width
    heads = [line for line in lines if " = " in line and not line.startswith(" ")]
    assert [h.split(" = ")[0] for h in heads] == [r["key"] for r in rows]
    assert any(h.startswith("sample.seed = 3  (default: 0)") for h in heads)
    assert "[sample]" in lines and len(lines) < 6 * len(rows)
    assert "    Sampling seed." in lines
