"""A published artifact: its immutable directory and manifest, and typed access to the files it lists."""

from __future__ import annotations

import json as _json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .arrays import FileInfo, file_checksum, open_array
from .storefs import MANIFEST_NAME

if TYPE_CHECKING:  # pyarrow is imported where Parquet is used: keeps `import` cheap for workers
    import pyarrow as pa

__all__ = ["Artifact"]

_MANIFEST_KEYS = ("dataset", "stage", "version", "files", "params", "upstream", "created_at")


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
