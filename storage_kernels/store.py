"""Immutable, versioned artifact directories with atomic publishing.

An artifact lives in ``<root>/<dataset>/<stage>/<version>/`` with a ``manifest.json``. Its version is the
first 12 hex characters of the sha256 of the canonical JSON of (stage, format_version, params, upstream), so
the same inputs always give the same version and re-publishing is a no-op.

Publishing is atomic: an :class:`ArtifactBuilder` writes under ``<root>/.tmp/<pid>-<id>-<host>/``, fsyncs
every file and the directory, then ``os.rename``-s it into place. If another process published the same
version first, the temp directory is discarded and the existing artifact returned. The catalog record
comes last (the catalog is an index, rebuildable from the manifests).

>>> store = ArtifactStore("/data/strata")                                    # doctest: +SKIP
>>> v = store.version_for("graph", 1, {"source": "ogbn-arxiv"}, {})          # doctest: +SKIP
>>> with store.builder("arxiv", "graph", v, {"source": "ogbn-arxiv"}, {}, format_version=1) as b:
...     b.save_array("indptr", indptr)                                         # doctest: +SKIP
...     b.stats["num_nodes"] = len(indptr) - 1
...     art = b.publish()
>>> art.array("indptr")                                                       # doctest: +SKIP

This module holds :class:`ArtifactStore` and answers for the whole store API; the parts live by job in
:mod:`~storage_kernels.artifact` (reading a published artifact), :mod:`~storage_kernels.builder` (writing and
publishing one), :mod:`~storage_kernels.versions` (names, canonical JSON, versions),
:mod:`~storage_kernels.storefs` (the tree on disk: reserved and temp names, last use) and
:mod:`~storage_kernels.digests` (the manifest and block digests written at publish).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from .artifact import Artifact
from .builder import ArtifactBuilder
from .catalog import Catalog
from .owner import Owner
from .storefs import (
    CATALOG_NAME,
    MANIFEST_NAME,
    RESUME_NAME,
    TMP_NAME,
    _host,
    _owned_here,
    _rmtree,
    mark_used,
    owned_tmp_name,
    published_dirs,
)
from .versions import _NAME_RE, _check_name, compute_version
from .versions import VERSION_CHARS as VERSION_CHARS  # answers here as before the split

__all__ = ["MANIFEST_NAME", "Artifact", "ArtifactBuilder", "ArtifactStore", "compute_version", "mark_used",
           "owned_tmp_name", "published_dirs"]


class ArtifactStore:
    """The artifact tree at ``root`` and its DuckDB catalog (``<root>/catalog.duckdb``).

    ``catalog=False`` skips catalog records (the filesystem stays the truth); a :class:`Catalog` instance
    may be passed to use another file.
    """

    def __init__(self, root: str | Path, catalog: Catalog | bool = True) -> None:
        self.root = Path(root)
        if catalog is True:
            # a write that finds the catalog damaged rebuilds it from this root's manifests, and the run goes on
            self.catalog: Catalog | None = Catalog(self.root / CATALOG_NAME, heal_from=self.root)
        elif catalog is False or catalog is None:
            self.catalog = None
        else:
            self.catalog = catalog

    def __repr__(self) -> str:
        return f"ArtifactStore({str(self.root)!r})"

    @property
    def tmp_dir(self) -> Path:
        """Where builders write before publishing (same filesystem as the artifacts)."""
        return self.root / TMP_NAME

    @staticmethod
    def version_for(stage: str, format_version: int, params: dict[str, Any], upstream: dict[str, str]) -> str:
        """12 hex chars of sha256 over canonical JSON of (stage, format_version, params, upstream)."""
        return compute_version(stage, format_version, params, upstream)

    def path(self, dataset: str, stage: str, version: str) -> Path:
        """``<root>/<dataset>/<stage>/<version>`` (names validated)."""
        return (
            self.root / _check_name(dataset, "dataset") / _check_name(stage, "stage") / _check_name(version, "version")
        )

    def find(self, dataset: str, stage: str, version: str) -> Artifact | None:
        """The published artifact, or None. Finding it marks it used (:func:`mark_used`): a run looks up
        the versions it reuses here."""
        path = self.path(dataset, stage, version)
        if not (path / MANIFEST_NAME).is_file():
            return None
        mark_used(path)
        return Artifact(path)

    def open(self, dataset: str, stage: str, version: str) -> Artifact:
        """The published artifact; FileNotFoundError naming the path otherwise."""
        art = self.find(dataset, stage, version)
        if art is None:
            raise FileNotFoundError(f"'{self.path(dataset, stage, version)}' expected a published artifact (got none)")
        return art

    def artifacts(self, dataset: str, stage: str) -> list[Artifact]:
        """All published versions of ``dataset``/``stage``, oldest first (read from the manifests)."""
        base = self.root / _check_name(dataset, "dataset") / _check_name(stage, "stage")
        arts = [Artifact(m.parent) for m in base.glob(f"*/{MANIFEST_NAME}") if _NAME_RE.fullmatch(m.parent.name)]
        return sorted(arts, key=lambda a: (a.created_at, a.version))

    def latest(self, dataset: str, stage: str) -> Artifact | None:
        """The most recently created version of ``dataset``/``stage``, or None."""
        arts = self.artifacts(dataset, stage)
        return arts[-1] if arts else None

    def builder(
        self,
        dataset: str,
        stage: str,
        version: str,
        params: dict[str, Any],
        upstream: dict[str, str],
        *,
        format_version: int | None = None,
    ) -> ArtifactBuilder:
        """An :class:`ArtifactBuilder` writing under ``<root>/.tmp/``.

        Pass ``format_version`` to record it in the manifest and check ``version`` against
        :meth:`version_for` (ValueError on mismatch).
        """
        return ArtifactBuilder(self, dataset, stage, version, params, upstream, format_version)

    def resume_dir(self, dataset: str, stage: str, version: str) -> Path:
        """Where an interrupted build of ``dataset/stage/version`` keeps what a rerun resumes from
        (``<root>/.tmp/resume/<dataset>-<stage>-<version>``; not created). :meth:`cleanup_tmp` leaves it alone
        until that version is published."""
        name = f"{_check_name(dataset, 'dataset')}-{_check_name(stage, 'stage')}-{_check_name(version, 'version')}"
        return self.tmp_dir / RESUME_NAME / name

    def _cleanup_resume(self) -> int:
        """Remove resume dirs whose artifact is published (nothing left to resume)."""
        base, removed = self.tmp_dir / RESUME_NAME, 0
        if not base.is_dir():
            return 0
        for entry in os.scandir(base):
            parts = entry.name.rsplit("-", 2)
            if len(parts) == 3 and all(_NAME_RE.fullmatch(p) for p in parts) \
                    and (self.path(*parts) / MANIFEST_NAME).is_file():  # published (not find: that marks it used)
                _rmtree(Path(entry.path))
                removed += 1
        return removed

    def cleanup_tmp(self, max_age_s: float | None = None) -> int:
        """Remove stale temp dirs; returns how many were removed.

        A temp dir is stale when its owner process (pid and start time in its name, this host) is gone, or,
        when ``max_age_s`` is given, when it was last modified more than ``max_age_s`` seconds ago (use that
        for dirs left by other hosts on a shared filesystem). Resume checkpoints (:meth:`resume_dir`) are kept
        until their artifact is published.
        """
        if not self.tmp_dir.is_dir():
            return 0
        host, now, removed = _host(), time.time(), self._cleanup_resume()
        for entry in os.scandir(self.tmp_dir):
            if entry.name == RESUME_NAME:
                continue
            m = _owned_here(entry.name, host)
            dead_owner = m is not None and not Owner(
                int(m["pid"]), int(m["start"]) if m["start"] else None, host).alive()
            try:
                age = now - entry.stat(follow_symlinks=False).st_mtime
            except FileNotFoundError:
                continue
            if dead_owner or (max_age_s is not None and age > max_age_s):
                if entry.is_dir(follow_symlinks=False):
                    _rmtree(Path(entry.path))
                else:
                    Path(entry.path).unlink(missing_ok=True)
                removed += 1
        return removed
