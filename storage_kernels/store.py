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
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.metadata
import json as _json
import os
import re
import shutil
import sys
import time
import uuid
import warnings
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .arrays import ArrayWriter, FileInfo, file_checksum, file_info, open_array, save_array
from .catalog import Catalog
from .integrity import integrity_record, manifest_digest
from .owner import Owner, host_name

if TYPE_CHECKING:  # pyarrow is imported where Parquet is used: keeps `import` cheap for workers
    import pyarrow as pa

__all__ = ["MANIFEST_NAME", "Artifact", "ArtifactBuilder", "ArtifactStore", "compute_version", "mark_used",
           "owned_tmp_name", "published_dirs"]

MANIFEST_NAME = "manifest.json"
CATALOG_NAME = "catalog.duckdb"
TMP_NAME = ".tmp"
VERSION_CHARS = 12

_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


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


#: Under the temp dir: checkpoints of interrupted stages, kept for a resume (``ArtifactStore.resume_dir``).
RESUME_NAME = "resume"
_T = TypeVar("_T")
_MANIFEST_KEYS = ("dataset", "stage", "version", "files", "params", "upstream", "created_at")


# ------------------------------------------------------------------------------------------- helpers


def _check_name(value: Any, what: str) -> str:
    """A safe path component: letters, digits, ``_-.``, not starting with ``.`` or ``-``, <= 128 chars."""
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise ValueError(
            f"'{what}' expected letters, digits and '_-.' (not starting with '.' or '-', at most 128) (got {value!r})"
        )
    return value


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def _canonical_json(obj: Any, what: str) -> str:
    """Sorted keys, no whitespace, no NaN/inf: the same value always gives the same text."""
    try:
        return _json.dumps(
            obj,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
            default=_json_default,
        )
    except (TypeError, ValueError) as e:
        raise ValueError(f"'{what}' expected JSON-serialisable values without NaN/inf (got {e})") from e


def _check_upstream(upstream: Any) -> dict[str, str]:
    if not isinstance(upstream, dict):
        raise ValueError(f"'upstream' expected a dict stage -> version (got {type(upstream).__name__})")
    return {_check_name(s, "upstream stage"): _check_name(v, f"upstream[{s!r}]") for s, v in upstream.items()}


def compute_version(stage: str, format_version: int, params: dict[str, Any], upstream: dict[str, str]) -> str:
    """First 12 hex chars of sha256 over canonical JSON of (stage, format_version, params, upstream)."""
    _check_name(stage, "stage")
    if isinstance(format_version, bool) or not isinstance(format_version, (int, np.integer)):
        raise ValueError(f"'format_version' expected an int (got {format_version!r})")
    format_version = int(format_version)
    if not isinstance(params, dict):
        raise ValueError(f"'params' expected a dict (got {type(params).__name__})")
    payload = {
        "stage": stage,
        "format_version": format_version,
        "params": params,
        "upstream": _check_upstream(upstream),
    }
    text = _canonical_json(payload, "params")
    return hashlib.sha256(text.encode("utf8")).hexdigest()[:VERSION_CHARS]


def _library_version() -> str:
    try:
        return importlib.metadata.version("strata-gnn")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


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


def mark_used(path: str | Path) -> None:
    """Record that a run used the artifact at ``path`` now: its directory's mtime, which ``strata gc`` reads as
    the version's last use (the manifest stays untouched). Best effort: a read-only store keeps its times."""
    with contextlib.suppress(OSError):
        os.utime(path)


def _utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


# ------------------------------------------------------------------------------------------ Artifact


