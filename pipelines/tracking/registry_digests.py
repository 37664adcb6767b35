"""Digests of the registered model copies: recorded when the export stage logs them, checked before use.

The MLflow registry keeps its own copy of every registered model, outside the artifact store and its
manifests. When the export stage logs a model (:func:`pipelines.tracking.model_registry.log_and_register`, and the
link export), it hashes every file it uploads -- the MLflow model directory a version's ``source`` points at,
and the export files copied under the training run's ``export/`` -- with ``blake2b`` (the artifact store's
checksum, :func:`storage_kernels.arrays.file_checksum`), and records them on the new model version in the call
that creates it: the version tag ``strata.digests``, a JSON object ``{"format": 1, "source": {path: digest},
"run": {path: digest}}`` (paths relative to the source and to the run's artifact root).

:func:`verify_registry` (``strata verify``) re-hashes the stored copies of every registered version: a changed,
missing or unrecorded file makes the version BAD, naming the file and both digests. ``strata models export``
checks the files it downloads the same way (:func:`compare`) and refuses to hand out one that differs. A
version registered before digests has no tag: it is reported ``unverified (registered before digests)``,
never failed.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from storage_kernels.arrays import file_checksum

__all__ = ["DIGESTS_TAG", "UNVERIFIED", "FileProblem", "VersionCheck", "check_version", "compare", "digests_tag",
           "local_copy", "location", "recorded", "tree_digests", "verify_registry"]

#: The model-version tag holding the digests of the version's files.
DIGESTS_TAG = "strata.digests"
_FORMAT = 1
#: What a version registered before digests is (reported, not failed).
UNVERIFIED = "unverified (registered before digests)"


def tree_digests(directory: str | Path) -> dict[str, str]:
    """``{path relative to directory (posix): "blake2b:<hex>"}`` of every file under ``directory``."""
    directory = Path(directory)
    return {p.relative_to(directory).as_posix(): file_checksum(p) for p in sorted(directory.rglob("*"))
            if p.is_file()}


def digests_tag(source: Mapping[str, str], run: Mapping[str, str]) -> dict[str, str]:
    """The version tag recording ``source`` (the logged model's files) and ``run`` (the run's export files)."""
    record = {"format": _FORMAT, "source": dict(sorted(source.items())), "run": dict(sorted(run.items()))}
    return {DIGESTS_TAG: json.dumps(record, sort_keys=True, separators=(",", ":"))}


def recorded(tags: Mapping[str, str]) -> dict[str, dict[str, str]] | None:
    """``{"source": {...}, "run": {...}}`` recorded on a version (its ``tags``), or None when it has none
    (registered before digests). ``ValueError`` naming the tag when it is there but not such a record."""
    text = tags.get(DIGESTS_TAG)
    if text is None:
        return None
    try:
        record = json.loads(text)
        ok = (isinstance(record, dict) and record.get("format") == _FORMAT
              and all(isinstance(record.get(k), dict) for k in ("source", "run")))
    except json.JSONDecodeError:
        ok = False
    if not ok:
        raise ValueError(f"'{DIGESTS_TAG}' expected a format-{_FORMAT} JSON record of file digests "
                         f"(got {text[:80]!r})")
    return {"source": dict(record["source"]), "run": dict(record["run"])}


@dataclass(frozen=True)
class FileProblem:
    """A stored file that is not what was logged: ``'<where>' expected <expected> (got <actual>)``."""

    where: str  # the stored file (a path, or a URI for a remote store)
    expected: str
    actual: str

    def line(self) -> str:
        return f"'{self.where}' expected {self.expected} (got {self.actual})"


def compare(directory: Path, expected: Mapping[str, str], where: str, *, only: Iterable[str] | None = None
            ) -> list[FileProblem]:
    """The files of ``directory`` (a copy of the stored ``where``) that differ from ``expected``: changed or
    missing, and, unless ``only`` names the files to check, present but not recorded."""
    names = sorted(only) if only is not None else sorted(expected)
    problems = [p for name in names if (p := _check_file(directory / name, expected.get(name), f"{where}/{name}"))]
    if only is None:
        present = {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}
        for name in sorted(present - set(expected)):
            problems.append(FileProblem(f"{where}/{name}", "no file (none was logged there)",
                                        f"a file with checksum {file_checksum(directory / name)}"))
    return problems


def _check_file(path: Path, digest: str | None, where: str) -> FileProblem | None:
    if digest is None:
        return FileProblem(where, "a file recorded when the version was logged", "no digest for it")
    try:
        actual = file_checksum(path)
    except FileNotFoundError:
        return FileProblem(where, f"checksum {digest}", "no such file")
    except OSError as e:
        return FileProblem(where, f"checksum {digest}", f"an unreadable file: {type(e).__name__}: {e.strerror}")
    return None if actual == digest else FileProblem(where, f"checksum {digest}", actual)


def _local_path(uri: str) -> Path | None:
    """The local path of artifact ``uri`` in a local store (``file:`` or a plain path), else None."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(url2pathname(parsed.path))
    return Path(uri) if not parsed.scheme else None


