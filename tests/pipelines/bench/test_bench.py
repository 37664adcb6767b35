"""`strata bench` on the tiny graph: the report's shape, what each policy reads, equal accuracy, and a run
confined by a memory cgroup (where this process may create one)."""

from __future__ import annotations

import json

import pytest

from pipelines.bench.policies import BenchError, resolve_policies, run_bench
from pipelines.config import PipelineConfig
from pipelines.core.confine import cgroup_support
from pipelines.core.paths import StrataPaths
from pipelines.methods.policies import POLICIES

OVERRIDES = ["train.epochs=3", "sample.epochs=1", "train.hidden_dim=32", "train.device=cpu"]
POLICY_NAMES = ("auto", "diskgnn", "in_memory", "mmap", "naive")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("bench")


@pytest.fixture(scope="module")
def report(root):
    cfg = PipelineConfig.load(overrides=OVERRIDES, dataset="tiny")
    out = root / "bench.json"
    result = run_bench(cfg, StrataPaths.at(root), out_path=out, policies=POLICY_NAMES)
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return result


def test_report_has_the_documented_shape(report):
    assert report["dataset"] == "tiny" and report["memory_budget"] is None
    assert report["confinement"].startswith("none")
    assert report["disk"]["seq_read_mb_s"] > 0
    assert tuple(report["policies"]) == POLICY_NAMES
    for entry in report["policies"].values():
        for key in ("epoch_s", "bytes_read", "bytes_needed", "read_requests", "test_acc", "val_acc", "peak_rss_mb",
                    "disk_bytes", "preprocess_s", "hit_rate_predicted", "hit_rate_measured"):
            assert key in entry, key
        # the stage timers of the steady epochs (the epoch_s ones): less train time than every epoch's
        steady, every = entry["steady_timers"], entry["timers"]
        assert 0 < steady["train_s"] < every["train_s"]
        assert steady["compute_busy_s"] < every["compute_busy_s"] and steady["overlap"] > 0


def test_auto_reports_its_choice_against_every_policy_measured(report):
    auto = report["auto"]
    assert auto["chosen"] == "in_memory"  # tiny's features fit this machine many times over
    assert auto["epoch_s"] == report["policies"]["auto"]["epoch_s"] and auto["over_best"] > 0
    assert auto["best_policy"] in POLICY_NAMES and auto["best_policy"] != "auto"
    rows = {c["policy"]: c for c in auto["candidates"] if not c["settings"]}
    assert rows["in_memory"]["chosen"] and rows["in_memory"]["measured_epoch_s"] == auto["epoch_s"]
    assert rows["naive"]["predicted_over_measured"] > 0  # measured in this bench: the ratio is reported
    assert rows["naive"]["predicted_requests"] == report["policies"]["naive"]["read_requests"]  # exact, one epoch
    assert set(auto["left_out"]) >= {"mariusgnn", "outre"}


def test_static_plans_predict_each_cache_tiers_hit_rate_exactly(report):
    for name in ("diskgnn", "naive"):  # the same trace planned and replayed: predicted = measured, per tier
        rates = report["policies"][name]["hit_rates_by_tier"]
        assert set(rates) == {"gpu", "cpu"}
        for tier, rate in rates.items():
            assert rate["predicted"] == pytest.approx(rate["measured"]), (name, tier)
    assert report["policies"]["diskgnn"]["hit_rates_by_tier"]["cpu"]["measured"] > 0
    assert report["policies"]["mmap"]["hit_rates_by_tier"] is None  # page faults: no rows counted


def test_worker_files_live_in_the_roots_temp_dir_and_go_with_the_run(root, report):
    # each worker's job and result files sit in an owned entry of <root>/.tmp (a killed bench's leftovers
    # are then removed by the next cleanup_tmp), and nothing of them is left after the run
    from pipelines.bench.policies import _owned_tmp
    from storage_kernels.store import TMP_NAME, ArtifactStore

    tmp = root / TMP_NAME
    leftovers = [e.name for e in tmp.iterdir() if ".bench." in e.name] if tmp.is_dir() else []
    assert not leftovers  # the module's bench ran its workers and removed their directories
    with _owned_tmp(root) as work:
        assert work.parent == tmp and work.name.endswith(".bench.scratch") and work.is_dir()
        ArtifactStore(root).cleanup_tmp()
        assert work.is_dir()  # its owner, this process, lives
    assert not work.exists()


