"""Catalog: known answers from hand-written manifests, upserts, prefixes, rebuild, lock retry."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

from storage_kernels.catalog import Catalog, CatalogLockTimeout
from storage_kernels.store import ArtifactStore

REPO = Path(__file__).resolve().parents[2]


def manifest(version: str = "abc123def456", **over: Any) -> dict[str, Any]:
    m = {
        "dataset": "arxiv",
        "stage": "samples",
        "version": version,
        "format_version": 2,
        "params": {"fanouts": [10, 5]},
        "upstream": {"ordering": "111111111111", "partitioning": "222222222222"},
        "files": [
            {"name": "nodes.npy", "dtype": "<i8", "shape": [7], "bytes": 8192, "checksum": "blake2b:aa",
             "data_offset": 4096},
            {"name": "batches.parquet", "dtype": None, "shape": None, "bytes": 900, "checksum": "blake2b:bb",
             "data_offset": 0},
        ],
        "stats": {"num_batches": 3},
        "timings": {"total_s": 0.5},
        "created_at": "2025-01-02T03:04:05.123456+00:00",
        "library_version": "0.1.0",
    }  # fmt: skip
    m.update(over)
    return m


def test_record_and_read_known_answer(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "catalog.duckdb")
    cat.record_artifact(manifest(), tmp_path / "arxiv" / "samples" / "abc123def456")
    expected = {
        "dataset": "arxiv",
        "stage": "samples",
        "version": "abc123def456",
        "path": str((tmp_path / "arxiv" / "samples" / "abc123def456").resolve()),
        "bytes": 9092,
        "created_at": "2025-01-02T03:04:05.123456+00:00",
        "format_version": 2,
        "library_version": "0.1.0",
        "params": {"fanouts": [10, 5]},
        "stats": {"num_batches": 3},
    }
    assert cat.list_artifacts() == [expected]
    got = cat.get("abc123def456")
    assert got is not None
    assert {k: got[k] for k in expected} == expected
    assert got["files"] == [
        {"name": "batches.parquet", "dtype": None, "shape": None, "bytes": 900, "checksum": "blake2b:bb",
         "data_offset": 0},
        {"name": "nodes.npy", "dtype": "<i8", "shape": (7,), "bytes": 8192, "checksum": "blake2b:aa",
         "data_offset": 4096},
    ]  # fmt: skip
    assert got["lineage"] == {"ordering": "111111111111", "partitioning": "222222222222"}
    assert got["metrics"] == [] and got["downstream"] == []


def test_record_is_an_idempotent_upsert(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "c.duckdb")
    cat.record_artifact(manifest(), tmp_path)
    cat.record_artifact(manifest(), tmp_path)
    changed = manifest(files=[manifest()["files"][0]], stats={"num_batches": 4}, upstream={})
    cat.record_artifact(changed, tmp_path)
    [row] = cat.list_artifacts()
    assert row["stats"] == {"num_batches": 4} and row["bytes"] == 8192
    got = cat.get("abc")
    assert got is not None and [f["name"] for f in got["files"]] == ["nodes.npy"] and got["lineage"] == {}


def test_list_filters_order_and_prefixes(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "c.duckdb")
    cat.record_artifact(manifest("abc000000001", created_at="2025-01-03T00:00:00+00:00"), tmp_path / "a")
    cat.record_artifact(manifest("abc000000002", created_at="2025-01-01T00:00:00Z"), tmp_path / "b")
    cat.record_artifact(manifest("fff000000000", stage="plan", upstream={"samples": "abc000000001"}), tmp_path)
    cat.record_artifact(manifest("abc000000001", dataset="cora"), tmp_path / "c")
    assert [a["version"] for a in cat.list_artifacts("arxiv", "samples")] == ["abc000000002", "abc000000001"]
    assert [a["dataset"] for a in cat.list_artifacts(stage="samples")] == ["arxiv", "arxiv", "cora"]
    assert [a["stage"] for a in cat.list_artifacts(dataset="arxiv")] == ["plan", "samples", "samples"]
    assert cat.get("fff")["stage"] == "plan"  # type: ignore[index]
    assert cat.get("abc000000002")["created_at"] == "2025-01-01T00:00:00.000000+00:00"  # type: ignore[index]
    got = cat.get("abc000000001", dataset="arxiv")
    assert got is not None and got["downstream"] == [{"dataset": "arxiv", "stage": "plan", "version": "fff000000000"}]
    with pytest.raises(ValueError, match=r"'version' expected a unique prefix \(got 'abc', matching arxiv/samples"):
        cat.get("abc")
    with pytest.raises(ValueError, match="matching arxiv/samples/abc000000001, cora/samples/abc000000001"):
        cat.get("abc000000001")
    with pytest.raises(ValueError, match="'version' expected a non-empty string"):
        cat.get("")


def test_metrics(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "c.duckdb")
    cat.record_artifact(manifest(), tmp_path)
    cat.record_metrics("arxiv", "samples", "abc123def456", {"loss": 0.5, "acc": np.float32(0.75)}, step=3)
    cat.record_metrics("arxiv", "samples", "abc123def456", {"loss": 0.25}, step=4)
    got = cat.get("abc123def456")
    assert got is not None
    assert [(m["key"], m["value"], m["step"]) for m in got["metrics"]] == [
        ("acc", 0.75, 3), ("loss", 0.5, 3), ("loss", 0.25, 4)
    ]  # fmt: skip
    assert all(m["recorded_at"].endswith("+00:00") for m in got["metrics"])
    with pytest.raises(ValueError, match=r"'metrics\['loss'\]' expected a number \(got 'high'\)"):
        cat.record_metrics("arxiv", "samples", "abc123def456", {"loss": "high"})
    with pytest.raises(ValueError, match="'metrics' expected a dict"):
        cat.record_metrics("arxiv", "samples", "abc123def456", [("loss", 1.0)])  # type: ignore[arg-type]


def test_missing_catalog_reads_empty_without_creating_it(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "sub" / "c.duckdb")
    assert cat.list_artifacts() == [] and cat.get("abc") is None
    assert not (tmp_path / "sub").exists()
    Catalog(tmp_path / "c.duckdb").record_artifact(manifest(), tmp_path)
    assert Catalog(tmp_path / "c.duckdb").get("0123") is None


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"dataset": None}, r"expected manifest keys \['dataset'\]"),
        ({"created_at": "yesterday"}, "created_at' expected an ISO-8601 timestamp"),
        ({"files": [{"name": "x"}]}, "files' expected a list of FileInfo dicts"),
        ({"upstream": ["graph"]}, "upstream' expected a dict"),
        ({"files": [manifest()["files"][0]] * 2}, "files' expected unique file names"),
    ],
)
def test_invalid_manifests(tmp_path: Path, bad: dict, match: str) -> None:
    m = manifest(**bad)
    m = {k: v for k, v in m.items() if v is not None}
    with pytest.raises(ValueError, match=match):
        Catalog(tmp_path / "c.duckdb").record_artifact(m, tmp_path)


def test_reads_share_an_open_connection_in_this_process(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "c.duckdb")
    cat.record_artifact(manifest(), tmp_path)
    held = duckdb.connect(str(tmp_path / "c.duckdb"))  # e.g. a dashboard in the same process
    try:
        assert len(cat.list_artifacts()) == 1
        cat.record_metrics("arxiv", "samples", "abc123def456", {"x": 1.0})
        assert held.execute("SELECT count(*) FROM metrics").fetchone() == (1,)
    finally:
        held.close()


# ------------------------------------------------------------------------------------------ rebuild


def _publish(store: ArtifactStore, dataset: str, stage: str, k: int, upstream: dict[str, str]) -> str:
    v = store.version_for(stage, 1, {"k": k}, upstream)
    with store.builder(dataset, stage, v, {"k": k}, upstream, format_version=1) as b:
        b.save_array("ids", np.arange(k + 1))
        b.add_file("blob.bin").write_bytes(b"x" * k)
        b.stats["k"] = k
        b.publish()
    return v


def test_rebuild_from_manifests_gives_the_same_listing(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    g = _publish(store, "ds", "graph", 1, {})
    s = _publish(store, "ds", "samples", 2, {"graph": g})
    _publish(store, "ds2", "graph", 3, {})
    cat = store.catalog
    assert cat is not None
    cat.record_metrics("ds", "samples", s, {"acc": 0.5})
    listed, detail = cat.list_artifacts(), cat.get(s)
    assert len(listed) == 3

    (tmp_path / ".tmp" / "123-ab-host").mkdir(parents=True)  # leftovers are not artifacts
    (tmp_path / ".tmp" / "123-ab-host" / "manifest.json").write_text("{}")
    assert cat.rebuild(tmp_path) == 3  # in place: metrics are kept
    assert cat.list_artifacts() == listed and cat.get(s) == detail

    for p in tmp_path.glob("catalog.duckdb*"):
        p.unlink()
    assert cat.list_artifacts() == []
    assert cat.rebuild(tmp_path) == 3  # from scratch: the manifests' metrics are back, the rest is identical
    assert cat.list_artifacts() == listed
    rebuilt = cat.get(s)
    assert rebuilt is not None and {**rebuilt, "metrics": []} == {**detail, "metrics": []}
    assert {m["key"]: m["value"] for m in rebuilt["metrics"]}["k"] == 2.0  # stats.k; "acc" was never in it
    assert cat.get(g)["downstream"] == [{"dataset": "ds", "stage": "samples", "version": s}]  # type: ignore[index]


def test_rebuild_skips_and_reports_a_misplaced_or_broken_manifest(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    v = _publish(store, "ds", "graph", 1, {})
    _publish(store, "ds", "graph", 2, {})
    (tmp_path / "ds" / "graph" / v).rename(tmp_path / "ds" / "graph" / "000000000000")
    report = Catalog(tmp_path / "catalog.duckdb").rebuild_report(tmp_path)
    assert report.indexed == 1 and len(report.skipped) == 1
    assert re.search(r"manifest.json' expected dataset/stage/version \('ds', 'graph', '0000", report.skipped[0][1])
    (tmp_path / "ds" / "graph" / "000000000000" / "manifest.json").write_text("{not json")
    report = Catalog(tmp_path / "catalog.duckdb").rebuild_report(tmp_path)
    assert report.indexed == 1 and "manifest.json' expected a JSON manifest" in report.skipped[0][1]


# ---------------------------------------------------------------------------------- lock conflicts

HOLD_LOCK = """
import sys, time
import duckdb
con = duckdb.connect(sys.argv[1])
con.execute("SELECT 1")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def test_writes_retry_while_another_process_holds_the_lock(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    cat = Catalog(db)
    cat.record_artifact(manifest(), tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(db), "1.5"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        with pytest.raises(CatalogLockTimeout, match=r"c\.duckdb' expected the catalog lock within 0.2 s"):
            Catalog(db, timeout_s=0.2).record_metrics("arxiv", "samples", "abc123def456", {"x": 1.0})
        assert time.monotonic() - t0 < 1.0
        cat.record_metrics("arxiv", "samples", "abc123def456", {"x": 2.0})  # waits for the holder
        # the lock is free once the holder closes its connection after sleeping 1.5 s (its process may still
        # be shutting down then, so poll() is no evidence either way)
        assert time.monotonic() - t0 >= 1.2
        assert len(cat.list_artifacts()) == 1
        got = cat.get("abc")
        assert got is not None and [m["value"] for m in got["metrics"]] == [2.0]
    finally:
        holder.kill()
        holder.wait()


def test_schema_file_is_the_ddl(tmp_path: Path) -> None:
    from storage_kernels.catalog import DDL_PATH

    ddl = DDL_PATH.read_text()
    assert ddl.count("CREATE TABLE IF NOT EXISTS") == 4
    Catalog(tmp_path / "c.duckdb").record_metrics("d", "s", "v", {"a": 1.0})
    con = duckdb.connect(str(tmp_path / "c.duckdb"), read_only=True)
    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    finally:
        con.close()
    assert tables == {"artifacts", "files", "lineage", "metrics"}
    assert json.loads(json.dumps(sorted(tables)))  # plain names only
    assert not list(tmp_path.glob(".c.duckdb.*"))  # the private creation file is gone