def location(uri: str) -> str:
    """How a message names the stored artifact ``uri``: its local path in a local store, else the URI."""
    local = _local_path(uri)
    return str(local) if local is not None else uri


@contextlib.contextmanager
def local_copy(uri: str) -> Iterator[Path]:
    """The stored file or directory at artifact ``uri`` as a local path: itself in a local store (read in
    place), else a download into a temporary directory (removed after)."""
    local = _local_path(uri)
    if local is not None:
        yield local
        return
    from mlflow.artifacts import download_artifacts

    with tempfile.TemporaryDirectory(prefix="strata-verify-") as tmp:
        yield Path(download_artifacts(artifact_uri=uri, dst_path=tmp))


@dataclass
class VersionCheck:
    """One registered version: ``OK``, ``BAD`` (its problems) or ``UNVERIFIED`` (registered before digests)."""

    name: str
    version: int
    status: str
    files: int = 0
    problems: list[FileProblem] = field(default_factory=list)

    def problem(self) -> str:
        """The first problem's line (and how many more), ``UNVERIFIED``'s note, or ''."""
        if self.status == "UNVERIFIED":
            return UNVERIFIED
        if not self.problems:
            return ""
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        return self.problems[0].line() + more

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.name, "version": self.version, "status": self.status, "files": self.files,
                "problem": self.problem(), "problems": [p.line() for p in self.problems]}


def check_version(client: Any, info: Any) -> VersionCheck:
    """Re-hash the stored copies of registered version ``info`` (``trainer.model_versions.ModelVersionInfo``):
    its model directory (``info.source``) and its run's export files, against the digests recorded on it."""
    from mlflow.exceptions import MlflowException

    try:
        record = recorded(info.tags)
    except ValueError as e:
        return VersionCheck(info.name, info.version, "BAD",
                            problems=[FileProblem(f"{info.uri} tag {DIGESTS_TAG}", "a digest record", str(e))])
    if record is None:
        return VersionCheck(info.name, info.version, "UNVERIFIED")
    files = len(record["source"]) + len(record["run"])
    try:
        with local_copy(info.source) as source:
            problems = compare(source, record["source"], location(info.source).rstrip("/"))
        if record["run"]:
            run_root = client.get_run(info.run_id).info.artifact_uri.rstrip("/")
            for name, digest in sorted(record["run"].items()):
                with local_copy(f"{run_root}/{name}") as path:
                    problem = _check_file(path, digest, location(f"{run_root}/{name}"))
                if problem is not None:
                    problems.append(problem)
    except MlflowException as e:  # a run or a remote copy that cannot be read
        problems = [FileProblem(info.source, "its stored files", f"{type(e).__name__}: {e.message.splitlines()[0]}")]
    return VersionCheck(info.name, info.version, "BAD" if problems else "OK", files, problems)


def verify_registry(root: str | Path, dataset: str | None = None) -> list[VersionCheck]:
    """Check every registered version in ``root``'s MLflow registry (``[]`` without one); with ``dataset``, only
    the versions whose training run is tagged with that dataset (``strata.dataset``)."""
    from pipelines.core.paths import StrataPaths

    paths = StrataPaths(Path(root))
    if not (paths.mlflow_dir / "mlflow.db").is_file():
        return []
    from trainer.model_versions import list_versions, registry_client

    client = registry_client(paths.mlflow_tracking_uri)
    checks = []
    for info in list_versions(client):
        if dataset is not None and _dataset_of(client, info.run_id) != dataset:
            continue
        checks.append(check_version(client, info))
    return checks


def _dataset_of(client: Any, run_id: str | None) -> str | None:
    """The dataset a version's training run is tagged with (None: no run, or no tag)."""
    from mlflow.exceptions import MlflowException

    if not run_id:
        return None
    try:
        return client.get_run(run_id).data.tags.get("strata.dataset")
    except MlflowException:
        return None
