"""Host staging blocks for assembled batches, leased to one batch at a time and reused from batch to batch.

A CPU batch's staging block is the batch's feature tensor: the model holds it until its step is done, while
the loader already reads and assembles the next batches into others. Allocating a fresh ``(n, F)`` block per
batch costs page faults whenever the allocator hands back memory it returned to the OS (blocks of tens of
MiB are ``mmap``ed). :class:`StagingPool` keeps up to ``max_blocks`` blocks and lends each to one batch at a
time: :meth:`StagingPool.take` returns a :class:`StagingLease`, and the block is lent again only after the
lease is settled:

``lease.release()``
    the batch is done -- nothing reads its tensors any more: the block may take another batch. Who may say
    so is the one that knows when the batch's step ends: ``BatchLoader`` (through ``FeatureSource.release``),
    whose contract is that a batch is done when its consumer asks for the next batch or leaves the loop.
``lease.keep()``
    the holder keeps the block for good (``TieredSource.load``, a user's own loop): the pool forgets it.

A lease is settled once (a second call does nothing). When every kept block is lent, the pool allocates a
block it does not keep: it never waits. Nor does it keep a block past ``max_bytes`` of kept blocks: with wide
features one batch's block is hundreds of MiB, and a pool of eight of them would hold gigabytes between
batches (such a block is allocated per batch instead, and returned when its batch is done).

With CUDA the blocks are page-locked and come from torch's caching host allocator, which already reuses
them once the copies reading them have completed (it records an event on the copy's stream): no pool there.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

__all__ = ["StagingLease", "StagingPool"]

_HEADROOM = 1.25  # a new block is this much larger than asked for, so that later, larger batches fit it
#: Bytes of kept blocks (lent or free) at most, by default.
MAX_KEPT_BYTES = 512 << 20


class StagingLease:
    """One batch's staging block: ``tensor`` ``(rows, dim)`` float32 over it, lent until :meth:`release` or
    :meth:`keep` (a block the pool does not keep: both only mark the lease settled)."""

    def __init__(self, pool: StagingPool | None, block: np.ndarray, rows: int, dim: int) -> None:
        self.tensor = torch.from_numpy(block[: rows * dim].reshape(rows, dim))
        self._pool, self._block = pool, block
        self.settled = pool is None

    def release(self) -> None:
        """The batch is done (nothing reads ``tensor`` any more): the block may take another batch."""
        if not self.settled:
            self.settled = True
            assert self._pool is not None
            self._pool._give_back(self._block)

    def keep(self) -> None:
        """The holder keeps the block for good: the pool forgets it (and may keep another in its place)."""
        if not self.settled:
            self.settled = True
            assert self._pool is not None
            self._pool._forget(self._block)

    def __repr__(self) -> str:
        state = "settled" if self.settled else "lent"
        return f"StagingLease({tuple(self.tensor.shape)}, {state})"


class StagingPool:
    """Up to ``max_blocks`` reusable float32 blocks of at most ``max_bytes`` together, lent as
    :class:`StagingLease` by :meth:`take`.

    Counters: ``reused`` (blocks lent again), ``allocated`` (blocks allocated, kept or not).
    """

    def __init__(self, max_blocks: int = 8, max_bytes: int = MAX_KEPT_BYTES) -> None:
        if max_blocks < 0:
            raise ValueError(f"'max_blocks' expected >= 0 (got {max_blocks})")
        if max_bytes < 0:
            raise ValueError(f"'max_bytes' expected >= 0 (got {max_bytes})")
        self.max_blocks, self.max_bytes = int(max_blocks), int(max_bytes)
        self._free: list[np.ndarray] = []  # kept 1-D float32 blocks no lease holds
        self._lent = 0  # kept blocks an unsettled lease holds
        self._lent_bytes = 0  # their bytes
        self._lock = threading.Lock()
        self.reused = self.allocated = 0

    def take(self, rows: int, dim: int) -> StagingLease:
        """A lease on an uninitialised ``(rows, dim)`` float32 block: a free kept one when one fits, else a new
        one (kept when the pool has room or replaces a free block too small for this batch)."""
        need = int(rows) * int(dim)
        with self._lock:
            small = -1  # a free block too small for this batch: replaced by a larger one
            for i, block in enumerate(self._free):
                if block.size >= need:
                    del self._free[i]
                    self._lend(block)
                    self.reused += 1
                    return StagingLease(self, block, rows, dim)
                small = i
            block = np.empty(max(int(need * _HEADROOM), 1), dtype=np.float32)
            self.allocated += 1
            freed = self._free[small].nbytes if small >= 0 else 0  # replaced by the new block when it is kept
            if (small < 0 and self._lent + len(self._free) >= self.max_blocks) or (
                    self.kept_bytes - freed + block.nbytes > self.max_bytes):
                return StagingLease(None, block, rows, dim)  # not kept: nothing to give back
            if small >= 0:
                del self._free[small]
            self._lend(block)
            return StagingLease(self, block, rows, dim)

    def _lend(self, block: np.ndarray) -> None:
        self._lent += 1
        self._lent_bytes += block.nbytes

    def _give_back(self, block: np.ndarray) -> None:
        with self._lock:
            self._lent -= 1
            self._lent_bytes -= block.nbytes
            self._free.append(block)

    def _forget(self, block: np.ndarray) -> None:
        with self._lock:
            self._lent -= 1
            self._lent_bytes -= block.nbytes

    @property
    def kept_bytes(self) -> int:
        """Bytes of the blocks kept (lent or free)."""
        return self._lent_bytes + sum(b.nbytes for b in self._free)

    @property
    def num_blocks(self) -> int:
        """Blocks kept (lent or free)."""
        return self._lent + len(self._free)

    @property
    def lent(self) -> int:
        """Kept blocks lent to a batch whose lease is not settled yet."""
        return self._lent

    def __repr__(self) -> str:
        return f"StagingPool({self.num_blocks}/{self.max_blocks} blocks, reused={self.reused})"
