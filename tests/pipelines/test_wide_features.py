"""Wide features end to end: a graph of 20k nodes, 4,096 feature columns (328 MB of float32 features) and mean
degree ~61 runs `strata run` (default policy, every stage through export) inside a memory cgroup that counts the
page cache, at a limit far under what the export alone took before it projected first and cut its batches by
bytes (killed at 8 GiB; BENCHMARKS.md, "Wide features")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.core.confine import MemoryCgroup, cgroup_support
from pipelines.graph import STAGES

WIDE = "synthetic:nodes=20000,degree=80,dim=4096,classes=16,seed=0"
#: The cgroup's limit, page cache included: the largest stage, train, peaks at 1.9 GB RSS here (1.8 GB
#: anonymous); the rest is page cache the kernel reclaims at the limit (BENCHMARKS.md).
LIMIT = 3 << 30
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wide_feature_graph_runs_every_stage_within_a_memory_cgroup(tmp_path: Path) -> None:
    support = cgroup_support()
    if not support.available:
        pytest.skip(f"no memory cgroup can be made here: {support.reason}")
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_ENABLE_TELEMETRY": "false"}
    argv = [sys.executable, "-m", "pipelines.cli", "run", "--dataset", WIDE, "--root", str(tmp_path / "root"),
            "--set", "train.epochs=4", "--json"]  # a few epochs: the peaks are the first epoch's and evaluation's
    with MemoryCgroup(LIMIT, support, name="strata-wide-test") as cgroup:
        proc = subprocess.run(argv, preexec_fn=cgroup.join_argv(), capture_output=True, text=True, env=env,
                              cwd=REPO, timeout=1800)
        kills, peak = cgroup.oom_kills(), cgroup.peak_bytes()
    assert kills == 0 and proc.returncode == 0, proc.stderr[-3000:]
    assert peak is None or peak <= LIMIT
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [a["stage"] for a in report["artifacts"]] == [s.name for s in STAGES]
    stats = {a["stage"]: json.loads((Path(a["path"]) / "manifest.json").read_text())["stats"]
             for a in report["artifacts"]}
    print(json.dumps({"cgroup_limit_mb": LIMIT >> 20, "cgroup_peak_mb": (peak or 0) >> 20,
                      "peak_rss_mb": {stage: s.get("peak_rss_mb") for stage, s in stats.items()}}))
    assert all(s["peak_rss_mb"] * (1 << 20) < LIMIT for s in stats.values())  # each stage's own peak
    assert report["metrics"]["onnx_max_abs_diff"] < 1e-4  # the projected graph computes the trained model
    assert stats["export"]["fp32_val_acc"] == pytest.approx(report["metrics"]["val_acc"], abs=1e-9)
    assert stats["export"]["export_val_batches"] > 1  # the one validation batch (every val seed) was cut by bytes
