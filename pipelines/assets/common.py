"""What every Strata asset shares: the stage table, upstream resolution, progress and metadata.

Upstream resolution
-------------------
An asset finds its upstream artifacts by calling the upstream stages' ``run(...)`` again with the same
configuration. Artifacts are content-addressed (version = hash of stage, format version, parameters and
upstream versions), so for a stage that already ran this is a lookup that returns the existing artifact with
``reused=True``. Within one run the results are memoized (keyed by run id, data root and configuration), so
each stage function runs once per run and asset checks see exactly the artifact their asset materialized.

The upstream assets of a full run materialize before their dependants, so the lookup always hits. When a
job selects only some assets (``retrain_job``) and an upstream artifact does not exist yet for this
configuration, the lookup builds it; the asset then logs a warning, because that artifact was produced
outside its own asset (run ``strata_job`` to record it in Dagster).

Stage modules are imported inside :meth:`StageResolver.result`, so the definitions load even while a stage
is missing.
"""

from __future__ import annotations

import importlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dagster as dg

from pipelines.config import PipelineConfig
from pipelines.resources import RunReporter, StrataResource

if TYPE_CHECKING:
    from pipelines.settings import StrataPaths
    from pipelines.stages.common import StageResult
    from storage_kernels.store import Artifact, ArtifactStore

__all__ = [
    "GROUP_PREPROCESS",
    "GROUP_TRAINING",
    "STAGE_SPECS",
    "StageSpec",
    "StageResolver",
    "resolver_for",
    "run_stage_asset",
    "format_bytes",
    "markdown_table",
]

#: Asset groups: preprocessing (graph .. packed) and training (model, export).
GROUP_PREPROCESS = "preprocess"
GROUP_TRAINING = "training"

_PROGRESS_LOG_INTERVAL_S = 5.0
_MEMO_RUNS = 8  # runs whose resolved stages are kept (a process rarely runs more at once)


@dataclass(frozen=True)
class StageSpec:
    """One stage: its asset (and artifact stage) name, stage module, upstream keywords, extra arguments."""

    asset: str
    module: str
    upstream: tuple[str, ...]
    needs_paths: bool = False

    @property
    def function(self) -> str:
        return f"pipelines.stages.{self.module}.run"


#: The asset graph, in topological order (docs/CONTRACTS.md, "pipelines").
STAGE_SPECS: dict[str, StageSpec] = {
    spec.asset: spec
    for spec in (
        StageSpec("graph", "ingest", ()),
        StageSpec("ordering", "reorder", ("graph",)),
        StageSpec("partitioning", "partition", ("ordering",)),
        StageSpec("samples", "sample", ("ordering", "partitioning")),
        StageSpec("plan", "plan", ("ordering", "samples")),
        StageSpec("packed", "pack", ("ordering", "samples", "plan")),
        StageSpec("model", "train", ("ordering", "samples", "plan", "packed"), needs_paths=True),
        StageSpec("export", "export", ("model",), needs_paths=True),
    )
}

Progress = Callable[[str, int, int], None]

# run id -> {(root, config json, stage) -> StageResult}; only the most recent runs are kept.
_RUN_MEMO: OrderedDict[str, dict[tuple[str, str, str], StageResult]] = OrderedDict()


class StageResolver:
    """Resolves the artifacts of one run's stages by calling the stage functions (memoized per run)."""

    def __init__(
        self,
        cfg: PipelineConfig,
        paths: StrataPaths,
        memo: dict[tuple[str, str, str], StageResult],
        log: logging.Logger | dg.DagsterLogManager | None = None,
    ) -> None:
        self.cfg = cfg
        self.paths = paths
        self.store: ArtifactStore = paths.store()
        self._memo = memo
        self._config_key = json.dumps(cfg.to_dict(), sort_keys=True)
        self._log = log

    def _key(self, stage: str) -> tuple[str, str, str]:
        return (str(self.paths.root), self._config_key, stage)

    def result(self, stage: str, progress: Progress | None = None) -> StageResult:
        """Run (or look up) ``stage``: ``pipelines.stages.<module>.run(store, cfg, **upstream, progress)``."""
        key = self._key(stage)
        if key in self._memo:
            return self._memo[key]
        spec = STAGE_SPECS.get(stage)
        if spec is None:
            raise ValueError(f"'stage' expected one of {list(STAGE_SPECS)} (got {stage!r})")
        kwargs: dict[str, Any] = {name: self.artifact(name) for name in spec.upstream}
        if spec.needs_paths:
            kwargs["paths"] = self.paths
        module = importlib.import_module(f"pipelines.stages.{spec.module}")
        result: StageResult = module.run(self.store, self.cfg, progress=progress, **kwargs)
        self._memo[key] = result
        return result

    def artifact(self, stage: str) -> Artifact:
        """The artifact of an upstream ``stage`` for this configuration (see the module docstring)."""
        known = self._key(stage) in self._memo
        result = self.result(stage)
        if not known and not result.reused and self._log is not None:
            self._log.warning(
                f"upstream '{stage}' had no artifact for this configuration: built {result.version} outside "
                f"its asset (materialize '{stage}' to record it in Dagster)"
            )
        return result.artifact


