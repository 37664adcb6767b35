"""``advise_random`` / ``random_access``: the kernel's read-around flag of a memory-mapped array, read back from
``/proc/self/smaps`` (``rr`` in ``VmFlags`` is ``MADV_RANDOM``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from storage_kernels.arrays import advise_random, random_access

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps (Linux)")


def _vm_flags(path: Path) -> set[str]:
    """The VmFlags of this process's mapping of ``path`` (the first one listed)."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.endswith(str(path)):
            for after in lines[i + 1 :]:
                if after.startswith("VmFlags:"):
                    return set(after.split()[1:])
    raise AssertionError(f"no mapping of {path}")


def test_random_access_advises_for_the_block_only(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    np.save(path, np.arange(1 << 16, dtype=np.int64))
    arr = np.load(path, mmap_mode="r")
    assert "rr" not in _vm_flags(path)
    with random_access(arr, np.zeros(3)):  # a plain array is skipped
        assert "rr" in _vm_flags(path)
    assert "rr" not in _vm_flags(path)  # read-around back for sequential readers of the same mapping
    assert advise_random(arr) == 1 and "rr" in _vm_flags(path)
