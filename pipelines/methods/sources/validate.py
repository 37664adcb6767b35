"""Input validation for graph sources, used by ingest for every source.

Every error is a ``ValueError`` whose message names the file (or source) and the offending index, in the form
``"'{file}: {field}[{index}]' expected X (got Y)"``. Edge and feature checks are per chunk, so they run as the
data stream past (:func:`validate_source` wraps a source's chunk iterators); the whole-array checks (labels,
splits) are vectorised and run once.

Labels are integers in ``[0, C)``, ``-1`` for unlabelled, and at least one node is labelled. ``C`` is the source's
class count: stated (the ``num_classes`` option, a Planetoid file's one-hot width, a synthetic graph's
``classes``) or, for labels given without one, the largest label + 1, bounded by :func:`max_derived_classes`
(:func:`derived_num_classes`). Float label arrays are read when every value is whole (:func:`integer_labels`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from pipelines.methods.sources.base import EdgeChunk, GraphSource

__all__ = [
    "MAX_DERIVED_CLASSES",
    "check_edge_chunk",
    "check_feature_chunk",
    "check_labels",
    "derived_num_classes",
    "integer_labels",
    "max_derived_classes",
    "check_split",
    "check_splits",
    "validate_source",
]


#: Labels given without a class count: the largest label + 1 is the count, and it may be at most this (and at most
#: the node count). A label of 100,000 on a 300-node graph is a typo or an id, not a class, and a model sized by it
#: is 100,001 classes wide (a 4 GB checkpoint at 10^6, a 1 TiB request at 2^31-1). The source option
#: ``num_classes`` (``--set ingest.options.num_classes=C``) states the count and lifts this bound.
MAX_DERIVED_CLASSES = 65_536


def _thing(where: str, field: str, index: int | None = None) -> str:
    return f"'{where}: {field}'" if index is None else f"'{where}: {field}[{index}]'"


def _as_int_array(values: np.ndarray, where: str, field: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{_thing(where, field)} expected a 1-D array (got shape {arr.shape})")
    if arr.dtype.kind not in "iu":
        if arr.size == 0:  # e.g. an empty split saved as float64
            return arr.astype(np.int64)
        raise ValueError(f"{_thing(where, field)} expected integer ids (got dtype {arr.dtype})")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _first_out_of_range(ids: np.ndarray, low: int, high: int) -> int | None:
    """Position of the first entry outside ``[low, high)``, or None (min/max first: cheap when all good)."""
    if ids.size == 0 or (ids.min() >= low and ids.max() < high):
        return None
    return int(np.flatnonzero((ids < low) | (ids >= high))[0])


def check_edge_chunk(
    src: np.ndarray, dst: np.ndarray, num_nodes: int, where: str, offset: int = 0
) -> EdgeChunk:
    """Check one chunk of edges and return it as C-contiguous int64 arrays.

    Args:
        src, dst: endpoint arrays of equal length.
        num_nodes: ids must be in ``[0, num_nodes)``.
        where: the file or source named in errors.
        offset: position of the chunk's first edge in the whole stream (or file row), so errors report the
            global position.

    Raises:
        ValueError: shape/dtype mismatch or an id out of range (first bad position and value).
    """
    src = _as_int_array(src, where, "src")
    dst = _as_int_array(dst, where, "dst")
    if src.shape != dst.shape:
        raise ValueError(
            f"{_thing(where, 'dst')} expected as many entries as 'src' ({len(src)}) (got {len(dst)}) "
            f"in the chunk starting at edge {offset}"
        )
    for field, ids in (("src", src), ("dst", dst)):
        bad = _first_out_of_range(ids, 0, num_nodes)
        if bad is not None:
            raise ValueError(
                f"{_thing(where, field, offset + bad)} expected a node id in [0, {num_nodes}) "
                f"(got {ids[bad]})"
            )
    return src, dst


def check_feature_chunk(chunk: np.ndarray, feature_dim: int, where: str, row_offset: int = 0) -> np.ndarray:
    """Check one chunk of feature rows and return it as a C-contiguous float32 array.

    Raises:
        ValueError: not 2-D, wrong column count, non-numeric, or a NaN/Inf (first bad row and its column).
    """
    arr = np.asarray(chunk)
    if arr.ndim != 2 or arr.shape[1] != feature_dim:
        raise ValueError(
            f"{_thing(where, 'features', row_offset)} expected rows of {feature_dim} columns "
            f"(got a chunk of shape {arr.shape})"
        )
    if arr.dtype.kind not in "fiub":
        raise ValueError(
            f"{_thing(where, 'features', row_offset)} expected numeric values (got dtype {arr.dtype})"
        )
    with np.errstate(over="ignore"):  # values beyond float32 become inf and are reported below
        arr = np.ascontiguousarray(arr, dtype=np.float32)
    if arr.size and not np.isfinite(arr.sum(dtype=np.float64)):
        finite = np.isfinite(arr)
        row = int(np.flatnonzero(~finite.all(axis=1))[0])
        col = int(np.flatnonzero(~finite[row])[0])
        raise ValueError(
            f"{_thing(where, 'features', row_offset + row)} expected finite values "
            f"(got {arr[row, col]} in column {col})"
        )
    return arr


def check_labels(labels: np.ndarray, num_nodes: int, num_classes: int, where: str) -> np.ndarray:
    """Check labels (length ``num_nodes``, values in ``[-1, num_classes)``); return them as a contiguous signed
    integer array: their own type when signed (a narrow one stays narrow: 1 byte a node instead of 8 at 100M
    nodes), else int64."""
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.shape[0] != num_nodes:
        raise ValueError(f"{_thing(where, 'labels')} expected shape ({num_nodes},) (got {arr.shape})")
    arr = np.ascontiguousarray(arr) if arr.dtype.kind == "i" else _as_int_array(arr, where, "labels")
    bad = _first_out_of_range(arr, -1, num_classes)
    if bad is not None:
        raise ValueError(
            f"{_thing(where, 'labels', bad)} expected a class in [-1, {num_classes}) (got {arr[bad]})"
        )
    return arr


def max_derived_classes(num_nodes: int) -> int:
    """The most classes labels may imply without an explicit count: the node count, at most
    :data:`MAX_DERIVED_CLASSES` (a graph of N nodes cannot carry more than N classes)."""
    return max(1, min(int(num_nodes), MAX_DERIVED_CLASSES))


def derived_num_classes(labels: np.ndarray, num_nodes: int, where: str) -> int:
    """The class count of labels given without one: the largest label + 1 (1 when none is labelled).

    Raises:
        ValueError: a label of :func:`max_derived_classes` or more, naming the first and the option that states
            a larger count.
    """
    arr = np.asarray(labels)
    limit = max_derived_classes(num_nodes)
    top = int(arr.max()) if arr.size else -1
    if top >= limit:
        i = int(np.flatnonzero(arr >= limit)[0])
        raise ValueError(f"{_thing(where, 'labels', i)} expected a class in [0, {limit}), at most the node count "
                         f"and {MAX_DERIVED_CLASSES:,} (got {arr[i]}); with more classes, state how many: "
                         "--set ingest.options.num_classes=C")
    return max(top + 1, 1)


def integer_labels(values: np.ndarray, where: str) -> np.ndarray:
    """Labels as int64 (``-1`` = unlabelled): an integer array, or a float one whose values are all whole (pandas
    and many exporters write labels as float).

    Raises:
        ValueError: another dtype, or the first NaN, infinite, fractional or out-of-int64 label, by row.
    """
    arr = np.asarray(values)
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        i = int(np.argmax(arr))
        raise ValueError(f"{_thing(where, 'labels', i)} expected an integer class (got {arr[i]})")
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    if arr.dtype.kind != "f":
        raise ValueError(f"{_thing(where, 'labels')} expected integer labels (got dtype {arr.dtype})")
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(arr) | (arr != np.floor(arr)) | (np.abs(arr) >= 2.0**53)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{_thing(where, 'labels', i)} expected an integer class, or -1 for unlabelled "
                         f"(got {arr[i]})")
    return arr.astype(np.int64)


def check_split(name: str, idx: np.ndarray, num_nodes: int, labels: np.ndarray, where: str) -> np.ndarray:
    """Check one split (ids in range, strictly increasing, labelled); return it as int64.

    Args:
        name: ``"train_idx"``, ``"val_idx"`` or ``"test_idx"`` (named in errors).
    """
    arr = _as_int_array(idx, where, name)
    bad = _first_out_of_range(arr, 0, num_nodes)
    if bad is not None:
        raise ValueError(
            f"{_thing(where, name, bad)} expected a node id in [0, {num_nodes}) (got {arr[bad]})"
        )
    if arr.size > 1:
        steps = np.diff(arr)
        if (steps <= 0).any():
            pos = int(np.flatnonzero(steps <= 0)[0]) + 1
            raise ValueError(
                f"{_thing(where, name, pos)} expected sorted unique ids, greater than the previous "
                f"{arr[pos - 1]} (got {arr[pos]})"
            )
    unlabelled = labels[arr] < 0
    if unlabelled.any():
        pos = int(np.flatnonzero(unlabelled)[0])
        raise ValueError(
            f"{_thing(where, name, pos)} expected a labelled node (got node {arr[pos]} with label -1)"
        )
    return arr


def check_splits(
    train_idx: np.ndarray,
    val_idx: np.ndarray,
    test_idx: np.ndarray,
    num_nodes: int,
    labels: np.ndarray,
    where: str | Mapping[str, str],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check the three splits one by one and that they are pairwise disjoint; return them as int64.

    ``where`` is one name for all three, or a mapping ``"train_idx"/"val_idx"/"test_idx"`` -> file.
    """
    places = {
        name: where if isinstance(where, str) else where[name]
        for name in ("train_idx", "val_idx", "test_idx")
    }
    splits = {
        name: check_split(name, idx, num_nodes, labels, places[name])
        for name, idx in (("train_idx", train_idx), ("val_idx", val_idx), ("test_idx", test_idx))
    }
    names = list(splits)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            common, pos, _ = np.intersect1d(
                splits[first], splits[second], assume_unique=True, return_indices=True
            )
            if common.size:
                raise ValueError(
                    f"{_thing(places[first], first, int(pos[0]))} expected no node also in '{second}' "
                    f"(got node {common[0]}, in both)"
                )
    return splits["train_idx"], splits["val_idx"], splits["test_idx"]


