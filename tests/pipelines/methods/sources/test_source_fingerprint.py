"""Content fingerprints of source files: digests, the stat-keyed cache of large files, and its invalidation."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from pipelines.methods.sources import fingerprint
from pipelines.methods.sources.fingerprint import fingerprint_files
from storage_kernels.arrays import file_checksum


def test_fingerprint_is_path_size_and_content(tmp_path: Path) -> None:
    a = tmp_path / "a.csv"
    a.write_text("0,1\n")
    d = tmp_path / "dir"
    (d / "raw").mkdir(parents=True)
    (d / "raw" / "edge.csv").write_text("1,2\n")
    fp = fingerprint_files({"edges": a, "dir": d, "source": "synthetic:nodes=3"})
    assert fp["edges"] == {"path": str(a.resolve()), "bytes": 4, "digest": file_checksum(a)}
    entries = [["raw/edge.csv", 4, file_checksum(d / "raw" / "edge.csv")]]
    assert fp["dir"] == {"path": str(d.resolve()), "entries": entries}
    assert "source" not in fp  # not a file: a synthetic source's spec


def test_large_files_use_the_cache_until_their_ctime_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fingerprint, "CACHE_MIN_BYTES", 1)  # every file counts as large
    monkeypatch.setattr(fingerprint, "_RACY_S", 0.0)  # and may be cached although just written
    root, f = tmp_path / "root", tmp_path / "big.bin"
    f.write_bytes(b"abcd" * 100)
    first = fingerprint_files({"x": f}, root)["x"]["digest"]
    cache_path = root / ".cache" / "source-digests.json"
    cache = json.loads(cache_path.read_text())
    assert cache[str(f.resolve())]["digest"] == first
    cache[str(f.resolve())]["digest"] = "blake2b:from-the-cache"
    cache_path.write_text(json.dumps(cache))
    assert fingerprint_files({"x": f}, root)["x"]["digest"] == "blake2b:from-the-cache"  # stat unchanged: cached

    st = f.stat()
    time.sleep(0.05)  # past the filesystem's timestamp tick (what _RACY_S guards in real use)
    f.write_bytes(b"abce" * 100)  # same size ...
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and mtime; the ctime moved on
    assert fingerprint_files({"x": f}, root)["x"]["digest"] == file_checksum(f) != first


def test_a_fresh_file_is_not_cached_and_a_damaged_cache_is_ignored(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fingerprint, "CACHE_MIN_BYTES", 1)
    root, f = tmp_path / "root", tmp_path / "big.bin"
    f.write_bytes(b"x" * 100)
    fingerprint_files({"x": f}, root)
    assert not (root / ".cache" / "source-digests.json").exists()  # ctime within _RACY_S: could still change
    (root / ".cache").mkdir(parents=True)
    (root / ".cache" / "source-digests.json").write_text("{broken")
    assert fingerprint_files({"x": f}, root)["x"]["digest"] == file_checksum(f)
