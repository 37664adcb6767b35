"""Fingerprints of a dataset's source files, cheap when nothing changed (what the source sensor compares).

A snapshot maps every file the source reads (directories walked) to its size, mtime and SHA-256. Taking a new
snapshot against the previous one hashes only the files whose size or mtime changed, so an untouched source
costs one ``stat`` per file, and a file that was touched but not modified (same content) keeps the same
fingerprint: no false trigger. The fingerprint is the SHA-256 of the sorted (path, content hash) pairs.

Snapshots are plain JSON-ready dicts, so they live in a Dagster sensor's cursor. No Dagster import here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipelines.config import PipelineConfig

__all__ = ["Snapshot", "file_sha256", "fingerprint", "source_files", "source_key", "take_snapshot"]

#: path -> {"bytes": int, "mtime_ns": int, "sha256": str}
Snapshot = dict[str, dict[str, Any]]
_HASH_BLOCK = 1 << 22


def source_key(cfg: PipelineConfig) -> str:
    """What selects a source's files: the dataset spec and its ingest options (hashed)."""
    text = json.dumps({"dataset": cfg.dataset, "options": dict(cfg.ingest.options)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def source_files(cfg: PipelineConfig) -> dict[str, str]:
    """Role -> absolute path of every file or directory ``cfg``'s source reads ({} for a synthetic source).

    Opens the source (a reader may scan a file to learn its size), so callers cache the answer per
    :func:`source_key`.
    """
    from pipelines.methods.sources.spec import parse_source_spec

    source = parse_source_spec(cfg.dataset, cfg.ingest.options)
    return {role: str(Path(p).resolve()) for role, p in sorted(source.files.items()) if Path(p).exists()}


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes (hashlib hashes each block in C without the GIL)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _files_under(paths: Mapping[str, str]) -> list[Path]:
    out: set[Path] = set()
    for p in map(Path, paths.values()):
        if p.is_file():
            out.add(p)
        elif p.is_dir():
            out.update(f for f in p.rglob("*") if f.is_file())
    return sorted(out)


def take_snapshot(paths: Mapping[str, str], previous: Snapshot | None = None) -> Snapshot:
    """The snapshot of the files under ``paths`` (role -> file or directory); a file whose size and mtime
    equal ``previous``'s keeps its recorded hash, every other one is hashed."""
    previous = previous or {}
    snapshot: Snapshot = {}
    for f in _files_under(paths):
        st = f.stat()
        key = str(f)
        old = previous.get(key)
        if old is not None and old.get("bytes") == st.st_size and old.get("mtime_ns") == st.st_mtime_ns:
            digest = old["sha256"]
        else:
            digest = file_sha256(f)
        snapshot[key] = {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    return snapshot


def fingerprint(snapshot: Snapshot) -> str:
    """The content fingerprint of a snapshot: equal exactly when the same paths hold the same bytes."""
    text = json.dumps(sorted((path, entry["sha256"]) for path, entry in snapshot.items()))
    return hashlib.sha256(text.encode()).hexdigest()