class Artifact:
    """A published, immutable artifact directory and its manifest.

    File names may be given with or without their suffix: ``array("indptr")`` reads ``indptr.npy``.
    """

    def __init__(self, path: str | Path, manifest: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        if manifest is None:
            mpath = self.path / MANIFEST_NAME
            try:
                manifest = _json.loads(mpath.read_text(encoding="utf8"))
            except ValueError as e:
                raise ValueError(f"'{mpath}' expected a JSON manifest (got {e})") from e
        missing = [k for k in _MANIFEST_KEYS if k not in manifest]
        if missing:
            raise ValueError(f"'{self.path / MANIFEST_NAME}' expected keys {missing} (got {sorted(manifest)})")
        self.manifest: dict[str, Any] = manifest
        self.dataset: str = manifest["dataset"]
        self.stage: str = manifest["stage"]
        self.version: str = manifest["version"]
        self._files = {f["name"]: FileInfo.from_dict(f) for f in manifest["files"]}

    def __repr__(self) -> str:
        return f"Artifact({self.dataset}/{self.stage}/{self.version}, {len(self._files)} files)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Artifact) and self.path.resolve() == other.path.resolve()

    def __hash__(self) -> int:
        return hash(str(self.path.resolve()))

    # manifest fields
    @property
    def params(self) -> dict[str, Any]:
        """The stage parameters the version was computed from."""
        return self.manifest["params"]

    @property
    def stats(self) -> dict[str, Any]:
        """Statistics recorded by the stage."""
        return self.manifest.get("stats", {})

    @property
    def timings(self) -> dict[str, Any]:
        """Timings recorded by the stage (seconds)."""
        return self.manifest.get("timings", {})

    @property
    def upstream(self) -> dict[str, str]:
        """Upstream stage -> version."""
        return self.manifest["upstream"]

    @property
    def created_at(self) -> str:
        """ISO-8601 UTC creation time."""
        return self.manifest["created_at"]

    @property
    def format_version(self) -> int | None:
        """The stage's format version (None if the builder was not told)."""
        return self.manifest.get("format_version")

    @property
    def files(self) -> dict[str, FileInfo]:
        """File name -> :class:`FileInfo`, as recorded in the manifest."""
        return dict(self._files)

    # file access
    def _resolve(self, name: str, suffix: str = "") -> str:
        if name in self._files:
            return name
        if suffix and name + suffix in self._files:
            return name + suffix
        raise KeyError(
            f"'{name}' expected one of the files of {self.dataset}/{self.stage}/{self.version} "
            f"(got none by that name; available: {sorted(self._files)})"
        )

    def file(self, name: str) -> Path:
        """Path of a file listed in the manifest, by exact name (``packed.bin``, ``features.npy``).

        KeyError listing the available names otherwise.
        """
        return self.path / self._resolve(name)

    def array(self, name: str, mmap: bool = True) -> np.ndarray:
        """Open ``<name>.npy``: a read-only memmap (``mmap=True``) or an in-memory copy."""
        fname = self._resolve(name, ".npy")
        if self._files[fname].dtype is None:
            raise ValueError(f"'{fname}' expected an .npy array file (got a raw file)")
        return open_array(self.path / fname, mmap=mmap)

    def parquet(self, name: str) -> pa.Table:
        """Read ``<name>.parquet`` (memory-mapped)."""
        import pyarrow.parquet as pq

        # ParquetFile, not read_table: that imports pyarrow.dataset (0.7 s a process)
        return pq.ParquetFile(self.path / self._resolve(name, ".parquet"), memory_map=True).read()

    def json(self, name: str) -> Any:
        """Read ``<name>.json``."""
        return _json.loads((self.path / self._resolve(name, ".json")).read_text(encoding="utf8"))

    def verify(self) -> int:
        """Re-checksum every file against the manifest; returns the number of files checked.

        Raises FileNotFoundError for a missing file and ValueError naming the file on a size or checksum
        mismatch.
        """
        for name, info in sorted(self._files.items()):
            path = self.path / name
            size = path.stat().st_size
            if size != info.bytes:
                raise ValueError(f"'{path}' expected {info.bytes} bytes (got {size})")
            got = file_checksum(path)
            if got != info.checksum:
                raise ValueError(f"'{path}' expected checksum {info.checksum} (got {got})")
        return len(self._files)


# ----------------------------------------------------------------------------------- ArtifactBuilder


class ArtifactBuilder:
    """Writes one artifact under a temp directory; :meth:`publish` makes it visible atomically.

    A context manager: an exception inside the ``with`` block removes the temp directory (existing
    artifacts are untouched); leaving the block without publishing also removes it, with a warning.
    ``stats`` and ``timings`` are dicts the stage fills; they go into the manifest.
    """

    def __init__(
        self,
        store: ArtifactStore,
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
        elif self._state == "open":
            self.abort()
            warnings.warn(
                f"'{self.dataset}/{self.stage}/{self.version}' expected publish() before leaving the builder "
                "(got none); the temp dir was removed",
                RuntimeWarning,
                stacklevel=2,
            )


# ------------------------------------------------------------------------------------- ArtifactStore


class ArtifactStore:
    """The artifact tree at ``root`` and its DuckDB catalog (``<root>/catalog.duckdb``).

    ``catalog=False`` skips catalog records (the filesystem stays the truth); a :class:`Catalog` instance
    may be passed to use another file.
    """

    def __init__(self, root: str | Path, catalog: Catalog | bool = True) -> None:
        self.root = Path(root)
        if catalog is True:
            self.catalog: Catalog | None = Catalog(self.root / CATALOG_NAME)
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
