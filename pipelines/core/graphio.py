"""Reading a graph-shaped artifact (``ingest`` or ``reorder``) as memory-mapped arrays."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from storage_kernels.halfwords import as_words
from storage_kernels.store import Artifact

__all__ = ["ROW_CHUNK", "GraphArrays", "degree_chunks", "feature_dim", "feature_values", "load_graph", "narrow_labels"]


@dataclass(frozen=True)
class GraphArrays:
    """CSR, features, labels and splits of one graph artifact (memory-mapped, read-only).

    ``features`` are the rows as every tier moves them: float32, or a float16 file's 4-byte words
    (``storage_kernels.halfwords``), so ``feature_dim`` counts words there and ``row_bytes`` is exact."""

    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    #: The feature file and the features' real width (float16 files: values, not words), where loaded from an
    #: artifact: code that needs some rows' values reads them with aligned block reads
    #: (:func:`trainer.features.file.read_values`), never through the memory map, whose page faults read ahead.
    features_path: Path | None = None
    value_dim: int | None = None

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1

    @property
    def num_edges(self) -> int:
        return int(self.indptr[-1])

    @property
    def feature_dim(self) -> int:
        return int(self.features.shape[1])

    @property
    def row_bytes(self) -> int:
        return int(self.features.shape[1]) * self.features.dtype.itemsize

    def degrees(self) -> np.ndarray:
        return np.diff(self.indptr)

    def split(self, name: str) -> np.ndarray:
        return {"train": self.train_idx, "val": self.val_idx, "test": self.test_idx}[name]


def load_graph(artifact: Artifact) -> GraphArrays:
    """Open the graph arrays of an ``ingest`` or ``reorder`` artifact."""
    return GraphArrays(
        indptr=artifact.array("indptr.npy"),
        indices=artifact.array("indices.npy"),
        features=as_words(artifact.array("features.npy")),  # float16 files: rows as 4-byte words
        labels=artifact.array("labels.npy"),
        train_idx=artifact.array("train_idx.npy"),
        val_idx=artifact.array("val_idx.npy"),
        test_idx=artifact.array("test_idx.npy"),
        features_path=Path(artifact.file("features.npy")),
        value_dim=feature_dim(artifact),
    )


def feature_dim(artifact: Artifact) -> int:
    """The real feature width of an ``ingest`` or ``reorder`` artifact (its stats; else the stored width)."""
    dim = artifact.stats.get("feature_dim")
    return int(dim) if dim is not None else int(artifact.array("features.npy").shape[1])


def feature_values(artifact: Artifact) -> np.ndarray:
    """The feature matrix of an ``ingest`` or ``reorder`` artifact at its real width ``(N, feature_dim)``,
    memory-mapped: float32 as stored, or float16 without the pad column a file of an odd width carries (its
    rows are whole 4-byte words). For code that reads values, not the rows the tiers move."""
    features, dim = artifact.array("features.npy"), feature_dim(artifact)
    return features[:, :dim] if features.shape[1] > dim else features


#: Entries per chunk where an (N,) file is streamed (:func:`narrow_labels`, :func:`degree_chunks`): 32 MiB of int64.
ROW_CHUNK = 1 << 22


def degree_chunks(indptr: np.ndarray, chunk: int = ROW_CHUNK) -> Iterator[tuple[int, np.ndarray]]:
    """``(start, degrees)``: the degrees (int64) of rows ``start .. start + len(degrees)`` of the CSR offsets
    ``indptr`` (a memory map: read ``chunk`` rows at a time, never an (N,) array of degrees)."""
    n = len(indptr) - 1
    for start in range(0, n, chunk):
        yield start, np.diff(np.asarray(indptr[start : start + chunk + 1], dtype=np.int64))


def narrow_labels(labels: np.ndarray, chunk: int = ROW_CHUNK) -> np.ndarray:
    """A copy of integer ``labels`` (e.g. the memory-mapped int64 ``labels.npy``) in the narrowest signed type
    that holds them (int8 for up to 127 classes: 1 byte a node, not 8); the file is streamed ``chunk`` labels
    at a time, so nothing beside the result is O(N). Other dtypes are returned as an array, unchanged."""
    n = len(labels)
    if not n or labels.dtype.kind not in "iu":
        return np.asarray(labels)
    lo = min(int(np.asarray(labels[s : s + chunk]).min()) for s in range(0, n, chunk))
    hi = max(int(np.asarray(labels[s : s + chunk]).max()) for s in range(0, n, chunk))
    narrow = np.result_type(np.min_scalar_type(min(lo, -1)), np.min_scalar_type(-max(hi, 0) - 1))  # both signed
    held = np.empty(n, dtype=narrow if narrow.itemsize < labels.dtype.itemsize else labels.dtype)
    for start in range(0, n, chunk):
        held[start : start + chunk] = labels[start : start + chunk]
    return held
