"""ArtifactStore / ArtifactBuilder / Artifact: versions, atomic publishing, cleanup, real concurrency."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from storage_kernels.arrays import DATA_ALIGN, file_checksum
from storage_kernels.store import Artifact, ArtifactStore, compute_version

PARAMS = {"fanouts": [10, 5], "seed": 0, "name": "arxiv"}


def reference_version(stage: str, format_version: int, params: dict, upstream: dict) -> str:
    """The version by hand: sha256 of the canonical JSON, first 12 hex chars."""
    payload = {"format_version": format_version, "params": params, "stage": stage, "upstream": upstream}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def publish_simple(
    store: ArtifactStore, dataset: str, stage: str, params: dict, upstream: dict | None = None, rows: int = 4
) -> Artifact:
    upstream = upstream or {}
    version = store.version_for(stage, 1, params, upstream)
    with store.builder(dataset, stage, version, params, upstream, format_version=1) as b:
        b.save_array("ids", np.arange(rows, dtype=np.int64))
        b.stats["rows"] = rows
        return b.publish()


# ----------------------------------------------------------------------------------------- versions


def test_version_known_answer_and_canonical() -> None:
    v = compute_version("samples", 2, PARAMS, {"graph": "0123456789ab"})
    assert v == reference_version("samples", 2, PARAMS, {"graph": "0123456789ab"})
    assert len(v) == 12 and int(v, 16) >= 0
    shuffled = {"seed": 0, "name": "arxiv", "fanouts": (10, 5)}  # key order and tuple vs list don't matter
    assert ArtifactStore.version_for("samples", 2, shuffled, {"graph": "0123456789ab"}) == v
    assert compute_version("samples", 2, {**PARAMS, "seed": np.int64(0)}, {"graph": "0123456789ab"}) == v
    assert compute_version("samples", 3, PARAMS, {"graph": "0123456789ab"}) != v
    assert compute_version("samples", 2, {**PARAMS, "seed": 1}, {"graph": "0123456789ab"}) != v
    assert compute_version("samples", 2, PARAMS, {"graph": "0123456789ac"}) != v
    assert compute_version("plan", 2, PARAMS, {"graph": "0123456789ab"}) != v


@pytest.mark.parametrize(
    "args, match",
    [
        (("st", 1, {"x": float("nan")}, {}), "params' expected JSON-serialisable"),
        (("st", 1, {"x": object()}, {}), "params' expected JSON-serialisable"),
        (("st", 1, [1, 2], {}), "params' expected a dict"),
        (("st", "1", {}, {}), "format_version' expected an int"),
        (("bad stage", 1, {}, {}), "stage' expected letters"),
        (("st", 1, {}, {"graph": "../x"}), r"upstream\['graph'\]' expected"),
        (("st", 1, {}, ["graph"]), "upstream' expected a dict"),
    ],
)
def test_version_invalid_inputs(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compute_version(*args)


@pytest.mark.parametrize("bad", ["", "a/b", "..", ".tmp", "-x", "x y", "ü", "a" * 129, 3])
def test_names_are_validated(tmp_path: Path, bad: Any) -> None:
    store = ArtifactStore(tmp_path)
    with pytest.raises(ValueError, match="dataset' expected letters, digits"):
        store.path(bad, "graph", "0" * 12)
    with pytest.raises(ValueError, match="stage' expected letters, digits"):
        store.builder("ds", bad, "0" * 12, {}, {})
    assert not (tmp_path / ".tmp").exists() or not any((tmp_path / ".tmp").iterdir())


# --------------------------------------------------------------------------------------- publishing


def test_publish_roundtrip_all_file_kinds(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    upstream = {"graph": "aaaaaaaaaaaa"}
    v = store.version_for("packed", 1, PARAMS, upstream)
    feats = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    with store.builder("arxiv", "packed", v, PARAMS, upstream, format_version=1) as b:
        assert b.dir.parent == tmp_path / ".tmp" and str(os.getpid()) in b.dir.name
        b.save_array("features", feats)
        with b.array_writer("ids", np.int64) as w:
            w.append(np.arange(3))
            w.append(np.arange(3, 5))
        open_writer = b.array_writer("late", np.int32, (2,))
        open_writer.append(np.ones((3, 2), np.int32))  # closed by publish
        mm = b.allocate_array("tier", np.int8, (6,))
        mm[:] = [0, 1, 2, -1, 0, 1]
        b.add_file("packed.bin").write_bytes(b"\xab" * 5000)
        b.write_parquet("batches", pa.table({"batch": [0, 1], "split": ["train", "val"]}))
        b.write_json("extra", {"n": np.int64(3), "arr": np.arange(2)})
        b.stats.update(num_nodes=np.int64(6), rate=0.5)
        b.timings["pack_s"] = 1.25
        art = b.publish()
        assert not b.dir.exists()

    assert art.path == tmp_path / "arxiv" / "packed" / v and not any((tmp_path / ".tmp").iterdir())
    assert art.version == v and art.dataset == "arxiv" and art.stage == "packed"
    assert art.params == json.loads(json.dumps(PARAMS)) and art.upstream == upstream
    assert art.stats == {"num_nodes": 6, "rate": 0.5} and art.timings["pack_s"] == 1.25
    assert art.format_version == 1
    np.testing.assert_array_equal(art.array("features"), feats)
    np.testing.assert_array_equal(art.array("ids.npy"), np.arange(5))
    np.testing.assert_array_equal(art.array("late", mmap=False), np.ones((3, 2), np.int32))
    np.testing.assert_array_equal(art.array("tier"), [0, 1, 2, -1, 0, 1])
    assert art.file("packed.bin").read_bytes() == b"\xab" * 5000
    table = art.parquet("batches")
    assert table.column("split").to_pylist() == ["train", "val"]
    assert table.schema.metadata[b"strata.version"] == v.encode()
    assert art.json("extra") == {"n": 3, "arr": [0, 1]}

    on_disk = json.loads((art.path / "manifest.json").read_text())
    assert on_disk == art.manifest == Artifact(art.path).manifest
    expected_keys = {
        "stage",
        "dataset",
        "version",
        "format_version",
        "params",
        "upstream",
        "files",
        "stats",
        "timings",
        "created_at",
        "library_version",
        "integrity",
        "manifest_digest",
    }
    assert set(on_disk) == expected_keys
    assert on_disk["created_at"].endswith("+00:00") and on_disk["library_version"]
    files = {f["name"]: f for f in on_disk["files"]}
    assert sorted(files) == sorted(p.name for p in art.path.iterdir() if p.name != "manifest.json")
    for name, f in files.items():
        assert f["checksum"] == file_checksum(art.path / name) and f["bytes"] == (art.path / name).stat().st_size
    assert files["features.npy"]["shape"] == [6, 3] and files["features.npy"]["dtype"] == "<f4"
    assert files["features.npy"]["data_offset"] == DATA_ALIGN
    assert files["packed.bin"]["dtype"] is None and files["packed.bin"]["data_offset"] == 0
    assert art.verify() == len(files)

    assert store.find("arxiv", "packed", v) == art
    assert store.open("arxiv", "packed", v).manifest == art.manifest
    [row] = store.catalog.list_artifacts()
    assert (row["dataset"], row["stage"], row["version"], row["path"]) == (
        "arxiv",
        "packed",
        v,
        str(art.path),
    )
    assert row["bytes"] == sum(f["bytes"] for f in files.values()) and row["created_at"] == art.created_at


def test_artifact_lookup_errors(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path, catalog=False)
    art = publish_simple(store, "ds", "graph", {"a": 1})
    with store.builder("ds", "raw", "0" * 12, {}, {}) as b:
        b.add_file("blob.bin")
        raw = b.publish()
    with pytest.raises(KeyError, match=r"'labels' expected one of the files.*available: \['ids.npy'\]"):
        art.array("labels")
    with pytest.raises(KeyError, match="available"):
        art.file("ids")
    with pytest.raises(ValueError, match="blob.bin' expected an .npy array file"):
        raw.array("blob.bin")
    assert store.find("ds", "graph", "ffffffffffff") is None
    with pytest.raises(FileNotFoundError, match="ffffffffffff' expected a published artifact"):
        store.open("ds", "graph", "ffffffffffff")


def test_verify_names_the_corrupted_file(tmp_path: Path) -> None:
    art = publish_simple(ArtifactStore(tmp_path, catalog=False), "ds", "graph", {"a": 1})
    path = art.path / "ids.npy"
    data = bytearray(path.read_bytes())
    data[DATA_ALIGN] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"ids\.npy' expected checksum blake2b:"):
        art.verify()
    path.write_bytes(bytes(data[:100]))
    with pytest.raises(ValueError, match=r"ids\.npy' expected 8192 bytes \(got 100\)"):
        art.verify()


def test_builder_invalid_use(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    with pytest.raises(ValueError, match="'version' expected [0-9a-f]{12} for stage 'graph'"):
        store.builder("ds", "graph", "0" * 12, {"a": 1}, {}, format_version=1)
    with store.builder("ds", "graph", "0" * 12, {"a": 1}, {}) as b:
        b.save_array("x", np.arange(2))
        with pytest.raises(ValueError, match="'file name' expected a name not yet written"):
            b.save_array("x.npy", np.arange(2))
        with pytest.raises(ValueError, match="expected a name other than 'manifest.json'"):
            b.add_file("manifest.json")
        with pytest.raises(ValueError, match="'file name' expected letters"):
            b.add_file("../escape.bin")
        with pytest.raises(ValueError, match="expected a plain"):
            b.save_array("obj", np.array([None]))
        assert not (b.dir / "obj.npy").exists()
        b.save_array("obj", np.arange(3))  # a failed write frees its name
        with pytest.raises(ValueError, match="expected a pyarrow.Table"):
            b.write_parquet("t", {"a": [1]})
        with pytest.raises(ValueError, match="expected a JSON-serialisable object"):
            b.write_json("j", {"x": float("inf")})
        (b.dir / "sub").mkdir()
        with pytest.raises(ValueError, match="sub' expected a regular file"):
            b.publish()
        assert not b.dir.exists()  # a failed publish aborts
        with pytest.raises(ValueError, match="expected an open builder"):
            b.save_array("y", np.arange(2))
    assert store.find("ds", "graph", "0" * 12) is None


# ---------------------------------------------------------------------------------------- atomicity


def test_exception_in_builder_leaves_nothing(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    before = publish_simple(store, "ds", "graph", {"a": 1})
    with (
        pytest.raises(RuntimeError, match="stage failed"),
        store.builder("ds", "graph", before.version, {"a": 1}, {}) as b,
    ):
        b.save_array("ids", np.arange(100))
        w = b.array_writer("w", np.int64)
        w.append(np.arange(3))
        raise RuntimeError("stage failed")
    assert not b.dir.exists() and not any((tmp_path / ".tmp").iterdir())
    assert before.verify() == 1 and np.array_equal(before.array("ids"), np.arange(4))
    with pytest.raises(RuntimeError), store.builder("ds", "graph", "1" * 12, {"a": 2}, {}) as b2:
        b2.save_array("ids", np.arange(3))
        raise RuntimeError("again")
    assert store.find("ds", "graph", "1" * 12) is None
    assert [a["version"] for a in store.catalog.list_artifacts()] == [before.version]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EDQUOT])
def test_a_failed_write_that_names_no_file_is_named_by_the_build(tmp_path: Path, code: int) -> None:
    """A full disk fails Python's buffered write (or a C writer) without a file name: the builder names its dir."""
    store = ArtifactStore(tmp_path)
    with pytest.raises(OSError) as info, store.builder("ds", "g", "0" * 12, {}, {}) as b:
        b.save_array("x", np.arange(2))
        raise OSError(code, os.strerror(code))
    assert (info.value.errno, info.value.strerror, info.value.filename) == (code, os.strerror(code), str(b.dir))
    assert info.value.__cause__ is not None and info.value.__cause__.filename is None
    assert not b.dir.exists()
    named = OSError(errno.ENOSPC, "No space left on device", "/elsewhere/f.npy")
    with pytest.raises(OSError) as info, store.builder("ds", "g", "0" * 12, {}, {}):
        raise named
    assert info.value is named  # a file already named: unchanged
    with pytest.raises(FileNotFoundError) as info, store.builder("ds", "g", "0" * 12, {}, {}):
        raise FileNotFoundError(errno.ENOENT, "gone")  # not a failed write: unchanged
    assert info.value.filename is None


