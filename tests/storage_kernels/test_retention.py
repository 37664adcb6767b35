"""``strata gc``'s rules and safeguards (storage_kernels.retention): the most recently used version of each
stage stays with everything upstream of it; ``keep_last``/``keep_within`` widen that; open or mapped files,
unreadable manifests, a held run lock and a use since the plan each keep a version; removal leaves no
catalog row and no temp entry, and the rest of the store intact."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from storage_kernels.locks import LockHeld, dataset_lock
from storage_kernels.retention import (
    collect,
    format_age,
    open_versions,
    parse_duration,
    plan,
    scan,
    stale_catalog_rows,
)
from storage_kernels.store import TMP_NAME, Artifact, ArtifactStore
from tests.storage_kernels.test_locks import REPO, _holder

DS = "tiny"


def _publish(store: ArtifactStore, stage: str, tag: int, upstream: dict[str, str] | None = None,
             used_at: float | None = None, dataset: str = DS) -> Artifact:
    """A one-array artifact of ``stage`` (``tag`` makes the version); ``used_at`` sets its last use."""
    params, upstream = {"tag": tag}, upstream or {}
    version = store.version_for(stage, 1, params, upstream)
    with store.builder(dataset, stage, version, params, upstream, format_version=1) as b:
        b.save_array("rows", np.arange(1000, dtype=np.int64) + tag)
        art = b.publish()
    if used_at is not None:
        os.utime(art.path, (used_at, used_at))
    return art


@pytest.fixture()
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "root")


def _decisions(store: ArtifactStore, **kw: object) -> dict[str, tuple[bool, str]]:
    return {f"{d.version.stage}/{d.version.version}": (d.keep, d.reason) for d in plan(scan(store.root), **kw)}


def test_newest_of_each_stage_stays_with_its_upstream_and_the_rest_goes(store: ArtifactStore) -> None:
    t = time.time() + 1000  # later than every created_at, so the mtimes decide the order
    old_graph = _publish(store, "ingest", 1, used_at=t)
    new_graph = _publish(store, "ingest", 2, used_at=t + 100)
    stale = _publish(store, "reorder", 1, {"ingest": new_graph.version}, used_at=t + 50)
    newest = _publish(store, "reorder", 2, {"ingest": old_graph.version}, used_at=t + 200)
    got = _decisions(store, now=t + 300)
    assert got[f"reorder/{newest.version}"] == (True, "most recently used")
    assert got[f"ingest/{new_graph.version}"] == (True, "most recently used")
    assert got[f"ingest/{old_graph.version}"] == (True, f"upstream of reorder/{newest.version}")
    assert got[f"reorder/{stale.version}"] == (False, "unused for 4.2m")


def test_keep_last_and_keep_within_widen_the_kept_set(store: ArtifactStore) -> None:
    t = time.time() + 1000
    arts = [_publish(store, "plan", i, used_at=t + 3600 * i) for i in range(4)]  # used 3h, 2h, 1h, 0h before now
    now = t + 3 * 3600
    assert [k for k, _ in _decisions(store, now=now).values()] == [True, False, False, False]
    two = _decisions(store, keep_last=2, now=now)
    assert two[f"plan/{arts[2].version}"] == (True, "among the 2 most recently used")
    assert not two[f"plan/{arts[1].version}"][0]
    within = _decisions(store, keep_within=2 * 3600 + 1, now=now)
    assert within[f"plan/{arts[1].version}"] == (True, "used 2.0h ago (within 2.0h)")
    assert not within[f"plan/{arts[0].version}"][0]
    assert all(keep for keep, _ in _decisions(store, keep_last=4, now=now).values())
    with pytest.raises(ValueError, match="'--keep-last' expected a count >= 0"):
        plan(scan(store.root), keep_last=-1)


def test_a_pinned_version_stays_with_its_upstream(store: ArtifactStore) -> None:
    t = time.time() + 1000
    graph = _publish(store, "ingest", 1, used_at=t)
    old = _publish(store, "train", 1, {"ingest": graph.version}, used_at=t)
    _publish(store, "ingest", 2, used_at=t + 100)
    _publish(store, "train", 2, used_at=t + 100)
    unpinned = _decisions(store, now=t + 200)
    assert not unpinned[f"train/{old.version}"][0] and not unpinned[f"ingest/{graph.version}"][0]
    pinned = _decisions(store, now=t + 200, pinned={old.version: "trained the champion (m version 1)"})
    assert pinned[f"train/{old.version}"] == (True, "trained the champion (m version 1)")
    assert pinned[f"ingest/{graph.version}"] == (True, f"upstream of train/{old.version}")


def test_open_and_mapped_files_keep_their_version(store: ArtifactStore) -> None:
    t = time.time() + 1000
    mapped = _publish(store, "sample", 1, used_at=t)
    opened = _publish(store, "sample", 2, used_at=t + 1)
    _publish(store, "sample", 3, used_at=t + 2)
    rows = mapped.array("rows")  # np.memmap: the file stays mapped after its descriptor is closed
    with open(opened.file("rows.npy"), "rb"):
        busy = open_versions(store.root)
        assert busy == {(DS, "sample", mapped.version): {os.getpid()}, (DS, "sample", opened.version): {os.getpid()}}
        got = _decisions(store, in_use=busy, now=t + 10)
    assert got[f"sample/{mapped.version}"] == (True, f"open by pid {os.getpid()}")
    assert got[f"sample/{opened.version}"] == (True, f"open by pid {os.getpid()}")
    del rows


def test_an_unreadable_manifest_is_never_removed(store: ArtifactStore) -> None:
    t = time.time() + 1000
    broken = _publish(store, "pack", 1, used_at=t)
    _publish(store, "pack", 2, used_at=t + 1)
    (broken.path / "manifest.json").write_text("{not json")
    got = _decisions(store, now=t + 10)
    assert got[f"pack/{broken.version}"] == (True, "manifest unreadable (`strata verify` says why)")


def test_collect_removes_files_catalog_rows_and_leaves_the_rest_intact(store: ArtifactStore) -> None:
    t = time.time() + 1000
    graph = _publish(store, "ingest", 1, used_at=t)
    old = [_publish(store, "plan", i, {"ingest": graph.version}, used_at=t + i) for i in range(3)]
    kept = _publish(store, "plan", 9, {"ingest": graph.version}, used_at=t + 10)
    assert store.catalog is not None
    decisions = plan(scan(store.root), now=t + 20)
    seen: list[str] = []
    result = collect(store.root, decisions, store.catalog, lambda v: seen.append(v.version))
    assert sorted(seen) == sorted(a.version for a in old) == sorted(v.version for v in result.removed)
    assert result.skipped == [] and result.bytes_freed == sum(d.version.bytes for d in decisions if not d.keep) > 0
    assert all(not a.path.exists() for a in old)
    left = {(a["stage"], a["version"]) for a in store.catalog.list_artifacts(DS)}
    assert left == {("ingest", graph.version), ("plan", kept.version)}
    assert not any((store.root / TMP_NAME).iterdir())
    assert kept.verify() > 0 and graph.verify() > 0


def test_collect_skips_a_dataset_whose_run_is_in_progress(store: ArtifactStore) -> None:
    t = time.time() + 1000
    old = _publish(store, "plan", 1, used_at=t)
    _publish(store, "plan", 2, used_at=t + 1)
    decisions = plan(scan(store.root), now=t + 10)
    holder = _holder(store.root)  # another process holds dataset "tiny"'s run lock
    try:
        result = collect(store.root, decisions, store.catalog)
    finally:
        holder.kill()
        holder.wait()
    assert result.removed == [] and old.path.exists()
    ((version, why),) = result.skipped
    assert version.version == old.version and f"a run of dataset {DS} is in progress" in why
    assert f"process {holder.pid}" in why
    assert [v.version for v in collect(store.root, decisions, store.catalog).removed] == [old.version]


def test_collect_leaves_a_version_a_run_used_after_the_plan(store: ArtifactStore) -> None:
    old = _publish(store, "plan", 1)
    _publish(store, "plan", 2, used_at=time.time() + 1000)
    decisions = plan(scan(store.root), now=time.time() + 2000)
    os.utime(old.path, (time.time() + 1500, time.time() + 1500))  # a run reused it meanwhile
    result = collect(store.root, decisions, store.catalog)
    assert result.removed == [] and result.skipped[0][1] == "used by a run since the plan" and old.path.exists()


def test_finding_a_version_marks_it_used(store: ArtifactStore) -> None:
    art = _publish(store, "plan", 1, used_at=1_000_000)
    assert art.path.stat().st_mtime == 1_000_000
    before = time.time()
    assert store.find(DS, "plan", art.version) is not None
    assert art.path.stat().st_mtime >= before - 1
    (v,) = scan(store.root)
    assert v.last_used >= before - 1


def test_a_held_lock_can_be_refused_instead_of_awaited(tmp_path: Path) -> None:
    holder = _holder(tmp_path)
    try:
        t0 = time.monotonic()
        with pytest.raises(LockHeld, match=f"is held by process {holder.pid}") as info:
            with dataset_lock(tmp_path, "tiny", wait=False):
                pass
        assert info.value.pid == holder.pid and time.monotonic() - t0 < 5
    finally:
        holder.kill()
        holder.wait()
    with dataset_lock(tmp_path, "tiny", wait=False):  # free now
        pass


@pytest.mark.parametrize(("text", "seconds"), [("0", 0.0), ("45", 45.0), ("90s", 90.0), ("30m", 1800.0),
                                                ("12h", 43200.0), ("7d", 604800.0), ("2w", 1209600.0),
                                                (" 1.5h ", 5400.0), (3.0, 3.0)])
def test_durations_parse(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7 days", "-1d", "h", "1y"])
def test_bad_durations_are_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match="'--keep-within' expected a duration"):
        parse_duration(text)


def test_ages_read_in_their_largest_unit() -> None:
    assert [format_age(s) for s in (5, 150, 7200, 36000, 5 * 86400, 30 * 86400)] == \
        ["5s", "2.5m", "2.0h", "10h", "5.0d", "30d"]



def test_catalog_rows_of_directories_removed_by_hand_are_found(store: ArtifactStore) -> None:
    kept = _publish(store, "plan", 1)
    gone = _publish(store, "plan", 2)
    shutil.rmtree(gone.path)
    assert store.catalog is not None
    assert stale_catalog_rows(store.root, store.catalog) == [(DS, "plan", gone.version)]
    assert stale_catalog_rows(store.root, store.catalog, dataset="other") == []
    assert kept.path.is_dir()


KILLED_MID_REMOVAL = """
import os, signal, sys, time
from storage_kernels import retention
retention._rmtree = lambda path: os.kill(os.getpid(), signal.SIGKILL)  # die after the rename, before deleting
retention.gc_apply(retention.gc_plan(sys.argv[1], now=time.time() + 2000))
"""


def test_a_gc_killed_mid_removal_leaves_a_temp_entry_the_next_cleanup_removes(store: ArtifactStore) -> None:
    old = _publish(store, "plan", 1, used_at=time.time() + 1000)
    kept = _publish(store, "plan", 2, used_at=time.time() + 1001)
    proc = subprocess.run([sys.executable, "-c", KILLED_MID_REMOVAL, str(store.root)], cwd=REPO)
    assert proc.returncode == -signal.SIGKILL
    assert not old.path.exists() and kept.path.is_dir()  # one rename: the version is gone from the tree whole
    assert store.catalog is not None
    assert {a["version"] for a in store.catalog.list_artifacts(DS)} == {kept.version}
    leftovers = list((store.root / TMP_NAME).iterdir())
    assert len(leftovers) == 1 and (leftovers[0] / "rows.npy").is_file()
    assert store.cleanup_tmp() == 1 and not any((store.root / TMP_NAME).iterdir())
    assert kept.verify() > 0
