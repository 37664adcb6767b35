"""A flipped bit in a data block of the catalog is found by the check every run makes at its start
(``pipelines.ops.recovery.repair_catalog``, which reads every table through one aggregate), and one in a block
only a write reads (a primary key's index) is healed by that write: the store's catalog moves the file aside,
rebuilds it from the manifests, warns once and goes on.

The catalog holds 3,000 extra artifacts (inserted in bulk, no manifests) besides the three published ones, so that
each table has blocks of its own. DuckDB's block checksum is a XOR of per-word products: a run of identical
words flipped the same way cancels out, so these tests flip one bit, as a disk does.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import duckdb
import numpy as np
import pytest

from pipelines.core.paths import StrataPaths
from pipelines.ops.recovery import repair_catalog
from storage_kernels.catalog import DAMAGED_SUFFIX, Catalog, CatalogDamaged
from storage_kernels.store import ArtifactStore

HEADER, BLOCK = 3 * 4096, 256 * 1024  # DuckDB's three file headers, then blocks of 256 KiB by id
TABLES = ("artifacts", "files", "lineage", "metrics")
BULK = 3000


def _publish(store: ArtifactStore, stage: str, k: int) -> str:
    v = store.version_for(stage, 1, {"k": k}, {})
    with store.builder("ds", stage, v, {"k": k}, {}, format_version=1) as b:
        b.save_array("ids", np.arange(k + 1))
        b.stats["k"] = k
        b.publish()
    return v


@pytest.fixture
def root(tmp_path: Path) -> Path:
    store = ArtifactStore(tmp_path)
    for k in (1, 2, 3):
        _publish(store, "graph", k)
    con = duckdb.connect(str(tmp_path / "catalog.duckdb"))
    try:
        con.execute(f"INSERT INTO artifacts SELECT 'bulk', 'graph', printf('%012x', i), '/nowhere/' || i, i, "
                    f"TIMESTAMP '2024-01-01', 1, '0', '{{}}', '{{}}' FROM range({BULK}) t(i)")
        con.execute(f"INSERT INTO files SELECT 'bulk', 'graph', printf('%012x', i), 'f' || j || '.npy', '<i8', "
                    f"[i, j], 4096, 'blake2b:' || md5(i::VARCHAR || j::VARCHAR), 4096 FROM range({BULK}) t(i), "
                    "range(6) s(j)")
        con.execute(f"INSERT INTO lineage SELECT 'bulk', 'graph', printf('%012x', i), 'up', printf('%012x', i + 1) "
                    f"FROM range({BULK}) t(i)")
        con.execute(f"INSERT INTO metrics SELECT 'bulk', 'graph', printf('%012x', i), 'k' || j, i * j, NULL, "
                    f"TIMESTAMP '2024-01-01' FROM range({BULK}) t(i), range(10) s(j)")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return tmp_path


def _blocks(db: Path) -> dict[str, list[int]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {t: sorted({r[0] for r in con.execute(
            f"SELECT block_id FROM pragma_storage_info('{t}') WHERE block_id >= 0").fetchall()}) for t in TABLES}
    finally:
        con.close()


def _flip_bit(db: Path, good: bytes, block: int) -> bytes:
    """``good`` with one bit flipped in the middle of ``block``, written to ``db`` (no WAL beside it)."""
    bad = bytearray(good)
    bad[HEADER + block * BLOCK + BLOCK // 2 + 3] ^= 0x10
    db.write_bytes(bytes(bad))
    db.with_name(db.name + ".wal").unlink(missing_ok=True)
    return bytes(bad)


def _listing(root: Path) -> list[tuple[str, str, str]]:
    return sorted((a["dataset"], a["stage"], a["version"]) for a in Catalog(root / "catalog.duckdb").list_artifacts())


@pytest.mark.parametrize("table", TABLES)
def test_the_check_at_run_start_finds_a_flipped_bit_in_a_data_block(root: Path, table: str) -> None:
    db = root / "catalog.duckdb"
    good = db.read_bytes()
    blocks = _blocks(db)[table]
    assert blocks, f"no block of its own for {table}"
    for block in (blocks[0], blocks[-1]):
        bad = _flip_bit(db, good, block)
        why = Catalog(db).damage()
        assert why is not None and "checksum" in why, (table, block)
        line = repair_catalog(StrataPaths(root))  # what every `strata run` does at its start
        assert line.startswith(f"catalog {db} was damaged (Corrupt database file: computed checksum"), line
        assert line.endswith("rebuilt from 3 manifests"), line
        aside = list(root.glob("catalog.duckdb" + DAMAGED_SUFFIX + "*"))
        assert [p.read_bytes() for p in aside] == [bad]
        aside[0].unlink()
    db.write_bytes(good)
    assert Catalog(db).damage() is None


def _data_blocks(db: Path) -> set[int]:
    return {b for blocks in _blocks(db).values() for b in blocks}


def _record_artifact(catalog: Catalog, root: Path) -> None:
    """A write that looks its key up in the primary key's index."""
    catalog.record_artifact({"dataset": "ds", "stage": "graph", "version": "0" * 12, "files": [],
                             "created_at": "2024-01-01T00:00:00+00:00"}, root / "nowhere")


