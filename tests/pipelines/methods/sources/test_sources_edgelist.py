"""Edge-list reader: CSV variants and Parquet, .npy arrays, splits, and errors naming the file and row."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.methods.sources.edgelist import RANDOM_SPLIT, edgelist_source, random_split
from pipelines.methods.sources.validate import validate_source
from tests.pipelines.source_fixtures import collect_edges, collect_features, edge_set, hand_graph


@pytest.fixture()
def arrays(tmp_path: Path) -> dict[str, Path]:
    g = hand_graph()
    paths = {}
    for key in ("features", "labels", "train_idx", "val_idx", "test_idx"):
        paths[key] = tmp_path / f"{key}.npy"
        np.save(paths[key], g[key])
    return paths


def _csv_text(header: str = "", sep: str = ",", comments: str = "") -> str:
    g = hand_graph()
    return comments + header + "".join(f"{s}{sep}{d}\n" for s, d in zip(g["src"], g["dst"], strict=True))


def _undirected(src: np.ndarray, dst: np.ndarray) -> set[tuple[int, int]]:
    forward = edge_set(src, dst)
    return forward | {(d, s) for s, d in forward}


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("plain.csv", _csv_text()),
        ("header.csv", _csv_text(header="source,target\n")),
        ("snap.txt", _csv_text(sep="\t", comments="# Directed graph\n# Nodes: 6\n")),
        ("spaces.txt", _csv_text(sep=" ", header="src dst\n")),
    ],
)
def test_csv_variants(tmp_path: Path, arrays: dict[str, Path], name: str, text: str) -> None:
    g = hand_graph()
    path = tmp_path / name
    path.write_text(text)
    source = validate_source(
        edgelist_source(path, features=arrays["features"], labels=arrays["labels"], num_nodes=6)
    )
    assert edge_set(*collect_edges(source)) == _undirected(g["src"], g["dst"])
    np.testing.assert_array_equal(collect_features(source), g["features"])
    assert source.num_classes == 2


def test_gzipped_csv_and_extra_columns(tmp_path: Path, arrays: dict[str, Path]) -> None:
    path = tmp_path / "weighted.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("0,1,0.5\n1,2,1.5\n0,2,1\n3,4,2\n")
    g = hand_graph()
    source = edgelist_source(path, features=arrays["features"], labels=arrays["labels"], num_nodes=6)
    assert edge_set(*collect_edges(source)) == _undirected(g["src"], g["dst"])
    assert source.name == "weighted"


def test_parquet_with_explicit_splits(tmp_path: Path, arrays: dict[str, Path]) -> None:
    g = hand_graph()
    path = tmp_path / "edges.parquet"
    pq.write_table(pa.table({"weight": [1.0] * 4, "dst": g["dst"], "src": g["src"].astype(np.int32)}), path)
    splits = {k: arrays[k] for k in ("train_idx", "val_idx", "test_idx")}
    source = validate_source(
        edgelist_source(path, features=arrays["features"], labels=arrays["labels"], num_nodes=6, **splits)
    )
    assert edge_set(*collect_edges(source)) == _undirected(g["src"], g["dst"])
    np.testing.assert_array_equal(source.val_idx, g["val_idx"])
    assert source.files["train_idx"] == str(arrays["train_idx"])


def test_num_nodes_defaults_to_max_id_plus_one(tmp_path: Path, arrays: dict[str, Path]) -> None:
    path = tmp_path / "e.csv"
    path.write_text(_csv_text())  # max id 4: node 5 is isolated, so the 6-row features do not fit
    with pytest.raises(
        ValueError, match=r"features.npy' expected 5 feature rows \(one per node, max edge id \+ 1; --set "
                          r"ingest.options.num_nodes=N for trailing isolated nodes\) \(got 6 rows\)"
    ):
        edgelist_source(path, features=arrays["features"], labels=arrays["labels"])
    path.write_text(_csv_text() + "5,0\n")
    assert edgelist_source(path, features=arrays["features"], labels=arrays["labels"]).num_nodes == 6


def test_labels_of_another_length_name_the_file_and_both_counts(tmp_path: Path, arrays: dict[str, Path]) -> None:
    path = tmp_path / "e.csv"
    path.write_text(_csv_text())
    np.save(tmp_path / "short.npy", np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match=r"short.npy' expected 6 labels \(one per node\) \(got 4\)"):
        edgelist_source(path, features=arrays["features"], labels=tmp_path / "short.npy", num_nodes=6)


def test_directed_input(tmp_path: Path, arrays: dict[str, Path]) -> None:
    g = hand_graph()
    path = tmp_path / "e.csv"
    path.write_text(_csv_text() + "2,2\n")  # a self loop is dropped
    source = edgelist_source(
        path, features=arrays["features"], labels=arrays["labels"], num_nodes=6, undirected=False
    )
    assert edge_set(*collect_edges(source)) == edge_set(g["dst"], g["src"])


def test_random_split_is_seeded_over_labelled_nodes() -> None:
    labels = np.array([0, 1, -1, 2] * 250)
    train, val, test = random_split(labels, seed=3)
    assert (len(train), len(val), len(test)) == tuple(int(750 * f) for f in RANDOM_SPLIT)
    assert (labels[np.concatenate([train, val, test])] >= 0).all()
    assert len(np.intersect1d(train, test)) == 0
    np.testing.assert_array_equal(train, random_split(labels, seed=3)[0])
    assert not np.array_equal(train, random_split(labels, seed=4)[0])


def test_bad_id_names_file_and_row(tmp_path: Path, arrays: dict[str, Path]) -> None:
    path = tmp_path / "e.csv"
    path.write_text("src,dst\n0,1\n1,-3\n")
    with pytest.raises(ValueError, match=r"e.csv: dst\[1\]' expected a node id in \[0, "):
        edgelist_source(path, features=arrays["features"], labels=arrays["labels"])
    path.write_text("0,1\n1,2\n2,6\n")
    source = edgelist_source(path, features=arrays["features"], labels=arrays["labels"], num_nodes=6)
    with pytest.raises(ValueError, match=r"e.csv: dst\[2\]' expected a node id in \[0, 6\) \(got 6\)"):
        collect_edges(source)
    path.write_text("0,1\n1,x\n")
    with pytest.raises(ValueError, match=r"e.csv' expected two integer columns"):
        collect_edges(
            edgelist_source(path, features=arrays["features"], labels=arrays["labels"], num_nodes=6)
        )


def test_npy_errors(tmp_path: Path, arrays: dict[str, Path]) -> None:
    path = tmp_path / "e.parquet"
    pq.write_table(pa.table({"a": [0], "b": [1]}), path)
    with pytest.raises(
        ValueError, match=r"e.parquet' expected integer columns 'src' and 'dst' \(got columns"
    ):
        edgelist_source(path, features=arrays["features"], labels=arrays["labels"], num_nodes=6)
    pq.write_table(pa.table({"src": [0, 5], "dst": [1, 2]}), path)
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([{"a": 1}] * 6, dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="objects.npy' expected a .npy array without Python objects"):
        edgelist_source(path, features=arrays["features"], labels=objects)
    with pytest.raises(FileNotFoundError, match="missing.npy' expected a .npy file for 'features'"):
        edgelist_source(path, features=tmp_path / "missing.npy", labels=arrays["labels"])
    with pytest.raises(ValueError, match=r"'splits' expected all of train_idx, val_idx, test_idx or none"):
        edgelist_source(
            path, features=arrays["features"], labels=arrays["labels"], train_idx=arrays["train_idx"]
        )
    bad = tmp_path / "f.npy"
    x = hand_graph()["features"].astype(np.float64)
    x[3, 2] = np.inf
    np.save(bad, x)
    source = edgelist_source(path, features=bad, labels=arrays["labels"])
    with pytest.raises(
        ValueError, match=r"f.npy: features\[3\]' expected finite values \(got inf in column 2\)"
    ):
        collect_features(source)


def test_wide_feature_rows_are_chunked_by_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.methods.sources import base

    assert base.feature_chunk_rows(100) == base.DEFAULT_CHUNK_ROWS  # narrow: the row count decides
    assert base.feature_chunk_rows(8192) == base.FEATURE_CHUNK_BYTES // (4 * 8192) == 2048
    assert base.feature_chunk_rows(1 << 26) == 1
    monkeypatch.setattr(base, "FEATURE_CHUNK_BYTES", 3 * 4 * 64)  # three rows of 64 columns
    n = 10
    np.save(tmp_path / "x.npy", np.arange(n * 64, dtype=np.float64).reshape(n, 64))  # float64: cast per chunk
    np.save(tmp_path / "y.npy", np.zeros(n, dtype=np.int64))
    (tmp_path / "e.csv").write_text("".join(f"{i},{(i + 1) % n}\n" for i in range(n)))
    source = edgelist_source(tmp_path / "e.csv", features=tmp_path / "x.npy", labels=tmp_path / "y.npy")
    chunks = list(source.feature_chunks())
    assert [len(c) for c in chunks] == [3, 3, 3, 1]
    np.testing.assert_array_equal(np.concatenate(chunks), np.load(tmp_path / "x.npy").astype(np.float32))
