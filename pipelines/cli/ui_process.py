"""Run a server command (the Dagster UI) in its own process group and stop the whole group cleanly.

The Dagster UI shuts down its webserver, daemon and code server when the group gets SIGINT (Ctrl-C in a
terminal). Launched from a script or in the background (``strata ui &``), a shell starts the process with
SIGINT ignored, which its children inherit, and nothing turns a ``kill`` (SIGTERM) into that shutdown.
:func:`run_process_group` fixes both: the child starts in a new session with default signal dispositions
(the parent catches SIGINT itself, so exec resets it to the default in the child), and SIGINT, SIGTERM or
SIGHUP sent to the parent become SIGINT to the child's process group (a second one: SIGTERM). After
``shutdown_s`` without an exit the group is killed; processes of the group that outlive the child are too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["run_process_group"]

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_POLL_S = 0.2
_LINGER_S = 5.0  # how long the group's other processes get to exit after the child did


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to the process group; False when the group is empty."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


def _group_alive(pgid: int) -> bool:
    return _signal_group(pgid, 0)


def run_process_group(command: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                      shutdown_s: float = 30.0, log: Callable[[str], None] = lambda message: None) -> int:
    """Run ``command`` until it exits; stop it (and its whole process group) on SIGINT/SIGTERM/SIGHUP.

    Returns the command's exit status, or 0 when it stopped within ``shutdown_s`` of a stop request, or 1
    when it had to be killed. Must be called from the main thread (it installs signal handlers).
    """
    requested: list[float] = []  # monotonic time of the first stop request

    def forward(signum: int, frame: object) -> None:
        first = not requested
        if first:
            requested.append(time.monotonic())
            log(f"{signal.Signals(signum).name}: stopping (SIGINT to process group {process.pid})")
        _signal_group(process.pid, signal.SIGINT if first else signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in _FORWARDED}  # before Popen: the child gets defaults
    try:
        process = subprocess.Popen(list(command), env=dict(env) if env is not None else None, cwd=cwd,
                                   start_new_session=True)
    except BaseException:
        for s, handler in previous.items():
            signal.signal(s, handler)
        raise
    killed = False
    try:
        while True:
            try:
                code = process.wait(timeout=_POLL_S)
                break
            except subprocess.TimeoutExpired:
                if requested and time.monotonic() - requested[0] > shutdown_s:
                    log(f"{command[0]} did not stop within {shutdown_s:g} s: killing process group {process.pid}")
                    _signal_group(process.pid, signal.SIGKILL)
                    code = process.wait()
                    killed = True
                    break
        deadline = time.monotonic() + _LINGER_S
        while _group_alive(process.pid) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        if _signal_group(process.pid, signal.SIGKILL):
            log(f"killed what was left of process group {process.pid}")
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if killed:
        return 1
    return 0 if requested else code
