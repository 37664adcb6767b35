"""``auto``'s candidate plans, held on disk while it compares them.

Every candidate plan is (N,)-sized (tier, slot and frequency: 17 bytes a node; ``mariusgnn`` adds 12 more), and
``auto`` keeps each plan that can still be chosen until it has predicted them all: in memory that would be
several plans at once, beside the next candidate's own working set. Here each kept plan is written to scratch
``.npy`` files in the data root's temp dir (removed once this process is gone, as a builder's) and the chosen
one comes back memory-mapped: the plan stage copies its arrays into the artifact from the page cache.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from pipelines.methods.policies.inputs import TierPlan
from storage_kernels.store import TMP_NAME
from storage_kernels.storefs import owned_tmp_name

__all__ = ["PlanSpill"]

_FIELDS = ("tier", "slot", "gpu_nodes", "cpu_nodes", "frequency")


class PlanSpill:
    """Plans by key, on disk: :meth:`put`, :meth:`take` (memory-mapped), :meth:`drop`; :meth:`close` removes the
    files (mappings already taken stay valid)."""

    def __init__(self, data_root: Path | None) -> None:
        if data_root is not None:
            parent = Path(data_root) / TMP_NAME
            parent.mkdir(parents=True, exist_ok=True)
            self.dir = parent / owned_tmp_name("auto-plans")
            self.dir.mkdir()
        else:
            self.dir = Path(tempfile.mkdtemp(prefix="strata-auto-plans-"))
        self._meta: dict[int, tuple[dict, list[str]]] = {}

    def _path(self, key: int, name: str) -> Path:
        return self.dir / f"{key}-{name}"

    def put(self, key: int, plan: TierPlan) -> None:
        """Write ``plan``'s arrays; the caller drops its own reference to them."""
        for name in _FIELDS:
            np.save(self._path(key, name + ".npy"), getattr(plan, name))
        for name, arr in plan.arrays.items():
            np.save(self._path(key, "array-" + name), arr)
        self._meta[key] = (plan.stats, list(plan.arrays))

    def take(self, key: int) -> TierPlan:
        """The plan written under ``key``, its arrays memory-mapped read-only."""
        stats, names = self._meta[key]
        fields = [np.load(self._path(key, name + ".npy"), mmap_mode="r") for name in _FIELDS]
        arrays = {name: np.load(self._path(key, "array-" + name), mmap_mode="r") for name in names}
        return TierPlan(*fields, stats=stats, arrays=arrays)

    def drop(self, key: int) -> None:
        """Remove the files of ``key`` (a plan that can no longer be chosen)."""
        stats, names = self._meta.pop(key)
        for name in [f + ".npy" for f in _FIELDS] + ["array-" + n for n in names]:
            self._path(key, name).unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
