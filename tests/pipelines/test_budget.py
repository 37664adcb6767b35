"""``memory_budget``: the settings one budget sizes, the ones a user chose, and the plan it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.budget import CACHE_SHARE, check_fits, resident_bytes
from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.runner import StageRunner

BASE = ["sample.epochs=1", "train.epochs=1"]


def _cfg(*overrides: str) -> PipelineConfig:
    return PipelineConfig.load(overrides=[*BASE, *overrides], dataset="tiny")


def test_a_budget_sizes_every_setting_left_at_its_default():
    plain, cfg = _cfg(), _cfg("memory_budget=100M")
    assert plain.memory_budget is None and plain.plan.cpu_cache_bytes is None  # no budget: the fractions
    assert cfg.memory_budget == 100 << 20
    assert cfg.plan.cpu_cache_bytes == int((100 << 20) * CACHE_SHARE)
    assert cfg.plan.disk_cache_buffer_bytes == (100 << 20) - cfg.plan.cpu_cache_bytes
    assert cfg.sample.eval_batch_size == cfg.sample.batch_size  # evaluation needs no more than training
    assert (cfg.ingest.memory_mb == cfg.reorder.memory_mb == cfg.pack.memory_mb == cfg.train.layerwise_memory_mb
            == cfg.export.memory_mb
            == 64)  # >= 64 MiB
    big = _cfg("memory_budget=400M")
    assert (big.reorder.memory_mb == big.pack.memory_mb == big.train.layerwise_memory_mb == big.export.memory_mb
            == 200)  # half of it
    huge = _cfg("memory_budget=16G")  # each default, when smaller than half the budget
    assert (huge.reorder.memory_mb, huge.pack.memory_mb, huge.train.layerwise_memory_mb, huge.export.memory_mb) == (
        plain.reorder.memory_mb, plain.pack.memory_mb, plain.train.layerwise_memory_mb, plain.export.memory_mb)


def test_a_budget_keeps_what_the_user_chose_and_survives_a_round_trip():
    cfg = _cfg("memory_budget=1G", "plan.cpu_cache_fraction=0.2", "reorder.memory_mb=2048",
               "sample.eval_batch_size=4096", "plan.disk_cache_buffer_bytes=1000000")
    assert cfg.plan.cpu_cache_bytes is None and cfg.plan.cpu_cache_fraction == 0.2
    assert cfg.reorder.memory_mb == 2048 and cfg.sample.eval_batch_size == 4096
    assert cfg.plan.disk_cache_buffer_bytes == 1_000_000
    assert cfg.pack.memory_mb == 256  # the default, below half the budget
    for one in (cfg, _cfg("memory_budget=100M")):
        assert PipelineConfig.validated(one.to_dict()) == one  # Dagster's run config carries every field
    assert _cfg("memory_budget=1073741824") == _cfg("memory_budget=1G") == _cfg("memory_budget=1GiB")


def test_a_bad_budget_is_refused_naming_the_setting():
    for bad in ("lots", "0", "-1G"):
        with pytest.raises(ValueError, match="'memory_budget' expected a"):
            _cfg(f"memory_budget={bad}")
    assert _cfg("plan.cpu_cache_bytes=8G").plan.cpu_cache_bytes == 8 << 30  # byte settings take sizes too
    with pytest.raises(ValueError, match="'plan.cpu_cache_bytes' expected a size such as 512M"):
        _cfg("plan.cpu_cache_bytes=8Q")


def test_dagster_run_config_takes_a_budget_as_a_size_and_it_sizes_the_run():
    from pipelines.orchestration.resources import settings_type

    settings = settings_type(PipelineConfig())(memory_budget="256M", plan={"hyperbatch_bytes": 1 << 20})
    cfg = PipelineConfig.validated(settings.model_dump())
    assert cfg.memory_budget == 256 << 20 and cfg.plan.cpu_cache_bytes == 128 << 20
    assert cfg.plan.hyperbatch_bytes == 1 << 20  # byte settings stay numbers in a run config
    base = _cfg("memory_budget=1G")  # the CLI's configuration as the launchpad's defaults: the same run
    assert PipelineConfig.validated(settings_type(base)().model_dump()) == base


def test_resident_buffers_count_the_window_only_for_the_policy_that_has_one():
    diskgnn = _cfg("memory_budget=100M", "policy=diskgnn")
    assert resident_bytes(diskgnn, 1 << 30) == {"plan.cpu_cache": 50 << 20, "plan.disk_cache_buffer": 50 << 20}
    ginex = _cfg("memory_budget=100M", "policy=ginex")
    assert resident_bytes(ginex, 1 << 30) == {"plan.cpu_cache": 50 << 20}
    for cacheless in ("naive", "mmap"):  # no cache of their own (mmap's page cache is the kernel's)
        assert resident_bytes(_cfg("memory_budget=100M", f"policy={cacheless}"), 1 << 30) == {}
    check_fits(diskgnn, 1 << 30)  # exactly the budget
    check_fits(_cfg("plan.cpu_cache_bytes=8G", "policy=diskgnn"), 1 << 30, machine_bytes=4 << 30)  # 8G parses
    with pytest.raises(ValueError, match=r"'plan' expected caches that fit this machine's 1.0 GiB of memory "
                                         r"\(got plan.cpu_cache 1.0 GiB \+ plan.disk_cache_buffer 1.0 GiB"):
        check_fits(_cfg("policy=diskgnn"), 10 << 30, machine_bytes=1 << 30)  # no budget: 10% + 10% of 10 GiB
    check_fits(_cfg("policy=diskgnn"), 10 << 30)  # this machine has more than 2 GiB
    assert resident_bytes(_cfg("memory_budget=100M"), 1 << 30) == {}  # auto: its choice's, checked when it chooses
    chosen = _cfg("memory_budget=100M", "plan.cpu_cache_bytes=80M", "policy=diskgnn")
    with pytest.raises(ValueError, match=r"plan.cpu_cache 80.0 MiB \+ plan.disk_cache_buffer 50.0 MiB = 130.0 MiB "
                                         r"\(got 100.0 MiB\)"):
        check_fits(chosen, 1 << 30)
    check_fits(chosen, 40 << 20)  # no buffer holds more than the feature file: 40 + 40 MiB fit
    in_memory = _cfg("memory_budget=100M", "policy=in_memory")  # holds the whole file
    check_fits(in_memory, 100 << 20)
    with pytest.raises(ValueError, match=r"the feature file \(in_memory\) 200.0 MiB = 200.0 MiB"):
        check_fits(in_memory, 200 << 20)


def test_the_plan_stage_refuses_caches_beyond_the_budget_and_writes_nothing(tmp_path: Path):
    store = StrataPaths.at(tmp_path).store()
    cfg = _cfg("memory_budget=64K", "plan.cpu_cache_bytes=1M", "policy=diskgnn")
    runner = StageRunner(cfg, store)
    runner.run_until("sample")
    with pytest.raises(ValueError, match="'memory_budget' expected to hold the policy's resident buffers"):
        runner.run_until("plan")
    assert not list(tmp_path.glob("tiny/plan/*"))
    fitting = StageRunner(_cfg("memory_budget=64K", "policy=diskgnn"), store).run_until("plan")[-1].artifact
    assert fitting.stats["cpu_budget_bytes"] == 32 << 10


def test_training_on_a_reused_plan_checks_a_new_budget(tmp_path: Path):
    store = StrataPaths.at(tmp_path).store()
    chosen = ["policy=diskgnn", "plan.cpu_cache_bytes=1M", "plan.disk_cache_buffer_bytes=4096",
              "sample.eval_batch_size=1024",
              "reorder.memory_mb=64", "pack.memory_mb=64", "train.layerwise_memory_mb=64"]
    StageRunner(_cfg(*chosen), store).run_until("pack")
    runner = StageRunner(_cfg(*chosen, "memory_budget=64K"), store)  # the budget changes no artifact setting
    runner.run_until("pack")
    assert all(r.reused for r in runner.run_until("pack"))
    with pytest.raises(ValueError, match="'memory_budget' expected to hold the policy's resident buffers"):
        runner.run_until("train")
    assert not list(tmp_path.glob("tiny/train/*"))
