"""The read path of :class:`~trainer.features.base.DirectFile`: io_uring (``kernels.uring_read_ranges``: one
thread, ``queue_depth`` requests in flight, same/adjacent-page merging) or the ``pread`` thread pool
(``kernels.pread_ranges``, the fallback).

``"auto"`` takes io_uring when :func:`storage_kernels.kernels.io_uring_available` says it works here and the
pool otherwise. The process-wide default (what a ``DirectFile`` built without an explicit backend uses) is
set from ``train.io_backend`` / ``train.io_queue_depth`` by the train stage with :func:`set_io_defaults`.
"""

from __future__ import annotations

from typing import NamedTuple

from storage_kernels import kernels

__all__ = ["DEFAULT_QUEUE_DEPTH", "IO_BACKENDS", "IoBackend", "io_defaults", "resolve_backend", "set_io_defaults"]

IO_BACKENDS = ("auto", "uring", "pread")
DEFAULT_QUEUE_DEPTH = kernels.URING_QUEUE_DEPTH  # train.io_queue_depth's default
MAX_QUEUE_DEPTH = 4096  # uring_read_ranges's limit

_defaults: dict[str, object] = {"backend": "auto", "queue_depth": DEFAULT_QUEUE_DEPTH}


class IoBackend(NamedTuple):
    """A resolved read path: ``name`` is ``"uring"`` or ``"pread"``; ``reason`` says why ``"auto"`` fell
    back to the pool ("" otherwise)."""

    name: str
    queue_depth: int
    reason: str


def _check(backend: str, queue_depth: int) -> None:
    if backend not in IO_BACKENDS:
        raise ValueError(f"'io_backend' expected one of {list(IO_BACKENDS)} (got {backend!r})")
    if not 1 <= int(queue_depth) <= MAX_QUEUE_DEPTH:
        raise ValueError(f"'io_queue_depth' expected 1..{MAX_QUEUE_DEPTH} (got {queue_depth})")


def set_io_defaults(backend: str = "auto", queue_depth: int = DEFAULT_QUEUE_DEPTH) -> None:
    """Set the backend and queue depth of every ``DirectFile`` opened from now on without explicit ones."""
    _check(backend, queue_depth)
    _defaults.update(backend=backend, queue_depth=int(queue_depth))


def io_defaults() -> tuple[str, int]:
    """The process-wide ``(backend, queue_depth)``."""
    return str(_defaults["backend"]), int(_defaults["queue_depth"])  # type: ignore[call-overload]


def resolve_backend(backend: str | None = None, queue_depth: int | None = None) -> IoBackend:
    """``backend`` ("auto" | "uring" | "pread"; ``None``: the process default) resolved on this machine.

    ``"uring"`` where io_uring does not work raises ``OSError`` with the reason; ``"auto"`` falls back to
    ``"pread"`` and keeps the reason.
    """
    default_backend, default_depth = io_defaults()
    backend = default_backend if backend is None else backend
    depth = default_depth if queue_depth is None else int(queue_depth)
    _check(backend, depth)
    if backend == "pread":
        return IoBackend("pread", depth, "")
    ok, why = kernels.io_uring_available()
    if ok:
        return IoBackend("uring", depth, "")
    if backend == "uring":
        raise OSError(f"'io_backend' expected io_uring to be available (got {why})")
    return IoBackend("pread", depth, f"io_uring unavailable ({why}); reading with the pread pool")
