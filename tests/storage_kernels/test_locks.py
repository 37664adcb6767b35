"""Run locks (flock under the root) and owner identities: a second process waits with the holder's pid, a kill
-9 of the holder releases the lock, a process re-enters its own lock, and a reused pid is not its owner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from storage_kernels.locks import dataset_lock, holder_pid, root_lock
from storage_kernels.owner import Owner, process_start
from storage_kernels.store import ArtifactStore

REPO = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from storage_kernels.locks import dataset_lock
with dataset_lock(sys.argv[1], "tiny"):
    print("locked", flush=True)
    time.sleep(60)
"""


def lock_state(root: Path, dataset: str) -> str:
    """``held`` or ``free``: whether another process could take ``dataset``'s run lock under ``root`` now."""
    probe = ("import sys; from storage_kernels.locks import LockHeld, dataset_lock\n"
             "try:\n    with dataset_lock(sys.argv[1], sys.argv[2], wait=False): print('free')\n"
             "except LockHeld: print('held')")
    return subprocess.run([sys.executable, "-c", probe, str(root), dataset], capture_output=True, text=True,
                          check=True, cwd=REPO).stdout.strip()


def _holder(root: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_process_waits_naming_the_holder_and_a_kill_releases_it(tmp_path: Path) -> None:
    holder = _holder(tmp_path)
    try:
        messages: list[str] = []
        killer = threading.Timer(0.5, lambda: os.kill(holder.pid, signal.SIGKILL))  # the kernel drops its lock
        killer.start()
        t0 = time.monotonic()
        with dataset_lock(tmp_path, "tiny", on_wait=messages.append):
            waited = time.monotonic() - t0
            assert holder_pid(tmp_path / ".locks" / "dataset-tiny.lock") == os.getpid()
        killer.join()
        assert waited >= 0.4
        assert len(messages) == 1 and messages[0].startswith(f"waiting for run {holder.pid} on dataset tiny")
    finally:
        holder.kill()
        holder.wait()


def test_other_datasets_do_not_wait(tmp_path: Path) -> None:
    holder = _holder(tmp_path)
    try:
        messages: list[str] = []
        with dataset_lock(tmp_path, "demo", on_wait=messages.append):
            pass
        assert messages == []
    finally:
        holder.kill()
        holder.wait()


def test_locks_are_reentrant_within_a_process(tmp_path: Path) -> None:
    with dataset_lock(tmp_path, "tiny"), dataset_lock(tmp_path, "tiny"), root_lock(tmp_path, "mlflow"):
        with root_lock(tmp_path, "mlflow"):
            pass
    with dataset_lock(tmp_path, "tiny", on_wait=lambda m: (_ for _ in ()).throw(AssertionError(m))):
        pass  # released: no wait


def test_a_lock_held_twice_is_released_by_its_last_hold_in_any_order(tmp_path: Path) -> None:
    """Two holds in one process that end out of order (two opened datasets closed first-opened first): the
    lock stays taken until the last one ends."""
    first, second = dataset_lock(tmp_path, "tiny"), dataset_lock(tmp_path, "tiny")
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert lock_state(tmp_path, "tiny") == "held"
    second.__exit__(None, None, None)
    assert lock_state(tmp_path, "tiny") == "free"


def test_owner_identity_guards_pid_reuse() -> None:
    me = Owner.me()
    assert me.alive() and me.start == process_start(os.getpid())
    assert not Owner(me.pid, (me.start or 0) + 1, me.host).alive()  # our pid, another start: not us
    assert Owner(me.pid, None, "some-other-host").alive()  # unknown from here: never touched
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert not Owner(int(dead.stdout), None, me.host).alive()
    assert Owner.from_tags(me.tags("x."), "x.") == me and Owner.from_tags({}, "x.") is None


def test_cleanup_removes_temp_dirs_of_a_reused_pid_and_keeps_resumable_checkpoints(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path, catalog=False)
    me = Owner.me()
    reused = store.tmp_dir / f"{me.pid}.{(me.start or 0) + 1}-00ff-{me.host}"  # our pid, an earlier process
    reused.mkdir(parents=True)
    live = store.builder("ds", "graph", "1" * 12, {}, {})
    assert live.dir.name.startswith(f"{me.pid}.{me.start}-")
    resume = store.resume_dir("ds", "train", "2" * 12)
    resume.mkdir(parents=True)
    (resume / "checkpoint.pt").write_bytes(b"x")
    assert store.cleanup_tmp() == 1
    assert not reused.exists() and live.dir.exists() and resume.exists()  # the checkpoint is still resumable
    done = store.builder("ds", "train", "2" * 12, {}, {})
    done.publish()
    assert store.cleanup_tmp() == 1 and not resume.exists()  # published: nothing left to resume
    live.abort()
