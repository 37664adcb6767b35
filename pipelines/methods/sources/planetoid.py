"""Planetoid citation graphs (Cora, CiteSeer, PubMed) from the original ``ind.<name>.<key>`` files.

The binary files are pickles (Python 2 ones in the original release; rewritten ones of any protocol, 0-5).
Unpickling runs code chosen by the file, so they are read with :class:`RestrictedUnpickler`, which admits only
the NumPy / SciPy / builtin callables that arrays, sparse matrices and neighbour dicts are pickled with under
those protocols and raises :class:`pickle.UnpicklingError` naming anything else.

Assembly follows the GCN reference code and PyG's ``read_planetoid_data``: features = ``vstack(allx, tx)``
with the test rows put at the ids listed in ``test.index``; train = ``range(len(y))``, val = the next 500
ids, test = the sorted ``test.index``. CiteSeer lists no test row for some isolated nodes in the test id
range: their feature rows are zero, as in PyG. Their label is ``-1`` here (PyG's argmax of a zero row gives
0); they are in no split either way. Edges are symmetrised with self loops and duplicates dropped, as PyG
does.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.methods.sources.base import GraphSource, array_edge_chunks, dataset_name
from pipelines.methods.sources.kinds import SOURCE_KINDS, SourceKind
from pipelines.methods.sources.options import parse_bool, parse_int
from pipelines.methods.sources.validate import check_edge_chunk

if TYPE_CHECKING:
    import scipy.sparse as sp  # imported where a Planetoid file is read: 0.2 s off every CLI start

__all__ = ["PLANETOID_KEYS", "RestrictedUnpickler", "load_pickle", "planetoid_source"]

PLANETOID_KEYS = ("x", "tx", "allx", "y", "ty", "ally", "graph")
_VAL_SIZE = 500


def _sparse() -> Any:
    import scipy.sparse

    return scipy.sparse


def _numpy_reconstruct() -> Callable[..., Any]:
    try:
        from numpy._core.multiarray import _reconstruct  # NumPy >= 2
    except ImportError:  # pragma: no cover - NumPy 1.x
        from numpy.core.multiarray import _reconstruct
    return _reconstruct


def _numpy_core(module: str, name: str) -> Callable[[], Any]:
    """A NumPy reconstruction helper from ``numpy._core.<module>`` (NumPy >= 2) or ``numpy.core.<module>``."""

    def resolve() -> Any:
        import importlib

        try:
            return getattr(importlib.import_module(f"numpy._core.{module}"), name)
        except ImportError:  # pragma: no cover - NumPy 1.x
            return getattr(importlib.import_module(f"numpy.core.{module}"), name)

    return resolve


def _latin1(text: Any, encoding: str = "latin1", errors: str = "strict") -> bytes:
    """``_codecs.encode`` as pickles of protocol 0-2 write ``bytes`` (an array's buffer, a dtype code): latin-1
    text only. Another codec (zlib, bz2, ...) is no bytes literal and could inflate a few bytes into gigabytes."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1") or errors != "strict":
        raise pickle.UnpicklingError(f"'_codecs.encode' expected latin1 text (got {type(text).__name__}, "
                                     f"{str(encoding)[:20]!r})")
    return text.encode("latin1")


def _empty_bytes(*args: Any) -> bytes:
    """``bytes()`` as protocol 0-2 pickles write an empty ``bytes``; nothing else (``bytes(10**12)`` allocates)."""
    if args:
        raise pickle.UnpicklingError(f"'bytes' expected no arguments (got {len(args)})")
    return b""


def _copyreg_reconstructor() -> Callable[..., Any]:
    import copyreg

    return copyreg._reconstructor  # type: ignore[attr-defined]


