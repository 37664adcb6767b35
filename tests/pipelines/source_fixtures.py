"""Small on-disk inputs for the source tests: an OGB-shaped directory, edge lists, planetoid location."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from pipelines.methods.sources.base import GraphSource

__all__ = [
    "PLANETOID_DIR",
    "collect_edges",
    "collect_features",
    "edge_set",
    "hand_graph",
    "write_ogb_dir",
]

PLANETOID_DIR = Path(__file__).resolve().parents[2].parent / "shared/datasets/planetoid"


def hand_graph() -> dict[str, np.ndarray]:
    """A hand-drawn 6-node graph: edges (one direction), features, labels, a split.

    ::

        0 - 1 - 2      3 - 4     5 (isolated)
         \\_____/
    """
    rng = np.random.default_rng(7)
    return {
        "src": np.array([0, 1, 0, 3], dtype=np.int64),
        "dst": np.array([1, 2, 2, 4], dtype=np.int64),
        "features": rng.standard_normal((6, 3)).astype(np.float32),
        "labels": np.array([0, 1, 0, 1, -1, 0], dtype=np.int64),
        "train_idx": np.array([0, 1], dtype=np.int64),
        "val_idx": np.array([2, 5], dtype=np.int64),
        "test_idx": np.array([3], dtype=np.int64),
    }


def _write_csv(path: Path, rows: list[str], gz: bool) -> Path:
    text = "".join(f"{r}\n" for r in rows)
    if gz:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


def write_ogb_dir(root: Path, gz: bool = True, labels: list[str] | None = None) -> Path:
    """An OGB-shaped directory holding :func:`hand_graph` (label of node 4 written as ``nan``)."""
    g = hand_graph()
    raw = root / "raw"
    split = root / "split" / "random"
    raw.mkdir(parents=True)
    split.mkdir(parents=True)
    _write_csv(raw / "edge.csv", [f"{s},{d}" for s, d in zip(g["src"], g["dst"], strict=True)], gz)
    _write_csv(raw / "node-feat.csv", [",".join(repr(float(v)) for v in row) for row in g["features"]], gz)
    label_rows = labels or ["nan" if v < 0 else str(v) for v in g["labels"]]
    _write_csv(raw / "node-label.csv", label_rows, gz)
    _write_csv(raw / "num-node-list.csv", ["6"], gz)
    _write_csv(raw / "num-edge-list.csv", ["4"], gz)
    # OGB split files are not necessarily sorted
    _write_csv(split / "train.csv", ["1", "0"], gz)
    _write_csv(split / "valid.csv", ["5", "2"], gz)
    _write_csv(split / "test.csv", ["3"], gz)
    return root


def collect_edges(source: GraphSource) -> tuple[np.ndarray, np.ndarray]:
    """All edge chunks of a source, concatenated."""
    chunks = list(source.edge_chunks())
    if not chunks:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks])


def collect_features(source: GraphSource) -> np.ndarray:
    """All feature chunks of a source, stacked."""
    return np.concatenate(list(source.feature_chunks()))


def edge_set(src: np.ndarray, dst: np.ndarray) -> set[tuple[int, int]]:
    """Edges as a Python set (small graphs only)."""
    return set(zip(src.tolist(), dst.tolist(), strict=True))
