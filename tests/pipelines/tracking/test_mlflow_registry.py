"""One ``tiny`` run through Dagster, then everything an MLflow user and a Dagster user meet afterwards.

MLflow: the champion loads with ``mlflow.pyfunc`` and ``mlflow.onnx`` from ``models:/strata-tiny@champion`` and
predicts what the trained PyTorch model predicts; every setting and artifact version is on the run; no curve has
two points at one step; the plots are artifacts; the experiment opens as an ML experiment. ``strata models``
lists, shows, promotes (gated; ``--force``) and exports. Dagster: the run link is a URL metadata entry, the
model and export checks pass, and the UI's definitions default to the last dataset run.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.config import PipelineConfig
from pipelines.graph import STAGE_NAMES
from pipelines.orchestration.definitions import STRATA_JOB, make_definitions
from pipelines.orchestration.resources import build_resources


def _missing() -> str | None:
    for module in ("storage_kernels._native", "torch", "mlflow", "onnx", "onnxruntime", "matplotlib"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not importable"
    return None


pytestmark = [pytest.mark.skipif(_missing() is not None, reason=str(_missing())),
              pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")]

MODEL = "strata-tiny"
CHAMPION = f"models:/{MODEL}@champion"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The whole job on ``tiny`` (2 epochs, 1 sampled epoch); its Dagster result and MLflow client."""
    from trainer.model_versions import registry_client

    root = tmp_path_factory.mktemp("strata-root")
    config = PipelineConfig.load(overrides=["sample.epochs=1", "train.epochs=2"], dataset="tiny")
    job = make_definitions(build_resources(root=str(root), config=config)).resolve_job_def(STRATA_JOB)
    result = job.execute_in_process(raise_on_error=False,
                                    run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}})
    assert result.success, [e.step_failure_data.error.to_string() for e in result.get_step_failure_events()]
    events = {e.asset_key.to_user_string(): e.materialization for e in result.get_asset_materialization_events()}
    client = registry_client(f"sqlite:///{root / 'mlflow' / 'mlflow.db'}")
    train = events["train"].metadata
    return {"root": root, "result": result, "events": events, "client": client, "config": config,
            "run_id": train["mlflow_run_id"].value,
            "train_dir": Path(train["path"].value), "export_dir": Path(events["export"].metadata["path"].value)}


