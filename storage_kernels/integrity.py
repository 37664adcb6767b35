"""Artifact integrity: checksums verified on reuse, sampled block digests, quarantine of corrupted artifacts.

Every file of an artifact has a whole-file ``blake2b`` checksum in its manifest (written at publish). This
module checks a published artifact against its manifest before anything reads it again:

``full``
    Re-hash every file (hashlib's C code, 8 MiB blocks, one thread per file). Any changed byte is caught.
``sampled``
    Size, plus the digests of sampled 1 MiB blocks recorded at publish (``manifest["integrity"]``): the
    first and last block and :data:`SAMPLE_BLOCKS` more at evenly spaced offsets. Files of at most
    ``SAMPLE_BLOCKS + 2`` blocks are covered completely; in larger files a change outside the sampled blocks
    is *not* caught. Manifests written before block digests existed are checked by size only.
``off``
    Nothing is read.

The manifest itself carries ``manifest_digest`` (blake2b of its canonical JSON without that key), so a
changed value in a manifest that still parses is caught in every mode but ``off``. Both kinds of digest are
computed in :mod:`storage_kernels.digests` (the builder writes them at publish); this module only compares.

A corrupted artifact is moved aside to ``<root>/.quarantine/<dataset>/<stage>/<version>-<time>`` (a hidden
directory: the store, the catalog rebuild and ``strata verify`` never see it) and removed from the catalog, so
the next run rebuilds it; :func:`find_verified` then raises :class:`ArtifactCorrupted` naming the artifact,
the file and the expected and actual digests.
"""

from __future__ import annotations

import json
import os
import time
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from .arrays import file_checksum
from .digests import (  # the digests written at publish; the public ones answer here too, as before
    _ALGORITHM,
    BLOCK_BYTES,
    SAMPLE_BLOCKS,
    _block_digest,
    block_digests,
    manifest_digest,
    sample_offsets,
)
from .digests import integrity_record as integrity_record  # outside __all__, as before
from .store import Artifact, ArtifactStore, mark_used

__all__ = [
    "BLOCK_BYTES",
    "MODES",
    "QUARANTINE_NAME",
    "SAMPLE_BLOCKS",
    "ArtifactCheck",
    "ArtifactCorrupted",
    "FileCheck",
    "block_digests",
    "check_file",
    "check_manifest",
    "find_verified",
    "manifest_digest",
    "quarantine",
    "sample_offsets",
    "verify_artifact",
    "verify_manifest_dir",
]

Mode = Literal["full", "sampled", "off"]
#: Verification modes, strongest first.
MODES: tuple[str, ...] = ("full", "sampled", "off")
#: Hidden directory under the root that holds quarantined artifacts.
QUARANTINE_NAME = ".quarantine"

Status = Literal["ok", "bad", "unverifiable"]


# ------------------------------------------------------------------------------------- checking


@dataclass
class FileCheck:
    """The outcome for one file: ``ok``, ``bad`` (with expected/actual) or ``unverifiable`` (with why)."""

    name: str
    status: Status
    checked: str = ""  # what was compared: checksum, blocks, size
    expected: str = ""
    actual: str = ""
    detail: str = ""
    bytes_read: int = 0


@dataclass
class ArtifactCheck:
    """The outcome for one artifact directory."""

    path: Path
    mode: str
    files: list[FileCheck] = field(default_factory=list)
    seconds: float = 0.0
    artifact: Artifact | None = None

    @property
    def bad(self) -> list[FileCheck]:
        return [f for f in self.files if f.status == "bad"]

    @property
    def unverifiable(self) -> list[FileCheck]:
        return [f for f in self.files if f.status == "unverifiable"]

    @property
    def status(self) -> str:
        """``BAD`` if any file is bad, else ``UNVERIFIABLE`` if any could not be checked, else ``OK``."""
        return "BAD" if self.bad else "UNVERIFIABLE" if self.unverifiable else "OK"

    @property
    def bytes_read(self) -> int:
        return sum(f.bytes_read for f in self.files)

    def problem(self) -> str:
        """One line naming the first bad file and its expected/actual value (empty when nothing is bad)."""
        if not self.bad:
            return ""
        f = self.bad[0]
        what = " ".join(part for part in (f.checked, f.expected) if part)
        text = f"'{self.path / f.name}' expected {what} (got {f.actual})"
        if f.checked == "invariant":  # a stage check run beside the checksums: its own line
            text = f"check '{f.name}' failed: {f.actual}"
        return text + (f" [{f.detail}]" if f.detail else "") + (
            f"; {len(self.bad) - 1} more bad file(s)" if len(self.bad) > 1 else "")


