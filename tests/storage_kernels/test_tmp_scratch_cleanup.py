"""Scratch files and dirs a stage keeps beside its builder dir (reorder's ``<builder>.scratch/`` buckets, ingest's
``<builder>.edges.scratch.npy``) are removed with it when their owner was killed (found by the kill campaign: a
kill during reorder left a ``.scratch`` dir that no later run removed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from storage_kernels.owner import Owner
from storage_kernels.store import ArtifactStore, owned_tmp_name


def test_scratch_siblings_of_a_dead_builder_are_removed(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path, catalog=False)
    me = Owner.me()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = f"{int(dead.stdout)}-00ff-{me.host}"
    bucket_dir = store.tmp_dir / f"{gone}.scratch"  # reorder's external-permutation buckets
    (bucket_dir / "csr").mkdir(parents=True)
    (bucket_dir / "csr" / "rows_0.bin").write_bytes(b"x" * 64)
    edges = store.tmp_dir / f"{gone}.edges.scratch.npy"  # ingest's placement scratch file
    edges.write_bytes(b"x" * 64)

    live = store.builder("ds", "reorder", "1" * 12, {}, {})
    live_scratch = live.dir.parent / f"{live.dir.name}.scratch"  # a running builder's: kept
    live_scratch.mkdir()
    foreign = store.tmp_dir / f"{int(dead.stdout)}-00ff-{me.host}x.scratch"  # another host's name: kept
    foreign.mkdir()
    unrelated = store.tmp_dir / f"{gone}.notes"  # not a scratch sibling: kept
    unrelated.mkdir()

    assert store.cleanup_tmp() == 2
    assert not bucket_dir.exists() and not edges.exists()
    assert live.dir.exists() and live_scratch.exists() and foreign.exists() and unrelated.exists()
    live_scratch.rmdir()
    live.abort()


def test_an_owned_scratch_dir_is_removed_once_its_process_is_gone(tmp_path: Path) -> None:
    # layer-wise evaluation's scratch tables: a dir named by owned_tmp_name in the store's temp dir
    store = ArtifactStore(tmp_path, catalog=False)
    mine = store.tmp_dir / owned_tmp_name("layerwise")
    mine.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = mine.name.split("-", 1)[0].split(".", 1)[0]  # <pid>[.<start>]-<id>-<host>.layerwise.scratch
    orphan = store.tmp_dir / mine.name.replace(pid, str(int(dead.stdout)), 1)
    orphan.mkdir()
    (orphan / "table.npy").write_bytes(b"x" * 64)
    assert store.cleanup_tmp() == 1
    assert mine.exists() and not orphan.exists()