def _record_bulk_metric(catalog: Catalog, root: Path) -> None:
    """A write that scans the metric rows of a bulk artifact (replacing the row it finds)."""
    catalog.record_metrics("bulk", "graph", f"{5:012x}", {"k1": 2.0})


def _index_block_a_write_reads(root: Path, good: bytes) -> int | None:
    """A block the run-start check does not read but a write (a key lookup in a primary key's index) does."""
    db = root / "catalog.duckdb"
    skip = _data_blocks(db) | {0}
    for block in range((len(good) - HEADER) // BLOCK):
        if block in skip:
            continue
        _flip_bit(db, good, block)
        if Catalog(db).damage() is not None:
            continue
        try:
            _record_artifact(Catalog(db), root)
        except CatalogDamaged:
            return block
    db.write_bytes(good)
    return None


@pytest.mark.parametrize("where", ["metrics data block", "index block"])
def test_a_write_that_meets_a_corrupt_block_rebuilds_the_catalog_and_goes_on(root: Path, where: str) -> None:
    db = root / "catalog.duckdb"
    good = db.read_bytes()
    if where == "index block":
        block, write = _index_block_a_write_reads(root, good), _record_artifact
        if block is None:
            pytest.skip("no index block that only a write reads in this DuckDB's layout")
    else:
        block, write = _blocks(db)["metrics"][0], _record_bulk_metric
    bad = _flip_bit(db, good, block)
    with pytest.raises(CatalogDamaged):  # a catalog opened without heal_from says so, as before
        write(Catalog(db), root)
    assert db.read_bytes() == bad

    store = ArtifactStore(root)  # the store's catalog heals: the write succeeds, and the run goes on
    assert store.catalog is not None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write(store.catalog, root)
        new = _publish(store, "graph", 4)
    damage = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(damage) == 1, damage
    assert "checksum" in damage[0] and "moved to catalog.duckdb" + DAMAGED_SUFFIX in damage[0]
    assert "rebuilt from 3 manifests" in damage[0]
    kept = [p for p in root.glob("catalog.duckdb" + DAMAGED_SUFFIX + "*") if not p.name.endswith(".wal")]
    assert [p.read_bytes() for p in kept] == [bad]  # kept as it was, for inspection
    assert Catalog(db).damage() is None
    published = [store.version_for("graph", 1, {"k": k}, {}) for k in (1, 2, 3)] + [new]
    expected = sorted(("ds", "graph", v) for v in published)
    if where == "index block":  # the write that healed it indexed its own artifact in the fresh file
        expected = sorted([*expected, ("ds", "graph", "0" * 12)])
    assert _listing(root) == expected
