"""Validation: every error case names the file (or source) and the offending index."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.methods.sources.base import GraphSource, array_edge_chunks, dedupe_csr_rows, symmetrise_chunk
from pipelines.methods.sources.validate import (
    check_edge_chunk,
    check_feature_chunk,
    check_labels,
    check_splits,
    validate_source,
)
from tests.pipelines.source_fixtures import collect_edges, collect_features, hand_graph


def _source(**changes) -> GraphSource:
    g = hand_graph()
    fields = {
        "name": "hand",
        "num_nodes": 6,
        "feature_dim": 3,
        "num_classes": 2,
        "edge_chunks": array_edge_chunks(*symmetrise_chunk(g["src"], g["dst"]), chunk_edges=3),
        "feature_chunks": lambda: iter([g["features"][:4], g["features"][4:]]),
        "labels": g["labels"],
        "train_idx": g["train_idx"],
        "val_idx": g["val_idx"],
        "test_idx": g["test_idx"],
        "files": {"source": "hand.src", "edges": "e.csv", "features": "x.npy", "labels": "y.npy"},
    }
    fields.update(changes)
    return GraphSource(**fields)


def test_valid_source_passes_through() -> None:
    g = hand_graph()
    source = validate_source(_source())
    src, dst = collect_edges(source)
    assert len(src) == 8 and src.dtype == np.int64
    np.testing.assert_array_equal(collect_features(source), g["features"])


def test_edge_id_out_of_range_reports_global_position() -> None:
    src = np.array([0, 1, 2, 3, 4, 5], dtype=np.int64)
    dst = np.array([1, 2, 3, 4, 7, 0], dtype=np.int64)
    source = validate_source(_source(edge_chunks=array_edge_chunks(src, dst, chunk_edges=4)))
    with pytest.raises(ValueError, match=r"^'e.csv: dst\[4\]' expected a node id in \[0, 6\) \(got 7\)$"):
        collect_edges(source)
    with pytest.raises(ValueError, match=r"'f: src\[10\]' expected a node id in \[0, 6\) \(got -1\)"):
        check_edge_chunk(np.array([-1]), np.array([0]), 6, "f", offset=10)


def test_edge_shape_and_dtype() -> None:
    with pytest.raises(ValueError, match=r"'f: dst' expected as many entries as 'src' \(2\) \(got 1\)"):
        check_edge_chunk(np.array([0, 1]), np.array([0]), 6, "f")
    with pytest.raises(ValueError, match=r"'f: src' expected integer ids \(got dtype float64\)"):
        check_edge_chunk(np.array([0.0]), np.array([0]), 6, "f")


def test_feature_errors_name_row() -> None:
    x = np.zeros((5, 3), dtype=np.float32)
    x[2, 1] = np.nan
    with pytest.raises(
        ValueError, match=r"'x.npy: features\[12\]' expected finite values \(got nan in column 1\)"
    ):
        check_feature_chunk(x, 3, "x.npy", row_offset=10)
    with pytest.raises(
        ValueError, match=r"'x.npy: features\[10\]' expected rows of 4 columns \(got a chunk of shape"
    ):
        check_feature_chunk(x, 4, "x.npy", row_offset=10)
    big = np.array([[1e300, 0, 0]])  # overflows float32
    with pytest.raises(ValueError, match=r"features\[0\]' expected finite values \(got inf in column 0\)"):
        check_feature_chunk(big, 3, "x.npy")


def test_feature_row_count_is_checked_at_the_end() -> None:
    g = hand_graph()
    short = validate_source(_source(feature_chunks=lambda: iter([g["features"][:5]])))
    with pytest.raises(ValueError, match=r"'x.npy: features' expected 6 rows \(got 5\)"):
        collect_features(short)
    long = validate_source(_source(feature_chunks=lambda: iter([g["features"], g["features"][:1]])))
    with pytest.raises(ValueError, match=r"'x.npy: features' expected 6 rows \(got at least 7\)"):
        collect_features(long)


def test_label_errors() -> None:
    with pytest.raises(ValueError, match=r"'y.npy: labels\[3\]' expected a class in \[-1, 2\) \(got 2\)"):
        check_labels(np.array([0, 1, -1, 2, 0, 0]), 6, 2, "y.npy")
    with pytest.raises(ValueError, match=r"'y.npy: labels' expected shape \(6,\) \(got \(5,\)\)"):
        check_labels(np.zeros(5, np.int64), 6, 2, "y.npy")
    with pytest.raises(ValueError, match=r"'y.npy: labels\[4\]' expected a class in \[-1, 2\) \(got -2\)"):
        validate_source(_source(labels=np.array([0, 1, 0, 1, -2, 0])))


@pytest.mark.parametrize(
    ("splits", "message"),
    [
        ({"train_idx": np.array([0, 9])}, r"'s: train_idx\[1\]' expected a node id in \[0, 6\) \(got 9\)"),
        (
            {"val_idx": np.array([2, 2])},
            r"'s: val_idx\[1\]' expected sorted unique ids, greater than the previous 2 \(got 2\)",
        ),
        ({"val_idx": np.array([5, 2])}, r"'s: val_idx\[1\]' expected sorted unique ids"),
        (
            {"test_idx": np.array([3, 4])},
            r"'s: test_idx\[1\]' expected a labelled node \(got node 4 with label -1\)",
        ),
        (
            {"test_idx": np.array([1, 3])},
            r"'s: train_idx\[1\]' expected no node also in 'test_idx' \(got node 1, in both\)",
        ),
        ({"train_idx": np.array([0.0])}, r"'s: train_idx' expected integer ids \(got dtype float64\)"),
    ],
)
def test_split_errors(splits: dict, message: str) -> None:
    g = hand_graph()
    full = {k: g[k] for k in ("train_idx", "val_idx", "test_idx")} | splits
    with pytest.raises(ValueError, match=message):
        check_splits(full["train_idx"], full["val_idx"], full["test_idx"], 6, g["labels"], "s")


def test_split_errors_name_the_split_file() -> None:
    files = {"source": "s", "train_idx": "train.npy", "val_idx": "val.npy", "test_idx": "test.npy"}
    with pytest.raises(ValueError, match=r"'val.npy: val_idx\[0\]' expected a node id"):
        validate_source(_source(val_idx=np.array([-1]), files=files))


def test_metadata_errors() -> None:
    with pytest.raises(ValueError, match=r"'hand.src: num_classes' expected a positive integer \(got 0\)"):
        validate_source(_source(num_classes=0))


def test_symmetrise_and_dedupe_helpers() -> None:
    src, dst = symmetrise_chunk(np.array([0, 1, 2]), np.array([1, 1, 0]))
    assert list(zip(src.tolist(), dst.tolist(), strict=True)) == [(0, 1), (2, 0), (1, 0), (0, 2)]
    # rows 10..12 of a larger CSR: [3, 1, 3], [], [2, 2, 0]
    indptr = np.array([5, 8, 8, 11])
    indices = np.array([3, 1, 3, 2, 2, 0])
    out_ptr, out_idx = dedupe_csr_rows(indptr, indices)
    np.testing.assert_array_equal(out_ptr, [0, 2, 2, 4])
    np.testing.assert_array_equal(out_idx, [1, 3, 0, 2])
