"""A resume checkpoint is resumed only when its bytes match its digest: the train stage moves a checkpoint with
a flipped bit (or without a digest) aside, says so, trains from scratch and ends with an uninterrupted run's
weights.

The interruption is kill-free: the stage's progress callback raises after the first epoch, which leaves the
resume dir as a kill would (``tests/pipelines/cli/test_reliability_cli.py`` kills a real ``strata run``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.runner import StageRunner
from pipelines.stages.train import resumable
from storage_kernels.arrays import file_checksum
from storage_kernels.integrity import QUARANTINE_NAME
from storage_kernels.store import ArtifactStore
from tests.trainer.test_checkpoint_digest import flip_tensor_bit
from trainer.checkpoint import CHECKPOINT_FORMAT, digest_path, load_checkpoint, save_checkpoint
from trainer.config import TrainConfig

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

VERSION = "0123456789ab"


def _checkpoint(store: ArtifactStore) -> Path:
    path = store.resume_dir("ds", "train", VERSION) / "checkpoint.pt"
    save_checkpoint(path, {"format": CHECKPOINT_FORMAT, "w": torch.arange(512.0), "step": 7})
    return path


def test_an_intact_checkpoint_is_resumed(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    path = _checkpoint(store)
    cfg, resumed, refused = resumable(store, "ds", VERSION, TrainConfig())
    assert (resumed, refused, cfg.resume, cfg.checkpoint_path) == (str(path), "", str(path), str(path))


@pytest.mark.parametrize("damage", ["flipped bit", "no digest"])
def test_a_damaged_checkpoint_is_moved_aside_and_not_resumed(tmp_path: Path, damage: str) -> None:
    store = ArtifactStore(tmp_path)
    path = _checkpoint(store)
    expected = json.loads(digest_path(path).read_text())["digests"][0]
    if damage == "flipped bit":
        flip_tensor_bit(path)
    else:
        digest_path(path).unlink()
    actual, damaged = file_checksum(path), path.read_bytes()
    cfg, resumed, refused = resumable(store, "ds", VERSION, TrainConfig())
    assert (resumed, cfg.resume, cfg.checkpoint_path) == ("", "", str(path))  # checkpoints anew, from scratch
    why = (f"expected checksum {expected} (got {actual})" if damage == "flipped bit"
           else f"expected a checksum in checkpoint.pt.digest.json (got no such file: written before checkpoint "
                f"digests, or not by Strata; the file's checksum is {actual})")
    assert refused.startswith(f"'{path}' {why}: not resumed, trained from scratch (moved to ")
    assert not path.parent.exists()
    [moved] = (tmp_path / QUARANTINE_NAME).rglob("checkpoint.pt")
    assert moved.read_bytes() == damaged and str(moved.parent) in refused
    assert "resume checkpoint refused" in (moved.parent / "QUARANTINE.json").read_text()


SETS = ["sample.epochs=1", "sample.batch_size=128", "train.epochs=3", "train.checkpoint_every=5",
        "train.patience=0", "train.device=cpu", "train.num_threads=1"]
CFG = PipelineConfig.load(overrides=SETS, dataset="tiny")


class Interrupted(Exception):
    """Raised by the progress callback: the stage dies there, its resume checkpoint left behind."""


def _stop_after_the_first_epoch(description: str, done: int, total: int) -> None:
    if description == "train: epochs" and done == 2:  # epoch 1 trained, its end-of-epoch checkpoint not written
        raise Interrupted


def test_a_flipped_bit_in_the_resume_checkpoint_restarts_training_to_an_uninterrupted_runs_weights(
        tmp_path: Path) -> None:
    from trainer.model_versions import registry_client

    full = StageRunner(CFG, StrataPaths.at(tmp_path / "full").store()).run_until("train", checks=False)[-1]
    paths = StrataPaths.at(tmp_path / "root")
    store = paths.store()
    runner = StageRunner(CFG, store)
    runner.run_until("pack", checks=False)
    with pytest.raises(Interrupted):
        runner.result("train", progress=_stop_after_the_first_epoch)
    [path] = (store.tmp_dir / "resume").glob("tiny-train-*/checkpoint.pt")
    assert load_checkpoint(path)["step"] >= 5  # a mid-training checkpoint, intact so far
    expected = json.loads(digest_path(path).read_text())["digests"][0]
    flip_tensor_bit(path)
    load_checkpoint(path, verify=False)  # torch alone would resume from it
    actual = file_checksum(path)

    again = StageRunner(CFG, store).result("train")
    assert not again.reused
    tags = registry_client(paths.mlflow_tracking_uri).get_run(again.artifact.stats["mlflow_run_id"]).data.tags
    assert "strata.resumed_from" not in tags
    line = f"'{path}' expected checksum {expected} (got {actual}): not resumed, trained from scratch (moved to "
    assert tags["strata.resume_refused"].startswith(line)
    assert again.artifact.stats["warnings"][0].startswith(f"resume checkpoint {line}")  # the run summary's warning
    assert any(note.startswith(f"resume checkpoint {line}") for note in again.notes)  # the Dagster log
    assert not path.parent.exists()  # quarantined, and the new run's own checkpoint removed once published
    assert len(list((paths.root / QUARANTINE_NAME).rglob("checkpoint.pt"))) == 1
    trained = torch.load(again.artifact.file("state_dict.pt"), weights_only=True)
    reference = torch.load(full.artifact.file("state_dict.pt"), weights_only=True)
    assert trained.keys() == reference.keys()
    for name, tensor in reference.items():
        assert torch.equal(trained[name], tensor), name
