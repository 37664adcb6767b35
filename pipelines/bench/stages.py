"""``strata bench --suite stages``: every stage of the pipeline in its own process and memory cgroup, with the
time, memory and disk each one takes.

Each stage, ingest to export, runs in a fresh worker (:mod:`pipelines.bench.worker`, phase ``stage``) after
the dataset's artifacts were evicted from the page cache, so it reads its inputs from disk. Under a memory
budget every worker joins a fresh memory cgroup of ``memory_budget + memory_overhead`` bytes, page cache
counted (:mod:`pipelines.core.confine`): a stage that needs more is OOM-killed and the report says which.
The configuration's ``memory_budget`` is set to the budget, so the streaming stages size their buffers from
it (:mod:`pipelines.budget`); the overhead is the interpreter and libraries.

Per stage: ``stage_s`` (the stage's own build time; 0 when its artifact already existed and was reused),
``wall_s`` (the worker, checks of its upstream artifacts included), ``peak_cgroup_mb`` (page cache included:
under a limit it fills up to the limit), ``peak_anon_mb`` (the process's own memory, sampled), ``oom_kills``,
``artifact_bytes``, ``write_bytes`` / ``read_bytes`` (the process's storage I/O, ``/proc/self/io``) and
``disk_high_water_bytes`` (the most the data root's filesystem held above its level at the start of the
stage: scratch files included). ``disk`` totals every stage's artifact against the feature file.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipelines.bench.policies import BenchError, Workers, write_report
from pipelines.config import PipelineConfig
from pipelines.core.confine import MemoryCgroup, cgroup_support
from pipelines.core.paths import StrataPaths
from pipelines.core.progress import Progress
from pipelines.graph import STAGE_NAMES

__all__ = ["DEFAULT_STAGE_OVERHEAD", "run_stage_bench"]

#: Memory beyond the budget a stage's worker may hold: the interpreter, NumPy, torch, Dagster-free stage code.
DEFAULT_STAGE_OVERHEAD = 768 << 20
_MB = 1 << 20


class _DiskHighWater:
    """The most a filesystem's used bytes rose above where they were at :meth:`reset` (polled)."""

    def __init__(self, path: Path) -> None:
        self.path, self.base, self.peak = path, 0, 0

    def reset(self) -> None:
        self.base = shutil.disk_usage(self.path).used
        self.peak = 0

    def __call__(self) -> None:
        self.peak = max(self.peak, shutil.disk_usage(self.path).used - self.base)


def run_stage_bench(cfg: PipelineConfig, paths: StrataPaths, out_path: str | Path | None = None,
                    progress: Progress | None = None, memory_budget: int | None = None,
                    memory_overhead: int | None = None, stages: Sequence[str] = STAGE_NAMES) -> dict[str, Any]:
    """Run ``stages`` (in pipeline order) one worker each; returns (and writes to ``out_path``) the report."""
    unknown = [s for s in stages if s not in STAGE_NAMES]
    if unknown or not stages:
        raise ValueError(f"'--stages' expected names among {', '.join(STAGE_NAMES)} (got {', '.join(stages)})")
    stages = [s for s in STAGE_NAMES if s in stages]
    if "ingest" not in stages:
        stages = ["ingest", *stages]  # the graph's sizes come from it (reused: no time)
    if memory_budget is not None:
        cfg = PipelineConfig.validated({**cfg.to_dict(), "memory_budget": memory_budget})
    overhead = DEFAULT_STAGE_OVERHEAD if memory_overhead is None else memory_overhead
    support = cgroup_support() if memory_budget is not None else None
    if memory_budget is not None and not support.available:
        raise BenchError(f"--memory-budget needs a memory cgroup, and none can be made here: {support.reason}")
    if support is not None:
        MemoryCgroup.remove_stale(support)
    store = paths.store()
    store.root.mkdir(parents=True, exist_ok=True)
    disk = _DiskHighWater(store.root)
    limit = memory_budget + overhead if memory_budget is not None else None
    workers = Workers(store.root, support, [store.root], poll=disk)
    report: dict[str, Any] = {
        "dataset": cfg.dataset, "policy": cfg.policy, "memory_budget": memory_budget,
        "cgroup_limit": limit, "confinement": support.label if support is not None else "none (no --memory-budget)",
        "stages": {}}
    for i, name in enumerate(stages):
        disk.reset()
        start = time.perf_counter()
        row = workers.run(cfg.policy, "stage", cfg, limit=limit, stage=name)
        row["elapsed_s"] = time.perf_counter() - start
        row["disk_high_water_bytes"] = disk.peak
        row["oom_kills"] = 1 if row.get("oom_killed") else 0
        report["stages"][name] = row
        report["graph"], report["disk"] = _graph_and_disk(report["stages"])
        if out_path is not None:  # after every stage: a long run's finished stages survive an interruption
            write_report(out_path, report)
        if progress:
            progress("bench: stages", i + 1, len(stages))
        if row.get("error"):
            break
    return report


def _graph_and_disk(rows: dict[str, dict[str, Any]]) -> tuple[dict, dict]:
    """The graph's sizes (the ingest worker's statistics) and every finished stage's artifact bytes."""
    stats = rows.get("ingest", {}).get("graph") or {}
    sizes = {name: int(row["artifact_bytes"]) for name, row in rows.items() if "artifact_bytes" in row}
    feature_bytes = int(stats.get("feature_bytes", 0))
    total = sum(sizes.values())
    keys = ("num_nodes", "num_edges", "feature_dim", "feature_dtype", "feature_bytes", "train_nodes")
    return ({k: stats.get(k) for k in keys},
            {"artifact_bytes": sizes, "total_bytes": total, "feature_bytes": feature_bytes,
             "total_over_features": total / feature_bytes if feature_bytes else None})
