"""What every check is made of: :class:`Finding` (the outcome), :class:`StageCheck` (a named invariant of a
stage's artifact) and :class:`CheckInputs` (the artifact and its upstream artifacts), plus the streaming helpers
the invariants share (chunked ranges, range and coverage checks, segment tiling, the sample index), and
:func:`quarantine_failed`: what becomes of an artifact that fails a content check."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from storage_kernels.integrity import QUARANTINE_NAME, quarantine
from storage_kernels.locks import dataset_lock
from storage_kernels.store import Artifact, ArtifactStore

__all__ = ["CheckInputs", "Finding", "StageCheck", "quarantine_failed", "quarantined_copy"]

_CHUNK = 1 << 22  # elements per streamed chunk (32 MiB of int64)


@dataclass
class Finding:
    """The outcome of one invariant: passed, the first problem found (if any), and facts worth showing."""

    problems: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.problems

    def fail(self, message: str) -> None:
        self.problems.append(message)


@dataclass(frozen=True)
class CheckInputs:
    """The artifact under check and a way to open the upstream artifacts its manifest names."""

    artifact: Artifact
    store: ArtifactStore

    def upstream(self, stage: str) -> Artifact:
        """The version of ``stage`` this artifact was built from (``manifest["upstream"]``)."""
        if stage not in self.artifact.upstream:
            raise ValueError(f"'{self.artifact.path}/manifest.json' expected an upstream {stage!r} "
                             f"(got {sorted(self.artifact.upstream)})")
        return self.store.open(self.artifact.dataset, stage, self.artifact.upstream[stage])


@dataclass(frozen=True)
class StageCheck:
    """One blocking invariant of a stage's artifact: its name, what it asserts, and how it is evaluated.

    ``quarantine``: an artifact that fails it is quarantined (:func:`quarantine_failed`), as one that fails its
    checksum is: a check of the data the artifact holds (NaN, ranges, coverage). The model checks keep theirs:
    a rebuild means retraining, and a registered version points at it.
    """

    name: str
    description: str
    evaluate: Callable[[CheckInputs], Finding]
    quarantine: bool = True

    def run(self, artifact: Artifact, store: ArtifactStore) -> Finding:
        return self.evaluate(CheckInputs(artifact, store))


def quarantine_failed(artifact: Artifact, store: ArtifactStore, check: str, problem: str) -> Path | None:
    """Move an artifact that failed the content check ``check`` to ``<root>/.quarantine/`` and drop it from the
    catalog, as :func:`storage_kernels.integrity.quarantine` does with one that fails its checksum: the next run
    rebuilds it instead of failing on it again. Under the dataset's run lock (held already by the run itself).
    Returns where it went, or None when it was gone already (quarantined by another check or process)."""
    if not artifact.path.is_dir():
        return None
    with dataset_lock(store.root, artifact.dataset):
        return quarantine(store.root, artifact.path, f"check '{artifact.stage}:{check}' failed: {problem}",
                          store.catalog)


def quarantined_copy(artifact: Artifact, root: Path) -> Artifact | None:
    """``artifact`` where another check of its stage quarantined it (its newest copy under ``.quarantine/``), or
    None: the checks of a stage run as separate steps, and those after the one that failed still check the
    same files there, so each reports its own finding instead of a missing directory."""
    base = Path(root) / QUARANTINE_NAME / artifact.dataset / artifact.stage
    copies = sorted(base.glob(f"{artifact.version}-*"), key=lambda p: p.stat().st_mtime)
    return Artifact(copies[-1], manifest=artifact.manifest) if copies else None


def _chunks(n: int, size: int = _CHUNK) -> Iterator[tuple[int, int]]:
    for start in range(0, n, size):
        yield start, min(n, start + size)


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _check_range(finding: Finding, name: str, values: np.ndarray, low: int, high: int) -> None:
    """Every value of ``values`` in ``[low, high)`` (streamed); records the first offender."""
    for start, stop in _chunks(len(values)):
        chunk = np.asarray(values[start:stop])
        bad = (chunk < low) | (chunk >= high)
        if bad.any():
            i = _first(bad)
            finding.fail(f"'{name}[{start + i}]' expected a value in [{low}, {high}) (got {int(chunk[i])})")
            return


def _covers_once(finding: Finding, name: str, values: np.ndarray, n: int) -> None:
    """``values`` (length n, already range-checked) holds every id in ``[0, n)`` exactly once."""
    if len(values) != n:
        finding.fail(f"'{name}' expected {n} entries (got {len(values)})")
        return
    seen = np.zeros(n, dtype=bool)
    for start, stop in _chunks(n):
        seen[np.asarray(values[start:stop])] = True
    if not seen.all():  # n entries covering fewer than n ids: some id is repeated and another missing
        missing = _first(~seen)
        finding.fail(f"'{name}' expected every id in [0, {n}) exactly once (got {missing} missing)")


def _segments(offsets: np.ndarray, lengths: np.ndarray, total: int, name: str, f: Finding) -> np.ndarray | None:
    """Order of segments ``[offset, offset+length)`` if they tile ``[0, total)`` exactly, else None."""
    order = np.argsort(offsets, kind="stable")
    starts, lens = offsets[order], lengths[order]
    ends = starts + lens
    if (lens < 0).any() or (len(starts) and int(starts[0]) != 0) or (starts[1:] != ends[:-1]).any():
        f.fail(f"'{name}' expected per-batch segments that tile the file without gaps or overlaps")
        return None
    if (int(ends[-1]) if len(ends) else 0) != total:
        f.fail(f"'{name}' expected segments covering all {total} entries (got {int(ends[-1]) if len(ends) else 0})")
        return None
    return order


def _batch_index(samples: Artifact) -> dict[str, np.ndarray]:
    table = samples.parquet("batches.parquet")
    hop_counts = np.asarray(table.column("hop_counts").to_pylist(), dtype=np.int64)
    edge_counts = np.asarray(table.column("edge_counts").to_pylist(), dtype=np.int64)
    num_layers = hop_counts.shape[1] - 1 if hop_counts.ndim == 2 else 0
    return {
        "split": np.asarray(table.column("split").to_pylist(), dtype=object),
        "epoch": table.column("epoch").to_numpy().astype(np.int64),
        "num_seeds": table.column("num_seeds").to_numpy().astype(np.int64),
        "node_offset": table.column("node_offset").to_numpy().astype(np.int64),
        "indptr_offset": table.column("indptr_offset").to_numpy().astype(np.int64),
        "cols_offset": table.column("cols_offset").to_numpy().astype(np.int64),
        "hop_counts": hop_counts.reshape(-1, num_layers + 1),
        "edge_counts": edge_counts.reshape(-1, num_layers),
    }
