"""``benchmarks/link_scale.py`` (the link-prediction-at-scale run): preparation in one child, the train stage in
another, and a report holding the train stage's metrics and out-of-core traffic. Unconfined here (a cgroup needs
root); the confined path is the bench's (``pipelines.core.confine``, tested in ``test_confine.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.pipelines.script_fixtures import run_benchmark_script


def test_reports_the_out_of_core_link_run(tmp_path: Path) -> None:
    report = run_benchmark_script("link_scale.py", [
        "--dataset", "synthetic:nodes=600,degree=6,dim=4,classes=2,seed=0,locality=0.9,window=4",
        "--budget", "none", "--epochs", "1", "--embedding-dim", "8", "--set", "plan.num_partitions=4",
        "--set", "plan.buffer_partitions=2", "--set", "sample.epochs=1"], tmp_path)
    train = report["train"]
    assert report["confined"] is False and report["prepare"]["until"] == "pack"
    assert train["out_of_core"] is True and train["num_partitions"] == 4 and train["max_resident"] <= 2
    assert train["bytes_read"] > 0 and train["node_file_bytes"] >= 600 * 2 * 8 * 4
    assert train["sampled_mrr"] > train["random_mrr"]
