"""Content fingerprints of a source's input files: what the ``ingest`` version hashes.

A file's fingerprint is its resolved path, size and the blake2b digest of its bytes, so a file rewritten with
the same size and modification time still gives a new ``ingest`` version (and a touched but unchanged file
does not). Hashing reads the whole file (hashlib's C code, ~0.7 GB/s per core); for files of at least
:data:`CACHE_MIN_BYTES` the digest is cached in ``<root>/.cache/source-digests.json`` keyed by
(device, inode, size, mtime, ctime). Any write, truncation, replacement or ``utime`` through the filesystem
changes the ctime, which user space cannot set back, so a cached digest is only used for bytes that did not
change; a digest is cached only when the file's ctime was at least :data:`_RACY_S` old when it was hashed
(a write within the same timestamp tick would otherwise keep the ctime).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from storage_kernels.arrays import file_checksum

__all__ = ["CACHE_MIN_BYTES", "file_fingerprint", "fingerprint_files"]

#: Files at least this large have their digests cached (smaller ones are always hashed).
CACHE_MIN_BYTES = 64 << 20
_RACY_S = 2.0
_CACHE_FILE = Path(".cache") / "source-digests.json"


def _stat_key(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class _DigestCache:
    """The stat-keyed digest cache of one data root (None: no cache)."""

    def __init__(self, root: Path | None) -> None:
        self.path = None if root is None else Path(root) / _CACHE_FILE
        self.entries: dict[str, Any] = {}
        self.dirty = False
        if self.path is not None and self.path.is_file():
            try:
                loaded = json.loads(self.path.read_text(encoding="utf8"))
                self.entries = loaded if isinstance(loaded, dict) else {}
            except (OSError, ValueError):
                self.entries = {}  # a damaged cache only costs re-hashing

    def digest(self, path: Path) -> str:
        st = path.stat()
        key = str(path)
        cached = self.entries.get(key)
        if self.path is not None and st.st_size >= CACHE_MIN_BYTES and isinstance(cached, dict) \
                and cached.get("stat") == _stat_key(st):
            return str(cached["digest"])
        started = time.time()
        digest = file_checksum(path)
        after = path.stat()
        if self.path is not None and after.st_size >= CACHE_MIN_BYTES and _stat_key(after) == _stat_key(st) \
                and started - st.st_ctime_ns / 1e9 >= _RACY_S:
            self.entries[key] = {"stat": _stat_key(st), "digest": digest}
            self.dirty = True
        return digest

    def save(self) -> None:
        """Write the cache atomically (a concurrent writer may win: its entries are as good)."""
        if self.path is None or not self.dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
            tmp.write_text(json.dumps(self.entries, sort_keys=True), encoding="utf8")
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only root: digests are recomputed next time


def file_fingerprint(path: str | os.PathLike[str], cache: _DigestCache | None = None) -> dict[str, Any]:
    """``{"path", "bytes", "digest"}`` of one file (``digest`` is ``blake2b:<hex>`` of its content)."""
    p = Path(path).resolve()
    return {"path": str(p), "bytes": p.stat().st_size, "digest": (cache or _DigestCache(None)).digest(p)}


def fingerprint_files(files: Mapping[str, str | os.PathLike[str]], root: str | os.PathLike[str] | None = None
                      ) -> dict[str, Any]:
    """Role -> fingerprint of every input file; a directory gives ``entries``: (relative name, bytes, digest)
    of each file under it. ``root``: the data root whose digest cache large files use (None: no cache)."""
    cache = _DigestCache(None if root is None else Path(root))
    out: dict[str, Any] = {}
    for role, path in sorted(files.items()):
        p = Path(path)
        if p.is_file():
            out[role] = file_fingerprint(p, cache)
        elif p.is_dir():
            entries = []
            for f in sorted(q for q in p.rglob("*") if q.is_file()):
                fp = file_fingerprint(f, cache)
                entries.append([str(f.relative_to(p)), fp["bytes"], fp["digest"]])
            out[role] = {"path": str(p.resolve()), "entries": entries}
    cache.save()
    return out
