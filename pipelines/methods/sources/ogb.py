"""OGB node-property-prediction datasets from their raw CSV directory, streamed with ``pyarrow.csv``.

Layout (each CSV may be gzipped, ``name.csv.gz``, or plain, ``name.csv``; none has a header)::

    DIR/raw/edge.csv            src,dst per line
    DIR/raw/node-feat.csv       F floats per line, one line per node
    DIR/raw/node-label.csv      one label per line (``nan`` or empty = unlabelled)
    DIR/raw/num-node-list.csv   the number of nodes (one line: one graph)
    DIR/split/<name>/train.csv, valid.csv, test.csv   node ids, one per line

Edges and features are read block by block (never whole), each block checked as it passes; labels, splits
and the node count are read whole (O(N)).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from pipelines.methods.sources.base import EdgeChunk, GraphSource, dataset_name, symmetrise_chunk
from pipelines.methods.sources.csvstream import csv_batches
from pipelines.methods.sources.kinds import SOURCE_KINDS, SourceKind
from pipelines.methods.sources.options import parse_bool, parse_int, parse_str
from pipelines.methods.sources.validate import check_edge_chunk, check_feature_chunk

__all__ = ["DEFAULT_BLOCK_BYTES", "find_csv", "ogb_source", "read_csv_column"]

DEFAULT_BLOCK_BYTES = 16 << 20
"""Bytes of CSV text per streamed block."""


def find_csv(directory: Path, stem: str) -> Path:
    """``directory/stem.csv.gz`` or ``directory/stem.csv``, whichever exists.

    Raises:
        FileNotFoundError: neither exists; the message names both.
    """
    for suffix in (".csv.gz", ".csv"):
        path = directory / f"{stem}{suffix}"
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"'{directory / stem}.csv(.gz)' expected an OGB CSV file (got no such file in '{directory}')"
    )


def _first_line(path: Path) -> str:
    with pa.input_stream(str(path), compression="detect") as stream:
        head = stream.read(1 << 20)
    return head.split(b"\n", 1)[0].decode("utf-8", errors="replace").strip()


def _csv_error(path: Path, columns: int, block_bytes: int, error: Exception) -> ValueError:
    hint = f"; a line longer than block_bytes={block_bytes} also fails" if "straddl" in str(error) else ""
    return ValueError(f"'{path}' expected {columns} numeric comma-separated columns per line ({error}{hint})")


def _batches(path: Path, column_types: dict[str, pa.DataType], block_bytes: int) -> Iterator[pa.RecordBatch]:
    """Record batches of a headerless CSV with the given columns and types."""
    return csv_batches(
        path,
        lambda e: _csv_error(path, len(column_types), block_bytes, e),
        read_options=pacsv.ReadOptions(column_names=list(column_types), block_size=block_bytes),
        convert_options=pacsv.ConvertOptions(column_types=column_types, strings_can_be_null=False),
    )


def read_csv_column(path: Path, dtype: pa.DataType, block_bytes: int = DEFAULT_BLOCK_BYTES) -> np.ndarray:
    """A whole one-column headerless CSV as a NumPy array (nulls become NaN for float types)."""
    parts = [b.column(0).to_numpy(zero_copy_only=False) for b in _batches(path, {"v": dtype}, block_bytes)]
    return (
        np.concatenate(parts)
        if parts
        else np.empty(0, dtype=np.float64 if pa.types.is_floating(dtype) else np.int64)
    )


def _edge_chunks(path: Path, num_nodes: int, undirected: bool, block_bytes: int) -> Iterator[EdgeChunk]:
    row = 0
    for batch in _batches(path, {"src": pa.int64(), "dst": pa.int64()}, block_bytes):
        if batch.column(0).null_count or batch.column(1).null_count:
            column = 0 if batch.column(0).null_count else 1
            bad = int(np.flatnonzero(batch.column(column).is_null().to_numpy(zero_copy_only=False))[0])
            raise ValueError(
                f"'{path}: {('src', 'dst')[column]}[{row + bad}]' expected an integer id (got empty)"
            )
        src, dst = check_edge_chunk(
            batch.column(0).to_numpy(), batch.column(1).to_numpy(), num_nodes, str(path), row
        )
        row += len(src)
        yield symmetrise_chunk(src, dst) if undirected else _directed(src, dst)


def _directed(src: np.ndarray, dst: np.ndarray) -> EdgeChunk:
    """A directed edge ``u -> v`` becomes CSR entry ``(v, u)`` (row v aggregates u); loops dropped."""
    keep = src != dst
    return dst[keep], src[keep]


def _feature_chunks(path: Path, dim: int, block_bytes: int) -> Iterator[np.ndarray]:
    types = {f"f{i}": pa.float32() for i in range(dim)}
    row = 0
    for batch in _batches(path, types, block_bytes):
        chunk = np.empty((batch.num_rows, dim), dtype=np.float32)
        for i, column in enumerate(batch.columns):
            chunk[:, i] = column.to_numpy(zero_copy_only=False)  # nulls -> NaN, caught below
        yield check_feature_chunk(chunk, dim, str(path), row)
        row += batch.num_rows


def ogb_source(
    directory: str | Path,
    *,
    split: str | None = None,
    undirected: bool = True,
    num_classes: int | None = None,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
) -> GraphSource:
    """Read an OGB node-property-prediction raw directory (see the module docstring).

    Args:
        directory: the dataset folder (holding ``raw/`` and ``split/``).
        split: the folder under ``split/`` to use; may be omitted when there is exactly one.
        undirected: symmetrise the edges (OGB's usual preprocessing); otherwise a line ``u,v`` is a directed
            edge ``u -> v``.
        num_classes: override ``max(label) + 1``.
        block_bytes: CSV bytes per streamed block.
    """
    directory = Path(directory)
    raw = directory / "raw"
    if not raw.is_dir():
        raise FileNotFoundError(f"'{raw}' expected an OGB raw directory (got no such directory)")
    edge_path = find_csv(raw, "edge")
    feat_path = find_csv(raw, "node-feat")
    label_path = find_csv(raw, "node-label")
    count_path = find_csv(raw, "num-node-list")

    counts = read_csv_column(count_path, pa.int64())
    if len(counts) != 1 or counts[0] < 1:
        raise ValueError(
            f"'{count_path}' expected one positive node count (one graph) (got {counts.tolist()[:5]})"
        )
    num_nodes = int(counts[0])

    first = _first_line(feat_path)
    if not first:
        raise ValueError(f"'{feat_path}' expected comma-separated feature rows (got an empty first line)")
    feature_dim = first.count(",") + 1

    raw_labels = read_csv_column(label_path, pa.float64())
    if len(raw_labels) != num_nodes:
        raise ValueError(f"'{label_path}' expected {num_nodes} lines, one per node (got {len(raw_labels)})")
    unlabelled = np.isnan(raw_labels)
    labelled = raw_labels[~unlabelled]
    whole = labelled == np.floor(labelled)
    if not whole.all():
        bad = int(np.flatnonzero(~unlabelled)[np.flatnonzero(~whole)[0]])
        raise ValueError(f"'{label_path}: labels[{bad}]' expected an integer class (got {raw_labels[bad]})")
    labels = np.where(unlabelled, -1, raw_labels).astype(np.int64)
    classes = int(num_classes) if num_classes is not None else int(labels.max()) + 1 if labelled.size else 1

    split_root = directory / "split"
    names = sorted(p.name for p in split_root.iterdir() if p.is_dir()) if split_root.is_dir() else []
    if split is None:
        if len(names) != 1:
            raise ValueError(
                f"'{split_root}' expected exactly one split folder or the option split=NAME (got {names})"
            )
        split = names[0]
    if split not in names:
        raise FileNotFoundError(
            f"'{split_root / split}' expected a split folder, one of {names} (got {split!r})"
        )
    split_dir = split_root / split
    split_paths = {
        key: find_csv(split_dir, stem)
        for key, stem in (("train", "train"), ("val", "valid"), ("test", "test"))
    }
    splits = {key: np.sort(read_csv_column(path, pa.int64())) for key, path in split_paths.items()}

    return GraphSource(
        name=dataset_name(directory.name),
        num_nodes=num_nodes,
        feature_dim=feature_dim,
        num_classes=classes,
        edge_chunks=lambda: _edge_chunks(edge_path, num_nodes, undirected, block_bytes),
        feature_chunks=lambda: _feature_chunks(feat_path, feature_dim, block_bytes),
        labels=labels,
        train_idx=splits["train"],
        val_idx=splits["val"],
        test_idx=splits["test"],
        description={
            "kind": "ogb",
            "directory": str(directory),
            "split": split,
            "undirected": undirected,
            "unlabelled_nodes": int(unlabelled.sum()),
        },
        undirected=undirected,
        deduplicated=False,
        files={
            "source": str(directory),
            "edges": str(edge_path),
            "features": str(feat_path),
            "labels": str(label_path),
            "splits": str(split_dir),
            **{f"{key}_idx": str(path) for key, path in split_paths.items()},
        },
    )


def _open(rest: str, spec: str, options: dict[str, Any]) -> GraphSource:
    from pipelines.methods.sources.ogbl import link_split_folders, ogbl_source

    directory = Path(rest).expanduser()
    link_only = sorted(k for k in ("overlap", "seed") if k in options)
    if link_split_folders(directory):  # an ogbl-* dataset: pipelines.methods.sources.ogbl
        if "num_classes" in options:
            raise ValueError(f"'option num_classes' expected only for node-property OGB directories (got an OGB "
                             f"link dataset, '{directory}')")
        return ogbl_source(directory, **options)
    if link_only:
        raise ValueError(f"'option {link_only[0]}' expected only for OGB link datasets (split/<name>/train.pt or "
                         f".npz) (got '{directory}')")
    return ogb_source(directory, **options)


SOURCE_KINDS.register("ogb", SourceKind(
    "ogb",
    "ogb:DIR (DIR/raw/*.csv[.gz], DIR/split/<name>/{train,valid,test}.csv[.gz], or .pt/.npz for ogbl-*)",
    {"split": parse_str, "undirected": parse_bool, "num_classes": parse_int, "block_bytes": parse_int,
     "overlap": parse_str, "seed": parse_int},
    "OGB node-property raw directory, streamed; or an ogbl-* link dataset with its edge split.",
    _open,
))
