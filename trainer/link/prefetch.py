"""The prefetch thread of the out-of-core embedding buffer (``trainer.link.outofcore``).

One reader thread, at most one prefetch in flight: :meth:`PartitionPrefetcher.start` hands it partitions and the
spare slots of the pool to read them into; each read first waits for the write-backs it must follow (the
partition's own, so it is never read stale, and the slot's previous tenant's, so a slot is not overwritten
while it is still being written out), then reads the partition whole with its own ``DirectFile`` (``O_DIRECT``,
aligned ranges). :meth:`PartitionPrefetcher.collect` waits for the reads and hands back the partitions, slots
and traffic; the buffer counts the traffic on its own thread (no counter is shared with the reader).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

__all__ = ["PartitionPrefetcher", "Staged"]

#: ``read(partition, slot) -> (bytes, requests)``: one partition read whole into one slot of the pool.
ReadFn = Callable[[int, int], tuple[int, int]]


@dataclass
class Staged:
    """What one collected prefetch brought in: ``parts[k]`` sits in ``slots[k]``; its traffic, and ``wait_s``
    (the caller's time blocked in :meth:`PartitionPrefetcher.collect`)."""

    parts: list[int] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)
    bytes_read: int = 0
    read_requests: int = 0
    wait_s: float = 0.0


class PartitionPrefetcher:
    """A single reader thread running ``read`` for one batch of (partition, slot) pairs at a time."""

    def __init__(self, read: ReadFn) -> None:
        self._read = read
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-embedding-prefetch")
        self._pending: tuple[list[int], list[int], Future[tuple[int, int]]] | None = None

    @property
    def busy(self) -> bool:
        """Whether a prefetch is in flight (started, not collected)."""
        return self._pending is not None

    def start(self, parts: Sequence[int], slots: Sequence[int], after: Sequence[Future[None] | None]) -> None:
        """Read ``parts[k]`` into ``slots[k]`` on the reader thread, once every future of ``after`` (write-backs)
        is done. ValueError while a prefetch is in flight: the depth stays bounded."""
        if self._pending is not None:
            raise ValueError("'prefetch' expected the previous prefetch to be collected (got one in flight)")
        parts, slots = [int(q) for q in parts], [int(s) for s in slots]
        waits = [f for f in after if f is not None]

        def run() -> tuple[int, int]:
            for f in waits:  # the write-backs land first: no stale partition, no slot overwritten mid-write
                f.result()
            nbytes = requests = 0
            for q, s in zip(parts, slots, strict=True):
                b, r = self._read(q, s)
                nbytes, requests = nbytes + b, requests + r
            return nbytes, requests

        self._pending = (parts, slots, self._pool.submit(run))

    def collect(self) -> Staged:
        """Wait for the prefetch in flight (an empty :class:`Staged` when none)."""
        if self._pending is None:
            return Staged()
        parts, slots, future = self._pending
        self._pending = None
        t0 = time.perf_counter()
        nbytes, requests = future.result()
        return Staged(parts, slots, nbytes, requests, time.perf_counter() - t0)

    def close(self) -> None:
        """Finish the read in flight (its slots are the caller's to drop) and stop the thread."""
        if self._pending is not None:
            self._pending[2].exception()  # wait; an error of a read nobody uses is not raised on close
            self._pending = None
        self._pool.shutdown(wait=True)
