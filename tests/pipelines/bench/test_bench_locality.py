"""`strata bench --suite locality` on a small planted-community graph."""

from __future__ import annotations

import json

import pytest

from pipelines.bench.locality import PARTITION_METHODS, REORDER_STRATEGIES, add_ratios, run_locality_bench
from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths

SPEC = "synthetic:nodes=20000,degree=12,dim=8,classes=16,seed=3"


def _run(tmp_path, strategies, methods):
    cfg = PipelineConfig.load(
        overrides=["partition.num_parts=16", "sample.batch_size=128", "sample.macro_parts=1"], dataset=SPEC
    )
    out = tmp_path / "locality.json"
    report = run_locality_bench(cfg, StrataPaths.at(tmp_path / "root"), out, strategies=strategies,
                                methods=methods, rr_batches=20)
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    return report


def test_locality_report_shape_and_redundancy(tmp_path):
    report = _run(tmp_path, ("random", "community"), ("range", "fennel"))
    assert report["graph"]["nodes"] == 20000 and report["graph"]["edges"] > 0
    for name in ("random", "community"):
        row = report["reorder"][name]
        assert "error" not in row, row
        assert {"time_s", "peak_rss_mb", "pages_per_batch", "avg_edge_gap"} <= set(row)
    for name in ("range", "fennel"):
        row = report["partition"][name]
        assert "error" not in row, row
        assert 0 <= row["edge_cut"] <= 1 and row["balance"] >= 1
    # a streaming partitioner beats contiguous id ranges on a graph whose communities are scattered over ids
    assert report["partition"]["fennel"]["edge_cut"] < report["partition"]["range"]["edge_cut"]
    assert report["reorder"]["community"]["avg_edge_gap"] < report["reorder"]["random"]["avg_edge_gap"]
    rr = report["redundancy"]
    assert rr["partition"] < rr["random"]
    assert rr["change"] == pytest.approx(rr["partition"] / rr["random"] - 1, abs=1e-4)
    assert report["reorder"]["random"]["pages_vs_random"] == 1.0
    assert "cut_vs_metis" not in report["partition"]["fennel"]  # metis was not run


def test_ratios_against_random_and_metis():
    report = {
        "reorder": {"random": {"pages_per_batch": 200.0}, "community": {"pages_per_batch": 130.0},
                    "bfs": {"error": "boom"}},
        "partition": {"metis": {"edge_cut": 0.2, "peak_rss_mb": 3000.0, "stage_extra_rss_mb": 2000.0},
                      "grem": {"edge_cut": 0.21, "peak_rss_mb": 900.0, "stage_extra_rss_mb": 200.0},
                      "range": {"edge_cut": 0.9, "peak_rss_mb": 800.0}},
    }
    add_ratios(report)
    assert report["reorder"]["community"]["pages_vs_random"] == 0.65
    assert "pages_vs_random" not in report["reorder"]["bfs"]
    assert report["partition"]["grem"]["cut_vs_metis"] == 1.05
    assert report["partition"]["grem"]["memory_vs_metis"] == 0.1  # stage's own memory, 200 / 2000
    assert report["partition"]["range"]["memory_vs_metis"] == 0.2667  # no stage figure: process peaks 800 / 3000
    assert report["partition"]["metis"]["cut_vs_metis"] == 1.0


@pytest.mark.slow
def test_locality_suite_runs_every_strategy_and_method(tmp_path):
    report = _run(tmp_path, REORDER_STRATEGIES, PARTITION_METHODS)
    assert set(report["reorder"]) == set(REORDER_STRATEGIES)
    assert set(report["partition"]) == set(PARTITION_METHODS)
    assert all("error" not in row for row in [*report["reorder"].values(), *report["partition"].values()])
