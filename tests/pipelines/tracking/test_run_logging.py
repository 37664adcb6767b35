"""The pieces of a training run's MLflow record and of the model checks, on hand-made inputs (the whole run:
test_mlflow_registry.py)."""

from __future__ import annotations

import math
from pathlib import Path

from pipelines.checks.model import check_accuracy
from pipelines.config import PipelineConfig
from pipelines.tracking.plots import write_run_plots
from pipelines.tracking.run_logging import run_params, summary_metrics


def test_run_params_are_every_setting_but_the_trainers_own() -> None:
    cfg = PipelineConfig.load(overrides=["sample.fanouts=[15,5]", "plan.cpu_cache_bytes=4096"], dataset="demo")
    params = run_params(cfg)
    assert params["dataset"] == "demo" and params["policy"] == "auto"
    assert params["sample.fanouts"] == "[15, 5]" and params["plan.cpu_cache_bytes"] == "4096"
    assert params["plan.gpu_cache_bytes"] == ""  # None
    assert not any(k.startswith("train.") for k in params)  # trainer.train logs those, flat


def test_the_model_name_logged_is_the_one_registered() -> None:
    assert run_params(PipelineConfig.load(dataset="demo"))["export.model_name"] == "strata-demo"  # not ''
    named = PipelineConfig.load(overrides=["export.model_name=mine"], dataset="demo")
    assert run_params(named)["export.model_name"] == "mine"


def test_summary_metrics_never_share_a_name_with_a_curve() -> None:
    headline = {"val_acc": 0.8, "test_acc": 0.7, "epoch_s": 1.5, "bytes_read": 4096, "best_epoch": 3,
                "early_stopped": True, "direct_io": False, "overlap": 1.2, "final_loss": 0.4}
    curves = {"loss", "train_acc", "val_acc", "epoch_s", "bytes_read", "overlap"}
    out = summary_metrics(headline, curves)
    assert out == {"best_val_acc": 0.8, "test_acc": 0.7, "mean_epoch_s": 1.5, "total_bytes_read": 4096.0,
                   "best_epoch": 3.0, "total_overlap": 1.2, "final_loss": 0.4}
    assert not set(out) & curves


def test_check_accuracy_refuses_missing_nan_and_inconsistent_values() -> None:
    # epoch 3 gained less than min_delta over epoch 2: no new best, so the maximum is not val_acc
    history = {"val_acc": [0.5, math.nan, 0.75, 0.7505], "best_epoch": 2}
    assert check_accuracy({"val_acc": 0.75, "test_acc": 0.7}, history).passed
    assert "'stats.test_acc' expected a number (got None)" in check_accuracy({"val_acc": 0.75}, history).problems
    nan = check_accuracy({"val_acc": 0.75, "test_acc": math.nan}, history)
    assert nan.problems == ["'stats.test_acc' expected a finite accuracy in [0, 1] (got nan)"]
    off = check_accuracy({"val_acc": 0.5, "test_acc": 0.7}, history)
    assert off.problems == ["'stats.val_acc' expected the validation accuracy of best epoch 2, 0.75 (got 0.5)"]
    never = check_accuracy({"val_acc": 0.5, "test_acc": 0.5}, {"val_acc": [math.nan], "best_epoch": -1})
    assert never.problems == ["'history.json' expected a best_epoch in [0, 1) (got -1)"]


def test_plots_are_png_files(tmp_path: Path) -> None:
    paths = write_run_plots(tmp_path / "plots", {"loss": [1.2, 0.8, 0.7], "train_acc": [0.3, 0.5, 0.6],
                                                 "val_acc": [0.4, math.nan, 0.55]}, 2,
                            {"cpu": 0.25, "packed": 0.75}, {"cpu": 0.3, "gpu": 0.0},
                            {"ingest": 0.5, "sample": 1.5}, {"load_busy_s": 0.2, "eval_s": 0.1})
    assert [p.name for p in paths] == ["curves.png", "tier_hit_rates.png", "stage_timing.png"]
    for path in paths:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
