"""Who owns a leftover: a process identity that survives pid reuse (pid + start time + host).

A temp directory, an MLflow run or a Dagster run records the identity of the process that created it; a later
run treats the leftover as orphaned when that process is gone. A pid alone is not enough -- pids are reused --
so the identity also holds the process's start time (``/proc/<pid>/stat`` field 22, clock ticks since boot):
a live process with the same pid but another start time is someone else.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Owner", "host_name", "pid_alive", "process_start"]


def host_name() -> str:
    """This host's name, reduced to ``[A-Za-z0-9_.-]`` (at most 64 characters)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64]


def process_start(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None (no such process, or no ``/proc``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19])  # field 22 of stat; fields[0] is field 3 (state)
    except (OSError, IndexError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live (non-zombie) process on this host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


@dataclass(frozen=True)
class Owner:
    """A process identity: ``pid``, its ``start`` time (None when unknown) and its ``host``."""

    pid: int
    start: int | None
    host: str

    @classmethod
    def me(cls) -> Owner:
        """This process."""
        pid = os.getpid()
        return cls(pid, process_start(pid), host_name())

    @classmethod
    def from_tags(cls, tags: dict[str, str], prefix: str) -> Owner | None:
        """The owner recorded by :meth:`tags` under ``prefix`` (None when absent or malformed)."""
        pid, start, host = (tags.get(f"{prefix}{k}") for k in ("pid", "pid_start", "host"))
        if pid is None or host is None or not pid.isdigit():
            return None
        return cls(int(pid), int(start) if start and start.isdigit() else None, host)

    def tags(self, prefix: str) -> dict[str, str]:
        """``{prefix}pid``, ``{prefix}pid_start``, ``{prefix}host`` as strings (run tags)."""
        out = {f"{prefix}pid": str(self.pid), f"{prefix}host": self.host}
        if self.start is not None:
            out[f"{prefix}pid_start"] = str(self.start)
        return out

    def alive(self) -> bool:
        """Whether the owner may still be running: True for another host (unknown from here)."""
        if self.host != host_name():
            return True
        if not pid_alive(self.pid):
            return False
        return self.start is None or process_start(self.pid) in (None, self.start)
