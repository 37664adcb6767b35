"""A graph from an edge-list file (CSV or Parquet) plus ``.npy`` arrays for features, labels and splits.

- CSV (``.csv``, ``.tsv``, ``.txt``, optionally ``.gz``/``.bz2``): two integer columns (more are ignored),
  delimiter ``,``, tab or a single space (detected from the first data line), an optional header line, and
  leading comment lines starting with ``#`` or ``%`` (SNAP style). Streamed with ``pyarrow.csv``.
- Parquet (``.parquet``, ``.pq``): integer columns ``src`` and ``dst``, streamed by record batches.
- ``.npy`` arrays are opened with ``allow_pickle=False`` and memory-mapped: features ``(N, F)`` (any real
  dtype, converted to float32 per chunk), labels ``(N,)`` integers (``-1`` = unlabelled), optional split id
  arrays (sorted here; all three or none). Without split files, a seeded 60/20/20 random split of the
  labelled nodes.
- ``num_nodes`` defaults to ``max id + 1`` (one extra pass over the edges).
- ``nodes=FILE``: ids that are not integers (user names, URLs), or integers to keep as given: ``FILE`` lists
  every node once, in the row order of the features and labels, and node ``i`` is its row ``i``
  (:mod:`pipelines.methods.sources.nodelist`). The split files then hold rows (integers) or ids (strings);
  ingest keeps the list as ``node_ids.parquet`` (:mod:`pipelines.core.nodeids`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.methods.sources.base import (
    DEFAULT_CHUNK_ROWS,
    EdgeChunk,
    GraphSource,
    dataset_name,
    feature_chunk_rows,
    symmetrise_chunk,
)
from pipelines.methods.sources.files import (
    PARQUET_SUFFIXES,
    RANDOM_SPLIT,
    CsvLayout,
    load_npy,
    parquet_file,
    random_split,
    raw_edges,
)
from pipelines.methods.sources.kinds import SOURCE_KINDS, SourceKind
from pipelines.methods.sources.nodelist import NodeIndex, named_edges, read_node_list, split_ids
from pipelines.methods.sources.options import parse_bool, parse_int, parse_str
from pipelines.methods.sources.validate import (
    check_edge_chunk,
    check_feature_chunk,
    derived_num_classes,
    integer_labels,
)

__all__ = ["PARQUET_SUFFIXES", "RANDOM_SPLIT", "edgelist_source", "load_npy", "random_split"]

def _max_id(path: Path) -> int:
    """Largest id in the file (checks for negative ids on the way)."""
    top, row = -1, 0
    for src, dst in raw_edges(path):
        check_edge_chunk(src, dst, np.iinfo(np.int64).max, str(path), row)
        if len(src):
            top = max(top, int(src.max()), int(dst.max()))
        row += len(src)
    if top < 0:
        raise ValueError(f"'{path}' expected at least one edge (got none)")
    return top


def _edge_chunks(path: Path, num_nodes: int, undirected: bool, index: NodeIndex | None) -> Iterator[EdgeChunk]:
    row = 0
    for src, dst in (raw_edges(path) if index is None else named_edges(path, index)):
        src, dst = check_edge_chunk(src, dst, num_nodes, str(path), row)
        row += len(src)
        if undirected:
            yield symmetrise_chunk(src, dst)
        else:  # directed u -> v: CSR row v aggregates u
            keep = src != dst
            yield dst[keep], src[keep]


def edgelist_source(
    path: str | Path,
    *,
    features: str | Path,
    labels: str | Path,
    train_idx: str | Path | None = None,
    val_idx: str | Path | None = None,
    test_idx: str | Path | None = None,
    num_nodes: int | None = None,
    num_classes: int | None = None,
    undirected: bool = True,
    seed: int = 0,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    nodes: str | Path | None = None,
) -> GraphSource:
    """An edge-list :class:`GraphSource` (see the module docstring).

    Args:
        path: the edge file (CSV or Parquet).
        features, labels: ``.npy`` files.
        train_idx, val_idx, test_idx: ``.npy`` node-id files; all three or none (then a seeded random split).
        num_nodes: node count (default ``max id + 1``).
        num_classes: class count (default ``max label + 1``, at most the node count and 65,536).
        undirected: symmetrise; otherwise a row ``u,v`` is a directed edge ``u -> v``.
        seed: seed of the random split.
        chunk_rows: feature rows per chunk (fewer for wide features: ``feature_chunk_rows``).
        nodes: a node list (text, Parquet or ``.npy``): node ``i`` is its row ``i``, edge ids are looked up in it
            (string ids); ``num_nodes`` is its length.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"'{path}' expected an edge-list file (got no such file)")
    if path.suffix.lower() in PARQUET_SUFFIXES:  # fail early on a bad layout
        if nodes is None:
            parquet_file(path)
    else:
        CsvLayout(path)
    index = NodeIndex(read_node_list(nodes), str(nodes)) if nodes is not None else None
    if index is not None and num_nodes is not None and int(num_nodes) != len(index):
        raise ValueError(f"'num_nodes' expected the length of the node list '{nodes}', {len(index)}, or no value "
                         f"(got {num_nodes})")
    n = len(index) if index is not None else int(num_nodes) if num_nodes is not None else _max_id(path) + 1
    if n < 1:
        raise ValueError(f"'num_nodes' expected a positive integer (got {n})")

    counted = (f"one per line of the node list '{nodes}'" if index is not None else "one per node"
               if num_nodes is not None else
               "one per node, max edge id + 1; --set ingest.options.num_nodes=N for trailing isolated nodes")
    x = load_npy(features, "features")
    if x.ndim != 2:
        raise ValueError(f"'{features}' expected a 2-D (nodes, features) array (got shape {x.shape})")
    if x.shape[0] != n:
        raise ValueError(f"'{features}' expected {n} feature rows ({counted}) (got {x.shape[0]} rows)")
    if x.dtype.kind not in "fiub":
        raise ValueError(f"'{features}' expected a numeric array (got dtype {x.dtype})")

    y = load_npy(labels, "labels")
    if y.ndim != 1:
        raise ValueError(f"'{labels}' expected a 1-D array of labels (got shape {y.shape})")
    if y.shape[0] != n:
        raise ValueError(f"'{labels}' expected {n} labels ({counted}) (got {y.shape[0]})")
    y = integer_labels(y, str(labels))
    classes = int(num_classes) if num_classes is not None else derived_num_classes(y, n, str(labels))

    given = {"train_idx": train_idx, "val_idx": val_idx, "test_idx": test_idx}
    files = {"source": str(path), "edges": str(path), "features": str(features), "labels": str(labels)}
    if index is not None:
        files["nodes"] = str(nodes)
    if all(v is None for v in given.values()):
        train, val, test = random_split(y, seed)
        split_desc = {"split": "random", "fractions": list(RANDOM_SPLIT), "seed": seed}
    elif any(v is None for v in given.values()):
        missing = sorted(k for k, v in given.items() if v is None)
        raise ValueError(f"'splits' expected all of train_idx, val_idx, test_idx or none (got no {missing})")
    else:
        train, val, test = (np.sort(split_ids(load_npy(v, k), index, str(v))) for k, v in given.items())
        files.update({k: str(v) for k, v in given.items()})
        split_desc = {"split": "files"}

    def feature_chunks() -> Iterator[np.ndarray]:
        step = feature_chunk_rows(x.shape[1], chunk_rows)  # by bytes too: wide features
        for start in range(0, n, step):
            yield check_feature_chunk(x[start : start + step], x.shape[1], str(features), start)

    return GraphSource(
        name=dataset_name(path.name.split(".")[0]),
        num_nodes=n,
        feature_dim=int(x.shape[1]),
        num_classes=classes,
        edge_chunks=lambda: _edge_chunks(path, n, undirected, index),
        feature_chunks=feature_chunks,
        labels=y,
        train_idx=train,
        val_idx=val,
        test_idx=test,
        description={"kind": "edgelist", "path": str(path), "undirected": undirected, **split_desc,
                     **({"node_ids": "node list"} if index is not None else {})},
        undirected=undirected,
        deduplicated=False,
        files=files,
        node_names=index.names if index is not None else None,
    )


