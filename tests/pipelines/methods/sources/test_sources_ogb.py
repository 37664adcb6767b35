"""OGB raw-directory reader on a generated six-node directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipelines.methods.sources.ogb import ogb_source
from pipelines.methods.sources.validate import validate_source
from tests.pipelines.source_fixtures import (
    collect_edges,
    collect_features,
    edge_set,
    hand_graph,
    write_ogb_dir,
)


@pytest.mark.parametrize("gz", [True, False])
def test_reads_generated_directory(tmp_path: Path, gz: bool) -> None:
    g = hand_graph()
    source = validate_source(ogb_source(write_ogb_dir(tmp_path / "ogbn_hand", gz=gz)))
    assert (source.name, source.num_nodes, source.feature_dim, source.num_classes) == ("ogbn_hand", 6, 3, 2)
    np.testing.assert_array_equal(source.labels, g["labels"])  # "nan" -> -1
    np.testing.assert_array_equal(source.train_idx, [0, 1])  # sorted from the file's 1, 0
    np.testing.assert_array_equal(source.val_idx, [2, 5])
    np.testing.assert_array_equal(source.test_idx, [3])
    np.testing.assert_allclose(collect_features(source), g["features"], rtol=1e-6)
    forward = edge_set(g["src"], g["dst"])
    assert edge_set(*collect_edges(source)) == forward | {(d, s) for s, d in forward}
    assert source.description["split"] == "random"


def test_directed_edges_point_at_the_aggregating_row(tmp_path: Path) -> None:
    g = hand_graph()
    source = ogb_source(write_ogb_dir(tmp_path / "d"), undirected=False)
    assert not source.undirected
    assert edge_set(*collect_edges(source)) == edge_set(g["dst"], g["src"])


def test_small_blocks_stream_the_same_rows(tmp_path: Path) -> None:
    root = write_ogb_dir(tmp_path / "d", gz=False)
    small = ogb_source(root, block_bytes=128)
    assert len(list(small.feature_chunks())) > 1
    np.testing.assert_array_equal(collect_features(small), collect_features(ogb_source(root)))


def test_bad_edge_id_names_file_and_row(tmp_path: Path) -> None:
    root = write_ogb_dir(tmp_path / "d", gz=False)
    (root / "raw/edge.csv").write_text("0,1\n1,2\n2,9\n")
    with pytest.raises(ValueError, match=r"edge.csv: dst\[2\]' expected a node id in \[0, 6\) \(got 9\)"):
        collect_edges(ogb_source(root))


def test_nan_feature_names_file_and_row(tmp_path: Path) -> None:
    root = write_ogb_dir(tmp_path / "d", gz=False)
    lines = (root / "raw/node-feat.csv").read_text().splitlines()
    lines[4] = "0.5,nan,1.0"
    (root / "raw/node-feat.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(
        ValueError, match=r"node-feat.csv: features\[4\]' expected finite values \(got nan in column 1\)"
    ):
        collect_features(ogb_source(root))


def test_missing_and_ambiguous_layout(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="expected an OGB raw directory"):
        ogb_source(tmp_path)
    root = write_ogb_dir(tmp_path / "d")
    (root / "split/other").mkdir()
    with pytest.raises(
        ValueError,
        match=r"expected exactly one split folder or the option split=NAME \(got \['other', 'random'\]\)",
    ):
        ogb_source(root)
    with pytest.raises(FileNotFoundError, match=r"split/other/train.csv\(.gz\)' expected an OGB CSV file"):
        ogb_source(root, split="other")
    assert ogb_source(root, split="random").num_nodes == 6


def test_unlabelled_split_node_is_rejected(tmp_path: Path) -> None:
    root = write_ogb_dir(tmp_path / "d", labels=["0", "1", "nan", "1", "nan", "0"])
    with pytest.raises(
        ValueError, match=r"valid.csv.gz: val_idx\[0\]' expected a labelled node \(got node 2"
    ):
        validate_source(ogb_source(root))


def test_fractional_label_is_rejected(tmp_path: Path) -> None:
    root = write_ogb_dir(tmp_path / "d", labels=["0", "1", "0.5", "1", "nan", "0"])
    with pytest.raises(
        ValueError, match=r"node-label.csv.gz: labels\[2\]' expected an integer class \(got 0.5\)"
    ):
        ogb_source(root)
