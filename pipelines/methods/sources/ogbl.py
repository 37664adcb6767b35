"""OGB link-property-prediction datasets (``ogbl-*``) from their directory on disk, no network: ``ogb:DIR``.

Layout (CSVs headerless, each ``name.csv.gz`` or ``name.csv``, read with ``pipelines.methods.sources.ogb``'s streaming
reader)::

    DIR/raw/edge.csv              src,dst per line: the graph OGB gives (its training edges)
    DIR/raw/num-node-list.csv     the number of nodes
    DIR/raw/node-feat.csv         optional: F floats per line (without it: one constant feature 1.0)
    DIR/split/<name>/train.pt, valid.pt, test.pt   (or .npz with the same keys)

A split file is a dict of arrays (``torch.save`` of NumPy arrays or tensors, as OGB ships them): ``edge``
``(E, 2)`` (collab, ddi, ppa) or ``source_node``/``target_node`` ``(E,)`` (citation2); valid/test may add fixed
negatives, ``edge_neg`` ``(M, 2)`` (shared by the split) or ``target_node_neg`` ``(E, K)`` (per edge); other keys
(``weight``, ``year``) are ignored. ``.pt`` files are read with ``torch.load(weights_only=True)``, allowing
only NumPy's array reconstruction and numeric dtypes (:func:`load_split_file`), never plain pickle; ``.npz``
with ``allow_pickle=False``.

The graph ingest builds is ``edge.csv`` plus every split's edges (the known edges); the link task trains on the
split's ``train`` edges (``pipelines.methods.sources.linksplit``). OGB link datasets have no node labels: every node
carries the one class ``0`` and a seeded 60/20/20 node split, so the node stages run unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.methods.sources.base import DEFAULT_CHUNK_ROWS, EdgeChunk, GraphSource, dataset_name
from pipelines.methods.sources.files import random_split
from pipelines.methods.sources.linksplit import SPLITS, LinkSplit, constant_feature_chunks, drop_self_loops
from pipelines.methods.sources.ogbfiles import (
    DEFAULT_BLOCK_BYTES,
    csv_edge_chunks,
    csv_feature_chunks,
    find_csv,
    first_line,
    read_csv_column,
)

__all__ = ["SPLIT_SUFFIXES", "link_split_folders", "load_split_file", "ogbl_source"]

SPLIT_SUFFIXES = (".pt", ".npz")
_NUMERIC_DTYPES = ("Bool", "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float16",
                   "Float32", "Float64")


def _split_file(folder: Path, stem: str) -> Path | None:
    found = [folder / f"{stem}{s}" for s in SPLIT_SUFFIXES if (folder / f"{stem}{s}").is_file()]
    if len(found) > 1:
        raise ValueError(f"'{folder / stem}' expected one split file, .pt or .npz (got {[p.name for p in found]})")
    return found[0] if found else None


def link_split_folders(directory: Path) -> list[str]:
    """Names of the ``split/<name>`` folders of an OGB link dataset (those holding a ``.pt`` or ``.npz`` train,
    valid or test file); [] when ``directory`` is not laid out as one (a node-property dataset has
    ``raw/node-label.csv`` and CSV splits)."""
    root = directory / "split"
    if not root.is_dir() or any((directory / "raw" / f"node-label{s}").is_file() for s in (".csv", ".csv.gz")):
        return []
    return sorted(p.name for p in root.iterdir()
                  if p.is_dir() and any((p / f"{n}{s}").is_file() for n in SPLITS for s in SPLIT_SUFFIXES))


def _safe_globals() -> list[Any]:
    """What a ``.pt`` of NumPy arrays needs besides tensors: the array reconstructor (under NumPy 2's and NumPy
    1's module names, files written by either), ``ndarray`` and the numeric dtypes -- nothing that runs code."""
    import numpy.dtypes as dtypes

    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # NumPy 1
        from numpy.core.multiarray import _reconstruct
    names = ("numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct")
    return [*((_reconstruct, n) for n in names), np.ndarray, np.dtype,
            *(getattr(dtypes, f"{d}DType") for d in _NUMERIC_DTYPES if hasattr(dtypes, f"{d}DType"))]


def load_split_file(path: Path) -> dict[str, np.ndarray]:
    """A ``.pt`` or ``.npz`` split file as ``{key: numeric ndarray}`` (see the module docstring).

    Raises:
        ValueError: not a dict of numeric arrays, or a ``.pt`` needing anything beyond the allowed globals.
    """
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                raw: Any = {k: z[k] for k in z.files}
        except (ValueError, OSError, EOFError) as e:
            what = "Python objects" if "allow_pickle" in str(e) else type(e).__name__
            raise ValueError(f"'{path}' expected a .npz of numeric arrays (got {what})") from None
    else:
        import pickle

        import torch

        try:
            with torch.serialization.safe_globals(_safe_globals()):
                raw = torch.load(path, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as e:
            first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise ValueError(f"'{path}' expected a torch.save of a dict of tensors or NumPy arrays, loadable with "
                             f"weights_only=True ({first[:200]})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"'{path}' expected a dict of arrays (got {type(raw).__name__})")
    out: dict[str, np.ndarray] = {}
    for key, value in raw.items():
        if hasattr(value, "numpy") and hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
            raise ValueError(f"'{path}: {key}' expected a numeric array (got {type(value).__name__}"
                             f"{' of ' + str(value.dtype) if isinstance(value, np.ndarray) else ''})")
        out[str(key)] = value
    return out


def _as_ids(path: Path, key: str, value: np.ndarray, ndim: int) -> np.ndarray:
    if value.ndim != ndim or value.dtype.kind not in "iu":
        raise ValueError(f"'{path}: {key}' expected integer node ids of {ndim} dimension(s) "
                         f"(got shape {value.shape}, dtype {value.dtype})")
    return np.ascontiguousarray(value, dtype=np.int64)


def _read_split(path: Path) -> tuple[np.ndarray, str, np.ndarray | None, str | None]:
    """``(edges (E, 2), row key, negatives or None, negative kind or None)`` of one split file."""
    arrays = load_split_file(path)
    if "edge" in arrays:
        edges, key = _as_ids(path, "edge", arrays["edge"], 2), "edge"
        if edges.shape[1] != 2:
            raise ValueError(f"'{path}: edge' expected shape (E, 2) (got {edges.shape})")
    elif "source_node" in arrays and "target_node" in arrays:
        src = _as_ids(path, "source_node", arrays["source_node"], 1)
        dst = _as_ids(path, "target_node", arrays["target_node"], 1)
        if len(src) != len(dst):
            raise ValueError(f"'{path}: target_node' expected as many entries as source_node ({len(src)}) "
                             f"(got {len(dst)})")
        edges, key = np.stack([src, dst], axis=1), "source_node/target_node"
    else:
        raise ValueError(f"'{path}' expected the key 'edge' or the keys 'source_node' and 'target_node' (got "
                         f"{sorted(arrays)}; knowledge-graph splits with 'relation' are not read)")
    if "edge_neg" in arrays:
        neg = _as_ids(path, "edge_neg", arrays["edge_neg"], 2)
        if neg.shape[1] != 2:
            raise ValueError(f"'{path}: edge_neg' expected shape (M, 2) (got {neg.shape})")
        return edges, key, neg, "edges"
    if "target_node_neg" in arrays:
        return edges, key, _as_ids(path, "target_node_neg", arrays["target_node_neg"], 2), "targets"
    return edges, key, None, None


def ogbl_source(
    directory: str | Path,
    *,
    split: str | None = None,
    undirected: bool = True,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    overlap: str = "allow",
    seed: int = 0,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> GraphSource:
    """Read an OGB link-property-prediction directory (see the module docstring).

    Args:
        directory: the dataset folder (``raw/`` and ``split/``).
        split: the folder under ``split/``; may be omitted when exactly one holds ``train.pt``/``train.npz``.
        undirected: symmetrise the edges (the usual preprocessing); else a line ``u,v`` is ``u -> v``.
        block_bytes: CSV bytes per streamed block.
        overlap: ``allow`` (an edge may be in two splits; counted) or ``reject``.
        seed: seed of the node split the node stages use.
        chunk_rows: rows per constant-feature chunk (no ``node-feat.csv``).
    """
    directory = Path(directory)
    raw = directory / "raw"
    if not raw.is_dir():
        raise FileNotFoundError(f"'{raw}' expected an OGB raw directory (got no such directory)")
    names = link_split_folders(directory)
    if split is None and len(names) == 1:
        split = names[0]
    if split is None or split not in names:
        which = "" if split else ", exactly one, or the option split=NAME"
        raise FileNotFoundError(f"'{directory / 'split' / (split or '<name>')}' expected a split folder holding "
                                f"{{train,valid,test}}.pt or .npz{which} (got folders {names})")
    folder = directory / "split" / split
    edge_path = find_csv(raw, "edge")
    count_path = find_csv(raw, "num-node-list")
    counts = read_csv_column(count_path, pa.int64())
    if len(counts) != 1 or counts[0] < 1:
        raise ValueError(f"'{count_path}' expected one positive node count (one graph) (got {counts.tolist()[:5]})")
    n = int(counts[0])
    try:
        feat_path: Path | None = find_csv(raw, "node-feat")
    except FileNotFoundError:
        feat_path = None
    dim = 1
    if feat_path is not None:
        first = first_line(feat_path)
        if not first:
            raise ValueError(f"'{feat_path}' expected comma-separated feature rows (got an empty first line)")
        dim = first.count(",") + 1

    link = LinkSplit(edges={}, overlap=overlap)
    kinds = set()
    files = {"source": str(directory), "edges": str(edge_path), "splits": str(folder)}
    for name in SPLITS:
        path = _split_file(folder, name)
        if path is None:
            raise FileNotFoundError(f"'{folder / name}.pt' expected the {name} split, {name}.pt or {name}.npz "
                                    f"(got none in '{folder}')")
        edges, key, neg, kind = _read_split(path)
        if neg is not None and name == "train":
            neg, kind = None, None  # training negatives are sampled, never fixed
        if kind == "targets" or neg is None:
            edges, neg, loops = drop_self_loops(edges, neg)
        else:
            edges, _, loops = drop_self_loops(edges)
        link.edges[name], link.self_loops[name] = edges, loops
        link.files[name], link.rows[name] = str(path), ("key", key)
        files[f"link_{name}"] = str(path)
        if neg is not None:
            link.negatives[name] = neg
            link.files[f"{name}_neg"] = str(path)
            link.rows[f"{name}_neg"] = ("key", "edge_neg" if kind == "edges" else "target_node_neg")
            kinds.add(kind)
    if len(kinds) > 1:
        raise ValueError(f"'{folder}' expected one kind of fixed negatives in valid and test (got {sorted(kinds)})")
    link.negative_kind = kinds.pop() if kinds else None

    labels = np.zeros(n, dtype=np.int64)
    train, val, test = random_split(labels, seed)

    def edge_chunks() -> Iterator[EdgeChunk]:
        yield from csv_edge_chunks(edge_path, n, undirected, block_bytes)
        yield from link.edge_chunks(undirected)

    if feat_path is not None:
        files["features"] = str(feat_path)

        def feature_chunks() -> Iterator[np.ndarray]:
            return csv_feature_chunks(feat_path, dim, block_bytes)
    else:
        def feature_chunks() -> Iterator[np.ndarray]:
            return constant_feature_chunks(n, chunk_rows)

    return GraphSource(
        name=dataset_name(directory.resolve().name),
        num_nodes=n,
        feature_dim=dim,
        num_classes=1,
        edge_chunks=edge_chunks,
        feature_chunks=feature_chunks,
        labels=labels,
        train_idx=train,
        val_idx=val,
        test_idx=test,
        description={"kind": "ogb", "task": "link", "directory": str(directory), "split": folder.name,
                     "undirected": undirected, "features": "file" if feat_path else "constant",
                     "overlap": overlap, "link_split": link.description()},
        undirected=undirected,
        deduplicated=False,
        files=files,
        link_split=link,
    )
