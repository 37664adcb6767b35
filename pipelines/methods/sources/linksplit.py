"""A source's own train/valid/test split of its edges (link prediction), and where it lives in the artifacts.

A source that ships its split (``edgelist:DIR`` with ``train``/``valid``/``test`` files, ``ogb:DIR`` of an
``ogbl-*`` dataset) attaches a :class:`LinkSplit` to its :class:`~pipelines.methods.sources.base.GraphSource`. The
edges of each split are kept as listed (file order and direction, duplicates kept), minus self loops (a query
``(u, u)`` has no meaning under filtered ranking); ids are the source's. Optional fixed negatives of the
held-out splits (``valid_neg``/``test_neg``) come in one of two shapes:

``edges``
    ``(M, 2)`` negative pairs shared by every positive of the split (OGB's ``edge_neg``: collab, ddi, ppa);
``targets``
    ``(Q, K)`` negative destinations per positive, row ``q`` for positive ``q`` (OGB citation2's
    ``target_node_neg``; the positive's source stays).

An edge may be in more than one split (OGB's collab repeats collaborations across years): ``overlap=allow``
(the default) keeps it and counts it (``link_overlap_*`` in the ingest stats), ``overlap=reject`` refuses the
source. The graph ingest builds holds the union of every split's edges (the known edges filtered ranking
removes); the link task trains and passes messages on the ``train`` edges alone.

Artifacts: ingest writes ``link_train.npy``, ``link_valid.npy``, ``link_test.npy`` (``(E, 2)`` int64) and
``link_valid_neg.npy``/``link_test_neg.npy`` when present, in source ids; reorder writes the same files with
ids mapped to its order; the ingest version covers them through the split files' fingerprints and the
description's ``link_split`` entry (:data:`LINK_SPLIT_FORMAT`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.methods.sources.edges import symmetrise_chunk

__all__ = ["LINK_SPLIT_FORMAT", "NEGATIVE_KINDS", "OVERLAP_MODES", "SPLITS", "LinkSplit", "constant_feature_chunks",
           "read_link_split", "relabel_link_split", "write_link_split"]

SPLITS = ("train", "valid", "test")
NEGATIVE_KINDS = ("edges", "targets")
OVERLAP_MODES = ("allow", "reject")
#: Enters the ingest version with the description: a change to how split files are read or written bumps it.
LINK_SPLIT_FORMAT = 1


@dataclass
class LinkSplit:
    """Edges ``(E, 2)`` int64 of each split, fixed negatives of the held-out ones, and where each came from.

    Attributes:
        edges: ``"train"``/``"valid"``/``"test"`` -> ``(E, 2)`` int64 (source ids, as listed).
        negatives: ``"valid"``/``"test"`` -> ``(M, 2)`` or ``(Q, K)`` int64 (see ``negative_kind``); optional.
        negative_kind: ``"edges"`` or ``"targets"`` (module docstring); None without negatives.
        files: split (or ``"valid_neg"``...) -> the file it was read from, for messages.
        rows: split -> how to name row ``i`` of it: ``("line", first)`` (text: line ``first + i``) or
            ``("key", name)`` (arrays: ``name[i]``).
        self_loops: split -> self loops dropped from it.
        overlap: ``"allow"`` or ``"reject"`` an edge in two splits (module docstring).
    """

    edges: dict[str, np.ndarray]
    negatives: dict[str, np.ndarray] = field(default_factory=dict)
    negative_kind: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    rows: dict[str, tuple[str, Any]] = field(default_factory=dict)
    self_loops: dict[str, int] = field(default_factory=dict)
    overlap: str = "allow"

    def where(self, name: str, index: int) -> str:
        """``'FILE: line L'`` or ``'FILE: edge[i]'`` for row ``index`` of split (or negatives) ``name``."""
        kind, what = self.rows.get(name, ("key", name))
        place = f"line {what + index}" if kind == "line" else f"{what}[{index}]"
        return f"'{self.files.get(name, name)}: {place}'"

    def check(self, num_nodes: int) -> LinkSplit:
        """Shapes, ids in ``[0, num_nodes)`` (the first bad row named), non-empty splits, the overlap rule."""
        if self.overlap not in OVERLAP_MODES:
            raise ValueError(f"'option overlap' expected one of {list(OVERLAP_MODES)} (got {self.overlap!r})")
        for name in SPLITS:
            if name not in self.edges:
                raise ValueError(f"'link split' expected a {name} split (got {sorted(self.edges)})")
            edges = self.edges[name]
            if edges.ndim != 2 or edges.shape[1] != 2 or edges.dtype.kind not in "iu":
                raise ValueError(f"'{self.files.get(name, name)}' expected (E, 2) integer node ids "
                                 f"(got shape {edges.shape}, dtype {edges.dtype})")
            if len(edges) == 0:
                raise ValueError(f"'{self.files.get(name, name)}' expected at least one edge that is not a "
                                 f"self loop (got none)")
            self._ids_in_range(name, edges, num_nodes)
        for name, neg in self.negatives.items():
            key = f"{name}_neg"
            if self.negative_kind not in NEGATIVE_KINDS:
                raise ValueError(f"'link split negatives' expected a kind in {list(NEGATIVE_KINDS)} "
                                 f"(got {self.negative_kind!r})")
            shape = "(M, 2)" if self.negative_kind == "edges" else "(Q, K)"
            if neg.ndim != 2 or neg.dtype.kind not in "iu" or (self.negative_kind == "edges" and neg.shape[1] != 2):
                raise ValueError(f"'{self.files.get(key, key)}' expected {shape} integer node ids "
                                 f"(got shape {neg.shape}, dtype {neg.dtype})")
            if self.negative_kind == "targets" and len(neg) != len(self.edges[name]):
                raise ValueError(f"'{self.files.get(key, key)}' expected one row of negatives per {name} edge "
                                 f"({len(self.edges[name])}) (got {len(neg)})")
            self._ids_in_range(key, neg, num_nodes)
        if self.overlap == "reject":
            for (a, b), count in self.overlaps(num_nodes).items():
                if count:
                    raise ValueError(f"'{self.files.get(b, b)}' expected no edge also in the {a} split under "
                                     f"overlap=reject (got {count})")
        return self

    def _ids_in_range(self, name: str, ids: np.ndarray, num_nodes: int) -> None:
        if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
            flat = int(np.flatnonzero(((ids < 0) | (ids >= num_nodes)).ravel())[0])
            row, col = divmod(flat, ids.shape[1])
            raise ValueError(f"{self.where(name, row)} expected a node id in [0, {num_nodes}) "
                             f"(got {int(ids[row, col])})")

    def overlaps(self, num_nodes: int) -> dict[tuple[str, str], int]:
        """``(a, b)`` -> edges of split ``b`` also in split ``a`` (as undirected pairs), for the pairs
        train/valid, train/test and valid/test."""
        keys = {name: _pair_keys(self.edges[name], num_nodes) for name in SPLITS}
        return {(a, b): int(np.isin(keys[b], keys[a]).sum())
                for a, b in (("train", "valid"), ("train", "test"), ("valid", "test"))}

    def edge_chunks(self, undirected: bool, chunk_edges: int = 1 << 20) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every split's edges as CSR chunks (the base module's convention: both directions when
        ``undirected``, else ``u -> v`` as ``(v, u)``)."""
        for name in SPLITS:
            edges = self.edges[name]
            for lo in range(0, len(edges), chunk_edges):
                src, dst = edges[lo: lo + chunk_edges, 0], edges[lo: lo + chunk_edges, 1]
                yield symmetrise_chunk(src, dst) if undirected else (dst, src)

    def description(self) -> dict[str, Any]:
        """What the ingest version hashes besides the files: the format and the negatives' kind."""
        return {"format": LINK_SPLIT_FORMAT, "negatives": self.negative_kind,
                "self_loops_dropped": {k: v for k, v in self.self_loops.items() if v}}


