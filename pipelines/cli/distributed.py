"""``strata run`` / ``strata train`` under torchrun: the ``train`` stage data parallel over the ranks.

``torchrun --nproc_per_node=N -m pipelines.cli train --dataset tiny`` starts N copies of the CLI; each finds
``RANK`` / ``WORLD_SIZE`` in its environment and comes here instead of Dagster:

1. rank 0 resolves the stages up to ``pack`` (reused or built, with their blocking checks) through a
   :class:`~pipelines.runner.StageRunner`; the other ranks wait, then look the same artifacts up;
2. rank 0 says whether the ``train`` artifact for this world size exists; if not, every rank trains
   (``trainer.distributed``: DDP, a disjoint share of the batches each) and rank 0 alone writes the artifact,
   the MLflow run and the catalog record;
3. rank 0 runs ``train``'s checks and, for ``run``, ``export``.

The run does not go through Dagster (it does not show in ``strata ui``); the artifacts are the same
content-addressed ones, with the world size in the ``train`` version.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pipelines.config import PipelineConfig

if TYPE_CHECKING:
    from pipelines.core.paths import StrataPaths
    from pipelines.stages.common import StageResult

__all__ = ["launched_by_torchrun", "run_distributed"]

_TRAIN = "train"


def launched_by_torchrun() -> bool:
    """Whether this process is one rank of a torchrun job (``RANK`` and ``WORLD_SIZE`` in the environment)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _agree(value: Any) -> Any:
    """Rank 0's ``value`` on every rank."""
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _raise_if_failed(error: str | None, what: str) -> None:
    if error is not None:
        raise RuntimeError(f"'{what}' expected to succeed on rank 0 (got {error})")


def run_distributed(cfg: PipelineConfig, paths: StrataPaths, until: str | None) -> dict[str, Any] | None:
    """Resolve the stages up to ``until`` (``train`` or later) with ``train`` data parallel over the torchrun
    ranks. Returns rank 0's summary (stage results and the train/export stats); None on the other ranks."""
    from pipelines.graph import RUN_STAGE_NAMES, STAGE_NAMES, get_stage
    from pipelines.graph import until as stages_until
    from pipelines.runner import StageRunner
    from pipelines.stages import train as train_stage
    from storage_kernels.store import ArtifactStore
    from trainer.device import resolve_device
    from trainer.distributed import DistributedRun

    last = until or RUN_STAGE_NAMES[-1]
    if STAGE_NAMES.index(last) < STAGE_NAMES.index(_TRAIN):
        raise ValueError(f"'--until' expected train or a later stage under torchrun (got {last!r}; run the "
                         "stages before train without torchrun)")
    ddp = DistributedRun.start(True, resolve_device(cfg.train.device))
    assert ddp is not None
    try:
        # the catalog (DuckDB, one writer) is rank 0's alone
        runner = StageRunner(cfg, ArtifactStore(paths.root, catalog=ddp.is_main))
        upstream_names = get_stage(_TRAIN).upstream
        error, failure = None, None
        if ddp.is_main:
            try:
                runner.run_until(upstream_names[-1])
            except Exception as e:  # every rank must learn of it, or the others wait forever
                error, failure = f"{type(e).__name__}: {e}", e
        agreed = _agree(error)
        if failure is not None:
            raise failure  # rank 0 reports its own error: its line and exit code (pipelines.cli.errors)
        _raise_if_failed(agreed, f"stages up to {upstream_names[-1]}")
        upstream = {u: runner.artifact(u) for u in upstream_names}  # rank 0's results, or lookups
        version = train_stage.version(runner.store, cfg, upstream)
        exists = _agree(runner.store.find(cfg.dataset_name, _TRAIN, version) is not None if ddp.is_main else None)
        results: list[StageResult] = []
        if ddp.is_main:
            results = runner.run_until(last)  # trains with the other ranks unless the artifact exists
        elif not exists:
            train_stage.train_rank(cfg, reorder=upstream["reorder"], sample=upstream["sample"],
                                   pack=upstream["pack"])
        if not ddp.is_main:
            return None
        return _summary(cfg, paths, dict(zip((s.name for s in stages_until(last)), results, strict=True)),
                        ddp.world_size)
    finally:
        ddp.close()


def _summary(cfg: PipelineConfig, paths: StrataPaths, by_stage: dict[str, StageResult], world_size: int
             ) -> dict[str, Any]:
    """The same keys as the Dagster run's summary (``dagster_run_id`` None), plus ``world_size``."""
    from pipelines.cli.summary import run_summary
    from pipelines.stages.train import HEADLINE_METRICS

    artifacts = [{"stage": stage, "version": r.version, "reused": r.reused, "bytes": r.metadata.get("bytes"),
                  "seconds": r.artifact.timings.get("total_s"), "path": str(r.artifact.path)}
                 for stage, r in by_stage.items()]
    model = by_stage[_TRAIN].artifact.stats
    export = by_stage["export"].artifact.stats if "export" in by_stage else {}
    metrics = {k: model.get(k) for k in HEADLINE_METRICS}
    return {**run_summary(cfg, paths, artifacts, metrics, model, export), "dagster_run_id": None,
            "world_size": world_size}
