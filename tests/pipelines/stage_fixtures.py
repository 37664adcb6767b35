"""Small random graph artifacts for stage tests (no ingest needed)."""

from __future__ import annotations

import numpy as np

from storage_kernels.store import Artifact, ArtifactStore


def random_symmetric_csr(n: int, avg_degree: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A random undirected graph without self loops or duplicate edges, as CSR."""
    rng = np.random.default_rng(seed)
    m = n * avg_degree // 2
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    pairs = np.unique(np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])], 1), axis=0)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs[:, 0], minlength=n), out=indptr[1:])
    return indptr, pairs[:, 1].astype(np.int64)


def make_graph_artifact(
    store: ArtifactStore,
    dataset: str = "unit",
    n: int = 600,
    avg_degree: int = 8,
    dim: int = 16,
    classes: int = 4,
    seed: int = 0,
) -> Artifact:
    """Publish an ``ingest`` artifact (a graph) with learnable labels (features = class centroid + noise)."""
    rng = np.random.default_rng(seed)
    indptr, indices = random_symmetric_csr(n, avg_degree, seed)
    labels = rng.integers(0, classes, n).astype(np.int64)
    centroids = rng.normal(size=(classes, dim)).astype(np.float32)
    features = (centroids[labels] + 0.5 * rng.normal(size=(n, dim))).astype(np.float32)
    order = rng.permutation(n)
    train, val, test = (
        np.sort(order[: n // 2]),
        np.sort(order[n // 2 : 3 * n // 4]),
        np.sort(order[3 * n // 4 :]),
    )
    version = store.version_for("ingest", 1, {"fixture": seed, "n": n, "dim": dim}, {})
    existing = store.find(dataset, "ingest", version)
    if existing is not None:
        return existing
    with store.builder(dataset, "ingest", version, {"fixture": seed}, {}) as b:
        for name, arr in (
            ("indptr.npy", indptr),
            ("indices.npy", indices),
            ("features.npy", features),
            ("labels.npy", labels),
            ("train_idx.npy", train),
            ("val_idx.npy", val),
            ("test_idx.npy", test),
        ):
            b.save_array(name, arr)
        b.stats.update(
            {"num_nodes": n, "num_edges": len(indices), "feature_dim": dim, "num_classes": classes}
        )
        return b.publish()