def _pair_keys(edges: np.ndarray, num_nodes: int) -> np.ndarray:
    lo = np.minimum(edges[:, 0], edges[:, 1]).astype(np.int64)
    hi = np.maximum(edges[:, 0], edges[:, 1]).astype(np.int64)
    return lo * np.int64(num_nodes) + hi


def drop_self_loops(edges: np.ndarray, negatives: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray | None, int]:
    """``edges`` (E, 2) int64 without rows ``(u, u)``, the matching rows of per-edge ``negatives``, the count."""
    edges = np.ascontiguousarray(edges, dtype=np.int64)
    keep = edges[:, 0] != edges[:, 1]
    dropped = int(len(edges) - keep.sum())
    if not dropped:
        return edges, negatives, 0
    return edges[keep], (negatives[keep] if negatives is not None else None), dropped


def write_link_split(builder: Any, split: LinkSplit, num_nodes: int) -> dict[str, Any]:
    """Write the split's files into an ingest artifact; returns its stats (counts, overlaps, negatives)."""
    stats: dict[str, Any] = {"link_split": "source", "link_negatives": split.negative_kind or "none"}
    for name in SPLITS:
        builder.save_array(f"link_{name}.npy", np.ascontiguousarray(split.edges[name], dtype=np.int64))
        stats[f"link_{name}_edges"] = len(split.edges[name])
    for name, neg in split.negatives.items():
        builder.save_array(f"link_{name}_neg.npy", np.ascontiguousarray(neg, dtype=np.int64))
        stats[f"link_{name}_negatives"] = int(neg.shape[0])
    for (a, b), count in split.overlaps(num_nodes).items():
        stats[f"link_overlap_{a}_{b}"] = count
    stats["link_self_loops_dropped"] = int(sum(split.self_loops.values()))
    return stats


