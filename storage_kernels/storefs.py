"""The artifact store's tree on disk: its reserved names, the names of temp entries and how to tell their
owner, the published directories, the last-use time of a version, and the fsync / rmtree helpers that
publishing and cleanup share.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

from .owner import Owner, host_name
from .versions import VERSION_CHARS

__all__ = ["CATALOG_NAME", "MANIFEST_NAME", "RESUME_NAME", "TMP_NAME", "mark_used", "owned_tmp_name",
           "published_dirs", "unpublished_dirs"]

MANIFEST_NAME = "manifest.json"
CATALOG_NAME = "catalog.duckdb"
TMP_NAME = ".tmp"
#: Under the temp dir: checkpoints of interrupted stages, kept for a resume (``ArtifactStore.resume_dir``).
RESUME_NAME = "resume"
_VERSION_RE = re.compile(f"[0-9a-f]{{{VERSION_CHARS}}}")  # a version directory's name


def _owned_here(name: str, host: str) -> re.Match[str] | None:
    """The owner fields of a temp entry of this host: a builder dir ``<pid>.<start>-<id>-<host>`` or one of its
    scratch siblings ``<builder dir>.<...>scratch<...>`` (reorder's ``.scratch`` buckets, ingest's
    ``.edges.scratch.npy``; a host may contain dots, so these read as owned by a host ``<host>.scratch`` unless
    this host's name is matched exactly, and were never removed after a kill)."""
    return re.fullmatch(r"(?P<pid>\d+)(?:\.(?P<start>\d+))?-(?P<id>[0-9a-f]+)-(?P<host>" + re.escape(host)
                        + r")(?:(?:\.[A-Za-z0-9_-]+)*\.scratch(?:\.[A-Za-z0-9_-]+)*)?", name)


def owned_tmp_name(label: str = "") -> str:
    """A name for a temp entry of this process: ``<pid>.<start>-<id>-<host>`` (a builder dir's form), plus
    ``.<label>.scratch`` when labelled (a scratch sibling's). :meth:`ArtifactStore.cleanup_tmp` removes such an
    entry of the store's temp dir once its process is gone (the start time keeps a reused pid from keeping it)."""
    me = Owner.me()
    start = f".{me.start}" if me.start is not None else ""
    base = f"{me.pid}{start}-{uuid.uuid4().hex[:16]}-{me.host}"
    return f"{base}.{label}.scratch" if label else base


def _fsync_path(path: Path) -> None:
    """fsync a file or directory by path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _host() -> str:
    return host_name()


def _rmtree(path: Path) -> None:
    """Remove a directory tree; entries that vanish meanwhile (a concurrent cleanup) are fine."""

    def ignore_missing(func: Any, p: str, exc: Any) -> None:
        err = exc if isinstance(exc, BaseException) else exc[1]
        if not isinstance(err, FileNotFoundError):
            raise err

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=ignore_missing)
    else:
        shutil.rmtree(path, onerror=ignore_missing)


def published_dirs(root: str | Path, dataset: str | None = None) -> list[Path]:
    """Every published artifact directory under ``root`` (optionally one dataset's), hidden ones (``.tmp``,
    ``.quarantine``) excluded; found from the manifests on disk, not the catalog."""
    root = Path(root)
    pattern = f"{dataset}/*/*/{MANIFEST_NAME}" if dataset else f"*/*/*/{MANIFEST_NAME}"
    return [m.parent for m in sorted(root.glob(pattern))
            if not any(p.startswith(".") for p in m.parent.relative_to(root).parts)]


def unpublished_dirs(root: str | Path, dataset: str | None = None) -> list[Path]:
    """Version directories (``<dataset>/<stage>/<12 hex>``) under ``root`` that hold files but no manifest: never
    a published artifact (publishing renames a complete directory, manifest included, into place), so a manifest
    deleted by hand or a copy cut short. Empty ones (a rebuilt artifact is renamed over them) and hidden ones
    (``.tmp``, ``.quarantine``) are excluded."""
    root = Path(root)
    pattern = f"{dataset}/*/*" if dataset else "*/*/*"
    return [d for d in sorted(root.glob(pattern))
            if _VERSION_RE.fullmatch(d.name) and d.is_dir() and not (d / MANIFEST_NAME).exists()
            and any(d.iterdir()) and not any(p.startswith(".") for p in d.relative_to(root).parts)]


def mark_used(path: str | Path) -> None:
    """Record that a run used the artifact at ``path`` now: its directory's mtime, which ``strata gc`` reads as
    the version's last use (the manifest stays untouched). Best effort: a read-only store keeps its times."""
    with contextlib.suppress(OSError):
        os.utime(path)
