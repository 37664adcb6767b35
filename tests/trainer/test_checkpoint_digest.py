"""Checkpoint digests: a flipped bit inside a tensor of a checkpoint (which ``torch.load`` reads without complaint)
is refused with the file and both digests, as is a checkpoint without a digest; a crash between writing the
digest file and renaming the checkpoint leaves a pair that verifies; an explicit ``resume`` of a corrupted
checkpoint fails before training."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
import zipfile
from pathlib import Path

import pytest
import torch

from storage_kernels.arrays import file_checksum
from trainer.checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointUnverified,
    digest_path,
    load_checkpoint,
    save_checkpoint,
    verify_checkpoint,
)
from trainer.config import TrainConfig
from trainer.features import InMemoryFeatures
from trainer.train import train


def tensor_bytes(path: Path) -> tuple[int, int]:
    """``(offset, size)`` of the largest tensor's bytes inside the torch zip file at ``path`` (stored, not
    compressed: the offset is past the entry's local header)."""
    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    assert info.compress_type == zipfile.ZIP_STORED
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_len + extra_len, info.file_size


def flip_tensor_bit(path: Path) -> None:
    """Flip one bit in the middle of the largest tensor of the checkpoint at ``path``."""
    offset, size = tensor_bytes(path)
    with open(path, "r+b") as f:
        f.seek(offset + size // 2)
        byte = f.read(1)
        f.seek(offset + size // 2)
        f.write(bytes([byte[0] ^ 0x04]))


def _ckpt(value: float) -> dict:
    return {"format": CHECKPOINT_FORMAT, "w": torch.full((256,), value), "step": 3}


def test_a_flipped_bit_in_a_tensor_is_refused_naming_the_file_and_both_digests(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, _ckpt(1.0))
    record = json.loads(digest_path(path).read_text())
    assert record["digests"] == [file_checksum(path)] and verify_checkpoint(path) == file_checksum(path)
    flip_tensor_bit(path)
    loaded = load_checkpoint(path, verify=False)  # what torch alone makes of it: a silently different tensor
    assert not torch.equal(loaded["w"], torch.full((256,), 1.0))
    with pytest.raises(CheckpointUnverified) as info:
        load_checkpoint(path)
    actual = file_checksum(path)
    assert str(info.value) == f"'{path}' expected checksum {record['digests'][0]} (got {actual})"
    assert (info.value.expected, info.value.actual) == (record["digests"][0], actual)


def test_a_checkpoint_without_a_readable_digest_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, _ckpt(1.0))
    digest_path(path).write_text("{not json")
    with pytest.raises(CheckpointUnverified, match="got an unreadable file: JSONDecodeError; the file's checksum is"):
        load_checkpoint(path)
    digest_path(path).unlink()
    with pytest.raises(CheckpointUnverified, match="expected a checksum in checkpoint.pt.digest.json .got no such"):
        load_checkpoint(path)
    assert load_checkpoint(path, verify=False)["step"] == 3


def test_either_side_of_the_last_rename_verifies(tmp_path: Path) -> None:
    """The digest file is renamed before the checkpoint: a crash between the two leaves the older checkpoint
    under the newer digest file, which still lists the older digest."""
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, _ckpt(1.0))
    older = path.read_bytes()
    save_checkpoint(path, _ckpt(2.0))
    older_digest = "blake2b:" + hashlib.blake2b(older).hexdigest()
    assert json.loads(digest_path(path).read_text())["digests"] == [file_checksum(path), older_digest]
    path.write_bytes(older)  # as a crash after the digest file's rename and before the checkpoint's leaves it
    assert torch.equal(load_checkpoint(path)["w"], torch.full((256,), 1.0))
    for value in (3.0, 4.0, 5.0):
        save_checkpoint(path, _ckpt(value))
    assert len(json.loads(digest_path(path).read_text())["digests"]) == 3  # bounded
    assert not list(tmp_path.glob("*.tmp"))


def test_an_explicit_resume_of_a_corrupted_checkpoint_fails_before_training(dataset, tmp_path: Path) -> None:
    cfg = TrainConfig(hidden_dim=8, epochs=2, seed=1, num_threads=1, device="cpu",
                      checkpoint_path=str(tmp_path / "ckpt.pt"))
    train(cfg, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels)
    flip_tensor_bit(tmp_path / "ckpt.pt")
    with pytest.raises(CheckpointUnverified, match="ckpt.pt' expected checksum blake2b:"):
        train(dataclasses.replace(cfg, resume=cfg.checkpoint_path), dataset.samples,
              InMemoryFeatures(dataset.features), dataset.labels)