def read_link_split(artifact: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None:
    """``(edges, negatives)`` of an ingest or reorder artifact that carries a source's split, else None."""
    if "link_train.npy" not in artifact.files:
        return None
    edges = {name: np.asarray(artifact.array(f"link_{name}.npy"), dtype=np.int64) for name in SPLITS}
    negatives = {name: np.asarray(artifact.array(f"link_{name}_neg.npy"), dtype=np.int64)
                 for name in ("valid", "test") if f"link_{name}_neg.npy" in artifact.files}
    return edges, negatives


def relabel_link_split(ingest: Any, builder: Any, inverse: np.ndarray) -> dict[str, Any]:
    """Write the ingest artifact's split (if any) into the reorder artifact with ids mapped through
    ``inverse`` (old id -> new id); returns stats for the reorder artifact ({} without a split)."""
    found = read_link_split(ingest)
    if found is None:
        return {}
    edges, negatives = found
    from storage_kernels import kernels

    inverse = np.asarray(inverse, dtype=np.int64)
    for name, arr in [*edges.items(), *((f"{k}_neg", v) for k, v in negatives.items())]:
        flat = np.ascontiguousarray(arr).reshape(-1)
        builder.save_array(f"link_{name}.npy", kernels.relabel_ids(flat, inverse).reshape(arr.shape))
    return {"link_split": "source", "link_negatives": ingest.stats.get("link_negatives", "none"),
            **{f"link_{name}_edges": len(arr) for name, arr in edges.items()}}


def constant_feature_chunks(num_nodes: int, chunk_rows: int) -> Iterator[np.ndarray]:
    """A one-column feature of ones for every node, ``chunk_rows`` rows at a time: the features of a link
    source that gives none (learned embeddings need none; sample, plan and pack still read a feature file)."""
    for start in range(0, num_nodes, chunk_rows):
        yield np.ones((min(chunk_rows, num_nodes - start), 1), dtype=np.float32)
