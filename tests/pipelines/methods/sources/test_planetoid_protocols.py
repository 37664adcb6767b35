"""Planetoid pickles of every protocol NumPy and SciPy objects are written with (0-5) load through the restricted
unpickler, which still refuses every other global: a shell command, a decompressing codec, a huge ``bytes()``."""

from __future__ import annotations

import codecs
import os
import pickle
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from pipelines.methods.sources.planetoid import load_pickle, planetoid_source
from tests.pipelines.planetoid_fixtures import write_planetoid

PROTOCOLS = list(range(pickle.HIGHEST_PROTOCOL + 1))

OBJECTS: dict[str, Any] = {
    "float32 matrix": np.arange(12, dtype=np.float32).reshape(3, 4),
    "int32 one-hot": np.eye(4, dtype=np.int32),
    "bool matrix": np.eye(3, dtype=bool),
    "float64 fortran order": np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)),
    "empty": np.zeros((0, 5), dtype=np.float32),
    "csr matrix": sp.csr_matrix(np.array([[0, 1.5, 0], [2, 0, 0], [0, 0, 0]], dtype=np.float32)),
    "graph with numpy ids": defaultdict(list, {np.int64(0): [np.int64(1), 2], 1: [0], 2: []}),
}


def _same(loaded: Any, expected: Any) -> None:
    if sp.issparse(expected):
        assert type(loaded) is type(expected) and loaded.shape == expected.shape
        np.testing.assert_array_equal(loaded.toarray(), expected.toarray())
    elif isinstance(expected, np.ndarray):
        assert loaded.dtype == expected.dtype
        np.testing.assert_array_equal(loaded, expected)
    else:
        assert loaded == expected and type(loaded) is type(expected)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", sorted(OBJECTS))
def test_numpy_and_scipy_objects_load_under_every_protocol(tmp_path: Path, name: str, protocol: int) -> None:
    path = tmp_path / "ind.cora.x"
    path.write_bytes(pickle.dumps(OBJECTS[name], protocol=protocol))
    _same(load_pickle(path), OBJECTS[name])


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_planetoid_directory_of_any_protocol_reads_the_same(tmp_path: Path, protocol: int) -> None:
    reference = planetoid_source(write_planetoid(tmp_path / "p3"), "cora")
    source = planetoid_source(write_planetoid(tmp_path / f"p{protocol}", protocol=protocol), "cora")
    assert (source.num_nodes, source.feature_dim, source.num_classes) == (
        reference.num_nodes, reference.feature_dim, reference.num_classes)
    np.testing.assert_array_equal(source.labels, reference.labels)
    np.testing.assert_array_equal(np.vstack(list(source.feature_chunks())),
                                  np.vstack(list(reference.feature_chunks())))


class _Reduce:
    """Pickles as ``func(*args)``: what a hostile file asks the unpickler to call."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (self.func, self.args)


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize(("case", "message"), [
    ("a shell command", "posix.system' expected one of .*forbidden class"),
    ("a decompressing codec", "malformed pickle"),  # _codecs.encode admits latin1 text only
    ("a huge bytes()", "malformed pickle"),  # bytes() admits no argument
])
def test_other_globals_stay_refused(tmp_path: Path, protocol: int, case: str, message: str) -> None:
    marker = tmp_path / "pwned"
    obj = {"a shell command": _Reduce(os.system, f"touch {marker}"),
           "a decompressing codec": _Reduce(codecs.encode, "x" * 10, "zlib_codec"),
           "a huge bytes()": _Reduce(bytes, 10**12)}[case]
    path = tmp_path / "ind.cora.x"
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    with pytest.raises(pickle.UnpicklingError, match=message):
        load_pickle(path)
    assert not marker.exists()
