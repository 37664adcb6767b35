"""``strata gc`` on a real pipeline root: after a configuration change it removes the superseded ``plan`` and
``pack`` and nothing the current configuration needs (a rerun reuses every stage), the old configuration
rebuilds only what was removed, the registered champion's train version stays with its lineage, and the dry
run, ``--json`` and bad options behave."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.runner import StageRunner

SPEC = "synthetic:nodes=600,degree=6,dim=8,classes=3,seed=0"
SETS = ["sample.epochs=1", "partition.num_parts=2", "sample.batch_size=128"]
OLD = PipelineConfig.load(overrides=[*SETS, "plan.cpu_cache_fraction=0.2"], dataset=SPEC)
NEW = PipelineConfig.load(overrides=[*SETS, "plan.cpu_cache_fraction=0.3"], dataset=SPEC)
cli = CliRunner()


def _run(root: Path, cfg: PipelineConfig) -> dict[str, tuple[str, bool]]:
    """Every stage through pack; stage -> (version, reused)."""
    return {r.artifact.stage: (r.artifact.version, r.reused)
            for r in StageRunner(cfg, StrataPaths.at(root).store()).run_until("pack", checks=False)}


def test_gc_removes_the_superseded_plan_and_pack_and_keeps_what_the_current_config_uses(tmp_path: Path) -> None:
    root = tmp_path / "root"
    old = _run(root, OLD)
    new = _run(root, NEW)
    assert old["plan"][0] != new["plan"][0] and old["pack"][0] != new["pack"][0]
    assert old["sample"][0] == new["sample"][0]

    dry = cli.invoke(app, ["gc", "--root", str(root), "--json"])
    assert dry.exit_code == 0, dry.output
    doc = json.loads(dry.stdout)
    removable = {(r["stage"], r["version"]) for r in doc["versions"] if r["action"] == "remove"}
    assert removable == {("plan", old["plan"][0]), ("pack", old["pack"][0])}
    assert doc["dry_run"] and doc["removed"] == [] and doc["reclaimable_bytes"] > 0
    assert all(Path(r["path"]).is_dir() for r in doc["versions"])  # a dry run touches nothing

    done = cli.invoke(app, ["gc", "--root", str(root), "--yes"])
    assert done.exit_code == 0, done.output
    assert "removed 2 versions" in done.stdout
    dataset = OLD.dataset_name
    left = {(a["stage"], a["version"]) for a in StrataPaths.at(root).catalog().list_artifacts(dataset)}
    assert left == {(stage, version) for stage, (version, _) in new.items()}

    assert all(reused for _, reused in _run(root, NEW).values())
    rebuilt = {stage for stage, (_, reused) in _run(root, OLD).items() if not reused}
    assert rebuilt == {"plan", "pack"}


def test_gc_keep_last_keeps_both_configurations_and_bad_options_exit_2(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _run(root, OLD)
    _run(root, NEW)
    kept = cli.invoke(app, ["gc", "--root", str(root), "--keep-last", "2", "--yes"])
    assert kept.exit_code == 0, kept.output
    assert "removed 0 versions, freed 0 B" in kept.stdout
    assert len(StrataPaths.at(root).catalog().list_artifacts(OLD.dataset_name)) == 8
    human = cli.invoke(app, ["gc", "--root", str(root), "--keep-last", "2"])
    assert human.exit_code == 0 and "0 of 8 versions removable" in human.stdout
    bad = cli.invoke(app, ["gc", "--root", str(root), "--keep-within", "soon"])
    assert bad.exit_code == 2 and "'--keep-within' expected a duration" in bad.output
    missing = cli.invoke(app, ["gc", "--root", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "'--root' expected a directory" in missing.output


def test_gc_drops_catalog_rows_of_directories_removed_by_hand(tmp_path: Path) -> None:
    root = tmp_path / "root"
    new = _run(root, NEW)
    pack = StrataPaths.at(root).store().path(NEW.dataset_name, "pack", new["pack"][0])
    shutil.rmtree(pack)
    dry = json.loads(cli.invoke(app, ["gc", "--root", str(root), "--json"]).stdout)
    assert dry["stale_catalog_rows"] == [f"{NEW.dataset_name}/pack/{new['pack'][0]}"]
    done = cli.invoke(app, ["gc", "--root", str(root), "--yes"])
    assert done.exit_code == 0 and "dropped 1 catalog rows of missing directories" in done.stdout
    assert "pack" not in {a["stage"] for a in StrataPaths.at(root).catalog().list_artifacts(NEW.dataset_name)}


def test_the_dagster_gc_job_removes_the_same_versions_and_reports_them(tmp_path: Path) -> None:
    import dagster as dg

    from pipelines.orchestration.definitions import GC_CRON, GC_JOB, defs, make_definitions
    from pipelines.orchestration.resources import build_resources

    root = tmp_path / "root"
    old = _run(root, OLD)
    new = _run(root, NEW)
    job = make_definitions(build_resources(root=str(root))).resolve_job_def(GC_JOB)
    ops = {"ops": {"remove_superseded_versions": {"config": {"keep_within": "0", "dry_run": True}}}}
    dry = job.execute_in_process(run_config=ops)
    assert dry.success and dry.output_for_node("remove_superseded_versions")["removable"] == 2
    # (not store.find: a lookup marks the version used, as a run's does)
    assert (StrataPaths.at(root).store().path(OLD.dataset_name, "pack", old["pack"][0]) / "manifest.json").is_file()

    kept_by_default = job.execute_in_process()  # keep_within 7d: everything here was used minutes ago
    assert kept_by_default.output_for_node("remove_superseded_versions")["removed"] == 0

    ops["ops"]["remove_superseded_versions"]["config"]["dry_run"] = False
    done = job.execute_in_process(run_config=ops)
    summary = done.output_for_node("remove_superseded_versions")
    assert summary["removed"] == 2 and summary["bytes_freed"] > 0 and summary["skipped"] == 0
    left = {(a["stage"], a["version"]) for a in StrataPaths.at(root).catalog().list_artifacts(OLD.dataset_name)}
    assert left == {(stage, version) for stage, (version, _) in new.items()}
    (event,) = [e for e in done.all_events if e.event_type == dg.DagsterEventType.STEP_OUTPUT]
    assert event.event_specific_data.metadata["removed"].value == 2

    schedule = defs.resolve_schedule_def("weekly_gc")
    assert schedule.job_name == GC_JOB and schedule.cron_schedule == GC_CRON
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED


def test_gc_keeps_the_train_version_of_the_registered_champion(tmp_path: Path) -> None:
    from trainer.model_versions import promote, registry_client

    root = tmp_path / "root"
    trained = {}
    for hidden in (16, 8):  # two registered versions; the second is the most recent
        cfg = PipelineConfig.load(dataset="tiny", overrides=["sample.epochs=1", "train.epochs=2",
                                                             f"train.hidden_dim={hidden}"])
        runs = StageRunner(cfg, StrataPaths.at(root).store()).run_until("export", checks=False)
        trained[hidden] = {r.artifact.stage: r.artifact.version for r in runs}

    def decisions() -> dict[tuple[str, str], tuple[str, str]]:
        doc = json.loads(cli.invoke(app, ["gc", "--root", str(root), "--json"]).stdout)
        return {(r["stage"], r["version"]): (r["action"], r["reason"]) for r in doc["versions"]}

    client = registry_client(StrataPaths.at(root).mlflow_tracking_uri)
    promote(client, "strata-tiny", 2, force=True)
    assert decisions()[("train", trained[16]["train"])][0] == "remove"  # superseded, not the champion
    promote(client, "strata-tiny", 1, force=True)
    got = decisions()
    assert got[("train", trained[16]["train"])] == ("keep", "trained the champion (strata-tiny version 1)")
    assert got[("train", trained[8]["train"])] == ("keep", "most recently used")
    assert got[("export", trained[16]["export"])][0] == "remove"  # the registry holds its own copy of the model
