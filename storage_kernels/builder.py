"""Writing one artifact: an :class:`ArtifactBuilder` fills a temp directory of the store, then publishes it
atomically (checksums, manifest with its digests, fsync, rename into place, catalog record).
"""

from __future__ import annotations

import errno
import importlib.metadata
import json as _json
import os
import time
import warnings
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from .arrays import ArrayWriter, FileInfo, file_info, save_array
from .artifact import Artifact
from .catalog import Catalog
from .digests import integrity_record, manifest_digest
from .storefs import MANIFEST_NAME, _fsync_path, _rmtree, owned_tmp_name
from .versions import _canonical_json, _check_name, _check_upstream, _json_default, compute_version

if TYPE_CHECKING:  # pyarrow is imported where Parquet is used: keeps `import` cheap for workers
    import pyarrow as pa

__all__ = ["ArtifactBuilder"]

_T = TypeVar("_T")
#: Errors of a failed write (a full disk or quota, a read-only or failing device): named by the build's directory
#: when the failing call named no file.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG, errno.EACCES,
                           errno.EPERM})


class _Store(Protocol):
    """What a builder uses of its :class:`~storage_kernels.store.ArtifactStore` (a protocol, so that this module
    need not import the store, which imports it)."""

    root: Path
    catalog: Catalog | None

    @property
    def tmp_dir(self) -> Path: ...

    def path(self, dataset: str, stage: str, version: str) -> Path: ...

    def find(self, dataset: str, stage: str, version: str) -> Artifact | None: ...


def _library_version() -> str:
    try:
        return importlib.metadata.version("strata-gnn")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def _utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


