"""Memory tiers: an in-memory feature array, the CPU cache (host rows) and the GPU cache (device rows)."""

from __future__ import annotations

import numpy as np
import torch

from storage_kernels import kernels
from storage_kernels.packstore import BatchAddresses, Tier
from trainer.features.base import FeatureTier, TierRead, check_rows

__all__ = ["CPUCacheTier", "GPUCacheTier", "MemoryTier"]


class MemoryTier(FeatureTier):
    """Rows of an in-memory (or memory-mapped) ``(R, F)`` float32 array for the nodes addressed to ``tier``
    (slot = row). The ``in_memory`` baseline is one such tier over the whole feature matrix (tier ``CPU``,
    slot = node id); the CPU cache is one over the cached rows.

    A memory map reads through the page cache, which this tier cannot see: ``bytes_read`` stays 0 and
    ``fallback_reason`` says so.
    """

    def __init__(self, rows: np.ndarray, fallback: FeatureTier | None = None, *, tier: Tier = Tier.CPU,
                 num_threads: int = 0, name: str = "features") -> None:
        self.rows = check_rows(rows, name)
        super().__init__(tier, self.rows.shape[1], fallback, name)
        self.num_threads = int(num_threads)
        if isinstance(rows, np.memmap):
            self.fallback_reason = "memory-mapped: reads go through the page cache and are not counted"

    def num_slots(self, addr: BatchAddresses) -> int:
        return int(self.rows.shape[0])

    def gather(self, part: TierRead) -> None:
        kernels.gather_rows_into(self.rows, part.slot, part.staging, part.pos, self.num_threads)


class CPUCacheTier(MemoryTier):
    """The CPU cache: host rows for the nodes addressed to ``Tier.CPU`` (slot = cache row), loaded once;
    pinned (page-locked) when ``pin_memory``, as for a CUDA target. ``tensor`` is the cache as a tensor."""

    def __init__(self, rows: np.ndarray, fallback: FeatureTier | None = None, *, pin_memory: bool = False,
                 num_threads: int = 0) -> None:
        super().__init__(rows, fallback, tier=Tier.CPU, num_threads=num_threads, name="cpu cache")
        if isinstance(self.rows, np.memmap) or not self.rows.flags.writeable:
            self.rows = self.rows.copy()  # into RAM: a cache is resident
            self.fallback_reason = ""
        self.tensor = torch.from_numpy(self.rows)  # (Nc, F)
        if pin_memory:
            self.tensor = self.tensor.pin_memory()  # a page-locked copy
            self.rows = self.tensor.numpy()


class GPUCacheTier(FeatureTier):
    """The GPU cache: rows in the target device's memory for the nodes addressed to ``Tier.GPU`` (slot =
    cache row), loaded once; the assemble stage writes them into the output on the device, never through
    the host."""

    on_device = True

    def __init__(self, rows: np.ndarray, device: torch.device | str, fallback: FeatureTier | None = None) -> None:
        rows = check_rows(rows, "gpu cache")
        super().__init__(Tier.GPU, rows.shape[1], fallback, "gpu cache")
        self.device = torch.device(device)
        self.rows = torch.from_numpy(rows).to(self.device)  # (Ng, F)

    def num_slots(self, addr: BatchAddresses) -> int:
        return int(self.rows.shape[0])

    def gather_device(self, part: TierRead, x: torch.Tensor) -> None:
        # note: possible CPU-GPU sync point: pos and slot are small pageable host arrays, which the driver may
        # stage synchronously (non_blocking is only a hint here)
        pos = torch.from_numpy(part.pos).to(x.device, non_blocking=True)  # (k,)
        slot = torch.from_numpy(part.slot).to(x.device, non_blocking=True)  # (k,)
        x.index_copy_(0, pos, self.rows.index_select(0, slot))  # (k, F) gathered on the device
