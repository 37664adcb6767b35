"""``policy=ginex`` through the stage runner on the tiny graph: checks pass, the plan and pack record the
simulated hit rate, and training measures exactly that hit rate (and learns like ``in_memory``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.runner import StageRunner
from storage_kernels.changesets import ChangesetStore

OVERRIDES = ["policy=ginex", "sample.epochs=2", "train.epochs=2", "sample.batch_size=32", "plan.superbatch_size=3",
             "plan.cpu_cache_fraction=0.05", "partition.num_parts=4", "train.hidden_dim=16", "train.device=cpu"]


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> StageRunner:
    cfg = PipelineConfig.load(overrides=OVERRIDES, dataset="tiny")
    runner = StageRunner(cfg, StrataPaths.at(tmp_path_factory.mktemp("ginex")).store())
    runner.run_until("train")  # every stage's checks included
    return runner


def test_pack_holds_the_changesets_and_the_checks_say_so(runner: StageRunner) -> None:
    plan, pack = runner.artifact("plan"), runner.artifact("pack")
    assert pack.stats["layout"] == "changesets" and pack.stats["policy"] == "ginex"
    assert plan.stats["cpu_cache_rows"] == pack.stats["cache_rows"] > 0
    assert plan.stats["predicted_hit_rate"] == pack.stats["predicted_hit_rate"] > 0
    assert pack.stats["superbatches"] > 2 and pack.stats["changes"] > 0  # superbatches of 3 batches, cache moving
    store = ChangesetStore(pack.path, len(runner.artifact("sample").parquet("batches.parquet")))
    assert store.superbatch_size == 3 and np.diff(store.superbatch_ptr).max() == 3
    outcomes = {o.check.name: o.finding for o in runner.check("pack")}
    assert all(f.passed for f in outcomes.values())
    assert "changesets" in outcomes["addresses_in_bounds"].facts["layout"]  # no packed store to check
    assert outcomes["changesets_replay"].facts["changes"] == pack.stats["changes"]


def test_training_measures_the_predicted_hit_rate(runner: StageRunner) -> None:
    train, pack = runner.artifact("train"), runner.artifact("pack")
    # train.epochs == sample.epochs: training reads the sampled trace once, in order
    assert train.stats["cache_hit_rate"] == pytest.approx(pack.stats["predicted_hit_rate"], abs=1e-12)
    assert train.stats["bytes_read"] > 0 and train.stats["direct_io"] in (True, False)


def test_learns_exactly_like_in_memory(runner: StageRunner, tmp_path: Path) -> None:
    in_memory = runner.derive(runner.cfg.model_copy(update={"policy": "in_memory"}))
    assert in_memory.artifact("sample") is runner.artifact("sample")
    ours, theirs = runner.artifact("train").stats, in_memory.artifact("train").stats
    assert (ours["val_acc"], ours["test_acc"]) == (theirs["val_acc"], theirs["test_acc"])


def test_the_replay_check_catches_a_wrong_changeset(runner: StageRunner, tmp_path: Path) -> None:
    from pipelines.checks import _batch_index, check_changesets
    from storage_kernels.changesets import HITS, IN_IDS

    pack, samples = runner.artifact("pack"), runner.artifact("sample")
    idx = _batch_index(samples)
    args = (samples.array("nodes.npy"), idx["node_offset"], idx["hop_counts"][:, -1])
    copy = tmp_path / "pack"
    shutil.copytree(pack.path, copy)
    for p in copy.iterdir():
        p.chmod(0o644)
    finding = check_changesets(ChangesetStore(copy, len(idx["node_offset"])), *args)
    assert finding.passed and finding.facts["changes"] == pack.stats["changes"]
    hits = np.load(copy / HITS)
    hits[5] += 1
    np.save(copy / HITS, hits)
    store = ChangesetStore(copy, len(idx["node_offset"]))
    finding = check_changesets(store, *args)
    assert finding.problems == [f"'ginex_hits[5]' expected {hits[5] - 1}, batch {int(store.trace[5])}'s cached "
                                f"nodes (got {hits[5]})"]
    hits[5] -= 1
    np.save(copy / HITS, hits)
    ins = np.load(copy / IN_IDS)
    ins[0] = (ins[0] + 1) % 2500  # another node than the batch's at that position
    np.save(copy / IN_IDS, ins)
    finding = check_changesets(ChangesetStore(copy, len(idx["node_offset"])), *args)
    assert not finding.passed and "expected the positions of in_ids" in finding.problems[0]


def test_pack_summary_describes_the_changesets(runner: StageRunner) -> None:
    from pipelines.stages import pack

    text = pack.summary(runner.artifact("pack"))["summary"]
    assert "predicted hit rate" in text and "superbatches" in text and "packed.bin" not in text


def test_predicted_reads_count_every_switch(runner: StageRunner) -> None:
    # the simulation counts a superbatch's initial cache as hits; the switch reads it from the file all the same:
    # the prediction adds the distinct blocks of every switch, and bounds what training read
    from pipelines.core.graphio import load_graph
    from pipelines.methods.policies import POLICIES, PlanInputs
    from pipelines.methods.policies.reads import row_reads
    from storage_kernels.kernels._common import DIRECT_ALIGN
    from storage_kernels.sampleset import SampleSet

    plan, train = runner.artifact("plan"), runner.artifact("train")
    blocks = plan.stats["predicted_prefetch_blocks"]
    assert blocks > 0
    inputs = PlanInputs(load_graph(runner.artifact("reorder")), SampleSet(runner.artifact("sample").path), runner.cfg)
    ginex = POLICIES.get("ginex")()
    reads = ginex.predict_reads(inputs, ginex.plan(inputs))
    misses = int(plan.stats["total_accesses"] * (1.0 - plan.stats["predicted_hit_rate"])) // 2
    assert reads.bytes == row_reads(inputs, misses).bytes + blocks // 2 * DIRECT_ALIGN
    assert reads.bytes * 2 >= train.stats["bytes_read"]  # two epochs: every byte training read was predicted