# (module, name) as written in the pickle -> the object it may resolve to. Nothing else is admitted. NumPy and
# SciPy write these for arrays, dtypes, scalars and sparse matrices under every pickle protocol: 0-2 spell bytes
# as _codecs.encode(text, "latin1") (bytes() when empty) and objects without NEWOBJ through
# copyreg._reconstructor; 5 writes contiguous arrays as numpy's _frombuffer of an in-band buffer.
_ALLOWED: dict[tuple[str, str], Callable[[], Any]] = {
    ("numpy", "ndarray"): lambda: np.ndarray,
    ("numpy", "dtype"): lambda: np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _numpy_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _numpy_reconstruct,
    ("numpy.core.multiarray", "scalar"): _numpy_core("multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"): _numpy_core("multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"): _numpy_core("numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"): _numpy_core("numeric", "_frombuffer"),
    ("scipy.sparse.csr", "csr_matrix"): lambda: _sparse().csr_matrix,
    ("scipy.sparse._csr", "csr_matrix"): lambda: _sparse().csr_matrix,
    ("copyreg", "_reconstructor"): _copyreg_reconstructor,
    ("copy_reg", "_reconstructor"): _copyreg_reconstructor,
    ("_codecs", "encode"): lambda: _latin1,
    ("__builtin__", "bytes"): lambda: _empty_bytes,
    ("builtins", "bytes"): lambda: _empty_bytes,
    ("__builtin__", "object"): lambda: object,
    ("builtins", "object"): lambda: object,
    ("__builtin__", "list"): lambda: list,
    ("builtins", "list"): lambda: list,
    ("collections", "defaultdict"): lambda: __import__("collections").defaultdict,
}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the classes in an allowlist (the ones Planetoid files need).

    Raises:
        pickle.UnpicklingError: the pickle references any other global (e.g. ``os.system``).
    """

    allowed: dict[tuple[str, str], Callable[[], Any]] = _ALLOWED

    def find_class(self, module: str, name: str) -> Any:
        resolve = self.allowed.get((module, name))
        if resolve is None:
            raise pickle.UnpicklingError(
                f"'global {module}.{name}' expected one of "
                f"{sorted(f'{m}.{n}' for m, n in self.allowed)} (got a forbidden class)"
            )
        return resolve()


def load_pickle(path: Path) -> Any:
    """Load one (Python 2 or 3) pickle file with :class:`RestrictedUnpickler`.

    Raises:
        FileNotFoundError: the file is missing.
        pickle.UnpicklingError: the file references a forbidden class; the message names the file.
    """
    path = Path(path)
    try:
        with path.open("rb") as fh:
            return RestrictedUnpickler(fh, encoding="latin1").load()
    except pickle.UnpicklingError as e:
        if str(e).startswith("'global "):  # ours: names the forbidden class, nothing of the file's data
            raise pickle.UnpicklingError(f"'{path}': {e}") from e
        raise pickle.UnpicklingError(f"'{path}' expected a Planetoid pickle (got a malformed pickle)") from None
    except FileNotFoundError as e:
        raise FileNotFoundError(f"'{path}' expected a Planetoid pickle file (got no such file)") from e
    except (OSError, MemoryError):
        raise
    except Exception as e:  # a crafted stream fails inside a constructor: report the kind, never the data
        raise pickle.UnpicklingError(
            f"'{path}' expected a Planetoid pickle (got {type(e).__name__} while unpickling)") from None


def _numeric(value: Any, path: Path, what: str, kinds: str = "biuf", ndim: int = 1) -> np.ndarray:
    """``value`` as an array of ``ndim`` dimensions and a numeric dtype (a crafted pickle may hold anything)."""
    if not isinstance(value, np.ndarray) or value.dtype.kind not in kinds or value.ndim != ndim:
        got = (f"{value.dtype} shape {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__)
        raise ValueError(f"'{path}: {what}' expected a {ndim}-D numeric array (got {got})")
    return value


def _as_csr(obj: Any, path: Path) -> sp.csr_matrix:
    """A checked CSR feature matrix: every index in bounds before SciPy's C++ code touches it (a pickled
    ``csr_matrix`` restores its arrays without any check, and out-of-range indices crash SciPy)."""
    sp = _sparse()
    if sp.issparse(obj):
        state = getattr(obj, "__dict__", {})
        data = _numeric(state.get("data"), path, "data")
        indices = _numeric(state.get("indices"), path, "indices", "iu")
        indptr = _numeric(state.get("indptr"), path, "indptr", "iu")
        shape = state.get("_shape", state.get("shape"))
        if (not isinstance(shape, tuple) or len(shape) != 2
                or not all(isinstance(d, (int, np.integer)) and 0 <= d < 1 << 40 for d in shape)):
            raise ValueError(f"'{path}: shape' expected two non-negative integers (got {shape!r:.80})")
        rows, cols = (int(d) for d in shape)
        nnz = len(indices)
        if len(indptr) != rows + 1 or len(data) != nnz:
            raise ValueError(f"'{path}' expected indptr of {rows + 1} entries and data of {nnz} "
                             f"(got {len(indptr)} and {len(data)})")
        if rows and (indptr[0] != 0 or indptr[-1] != nnz or np.any(np.diff(indptr.astype(np.int64)) < 0)):
            raise ValueError(f"'{path}: indptr' expected non-decreasing offsets from 0 to {nnz} (got others)")
        if nnz and (int(indices.min()) < 0 or int(indices.max()) >= cols):
            bad = int(np.flatnonzero((indices < 0) | (indices >= cols))[0])
            raise ValueError(f"'{path}: indices[{bad}]' expected a column in [0, {cols}) (got {int(indices[bad])})")
        return sp.csr_matrix((data.astype(np.float32), indices.astype(np.int64), indptr.astype(np.int64)),
                             shape=(rows, cols))
    if isinstance(obj, np.ndarray) and obj.ndim == 2:
        return sp.csr_matrix(_numeric(obj, path, "matrix", ndim=2).astype(np.float32))
    raise ValueError(f"'{path}' expected a 2-D feature matrix (got {type(obj).__name__})")


def _as_onehot(obj: Any, path: Path) -> np.ndarray:
    """A checked one-hot label matrix: 2-D, numeric, every value finite (argmax would take a NaN for the class)."""
    if not isinstance(obj, np.ndarray):
        raise ValueError(f"'{path}' expected a 2-D one-hot label matrix (got {type(obj).__name__})")
    arr = np.asarray(obj)
    if arr.ndim != 2:
        raise ValueError(f"'{path}' expected a 2-D one-hot label matrix (got shape {arr.shape})")
    arr = _numeric(arr, path, "labels", ndim=2)
    if arr.dtype.kind == "f" and arr.size and not np.isfinite(arr).all():
        row = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
        col = int(np.flatnonzero(~np.isfinite(arr[row]))[0])
        raise ValueError(f"'{path}: labels[{row}]' expected a one-hot row of finite values (got {arr[row, col]} in "
                         f"column {col})")
    return arr


def _read_test_index(path: Path) -> np.ndarray:
    try:
        text = path.read_text().split()
    except FileNotFoundError as e:
        raise FileNotFoundError(f"'{path}' expected a test index file (got no such file)") from e
    out = np.empty(len(text), dtype=np.int64)
    for i, token in enumerate(text):
        try:
            out[i] = int(token)
        except (ValueError, OverflowError):  # the message names the position only, never the file's text
            raise ValueError(f"'{path}: line {i + 1}' expected an integer node id (got other text)") from None
    return out


def _check_test_index(test_index: np.ndarray, first: int, path: Path, max_span: int) -> None:
    """Test ids are distinct and follow the ``allx`` rows (``first``); their span is bounded by ``max_span``
    (CiteSeer pads the span with zero rows, so a huge id would otherwise allocate a huge matrix)."""
    if not len(test_index):
        raise ValueError(f"'{path}' expected at least one test node id (got none)")
    bad = np.flatnonzero((test_index < first) | (test_index >= first + max_span))
    if bad.size:
        raise ValueError(f"'{path}: line {int(bad[0]) + 1}' expected a node id in [{first}, {first + max_span}) "
                         f"(got {int(test_index[bad[0]])})")
    if len(np.unique(test_index)) != len(test_index):
        raise ValueError(f"'{path}' expected distinct node ids (got duplicates)")
    if int(test_index.min()) != first:
        raise ValueError(f"'{path}' expected the smallest id to be {first}, the first row after allx "
                         f"(got {int(test_index.min())})")


def _graph_edges(graph: Any, num_nodes: int, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Adjacency dict -> symmetrised, loop-free, deduplicated (src, dst) sorted by (src, dst)."""
    if not isinstance(graph, dict):
        raise ValueError(f"'{path}' expected a dict of neighbour lists (got {type(graph).__name__})")
    try:
        if not all(isinstance(v, (list, tuple, np.ndarray)) for v in graph.values()):
            raise TypeError("a neighbour list is not a list")
        keys = np.fromiter(graph.keys(), dtype=np.int64, count=len(graph))
        lengths = np.fromiter((len(v) for v in graph.values()), dtype=np.int64, count=len(graph))
        cols = np.fromiter((c for v in graph.values() for c in v), dtype=np.int64, count=int(lengths.sum()))
    except (TypeError, ValueError, OverflowError) as e:  # keys/ids that are not integers: checked before use
        raise ValueError(f"'{path}' expected a dict of integer node id -> list of integer ids "
                         f"(got {type(e).__name__})") from None
    rows = np.repeat(keys, lengths)
    rows, cols = check_edge_chunk(rows, cols, num_nodes, str(path))
    src = np.concatenate([rows, cols])
    dst = np.concatenate([cols, rows])
    keep = src != dst
    key = np.unique(src[keep] * num_nodes + dst[keep])
    return key // num_nodes, key % num_nodes