def _open(rest: str, spec: str, options: dict[str, Any]) -> GraphSource:
    if Path(rest).expanduser().is_dir():  # train/valid/test edge files: a link-prediction split
        from pipelines.methods.sources.edgedir import edgelist_dir_source

        return edgelist_dir_source(Path(rest).expanduser(), **options)
    if "overlap" in options:
        raise ValueError(f"'option overlap' expected only with edgelist:DIR, a split directory (got file {rest!r})")
    for required in ("features", "labels"):
        if required not in options:
            raise ValueError(
                f"'option {required}' expected for edgelist sources, e.g. --set ingest.options.{required}=PATH.npy "
                "(got none)"
            )
    return edgelist_source(Path(rest).expanduser(), **options)


SOURCE_KINDS.register("edgelist", SourceKind(
    "edgelist",
    "edgelist:FILE (.csv/.tsv/.txt[.gz] two integer columns, or .parquet with src,dst) or edgelist:DIR "
    "(DIR/{train,valid,test}.txt: a link-prediction edge split)",
    {"features": parse_str, "labels": parse_str, "train_idx": parse_str, "val_idx": parse_str, "test_idx": parse_str,
     "num_nodes": parse_int, "num_classes": parse_int, "undirected": parse_bool, "seed": parse_int,
     "chunk_rows": parse_int, "overlap": parse_str, "nodes": parse_str},
    "Edge list plus features=PATH.npy and labels=PATH.npy (required for a FILE, optional for a DIR); "
    "train_idx/val_idx/test_idx .npy files or a seeded 60/20/20 split; nodes=FILE lists the node ids (string ids: "
    "user names, URLs) in the row order of features and labels; a DIR's overlap=allow|reject.",
    _open,
))
