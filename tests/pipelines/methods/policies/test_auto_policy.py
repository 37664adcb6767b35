"""``policy=auto``: the cost model's choice, its record in the plan, the stages after it running the chosen
policy (with the same results as forcing it), the budget it never breaks, the disk profile it caches, and the
predicted reads against the reads training measures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.config import PipelineConfig
from pipelines.core import disk_profile as dp
from pipelines.core.paths import StrataPaths
from pipelines.methods.policies.auto import resolved
from pipelines.methods.policies.auto.cost import Candidate, choose, epoch_seconds, threads_for
from pipelines.methods.policies.auto.probe import ComputeProbe
from pipelines.methods.policies.reads import EpochReads
from pipelines.runner import StageRunner

SMALL = ["sample.epochs=2", "train.epochs=2", "sample.batch_size=32", "partition.num_parts=4", "train.hidden_dim=16",
         "train.device=cpu"]
DISK = dp.DiskProfile(seq_read_bytes_s=1e9, random_iops_qd1=10_000, random_iops=100_000, direct_io=True,
                      measured_at="now")


def _probe(per_batch: dict[int, float], batches: int = 10) -> ComputeProbe:
    return ComputeProbe(per_batch, batches, 3, "cpu")


# ---- the cost model ----------------------------------------------------------------------------------------

def test_reads_are_bandwidth_or_request_bound_whichever_is_slower() -> None:
    probe = _probe({1: 0.01})
    big = EpochReads(bytes=2_000_000_000, requests=10)  # 2 s of bandwidth, 0.1 ms of requests
    small = EpochReads(bytes=4096 * 50_000, requests=50_000)  # 0.2 s of bandwidth, 0.5 s of requests
    assert epoch_seconds(big, DISK, probe, 1) == (pytest.approx(2.0), pytest.approx(0.1))
    assert epoch_seconds(small, DISK, probe, 1)[0] == pytest.approx(0.5)
    one_at_a_time = EpochReads(bytes=4096 * 50_000, requests=50_000, queue_depth=1)
    assert epoch_seconds(one_at_a_time, DISK, probe, 1)[0] == pytest.approx(5.0)  # 10,000 reads/s at depth 1
    assert epoch_seconds(EpochReads(0, 0), DISK, probe, 1)[0] == 0.0


def test_threads_leave_the_loader_a_core_only_when_it_costs_nothing() -> None:
    reads_disk, in_ram = True, False
    assert threads_for(in_ram, _probe({1: 0.02, 2: 0.01})) == 2  # no reads: the fastest
    assert threads_for(reads_disk, _probe({1: 0.0102, 2: 0.01})) == 1  # within the tie: the loader's core
    assert threads_for(reads_disk, _probe({1: 0.02, 2: 0.01})) == 2  # fewer threads twice as slow: not worth it
    assert threads_for(in_ram, _probe({1: 0.013, 2: 0.064})) == 1  # oversubscribed: one thread is faster


def test_choose_takes_the_fastest_and_breaks_ties_by_bytes_then_order_then_memory() -> None:
    def c(name: str, epoch: float, nbytes: int = 0, resident: int = 0, refused: str = "") -> Candidate:
        return Candidate(name, reads=EpochReads(nbytes, 1), epoch_s=epoch, resident_bytes=resident, refused=refused)

    assert choose([c("naive", 2.0), c("diskgnn", 1.0), c("ginex", 1.5)]).policy == "diskgnn"
    assert choose([c("diskgnn", 1.0, nbytes=10), c("hyperbatch", 1.02, nbytes=5)]).policy == "hyperbatch"  # a tie
    assert choose([c("diskgnn", 1.0, resident=9), c("ginex", 1.0, resident=5)]).policy == "diskgnn"  # the order
    assert choose([c("hyperbatch", 1.0, resident=5), c("diskgnn", 1.01, resident=9)]).policy == "diskgnn"
    low = c("diskgnn", 1.0, resident=5)  # two settings of one policy: the one holding less memory
    assert choose([c("diskgnn", 1.0, resident=9), low]) is low
    assert choose([c("in_memory", 0.1, refused="holds too much"), c("naive", 9.0)]).policy == "naive"
    with pytest.raises(ValueError, match=r"'policy' auto expected a candidate policy that fits .*in_memory: too big"):
        choose([c("in_memory", 0.1, refused="too big")])


# ---- the disk profile --------------------------------------------------------------------------------------

def test_the_disk_profile_is_measured_once_and_cached_in_the_root(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(dp, "PROBE_BYTES", 8 << 20)
    root = tmp_path / "root"
    first = dp.disk_profile(root)
    assert first.seq_read_bytes_s > 0 and first.random_iops > 0 and first.random_iops_qd1 > 0
    cached = json.loads((root / dp.PROFILE_NAME).read_text())
    assert cached["seq_read_bytes_s"] == first.seq_read_bytes_s and not list(root.glob(".disk_probe*"))
    assert dp.disk_profile(root) == first  # reused, not measured again
    other = tmp_path / "other"  # another root on the same device: the machine cache answers
    assert dp.disk_profile(other) == first and (other / dp.PROFILE_NAME).exists()
    assert dp.disk_profile(root, refresh=True).measured_at >= first.measured_at
    (root / dp.PROFILE_NAME).write_text("{not json")
    (dp.machine_cache(first.device)).unlink()
    assert dp.disk_profile(root).seq_read_bytes_s > 0  # an unreadable cache is measured again, not an error


# ---- through the stages ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def auto_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("auto")


def _runner(root: Path, *overrides: str) -> StageRunner:
    cfg = PipelineConfig.load(overrides=[*SMALL, *overrides], dataset="tiny")
    return StageRunner(cfg, StrataPaths.at(root).store())


def test_auto_is_the_default_and_takes_in_memory_when_the_features_fit(auto_root: Path) -> None:
    runner = _runner(auto_root)
    assert runner.cfg.policy == "auto"
    runner.run_until("train")
    plan, pack, train = (runner.artifact(s) for s in ("plan", "pack", "train"))
    record = plan.stats["auto"]
    assert record["policy"] == "in_memory" == plan.stats["chosen_policy"] == pack.stats["chosen_policy"]
    assert train.stats["chosen_policy"] == "in_memory" and train.stats["bytes_read"] == 0
    by_name = {c["policy"]: c for c in record["candidates"] if not c["settings"]}
    assert by_name["in_memory"]["epoch_s"] <= min(c["epoch_s"] for c in record["candidates"] if c["epoch_s"])
    assert set(record["left_out"]) == {"mariusgnn", "outre", "mmap"}  # other samples, or the page cache
    assert record["settings"]["train.num_threads"] >= 1 and record["memory"]["how"].startswith("no memory_budget")


def test_auto_never_picks_what_the_budget_refuses_and_trains_as_its_choice_forced(auto_root: Path) -> None:
    features = 2000 * 128 * 4  # tiny: 2,000 nodes x 128 float32
    runner = _runner(auto_root, f"memory_budget={features // 4}")
    runner.run_until("train")
    record = runner.artifact("plan").stats["auto"]
    refused = {c["policy"]: c["refused"] for c in record["candidates"] if c["refused"]}
    assert "in_memory" in refused and "more than" in refused["in_memory"]
    assert record["policy"] != "in_memory" and runner.artifact("train").stats["bytes_read"] > 0
    forced = runner.derive(resolved(runner.cfg, runner.artifact("plan").stats))  # the choice, with its settings
    ours, theirs = runner.artifact("train").stats, forced.artifact("train").stats
    assert forced.cfg.policy == record["policy"]
    assert (ours["val_acc"], ours["test_acc"], ours["bytes_read"]) == (theirs["val_acc"], theirs["test_acc"],
                                                                       theirs["bytes_read"])


def test_named_candidates_limit_the_choice_and_predicted_reads_match_training(auto_root: Path) -> None:
    runner = _runner(auto_root, "plan.auto_candidates=naive", "train.epochs=2")
    runner.run_until("train")
    record = runner.artifact("plan").stats["auto"]
    assert record["policy"] == "naive" and [c["policy"] for c in record["candidates"]] == ["naive"]
    predicted = record["candidates"][0]["reads"]
    train = runner.artifact("train").stats
    epochs = 2  # train.epochs == sample.epochs: training reads every sampled epoch once
    assert abs(train["read_requests"] - predicted["requests"] * epochs) < epochs  # one read a row: exact (the
    # prediction is a whole number per epoch)
    assert train["bytes_read"] == pytest.approx(predicted["bytes"] * epochs, rel=0.05)  # rows straddling blocks


def test_a_forced_policy_keeps_its_name_and_trains_at_the_threads_its_plan_probed(auto_root: Path) -> None:
    runner = _runner(auto_root, "policy=diskgnn")
    runner.run_until("train")
    stats = runner.artifact("plan").stats
    assert "auto" not in stats
    threads = stats["threads"]
    assert threads["reads_disk"] is True and "1" in threads["compute"]["seconds_per_batch"]
    chosen = resolved(runner.cfg, stats)
    assert chosen.policy == "diskgnn" and chosen.train.num_threads == threads["train.num_threads"] >= 1
    history = json.loads((runner.artifact("train").path / "history.json").read_text())
    assert history["timers"]["compute_threads"] == threads["train.num_threads"]  # what training ran at
    with pytest.raises(ValueError, match="'policy' auto expected a plan artifact with its choice"):
        resolved(runner.cfg.model_copy(update={"policy": "auto"}), stats)


def test_a_forced_in_memory_plan_takes_the_probes_fastest_threads(auto_root: Path) -> None:
    runner = _runner(auto_root, "policy=in_memory")
    runner.run_until("plan")
    threads = runner.artifact("plan").stats["threads"]
    per_batch = {int(t): s for t, s in threads["compute"]["seconds_per_batch"].items()}
    assert threads["reads_disk"] is False
    assert threads["train.num_threads"] == min(per_batch, key=lambda t: (per_batch[t], t))


def test_threads_the_user_set_leave_a_forced_plan_unprobed(auto_root: Path) -> None:
    runner = _runner(auto_root, "policy=naive", "train.num_threads=1")
    runner.run_until("plan")
    assert "threads" not in runner.artifact("plan").stats
    probed = {"threads": {"train.num_threads": 2, "reads_disk": True}}
    assert resolved(runner.cfg, probed).train.num_threads == 1  # the user's, over any plan's
    assert resolved(PipelineConfig.load(overrides=["policy=naive"]), probed).train.num_threads == 2


def test_candidates_are_checked_when_the_config_loads() -> None:
    cfg = PipelineConfig.load(overrides=["plan.auto_candidates=diskgnn,ginex"])
    assert cfg.plan.auto_candidates == ["diskgnn", "ginex"]
    assert PipelineConfig.load(overrides=["plan.auto_candidates=naive"]).plan.auto_candidates == ["naive"]
    with pytest.raises(ValueError, match=r"'plan.auto_candidates' .*nope"):
        PipelineConfig.load(overrides=["plan.auto_candidates=diskgnn,nope"])
    with pytest.raises(ValueError, match="got 'auto'"):
        PipelineConfig.load(overrides=["plan.auto_candidates=auto"])


def test_the_chosen_threads_give_way_to_threads_the_user_set() -> None:
    stats = {"auto": {"policy": "diskgnn", "settings": {"plan.disk_cache_buffer_bytes": 0, "train.num_threads": 1}}}
    chosen = resolved(PipelineConfig.load(), stats)
    assert (chosen.policy, chosen.plan.disk_cache_buffer_bytes, chosen.train.num_threads) == ("diskgnn", 0, 1)
    assert resolved(PipelineConfig.load(overrides=["train.num_threads=3"]), stats).train.num_threads == 3


def test_reads_hide_behind_compute_except_the_pipelines_fill() -> None:
    from pipelines.methods.policies.auto.cost import pipelined

    assert pipelined(1.0, 4.0, 4) == pytest.approx(4.25)  # compute-bound: one batch's read shows
    assert pipelined(4.0, 1.0, 4) == pytest.approx(4.25)  # read-bound: the last step shows
    assert pipelined(1.0, 4.0, 1) == pytest.approx(5.0)  # one batch: nothing overlaps
    assert pipelined(0.0, 4.0, 10) == 4.0


def test_the_pack_version_follows_the_choice_not_just_the_plan_version() -> None:
    """A plan's choice rests on measurements: a plan rebuilt under the same version may choose otherwise, and
    the pack (and everything after it) laid out for the other choice must not be reused."""
    from pipelines.methods.policies.auto import choice_version

    def stats(policy: str, **settings: object) -> dict:
        return {"auto": {"policy": policy, "settings": {**settings, "train.num_threads": 2}}}

    assert choice_version({"policy": "diskgnn"}) == {}  # a forced policy: nothing added
    assert choice_version(stats("diskgnn")) == {"auto_choice": {"policy": "diskgnn", "settings": {}}}
    assert choice_version(stats("diskgnn")) != choice_version(stats("ginex"))
    assert choice_version(stats("diskgnn")) != choice_version(stats("diskgnn", **{"plan.cpu_cache_bytes": 1}))
    threads = stats("diskgnn")
    threads["auto"]["settings"]["train.num_threads"] = 1
    assert choice_version(threads) == choice_version(stats("diskgnn"))  # threads: a speed knob


def test_the_pack_lays_out_autos_searched_disk_caches_without_searching_again(auto_root: Path, monkeypatch) -> None:
    """Under a disk budget pure packing cannot meet, ``auto`` runs ``diskgnn``'s (m, s) search to predict its
    reads; the pack takes that choice (the search is deterministic) instead of searching a second time, and
    lays out what a forced ``diskgnn`` lays out after its own search."""
    from pipelines.methods.policies.diskgnn import layout
    from pipelines.methods.policies.diskgnn.search import SEARCH_STAT

    tight = ["plan.auto_candidates=diskgnn", "pack.disk_budget=1.5", "sample.fanouts=[4,3]",
             "plan.cpu_cache_fraction=0.1"]
    runner = _runner(auto_root, *tight)
    runner.run_until("plan")
    record = runner.artifact("plan").stats[SEARCH_STAT]
    assert record["cache_rows"] > 0  # segment disk caches: the budget needed them
    searched = layout.search

    def no_second_search(*args, **kwargs):
        raise AssertionError("the pack searched again")

    monkeypatch.setattr(layout, "search", no_second_search)
    runner.run_until("pack")
    monkeypatch.setattr(layout, "search", searched)
    forced = _runner(auto_root, *tight, "policy=diskgnn", *(f"{k}={v}" for k, v in
                     runner.artifact("plan").stats["auto"]["settings"].items() if not k.startswith("train.")))
    forced.run_until("pack")  # searches itself
    ours, theirs = runner.artifact("pack").stats, forced.artifact("pack").stats
    keys = ("segment_batches", "segment_cache_rows", "search_candidates", "search_feasible", "search_evaluated",
            "store_bytes")
    assert {k: ours.get(k) for k in keys} == {k: theirs.get(k) for k in keys}
    assert (runner.artifact("pack").path / "disk_cache.bin").read_bytes() == \
        (forced.artifact("pack").path / "disk_cache.bin").read_bytes()


def test_the_probe_times_every_thread_count_even_on_a_one_batch_epoch(auto_root: Path) -> None:
    """Cora trains one batch an epoch: the probe cycles it, so no count is left untimed (a zero compute time
    would make every policy look read-bound)."""
    from pipelines.core.graphio import load_graph
    from pipelines.methods.policies import PlanInputs
    from pipelines.methods.policies.auto.probe import probe_compute
    from storage_kernels.sampleset import SampleSet

    runner = _runner(auto_root, "sample.batch_size=4096", "policy=naive", "train.num_threads=1")
    runner.run_until("sample")
    inputs = PlanInputs(load_graph(runner.artifact("reorder")), SampleSet(runner.artifact("sample").path), runner.cfg)
    probe = probe_compute(inputs, probe_batches=3, cores=2)
    assert probe.batches_per_epoch == 1 and probe.probe_batches == 3
    assert set(probe.seconds_per_batch) == {1, 2} and min(probe.seconds_per_batch.values()) > 0