def _check_shapes(paths: dict[str, Path], x: sp.csr_matrix, tx: sp.csr_matrix, allx: sp.csr_matrix,
                  y: np.ndarray, ty: np.ndarray, ally: np.ndarray) -> None:
    """The matrices agree: one feature width, one class count, a label row per feature row."""
    for key, m in (("x", x), ("tx", tx)):
        if m.shape[1] != allx.shape[1]:
            raise ValueError(f"'{paths[key]}' expected {allx.shape[1]} feature columns, as allx (got {m.shape[1]})")
    for key, m in (("y", y), ("ty", ty)):
        if m.shape[1] != ally.shape[1]:
            raise ValueError(f"'{paths[key]}' expected {ally.shape[1]} label columns, as ally (got {m.shape[1]})")
    if ally.shape[0] != allx.shape[0]:
        raise ValueError(f"'{paths['ally']}' expected {allx.shape[0]} rows, one per allx row (got {ally.shape[0]})")
    if y.shape[0] > allx.shape[0]:
        raise ValueError(f"'{paths['y']}' expected at most {allx.shape[0]} rows (got {y.shape[0]})")


def _row_normalise(x: sp.csr_matrix) -> sp.csr_matrix:
    """PyG's ``NormalizeFeatures``: shift by the global minimum, divide each row by max(row sum, 1)."""
    sp = _sparse()
    x = x.copy()
    low = float(x.data.min()) if x.nnz else 0.0
    if x.nnz < x.shape[0] * x.shape[1]:  # implicit zeros count towards the minimum
        low = min(low, 0.0)
    if low != 0.0:  # rare (non-negative bag-of-words files never get here): densify the shift
        x = sp.csr_matrix(x.toarray() - low)
    sums = np.asarray(x.sum(axis=1), dtype=np.float64).ravel()
    scale = 1.0 / np.maximum(sums, 1.0)
    return sp.csr_matrix(sp.diags(scale.astype(np.float32)) @ x, dtype=np.float32)


