"""``strata gc`` and the quarantine (storage_kernels.retention): a quarantined copy older than every version
gc keeps of its stage goes, and so does an older copy of a version quarantined again; the latest copy of a stage
with nothing kept since stays, as does anything within ``keep_within`` and anything not shaped like a copy."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from pipelines.cli import app
from storage_kernels.integrity import QUARANTINE_NAME, quarantine
from storage_kernels.retention import gc_apply, gc_plan, scan_quarantine
from storage_kernels.store import Artifact, ArtifactStore

DS = "tiny"


def _publish(store: ArtifactStore, stage: str, tag: int, used_at: float) -> Artifact:
    version = store.version_for(stage, 1, {"tag": tag}, {})
    with store.builder(DS, stage, version, {"tag": tag}, {}, format_version=1) as b:
        b.save_array("rows", np.arange(100) + tag)
        art = b.publish()
    os.utime(art.path, (used_at, used_at))
    return art


def _quarantine_at(store: ArtifactStore, art: Artifact, at: float) -> Path:
    """Quarantine ``art`` as if at ``at`` (the time is in the copy's name, which is what gc reads)."""
    moved = quarantine(store.root, art.path, "test", store.catalog)
    assert moved is not None
    stamp = datetime.fromtimestamp(at, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    dated = moved.with_name(f"{art.version}-{stamp}-{moved.name[-6:]}")
    moved.rename(dated)
    return dated


def _republish(store: ArtifactStore, stage: str, tag: int, used_at: float) -> Artifact:
    """The same version built again (after its quarantine)."""
    return _publish(store, stage, tag, used_at)


def test_gc_removes_the_copies_it_no_longer_needs(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    now = time.time()
    day = 86400.0
    # ingest: copy quarantined 10 days ago, the stage rebuilt and used since -> the copy goes
    bad = _publish(store, "ingest", 1, now - 20 * day)
    old_copy = _quarantine_at(store, bad, now - 10 * day)
    _republish(store, "ingest", 1, now - 1 * day)
    # sample: the same version quarantined twice, nothing kept since -> the older copy goes, the latest stays
    first = _quarantine_at(store, _publish(store, "sample", 2, now - 9 * day), now - 8 * day)
    latest = _quarantine_at(store, _publish(store, "sample", 2, now - 7 * day), now - 6 * day)
    # plan: a copy quarantined an hour ago, the stage rebuilt since -> kept by --keep-within 1d only
    recent = _quarantine_at(store, _publish(store, "plan", 3, now - 2 * day), now - 3600)
    _publish(store, "plan", 4, now - 60)
    # not a copy: a quarantined resume checkpoint, and a hand-made name
    other = [store.root / QUARANTINE_NAME / ".tmp" / "resume" / "tiny-train-x-20200101T000000Z-abcdef",
             store.root / QUARANTINE_NAME / DS / "pack" / "by-hand"]
    for path in other:
        path.mkdir(parents=True)

    assert {e.path for e in scan_quarantine(store.root)} == {old_copy, first, latest, recent}
    within = {d.entry.path: (d.keep, d.reason) for d in gc_plan(store.root, keep_within=day, now=now).quarantine}
    assert within[old_copy] == (False, "older than every version kept of its stage")
    assert within[first] == (False, "a newer copy of the same version is quarantined")
    assert within[latest] == (True, "the latest copy, and nothing of its stage kept since")
    assert within[recent] == (True, "quarantined 1.0h ago (within 1.0d)")

    plan = gc_plan(store.root, now=now)
    assert {d.entry.path: d.keep for d in plan.quarantine}[recent] is False  # older than the plan kept since
    done = gc_apply(plan)
    assert {e.path for e in done.quarantine_removed} == {old_copy, first, recent}
    assert latest.is_dir() and all(p.is_dir() for p in other)
    assert not old_copy.exists() and not first.exists() and not recent.exists()


def test_strata_gc_reports_and_removes_quarantined_copies(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    now = time.time()
    copy = _quarantine_at(store, _publish(store, "ingest", 1, now - 3 * 86400), now - 2 * 86400)
    _republish(store, "ingest", 1, now - 60)
    cli = CliRunner()
    dry = cli.invoke(app, ["gc", "--root", str(tmp_path), "--json"])
    assert dry.exit_code == 0, dry.output
    doc = json.loads(dry.stdout)
    assert [(q["path"], q["action"]) for q in doc["quarantine"]] == [(str(copy), "remove")]
    assert doc["quarantine_removed"] == [] and copy.is_dir()
    text = cli.invoke(app, ["gc", "--root", str(tmp_path)])
    assert "would remove 1 of 1 quarantined copies" in text.stdout, text.stdout
    done = cli.invoke(app, ["gc", "--root", str(tmp_path), "--yes"])
    assert done.exit_code == 0 and "removed 1 of 1 quarantined copies" in done.stdout, done.stdout
    assert not copy.exists()
