"""Checkpoint files: the format name, an atomic writer, a digest beside each file and a verifying reader.

A checkpoint is a plain dict of tensors and primitives (``trainer.train.TrainState.to_checkpoint``), written
with ``torch.save`` to a temporary file that is flushed to disk and renamed into place, and read back with
``torch.load(weights_only=True)``: nothing is ever unpickled, and a reader (or a resume after a crash) never
sees a half-written file.

Every checkpoint has a digest file beside it, ``<name>.digest.json``: the ``blake2b`` of the file's bytes (as
the artifact store's checksums, :func:`storage_kernels.arrays.file_checksum`). :func:`load_checkpoint` checks
it before ``torch.load`` reads anything and raises :class:`CheckpointUnverified` -- naming the file and both
digests -- when the bytes differ or no digest was written: a flipped bit inside a tensor would otherwise load
without complaint (``torch.load`` checks the zip structure, not the data). The digest file is written (to a
temporary file, flushed, renamed) *before* the checkpoint is renamed into place, and lists the new digest and
the one before it, so a crash between the two renames leaves a pair that still verifies.

Format history: ``strata-checkpoint-v1`` saved only at epoch ends; ``strata-checkpoint-v2`` adds the position
inside an epoch (``batch``, the epoch's running sums), the global step and the early-stopping state. A v1
file is rejected with the reason (its position cannot be reconstructed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from storage_kernels.arrays import file_checksum

__all__ = ["CHECKPOINT_FORMAT", "DIGEST_SUFFIX", "CheckpointUnverified", "digest_path", "load_checkpoint",
           "save_checkpoint", "verify_checkpoint"]

CHECKPOINT_FORMAT = "strata-checkpoint-v2"
_OLD_FORMATS = {"strata-checkpoint-v1": "written by a Strata before mid-epoch checkpoints; train again"}
#: The digest file of ``checkpoint.pt`` is ``checkpoint.pt.digest.json``.
DIGEST_SUFFIX = ".digest.json"
_DIGEST_FORMAT = "strata-checkpoint-digest-v1"
#: Digests a digest file keeps, newest first: the file being written, the one in place, and the one before
#: (a crash between writing the digest file and renaming the checkpoint leaves the older file in place).
_KEEP_DIGESTS = 3


class CheckpointUnverified(ValueError):
    """A checkpoint whose bytes do not match the digest written with it, or that has no digest: never resumed."""

    def __init__(self, path: Path, expected: str, actual: str, missing: str = "") -> None:
        """``expected`` the recorded digest(s); ``missing`` why there is none ('' when there is one)."""
        if missing:
            super().__init__(f"'{path}' expected a checksum in {digest_path(path).name} (got {missing}; the "
                             f"file's checksum is {actual})")
        else:
            super().__init__(f"'{path}' expected checksum {expected} (got {actual})")
        self.path, self.expected, self.actual = path, expected or "none", actual


def digest_path(path: str | Path) -> Path:
    """The digest file of the checkpoint at ``path`` (``<name>.digest.json`` beside it)."""
    path = Path(path)
    return path.with_name(path.name + DIGEST_SUFFIX)


def _recorded(path: Path) -> list[str]:
    """The digests the digest file of ``path`` lists (newest first); ``ValueError`` saying why there are none."""
    record = digest_path(path)
    try:
        data = json.loads(record.read_text(encoding="utf8"))
    except FileNotFoundError as e:
        raise ValueError("no such file: written before checkpoint digests, or not by Strata") from e
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"an unreadable file: {type(e).__name__}") from e
    digests = data.get("digests") if isinstance(data, dict) and data.get("format") == _DIGEST_FORMAT else None
    if not isinstance(digests, list) or not digests or not all(isinstance(d, str) for d in digests):
        raise ValueError(f"a file that is not a {_DIGEST_FORMAT} record")
    return digests


def verify_checkpoint(path: str | Path) -> str:
    """The digest of the checkpoint at ``path``, after checking it against its digest file.

    Raises :class:`CheckpointUnverified` (a ``ValueError``) naming the file, the recorded digest and the
    actual one when they differ, or when the digest file is missing or unreadable; ``FileNotFoundError`` when
    the checkpoint itself is missing.
    """
    path = Path(path)
    actual = file_checksum(path)
    try:
        expected = _recorded(path)
    except ValueError as e:
        raise CheckpointUnverified(path, "", actual, missing=str(e)) from e
    if actual not in expected:  # named: the newest (the others are the files it replaced)
        raise CheckpointUnverified(path, expected[0], actual)
    return actual


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu", *,
                    verify: bool = True) -> dict[str, Any]:
    """Read a checkpoint dict (weights only: no unpickling of arbitrary objects).

    With ``verify`` (the default) its bytes are checked against its digest file first
    (:func:`verify_checkpoint`: :class:`CheckpointUnverified` on a mismatch or a missing digest). Raises
    ``FileNotFoundError`` for a missing file and ``ValueError`` naming the file for anything that is not a
    ``CHECKPOINT_FORMAT`` dict (an older format, another program's file, a truncated file).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"'checkpoint' expected a file at {path} (got no such file)")
    if verify:
        verify_checkpoint(path)
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


def _write_synced(path: Path, data: bytes) -> None:
    """``data`` at ``path`` atomically: a temporary file, flushed to disk, renamed into place."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def save_checkpoint(path: str | Path, ckpt: dict[str, Any]) -> None:
    """Write a checkpoint dict atomically (a temporary file, flushed to disk, renamed into place), and its
    digest file before the rename (listing the new digest and the previous ones, so either file verifies)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(ckpt, f)
            f.flush()
            os.fsync(f.fileno())  # the rename must not reach the disk before the data (power loss)
        try:
            previous = _recorded(path) if path.exists() else []
        except ValueError:
            previous = []  # the file in place has no usable digest: it would not verify anyway
        digest = file_checksum(tmp)  # the bytes as written (read back from the page cache)
        record = {"format": _DIGEST_FORMAT, "file": path.name,
                  "digests": [digest, *(d for d in previous if d != digest)][:_KEEP_DIGESTS]}
        _write_synced(digest_path(path), (json.dumps(record, indent=1) + "\n").encode("utf8"))
    except BaseException:
        tmp.unlink(missing_ok=True)  # the previous checkpoint, if any, stays as it was
        raise
    os.replace(tmp, path)  # readers never see a half-written checkpoint
