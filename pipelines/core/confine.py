"""Confining a run to a memory budget with the page cache counted: memory cgroups (v1 and v2).

An out-of-core claim holds only if the run could not keep the data in memory behind its back: the OS page
cache counts. A memory cgroup charges a process's anonymous memory *and* the page-cache pages its reads bring
in; past its limit the kernel reclaims the group's pages (and OOM-kills it when nothing can be reclaimed).

:func:`cgroup_support` finds where this process may create a memory cgroup (it needs write access to its own
cgroup directory in the memory hierarchy: root, or a delegated subtree) and says plainly why not otherwise.
:class:`MemoryCgroup` creates one with a limit, moves a process into it (:meth:`MemoryCgroup.join_argv`
gives the ``preexec_fn`` that moves a child before it runs a single instruction of its program), reads the
peak charge and the OOM kills, and removes it (emptying its page cache first on v1).

Pages another group already cached stay readable without being charged, so a fair run first evicts the
files it will read from the page cache: :func:`evict_page_cache` (``posix_fadvise(DONTNEED)`` per file;
it needs no privilege and leaves the rest of the machine's cache alone).

Where no cgroup can be made, the policies that read with ``O_DIRECT`` still bypass the page cache; the
memory-mapped baseline cannot be confined and the report says so.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CgroupSupport", "MemoryCgroup", "cgroup_support", "evict_page_cache", "json_child", "memory_limit",
           "parse_bytes", "resident_bytes", "run_within"]

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}
_counter = itertools.count()


def parse_bytes(text: str | int, what: str = "--memory-budget") -> int:
    """``"512M"``, ``"2G"``, ``"1.5GiB"``, ``"4096"`` -> bytes (binary units); ``ValueError`` naming ``what``."""
    if isinstance(text, int):
        value = text
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
        unit = m.group(2).upper() if m else ""
        if not m or unit not in _UNITS:
            raise ValueError(f"'{what}' expected a size such as 512M, 2G or 1.5GiB (got {text!r})")
        value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"'{what}' expected a positive size (got {text!r})")
    return value


@dataclass(frozen=True)
class CgroupSupport:
    """Where memory cgroups can be made: ``version`` 1 or 2 and the ``parent`` directory, or ``version`` 0
    and the ``reason`` none can."""

    version: int
    parent: Path | None
    reason: str = ""

    @property
    def available(self) -> bool:
        return self.version in (1, 2)

    @property
    def label(self) -> str:
        """``cgroup-v1``, ``cgroup-v2`` or ``none``."""
        return f"cgroup-v{self.version}" if self.available else "none"


def _own_cgroups(proc_cgroup: str) -> dict[str, str]:
    """``/proc/self/cgroup`` -> {controller (``""`` for the v2 unified line): path}."""
    out: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                out[controller] = parts[2]
    return out


def memory_limit(root: Path = _CGROUP_ROOT, proc_cgroup: str | None = None) -> int:
    """The RAM this process may use: the machine's physical memory, or the memory limit of its cgroup (v1 or v2,
    the process's own group and its ancestors) when that is lower."""
    limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        own = _own_cgroups(proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text())
    except OSError:
        return limit
    for controller, base, name in (("", root, "memory.max"), ("memory", root / "memory", "memory.limit_in_bytes")):
        if controller not in own:
            continue
        group = base / own[controller].lstrip("/")
        while True:
            try:
                text = (group / name).read_text().strip()
                if text.isdigit():
                    limit = min(limit, int(text))  # v1 says "no limit" with a huge number, v2 with "max"
            except OSError:
                pass
            if group == base or base not in group.parents:
                break
            group = group.parent
    return limit



def resident_bytes() -> int:
    """This process's resident memory now (``/proc/self/statm``; 0 where unknown): with :func:`memory_limit`,
    what it has left."""
    try:
        return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0

def _v2_memory_ancestor(root: Path, group: Path) -> Path | None:
    """The nearest writable ancestor of ``group`` (up to ``root``, the hierarchy's root, included) whose children
    have the memory controller; at ``root`` it is enabled when it is not (the root group is exempt from v2's rule
    that a group with controllers for its children holds no processes). None when there is none."""
    for d in group.parents:
        if d != root and root not in d.parents:
            break  # above the hierarchy
        if not os.access(d, os.W_OK):
            continue
        control = d / "cgroup.subtree_control"
        try:
            if "memory" in control.read_text().split():
                return d
            if d == root:
                control.write_text("+memory")
                return d
        except OSError:
            continue
    return None


