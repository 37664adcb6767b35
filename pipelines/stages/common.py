"""What every stage shares: content-addressed reuse, timing, peak memory, the result type, and
:func:`reuse_only` (resolve artifacts that exist, build nothing)."""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from pipelines.config import PipelineConfig, artifact_params
from storage_kernels.integrity import find_verified
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["ArtifactMissing", "StageResult", "materialize", "peak_rss_mb", "reset_peak_rss", "reuse_only",
           "stage_peak_rss_mb", "stage_version"]


class ArtifactMissing(LookupError):
    """Under :func:`reuse_only`, a stage whose artifact for this configuration does not exist (nothing built)."""

    def __init__(self, dataset: str, stage: str, version: str) -> None:
        super().__init__(f"'{stage}' artifact of {dataset} expected for this configuration (got none: version "
                         f"{version} was never built)")
        self.dataset, self.stage, self.version = dataset, stage, version


_REUSE_ONLY: ContextVar[bool] = ContextVar("strata_reuse_only", default=False)


@contextlib.contextmanager
def reuse_only() -> Iterator[None]:
    """Within the block, :func:`materialize` returns existing artifacts and raises :class:`ArtifactMissing`
    instead of building one: "the versions a run would reuse", resolved through the stage functions themselves
    (``strata predict`` asks for the trained model this way, and builds nothing upstream)."""
    token = _REUSE_ONLY.set(True)
    try:
        yield
    finally:
        _REUSE_ONLY.reset(token)


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
    if _REUSE_ONLY.get():
        raise ArtifactMissing(dataset, stage, version)
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
