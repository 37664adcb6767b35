"""The source sensor: one run request per change of the source's content, none otherwise (Dagster's test
utilities: ``build_sensor_context`` over the real definitions and an instance in a temp dir)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from pipelines.config import PipelineConfig
from pipelines.orchestration.definitions import RETRAIN_JOB, make_definitions
from pipelines.orchestration.jobs import retrain_run_config
from pipelines.orchestration.resources import build_resources
from pipelines.orchestration.source_watch import fingerprint, take_snapshot
from tests.pipelines.source_fixtures import hand_graph


def _edgelist(tmp_path: Path) -> PipelineConfig:
    g = hand_graph()
    data = tmp_path / "data"
    data.mkdir()
    (data / "e.csv").write_text("0,1\n1,2\n0,2\n3,4\n")
    np.save(data / "x.npy", g["features"])
    np.save(data / "y.npy", g["labels"])
    return PipelineConfig.load(dataset=f"edgelist:{data / 'e.csv'}", overrides=[
        f"ingest.options.features={data / 'x.npy'}", f"ingest.options.labels={data / 'y.npy'}",
        "ingest.options.num_nodes=6"])


@pytest.fixture
def watched(tmp_path: Path):
    """(evaluate(cursor) -> SensorResult, config, definitions) for an edge-list source in ``tmp_path``."""
    cfg = _edgelist(tmp_path)
    defs = make_definitions(build_resources(root=str(tmp_path / "root"), config=cfg))
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        yield _evaluator(defs, instance), cfg, defs


def _evaluator(defs: dg.Definitions, instance: dg.DagsterInstance):
    """``evaluate(cursor) -> SensorResult``: one evaluation of ``defs``' source sensor on ``instance``."""
    sensor = defs.resolve_sensor_def("source_sensor")

    def evaluate(cursor: str | None) -> dg.SensorResult:
        context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                          resources=defs.resources, sensor_name="source_sensor")
        result = sensor(context)
        assert isinstance(result, dg.SensorResult)
        return result

    return evaluate


