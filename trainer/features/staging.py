"""Host staging blocks for assembled batches, reused from batch to batch.

A CPU batch's staging block is the batch's feature tensor: the model holds it until its step is done, while
the loader already reads and assembles the next batches into others. Allocating a fresh ``(n, F)`` block per
batch costs page faults whenever the allocator hands back memory it returned to the OS (blocks of tens of
MiB are ``mmap``ed). :class:`StagingPool` keeps up to ``max_blocks`` blocks and reuses one once nothing uses
it any more -- decided from reference counts, so it is right by construction: a handed-out tensor (made with
``torch.from_numpy`` over a view of the block) keeps the block referenced until its storage is freed, which
happens only after the tensor, every view of it (numpy ones included) and every autograd record of it are
gone. When every block is in use the pool allocates a block it does not keep: it never waits.

With CUDA the blocks are page-locked and come from torch's caching host allocator, which already reuses
them once the copies reading them have completed (it records an event on the copy's stream): no pool there.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import torch

__all__ = ["StagingPool"]

_HEADROOM = 1.25  # a new block is this much larger than asked for, so that later, larger batches fit it


class StagingPool:
    """Up to ``max_blocks`` reusable float32 blocks handed out as ``(rows, dim)`` tensors by :meth:`take`.

    Counters: ``reused`` (blocks handed out again), ``allocated`` (blocks allocated, kept or not).
    """

    def __init__(self, max_blocks: int = 8) -> None:
        if max_blocks < 0:
            raise ValueError(f"'max_blocks' expected >= 0 (got {max_blocks})")
        self.max_blocks = int(max_blocks)
        self._blocks: list[np.ndarray] = [np.empty(0, np.float32)]  # a probe, referenced by the list alone
        self._idle_refs = self._refs(0)  # what a block nothing else holds counts (calibrated, not assumed)
        self._blocks.clear()  # 1-D float32 blocks; free when referenced by this list alone
        self._lock = threading.Lock()
        self.reused = self.allocated = 0

    def _refs(self, i: int) -> int:
        return sys.getrefcount(self._blocks[i])

    def _free(self, i: int) -> bool:
        # no tensor, view or autograd record holds the block: only this list does
        return self._refs(i) <= self._idle_refs

    def take(self, rows: int, dim: int) -> torch.Tensor:
        """An uninitialised ``(rows, dim)`` float32 tensor over a free block (a new one when none fits)."""
        need = int(rows) * int(dim)
        with self._lock:
            small = -1  # a free block too small for this batch: replaced by a larger one
            for i in range(len(self._blocks)):
                if self._free(i):
                    if self._blocks[i].size >= need:
                        self.reused += 1
                        return torch.from_numpy(self._blocks[i][:need].reshape(rows, dim))
                    small = i
            block = np.empty(max(int(need * _HEADROOM), 1), dtype=np.float32)
            self.allocated += 1
            if small >= 0:
                self._blocks[small] = block
            elif len(self._blocks) < self.max_blocks:
                self._blocks.append(block)
            return torch.from_numpy(block[:need].reshape(rows, dim))

    @property
    def num_blocks(self) -> int:
        """Blocks kept (in use or free)."""
        return len(self._blocks)

    def __repr__(self) -> str:
        return f"StagingPool({self.num_blocks}/{self.max_blocks} blocks, reused={self.reused})"
