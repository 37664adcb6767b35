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

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.methods.sources.base import GraphSource, dataset_name
from pipelines.methods.sources.kinds import SOURCE_KINDS, SourceKind
from pipelines.methods.sources.ogbfiles import (
    DEFAULT_BLOCK_BYTES,
    csv_edge_chunks,
    csv_feature_chunks,
    find_csv,
    first_line,
    read_csv_column,
)
from pipelines.methods.sources.options import parse_bool, parse_int, parse_str
from pipelines.methods.sources.validate import derived_num_classes

__all__ = ["DEFAULT_BLOCK_BYTES", "find_csv", "ogb_source", "read_csv_column"]

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
        num_classes: override ``max(label) + 1`` (bounded by the node count and 65,536 when not given).
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

    first = first_line(feat_path)
    if not first:
        raise ValueError(f"'{feat_path}' expected comma-separated feature rows (got an empty first line)")
    feature_dim = first.count(",") + 1

    raw_labels = read_csv_column(label_path, pa.float64())
    if len(raw_labels) != num_nodes:
        raise ValueError(f"'{label_path}' expected {num_nodes} lines, one per node (got {len(raw_labels)})")
    unlabelled = np.isnan(raw_labels)
    labelled = raw_labels[~unlabelled]
    whole = (labelled == np.floor(labelled)) & (np.abs(labelled) < 2.0**53)  # inf and 1e300 are no class either
    if not whole.all():
        bad = int(np.flatnonzero(~unlabelled)[np.flatnonzero(~whole)[0]])
        raise ValueError(f"'{label_path}: labels[{bad}]' expected an integer class (got {raw_labels[bad]})")
    labels = np.where(unlabelled, -1, raw_labels).astype(np.int64)
    classes = (int(num_classes) if num_classes is not None
               else derived_num_classes(labels, num_nodes, str(label_path)))

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
        edge_chunks=lambda: csv_edge_chunks(edge_path, num_nodes, undirected, block_bytes),
        feature_chunks=lambda: csv_feature_chunks(feat_path, feature_dim, block_bytes),
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