def planetoid_source(
    directory: str | Path,
    name: str,
    *,
    normalize_features: bool = True,
    chunk_rows: int = 4096,
) -> GraphSource:
    """Read ``directory/ind.<name>.*`` into a :class:`GraphSource` (see the module docstring).

    Args:
        directory: folder holding the ``ind.<name>.<key>`` files.
        name: ``cora``, ``citeseer`` or ``pubmed`` (lower-cased).
        normalize_features: row-normalise features as PyG's ``NormalizeFeatures`` does.
        chunk_rows: feature rows per chunk (the matrix stays sparse; chunks are densified on the fly).
    """
    sp = _sparse()
    directory = Path(directory)
    name = name.lower()
    if not directory.is_dir():
        raise FileNotFoundError(f"'{directory}' expected a Planetoid directory (got no such directory)")
    paths = {key: directory / f"ind.{name}.{key}" for key in PLANETOID_KEYS}
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        raise FileNotFoundError(
            f"'{directory}' expected the Planetoid files ind.{name}.* (got none of {missing})"
        )
    objs = {key: load_pickle(path) for key, path in paths.items()}
    x, tx, allx = (_as_csr(objs[k], paths[k]) for k in ("x", "tx", "allx"))
    y, ty, ally = (_as_onehot(objs[k], paths[k]) for k in ("y", "ty", "ally"))
    test_path = directory / f"ind.{name}.test.index"
    test_index = _read_test_index(test_path)
    _check_shapes(paths, x, tx, allx, y, ty, ally)
    # the test rows follow allx; CiteSeer's span may hold ids without a row (padded), the others may not
    span = 2 * len(test_index) + 16 if name == "citeseer" else len(test_index)
    _check_test_index(test_index, allx.shape[0], test_path, span)
    sorted_test = np.sort(test_index)
    if tx.shape[0] != len(test_index) or ty.shape[0] != len(test_index):
        raise ValueError(
            f"'{paths['tx']}' expected {len(test_index)} rows, one per line of '{test_path}' "
            f"(got {tx.shape[0]})"
        )

    if name == "citeseer":  # isolated test nodes have no row: pad to the full test id range with zeros
        full = int(sorted_test[-1] - sorted_test[0] + 1)
        place = sorted_test - sorted_test[0]
        scatter = sp.csr_matrix(
            (np.ones(len(place), dtype=np.float32), (place, np.arange(len(place)))), shape=(full, len(place))
        )
        tx = (scatter @ tx).tocsr()
        ty_ext = np.zeros((full, ty.shape[1]), dtype=ty.dtype)
        ty_ext[place] = ty
        ty = ty_ext

    features = sp.vstack([allx, tx]).tocsr()
    onehot = np.vstack([ally, ty])
    num_nodes = features.shape[0]
    order = np.arange(num_nodes)
    order[test_index] = sorted_test  # row test_index[i] takes the row stored at sorted_test[i]
    features = features[order]
    onehot = onehot[order]
    labels = np.where(onehot.any(axis=1), onehot.argmax(axis=1), -1).astype(np.int64)
    num_classes = onehot.shape[1]
    if normalize_features:
        features = _row_normalise(features)
    features = features.astype(np.float32)
    features.sort_indices()

    src, dst = _graph_edges(objs["graph"], num_nodes, paths["graph"])
    train_idx = np.arange(y.shape[0], dtype=np.int64)
    val_idx = np.arange(y.shape[0], y.shape[0] + _VAL_SIZE, dtype=np.int64)

    def feature_chunks() -> Iterator[np.ndarray]:
        for start in range(0, num_nodes, chunk_rows):
            yield features[start : start + chunk_rows].toarray()

    return GraphSource(
        name=dataset_name(name),
        num_nodes=num_nodes,
        feature_dim=features.shape[1],
        num_classes=num_classes,
        edge_chunks=array_edge_chunks(src, dst),
        feature_chunks=feature_chunks,
        labels=labels,
        train_idx=train_idx,
        val_idx=val_idx,
        test_idx=sorted_test.astype(np.int64),
        description={
            "kind": "planetoid",
            "name": name,
            "directory": str(directory),
            "normalize_features": normalize_features,
            "split": "planetoid (train = range(len(y)), val = next 500, test = test.index)",
            "num_edges": int(len(src)),
            "unlabelled_nodes": int((labels < 0).sum()),
        },
        undirected=True,
        deduplicated=True,
        files={
            "source": str(directory / f"ind.{name}"),
            "edges": str(paths["graph"]),
            "features": str(paths["allx"]),
            "labels": str(paths["ally"]),
            "splits": str(test_path),
            "train_idx": str(paths["y"]),  # train = range(len(y)), val = the next 500 ids
            "val_idx": str(paths["y"]),
            "test_idx": str(test_path),
        },
    )


def _open(rest: str, spec: str, options: dict[str, Any]) -> GraphSource:
    path = Path(rest).expanduser()
    if path.name in ("", ".", "..") or path.parent == path:
        raise ValueError(f"'{spec}' expected {SOURCE_KINDS.get('planetoid').syntax} (got no NAME)")
    return planetoid_source(path.parent, path.name, **options)


SOURCE_KINDS.register("planetoid", SourceKind(
    "planetoid",
    "planetoid:DIR/NAME (NAME = cora | citeseer | pubmed; files DIR/ind.NAME.*)",
    {"normalize_features": parse_bool, "chunk_rows": parse_int},
    "Planetoid citation graph with the standard split (features row-normalised unless normalize_features=false).",
    _open,
))