def _checked_edges(source: GraphSource) -> Iterator[EdgeChunk]:
    where = source.where("edges")
    offset = 0
    for src, dst in source.edge_chunks():
        chunk = check_edge_chunk(src, dst, source.num_nodes, where, offset)
        offset += len(chunk[0])
        yield chunk


def _checked_features(source: GraphSource) -> Iterator[np.ndarray]:
    where = source.where("features")
    rows = 0
    for chunk in source.feature_chunks():
        arr = check_feature_chunk(chunk, source.feature_dim, where, rows)
        rows += arr.shape[0]
        if rows > source.num_nodes:
            raise ValueError(
                f"{_thing(where, 'features')} expected {source.num_nodes} rows (got at least {rows})"
            )
        yield arr
    if rows != source.num_nodes:
        raise ValueError(f"{_thing(where, 'features')} expected {source.num_nodes} rows (got {rows})")


def validate_source(source: GraphSource) -> GraphSource:
    """Check a source's metadata now and wrap its chunk iterators so every chunk is checked as it passes.

    Returns a new :class:`GraphSource` (same fields) whose ``labels`` and splits are int64 and whose
    ``edge_chunks``/``feature_chunks`` yield checked int64/float32 C-contiguous chunks; the feature iterator
    also raises at the end when the total row count differs from ``num_nodes``.

    Raises:
        ValueError: the first problem found, naming the file and the index.
    """
    where = source.where("source")
    for field, value in (("num_nodes", source.num_nodes), ("feature_dim", source.feature_dim)):
        if int(value) < 1:
            raise ValueError(f"{_thing(where, field)} expected a positive integer (got {value})")
    if int(source.num_classes) < 1:
        raise ValueError(
            f"{_thing(where, 'num_classes')} expected a positive integer (got {source.num_classes})"
        )
    labels = check_labels(source.labels, source.num_nodes, source.num_classes, source.where("labels"))
    if not (labels >= 0).any():  # nothing to train or evaluate on: say so here, not stages later at sample
        raise ValueError(f"{_thing(source.where('labels'), 'labels')} expected at least one labelled node, a class "
                         f">= 0 (got {len(labels)} labels, all -1: unlabelled)")
    train, val, test = check_splits(
        source.train_idx,
        source.val_idx,
        source.test_idx,
        source.num_nodes,
        labels,
        {
            name: source.files.get(name) or source.where("splits")
            for name in ("train_idx", "val_idx", "test_idx")
        },
    )
    if source.link_split is not None:  # ids in range, naming the split file and line
        source.link_split.check(int(source.num_nodes))
    return GraphSource(
        name=source.name,
        num_nodes=int(source.num_nodes),
        feature_dim=int(source.feature_dim),
        num_classes=int(source.num_classes),
        edge_chunks=lambda: _checked_edges(source),
        feature_chunks=lambda: _checked_features(source),
        labels=labels,
        train_idx=train,
        val_idx=val,
        test_idx=test,
        description=source.description,
        undirected=source.undirected,
        deduplicated=source.deduplicated,
        files=dict(source.files),
        link_split=source.link_split,
        node_names=source.node_names,
    )
