"""Out of core gives the in-memory answer: every stage built with tiny memory settings (the CSR built through
scratch buckets, the external permutation in many buckets, packing in small partitions, layer-wise prediction
in many intervals, the sampled CSR rows read ahead) writes the same files as with the defaults, and predicts
the same classes."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.methods.samplers import prefetch
from pipelines.runner import StageRunner
from pipelines.stages import ingest, reorder
from storage_kernels import kernels

DATASET = "synthetic:nodes=6000,degree=16,dim=9,classes=4,seed=2,locality=0.5,window=16"
BASE = ["policy=diskgnn", "ingest.feature_dtype=float16", "sample.epochs=1", "sample.batch_size=256",
        "sample.fanouts=[5,5]", "train.epochs=1", "train.device=cpu", "plan.cpu_cache_fraction=0.1",
        "pack.disk_budget=null"]
TINY = ["ingest.memory_mb=1", "ingest.chunk_edges=3000", "reorder.memory_mb=1", "reorder.chunk_rows=100",
        "pack.memory_mb=1", "predict.memory_mb=1", "predict.chunk_nodes=64", "train.layerwise_memory_mb=1"]
BYTE_IDENTICAL = ("ingest", "reorder", "partition", "sample", "plan", "pack")


def _files(artifact) -> dict[str, str]:
    return {f["name"]: f["checksum"] for f in artifact.manifest["files"]}


def test_tiny_memory_settings_write_the_same_artifacts(tmp_path, monkeypatch):
    big = StageRunner(PipelineConfig.load(overrides=BASE, dataset=DATASET), StrataPaths.at(tmp_path / "a").store())
    big.run_until("predict")
    monkeypatch.setattr(ingest, "BUILD_EDGE_BYTES", 1 << 14)  # 64 edges a bucket
    monkeypatch.setattr(reorder, "_bucket_sizes", lambda memory_mb, row_bytes: (500, 2000))
    monkeypatch.setattr(prefetch, "csr_outgrows_memory", lambda graph, budget: True)  # rows read ahead
    advised = []
    real_prefetch = kernels.prefetch_rows
    monkeypatch.setattr(kernels, "prefetch_rows", lambda *a: advised.append(real_prefetch(*a)) or advised[-1])
    small = StageRunner(PipelineConfig.load(overrides=BASE + TINY, dataset=DATASET),
                        StrataPaths.at(tmp_path / "b").store())
    small.run_until("predict")
    assert len(advised) >= 4 and all(a > 0 for a in advised)  # two hops a batch
    stats = small.artifact("reorder").stats
    assert stats["csr_buckets"] > 10 and stats["feature_buckets"] > 10
    for stage in BYTE_IDENTICAL:
        a, b = big.artifact(stage), small.artifact(stage)
        assert a.version == b.version, stage  # memory settings are not artifact parameters
        assert _files(a) == _files(b), stage
    pa = pq.read_table(big.artifact("predict").file("predictions.parquet")).to_pandas()
    pb = pq.read_table(small.artifact("predict").file("predictions.parquet")).to_pandas()
    np.testing.assert_array_equal(pa["node_id"], pb["node_id"])
    np.testing.assert_allclose(np.stack(pa["embedding"]), np.stack(pb["embedding"]), atol=1e-5)
    agree = float(np.mean(pa["predicted_class"].to_numpy() == pb["predicted_class"].to_numpy()))
    assert agree > 0.999  # a tie broken differently by float rounding at most
