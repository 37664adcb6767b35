"""train(): determinism, out-of-core equivalence, checkpoint resume, sample reuse."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainer.conftest import requires_cuda
from trainer.config import TrainConfig
from trainer.features import InMemoryFeatures
from trainer.train import compute_threads, load_checkpoint, train

CFG = TrainConfig(hidden_dim=16, dropout=0.5, lr=0.01, epochs=3, seed=7, prefetch=2)


class RecordingSource(InMemoryFeatures):
    """InMemoryFeatures that remembers which batches it served."""

    def __init__(self, features: np.ndarray) -> None:
        super().__init__(features)
        self.served: list[int] = []

    def read(self, batch):  # the first stage of every load, pipelined or not
        self.served.append(batch.batch)
        return super().read(batch)


def test_training_is_deterministic_and_learns(dataset) -> None:
    a = train(CFG, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels)
    b = train(CFG, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels)
    assert a.losses == b.losses and a.val_accs == b.val_accs
    for k, v in a.best_state_dict.items():
        assert torch.equal(v, b.best_state_dict[k])
    assert len(a.losses) == len(a.epoch_s) == CFG.epochs
    assert a.losses[-1] < a.losses[0]
    assert a.val_acc > 1.5 / dataset.num_classes  # well above chance on the homophilous graph
    assert 0.0 <= a.test_acc <= 1.0 and 0 <= a.best_epoch < CFG.epochs
    assert a.model_args["num_layers"] == dataset.samples.num_layers
    assert {"read_s", "graph_s", "wait_s", "eval_s"} <= set(a.timers)
    assert not torch.are_deterministic_algorithms_enabled()  # the global mode is restored


def test_packed_training_equals_in_memory_training(dataset, packed_source) -> None:
    cfg = dataclasses.replace(CFG, epochs=2)
    in_memory = train(cfg, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels)
    out_of_core = train(cfg, dataset.samples, packed_source, dataset.labels)
    np.testing.assert_allclose(out_of_core.losses, in_memory.losses, rtol=0, atol=1e-6)
    assert out_of_core.val_acc == in_memory.val_acc and out_of_core.test_acc == in_memory.test_acc
    assert out_of_core.bytes_read > 0 and 0.0 < out_of_core.cache_hit_rate < 1.0
    assert in_memory.bytes_read == 0 and in_memory.cache_hit_rate == 1.0


def test_a_loader_that_reads_the_disk_gets_a_core_on_the_cpu(dataset, packed_source) -> None:
    cores = torch.get_num_threads()
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    memory = InMemoryFeatures(dataset.features)
    assert compute_threads(0, cpu, False, packed_source) == max(cores - 1, 1)  # reads packed chunks
    assert compute_threads(0, cpu, False, memory) == cores  # no disk: compute keeps every core
    assert compute_threads(0, cpu, True, packed_source) == cores  # sequential: no stage threads to make room for
    assert compute_threads(0, cuda, False, packed_source) == cores  # compute is on the GPU
    assert compute_threads(3, cpu, False, packed_source) == 3  # the user's setting wins
    result = train(dataclasses.replace(CFG, epochs=1), dataset.samples, packed_source, dataset.labels)
    assert result.timers["compute_threads"] == max(cores - 1, 1)
    assert torch.get_num_threads() == cores  # restored


def test_sequential_mode_gives_the_same_losses(dataset) -> None:
    cfg = dataclasses.replace(CFG, epochs=1)
    piped = train(cfg, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels)
    seq = train(dataclasses.replace(cfg, sequential=True), dataset.samples, InMemoryFeatures(dataset.features),
                dataset.labels)
    assert seq.losses == piped.losses


def test_narrow_labels_train_exactly_as_int64_ones(dataset) -> None:
    cfg = dataclasses.replace(CFG, epochs=1)
    wide = train(cfg, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels)
    narrow = train(cfg, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels.astype(np.int8))
    assert narrow.losses == wide.losses and narrow.val_acc == wide.val_acc


def test_epochs_beyond_the_sampled_ones_reuse_samples(dataset) -> None:
    source = RecordingSource(dataset.features)
    cfg = dataclasses.replace(CFG, epochs=3, eval_every=10)  # evaluate only after the last epoch
    train(cfg, dataset.samples, source, dataset.labels)
    samples = dataset.samples
    expected = samples.batch_ids("train", 0) + samples.batch_ids("train", 1) + samples.batch_ids("train", 0)
    assert samples.epochs == 2
    assert source.served[: len(expected)] == expected
    assert source.served[len(expected) :][: len(samples.batch_ids("val", 0))] == samples.batch_ids("val", 0)


def test_resume_continues_exactly(dataset, tmp_path: Path) -> None:
    full = train(dataclasses.replace(CFG, epochs=4), dataset.samples, InMemoryFeatures(dataset.features),
                 dataset.labels)
    ckpt_path = tmp_path / "ckpt.pt"
    first = train(dataclasses.replace(CFG, epochs=2, checkpoint_path=str(ckpt_path)), dataset.samples,
                  InMemoryFeatures(dataset.features), dataset.labels)
    assert first.losses == full.losses[:2]
    ckpt = torch.load(ckpt_path, weights_only=True)  # a plain dict of tensors and primitives
    assert ckpt["epoch"] == 1 and ckpt["config"]["epochs"] == 2 and "optimizer" in ckpt
    resumed = train(dataclasses.replace(CFG, epochs=4, resume=str(ckpt_path)), dataset.samples,
                    InMemoryFeatures(dataset.features), dataset.labels)
    assert resumed.losses == full.losses
    assert resumed.val_acc == full.val_acc and resumed.best_epoch == full.best_epoch
    for k, v in full.best_state_dict.items():
        assert torch.equal(v, resumed.best_state_dict[k])


def test_tracker_and_progress_receive_every_epoch(dataset) -> None:
    class ListTracker:
        def __init__(self) -> None:
            self.params: dict = {}
            self.metrics: list[tuple[int | None, dict]] = []

        def log_params(self, params: dict) -> None:
            self.params.update(params)

        def log_metrics(self, metrics: dict, step: int | None = None) -> None:
            self.metrics.append((step, metrics))

    tracker, calls = ListTracker(), []
    cfg = dataclasses.replace(CFG, epochs=2)
    result = train(cfg, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels, tracker=tracker,
                   progress=lambda epoch, metrics: calls.append(epoch))
    rows = result.rows_by_tier  # the training batches' rows per tier (what the run's tier plot shows)
    assert sum(rows.values()) > 0 and result.cache_hit_rate == pytest.approx(
        (rows.get("gpu", 0) + rows.get("cpu", 0)) / sum(rows.values()))
    # the layer and class counts as resolved from the samples and labels, not the config's 0 ("from the data")
    assert tracker.params == {**cfg.to_dict(), "num_layers": 2, "num_classes": dataset.num_classes}
    assert cfg.num_layers == 0 and cfg.num_classes == 0 and dataset.num_classes > 0
    assert [step for step, _ in tracker.metrics] == [0, 1] and calls == [0, 1]
    assert {"loss", "train_acc", "val_acc", "epoch_s", "bytes_read", "cache_hit_rate"} <= set(tracker.metrics[0][1])


def test_bad_config_and_inputs_are_rejected(dataset, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'TrainConfig.dropout' expected"):
        TrainConfig(dropout=1.0)
    with pytest.raises(ValueError, match="'TrainConfig.num_layers' expected 2"):
        train(dataclasses.replace(CFG, num_layers=3), dataset.samples, InMemoryFeatures(dataset.features),
              dataset.labels)
    with pytest.raises(ValueError, match="'labels' expected a 1-D signed integer array"):
        train(CFG, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels.astype(np.float32))
    with pytest.raises(FileNotFoundError, match="'checkpoint' expected a file"):
        load_checkpoint(tmp_path / "nope.pt")
    torch.save({"format": "other"}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="expected a strata-checkpoint-v2 checkpoint"):
        load_checkpoint(tmp_path / "other.pt", verify=False)  # no digest file: refused before torch.load too
    assert TrainConfig.from_dict(CFG.to_dict()) == CFG
    with pytest.raises(ValueError, match="unknown"):
        TrainConfig.from_dict({"nope": 1})


def test_stage_busy_times_and_the_overlap_figure(dataset) -> None:
    from trainer.train import STAGE_BUSY_TIMERS, overlap

    assert overlap(2.0, {"load_busy_s": 1.0, "assemble_busy_s": 0.5, "compute_busy_s": 0.25}) == 2.0
    assert overlap(1.0, {}) == 0.0
    result = train(dataclasses.replace(CFG, epochs=1), dataset.samples, InMemoryFeatures(dataset.features),
                   dataset.labels)
    assert all(result.timers[k] > 0 for k in STAGE_BUSY_TIMERS)
    slowest = max(result.timers[k] for k in STAGE_BUSY_TIMERS)
    assert result.timers["overlap"] == pytest.approx(result.timers["train_s"] / slowest)
    assert result.timers["overlap"] >= 1.0 - 1e-9  # an epoch cannot be shorter than its slowest stage
    # CPU time: every thread of the process over the passes, split into the loader's stages and the rest
    assert result.timers["cpu_s"] > 0 and result.timers["load_cpu_s"] > 0 and result.timers["assemble_cpu_s"] > 0
    assert result.timers["compute_cpu_s"] == pytest.approx(
        result.timers["cpu_s"] - result.timers["load_cpu_s"] - result.timers["assemble_cpu_s"], abs=1e-6)
    assert "gpu_step_s" not in result.timers and "gpu_step_share" not in result.timers  # CPU: no GPU to time


def test_epoch_timers_sum_to_the_run_timers_and_give_the_steady_epochs_alone(dataset) -> None:
    from trainer.train import STAGE_BUSY_TIMERS, overlap, sum_epoch_timers

    summed = sum_epoch_timers([{"epoch_s": 2.0, "load_busy_s": 1.0, "gpu_step_s": 1.0},
                               {"epoch_s": 1.0, "load_busy_s": 0.5, "gpu_step_s": 0.5, "wait_s": 0.25}])
    assert summed == {"train_s": 3.0, "load_busy_s": 1.5, "gpu_step_s": 1.5, "wait_s": 0.25, "overlap": 2.0,
                      "gpu_step_share": 0.5}  # the ratios from the sums, not summed
    result = train(dataclasses.replace(CFG, epochs=3, patience=0), dataset.samples,
                   InMemoryFeatures(dataset.features), dataset.labels)
    assert len(result.epoch_timers) == 3
    assert [t["epoch_s"] for t in result.epoch_timers] == result.epoch_s
    whole = sum_epoch_timers(result.epoch_timers)
    for k in (*STAGE_BUSY_TIMERS, "train_s", "overlap", "cpu_s", "load_cpu_s"):
        assert result.timers[k] == pytest.approx(whole[k])
    steady = sum_epoch_timers(result.epoch_timers[1:])
    assert steady["train_s"] == pytest.approx(sum(result.epoch_s[1:]))
    assert steady["overlap"] == pytest.approx(steady["train_s"] / max(steady[k] for k in STAGE_BUSY_TIMERS))
    assert steady["overlap"] == overlap(steady["train_s"], steady)


def test_gpu_step_share_is_the_steps_share_of_the_epoch() -> None:
    from trainer.train import EpochStats, gpu_step_share

    assert gpu_step_share(2.0, {"gpu_step_s": 1.5}) == {"gpu_step_share": 0.75}
    assert gpu_step_share(2.0, {}) == {} and gpu_step_share(0.0, {"gpu_step_s": 1.0}) == {}
    stats = EpochStats(loss=1.0, train_acc=0.5, epoch_s=4.0, bytes_read=0, read_requests=0, rows={},
                       timers={"gpu_step_s": 1.0})
    assert stats.metrics()["gpu_step_share"] == 0.25


@pytest.mark.gpu
@requires_cuda
def test_out_of_core_training_on_cuda_equals_in_memory_and_times_the_gpu(dataset, packed_dir) -> None:
    """On CUDA, every tier at once (GPU cache, pinned CPU cache, packed chunks, the feature file for evaluation)
    trains what the in-memory source trains on the same samples, and each run times the GPU's steps."""
    from trainer.features import PackedFeatures

    cfg = dataclasses.replace(CFG, epochs=2, device="cuda", deterministic=True)
    in_memory = train(cfg, dataset.samples, InMemoryFeatures(dataset.features, device="cuda"), dataset.labels)
    with PackedFeatures(packed_dir, dataset.samples, device="cuda", features_path=dataset.features_path) as source:
        out_of_core = train(cfg, dataset.samples, source, dataset.labels)
        assert source.rows_by_tier["gpu"] > 0 and source.rows_by_tier["packed"] > 0
    np.testing.assert_allclose(out_of_core.losses, in_memory.losses, rtol=0, atol=1e-5)
    assert abs(out_of_core.val_acc - in_memory.val_acc) <= 0.01
    assert out_of_core.losses[-1] < out_of_core.losses[0]
    for result in (in_memory, out_of_core):
        assert 0.0 < result.timers["gpu_step_s"] <= result.timers["train_s"] + 1e-3
        assert 0.0 < result.timers["gpu_step_share"] <= 1.0 + 1e-3
