"""Checkpoint files: the format name, an atomic writer and a weights-only reader.

A checkpoint is a plain dict of tensors and primitives (``trainer.train.TrainState.to_checkpoint``), written
with ``torch.save`` to a temporary file that is flushed to disk and renamed into place, and read back with
``torch.load(weights_only=True)``: nothing is ever unpickled, and a reader (or a resume after a crash) never
sees a half-written file.

Format history: ``strata-checkpoint-v1`` saved only at epoch ends; ``strata-checkpoint-v2`` adds the position
inside an epoch (``batch``, the epoch's running sums), the global step and the early-stopping state. A v1
file is rejected with the reason (its position cannot be reconstructed).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

__all__ = ["CHECKPOINT_FORMAT", "load_checkpoint", "save_checkpoint"]

CHECKPOINT_FORMAT = "strata-checkpoint-v2"
_OLD_FORMATS = {"strata-checkpoint-v1": "written by a Strata before mid-epoch checkpoints; train again"}


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint dict (weights only: no unpickling of arbitrary objects).

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` naming the file for anything that is
    not a ``CHECKPOINT_FORMAT`` dict (an older format, another program's file, a truncated file).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"'checkpoint' expected a file at {path} (got no such file)")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # not a torch file, truncated, or holding objects weights_only refuses
        raise ValueError(f"'{path}' expected a {CHECKPOINT_FORMAT} checkpoint "
                         f"(got a file torch.load(weights_only=True) cannot read: {type(e).__name__})") from e
    got = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
    if got != CHECKPOINT_FORMAT:
        why = f": {_OLD_FORMATS[got]}" if isinstance(got, str) and got in _OLD_FORMATS else ""
        raise ValueError(f"'{path}' expected a {CHECKPOINT_FORMAT} checkpoint (got {got!r}{why})")
    return ckpt


def save_checkpoint(path: str | Path, ckpt: dict[str, Any]) -> None:
    """Write a checkpoint dict atomically: a temporary file, flushed to disk, renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(ckpt, f)
            f.flush()
            os.fsync(f.fileno())  # the rename must not reach the disk before the data (power loss)
    except BaseException:
        tmp.unlink(missing_ok=True)  # the previous checkpoint, if any, stays as it was
        raise
    os.replace(tmp, path)  # readers never see a half-written checkpoint
