"""``strata ui`` stops on SIGTERM: the server runs in its own process group, and a stop request becomes SIGINT
to the whole group (what Ctrl-C does in a terminal), even when the UI was started in the background with SIGINT
ignored. The fast tests drive :func:`pipelines.cli.ui_process.run_process_group` with real processes (a server
stand-in that starts a worker, as ``dagster dev`` does); the last one starts ``strata ui`` itself (about 30 s on
a loaded 2-core machine, most of it the webserver starting: in the default suite)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from tests import REPO

# A stand-in server: starts a worker process (same group), writes both pids, then waits; SIGINT (default handler:
# KeyboardInterrupt) ends both. With IGNORE_SIGINT=1 it ignores SIGINT, like a server that hangs on shutdown.
SERVER = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    if os.environ.get("IGNORE_SIGINT") == "1":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {worker.pid}")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    try:
        time.sleep(120)
    except KeyboardInterrupt:
        worker.wait()
        sys.exit(0)
""")

# The parent: strata ui's way of running the server, started the way a non-interactive shell starts `cmd &`.
PARENT = textwrap.dedent("""
    import sys
    from pipelines.cli.ui_process import run_process_group
    code = run_process_group([sys.executable, sys.argv[1], sys.argv[2]], shutdown_s=float(sys.argv[3]),
                             log=lambda m: print(m, file=sys.stderr, flush=True))
    sys.exit(code)
""")


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what `sh -c 'cmd &'` does to a background job


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its new parent) is gone for our purpose
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def _start(tmp_path: Path, shutdown_s: float, ignore_in_server: bool = False) -> tuple[subprocess.Popen, list[int]]:
    (tmp_path / "server.py").write_text(SERVER)
    (tmp_path / "parent.py").write_text(PARENT)
    pids_file = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": str(REPO), "IGNORE_SIGINT": "1" if ignore_in_server else "0"}
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py"), str(tmp_path / "server.py"),
                               str(pids_file), str(shutdown_s)], env=env, preexec_fn=_ignore_sigint,
                              stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not pids_file.exists():
        assert parent.poll() is None, parent.stderr.read()
        assert time.monotonic() < deadline, "the server did not start within 30 s"
        time.sleep(0.05)
    return parent, [int(p) for p in pids_file.read_text().split()]


def test_sigterm_stops_the_whole_group_cleanly(tmp_path: Path) -> None:
    parent, (server, worker) = _start(tmp_path, shutdown_s=20)
    assert os.getpgid(server) == server != os.getpgid(parent.pid)  # its own group, the worker in it
    assert os.getpgid(worker) == server
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=20) == 0, parent.stderr.read()
    assert "SIGTERM: stopping" in parent.stderr.read()
    assert not _alive(server) and not _alive(worker)


def test_a_server_that_ignores_sigint_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    parent, (server, worker) = _start(tmp_path, shutdown_s=1, ignore_in_server=True)
    start = time.monotonic()
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=20) == 1
    assert time.monotonic() - start < 15
    assert "did not stop within 1 s: killing" in parent.stderr.read()
    deadline = time.monotonic() + 5
    while (_alive(server) or _alive(worker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server) and not _alive(worker)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_strata_ui_in_the_background_stops_on_sigterm(tmp_path: Path) -> None:
    port = _free_port()
    ui = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "ui", "--root", str(tmp_path), "--port", str(port)],
                          cwd=REPO, preexec_fn=_ignore_sigint, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)  # Dagster logs on both: one pipe
    deadline = time.monotonic() + 180
    while True:
        assert ui.poll() is None, ui.stdout.read()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2) as response:
                assert b"dagster_webserver_version" in response.read()
            break
        except OSError:
            assert time.monotonic() < deadline, "the Dagster webserver did not answer within 180 s"
            time.sleep(1)
    ui.send_signal(signal.SIGTERM)
    assert ui.wait(timeout=60) == 0
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
    log = ui.stdout.read()
    assert "Launching Dagster services" in log and "Shutting down Dagster services" in log, log
    # not `dagster dev`: "SupersessionWarning: Function `dev_command` is superseded ... Use 'dg dev' instead."
    assert "superseded" not in log and "Warning" not in log, log
