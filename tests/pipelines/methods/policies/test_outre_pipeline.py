"""``policy=outre`` with partition batching through the stage runner: every stage and its checks, training."""

from __future__ import annotations

from pathlib import Path

from tests.pipelines.methods.policies.test_outre import _runner


def test_outre_trains_through_the_stage_runner(tmp_path: Path) -> None:
    runner = _runner(tmp_path, "plan.staleness=4", "train.epochs=1")
    runner.run_until("train")  # every stage's checks pass
    plan, pack, trained = (runner.artifact(s) for s in ("plan", "pack", "train"))
    assert 0.0 <= plan.stats["alpha"] <= 1.0 and plan.stats["history_rows"] > 0
    assert plan.stats["predicted_saved_hist_bytes"] > 0 and plan.stats["beta_measured"] is False
    assert pack.stats["layout"] == "outre" and pack.stats["pulls"] > 0
    assert trained.stats["policy"] == "outre" and 0.0 <= trained.stats["test_acc"] <= 1.0