def test_policies_read_what_they_should(report):
    p = report["policies"]
    assert p["in_memory"]["bytes_read"] == 0 and p["in_memory"]["read_requests"] == 0
    # naive: one request per needed row, a whole 4 KiB block for a 128-byte row
    assert p["naive"]["read_amplification"] == pytest.approx(4096 / 128)
    assert p["naive"]["read_requests"] * 128 == p["naive"]["bytes_needed"]
    # diskgnn: one aligned chunk per batch, padding only; its measured hit rate is the plan's
    assert 0 < p["diskgnn"]["bytes_read"] < p["naive"]["bytes_read"]
    assert 1.0 <= p["diskgnn"]["read_amplification"] < 1.1
    assert p["diskgnn"]["hit_rate_measured"] == pytest.approx(p["diskgnn"]["hit_rate_predicted"])
    assert p["mmap"]["bytes_read_counted_by"].startswith("os")  # page faults, not the source's reads


def test_out_of_core_trains_exactly_like_in_memory(report):
    accs = {name: (e["val_acc"], e["test_acc"]) for name, e in report["policies"].items()}
    assert len(set(accs.values())) == 1, accs


def test_policy_lists_are_checked():
    assert set(resolve_policies("all")) == set(POLICIES)
    assert resolve_policies("all")[-3:] == ("in_memory", "mmap", "naive")  # baselines last
    assert resolve_policies("naive, diskgnn,naive") == ("naive", "diskgnn")
    assert resolve_policies("all,auto") == resolve_policies("all") and resolve_policies("all")[0] == "auto"
    with pytest.raises(ValueError, match="'--policies' expected"):
        resolve_policies("diskgnn,lru")


@pytest.mark.skipif(not cgroup_support().available, reason=f"no memory cgroup: {cgroup_support().reason}")
def test_a_budget_confines_every_run_with_the_page_cache_counted(root):
    cfg = PipelineConfig.load(overrides=OVERRIDES, dataset="tiny")
    budget, overhead = 64 << 10, 400 << 20
    result = run_bench(cfg, StrataPaths.at(root), policies=("mmap",), memory_budget=budget,
                       memory_overhead=overhead)
    assert result["confinement"] == cgroup_support().label
    for entry in result["policies"].values():
        assert entry["cgroup_limit"] == budget + overhead
        assert not entry["oom_killed"]
        assert 0 < entry["peak_cgroup_mb"] * (1 << 20) <= budget + overhead


@pytest.mark.skipif(not cgroup_support().available, reason=f"no memory cgroup: {cgroup_support().reason}")
def test_preprocessing_killed_at_its_limit_stops_the_bench_instead_of_running_unconfined(tmp_path):
    cfg = PipelineConfig.load(overrides=OVERRIDES, dataset="tiny")
    with pytest.raises(BenchError, match="preprocessing for naive failed .*OOM-killed"):
        run_bench(cfg, StrataPaths.at(tmp_path), policies=("naive",), memory_budget=64 << 10,
                  memory_overhead=24 << 20)
    assert not list(tmp_path.glob("*/pack/*"))  # nothing was built outside the cgroup


def test_a_budget_from_the_flag_or_the_config_sizes_the_runs_and_is_recorded(tmp_path):
    cfg = PipelineConfig.load(overrides=[*OVERRIDES, "memory_budget=1G"], dataset="tiny")
    report = run_bench(cfg, StrataPaths.at(tmp_path), policies=("in_memory",))
    assert report["memory_budget"] == 1 << 30  # the configuration's, with no --memory-budget
    assert report["config"]["cpu_cache_bytes"] == 512 << 20


def test_eval_batches_evaluates_a_subset(root):
    cfg = PipelineConfig.load(overrides=[*OVERRIDES, "sample.eval_batch_size=64"], dataset="tiny")
    full = run_bench(cfg, StrataPaths.at(root), policies=("in_memory",))["policies"]["in_memory"]
    subset = run_bench(cfg, StrataPaths.at(root), policies=("in_memory",), eval_batches=1)
    assert subset["eval_batches"] == 1
    assert full["eval_batches_run"] > 2 and subset["policies"]["in_memory"]["eval_batches_run"] == 2  # val + test
    with pytest.raises(ValueError, match="'--eval-batches' expected at least 1"):
        run_bench(cfg, StrataPaths.at(root), policies=("in_memory",), eval_batches=0)