def check_manifest(art: Artifact) -> FileCheck:
    """The manifest against its recorded ``manifest_digest`` (unverifiable when it has none)."""
    recorded = art.manifest.get("manifest_digest")
    if recorded is None:
        return FileCheck("manifest.json", "unverifiable", "digest", detail="written without manifest_digest")
    try:
        actual = manifest_digest(art.manifest)
    except ValueError as e:  # NaN/inf written into it by hand: not what publish wrote
        return FileCheck("manifest.json", "bad", "digest", str(recorded), f"no digest ({e})")
    return FileCheck("manifest.json", "ok" if actual == recorded else "bad", "digest", str(recorded), actual)


def check_file(art: Artifact, name: str, mode: str) -> FileCheck:
    """One file of ``art`` against its manifest entry in ``mode`` (``full`` or ``sampled``)."""
    info = art.files[name]
    path = art.path / name
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return FileCheck(name, "bad", "file", "present", "missing")
    if size != info.bytes:
        return FileCheck(name, "bad", "size", f"{info.bytes} bytes", f"{size} bytes")
    if mode == "full":
        if not info.checksum.startswith(f"{_ALGORITHM}:"):
            return FileCheck(name, "unverifiable", "checksum", info.checksum,
                             detail=f"unknown checksum algorithm (expected {_ALGORITHM}:)")
        actual = file_checksum(path)
        status: Status = "ok" if actual == info.checksum else "bad"
        return FileCheck(name, status, "checksum", info.checksum, actual, bytes_read=size)
    record = art.manifest.get("integrity") or {}
    blocks = (record.get("blocks") or {}).get(name)
    block = int(record.get("block_bytes") or BLOCK_BYTES)
    if blocks is None:
        return FileCheck(name, "unverifiable", "size", detail="manifest has no block digests: size only")
    read = 0
    with open(path, "rb", buffering=0) as f:
        for offset, expected in blocks:
            actual = _block_digest(f, int(offset), block)
            read += min(block, size - int(offset))
            if actual != expected:
                return FileCheck(name, "bad", f"block digest at byte {offset}", expected, actual,
                                 bytes_read=read)
    return FileCheck(name, "ok", "blocks", bytes_read=read)


def verify_artifact(art: Artifact, mode: str = "full", threads: int = 0,
                    pool: ThreadPoolExecutor | None = None) -> ArtifactCheck:
    """Check ``art``'s files against its manifest in ``mode`` (see the module doc); never raises for bad data.

    ``threads``: files hashed in parallel (0: one per CPU, at most 8); or pass an executor to share.
    """
    if mode not in MODES:
        raise ValueError(f"'verify.on_reuse' expected one of {', '.join(MODES)} (got {mode!r})")
    start = time.perf_counter()
    out = ArtifactCheck(art.path, mode, artifact=art)
    if mode == "off":
        return out
    names = sorted(art.files)
    own = pool is None and len(names) > 1
    workers = threads or min(8, os.cpu_count() or 1)
    executor = ThreadPoolExecutor(max_workers=workers) if own else pool
    try:
        if executor is None:
            files = [check_file(art, n, mode) for n in names]
        else:
            files = list(executor.map(lambda n: check_file(art, n, mode), names))
    finally:
        if own and executor is not None:
            executor.shutdown()
    out.files = [check_manifest(art), *files]
    out.seconds = time.perf_counter() - start
    return out


