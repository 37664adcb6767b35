"""Ingest builds a CSR larger than ``ingest.memory_mb`` out of core (scratch buckets of source rows) and writes
the same files as the in-memory build, which itself matches a NumPy reference of the source's edges."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.config import PipelineConfig
from pipelines.methods.sources.base import GraphSource, array_edge_chunks, array_row_chunks
from pipelines.stages import ingest
from storage_kernels.store import ArtifactStore

# the synthetic source repeats edges (it is de-duplicated at ingest); Planetoid-style sources do not
DATASET = "synthetic:nodes=4000,degree=24,dim=4,classes=3,seed=5,locality=0.5,window=8"


def _ingest(root, memory_mb: int, dataset: str = DATASET):
    store = ArtifactStore(root)
    cfg = PipelineConfig.load(overrides=[f"ingest.memory_mb={memory_mb}", "ingest.chunk_edges=5000"],
                              dataset=dataset)
    art = ingest.run(store, cfg).artifact
    return store, cfg, art


def _reference(cfg: PipelineConfig) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, de-duplicated CSR of every edge the source yields (NumPy only)."""
    source = ingest.open_source(cfg)
    pairs = np.concatenate([np.stack([np.asarray(s, np.int64), np.asarray(d, np.int64)], 1)
                            for s, d in source.edge_chunks()])
    pairs = np.unique(pairs, axis=0)
    indptr = np.zeros(source.num_nodes + 1, np.int64)
    np.cumsum(np.bincount(pairs[:, 0], minlength=source.num_nodes), out=indptr[1:])
    return indptr, pairs[:, 1]


@pytest.mark.parametrize("memory_mb", [1, 1024])
def test_out_of_core_build_equals_the_in_memory_one_and_the_reference(tmp_path, memory_mb):
    _, cfg, art = _ingest(tmp_path / "r", memory_mb)
    indptr, indices = art.array("indptr.npy"), art.array("indices.npy")
    ref_ptr, ref_idx = _reference(cfg)
    assert int(indptr[-1]) > (1 << 20) // ingest.BUILD_EDGE_BYTES * 2  # 1 MiB: several buckets
    np.testing.assert_array_equal(indptr, ref_ptr)
    np.testing.assert_array_equal(indices, ref_idx)
    assert art.stats["duplicate_edges_dropped"] > 0
    assert not list((tmp_path / "r" / ".tmp").glob("*scratch*"))  # the scratch buckets are gone
    # the statistics are streamed from the file (no O(N) array of degrees): the same as NumPy's over it all
    degrees = np.diff(ref_ptr)
    assert (art.stats["max_degree"], art.stats["isolated_nodes"]) == (int(degrees.max()), int((degrees == 0).sum()))
    assert art.stats["mean_degree"] == pytest.approx(float(degrees.mean()), rel=1e-12)
    # the source holds its labels narrow (int8 for 3 classes); the file keeps int64, with the same values
    source = ingest.open_source(cfg)
    assert source.labels.dtype == np.int8
    assert art.array("labels.npy").dtype == np.int64
    np.testing.assert_array_equal(art.array("labels.npy"), source.labels)
    assert art.stats["max_label"] == int(source.labels.max())


def _unrepeated_source(n: int = 2000, seed: int = 0) -> GraphSource:
    """A source that promises no repeated edge, its rows in a random order (placement must keep it per row)."""
    rng = np.random.default_rng(seed)
    pairs = np.unique(rng.integers(0, n, size=(40_000, 2)), axis=0)
    pairs = pairs[rng.permutation(len(pairs))]
    features = rng.normal(size=(n, 3)).astype(np.float32)
    labels = rng.integers(0, 3, n)
    ids = np.arange(n)
    return GraphSource(name="unrepeated", num_nodes=n, feature_dim=3, num_classes=3,
                       edge_chunks=array_edge_chunks(pairs[:, 0].copy(), pairs[:, 1].copy(), 3000),
                       feature_chunks=array_row_chunks(lambda a, b: features[a:b], n), labels=labels,
                       train_idx=ids[:200], val_idx=ids[200:400], test_idx=ids[400:800], deduplicated=True)


def test_a_source_without_repeats_keeps_its_input_order_out_of_core(tmp_path, monkeypatch):
    source = _unrepeated_source()
    monkeypatch.setattr(ingest, "open_source", lambda cfg: source)
    _, _, big = _ingest(tmp_path / "a", 1024)
    monkeypatch.setattr(ingest, "BUILD_EDGE_BYTES", 1 << 14)  # 64 edges a bucket: hundreds of buckets
    _, _, small = _ingest(tmp_path / "b", 1)
    pairs = np.concatenate([np.stack(c, 1) for c in source.edge_chunks()])
    order = np.argsort(pairs[:, 0], kind="stable")  # the reference: input order within each row
    np.testing.assert_array_equal(big.array("indices.npy"), pairs[order, 1])
    np.testing.assert_array_equal(small.array("indptr.npy"), big.array("indptr.npy"))
    np.testing.assert_array_equal(small.array("indices.npy"), big.array("indices.npy"))
    assert small.stats["duplicate_edges_dropped"] == 0
