"""``benchmarks/layerwise_scale.py`` (streamed layer-wise evaluation at scale): preparation in one child, the
evaluation in another, and a report holding per pass (a split, or splits joined by '+') the frontier, intervals
and bytes read. Unconfined here (a
cgroup needs root); the confined path is the bench's (``pipelines.core.confine``, tested in ``test_confine.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.pipelines.script_fixtures import run_benchmark_script


def test_reports_the_streamed_evaluation(tmp_path: Path) -> None:
    report = run_benchmark_script("layerwise_scale.py", [
        "--dataset", "synthetic:nodes=3000,degree=6,dim=16,classes=3,seed=0,locality=0.9,window=8",
        "--budget", "none", "--memory-mb", "0", "--hidden-dim", "8", "--splits", "test,val+test"], tmp_path)
    test = report["evaluate"]["test"]
    assert report["confined"] is False and test["finite"] is True
    layer0, layer1 = test["layers"]
    assert layer1["targets"] == test["nodes"] and layer1["sources"] == layer0["targets"]
    assert layer0["sources"] >= layer0["targets"] >= layer1["targets"]
    assert layer0["bytes_read"] > 0 and layer1["bytes_read"] > 0  # memory 0: the hidden table is a scratch file
    both = report["evaluate"]["val+test"]  # one pass over the union of the two splits
    assert both["nodes"] > test["nodes"] and both["layers"][-1]["targets"] == both["nodes"]