def cgroup_support(root: Path = _CGROUP_ROOT, proc_cgroup: str | None = None) -> CgroupSupport:
    """Whether (and where) this process can create memory cgroups; the reason when it cannot."""
    try:
        text = proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text()
    except OSError as e:
        return CgroupSupport(0, None, f"cannot read /proc/self/cgroup ({e.strerror})")
    own = _own_cgroups(text)
    # v1: a memory hierarchy of its own (also on hybrid systems where the unified tree has no controllers)
    if "memory" in own and (root / "memory").is_dir():
        parent = root / "memory" / own["memory"].lstrip("/")
        if not (parent / "memory.limit_in_bytes").exists():
            return CgroupSupport(0, None, f"{parent} has no memory.limit_in_bytes")
        if not os.access(parent, os.W_OK):
            return CgroupSupport(0, None, f"no write access to {parent} (run as root or delegate the cgroup)")
        return CgroupSupport(1, parent)
    if "" in own and (root / "cgroup.controllers").exists():
        parent = root / own[""].lstrip("/")
        if "memory" not in (root / "cgroup.controllers").read_text().split():
            return CgroupSupport(0, None, "the cgroup v2 hierarchy has no memory controller")
        if not os.access(parent, os.W_OK):
            return CgroupSupport(0, None, f"no write access to {parent} (run as root or delegate the cgroup)")
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        if "memory" not in enabled:
            try:  # v2 allows it only where the parent holds no processes itself
                (parent / "cgroup.subtree_control").write_text("+memory")
            except OSError as e:
                # a process of a container or VM agent's group (which holds other processes too): make the
                # groups beside it, under the nearest ancestor whose children have the controller
                host = _v2_memory_ancestor(root, parent)
                if host is None:
                    return CgroupSupport(0, None, f"cannot enable the memory controller under {parent} "
                                                  f"({e.strerror}; cgroup v2 forbids it in a group that holds "
                                                  f"processes), nor under an ancestor up to {root}")
                return CgroupSupport(2, host)
        return CgroupSupport(2, parent)
    return CgroupSupport(0, None, "no memory cgroup hierarchy is mounted")


