"""The label rules, checked at ingest with one line naming the file and row: integers in [0, C), -1 for
unlabelled; C bounded by the node count (and 65,536) unless the source states it; no NaN; at least one labelled
node; and an explicit ``train.num_classes`` that covers every label, refused at the first stage of a run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.methods.sources.edgelist import edgelist_source
from pipelines.methods.sources.ogb import ogb_source
from pipelines.methods.sources.planetoid import planetoid_source
from pipelines.methods.sources.validate import (
    MAX_DERIVED_CLASSES,
    derived_num_classes,
    integer_labels,
    max_derived_classes,
    validate_source,
)
from pipelines.runner import StageRunner
from tests.pipelines.planetoid_fixtures import valid_objects, write_planetoid
from tests.pipelines.source_fixtures import write_ogb_dir

N = 300


def _ring(tmp_path: Path, labels: np.ndarray, **options):
    """An edge-list source: a ring of N nodes, 4 features, the given labels (``y.npy``)."""
    edges = tmp_path / "edges.csv"
    edges.write_text("".join(f"{i},{(i + 1) % N}\n" for i in range(N)))
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((N, 4), dtype=np.float32))
    np.save(tmp_path / "y.npy", labels)
    return edgelist_source(edges, features=tmp_path / "x.npy", labels=tmp_path / "y.npy", **options)


def _labels(dtype: type = np.int64) -> np.ndarray:
    return (np.arange(N) % 3).astype(dtype)


def test_the_bound_on_an_implied_class_count() -> None:
    assert max_derived_classes(N) == N and max_derived_classes(10**9) == MAX_DERIVED_CLASSES == 65_536
    assert derived_num_classes(np.array([-1, 0, 4]), 10, "y") == 5 and derived_num_classes(np.array([-1]), 3, "y") == 1


@pytest.mark.parametrize("label", [N, 100_000, 10**6, 2**31 - 1, 2**62])
def test_a_label_beyond_the_node_count_is_refused_at_ingest(tmp_path: Path, label: int) -> None:
    y = _labels()
    y[17] = label
    with pytest.raises(ValueError) as info:
        _ring(tmp_path, y)
    assert str(info.value) == (f"'{tmp_path / 'y.npy'}: labels[17]' expected a class in [0, {N}), at most the node "
                               f"count and 65,536 (got {label}); with more classes, state how many: "
                               "--set ingest.options.num_classes=C")


def test_a_stated_class_count_lifts_the_bound(tmp_path: Path) -> None:
    y = _labels()
    y[17] = 100_000
    source = validate_source(_ring(tmp_path, y, num_classes=100_001))
    assert source.num_classes == 100_001 and source.labels[17] == 100_000
    with pytest.raises(ValueError, match=r"y.npy: labels\[17\]' expected a class in \[-1, 1000\) \(got 100000\)"):
        validate_source(_ring(tmp_path, y, num_classes=1000))


def test_nan_and_fractional_labels_are_refused_by_row(tmp_path: Path) -> None:
    y = _labels(np.float64)
    y[42] = np.nan
    with pytest.raises(ValueError, match=r"y.npy: labels\[42\]' expected an integer class, or -1 for unlabelled "
                                         r"\(got nan\)$"):
        _ring(tmp_path, y)
    y[42], y[7] = 1.0, 2.5
    with pytest.raises(ValueError, match=r"labels\[7\]' expected an integer class, or -1 for unlabelled \(got 2.5\)"):
        _ring(tmp_path, y)
    for bad in (np.inf, 1e300):
        with pytest.raises(ValueError, match=r"labels\[3\]' expected an integer class"):
            integer_labels(np.array([0.0, 1.0, 2.0, bad]), "y")
    with pytest.raises(ValueError, match=r"labels\[1\]' expected an integer class \(got 18446744073709551615\)"):
        integer_labels(np.array([0, 2**64 - 1], dtype=np.uint64), "y")


def test_whole_float_labels_are_read_and_minus_one_stays_unlabelled(tmp_path: Path) -> None:
    y = _labels(np.float32)
    y[::10] = -1
    source = validate_source(_ring(tmp_path, y))
    assert source.labels.dtype == np.int64 and source.num_classes == 3
    np.testing.assert_array_equal(source.labels, y.astype(np.int64))
    splits = np.concatenate([source.train_idx, source.val_idx, source.test_idx])
    assert not np.isin(np.arange(0, N, 10), splits).any()  # unlabelled nodes are in no split


def test_an_input_without_a_labelled_node_is_refused_at_ingest(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"y.npy: labels' expected at least one labelled node, a class >= 0 "
                                         rf"\(got {N} labels, all -1: unlabelled\)"):
        validate_source(_ring(tmp_path, np.full(N, -1)))


def test_ogb_labels_are_bounded_and_whole(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"node-label.csv.gz: labels\[5\]' expected a class in \[0, 6\)"):
        ogb_source(write_ogb_dir(tmp_path / "big", labels=["0", "1", "0", "1", "nan", "100000"]))
    with pytest.raises(ValueError, match=r"node-label.csv.gz: labels\[5\]' expected an integer class"):
        ogb_source(write_ogb_dir(tmp_path / "huge", labels=["0", "1", "0", "1", "nan", "1e300"]))
    assert ogb_source(write_ogb_dir(tmp_path / "stated", labels=["0", "1", "0", "1", "nan", "99"]),
                      num_classes=100).num_classes == 100


def test_planetoid_nan_labels_are_refused_naming_the_row(tmp_path: Path) -> None:
    ally = valid_objects()["ally"].astype(np.float64)
    ally[2] = np.nan  # argmax of a NaN row took the NaN's column as the class
    with pytest.raises(ValueError, match=r"ind.cora.ally: labels\[2\]' expected a one-hot row of finite values "
                                         r"\(got nan in column 0\)"):
        planetoid_source(write_planetoid(tmp_path, ally=ally), "cora")


def test_a_train_class_count_below_the_labels_is_refused_at_ingest(tmp_path: Path) -> None:
    store = StrataPaths.at(tmp_path).store()
    small = PipelineConfig.load(overrides=["train.num_classes=2"], dataset="tiny")  # tiny has 6 classes
    with pytest.raises(ValueError, match=r"^'train.num_classes' expected at least 6, the largest label of tiny \+ 1 "
                                         r"\(got 2\); 0 sizes the model from the labels$"):
        StageRunner(small, store).result("ingest")
    enough = PipelineConfig.load(overrides=["train.num_classes=6"], dataset="tiny")
    assert StageRunner(enough, store).result("ingest").reused  # built above, before the check; 6 classes pass
    graph = StageRunner(PipelineConfig.load(dataset="tiny"), store).result("ingest").artifact
    assert graph.stats["max_label"] == 5
