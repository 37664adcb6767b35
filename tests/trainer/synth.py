"""Small synthetic fixtures for the trainer tests: a homophilous graph, a sample set and a packed store.

Everything is written straight in the contract layouts (docs/CONTRACTS.md "Samples" and "packed"), so the
trainer is tested against the files, not against the pipeline stages that normally produce them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from storage_kernels import kernels
from storage_kernels.arrays import save_array
from storage_kernels.sampleset import SampleSet

TIER_GPU, TIER_CPU, TIER_PACKED, TIER_FILE = 0, 1, 2, 3


@dataclass
class Dataset:
    features: np.ndarray  # (N, F) float32
    labels: np.ndarray  # (N,) int64
    indptr: np.ndarray
    indices: np.ndarray
    splits: dict[str, np.ndarray]
    features_path: Path  # aligned .npy copy of ``features``
    samples: SampleSet
    num_classes: int


def make_graph(num_nodes: int, feature_dim: int, num_classes: int, seed: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, indices, features, labels): edges mostly within a class, features = class centre + noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, num_nodes).astype(np.int64)
    centres = rng.normal(0, 1, (num_classes, feature_dim))
    features = (centres[labels] + rng.normal(0, 1.5, (num_nodes, feature_dim))).astype(np.float32)
    src, dst = [], []
    for v in range(num_nodes):
        same = np.flatnonzero(labels == labels[v])
        for u in rng.choice(same, 3):
            src.append(v)
            dst.append(int(u))
        for u in rng.integers(0, num_nodes, 1):
            src.append(v)
            dst.append(int(u))
    edges = np.unique(np.array([src + dst, dst + src]).T, axis=0)  # symmetrised, sorted, no duplicates
    edges = edges[edges[:, 0] != edges[:, 1]]
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.add.at(indptr, edges[:, 0] + 1, 1)
    return np.cumsum(indptr), edges[:, 1].astype(np.int64), features, labels


def write_sample_set(path: Path, batches: list[tuple[str, int, int, kernels.SampledBlocks]]) -> SampleSet:
    """Write ``(split, epoch, step, sample_blocks output)`` batches in the Samples layout and open them."""
    path.mkdir(parents=True, exist_ok=True)
    nodes, indptrs, cols = [], [], []
    rows: dict[str, list] = {k: [] for k in ("batch", "split", "epoch", "step", "num_seeds", "node_offset",
                                             "indptr_offset", "cols_offset", "hop_counts", "edge_counts")}
    offsets = [0, 0, 0]
    for b, (split, epoch, step, out) in enumerate(batches):
        for key, value in (("batch", b), ("split", split), ("epoch", epoch), ("step", step),
                           ("num_seeds", int(out.hop_counts[0])), ("node_offset", offsets[0]),
                           ("indptr_offset", offsets[1]), ("cols_offset", offsets[2]),
                           ("hop_counts", out.hop_counts.tolist()), ("edge_counts", [len(c) for c in out.cols])):
            rows[key].append(value)
        nodes.append(out.nodes)
        indptrs += list(out.indptrs)
        cols += list(out.cols)
        offsets[0] += len(out.nodes)
        offsets[1] += sum(len(i) for i in out.indptrs)
        offsets[2] += sum(len(c) for c in out.cols)
    save_array(path / "nodes.npy", np.concatenate(nodes))
    save_array(path / "indptr.npy", np.concatenate(indptrs))
    save_array(path / "cols.npy", np.concatenate(cols))
    table = pa.table({k: (pa.array(v, pa.list_(pa.int64())) if k in ("hop_counts", "edge_counts")
                          else pa.array(v, pa.string() if k == "split" else pa.int64())) for k, v in rows.items()})
    pq.write_table(table, path / "batches.parquet")
    return SampleSet(path)


def make_dataset(root: Path, num_nodes: int = 240, feature_dim: int = 12, num_classes: int = 4,
                 fanouts: tuple[int, ...] = (4, 3), batch_size: int = 16, epochs: int = 2, seed: int = 0) -> Dataset:
    """Graph + splits (60/20/20) + offline samples: ``epochs`` shuffled train epochs, one val/test pass."""
    indptr, indices, features, labels = make_graph(num_nodes, feature_dim, num_classes, seed)
    rng = np.random.default_rng(seed + 1)
    perm = rng.permutation(num_nodes)
    cut1, cut2 = int(0.6 * num_nodes), int(0.8 * num_nodes)
    splits = {"train": np.sort(perm[:cut1]), "val": np.sort(perm[cut1:cut2]), "test": np.sort(perm[cut2:])}
    batches = []
    plan = [("train", e) for e in range(epochs)] + [("val", 0), ("test", 0)]
    for split, epoch in plan:
        ids = splits[split]
        if split == "train":
            ids = rng.permutation(ids)
        for step, lo in enumerate(range(0, len(ids), batch_size)):
            seeds = ids[lo : lo + batch_size]
            out = kernels.sample_blocks(indptr, indices, seeds, list(fanouts), seed=1000 * epoch + step + 7)
            batches.append((split, epoch, step, out))
    features_path = root / "features.npy"
    root.mkdir(parents=True, exist_ok=True)
    save_array(features_path, features)
    samples = write_sample_set(root / "samples", batches)
    return Dataset(features, labels, indptr, indices, splits, features_path, samples, num_classes)


def write_packed(path: Path, samples: SampleSet, features: np.ndarray, gpu_nodes: np.ndarray,
                 cpu_nodes: np.ndarray) -> Path:
    """A ``pack`` artifact directory (contract layout) for the given cache choice.

    Training batches pack their uncached rows (tier 2, slot = row in the chunk); evaluation batches are not
    packed (``chunk_rows`` 0) and address their uncached rows in the feature file (tier 3, slot = node id).
    """
    path.mkdir(parents=True, exist_ok=True)
    n = features.shape[0]
    tier = np.full(n, TIER_PACKED, np.int8)
    slot = np.full(n, -1, np.int64)
    gpu_nodes, cpu_nodes = np.sort(gpu_nodes), np.sort(cpu_nodes)
    tier[gpu_nodes], slot[gpu_nodes] = TIER_GPU, np.arange(len(gpu_nodes))
    tier[cpu_nodes], slot[cpu_nodes] = TIER_CPU, np.arange(len(cpu_nodes))
    save_array(path / "gpu_cache.npy", np.ascontiguousarray(features[gpu_nodes]).reshape(-1, features.shape[1]))
    save_array(path / "cpu_cache.npy", np.ascontiguousarray(features[cpu_nodes]).reshape(-1, features.shape[1]))
    addr_tier, addr_slot, packed_ids = [], [], []
    for b in range(samples.num_batches):
        start, stop = samples.node_range(b)
        nodes = np.asarray(samples.nodes[start:stop])
        node_tier, node_slot = tier[nodes].copy(), slot[nodes].copy()
        uncached = node_tier == TIER_PACKED
        if samples.batch(b).split == "train":
            on_disk = np.sort(nodes[uncached])
            node_slot[uncached] = np.searchsorted(on_disk, nodes[uncached])
        else:
            on_disk = np.empty(0, np.int64)
            node_tier[uncached], node_slot[uncached] = TIER_FILE, nodes[uncached]
        addr_tier.append(node_tier)
        addr_slot.append(node_slot)
        packed_ids.append(on_disk)
    offsets, rows = kernels.pack_batches(features, packed_ids, path / "packed.bin", partition_rows=50)
    save_array(path / "chunk_offset.npy", offsets.astype(np.int64))
    save_array(path / "chunk_rows.npy", rows.astype(np.int64))
    save_array(path / "addr_tier.npy", np.concatenate(addr_tier))
    save_array(path / "addr_slot.npy", np.concatenate(addr_slot))
    return path


def hot_nodes(samples: SampleSet, num_gpu: int, num_cpu: int) -> tuple[np.ndarray, np.ndarray]:
    """The nodes training batches read most: the first ``num_gpu`` for the GPU cache, the next for the CPU."""
    train = [samples.batch(b).nodes for b in range(samples.num_batches) if samples.batch(b).split == "train"]
    freq = np.bincount(np.concatenate(train))
    order = np.argsort(-freq, kind="stable")
    return order[:num_gpu], order[num_gpu : num_gpu + num_cpu]