@pytest.fixture
def registry_env(tiny: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{tiny['root'] / 'mlflow' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # what a user sets to load models:/ URIs
    return uri


def _torch_logits(train_dir: Path, feed: dict[str, np.ndarray]) -> np.ndarray:
    import torch

    from trainer.models import load_trained

    net = load_trained(json.loads((train_dir / "model.json").read_text()), train_dir / "state_dict.pt")
    edges = [tuple(torch.from_numpy(feed[f"{k}_{i}"]) for k in ("edge_src", "edge_dst", "dst_pos"))
             for i in range(net.num_layers)]
    with torch.no_grad():
        return net.forward_dst_pos(torch.from_numpy(np.asarray(feed["x"], dtype=np.float32)), edges).numpy()


def test_champion_loads_with_pyfunc_and_onnx(tiny: dict[str, Any], registry_env: str) -> None:
    import mlflow
    import onnxruntime as ort

    pyfunc = mlflow.pyfunc.load_model(CHAMPION)
    # no input schema (the pyfunc also takes node ids): the example's x loads as JSON numbers, float64
    example = {k: v.astype(np.float32) if k == "x" else v for k, v in pyfunc.input_example.items()}
    logits = pyfunc.predict(pyfunc.input_example)["logits"]
    num_seeds = example["dst_pos_1"].shape[0]
    assert logits.shape == (num_seeds, 6)  # tiny: 6 classes
    np.testing.assert_allclose(logits, _torch_logits(tiny["train_dir"], example), rtol=0, atol=1e-6)
    assert pyfunc.metadata.signature is not None and pyfunc.metadata.run_id == tiny["run_id"]

    proto = mlflow.onnx.load_model(CHAMPION)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(["logits"], example)[0], logits, rtol=0, atol=1e-4)
    # the same bytes as the export artifact's model.onnx
    assert proto.SerializeToString() == __import__("onnx").load(str(tiny["export_dir"] / "model.onnx"))\
        .SerializeToString()


def test_run_has_every_setting_version_and_plot_once(tiny: dict[str, Any]) -> None:
    client, run_id = tiny["client"], tiny["run_id"]
    run = client.get_run(run_id)
    params = run.data.params
    assert params["num_layers"] == "2" and params["num_classes"] == "6"  # resolved, not the config's 0
    assert params["sample.fanouts"] == "[10, 10]" and params["sample.batching"] == "random"
    assert params["plan.cpu_cache_fraction"] == "0.1" and params["policy"] == "auto"
    assert params["auto.policy"] == "in_memory" and "auto.candidate.0" in params  # what auto chose, and why
    assert params["dataset"] == "tiny" and params["epochs"] == "2" and params["export.opset"] == "18"
    versions = {e: tiny["events"][e].metadata["version"].value for e in STAGE_NAMES}
    for stage in ("ingest", "reorder", "partition", "sample", "plan", "pack"):
        assert run.data.tags[f"strata.upstream.{stage}"] == versions[stage], stage
    assert run.data.tags["strata.model_version"] == versions["train"]

    for key in run.data.metrics:  # one point per step: summaries are not re-logged at step 0 on the curves
        steps = [m.step for m in client.get_metric_history(run_id, key)]
        assert len(steps) == len(set(steps)), (key, steps)
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == [0, 1]
    metrics = run.data.metrics
    assert 0.0 <= metrics["best_val_acc"] <= 1.0 and 0.0 <= metrics["test_acc"] <= 1.0
    assert metrics["best_val_acc"] == pytest.approx(max(m.value for m in client.get_metric_history(run_id,
                                                                                                   "val_acc")))
    plots = {f.path: f.file_size for f in client.list_artifacts(run_id, "plots")}
    assert set(plots) == {"plots/curves.png", "plots/tier_hit_rates.png", "plots/stage_timing.png"}
    local = Path(client.download_artifacts(run_id, "plots/curves.png", str(tiny["root"] / "dl")))
    assert local.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {f.path for f in client.list_artifacts(run_id, "train")} >= {"train/state_dict.pt", "train/model.json"}
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert [o.model_id for o in run.outputs.model_outputs]  # the logged model is the run's output


def test_dagster_links_the_run_and_checks_model_and_export(tiny: dict[str, Any]) -> None:
    train_meta = tiny["events"]["train"].metadata
    link = train_meta["mlflow_run"]
    assert isinstance(link, dg.UrlMetadataValue)
    experiment_id = tiny["client"].get_run(tiny["run_id"]).info.experiment_id
    assert link.url == f"http://127.0.0.1:5000/#/experiments/{experiment_id}/runs/{tiny['run_id']}"
    version_link = tiny["events"]["export"].metadata["mlflow_model_version"]
    assert isinstance(version_link, dg.UrlMetadataValue) and version_link.url.endswith(f"/#/models/{MODEL}/versions/1")
    checks = {(e.asset_key.to_user_string(), e.check_name): e for e in tiny["result"].get_asset_check_evaluations()}
    assert {("train", "accuracy_recorded"), ("export", "export_files"), ("export", "onnx_matches_torch")} <= set(checks)
    assert all(e.passed for e in checks.values())
    onnx_check = checks[("export", "onnx_matches_torch")].metadata
    assert onnx_check["max_abs_diff"].value <= 1e-4
    assert checks[("export", "export_files")].metadata["model.onnx_bytes"].value == \
        (tiny["export_dir"] / "model.onnx").stat().st_size


def test_models_cli_lists_shows_promotes_and_exports(tiny: dict[str, Any], tmp_path: Path,
                                                     registry_env: str) -> None:
    import mlflow

    from trainer.tracking import MlflowTracker

    root, runner = str(tiny["root"]), CliRunner()
    tracker = MlflowTracker(registry_env, experiment="strata-tiny")
    champion = tracker.client.get_model_version_by_alias(MODEL, "champion")
    model_id = tracker.client.get_run(tiny["run_id"]).outputs.model_outputs[0].model_id
    # a second, worse version of the same model: the gate keeps the champion
    assert tracker.register(tiny["run_id"], MODEL, None, 0.0, model_id=model_id) == (2, int(champion.version))

    listed = runner.invoke(app, ["models", "ls", "--root", root, "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {r["version"]: r for r in json.loads(listed.stdout)}
    assert rows[1]["aliases"] == ["champion"] and rows[2]["aliases"] == [] and rows[2]["val_acc"] == 0.0
    assert rows[1]["val_acc"] == pytest.approx(tiny["client"].get_run(tiny["run_id"]).data.metrics["best_val_acc"])

    shown = runner.invoke(app, ["models", "show", MODEL, "--root", root, "--json"])
    assert shown.exit_code == 0, shown.output
    record = json.loads(shown.stdout)
    assert record["version"] == 1 and record["flavors"] == ["onnx", "python_function"]
    assert record["inputs"][0] == "x" and record["input_example"] is True

    refused = runner.invoke(app, ["models", "promote", MODEL, "2", "--root", root])
    assert refused.exit_code == 2 and "--force" in refused.stderr and "version 2" in refused.stderr
    forced = runner.invoke(app, ["models", "promote", MODEL, "2", "--force", "--root", root])
    assert forced.exit_code == 0, forced.output
    assert int(tracker.client.get_model_version_by_alias(MODEL, "champion").version) == 2
    back = runner.invoke(app, ["models", "promote", MODEL, "1", "--root", root])  # 1 beats 2's 0.0
    assert back.exit_code == 0, back.output
    assert int(tracker.client.get_model_version_by_alias(MODEL, "champion").version) == 1

    onnx_dir, model_dir = tmp_path / "onnx", tmp_path / "model"
    assert runner.invoke(app, ["models", "export", MODEL, str(onnx_dir), "--onnx", "--root", root]).exit_code == 0
    assert [p.name for p in onnx_dir.iterdir()] == ["model.onnx"]
    exported = runner.invoke(app, ["models", "export", MODEL, str(model_dir), "--version", "2", "--root", root])
    assert exported.exit_code == 0, exported.output
    pyfunc = mlflow.pyfunc.load_model(str(model_dir))  # a self-contained MLflow model folder
    assert pyfunc.predict(pyfunc.input_example)["logits"].shape[1] == 6
    again = runner.invoke(app, ["models", "export", MODEL, str(model_dir), "--root", root])
    assert again.exit_code == 2 and "expected an empty or new folder" in again.stderr
    missing = runner.invoke(app, ["models", "show", "no-such-model", "--root", root])
    assert missing.exit_code == 2 and "'model' expected a registered model named 'no-such-model'" in missing.stderr


def test_ui_defaults_to_the_last_dataset_run(tiny: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    import pipelines.orchestration.definitions as module
    from pipelines.orchestration.ui_datasets import last_run, materialized_datasets

    root = tiny["root"]
    assert last_run(root)["dataset"] == "tiny"  # recorded by the run
    spec = "synthetic:nodes=400,degree=4,dim=8,classes=3,seed=1"
    ingested = CliRunner().invoke(app, ["ingest", "--dataset", spec, "--root", str(root)])
    assert ingested.exit_code == 0, ingested.output
    assert last_run(root)["dataset"] == spec
    assert [d.spec for d in materialized_datasets(root)] == [spec, "tiny"] or \
        sorted(d.spec for d in materialized_datasets(root)) == sorted([spec, "tiny"])

    monkeypatch.setenv("STRATA_HOME", str(root))
    monkeypatch.delenv("STRATA_DATASET", raising=False)
    monkeypatch.delenv("STRATA_CONFIG", raising=False)
    try:
        defs = importlib.reload(module).defs
        assert defs.resources["strata"].pipeline_config().dataset == spec  # "Materialize all" builds it
        jobs = {j.name: j for j in defs.resolve_all_job_defs()}
        by_dataset = {n: j for n, j in jobs.items() if n.startswith("strata_job_")}
        assert len(by_dataset) == 2 and "strata_job_tiny" in by_dataset
        tiny_config = dg.validate_run_config(by_dataset["strata_job_tiny"])
        assert tiny_config["resources"]["strata"]["config"]["settings"]["dataset"] == "tiny"
        schedule = defs.resolve_schedule_def("weekly_retrain")
        with dg.instance_for_test() as instance:
            tick = schedule.evaluate_tick(dg.build_schedule_context(instance=instance))
        settings = tick.run_requests[0].run_config["resources"]["strata"]["config"]["settings"]
        assert settings["dataset"] == spec
        dg.validate_run_config(defs.resolve_job_def("retrain_job"), tick.run_requests[0].run_config)
        monkeypatch.setenv("STRATA_DATASET", "tiny")  # an explicit choice wins over the last run
        assert importlib.reload(module).defs.resources["strata"].pipeline_config().dataset == "tiny"
    finally:
        monkeypatch.undo()
        importlib.reload(module)