def _bump_mtime(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


def test_a_changed_file_triggers_exactly_one_run(watched, tmp_path: Path) -> None:
    evaluate, cfg, defs = watched
    first = evaluate(None)  # baseline: nothing requested
    assert first.run_requests == [] and "baseline" in str(first.skip_reason)
    unchanged = evaluate(first.cursor)
    assert unchanged.run_requests == [] and "unchanged" in str(unchanged.skip_reason)

    edges = Path(cfg.dataset.split(":", 1)[1])
    edges.write_text("0,1\n1,2\n0,2\n3,4\n4,5\n")  # a new edge
    changed = evaluate(unchanged.cursor)
    assert len(changed.run_requests) == 1
    request = changed.run_requests[0]
    fp = json.loads(changed.cursor)["sources"][cfg.dataset_name]["fingerprint"]
    assert request.run_key == f"{cfg.dataset_name}:{fp}:1"
    assert request.tags["strata/source_fingerprint"] == fp != request.tags["strata/previous_fingerprint"]
    # the request is a valid retrain_job run: this dataset, its options, warm start from the champion
    assert request.run_config == retrain_run_config(cfg, str(tmp_path / "root"))
    settings = request.run_config["resources"]["strata"]["config"]["settings"]
    assert settings["dataset"] == cfg.dataset and settings["train"]["warm_start"] == "champion"
    assert dg.validate_run_config(defs.resolve_job_def(RETRAIN_JOB), request.run_config)

    again = evaluate(changed.cursor)  # the same change is not requested twice
    assert again.run_requests == []


def test_a_touched_but_unmodified_file_triggers_nothing(watched) -> None:
    evaluate, cfg, _ = watched
    cursor = evaluate(None).cursor
    features = Path(cfg.ingest.options["features"])
    _bump_mtime(features)
    touched = evaluate(cursor)
    assert touched.run_requests == [] and "1 files touched, same content" in str(touched.skip_reason)
    # the new mtime is remembered: the next evaluation does not hash again, and a real change still triggers
    np.save(features, np.zeros((6, 3), dtype=np.float32))
    assert len(evaluate(touched.cursor).run_requests) == 1


def test_a_revert_is_a_new_change(watched) -> None:
    evaluate, cfg, _ = watched
    edges = Path(cfg.dataset.split(":", 1)[1])
    original = edges.read_text()
    cursor = evaluate(None).cursor
    edges.write_text(original + "4,5\n")
    first = evaluate(cursor)
    edges.write_text(original)
    _bump_mtime(edges)
    reverted = evaluate(first.cursor)
    assert [len(first.run_requests), len(reverted.run_requests)] == [1, 1]
    assert first.run_requests[0].run_key != reverted.run_requests[0].run_key


def test_a_synthetic_dataset_has_nothing_to_watch(tmp_path: Path) -> None:
    defs = make_definitions(build_resources(root=str(tmp_path), config=PipelineConfig(dataset="tiny")))
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        context = dg.build_sensor_context(instance=instance, definitions=defs, resources=defs.resources,
                                          sensor_name="source_sensor")
        result = defs.resolve_sensor_def("source_sensor")(context)
    assert result.run_requests == [] and "no files to watch" in str(result.skip_reason)


def test_the_sensor_is_listed_and_stopped_by_default() -> None:
    from pipelines.orchestration.definitions import defs

    sensor = defs.resolve_sensor_def("source_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert sensor.job_name == RETRAIN_JOB


def test_snapshots_hash_only_changed_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pipelines.orchestration.source_watch as watch

    (tmp_path / "a").write_bytes(b"one")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b").write_bytes(b"two")
    paths = {"edges": str(tmp_path / "a"), "dir": str(tmp_path / "d")}
    first = take_snapshot(paths)
    assert sorted(first) == [str(tmp_path / "a"), str(tmp_path / "d" / "b")]
    hashed: list[Path] = []
    real = watch.file_sha256
    monkeypatch.setattr(watch, "file_sha256", lambda p: hashed.append(p) or real(p))
    assert take_snapshot(paths, first) == first and hashed == []
    (tmp_path / "d" / "b").write_bytes(b"three")
    second = take_snapshot(paths, first)
    assert hashed == [tmp_path / "d" / "b"] and fingerprint(second) != fingerprint(first)


def test_every_dataset_materialized_under_the_root_is_watched(tmp_path: Path) -> None:
    # an edge-list dataset ingested under the root, while the resource's configured dataset is synthetic
    edge_cfg = _edgelist(tmp_path)
    root = tmp_path / "root"
    build_resources(root=str(root), config=edge_cfg)["strata"].runner().result("ingest")
    defs = make_definitions(build_resources(root=str(root), config=PipelineConfig(dataset="tiny")))
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        evaluate = _evaluator(defs, instance)
        first = evaluate(None)
        assert first.run_requests == []
        assert "tiny: a synthetic source" in str(first.skip_reason)
        assert f"{edge_cfg.dataset_name}: baseline" in str(first.skip_reason)
        Path(edge_cfg.dataset.split(":", 1)[1]).write_text("0,1\n1,2\n0,2\n3,4\n2,5\n")
        changed = evaluate(first.cursor)
    [request] = changed.run_requests
    assert request.tags["strata/dataset"] == edge_cfg.dataset_name
    settings = request.run_config["resources"]["strata"]["config"]["settings"]
    assert settings["dataset"] == edge_cfg.dataset and settings["ingest"]["options"] == edge_cfg.ingest.options
    assert dg.validate_run_config(defs.resolve_job_def(RETRAIN_JOB), request.run_config)


def test_the_usage_recipe_watches_with_the_options_the_dataset_was_built_with(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/usage/dagster.md's recipe: STRATA_DATASET="edgelist:..." and STRATA_HOME, no STRATA_CONFIG. The
    dataset was built under the root with its features and labels; the sensor (and the UI's default runs) use
    them, where every tick used to skip with "'option features' expected"."""
    from pipelines.orchestration.ui_datasets import environment_config

    edge_cfg = _edgelist(tmp_path)
    root = tmp_path / "root"
    build_resources(root=str(root), config=edge_cfg)["strata"].runner().result("ingest")
    monkeypatch.setenv("STRATA_HOME", str(root))
    monkeypatch.setenv("STRATA_DATASET", edge_cfg.dataset)
    monkeypatch.delenv("STRATA_CONFIG", raising=False)
    env_cfg = environment_config()
    assert env_cfg.dataset == edge_cfg.dataset and env_cfg.ingest.options == edge_cfg.ingest.options
    defs = make_definitions(build_resources(root=str(root), config=PipelineConfig(dataset=edge_cfg.dataset)))
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        evaluate = _evaluator(defs, instance)
        first = evaluate(None)
        assert f"{edge_cfg.dataset_name}: baseline" in str(first.skip_reason), first.skip_reason
        assert "expected" not in str(first.skip_reason)
        Path(edge_cfg.dataset.split(":", 1)[1]).write_text("0,1\n1,2\n0,2\n3,4\n2,5\n")
        [request] = evaluate(first.cursor).run_requests
    settings = request.run_config["resources"]["strata"]["config"]["settings"]
    assert settings["dataset"] == edge_cfg.dataset and settings["ingest"]["options"] == edge_cfg.ingest.options
