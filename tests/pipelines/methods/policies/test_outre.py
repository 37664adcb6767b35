"""``policy=outre`` on ``tiny``: exactness at staleness 1, the FSM's pulls replayed by the trainer, features of
pruned batches, accuracy under staleness, and the whole stage graph through the runner."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.methods.policies.outre.policy import training_order
from pipelines.runner import StageRunner
from pipelines.stages.train import open_features
from storage_kernels.sampleset import SampleSet
from trainer.features import InMemoryFeatures
from trainer.features.outre import PrunedFeatures
from trainer.history import HistoricalCache
from trainer.pruned_samples import HistoryLists, PrunedBatch, PrunedSamples
from trainer.train import train

BASE = ["policy=outre", "sample.batching=partition", "sample.batch_size=64", "sample.fanouts=5,5",
        "sample.epochs=3", "partition.num_parts=8", "plan.cpu_cache_fraction=0.3", "train.epochs=3",
        "train.hidden_dim=16", "train.device=cpu", "train.prefetch=1",
        # one compute thread for every source: by default a source that reads the disk leaves a core to the
        # loader, and a different thread count sums in another order (equal only to ~1e-7)
        "train.num_threads=1"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("outre")


def _runner(root: Path, *overrides: str) -> StageRunner:
    cfg = PipelineConfig.load(overrides=[*BASE, *overrides], dataset="tiny")
    return StageRunner(cfg, StrataPaths.at(root).store())


def _prepared(root: Path, staleness: int) -> tuple[StageRunner, SampleSet, np.ndarray, np.ndarray]:
    runner = _runner(root, f"plan.staleness={staleness}")
    runner.run_until("pack")
    reorder = runner.artifact("reorder")
    samples = SampleSet(runner.artifact("sample").path)
    return runner, samples, np.load(reorder.file("features.npy")), np.asarray(reorder.array("labels.npy"))


def _source(runner: StageRunner, samples: SampleSet, record: bool = False) -> PrunedFeatures:
    pack = runner.artifact("pack")
    return PrunedFeatures(pack.path, samples, runner.artifact("reorder").file("features.npy"),
                          staleness=int(pack.stats["staleness"]), record_pulls=record)


def test_the_default_staleness_is_at_most_an_epoch_of_batches(root: Path) -> None:
    runner = _runner(root)  # plan.staleness left at 0 (auto)
    runner.run_until("pack")
    per_epoch = len(SampleSet(runner.artifact("sample").path).batch_ids("train", 0))
    assert 1 < per_epoch < 100  # tiny at 64 seeds a batch: the epoch, not the paper's 100, bounds it
    assert runner.artifact("plan").stats["staleness"] == runner.artifact("pack").stats["staleness"] == per_epoch


def test_staleness_one_trains_exactly_like_no_cache(root: Path) -> None:
    runner, samples, features, labels = _prepared(root, 1)
    assert runner.artifact("pack").stats["pulls"] == 0 and runner.artifact("pack").stats["pushes"] > 0
    source = open_features(runner.cfg, "outre", runner.artifact("reorder"), runner.artifact("pack"), samples, "cpu")
    got = train(runner.cfg.train, samples, source, labels)
    want = train(runner.cfg.train, samples, InMemoryFeatures(features), labels)
    assert source.train_hook.cache.pushes > 0  # the split forward and the exchange really ran
    assert got.losses == want.losses and got.val_accs == want.val_accs
    for k, v in want.best_state_dict.items():
        assert torch.equal(got.best_state_dict[k], v), k


def test_the_trainer_pulls_exactly_what_the_fsm_predicted(root: Path) -> None:
    runner, samples, _, labels = _prepared(root, 4)
    pack = runner.artifact("pack")
    assert pack.stats["pulls"] > 0
    source = _source(runner, samples, record=True)
    train(runner.cfg.train, samples, source, labels)  # train.epochs == sample.epochs: one pass over the trace
    pruned = PrunedSamples(pack.path, samples)
    predicted = [np.sort(pruned.lists(b).pull_slot) for b in training_order(samples)]
    cache = source.train_hook.cache
    assert len(cache.online_pulls) == len(predicted)
    for i, (got, want) in enumerate(zip(cache.online_pulls, predicted, strict=True)):
        assert np.array_equal(got, want), i
    assert cache.pulls == pack.stats["pulls"] and cache.pushes == pack.stats["pushes"]


def test_pruned_batches_read_exactly_the_in_memory_rows(root: Path) -> None:
    runner, samples, features, _ = _prepared(root, 4)
    source = _source(runner, samples)
    pruned = PrunedSamples(runner.artifact("pack").path, samples)
    skipped = 0
    for b in training_order(samples):
        batch = pruned.batch(b)
        assert isinstance(batch, PrunedBatch)
        x = source.load(batch).numpy()
        read = np.ones(len(batch.nodes), dtype=bool)
        read[batch.skip] = False
        assert np.array_equal(x[read], features[batch.nodes[read]]), b
        assert not x[~read].any()
        skipped += int((~read).sum())
        assert len(batch.nodes) <= samples.node_range(b)[1] - samples.node_range(b)[0]
    served = sum(source.rows_by_tier.values())
    assert served == runner.artifact("pack").stats["train_rows_read"] and skipped > 0
    assert runner.artifact("pack").stats["train_rows_read"] < runner.artifact("pack").stats["train_rows_sampled"]
    val = samples.batch_ids("val")[0]
    assert np.array_equal(source.load(pruned.batch(val)).numpy(), features[samples.batch(val).nodes])


def test_stale_history_trains_close_to_exact(root: Path) -> None:
    exact_runner, samples, _, labels = _prepared(root, 1)
    stale_runner, _, _, _ = _prepared(root, 4)
    assert stale_runner.artifact("pack").stats["pruned_fraction"] > 0.1
    cfg = dataclasses.replace(exact_runner.cfg.train, epochs=9)  # past the sampled epochs: the trace replays
    exact = train(cfg, samples, _source(exact_runner, samples), labels)
    stale = train(cfg, samples, _source(stale_runner, samples), labels)
    assert exact.test_acc > 0.8
    assert abs(stale.test_acc - exact.test_acc) < 0.03, (stale.test_acc, exact.test_acc)


def test_a_pull_without_a_fresh_entry_is_refused() -> None:
    cache = HistoricalCache(3, staleness=2)
    h = torch.randn(5, 4)
    empty = np.empty(0, np.int64)
    with pytest.raises(ValueError, match="expected candidate slot 1 pushed within the last 2 iterations"):
        cache.exchange(h, HistoryLists(np.asarray([0]), np.asarray([1]), empty, empty))
    cache = HistoricalCache(3, staleness=2)
    out = cache.exchange(h, HistoryLists(empty, empty, np.asarray([2]), np.asarray([1])))
    assert torch.equal(out, h)
    h2 = torch.randn(5, 4, requires_grad=True)
    out = cache.exchange(h2, HistoryLists(np.asarray([0]), np.asarray([1]), empty, empty))
    assert torch.equal(out[0], h[2]) and torch.equal(out[1:], h2[1:])
    out.sum().backward()
    assert h2.grad is not None and h2.grad[0].abs().sum() == 0 and bool((h2.grad[1:] == 1).all())
