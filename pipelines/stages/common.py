"""What every stage shares: content-addressed reuse, timing, peak memory, and the result type."""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipelines.config import PipelineConfig, artifact_params
from storage_kernels.integrity import find_verified
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["StageResult", "materialize", "peak_rss_mb", "reset_peak_rss", "stage_peak_rss_mb", "stage_version"]


@dataclass
class StageResult:
    """A stage's artifact, whether it was reused, and metadata for Dagster and the CLI summary."""

    artifact: Artifact
    reused: bool
    metadata: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # lines worth a log entry (the Dagster asset logs them)

    @property
    def version(self) -> str:
        return self.artifact.version


#: The highest peak RSS (MiB) this process reached before :func:`reset_peak_rss` last started a new one.
_earlier_peak_mb = 0.0


def _hwm_mb() -> float:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB.

    On Linux this is ``VmHWM`` from ``/proc/self/status`` (``ru_maxrss`` is inherited across fork and exec,
    so a worker started by a large parent would report at least the parent's peak), and the peaks before
    each :func:`reset_peak_rss`.
    """
    return max(_hwm_mb(), _earlier_peak_mb)


def stage_peak_rss_mb() -> float:
    """Peak resident set size since the current stage's build began (:func:`reset_peak_rss`), in MiB: what a
    stage records as ``peak_rss_mb``. The process's peak where the kernel cannot reset it."""
    return _hwm_mb()


def reset_peak_rss() -> bool:
    """Start a new peak for :func:`stage_peak_rss_mb`: Linux resets ``VmHWM`` to the current RSS on writing
    ``5`` to ``/proc/self/clear_refs``, so each stage of one process records its own peak, not the run's so far
    (:func:`peak_rss_mb` still answers the process's). False where that is not possible."""
    global _earlier_peak_mb
    before = _hwm_mb()
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    _earlier_peak_mb = max(_earlier_peak_mb, before)
    return True


def stage_version(store: ArtifactStore, cfg: PipelineConfig, stage: str, format_version: int,
                  upstream: Mapping[str, Artifact], *, also: Iterable[str] = (),
                  derived: Mapping[str, Any] | None = None) -> str:
    """The version :func:`materialize` gives ``stage``'s artifact for these inputs (nothing is built)."""
    params = {**artifact_params(cfg, stage, also), **(derived or {})}
    return store.version_for(stage, format_version, params, {name: art.version for name, art in upstream.items()})


def materialize(
    store: ArtifactStore,
    cfg: PipelineConfig,
    stage: str,
    format_version: int,
    upstream: Mapping[str, Artifact],
    build: Callable[[ArtifactBuilder], None],
    *,
    also: Iterable[str] = (),
    derived: Mapping[str, Any] | None = None,
) -> StageResult:
    """Return ``stage``'s artifact for these inputs, building and publishing it only if it does not exist yet.

    The version hashes the stage name, its format version, the upstream versions and its parameters: the
    settings of ``cfg`` that change this artifact (:func:`pipelines.config.artifact_params`, from the fields'
    declarations; ``also`` names other sections it reads) plus ``derived`` values the stage computes from
    its inputs (a resolved device, a source's file fingerprints). ``build`` fills the builder (files,
    ``stats``); timing and peak RSS (the build's own: :func:`reset_peak_rss`) are recorded here.
    """
    params = {**artifact_params(cfg, stage, also), **(derived or {})}
    upstream_versions = {name: art.version for name, art in upstream.items()}
    dataset = cfg.dataset_name
    version = store.version_for(stage, format_version, params, upstream_versions)
    # Verified before anything reads it: a corrupted artifact is quarantined and ArtifactCorrupted raised.
    existing = find_verified(store, dataset, stage, version, cfg.verify.on_reuse)
    if existing is not None:
        if store.catalog is not None:  # a run killed right after publishing it left the catalog without it
            store.catalog.ensure_artifact(existing.manifest, existing.path)
        return StageResult(existing, reused=True, metadata=_metadata(existing))
    start = time.perf_counter()
    reset_peak_rss()
    with store.builder(dataset, stage, version, params, upstream_versions, format_version=format_version) as builder:
        build(builder)
        builder.timings["total_s"] = round(time.perf_counter() - start, 4)
        builder.stats.setdefault("peak_rss_mb", round(stage_peak_rss_mb(), 1))
        artifact = builder.publish()
    return StageResult(artifact, reused=False, metadata=_metadata(artifact))


def _metadata(artifact: Artifact) -> dict[str, Any]:
    manifest = artifact.manifest
    meta: dict[str, Any] = {
        "version": artifact.version,
        "path": str(artifact.path),
        "bytes": sum(int(f.get("bytes", 0)) for f in manifest.get("files", [])),
    }
    meta.update({k: v for k, v in manifest.get("stats", {}).items() if isinstance(v, (int, float, str, bool))})
    meta.update({f"time_{k}": v for k, v in manifest.get("timings", {}).items()})
    return meta