def resolver_for(
    run_id: str, strata: StrataResource, log: logging.Logger | dg.DagsterLogManager | None = None
) -> StageResolver:
    """The resolver of run ``run_id``; assets and checks of one run share its memo."""
    memo = _RUN_MEMO.get(run_id)
    if memo is None:
        memo = _RUN_MEMO[run_id] = {}
        while len(_RUN_MEMO) > _MEMO_RUNS:
            _RUN_MEMO.popitem(last=False)
    else:
        _RUN_MEMO.move_to_end(run_id)
    return StageResolver(strata.pipeline_config(), strata.paths(), memo, log)


def _progress_callback(
    context: dg.AssetExecutionContext, reporter: RunReporter, stage: str
) -> Progress:
    """Forward stage progress to the reporter; log it to Dagster at most every few seconds."""
    last_log = [0.0]

    def progress(description: str, done: int, total: int) -> None:
        reporter.stage_progress(stage, description, done, total)
        now = time.monotonic()
        finished = total > 0 and done >= total
        if finished or now - last_log[0] >= _PROGRESS_LOG_INTERVAL_S:
            last_log[0] = now
            context.log.info(f"{description}: {done}/{total}" if total > 0 else f"{description}: {done}")

    return progress


def _metadata_value(value: Any) -> Any:
    """Stage metadata as Dagster metadata (scalars kept, everything else as JSON)."""
    if isinstance(value, (bool, int, float, str, dg.MetadataValue)) or value is None:
        return value
    if isinstance(value, Mapping):
        return dg.MetadataValue.json(dict(value))
    if isinstance(value, (list, tuple)):
        return dg.MetadataValue.json(list(value))
    return dg.MetadataValue.text(str(value))


def format_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def markdown_table(rows: list[Mapping[str, Any]] | Mapping[str, Any], columns: list[str] | None = None) -> str:
    """A Markdown table: a mapping gives ``key | value`` rows; a list of mappings one row each."""
    if isinstance(rows, Mapping):
        rows = [{"key": k, "value": v} for k, v in rows.items()]
        columns = ["key", "value"]
    columns = columns or (list(rows[0]) if rows else [])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def _numeric(values: Mapping[str, Any]) -> dict[str, float]:
    return {
        k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def _files_table(artifact: Artifact) -> str:
    rows = [
        {"file": name, "dtype": info.dtype or "raw", "shape": info.shape or "", "size": format_bytes(info.bytes)}
        for name, info in sorted(artifact.files.items())
    ]
    return markdown_table(rows, ["file", "dtype", "shape", "size"])


def run_stage_asset(
    context: dg.AssetExecutionContext,
    strata: StrataResource,
    reporter: RunReporter,
    stage: str,
    describe: Callable[[StageResult], Mapping[str, Any]] | None = None,
) -> dg.MaterializeResult:
    """Materialize one stage: run it, record its metrics in the catalog, return Dagster metadata.

    ``describe`` adds stage-specific metadata (Markdown tables, hit rates, ...). Exceptions from the stage
    propagate unchanged: Dagster records the failure and the run stops with the real message.
    """
    resolver = resolver_for(context.run.run_id, strata, context.log)
    reporter.stage_started(stage)
    start = time.perf_counter()
    try:
        result = resolver.result(stage, progress=_progress_callback(context, reporter, stage))
    except BaseException as e:
        reporter.stage_failed(stage, e)
        raise
    seconds = time.perf_counter() - start
    artifact = result.artifact
    if not result.reused:  # a reused artifact's metrics were recorded when it was built
        metrics = {**_numeric(artifact.stats), **{f"time_{k}": v for k, v in _numeric(artifact.timings).items()}}
        resolver.paths.catalog().record_metrics(artifact.dataset, stage, artifact.version, metrics)
    context.log.info(
        f"{stage} {artifact.version}: {'reused' if result.reused else 'built'} in {seconds:.2f} s ({artifact.path})"
    )

    total_bytes = int(result.metadata.get("bytes", 0))
    metadata: dict[str, Any] = {k: _metadata_value(v) for k, v in result.metadata.items() if k != "path"}
    metadata.update(
        {
            "dataset": artifact.dataset,
            "version": artifact.version,
            "reused": result.reused,
            "path": dg.MetadataValue.path(str(artifact.path)),
            "bytes": total_bytes,
            "size": format_bytes(total_bytes),
            "asset_seconds": round(seconds, 4),
            "stage_function": STAGE_SPECS[stage].function,
            "upstream": dg.MetadataValue.json(artifact.upstream),
            "files": dg.MetadataValue.md(_files_table(artifact)),
        }
    )
    if describe is not None:
        metadata.update({k: _metadata_value(v) for k, v in describe(result).items()})
    reporter.stage_finished(stage, artifact.version, result.reused, seconds)
    return dg.MaterializeResult(metadata=metadata, data_version=dg.DataVersion(artifact.version))