def verify_manifest_dir(path: Path, mode: str = "full", pool: ThreadPoolExecutor | None = None) -> ArtifactCheck:
    """:func:`verify_artifact` on the artifact directory ``path``; an unreadable manifest is a bad file."""
    if not (path / "manifest.json").exists():
        return ArtifactCheck(path, mode, [FileCheck("manifest.json", "bad", "a valid manifest", "",
                                                    "no such file: a version directory without one")])
    try:
        art = Artifact(path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return ArtifactCheck(path, mode, [FileCheck("manifest.json", "bad", "a valid manifest", "",
                                                    f"{type(e).__name__}: {str(e)[:200]}")])
    return verify_artifact(art, mode, pool=pool)


# ------------------------------------------------------------------------------------ quarantine


def quarantine(root: Path, path: Path, reason: str, catalog: Any = None) -> Path | None:
    """Move the artifact directory ``path`` to ``<root>/.quarantine/...`` and drop it from ``catalog``.

    Returns where it went, or None when it was already gone (another process quarantined it first). A
    ``QUARANTINE.json`` beside its files says why and when.
    """
    root, path = Path(root), Path(path)
    rel = path.relative_to(root)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    dest = root / QUARANTINE_NAME / rel.parent / f"{rel.name}-{stamp}-{uuid.uuid4().hex[:6]}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(path, dest)
    except FileNotFoundError:
        dest = None  # type: ignore[assignment]
    if dest is not None:
        note = {"from": str(path), "reason": reason, "quarantined_at": stamp, "pid": os.getpid()}
        (dest / "QUARANTINE.json").write_text(json.dumps(note, indent=2) + "\n", encoding="utf8")
    if catalog is not None and len(rel.parts) == 3:
        from .catalog import CatalogDamaged, CatalogLockTimeout

        try:
            catalog.forget_artifact(*rel.parts)
        except (CatalogLockTimeout, CatalogDamaged, OSError) as e:  # files moved; the index catches up later
            warnings.warn(f"'{catalog.db_path}' expected to drop {rel} (got {e}); run `strata catalog rebuild`",
                          RuntimeWarning, stacklevel=2)
    return dest


class ArtifactCorrupted(ValueError):
    """A reused artifact did not match its manifest; it was quarantined and nothing read it."""

    def __init__(self, check: ArtifactCheck, moved_to: Path | None) -> None:
        where = f"moved to {moved_to}" if moved_to is not None else "already moved aside by another process"
        super().__init__(f"{check.problem()}: artifact {check.path} is corrupted ({where}, removed from the "
                         "catalog; the next run rebuilds it)")
        self.check, self.moved_to = check, moved_to


def find_verified(store: ArtifactStore, dataset: str, stage: str, version: str, mode: str) -> Artifact | None:
    """``store.find`` plus verification in ``mode``: the intact artifact, None when absent, and
    :class:`ArtifactCorrupted` (after quarantining it) when its manifest or a file does not match, or when the
    version's directory has no manifest at all (deleted by hand: a published artifact always has one, and
    publishing a rebuilt one into that directory would fail)."""
    if mode not in MODES:
        raise ValueError(f"'verify.on_reuse' expected one of {', '.join(MODES)} (got {mode!r})")
    if mode == "off":
        return store.find(dataset, stage, version)
    path = store.path(dataset, stage, version)
    if not path.exists() or (path.is_dir() and not any(path.iterdir())):
        return None  # absent (an empty directory is too: a rebuilt artifact is renamed over it)
    check = verify_manifest_dir(path, mode)  # files but no manifest.json: BAD, naming it
    if check.status == "BAD":
        moved = quarantine(store.root, path, check.problem(), store.catalog)
        raise ArtifactCorrupted(check, moved)
    mark_used(path)
    return check.artifact