class ArtifactBuilder:
    """Writes one artifact under a temp directory; :meth:`publish` makes it visible atomically.

    A context manager: an exception inside the ``with`` block removes the temp directory (existing
    artifacts are untouched; an OS error of a write that names no file, a full disk say, is raised again naming
    the temp directory); leaving the block without publishing also removes it, with a warning.
    ``stats`` and ``timings`` are dicts the stage fills; they go into the manifest.
    """

    def __init__(
        self,
        store: _Store,
        dataset: str,
        stage: str,
        version: str,
        params: dict[str, Any],
        upstream: dict[str, str],
        format_version: int | None = None,
    ) -> None:
        self.store = store
        self.dataset = _check_name(dataset, "dataset")
        self.stage = _check_name(stage, "stage")
        self.version = _check_name(version, "version")
        if not isinstance(params, dict):
            raise ValueError(f"'params' expected a dict (got {type(params).__name__})")
        self.upstream = _check_upstream(upstream)
        # Stored as its canonical JSON round trip: what the manifest will hold.
        self.params: dict[str, Any] = _json.loads(_canonical_json(params, "params"))
        if format_version is not None:
            expected = compute_version(stage, format_version, params, self.upstream)
            if version != expected:
                raise ValueError(
                    f"'version' expected {expected} for stage {stage!r} format_version {format_version} and "
                    f"these params/upstream (got {version!r})"
                )
        self.format_version = None if format_version is None else int(format_version)
        self.stats: dict[str, Any] = {}
        self.timings: dict[str, Any] = {}
        self.dir = store.tmp_dir / owned_tmp_name()  # pid and start time: removed once this process is gone
        self.dir.mkdir(parents=True)
        self._infos: dict[str, FileInfo] = {}
        self._writers: dict[str, ArrayWriter] = {}
        self._memmaps: list[np.memmap] = []
        self._names: set[str] = set()
        self._state = "open"
        self.artifact: Artifact | None = None

    def __repr__(self) -> str:
        return f"ArtifactBuilder({self.dataset}/{self.stage}/{self.version}, {self._state}, dir={self.dir})"

    def scratch_sibling(self, label: str = "", ext: str = "") -> Path:
        """``<builder dir>[.<label>].scratch[<ext>]`` beside the builder's dir: temporary space of this build that
        is never published, and that :meth:`ArtifactStore.cleanup_tmp` removes once its process is gone."""
        return self.dir.parent / f"{self.dir.name}{'.' + label if label else ''}.scratch{ext}"

    @property
    def target(self) -> Path:
        """Where the artifact will be published."""
        return self.store.path(self.dataset, self.stage, self.version)

    # ---------------------------------------------------------------------------------------- files

    def _new_file(self, name: str, suffix: str = "") -> Path:
        if self._state != "open":
            raise ValueError(
                f"'{self.dataset}/{self.stage}/{self.version}' expected an open builder (got {self._state})"
            )
        if suffix and not name.endswith(suffix):
            name = name + suffix
        _check_name(name, "file name")
        if name == MANIFEST_NAME:
            raise ValueError(f"'file name' expected a name other than {MANIFEST_NAME!r} (got {name!r})")
        path = self.dir / name
        if name in self._names or path.exists():
            raise ValueError(f"'file name' expected a name not yet written in this artifact (got {name!r})")
        self._names.add(name)
        return path

    def _create(self, path: Path, make: Callable[[], _T]) -> _T:
        """Run ``make`` to create ``path``; on failure forget the name and remove any partial file."""
        try:
            return make()
        except BaseException:
            self._names.discard(path.name)
            path.unlink(missing_ok=True)
            raise

    def save_array(self, name: str, arr: Any) -> FileInfo:
        """Write ``<name>.npy`` (aligned, data at byte 4096). Do not modify the file afterwards."""
        path = self._new_file(name, ".npy")
        info = self._create(path, lambda: save_array(path, arr))
        self._infos[info.name] = info
        return info

    def array_writer(self, name: str, dtype: Any, row_shape: Any = (), capacity: int | None = None) -> ArrayWriter:
        """A streaming :class:`ArrayWriter` for ``<name>.npy``; closed at publish if still open."""
        path = self._new_file(name, ".npy")
        writer = self._create(path, lambda: ArrayWriter(path, dtype, row_shape, capacity))
        self._writers[path.name] = writer
        return writer

    def allocate_array(self, name: str, dtype: Any, shape: Any) -> np.memmap:
        """A writable, zero-filled memmap backed by ``<name>.npy``; flushed and checksummed at publish.

        Do not write to it after :meth:`publish` (the file then belongs to an immutable artifact).
        """
        path = self._new_file(name, ".npy")
        mm = self._create(path, lambda: ArrayWriter.allocate(path, dtype, shape))
        self._memmaps.append(mm)
        return mm

    def add_file(self, name: str) -> Path:
        """Create an empty raw file ``name`` (exact name, e.g. ``packed.bin``) and return its path to fill."""
        path = self._new_file(name)
        path.touch()
        return path

    def write_parquet(self, name: str, table: pa.Table) -> FileInfo:
        """Write ``<name>.parquet``, with dataset/stage/version in the Arrow schema metadata."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not isinstance(table, pa.Table):
            raise ValueError(f"'{name}' expected a pyarrow.Table (got {type(table).__name__})")
        path = self._new_file(name, ".parquet")
        meta = dict(table.schema.metadata or {})
        meta.update(
            {
                b"strata.dataset": self.dataset.encode(),
                b"strata.stage": self.stage.encode(),
                b"strata.version": self.version.encode(),
            }
        )
        self._create(path, lambda: pq.write_table(table.replace_schema_metadata(meta), path))
        info = file_info(path)
        self._infos[info.name] = info
        return info

    def write_json(self, name: str, obj: Any) -> FileInfo:
        """Write ``<name>.json`` (sorted keys, indented; NumPy scalars and arrays converted)."""
        try:
            text = _json.dumps(obj, sort_keys=True, indent=2, allow_nan=False, default=_json_default)
        except (TypeError, ValueError) as e:
            raise ValueError(f"'{name}' expected a JSON-serialisable object without NaN/inf (got {e})") from e
        path = self._new_file(name, ".json")
        self._create(path, lambda: path.write_text(text + "\n", encoding="utf8"))
        info = file_info(path)
        self._infos[info.name] = info
        return info

    # ------------------------------------------------------------------------------------- publish

    def _finish_files(self) -> list[FileInfo]:
        """Close writers, flush memmaps, fsync and describe every file of the temp dir."""
        for name, writer in self._writers.items():
            if not writer.closed:
                writer.close()
            if writer.info is not None:
                self._infos[name] = writer.info
        for mm in self._memmaps:
            mm.flush()
        self._memmaps.clear()
        infos = []
        for entry in sorted(os.scandir(self.dir), key=lambda e: e.name):
            path = Path(entry.path)
            if not entry.is_file(follow_symlinks=False):
                raise ValueError(f"'{path}' expected a regular file in the artifact (got a directory or link)")
            _fsync_path(path)
            known = self._infos.get(entry.name)
            size = entry.stat(follow_symlinks=False).st_size
            infos.append(known if known is not None and known.bytes == size else file_info(path))
        return infos

    def publish(self) -> Artifact:
        """Checksum, write ``manifest.json``, fsync, rename into place and record in the catalog.

        If the version is already published (by an earlier run or a concurrent process), the temp dir is
        discarded and the existing artifact returned. A catalog failure after the rename propagates, but
        the artifact is published (``Catalog.rebuild`` or a re-run repairs the index).
        """
        if self._state != "open":
            raise ValueError(
                f"'{self.dataset}/{self.stage}/{self.version}' expected an open builder (got {self._state})"
            )
        target = self.target
        existing = self.store.find(self.dataset, self.stage, self.version)
        if existing is None:
            try:
                existing = self._publish_new(target)
            except BaseException:
                self.abort()
                raise
        else:
            self.abort()
        self._state = "published"
        self.artifact = existing
        if self.store.catalog is not None:
            self.store.catalog.record_artifact(existing.manifest, existing.path)
        return existing

    def _publish_new(self, target: Path) -> Artifact:
        t0 = time.perf_counter()
        infos = self._finish_files()
        self.timings.setdefault("publish_checksum_s", round(time.perf_counter() - t0, 6))
        manifest = {
            "dataset": self.dataset,
            "stage": self.stage,
            "version": self.version,
            "format_version": self.format_version,
            "params": self.params,
            "upstream": self.upstream,
            "files": [i.to_dict() for i in infos],
            "stats": _json.loads(_canonical_json(self.stats, "stats")),
            "timings": _json.loads(_canonical_json(self.timings, "timings")),
            "created_at": _utc_now_iso(),
            "library_version": _library_version(),
            # sampled block digests and the manifest's own digest: what verification on reuse compares
            "integrity": integrity_record(self.dir, [i.name for i in infos]),
        }
        manifest["manifest_digest"] = manifest_digest(manifest)
        mpath = self.dir / MANIFEST_NAME
        with open(mpath, "w", encoding="utf8") as f:
            f.write(_json.dumps(manifest, sort_keys=True, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        _fsync_path(self.dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(self.dir, target)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            winner = self.store.find(self.dataset, self.stage, self.version)
            if winner is None:
                raise OSError(
                    f"'{target}' expected to be absent or a published artifact (got a directory without "
                    f"{MANIFEST_NAME})"
                ) from e
            self.abort()  # lost the race: another process published the same version
            return winner
        for d in (target.parent, target.parent.parent, self.store.root):
            _fsync_path(d)
        return Artifact(target, manifest)

    def abort(self) -> None:
        """Discard everything written so far (idempotent; a no-op after publish)."""
        if self._state == "published":
            return
        for writer in self._writers.values():
            writer.abort()
        self._memmaps.clear()
        if self.dir.exists():
            _rmtree(self.dir)
        self._state = "aborted"

    def __enter__(self) -> ArtifactBuilder:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self.abort()
            if isinstance(exc, OSError) and exc.errno in _WRITE_ERRNOS and exc.filename is None:
                # a write that names no file (Python's file.write, a C writer): name where this build was writing
                raise OSError(exc.errno, exc.strerror or os.strerror(exc.errno), str(self.dir)) from exc
        elif self._state == "open":
            self.abort()
            warnings.warn(
                f"'{self.dataset}/{self.stage}/{self.version}' expected publish() before leaving the builder "
                "(got none); the temp dir was removed",
                RuntimeWarning,
                stacklevel=2,
            )
