"""Fuzzed inputs (hypothesis): edge-list files, feature/label arrays, configuration values and Planetoid pickles.

Every input either loads or fails with one of the project's clear error types (``ValueError``,
``FileNotFoundError``, ``pickle.UnpicklingError``) whose message is one line naming the file or setting --
never another exception, never a crash of the interpreter (a segfault would take the test process down).

The default run is short (about 30 s in all); ``STRATA_FUZZ_EXAMPLES=1000`` runs that many examples per test.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pipelines.config import PipelineConfig  # noqa: E402
from pipelines.methods.sources.edgelist import edgelist_source  # noqa: E402
from pipelines.methods.sources.planetoid import planetoid_source  # noqa: E402
from pipelines.methods.sources.validate import validate_source  # noqa: E402
from tests.pipelines.planetoid_fixtures import ALLX_ROWS, DIM, TEST_ROWS, crafted_csr, write_planetoid  # noqa: E402

EXAMPLES = int(os.environ.get("STRATA_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 40,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CLEAR = (ValueError, FileNotFoundError, pickle.UnpicklingError)


def _clear(error: BaseException, *names: str) -> None:
    """One line, naming one of ``names`` (a file or a setting)."""
    message = str(error)
    assert isinstance(error, CLEAR), f"{type(error).__name__}: {message}"
    assert message and "\n" not in message, message
    assert any(n in message for n in names), message


# ------------------------------------------------------------------------------------- edge lists

_ids = st.one_of(st.integers(-3, 12), st.sampled_from(["", "x", "1.5", "9" * 25, "-0", " 3", "nan"]))
_rows = st.lists(st.lists(_ids, min_size=0, max_size=4), min_size=0, max_size=30)
_seps = st.sampled_from([",", "\t", " ", ";"])


@FUZZ
@given(rows=_rows, sep=_seps, header=st.booleans(), junk=st.binary(max_size=40),
       num_nodes=st.one_of(st.none(), st.integers(1, 14)),
       features=st.one_of(st.just("ok"), st.sampled_from(["nan", "short", "3d", "object", "int"])),
       labels=st.sampled_from(["ok", "float", "negative", "2d", "big"]))
def test_fuzzed_edge_lists(rows: list[list[Any]], sep: str, header: bool, junk: bytes, num_nodes: int | None,
                           features: str, labels: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        path = root / "edges.csv"
        text = ("src,dst\n" if header else "") + "\n".join(sep.join(str(v) for v in r) for r in rows)
        path.write_bytes(text.encode() + junk)
        n = 12
        feats = {"ok": np.ones((n, 4), np.float32), "nan": np.full((n, 4), np.nan, np.float32),
                 "short": np.ones((3, 4), np.float32), "3d": np.ones((n, 2, 2), np.float32),
                 "object": np.array([None] * n, dtype=object), "int": np.ones((n, 4), np.int64)}[features]
        labs = {"ok": np.arange(n) % 3, "float": np.linspace(0, 2, n), "negative": -np.ones(n, np.int64) * 5,
                "2d": np.zeros((n, 2), np.int64), "big": np.full(n, 2**40)}[labels]
        np.save(root / "f.npy", feats, allow_pickle=True)
        np.save(root / "l.npy", labs)
        try:
            source = validate_source(edgelist_source(path, features=root / "f.npy", labels=root / "l.npy",
                                                     num_nodes=num_nodes))
            for _ in source.edge_chunks():
                pass
            for _ in source.feature_chunks():
                pass
        except Exception as e:  # noqa: BLE001 - the point: which exceptions escape
            _clear(e, str(path), str(root / "f.npy"), str(root / "l.npy"), "edges", "features", "labels",
                   "train_idx", "val_idx", "test_idx")


# ---------------------------------------------------------------------------------------- configs

_VALUES = st.one_of(st.integers(-(2**65), 2**65), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=12), st.booleans(), st.none(),
                    st.lists(st.integers(-5, 50), max_size=5), st.dictionaries(st.text(max_size=4), st.integers(),
                                                                                max_size=2))


def _settings() -> list[tuple[str, str]]:
    from pipelines.config import describe_settings

    return [tuple(row["key"].split(".", 1)) if "." in row["key"] else ("", row["key"])
            for row in describe_settings(PipelineConfig())]


_KEYS = _settings()


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(_KEYS), _VALUES), min_size=1, max_size=4))
def test_fuzzed_config_values(items: list[tuple[tuple[str, str], Any]]) -> None:
    data: dict[str, Any] = {}
    for (section, key), value in items:
        (data.setdefault(section, {}) if section else data)[key] = value
    try:
        cfg = PipelineConfig.validated(data)
    except Exception as e:  # noqa: BLE001
        _clear(e, "'")
        assert str(e).startswith("'") and "validation error" not in str(e), str(e)
        return
    assert cfg.sample.fanouts and all(f == -1 or f >= 1 for f in cfg.sample.fanouts)
    PipelineConfig.model_validate_json(cfg.model_dump_json())  # what a Dagster run rebuilds it from (no inf/NaN)
    assert cfg.train.num_layers in (0, len(cfg.sample.fanouts))


# ---------------------------------------------------------------------------------- Planetoid pickles

_arrays = st.one_of(
    st.builds(lambda shape, dtype: np.zeros(shape, dtype), st.lists(st.integers(0, 9), max_size=3).map(tuple),
              st.sampled_from([np.float32, np.int64, np.int8, np.bool_, np.complex64, "U3"])),
    st.lists(st.integers(-(2**40), 2**40), max_size=12).map(np.array),
)
_csr = st.builds(crafted_csr, _arrays, _arrays, _arrays,
                 st.one_of(st.tuples(st.integers(-2, 20), st.integers(-2, 20)), st.just((ALLX_ROWS, DIM)),
                           st.none(), st.text(max_size=3)))
_graph = st.one_of(
    st.dictionaries(st.integers(-5, 2**63 - 1), st.lists(st.integers(-5, 30), max_size=4), max_size=8),
    st.dictionaries(st.integers(0, 11), st.one_of(st.integers(), st.text(max_size=2), st.none()), max_size=3),
    st.lists(st.integers(), max_size=3),
).map(lambda g: defaultdict(list, g) if isinstance(g, dict) else g)
_objects = st.one_of(_arrays, _csr, _graph, st.none(), st.text(max_size=5),
                     st.just(sp.csr_matrix(np.ones((ALLX_ROWS, DIM), np.float32))))
_index = st.one_of(st.lists(st.integers(-3, 30), max_size=8).map(lambda ids: "\n".join(map(str, ids))),
                   st.text(max_size=20), st.just("\n".join(str(i) for i in range(ALLX_ROWS, ALLX_ROWS + TEST_ROWS))))


@FUZZ
@given(key=st.sampled_from(["x", "tx", "allx", "y", "ty", "ally", "graph"]), obj=_objects, index=_index,
       raw=st.one_of(st.none(), st.binary(max_size=60)), name=st.sampled_from(["cora", "citeseer"]))
def test_fuzzed_planetoid_pickles(key: str, obj: Any, index: str, raw: bytes | None, name: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        directory = write_planetoid(Path(d), name, **{key: raw if raw is not None else obj, "test_index": index})
        try:
            source = validate_source(planetoid_source(directory, name))
            for _ in source.edge_chunks():
                pass
            for _ in source.feature_chunks():
                pass
        except Exception as e:  # noqa: BLE001
            _clear(e, str(directory))
