"""Early stopping on validation accuracy: when it stops, which weights it keeps, and that it survives a resume."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer.config import TrainConfig
from trainer.features import InMemoryFeatures
from trainer.loader import BatchLoader
from trainer.models import build_model
from trainer.train import TrainResult, eval_batch_ids, evaluate, load_checkpoint, train

CFG = TrainConfig(hidden_dim=16, epochs=40, seed=1, patience=3, min_delta=0.0, lr=0.05)


def _run(dataset, cfg: TrainConfig) -> TrainResult:
    return train(cfg, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels)


def _first_stop(val_accs: list[float], patience: int, min_delta: float) -> tuple[int, int]:
    """(stopped epoch, best epoch) the rule gives for a validation curve (nan = not evaluated)."""
    best, best_epoch = -1.0, -1
    for epoch, v in enumerate(val_accs):
        if math.isnan(v):
            continue
        if v > best + min_delta:
            best, best_epoch = v, epoch
        if epoch - best_epoch >= patience:
            return epoch, best_epoch
    return len(val_accs) - 1, best_epoch


def test_stops_after_patience_epochs_without_improvement_and_keeps_the_best_weights(dataset, tmp_path: Path) -> None:
    r = _run(dataset, CFG)
    assert r.early_stopped and r.stopped_epoch < CFG.epochs - 1 and len(r.losses) == r.stopped_epoch + 1
    assert r.stopped_epoch - r.best_epoch == CFG.patience
    assert (r.stopped_epoch, r.best_epoch) == _first_stop(r.val_accs, CFG.patience, 0.0)
    assert r.val_acc == max(r.val_accs) == r.val_accs[r.best_epoch]
    assert r.val_accs.index(r.val_acc) == r.best_epoch  # the first epoch reaching the best counts
    # the returned weights are the best epoch's: they reproduce its validation and the reported test accuracy
    model = build_model(**r.model_args)
    model.load_state_dict(r.best_state_dict)
    source = InMemoryFeatures(dataset.features)
    for split, want in (("val", r.val_acc), ("test", r.test_acc)):
        loader = BatchLoader(dataset.samples, source, eval_batch_ids(dataset.samples, split), dataset.labels)
        assert evaluate(model, loader, torch.device("cpu")) == want
    # and they are the last weights of an identical run cut at the best epoch
    path = tmp_path / "cut.pt"
    cut = _run(dataset, dataclasses.replace(CFG, epochs=r.best_epoch + 1, patience=0, checkpoint_path=str(path)))
    assert cut.losses == r.losses[: r.best_epoch + 1]
    for k, v in load_checkpoint(path)["model"].items():
        assert torch.equal(v, r.best_state_dict[k])


def test_patience_zero_runs_every_epoch_and_min_delta_ignores_small_gains(dataset) -> None:
    cfg = dataclasses.replace(CFG, epochs=6, patience=0)
    r = _run(dataset, cfg)
    assert not r.early_stopped and r.stopped_epoch == 5 and len(r.losses) == 6
    big = _run(dataset, dataclasses.replace(CFG, min_delta=0.9))  # no gain is that large: the first eval is best
    assert (big.best_epoch, big.stopped_epoch) == (0, CFG.patience) and big.early_stopped


def test_stopping_is_decided_only_at_evaluations(dataset) -> None:
    cfg = dataclasses.replace(CFG, eval_every=2)
    r = _run(dataset, cfg)
    assert all(math.isnan(v) for v in r.val_accs[0::2])  # epochs 0, 2, 4... are not evaluated
    assert (r.stopped_epoch + 1) % 2 == 0 and (r.best_epoch + 1) % 2 == 0
    assert (r.stopped_epoch, r.best_epoch) == _first_stop(r.val_accs, cfg.patience, 0.0)


def test_a_run_resumed_after_it_stopped_does_not_train_again(dataset, tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    r = _run(dataset, dataclasses.replace(CFG, checkpoint_path=str(path)))
    assert r.early_stopped
    ckpt = load_checkpoint(path)
    assert ckpt["early_stopping"]["stopped_epoch"] == r.stopped_epoch == ckpt["epoch"]
    again = _run(dataset, dataclasses.replace(CFG, checkpoint_path=str(path), resume=str(path)))
    assert again.losses == r.losses and again.stopped_epoch == r.stopped_epoch and again.test_acc == r.test_acc
    for k, v in r.best_state_dict.items():
        assert torch.equal(again.best_state_dict[k], v)


def test_early_stopping_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="'TrainConfig.patience' expected"):
        TrainConfig(patience=-1)
    with pytest.raises(ValueError, match="'TrainConfig.min_delta' expected"):
        TrainConfig(min_delta=1.0)
    assert TrainConfig().patience > 0 and TrainConfig().epochs >= 100  # a first run converges by default
    assert np.isfinite(TrainConfig().min_delta)
