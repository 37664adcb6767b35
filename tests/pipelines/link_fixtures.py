"""Tiny link-prediction sources written to a directory: an ``edgelist:DIR`` split and an ``ogbl-*`` layout.

The graph is a ring lattice (node ``i`` linked to ``i + 1 .. i + 4``), so held-out links are predictable from
the training ones; the split is a fixed seeded shuffle, written as the test asks (text, ``.pt``, ``.npz``).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

__all__ = ["lattice_split", "write_edge_dir", "write_ogbl_dir"]


def lattice_split(num_nodes: int = 240, reach: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    """``train``/``valid``/``test`` ``(E, 2)`` int64 of the ring lattice, 80/10/10, each in a random direction."""
    i = np.repeat(np.arange(num_nodes), reach)
    j = (i + np.tile(np.arange(1, reach + 1), num_nodes)) % num_nodes
    edges = np.stack([i, j], axis=1).astype(np.int64)
    rng = np.random.default_rng(seed)
    edges = edges[rng.permutation(len(edges))]
    flip = rng.random(len(edges)) < 0.5
    edges[flip] = edges[flip][:, ::-1]
    a, b = int(0.8 * len(edges)), int(0.9 * len(edges))
    return {"train": edges[:a], "valid": edges[a:b], "test": edges[b:]}


def write_edge_dir(directory: Path, split: dict[str, np.ndarray], suffix: str = ".txt", sep: str = " ") -> Path:
    """``directory/{train,valid,test}<suffix>``: a comment line, then ``src<sep>dst`` per line."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, edges in split.items():
        lines = "".join(f"{u}{sep}{v}\n" for u, v in edges.tolist())
        (directory / f"{name}{suffix}").write_text(f"# {name} edges\n{lines}")
    return directory


def write_ogbl_dir(directory: Path, split: dict[str, np.ndarray], num_nodes: int, fmt: str = "pt",
                   negatives: str | None = None, features: int = 0, seed: int = 1) -> Path:
    """An ``ogbl-*`` layout: ``raw/edge.csv.gz`` (the training edges), ``raw/num-node-list.csv.gz``, optional
    ``raw/node-feat.csv.gz``, and ``split/time/{train,valid,test}.<fmt>`` (``pt``: ``torch.save`` of NumPy
    arrays, as OGB ships them; ``npz``). ``negatives``: ``edges`` (``edge_neg``) or ``targets``
    (``source_node``/``target_node``/``target_node_neg``, citation2's keys)."""
    raw = directory / "raw"
    folder = directory / "split" / "time"
    raw.mkdir(parents=True, exist_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(raw / "edge.csv.gz", "wt") as f:
        f.write("".join(f"{u},{v}\n" for u, v in split["train"].tolist()))
    with gzip.open(raw / "num-node-list.csv.gz", "wt") as f:
        f.write(f"{num_nodes}\n")
    if features:
        x = np.random.default_rng(seed).standard_normal((num_nodes, features)).astype(np.float32)
        with gzip.open(raw / "node-feat.csv.gz", "wt") as f:
            f.write("".join(",".join(f"{v:.5f}" for v in row) + "\n" for row in x))
    rng = np.random.default_rng(seed)
    for name, edges in split.items():
        if negatives == "targets":
            item = {"source_node": edges[:, 0].copy(), "target_node": edges[:, 1].copy()}
            if name != "train":
                item["target_node_neg"] = rng.integers(0, num_nodes, size=(len(edges), 20))
        else:
            item = {"edge": edges.copy()}
            if negatives == "edges" and name != "train":
                item["edge_neg"] = rng.integers(0, num_nodes, size=(3 * len(edges), 2))
        if fmt == "pt":
            import torch

            torch.save(item, folder / f"{name}.pt")
        else:
            np.savez(folder / f"{name}.npz", **item)
    return directory
