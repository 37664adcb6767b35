"""``benchmarks/link_scale.py`` (the link-prediction-at-scale run): preparation in one child, the train stage in
another, and a report holding the train stage's metrics and out-of-core traffic. Unconfined here (a cgroup needs
root); the confined path is the bench's (``pipelines.confine``, tested in ``test_confine.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_reports_the_out_of_core_link_run(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "link_scale.py"), "--root", str(tmp_path / "root"),
         "--dataset", "synthetic:nodes=600,degree=6,dim=4,classes=2,seed=0,locality=0.9,window=4",
         "--budget", "none", "--epochs", "1", "--embedding-dim", "8", "--set", "plan.num_partitions=4",
         "--set", "plan.buffer_partitions=2", "--set", "sample.epochs=1", "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    train = report["train"]
    assert report["confined"] is False and report["prepare"]["until"] == "pack"
    assert train["out_of_core"] is True and train["num_partitions"] == 4 and train["max_resident"] <= 2
    assert train["bytes_read"] > 0 and train["node_file_bytes"] >= 600 * 2 * 8 * 4
    assert train["sampled_mrr"] > train["random_mrr"]
