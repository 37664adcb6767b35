"""TrainState and the phase functions of train(): checkpoint round trip, v1 checkpoints, evaluate, epoch stats."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from trainer.checkpoint import save_checkpoint
from trainer.config import TrainConfig
from trainer.features import InMemoryFeatures
from trainer.loader import BatchLoader
from trainer.models import build_model
from trainer.train import EpochStats, TrainState, eval_batch_ids, evaluate, load_checkpoint, train

ARGS = {"model": "graphsage", "in_dim": 12, "hidden_dim": 8, "out_dim": 4, "num_layers": 2, "dropout": 0.5}
CFG = TrainConfig(hidden_dim=8, epochs=3, seed=5)


def _state(seed: int) -> TrainState:
    torch.manual_seed(seed)
    model = build_model(**ARGS)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    return TrainState(model, optimizer, ARGS, {"seed": seed}, torch.device("cpu"))


def test_checkpoint_round_trip_restores_every_field(tmp_path: Path) -> None:
    state = _state(0)
    stats = EpochStats(loss=1.5, train_acc=0.25, epoch_s=0.1, bytes_read=4096, read_requests=2,
                       rows={"gpu": 1, "cpu": 2, "packed": 3, "file": 4}, timers={"read_s": 0.5})
    state.record_epoch(0, stats, val_acc=0.5)
    state.record_best(0.5, 0.4, 0)
    state.step, state.stopped_epoch = 7, 3
    assert state.progress is not None and state.progress.batch == 0  # a finished epoch starts the next afresh
    state.progress.batch, state.progress.bytes_read, state.progress.rows = 2, 512, {"file": 9}
    state.progress.loss_sum += 0.75
    state.progress.correct += 5
    state.progress.seen += 8
    save_checkpoint(tmp_path / "ckpt.pt", state.to_checkpoint())
    draws = torch.rand(3)  # what dropout would draw next

    other = _state(1)
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    restored = TrainState.from_checkpoint(ckpt, other.model, other.optimizer, state.config, state.device)
    assert restored.epoch == 0 and restored.history == state.history and restored.best == state.best
    rows = {"gpu": 1, "cpu": 2, "packed": 3, "file": 4, "disk_cache": 0}
    assert restored.counters == {"bytes_read": 4096, "read_requests": 2, "rows": rows}
    assert restored.model_args == ARGS
    assert (restored.step, restored.stopped_epoch) == (7, 3)
    assert restored.progress is not None and restored.progress.to_dict() == state.progress.to_dict()
    for k, v in state.model.state_dict().items():
        assert torch.equal(restored.model.state_dict()[k], v) and torch.equal(restored.best_state[k], v)
    restored.restore_rng()
    assert torch.equal(torch.rand(3), draws)
    assert stats.cache_hit_rate == pytest.approx(0.3) and stats.metrics()["read_s"] == 0.5


def test_fresh_state_starts_from_the_initial_weights() -> None:
    state = _state(2)
    assert state.epoch == -1 and state.best["epoch"] == -1 and state.history["losses"] == []
    for k, v in state.model.state_dict().items():
        assert torch.equal(state.best_state[k], v) and state.best_state[k].device.type == "cpu"
    state.restore_rng()  # never checkpointed: nothing to restore


def test_resume_rejects_v1_checkpoints_with_the_reason(dataset, tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    train(dataclasses.replace(CFG, epochs=1, checkpoint_path=str(path)), dataset.samples,
          InMemoryFeatures(dataset.features), dataset.labels)
    ckpt = torch.load(path, weights_only=True)
    ckpt["format"] = "strata-checkpoint-v1"  # as written before mid-epoch checkpoints (no position inside it)
    save_checkpoint(path, ckpt)  # with its digest: refused for its format, not its bytes
    with pytest.raises(ValueError, match="expected a strata-checkpoint-v2 checkpoint .got 'strata-checkpoint-v1': "
                                         "written by a Strata before mid-epoch checkpoints"):
        train(dataclasses.replace(CFG, resume=str(path)), dataset.samples, InMemoryFeatures(dataset.features),
              dataset.labels)


class AlwaysZero(nn.Module):
    """Predicts class 0 for every seed."""

    def forward(self, x: torch.Tensor, blocks) -> torch.Tensor:
        logits = torch.zeros(blocks[-1].num_dst, 3)  # (num_seeds, 3)
        logits[:, 0] = 1.0
        return logits


def test_evaluate_counts_labelled_seeds_only(dataset) -> None:
    labels = dataset.labels.copy()
    labels[::3] = -1  # unlabelled seeds do not count
    ids = eval_batch_ids(dataset.samples, "val")
    seeds = np.concatenate([dataset.samples.batch(b).seeds for b in ids])
    want = np.mean(labels[seeds][labels[seeds] >= 0] == 0)
    model = AlwaysZero()
    loader = BatchLoader(dataset.samples, InMemoryFeatures(dataset.features), ids, labels)
    assert evaluate(model, loader, torch.device("cpu")) == pytest.approx(want)
    assert model.training  # train mode restored
    all_unlabelled = np.full_like(labels, -1)
    loader = BatchLoader(dataset.samples, InMemoryFeatures(dataset.features), ids, all_unlabelled)
    assert np.isnan(evaluate(model, loader, torch.device("cpu")))
