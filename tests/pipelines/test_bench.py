"""`strata bench` on the tiny graph: report shape, and the three feature paths train identically."""

from __future__ import annotations

import json

import pytest

from pipelines.bench import run_bench
from pipelines.config import PipelineConfig
from pipelines.settings import StrataPaths


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    cfg = PipelineConfig.load(
        overrides=["train.epochs=2", "sample.epochs=1", "train.hidden_dim=32", "train.device=cpu"], dataset="tiny"
    )
    out = root / "bench.json"
    result = run_bench(cfg, StrataPaths.at(root), out_path=out)
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    return result


def test_report_has_the_documented_shape(report):
    assert report["dataset"] == "tiny"
    assert report["disk"]["seq_read_mb_s"] > 0
    assert set(report["modes"]) == {"in_memory", "naive", "strata"}
    for entry in report["modes"].values():
        for key in ("epoch_s", "bytes_read", "bytes_needed", "test_acc"):
            assert key in entry


def test_feature_paths_read_what_they_should(report):
    modes = report["modes"]
    assert modes["in_memory"]["bytes_read"] == 0
    # naive reads whole 4 KiB blocks per row: more than the rows it needs; packing reads less than naive
    assert modes["naive"]["bytes_read"] > modes["naive"]["bytes_needed"]
    assert 0 < modes["strata"]["bytes_read"] < modes["naive"]["bytes_read"]


def test_out_of_core_trains_exactly_like_in_memory(report):
    accs = {mode: (e["val_acc"], e["test_acc"]) for mode, e in report["modes"].items()}
    assert accs["strata"] == accs["in_memory"] == accs["naive"]
