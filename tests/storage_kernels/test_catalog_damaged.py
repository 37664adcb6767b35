"""A damaged catalog file (0 bytes, other bytes, cut short, corrupt blocks) says so on use, naming the way out;
a rebuild moves it aside, kept byte for byte, and rebuilds the index from the manifests; a catalog another process
holds is not damaged, and a fresh catalog is never moved aside."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from storage_kernels.catalog import DAMAGED_SUFFIX, Catalog, CatalogDamaged
from storage_kernels.integrity import quarantine
from storage_kernels.store import ArtifactStore

REPO = Path(__file__).resolve().parents[2]


def _publish(store: ArtifactStore, stage: str, k: int, upstream: dict[str, str]) -> str:
    v = store.version_for(stage, 1, {"k": k}, upstream)
    with store.builder("ds", stage, v, {"k": k}, upstream, format_version=1) as b:
        b.save_array("ids", np.arange(k + 1))
        b.stats["k"] = k
        b.publish()
    return v


def _flip_blocks(good: bytes) -> bytes:
    """Every block after DuckDB's three 4 KiB headers gets 64 bytes flipped in its first KiB: whatever the
    catalog reads first fails its checksum."""
    out = bytearray(good)
    for start in range(3 * 4096 + 512, len(out) - 64, 16 * 1024):
        out[start : start + 64] = bytes(b ^ 0xFF for b in out[start : start + 64])
    return bytes(out)


DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "0 bytes": lambda good: b"",
    "random bytes": lambda good: np.random.default_rng(0).bytes(1 << 16),
    "cut short": lambda good: good[:6000],
    "corrupt blocks": _flip_blocks,
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A root with three artifacts (one upstream of another) and a good catalog of them."""
    store = ArtifactStore(tmp_path)
    g = _publish(store, "graph", 1, {})
    _publish(store, "samples", 2, {"graph": g})
    _publish(store, "graph", 3, {})
    assert store.catalog is not None and len(store.catalog.list_artifacts()) == 3
    return tmp_path


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_catalog_is_moved_aside_and_rebuilt(root: Path, case: str) -> None:
    db = root / "catalog.duckdb"
    listed = Catalog(db).list_artifacts()
    for wal in root.glob("catalog.duckdb.wal"):
        wal.unlink()
    bad = DAMAGE[case](db.read_bytes())
    db.write_bytes(bad)
    catalog = Catalog(db)
    assert catalog.damage() is not None
    with pytest.raises(CatalogDamaged, match=r"catalog.duckdb' expected a DuckDB catalog \(got .+\); "
                                             r"`strata catalog rebuild` moves it aside"):
        catalog.list_artifacts()

    report = catalog.rebuild_report(root)
    assert report.indexed == 3 and report.moved_aside is not None and report.damage
    assert report.moved_aside.name.startswith("catalog.duckdb" + DAMAGED_SUFFIX)
    assert report.moved_aside.read_bytes() == bad  # kept as it was, for inspection
    assert catalog.damage() is None
    assert catalog.list_artifacts() == listed
    assert report.metrics_restored > 0  # the manifests' stats are back as metric rows
    assert Catalog(db).rebuild_report(root).moved_aside is None  # a good catalog stays where it is


def test_a_fresh_catalog_is_never_moved_aside(root: Path) -> None:
    db = root / "catalog.duckdb"
    db.write_bytes(b"")
    first, second = Catalog(db), Catalog(db)
    assert first.damage() and second.damage()  # both found it damaged ...
    moved = first.set_aside()
    assert moved is not None and moved[1] == "an empty file (0 bytes)"
    first.rebuild_report(root)
    assert second.set_aside() is None  # ... the second checks again under the lock and leaves the new one
    assert len(second.list_artifacts()) == 3
    assert len(list(root.glob("catalog.duckdb" + DAMAGED_SUFFIX + "*"))) == 1


def test_an_absent_catalog_is_no_damage(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog.duckdb")
    assert catalog.damage() is None and catalog.set_aside() is None
    assert catalog.rebuild_report(tmp_path).moved_aside is None


HOLD = """
import sys, time
import duckdb
con = duckdb.connect(sys.argv[1])
con.execute("SELECT 1")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def test_a_catalog_another_process_holds_is_not_damaged(root: Path) -> None:
    db = root / "catalog.duckdb"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db), "10"], stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        assert Catalog(db).damage() is None and Catalog(db).set_aside() is None
        assert time.monotonic() - t0 < 5  # a lock is answered at once, not waited for
        assert db.exists() and not list(root.glob("catalog.duckdb" + DAMAGED_SUFFIX + "*"))
    finally:
        holder.kill()
        holder.wait()


def test_quarantine_with_a_damaged_catalog_moves_the_files_and_warns(root: Path) -> None:
    db = root / "catalog.duckdb"
    db.write_bytes(b"")
    version = next((root / "ds" / "graph").iterdir())
    with pytest.warns(RuntimeWarning, match="strata catalog rebuild"):
        moved = quarantine(root, version, "test", Catalog(db))
    assert moved is not None and moved.is_dir() and not version.exists()