class MemoryCgroup:
    """A fresh memory cgroup limited to ``limit_bytes`` (page cache included), removed by :meth:`close`.

    >>> with MemoryCgroup(2 << 30) as cg:                                  # doctest: +SKIP
    ...     subprocess.run(cmd, preexec_fn=cg.join_argv())
    ...     cg.peak_bytes(), cg.oom_kills()
    """

    def __init__(self, limit_bytes: int, support: CgroupSupport | None = None, name: str = "strata") -> None:
        support = support or cgroup_support()
        if not support.available or support.parent is None:
            raise RuntimeError(f"cannot create a memory cgroup: {support.reason}")
        self.version = support.version
        self.limit_bytes = int(limit_bytes)
        self.path = support.parent / f"{name}-{os.getpid()}-{next(_counter)}"
        self.path.mkdir()
        try:
            if self.version == 1:
                self._write("memory.limit_in_bytes", self.limit_bytes)
                with contextlib.suppress(OSError):  # no swap accounting on some kernels
                    self._write("memory.memsw.limit_in_bytes", self.limit_bytes)
            else:
                self._write("memory.max", self.limit_bytes)
                with contextlib.suppress(OSError):
                    self._write("memory.swap.max", 0)
        except OSError:
            self.close()
            raise

    def _write(self, name: str, value: int | str) -> None:
        (self.path / name).write_text(str(value))

    def _read(self, name: str) -> str:
        return (self.path / name).read_text()

    def join(self, pid: int = 0) -> None:
        """Move process ``pid`` (0: the caller) into the group; what it allocates or reads from now is charged."""
        self._write("cgroup.procs", pid)

    def join_argv(self) -> Callable[[], None]:
        """A ``preexec_fn`` for :mod:`subprocess`: the child joins the group before it execs its program."""
        procs = str(self.path / "cgroup.procs")

        def _join() -> None:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

        return _join

    def usage_bytes(self) -> int:
        """Memory charged now (anonymous + page cache)."""
        return int(self._read("memory.usage_in_bytes" if self.version == 1 else "memory.current"))

    def peak_bytes(self) -> int | None:
        """The highest charge since creation (None where the kernel does not keep it: v2 before 5.19)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return int(self._read(name))
        except OSError:
            return None

    def anon_bytes(self) -> int:
        """Anonymous memory charged now (the processes' own memory, page cache excluded)."""
        keys = ("rss",) if self.version == 1 else ("anon",)
        with contextlib.suppress(OSError):
            for line in self._read("memory.stat").splitlines():
                key, _, value = line.partition(" ")
                if key in keys:
                    return int(value)
        return 0

    def oom_kills(self) -> int:
        """Processes of the group the OOM killer ended."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        with contextlib.suppress(OSError):
            for line in self._read(name).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    @staticmethod
    def remove_stale(support: CgroupSupport | None = None, name: str = "strata") -> list[Path]:
        """Remove groups ``name-PID-*`` left by a process ``PID`` that no longer runs (a killed bench); returns
        the paths removed. Groups that still hold processes are left alone."""
        support = support or cgroup_support()
        removed: list[Path] = []
        if not support.available or support.parent is None:
            return removed
        for path in support.parent.glob(f"{name}-*-*"):
            pid = path.name.split("-")[-2]
            if not pid.isdigit() or Path(f"/proc/{pid}").exists():
                continue
            with contextlib.suppress(OSError):
                if (path / "cgroup.procs").read_text().strip():
                    continue
                if support.version == 1:
                    (path / "memory.force_empty").write_text("0")
                path.rmdir()
                removed.append(path)
        return removed

    def close(self) -> None:
        """Drop the group's page cache (v1) and remove it (its processes must have exited)."""
        if not self.path.exists():
            return
        if self.version == 1:
            with contextlib.suppress(OSError):
                self._write("memory.force_empty", 0)
        with contextlib.suppress(OSError):
            self.path.rmdir()

    def __enter__(self) -> MemoryCgroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def evict_page_cache(paths: Iterable[str | Path]) -> int:
    """Drop the clean page-cache pages of every file under ``paths`` (files or directories); returns the
    bytes of the files advised. Dirty pages are written first (``fdatasync``), so they can go too."""
    total = 0
    for root in paths:
        root = Path(root)
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else []
        for path in files:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                with contextlib.suppress(OSError):
                    os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                total += os.fstat(fd).st_size
            finally:
                os.close(fd)
    return total


def json_child(argv: list[str], preexec: Callable[[], None] | None = None) -> dict[str, Any]:
    """Run ``argv`` (``preexec`` in the child first, e.g. :meth:`MemoryCgroup.join_argv`); its report is the last
    line of its stdout that starts with ``{``, or ``{"returncode": rc, "failed": True}`` when it failed or
    printed none."""
    proc = subprocess.run(argv, preexec_fn=preexec, stdout=subprocess.PIPE, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"returncode": proc.returncode, "failed": True}
    return json.loads(lines[-1])


def run_within(budget: str, name: str, run: Callable[[Callable[[], None] | None], dict[str, Any]]
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``run(preexec)`` unconfined (``budget`` "none") or inside a fresh memory cgroup of ``budget`` bytes (page
    cache counted) that ``preexec`` joins: ``(confinement, result)``, where ``confinement`` holds
    ``confined`` and, when confined, ``cgroup_version``, ``limit_bytes``, ``peak_bytes`` and ``oom_kills``.
    ``RuntimeError`` naming the reason when no cgroup can be made here."""
    if budget.lower() == "none":
        return {"confined": False}, run(None)
    support = cgroup_support()
    if not support.available:
        raise RuntimeError(f"no memory cgroup can be made here: {support.reason}")
    limit = parse_bytes(budget)
    with MemoryCgroup(limit, support, name=name) as cgroup:
        result = run(cgroup.join_argv())
        return {"confined": True, "cgroup_version": support.version, "limit_bytes": limit,
                "peak_bytes": cgroup.peak_bytes(), "oom_kills": cgroup.oom_kills()}, result
