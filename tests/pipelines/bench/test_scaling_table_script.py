"""``benchmarks/scaling_table.py``: the scaling table of stage reports at growing sizes (growth of seconds per
entry, marginal bytes per node), run as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.pipelines.script_fixtures import REPO


def _report(path: Path, nodes: int, edges: int, train_nodes: int, ingest_s: float, train_s: float,
            anon_mb: float) -> Path:
    stage = {"read_bytes": 2 * 10**9, "write_bytes": 10**9}
    path.write_text(json.dumps({
        "graph": {"num_nodes": nodes, "num_edges": edges, "train_nodes": train_nodes}, "memory_budget": 2**30,
        "cgroup_limit": 2**31, "confinement": "cgroup-v2", "disk": {"total_over_features": 2.5},
        "stages": {"ingest": {**stage, "stage_s": ingest_s, "peak_anon_mb": anon_mb},
                   "train": {**stage, "stage_s": train_s, "peak_anon_mb": 100.0}}}))
    return path


def _run(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "scaling_table.py"), *map(str, paths)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


def test_growth_per_entry_and_per_train_node(tmp_path: Path) -> None:
    # 10x the nodes, 10x the entries: ingest 30x slower is 3.0x per entry; train 10x slower over 5x the train
    # nodes is 2.0x per train node; 1,000 MiB more over 9M nodes is 116.5 bytes a node
    small = _report(tmp_path / "a.json", 10**6, 10**7, 1000, 2.0, 4.0, 24.0)
    large = _report(tmp_path / "b.json", 10**7, 10**8, 5000, 60.0, 40.0, 1024.0)
    proc = _run(large, small)  # any order: sorted by node count
    assert proc.returncode == 0, proc.stderr
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| stage")}
    assert rows["ingest"][1:4] == ["2.0", "60.0", "3.00"]
    assert rows["train (per train node)"][3] == "2.00"
    assert rows["ingest"][5] == "116.5"
    assert "10M: 10,000,000 nodes, 100,000,000 entries" in proc.stdout


def test_refuses_a_file_that_is_not_a_stage_report(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"policies": {}}))
    proc = _run(bad, _report(tmp_path / "a.json", 10, 20, 1, 1.0, 1.0, 1.0))
    assert proc.returncode != 0 and "'stages' and 'graph'" in proc.stderr and "bad.json" in proc.stderr