def test_leaving_without_publish_warns_and_cleans(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    builder = store.builder("ds", "g", "0" * 12, {}, {})
    with pytest.warns(RuntimeWarning, match="expected publish"), builder as b:
        b.save_array("x", np.arange(2))
    assert not b.dir.exists() and store.find("ds", "g", "0" * 12) is None


def test_publish_twice_is_a_noop(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    first = publish_simple(store, "ds", "graph", {"a": 1})
    second = publish_simple(store, "ds", "graph", {"a": 1}, rows=9)  # same version: existing one wins
    assert second == first and second.manifest == first.manifest
    assert np.array_equal(second.array("ids"), np.arange(4))
    assert len(store.catalog.list_artifacts()) == 1 and not any((tmp_path / ".tmp").iterdir())


def test_lost_rename_race_returns_winner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other process renames first, after our existence check: our rename fails, we return theirs."""
    store = ArtifactStore(tmp_path)
    v = store.version_for("graph", 1, {"a": 1}, {})
    loser = store.builder("ds", "graph", v, {"a": 1}, {}, format_version=1)
    loser.save_array("ids", np.arange(99))
    winner = publish_simple(store, "ds", "graph", {"a": 1})
    real_find = ArtifactStore.find
    calls = []

    def find_missing_once(self: ArtifactStore, *args: str) -> Artifact | None:
        calls.append(args)
        return None if len(calls) == 1 else real_find(self, *args)

    monkeypatch.setattr(ArtifactStore, "find", find_missing_once)
    got = loser.publish()
    assert len(calls) == 2 and got == winner and got.manifest == winner.manifest
    assert not loser.dir.exists() and winner.verify() == 1


def test_latest_and_artifacts(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path, catalog=False)
    assert store.latest("ds", "graph") is None
    a = publish_simple(store, "ds", "graph", {"a": 1})
    b = publish_simple(store, "ds", "graph", {"a": 2})
    publish_simple(store, "other", "graph", {"a": 3})
    assert store.latest("ds", "graph") == b
    assert store.artifacts("ds", "graph") == [a, b]


def test_store_without_catalog(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path, catalog=False)
    publish_simple(store, "ds", "graph", {"a": 1})
    assert not (tmp_path / "catalog.duckdb").exists()


def test_threads_publish_concurrently(tmp_path: Path) -> None:
    """Threads of one process share DuckDB's instance: concurrent transactions must all land."""
    store = ArtifactStore(tmp_path)
    with ThreadPoolExecutor(4) as pool:
        arts = list(pool.map(lambda k: publish_simple(store, "ds", "graph", {"k": k % 3}), range(6)))
    assert len({a.version for a in arts}) == 3
    assert sorted(r["version"] for r in store.catalog.list_artifacts()) == sorted({a.version for a in arts})
    assert not any((tmp_path / ".tmp").iterdir())


# ------------------------------------------------------------------------------------------ cleanup

REPO = Path(__file__).resolve().parents[2]

CRASH = """
import os, sys
import numpy as np
from storage_kernels.store import ArtifactStore
b = ArtifactStore(sys.argv[1]).builder("ds", "graph", "0" * 12, {}, {})
b.save_array("x", np.arange(10))
print(os.getpid(), flush=True)
os._exit(3)  # no cleanup, like kill -9
"""


def run_python(code: str, *args: str) -> subprocess.Popen:
    """A fresh interpreter (no state shared with the test process) running ``code``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_cleanup_removes_dirs_of_dead_processes(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    proc = run_python(CRASH, str(tmp_path))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    [left] = list((tmp_path / ".tmp").iterdir())
    assert left.name.startswith(f"{out.strip()}.") and (left / "x.npy").exists()  # pid.start-...

    live = store.builder("ds", "graph", "1" * 12, {}, {})  # ours: alive, must survive
    foreign = tmp_path / ".tmp" / "12345-00ff-some-other-host"  # other host: only removed by age
    foreign.mkdir()
    assert store.cleanup_tmp() == 1
    assert not left.exists() and live.dir.exists() and foreign.exists()
    old = time.time() - 3600
    os.utime(foreign, (old, old))
    assert store.cleanup_tmp(max_age_s=600) == 1
    assert not foreign.exists() and live.dir.exists()
    live.abort()
    assert store.cleanup_tmp() == 0 and ArtifactStore(tmp_path / "nothing").cleanup_tmp() == 0


# -------------------------------------------------------------------------------------- concurrency

PUBLISH = """
import json, os, sys, time
from pathlib import Path
import numpy as np
from storage_kernels.store import ArtifactStore
root, gate, n, dataset, stage = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
k = int(sys.argv[6])
store = ArtifactStore(root)
v = store.version_for(stage, 1, {"k": k}, {})
with store.builder(dataset, stage, v, {"k": k}, {}, format_version=1) as b:
    b.save_array("ids", np.arange(50_000, dtype=np.int64) + k)
    b.write_json("meta", {"k": k})
    b.stats["pid"] = os.getpid()
    (gate / str(os.getpid())).touch()
    deadline = time.monotonic() + 60
    while len(os.listdir(gate)) < n:  # a barrier: everyone publishes at the same moment
        assert time.monotonic() < deadline, "barrier timeout"
        time.sleep(0.001)
    art = b.publish()
print(json.dumps({"path": str(art.path), "created_at": art.created_at, "pid": art.stats["pid"]}))
"""

# Two processes race for the same version while two others publish different artifacts, all at once.
JOBS = [("ds", "graph", 7), ("ds", "graph", 7), ("ds", "samples", 1), ("other", "graph", 2)]


@pytest.fixture(scope="module")
def concurrent_publish(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    root, gate = tmp_path_factory.mktemp("root"), tmp_path_factory.mktemp("gate")
    procs = [run_python(PUBLISH, str(root), str(gate), str(len(JOBS)), d, s, str(k)) for d, s, k in JOBS]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    return root, results


def test_concurrent_processes_publish_different_artifacts(
    concurrent_publish: tuple[Path, list[dict]],
) -> None:
    root, results = concurrent_publish
    store = ArtifactStore(root)
    listed = store.catalog.list_artifacts()
    assert sorted(r["path"] for r in listed) == sorted({r["path"] for r in results})
    assert [(r["dataset"], r["stage"]) for r in listed] == [
        ("ds", "graph"),
        ("ds", "samples"),
        ("other", "graph"),
    ]
    for row in listed:
        art = Artifact(row["path"])
        assert art.verify() == 2 and art.array("ids")[0] == art.params["k"] == art.json("meta")["k"]
        assert row["created_at"] == art.created_at
    assert not any((root / ".tmp").iterdir())
    assert store.catalog.rebuild(root) == 3 and store.catalog.list_artifacts() == listed


def test_concurrent_processes_publish_the_same_version(concurrent_publish: tuple[Path, list[dict]]) -> None:
    root, results = concurrent_publish
    first, second = results[0], results[1]
    assert first == second  # same path, and both returned the winner's manifest (its pid and created_at)
    art = Artifact(first["path"])
    assert art.stats["pid"] == first["pid"] and art.verify() == 2
    assert [p.name for p in (root / "ds" / "graph").iterdir()] == [art.version]
    assert len(ArtifactStore(root).catalog.list_artifacts("ds", "graph")) == 1
