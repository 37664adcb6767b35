"""Planetoid reader: real Cora / CiteSeer files (skipped when absent) and the restricted unpickler."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from pipelines.methods.sources.planetoid import RestrictedUnpickler, load_pickle, planetoid_source
from pipelines.methods.sources.validate import validate_source
from tests.pipelines.source_fixtures import PLANETOID_DIR, collect_edges, collect_features

needs_planetoid = pytest.mark.skipif(
    not (PLANETOID_DIR / "ind.cora.graph").exists(), reason=f"Planetoid files absent at {PLANETOID_DIR}"
)


class _RunsShell:
    """Pickles as a call to os.system: loading it with a plain unpickler would run a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_restricted_unpickler_rejects_os_system(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "ind.evil.x"
    evil.write_bytes(pickle.dumps(_RunsShell(marker), protocol=2))
    with pytest.raises(
        pickle.UnpicklingError, match=r"system' expected one of .*\(got a forbidden class\)"
    ) as info:
        load_pickle(evil)
    assert str(evil) in str(info.value)
    assert not marker.exists()


@pytest.mark.parametrize("target", [eval, getattr, pickle.loads])
def test_restricted_unpickler_rejects_other_callables(tmp_path: Path, target) -> None:
    path = tmp_path / "bad.pkl"

    class Reduce:
        def __reduce__(self):
            return (target, ("1",))

    path.write_bytes(pickle.dumps(Reduce(), protocol=2))
    with pytest.raises(pickle.UnpicklingError, match="forbidden class"):
        load_pickle(path)


def test_restricted_unpickler_admits_plain_data(tmp_path: Path) -> None:
    import io
    from collections import defaultdict

    graph = defaultdict(list, {0: [1, 2], 2: [0]})
    loaded = RestrictedUnpickler(io.BytesIO(pickle.dumps(graph, protocol=2))).load()
    assert loaded == graph


def test_missing_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="ind.cora"):
        planetoid_source(tmp_path, "cora")
    with pytest.raises(FileNotFoundError, match="expected a Planetoid directory"):
        planetoid_source(tmp_path / "nowhere", "cora")


@needs_planetoid
def test_cora_matches_pyg() -> None:
    source = validate_source(planetoid_source(PLANETOID_DIR, "cora"))
    assert (source.num_nodes, source.feature_dim, source.num_classes) == (2708, 1433, 7)
    assert (len(source.train_idx), len(source.val_idx), len(source.test_idx)) == (140, 500, 1000)
    np.testing.assert_array_equal(source.train_idx, np.arange(140))
    np.testing.assert_array_equal(source.val_idx, np.arange(140, 640))
    assert source.test_idx[0] == 1708 and source.test_idx[-1] == 2707
    np.testing.assert_array_equal(np.bincount(source.labels), [351, 217, 418, 818, 426, 298, 180])

    src, dst = collect_edges(source)
    assert len(src) == 10556  # 5278 undirected edges, both directions, as PyG
    assert not (src == dst).any()
    assert len(np.unique(src * source.num_nodes + dst)) == len(src)
    assert set(zip(src.tolist(), dst.tolist(), strict=True)) == set(
        zip(dst.tolist(), src.tolist(), strict=True)
    )

    x = collect_features(source)
    assert x.shape == (2708, 1433) and x.dtype == np.float32
    np.testing.assert_allclose(x.sum(1), 1.0, rtol=1e-5)  # NormalizeFeatures


@needs_planetoid
def test_cora_test_rows_follow_test_index() -> None:
    raw = planetoid_source(PLANETOID_DIR, "cora", normalize_features=False)
    x = collect_features(raw)
    assert set(np.unique(x)) == {0.0, 1.0}
    tx = load_pickle(PLANETOID_DIR / "ind.cora.tx").toarray()
    ty = load_pickle(PLANETOID_DIR / "ind.cora.ty")
    order = np.loadtxt(PLANETOID_DIR / "ind.cora.test.index", dtype=np.int64)
    assert order[0] != 1708  # the file is not sorted: the reorder matters
    np.testing.assert_array_equal(x[order], tx)
    np.testing.assert_array_equal(raw.labels[order], ty.argmax(1))


@needs_planetoid
def test_citeseer_pads_isolated_test_nodes() -> None:
    source = validate_source(planetoid_source(PLANETOID_DIR, "citeseer"))
    assert (source.num_nodes, source.feature_dim, source.num_classes) == (3327, 3703, 6)
    assert (len(source.train_idx), len(source.val_idx), len(source.test_idx)) == (120, 500, 1000)
    missing = np.flatnonzero(source.labels < 0)
    assert len(missing) == 15 and missing.min() >= 2312
    assert not np.isin(missing, source.test_idx).any()
    x = collect_features(source)
    assert not x[missing].any()
    src, _ = collect_edges(source)
    assert len(src) == 9104  # as PyG
