"""Mid-epoch checkpoints: a run interrupted inside an epoch (an exception from the step hook, or SIGKILL of the
process) and resumed ends with exactly the weights, optimizer state and history of an uninterrupted run."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer.checkpoint import CheckpointUnverified, load_checkpoint, save_checkpoint
from trainer.config import TrainConfig
from trainer.features import InMemoryFeatures
from trainer.train import TrainResult, train

# 9 train batches per epoch (144 seeds / 16); one thread, as in the SIGKILL subprocess
CFG = TrainConfig(hidden_dim=16, epochs=3, seed=3, patience=2, num_threads=1, device="cpu", deterministic=True)
REPO = Path(__file__).resolve().parents[2]


class Interrupt(Exception):
    """Raised by the step hook: the run dies right there."""


def _run(dataset, cfg: TrainConfig, on_step=None) -> TrainResult:
    return train(cfg, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels, on_step=on_step)


def _assert_same_end(full_ckpt: Path, full: TrainResult, resumed_ckpt: Path, resumed: TrainResult) -> None:
    """Same history, best weights, final weights and optimizer state (bit for bit)."""
    assert resumed.losses == full.losses and resumed.train_acc == full.train_acc
    np.testing.assert_array_equal(resumed.val_accs, full.val_accs)  # nan where not evaluated
    assert (resumed.best_epoch, resumed.stopped_epoch, resumed.test_acc) == (full.best_epoch, full.stopped_epoch,
                                                                             full.test_acc)
    for k, v in full.best_state_dict.items():
        assert torch.equal(resumed.best_state_dict[k], v), k
    a, b = load_checkpoint(full_ckpt), load_checkpoint(resumed_ckpt)
    assert (a["epoch"], a["batch"], a["step"]) == (b["epoch"], b["batch"], b["step"])
    for k, v in a["model"].items():
        assert torch.equal(b["model"][k], v), k
    for i, slot in a["optimizer"]["state"].items():
        for k, v in slot.items():
            assert torch.equal(b["optimizer"]["state"][i][k], v), (i, k)
    assert torch.equal(a["rng_state"], b["rng_state"])


@pytest.mark.parametrize(("stop_at", "position"), [((1, 7), (0, 7)), ((1, 6), (0, 3)), ((0, 5), (-1, 4))])
def test_resume_after_an_exception_mid_epoch_equals_an_uninterrupted_run(
        dataset, tmp_path: Path, stop_at: tuple[int, int], position: tuple[int, int]) -> None:
    full_path, path = tmp_path / "full.pt", tmp_path / "ckpt.pt"
    full = _run(dataset, dataclasses.replace(CFG, checkpoint_path=str(full_path)))
    cfg = dataclasses.replace(CFG, checkpoint_path=str(path), checkpoint_every=4)

    def die(epoch: int, batch: int) -> None:
        if (epoch, batch) == stop_at:
            raise Interrupt

    with pytest.raises(Interrupt):
        _run(dataset, cfg, on_step=die)
    ckpt = load_checkpoint(path)
    # steps 4, 8 (epoch 0), the epoch end (9), then 12 and 16 = batches 3 and 7 of epoch 1
    assert (ckpt["epoch"], ckpt["batch"]) == position and ckpt["progress"]["batch"] == position[1]
    resumed = _run(dataset, dataclasses.replace(cfg, resume=str(path)))
    _assert_same_end(full_path, full, path, resumed)


_CHILD = """
import sys, os, signal, numpy as np
sys.path.insert(0, {repo!r})
from storage_kernels.sampleset import SampleSet
from trainer.config import TrainConfig
from trainer.features import InMemoryFeatures
from trainer.train import train

cfg = TrainConfig.from_dict({cfg!r})

def kill_after_checkpoint(epoch, batch):
    if (epoch, batch) == (1, 6) and os.path.exists(cfg.checkpoint_path):
        print("killing", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no finally blocks: as a crash or an OOM kill

train(cfg, SampleSet({samples!r}), InMemoryFeatures(np.load({features!r})), np.load({labels!r}),
      on_step=kill_after_checkpoint)
"""


def test_resume_after_sigkill_mid_epoch_equals_an_uninterrupted_run(dataset, tmp_path: Path) -> None:
    full_path, path = tmp_path / "full.pt", tmp_path / "ckpt.pt"
    full = _run(dataset, dataclasses.replace(CFG, checkpoint_path=str(full_path)))
    cfg = dataclasses.replace(CFG, checkpoint_path=str(path), checkpoint_every=5)  # steps 5, 9 (end), 10, 15
    np.save(tmp_path / "features.npy", dataset.features)
    np.save(tmp_path / "labels.npy", dataset.labels)
    code = _CHILD.format(repo=str(REPO), cfg=cfg.to_dict(), samples=str(dataset.samples.path),
                         features=str(tmp_path / "features.npy"), labels=str(tmp_path / "labels.npy"))
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert "killing" in child.stdout
    ckpt = load_checkpoint(path)
    assert (ckpt["epoch"], ckpt["batch"], ckpt["step"]) == (0, 6, 15)  # mid-epoch 1
    assert not path.with_name(path.name + ".tmp").exists()
    resumed = _run(dataset, dataclasses.replace(cfg, resume=str(path)))
    _assert_same_end(full_path, full, path, resumed)


def test_checkpoint_every_needs_a_path_and_reaches_the_pipeline_config(dataset) -> None:
    with pytest.raises(ValueError, match="'TrainConfig.checkpoint_every' expected a checkpoint_path"):
        _run(dataset, TrainConfig(checkpoint_every=3, device="cpu"))  # the pipeline supplies its own path
    with pytest.raises(ValueError, match="'TrainConfig.checkpoint_every' expected a value in range"):
        TrainConfig(checkpoint_every=-1, checkpoint_path="x.pt")
    from pipelines.config import PipelineConfig

    cfg = PipelineConfig.load(overrides=["train.checkpoint_every=7", "train.checkpoint_path=/tmp/c.pt",
                                         "train.patience=4"])
    assert (cfg.train.checkpoint_every, cfg.train.patience) == (7, 4)


def test_foreign_and_truncated_files_are_rejected_and_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"not a torch file")
    with pytest.raises(CheckpointUnverified, match="expected a checksum in ckpt.pt.digest.json .got no such file"):
        load_checkpoint(path)  # nothing without a digest is read
    with pytest.raises(ValueError, match="expected a strata-checkpoint-v2 checkpoint .got a file"):
        load_checkpoint(path, verify=False)
    torch.save([1, 2], path)
    with pytest.raises(ValueError, match="expected a strata-checkpoint-v2 checkpoint .got 'list'"):
        load_checkpoint(path, verify=False)
    save_checkpoint(path, {"format": "strata-checkpoint-v2", "x": torch.ones(2)})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointUnverified, match="expected checksum blake2b:"):
        load_checkpoint(path)
    with pytest.raises(ValueError, match="cannot read"):
        load_checkpoint(path, verify=False)
    save_checkpoint(path, {"format": "strata-checkpoint-v2", "x": torch.ones(2)})
    with pytest.raises(Exception):  # noqa: B017 -- torch.save refuses a lambda; which error is torch's business
        save_checkpoint(path, {"format": "strata-checkpoint-v2", "f": lambda: 0})
    assert torch.equal(load_checkpoint(path)["x"], torch.ones(2))  # the previous checkpoint is intact, and verifies
    assert not path.with_name(path.name + ".tmp").exists()
