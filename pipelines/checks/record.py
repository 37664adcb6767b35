"""Passed checks on record: a reused artifact is not re-checked by the same check code.

A stage's checks run when its artifact is built. When the artifact is reused, its bytes are verified against
the manifest (``verify.on_reuse``) and a check is a deterministic function of those bytes and of the check
code, so a pass recorded for the same manifest and the same code stands (with ``verify.on_reuse=off`` the bytes are
not checked, and neither is the record trusted: the checks run): at 100M nodes re-running them on
every run would re-read the graph (tens of GB) once per stage. The record lives beside the store,
``<root>/.checks/<dataset>/<stage>/<version>.json``: the manifest's digest, the digest of the check code
(every module of :mod:`pipelines.checks`) and the names of the checks that passed. It is an optimisation,
not the truth: a missing, unreadable or stale record means the checks run again. A failed check is never
recorded (its artifact is quarantined, or fails the run).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from storage_kernels.store import MANIFEST_NAME, Artifact

__all__ = ["CHECKS_DIR", "checks_code_digest", "record_passed", "recorded_passes"]

CHECKS_DIR = ".checks"


@functools.cache
def checks_code_digest() -> str:
    """SHA-256 of the source of every module of :mod:`pipelines.checks`: any change to a check re-runs them."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _manifest_digest(artifact: Artifact) -> str:
    return hashlib.sha256((artifact.path / MANIFEST_NAME).read_bytes()).hexdigest()


def _record_path(root: Path, artifact: Artifact) -> Path:
    return Path(root) / CHECKS_DIR / artifact.dataset / artifact.stage / f"{artifact.version}.json"


def recorded_passes(root: Path, artifact: Artifact) -> frozenset[str]:
    """The checks recorded as passed on ``artifact`` (this manifest, this check code); empty when none are."""
    try:
        record = json.loads(_record_path(root, artifact).read_text())
        if (record.get("manifest") == _manifest_digest(artifact)
                and record.get("checks_code") == checks_code_digest()):
            return frozenset(str(name) for name in record.get("passed", []))
    except (OSError, ValueError, AttributeError):
        pass
    return frozenset()


def record_passed(root: Path, artifact: Artifact, names: Iterable[str]) -> None:
    """Add ``names`` to the checks recorded as passed on ``artifact`` (atomic; best effort: a record that cannot
    be written only means the checks run again next time)."""
    path = _record_path(root, artifact)
    passed = sorted(set(recorded_passes(root, artifact)) | set(names))
    record = {"manifest": _manifest_digest(artifact), "checks_code": checks_code_digest(), "passed": passed}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)
    with contextlib.suppress(OSError):
        tmp.unlink(missing_ok=True)
