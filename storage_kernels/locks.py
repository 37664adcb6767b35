"""Inter-process locks under the data root: one run per dataset at a time, one-time initialisations.

A lock is ``fcntl.flock`` on ``<root>/.locks/<name>.lock``: the kernel releases it when its holder exits,
however it exits (kill -9 included), so a crashed run never leaves a lock behind. The holder writes its pid
into the file, so a process that has to wait can say whom it waits for.

Locks are re-entrant within a process: a step of an in-process Dagster run takes the dataset lock the CLI
already holds without deadlocking on itself (``flock`` locks belong to an open file, so a second open of the
same file in the same process would otherwise block).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["LOCKS_NAME", "LockHeld", "dataset_lock", "file_lock", "holder_pid", "root_lock"]

LOCKS_NAME = ".locks"

_held: dict[str, tuple[int, int]] = {}  # lock path -> (fd, depth) held by this process
_guard = threading.Lock()
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class LockHeld(BlockingIOError):
    """``wait=False`` and another process holds the lock: ``pid`` is the holder's, when it wrote one."""

    def __init__(self, path: Path, pid: int | None) -> None:
        who = f"process {pid}" if pid is not None else "another process"
        super().__init__(errno.EWOULDBLOCK, f"lock {path} is held by {who}")
        self.path, self.pid = path, pid


def _lock_path(root: str | Path, name: str) -> Path:
    return Path(root) / LOCKS_NAME / (_SAFE.sub("_", name)[:128] + ".lock")


def holder_pid(path: str | Path) -> int | None:
    """The pid the current (or last) holder of the lock file wrote, if any."""
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


@contextlib.contextmanager
def file_lock(path: str | Path, on_wait: Callable[[int | None], None] | None = None, wait: bool = True
              ) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created) for the block; re-entrant within this process.

    ``on_wait(pid)`` is called once when another process holds it, before blocking (``pid``: the holder's,
    when it wrote one). With ``wait=False`` a held lock raises :class:`LockHeld` instead of blocking.
    """
    path = Path(path)
    key = str(path.resolve())
    with _guard:
        reentered = key in _held
        if reentered:  # re-entry from this process: count it, do not lock again
            fd, depth = _held[key]
            _held[key] = (fd, depth + 1)
    if not reentered:
        _acquire(path, key, on_wait, wait)
    try:
        yield
    finally:
        _release(key)


def _acquire(path: Path, key: str, on_wait: Callable[[int | None], None] | None, wait: bool) -> None:
    """Take the ``flock`` on ``path`` and record it in ``_held`` with depth 1."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            if not wait:
                raise LockHeld(path, holder_pid(path)) from None
            if on_wait is not None:
                on_wait(holder_pid(path))
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocks until the holder finishes (or dies)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    with _guard:
        _held[key] = (fd, 1)


def _release(key: str) -> None:
    """Drop one hold of ``key``; the last one, whichever block it was (holds may end out of order), unlocks."""
    with _guard:
        fd, depth = _held[key]
        if depth > 1:
            _held[key] = (fd, depth - 1)
            return
        del _held[key]
    try:
        os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def dataset_lock(root: str | Path, dataset: str, on_wait: Callable[[str], None] | None = None, wait: bool = True
                 ) -> contextlib.AbstractContextManager[None]:
    """Hold the run lock of ``dataset`` under ``root`` for the block (waits while another process holds it).

    ``on_wait(message)`` is called once before waiting, with ``"waiting for run <pid> on dataset <name>"``;
    ``wait=False`` raises :class:`LockHeld` instead of waiting.
    """

    def say(pid: int | None) -> None:
        if on_wait is not None:
            who = f"run {pid}" if pid is not None else "another run"
            on_wait(f"waiting for {who} on dataset {dataset} (lock {_lock_path(root, 'dataset-' + dataset)})")

    return file_lock(_lock_path(root, f"dataset-{dataset}"), say, wait)


def root_lock(root: str | Path, name: str) -> contextlib.AbstractContextManager[None]:
    """Hold the root-wide lock ``name`` (e.g. ``mlflow``: store initialisation and model registration)."""
    return file_lock(_lock_path(root, name))
