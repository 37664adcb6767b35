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
from pipelines.methods.sources.options import parse_bool, parse_int, parse_str
from pipelines.methods.sources.validate import check_edge_chunk, check_feature_chunk

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


def _edge_chunks(path: Path, num_nodes: int, undirected: bool) -> Iterator[EdgeChunk]:
    row = 0
    for src, dst in raw_edges(path):
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
) -> GraphSource:
    """An edge-list :class:`GraphSource` (see the module docstring).

    Args:
        path: the edge file (CSV or Parquet).
        features, labels: ``.npy`` files.
        train_idx, val_idx, test_idx: ``.npy`` node-id files; all three or none (then a seeded random split).
        num_nodes: node count (default ``max id + 1``).
        num_classes: class count (default ``max label + 1``).
        undirected: symmetrise; otherwise a row ``u,v`` is a directed edge ``u -> v``.
        seed: seed of the random split.
        chunk_rows: feature rows per chunk (fewer for wide features: ``feature_chunk_rows``).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"'{path}' expected an edge-list file (got no such file)")
    if path.suffix.lower() in PARQUET_SUFFIXES:  # fail early on a bad layout
        parquet_file(path)
    else:
        CsvLayout(path)
    n = int(num_nodes) if num_nodes is not None else _max_id(path) + 1
    if n < 1:
        raise ValueError(f"'num_nodes' expected a positive integer (got {n})")

    x = load_npy(features, "features")
    if x.ndim != 2 or x.shape[0] != n:
        hint = (
            ""
            if num_nodes is not None
            else " (max edge id + 1; --set ingest.options.num_nodes=N for trailing isolated nodes)"
        )
        raise ValueError(f"'{features}' expected features of shape ({n}, F){hint} (got {x.shape})")
    if x.dtype.kind not in "fiub":
        raise ValueError(f"'{features}' expected a numeric array (got dtype {x.dtype})")

    y = load_npy(labels, "labels")
    if y.ndim != 1 or y.shape[0] != n:
        raise ValueError(f"'{labels}' expected labels of shape ({n},) (got {y.shape})")
    if y.dtype.kind not in "iu":
        raise ValueError(f"'{labels}' expected integer labels (got dtype {y.dtype})")
    y = np.asarray(y, dtype=np.int64)
    classes = int(num_classes) if num_classes is not None else max(int(y.max()) + 1, 1) if y.size else 1

    given = {"train_idx": train_idx, "val_idx": val_idx, "test_idx": test_idx}
    files = {"source": str(path), "edges": str(path), "features": str(features), "labels": str(labels)}
    if all(v is None for v in given.values()):
        train, val, test = random_split(y, seed)
        split_desc = {"split": "random", "fractions": list(RANDOM_SPLIT), "seed": seed}
    elif any(v is None for v in given.values()):
        missing = sorted(k for k, v in given.items() if v is None)
        raise ValueError(f"'splits' expected all of train_idx, val_idx, test_idx or none (got no {missing})")
    else:
        train, val, test = (np.sort(np.asarray(load_npy(v, k))) for k, v in given.items())
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
        edge_chunks=lambda: _edge_chunks(path, n, undirected),
        feature_chunks=feature_chunks,
        labels=y,
        train_idx=train,
        val_idx=val,
        test_idx=test,
        description={"kind": "edgelist", "path": str(path), "undirected": undirected, **split_desc},
        undirected=undirected,
        deduplicated=False,
        files=files,
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
     "chunk_rows": parse_int, "overlap": parse_str},
    "Edge list plus features=PATH.npy and labels=PATH.npy (required for a FILE, optional for a DIR); "
    "train_idx/val_idx/test_idx .npy files or a seeded 60/20/20 split; a DIR's overlap=allow|reject.",
    _open,
))
