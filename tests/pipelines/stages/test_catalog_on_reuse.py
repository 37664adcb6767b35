"""A run killed right after publishing an artifact (before the catalog records it, or before its metrics) leaves
it on disk but not in the catalog; the next run reuses it and indexes it, metrics included (found by the kill
campaign: a kill in export between the rename and the catalog write)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipelines.config import PipelineConfig
from pipelines.stages.common import materialize
from storage_kernels.store import ArtifactBuilder, ArtifactStore


def _build(calls: list[int]):
    def build(b: ArtifactBuilder) -> None:
        calls.append(1)
        b.save_array("x.npy", np.arange(10, dtype=np.int64))
        b.stats["rows"] = 10
    return build


def _metric_keys(store: ArtifactStore, version: str) -> set[str]:
    assert store.catalog is not None
    row = store.catalog.get(version, dataset="tiny", stage="ingest")
    assert row is not None, "the artifact is not in the catalog"
    return {m["key"] for m in row["metrics"]}


def test_reuse_indexes_an_artifact_the_catalog_missed(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    assert store.catalog is not None
    cfg = PipelineConfig.load(dataset="tiny")
    calls: list[int] = []
    built = materialize(store, cfg, "ingest", 1, {}, _build(calls)).artifact
    # killed between the rename and the catalog write: published, absent from the catalog
    store.catalog.forget_artifact("tiny", "ingest", built.version)
    assert store.catalog.get(built.version, dataset="tiny", stage="ingest") is None

    again = materialize(store, cfg, "ingest", 1, {}, _build(calls))
    assert again.reused and again.artifact.version == built.version and calls == [1]
    assert {"rows", "time_total_s"} <= _metric_keys(store, built.version)
    assert store.catalog.ensure_artifact(built.manifest, built.path) is False  # complete now: a no-op


def test_reuse_restores_metrics_of_a_catalogued_artifact_without_them(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    assert store.catalog is not None
    cfg = PipelineConfig.load(dataset="tiny")
    calls: list[int] = []
    built = materialize(store, cfg, "ingest", 1, {}, _build(calls)).artifact
    # killed between the catalog write (in publish) and the metrics write (after the stage returned)
    assert _metric_keys(store, built.version) == set()
    materialize(store, cfg, "ingest", 1, {}, _build(calls))
    assert calls == [1] and {"rows", "time_total_s"} <= _metric_keys(store, built.version)
