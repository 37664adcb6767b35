"""Memory cgroups and page-cache eviction (pipelines.core.confine): parsing, detection, and -- where this process
may create cgroups (root) -- a real limit that counts the page cache and kills what exceeds it."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipelines.core.confine import MemoryCgroup, cgroup_support, evict_page_cache, memory_limit, parse_bytes

SUPPORT = cgroup_support()
needs_cgroup = pytest.mark.skipif(not SUPPORT.available, reason=f"no memory cgroup: {SUPPORT.reason}")


def test_sizes_parse_in_binary_units() -> None:
    assert parse_bytes("512M") == 512 << 20 and parse_bytes("2G") == 2 << 30 and parse_bytes("1.5GiB") == 3 << 29
    assert parse_bytes("4096") == 4096 and parse_bytes(" 64 kb ") == 64 << 10
    for bad in ("lots", "2X", "-1G", "0"):
        with pytest.raises(ValueError, match="'--memory-budget' expected"):
            parse_bytes(bad)


def test_detection_reads_the_process_cgroups(tmp_path: Path) -> None:
    (tmp_path / "memory" / "job").mkdir(parents=True)
    (tmp_path / "memory" / "job" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    v1 = cgroup_support(tmp_path, "4:memory:/job\n0::/\n")
    assert (v1.version, v1.parent, v1.label) == (1, tmp_path / "memory" / "job", "cgroup-v1")
    (tmp_path / "cgroup.controllers").write_text("cpu io memory pids\n")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "cgroup.subtree_control").write_text("memory\n")
    v2 = cgroup_support(tmp_path, "0::/user\n")
    assert (v2.version, v2.parent) == (2, tmp_path / "user")
    none = cgroup_support(tmp_path / "nowhere", "0::/\n")
    assert not none.available and none.label == "none" and "no memory cgroup hierarchy" in none.reason


def test_the_memory_limit_is_the_lowest_of_the_machine_and_the_process_cgroups(tmp_path: Path) -> None:
    machine = memory_limit(tmp_path / "nowhere", "0::/\n")
    assert machine > 0 and memory_limit() <= machine
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "memory.max").write_text("1073741824\n")  # v2: an ancestor's limit binds its children
    (tmp_path / "a" / "b" / "memory.max").write_text("max\n")
    assert memory_limit(tmp_path, "0::/a/b\n") == min(machine, 1 << 30)
    (tmp_path / "memory" / "job").mkdir(parents=True)
    (tmp_path / "memory" / "job" / "memory.limit_in_bytes").write_text("536870912\n")
    assert memory_limit(tmp_path, "4:memory:/job\n0::/\n") == min(machine, 1 << 29)
    (tmp_path / "memory" / "job" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1: none
    assert memory_limit(tmp_path, "4:memory:/job\n0::/\n") == machine


def test_v2_groups_go_beside_a_group_that_holds_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A VM or container agent runs the process in a group with other processes (v2 refuses the memory
    controller for its children): the groups are made under the nearest ancestor whose children have it."""
    (tmp_path / "cgroup.controllers").write_text("cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory\n")
    agent = tmp_path / "agent"
    (agent / "job").mkdir(parents=True)
    (agent / "job" / "cgroup.subtree_control").write_text("\n")
    (agent / "cgroup.subtree_control").write_text("cpu\n")
    write_text = Path.write_text

    def refuse_in_job(self: Path, text: str) -> int:  # what the kernel answers in a group with processes
        if self == agent / "job" / "cgroup.subtree_control":
            raise OSError(errno.EBUSY, "Device or resource busy")
        return write_text(self, text)

    monkeypatch.setattr(Path, "write_text", refuse_in_job)
    support = cgroup_support(tmp_path, "0::/agent/job\n")
    assert (support.version, support.parent) == (2, tmp_path)  # agent's children have no memory controller
    (agent / "cgroup.subtree_control").write_text("cpu memory\n")
    assert cgroup_support(tmp_path, "0::/agent/job\n").parent == agent
    (tmp_path / "cgroup.subtree_control").write_text("cpu\n")  # the root group: enabled where it is missing
    (agent / "cgroup.subtree_control").write_text("cpu\n")
    assert cgroup_support(tmp_path, "0::/agent/job\n").parent == tmp_path
    assert "memory" in (tmp_path / "cgroup.subtree_control").read_text()
    (tmp_path / "cgroup.subtree_control").unlink()
    (tmp_path / "cgroup.subtree_control").mkdir()  # nowhere to enable it: the reason names the hierarchy
    refused = cgroup_support(tmp_path, "0::/agent/job\n")
    assert not refused.available and f"nor under an ancestor up to {tmp_path}" in refused.reason


def test_eviction_advises_every_file(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"x" * 10_000)
    (tmp_path / "y.bin").write_bytes(b"y" * 5_000)
    assert evict_page_cache([tmp_path]) == 15_000
    assert evict_page_cache([tmp_path / "y.bin", tmp_path / "missing"]) == 5_000


def _child(code: str, cgroup: MemoryCgroup) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], preexec_fn=cgroup.join_argv(), capture_output=True,
                          text=True, timeout=120)


@needs_cgroup
def test_the_limit_counts_the_page_cache(tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(np.random.default_rng(0).integers(0, 255, 128 << 20, dtype=np.uint8).tobytes())
    evict_page_cache([data])
    code = (f"import numpy as np; a = np.memmap({str(data)!r}, dtype=np.uint8, mode='r'); "
            "print(int(a[::4096].sum()), int(a.sum() % 7))")  # reads the whole 128 MiB file through the map
    # 48 MiB: the interpreter and NumPy take ~13; with ~10 MiB of room for the page cache, reclaim on a busy
    # machine sometimes fell behind and the child was OOM-killed
    with MemoryCgroup(48 << 20, SUPPORT) as cg:
        done = _child(code, cg)
        assert done.returncode == 0, done.stderr
        peak = cg.peak_bytes()
        assert peak is not None and peak <= 48 << 20  # 128 MiB were read, at most 48 MiB stayed charged


@needs_cgroup
def test_anonymous_memory_past_the_limit_is_killed_and_counted() -> None:
    with MemoryCgroup(48 << 20, SUPPORT) as cg:
        done = _child("import numpy as np; a = np.ones(128 << 20, dtype=np.uint8); print(a.sum())", cg)
        assert done.returncode != 0 and cg.oom_kills() >= 1
    with MemoryCgroup(256 << 20, SUPPORT) as cg:
        code = "import numpy as np, time; a = np.ones(64 << 20, dtype=np.uint8); time.sleep(0.3); print(a.sum())"
        proc = subprocess.Popen([sys.executable, "-c", code], preexec_fn=cg.join_argv(), stdout=subprocess.PIPE)
        seen = 0
        while proc.poll() is None:
            seen = max(seen, cg.anon_bytes())
        assert proc.wait() == 0 and seen >= 64 << 20  # the array is anonymous memory, sampled while it lived
    assert not cg.path.exists()  # removed on exit


@needs_cgroup
def test_stale_groups_of_dead_processes_are_removed() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = SUPPORT.parent / f"strata-{int(dead.stdout)}-0"
    stale.mkdir()
    assert stale in MemoryCgroup.remove_stale(SUPPORT) and not stale.exists()
