"""A graph from a directory of edge lists split for link prediction: ``edgelist:DIR``.

Layout (each file any format ``edgelist:FILE`` reads: ``.txt``/``.csv``/``.tsv`` with two integer columns,
optionally ``.gz``/``.bz2``, a header or ``#``/``%`` comment lines, or ``.parquet`` with ``src``/``dst``)::

    DIR/train.txt    training edges, ``src dst`` per line
    DIR/valid.txt    validation edges
    DIR/test.txt     test edges
    DIR/valid_neg.txt, DIR/test_neg.txt   optional fixed negative pairs, shared by the split's positives

The three splits are required; the graph is their union and the split is the files' (``linksplit``; the link
task then generates none). Optional ``features=X.npy`` (``(N, F)``), ``labels=Y.npy``, ``train_idx``/
``val_idx``/``test_idx`` as for ``edgelist:FILE``. Without labels every node carries the one class ``0`` and a
seeded 60/20/20 node split, so the node stages (sample, plan, pack) run unchanged; without features every node
has one constant feature ``1.0`` (train ``link_encoder=embedding``). ``num_nodes`` defaults to the feature rows,
else the largest id + 1. ``nodes=FILE`` (as for ``edgelist:FILE``): a node list numbering nodes whose ids are
not integers (user names, URLs); the edge files and split files name nodes by their ids in it, and ingest keeps
the names (``node_ids.parquet``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from pipelines.methods.sources.base import DEFAULT_CHUNK_ROWS, EdgeChunk, GraphSource, dataset_name, feature_chunk_rows
from pipelines.methods.sources.files import PARQUET_SUFFIXES, CsvLayout, load_npy, random_split, raw_edges
from pipelines.methods.sources.linksplit import SPLITS, LinkSplit, constant_feature_chunks, drop_self_loops
from pipelines.methods.sources.nodelist import NodeIndex, named_edges, read_node_list, split_ids
from pipelines.methods.sources.validate import check_feature_chunk, derived_num_classes, integer_labels

__all__ = ["EDGE_SUFFIXES", "edgelist_dir_source", "find_edge_file", "read_edge_file"]

EDGE_SUFFIXES = tuple(a + b for a in (".txt", ".csv", ".tsv") for b in ("", ".gz", ".bz2")) + PARQUET_SUFFIXES


def find_edge_file(directory: Path, stem: str, required: bool = True) -> Path | None:
    """``directory/stem<suffix>`` for the one suffix of :data:`EDGE_SUFFIXES` present.

    Raises:
        FileNotFoundError: none present and ``required`` (the message lists what was looked for).
        ValueError: more than one present.
    """
    found = [directory / f"{stem}{s}" for s in EDGE_SUFFIXES if (directory / f"{stem}{s}").is_file()]
    if len(found) > 1:
        raise ValueError(f"'{directory / stem}' expected one edge file (got {[p.name for p in found]})")
    if not found and required:
        raise FileNotFoundError(f"'{directory / stem}.txt' expected an edge file of the split, {stem}"
                                f"{{.txt,.csv,.tsv}}[.gz] or {stem}.parquet (got none in '{directory}')")
    return found[0] if found else None


def read_edge_file(path: Path, index: NodeIndex | None = None) -> tuple[np.ndarray, tuple[str, object]]:
    """The whole edge file as ``(E, 2)`` int64 (rows as listed; with a node list ``index``, its rows for the
    ids) and how to name its rows in messages: ``("line", n)`` when data row ``i`` is line ``n + i`` of a text
    file, ``("key", "row")`` for Parquet or named ids (their rows count data rows, a header excluded)."""
    pairs = named_edges(path, index) if index is not None else raw_edges(path)
    parts = [np.stack([s, d], axis=1) for s, d in pairs]
    edges = np.concatenate(parts) if parts else np.empty((0, 2), dtype=np.int64)
    if index is not None or path.suffix.lower() in PARQUET_SUFFIXES:
        return edges, ("key", "row")
    return edges, ("line", CsvLayout(path).skip_rows + 1)


def edgelist_dir_source(
    directory: str | Path,
    *,
    features: str | Path | None = None,
    labels: str | Path | None = None,
    train_idx: str | Path | None = None,
    val_idx: str | Path | None = None,
    test_idx: str | Path | None = None,
    num_nodes: int | None = None,
    num_classes: int | None = None,
    undirected: bool = True,
    seed: int = 0,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    overlap: str = "allow",
    nodes: str | Path | None = None,
) -> GraphSource:
    """An ``edgelist:DIR`` :class:`GraphSource` with its :class:`LinkSplit` (see the module docstring).

    ``overlap``: ``allow`` (an edge may be in two splits; counted) or ``reject``. Ids are checked against
    ``num_nodes`` when the source is validated (``validate_source``), naming the file and line.
    """
    directory = Path(directory)
    files: dict[str, str] = {"source": str(directory)}
    index = NodeIndex(read_node_list(nodes), str(nodes)) if nodes is not None else None
    if index is not None:
        files["nodes"] = str(nodes)
        if num_nodes is not None and int(num_nodes) != len(index):
            raise ValueError(f"'num_nodes' expected the length of the node list '{nodes}', {len(index)}, or no "
                             f"value (got {num_nodes})")
    split = LinkSplit(edges={}, overlap=overlap)
    for name in (*SPLITS, "valid_neg", "test_neg"):
        path = find_edge_file(directory, name, required=name in SPLITS)
        if path is None:
            continue
        edges, rows = read_edge_file(path, index)
        split.files[name], split.rows[name] = str(path), rows
        files[f"link_{name}"] = str(path)
        if name in SPLITS:
            split.edges[name], _, split.self_loops[name] = drop_self_loops(edges)
        else:
            split.negatives[name.removesuffix("_neg")] = edges
    if split.negatives:
        split.negative_kind = "edges"

    x = load_npy(features, "features") if features is not None else None
    if x is not None and (x.ndim != 2 or x.dtype.kind not in "fiub"):
        raise ValueError(f"'{features}' expected a numeric (N, F) array (got shape {x.shape}, dtype {x.dtype})")
    if index is not None:
        n = len(index)
    elif num_nodes is not None:
        n = int(num_nodes)
    elif x is not None:
        n = int(x.shape[0])
    else:
        n = max(int(e.max()) for e in itertools.chain(split.edges.values(), split.negatives.values())
                if e.size) + 1
    if x is not None and x.shape[0] != n:
        raise ValueError(f"'{features}' expected features of shape ({n}, F) (got {x.shape})")

    if labels is not None:
        y = np.asarray(load_npy(labels, "labels"))
        if y.ndim != 1 or y.shape[0] != n or y.dtype.kind not in "iuf":
            raise ValueError(f"'{labels}' expected integer labels of shape ({n},) (got shape {y.shape}, "
                             f"dtype {y.dtype})")
        y = integer_labels(y, str(labels))
        files["labels"] = str(labels)
    else:  # a link-only graph: one class, so the node stages have seeds
        y = np.zeros(n, dtype=np.int64)
    where = files.get("labels", "labels")
    classes = int(num_classes) if num_classes is not None else derived_num_classes(y, n, where)
    given = {"train_idx": train_idx, "val_idx": val_idx, "test_idx": test_idx}
    if all(v is None for v in given.values()):
        train, val, test = random_split(y, seed)
    elif any(v is None for v in given.values()):
        raise ValueError(f"'splits' expected all of train_idx, val_idx, test_idx or none "
                         f"(got no {sorted(k for k, v in given.items() if v is None)})")
    else:
        train, val, test = (np.sort(split_ids(load_npy(v, k), index, str(v))) for k, v in given.items())
        files.update({k: str(v) for k, v in given.items()})

    if x is not None:
        files["features"] = str(features)

        def feature_chunks() -> Iterator[np.ndarray]:
            step = feature_chunk_rows(x.shape[1], chunk_rows)  # by bytes too: wide features
            for start in range(0, n, step):
                yield check_feature_chunk(x[start: start + step], x.shape[1], str(features), start)
    else:
        def feature_chunks() -> Iterator[np.ndarray]:
            return constant_feature_chunks(n, chunk_rows)

    def edge_chunks() -> Iterator[EdgeChunk]:
        return split.edge_chunks(undirected)

    return GraphSource(
        name=dataset_name(directory.resolve().name),
        num_nodes=n,
        feature_dim=int(x.shape[1]) if x is not None else 1,
        num_classes=classes,
        edge_chunks=edge_chunks,
        feature_chunks=feature_chunks,
        labels=y,
        train_idx=train,
        val_idx=val,
        test_idx=test,
        description={"kind": "edgelist", "directory": str(directory), "undirected": undirected,
                     "features": "file" if x is not None else "constant", "labels": "file" if labels else "none",
                     "overlap": overlap, "link_split": split.description(),
                     **({"node_ids": "node list"} if index is not None else {})},
        undirected=undirected,
        deduplicated=False,
        files=files,
        link_split=split,
        node_names=index.names if index is not None else None,
    )
