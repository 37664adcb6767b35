"""What every check is made of: :class:`Finding` (the outcome), :class:`StageCheck` (a named invariant of a
stage's artifact) and :class:`CheckInputs` (the artifact and its upstream artifacts), plus the streaming helpers
the invariants share (chunked ranges, range and coverage checks, segment tiling, the sample index)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from storage_kernels.store import Artifact, ArtifactStore

__all__ = ["CheckInputs", "Finding", "StageCheck"]

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
    """One blocking invariant of a stage's artifact: its name, what it asserts, and how it is evaluated."""

    name: str
    description: str
    evaluate: Callable[[CheckInputs], Finding]

    def run(self, artifact: Artifact, store: ArtifactStore) -> Finding:
        return self.evaluate(CheckInputs(artifact, store))


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
