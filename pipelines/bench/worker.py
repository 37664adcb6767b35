"""One measured run of ``strata bench`` in its own process: ``python -m pipelines.bench.worker JOB OUT``.

``strata bench`` starts one worker per (policy, repeat) so each run gets a fresh process -- and, under a
memory budget, a fresh memory cgroup the worker joins before it starts (:mod:`pipelines.core.confine`). ``JOB``
is a JSON file written by :mod:`pipelines.bench.policies`:

``{"root", "config" (a PipelineConfig dict), "policy", "phase": "prepare" | "train",
"max_train_batches" (0 = all), "max_eval_batches" (0 = all)}``

``prepare`` materialises the pipeline up to ``pack`` for the policy (checks included); ``stage`` one stage
(``"stage"``: its name) for ``strata bench --suite stages`` (:mod:`pipelines.bench.stages`). ``train`` resolves the
same artifacts, opens the policy's feature source and trains ``train.epochs`` epochs, evaluating once after
the last (so every earlier epoch's I/O is training I/O only). The result written to ``OUT`` holds the epoch
times, the source's counters (bytes read, read requests, rows per tier), the process's own I/O accounting
per epoch (``/proc/self/io`` ``read_bytes``: what the disk delivered, page-cache misses of a memory map
included; major page faults), accuracies and peak RSS.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

_T = TypeVar("_T")

__all__ = ["TruncatedSamples", "main", "os_io", "storage_read_bytes"]


def steady_epochs(per_epoch: Sequence[_T]) -> list[_T]:
    """The epochs a benchmark's times are taken over: all but the first (cold) one, or the only one."""
    return list(per_epoch[1:] if len(per_epoch) > 1 else per_epoch)


def storage_read_bytes(pid: int | str = "self") -> int:
    """Bytes process ``pid`` has read from storage (``/proc/PID/io`` ``read_bytes``; 0 where absent)."""
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            key, _, value = line.partition(":")
            if key == "read_bytes":
                return int(value)
    except OSError:
        pass
    return 0


def os_io() -> dict[str, int]:
    """This process's storage reads so far: ``read_bytes`` (:func:`storage_read_bytes`) and ``major_faults``
    (page faults that waited for the disk)."""
    return {"read_bytes": storage_read_bytes(),
            "major_faults": int(resource.getrusage(resource.RUSAGE_SELF).ru_majflt)}


class TruncatedSamples:
    """A sample set whose splits list at most ``max_train`` / ``max_eval`` batches (0 = all): a short
    calibration run over the same batches, with everything else delegated to ``samples``."""

    def __init__(self, samples: Any, max_train: int = 0, max_eval: int = 0) -> None:
        self._samples, self._max = samples, {"train": max_train, "val": max_eval, "test": max_eval}

    def batch_ids(self, split: str, epoch: int | None = None) -> list[int]:
        ids = self._samples.batch_ids(split, epoch)
        limit = self._max.get(split, 0)
        return ids[:limit] if limit else ids

    def __getattr__(self, name: str) -> Any:
        return getattr(self._samples, name)


def _prepare(job: dict[str, Any], cfg: Any, store: Any) -> dict[str, Any]:
    from pipelines.runner import StageRunner
    from pipelines.stages.common import peak_rss_mb

    stage_file = job.get("stage_file")

    def note_stage(stage: Any) -> None:  # which stage a kill at the cgroup limit interrupted
        if stage_file:
            Path(stage_file).write_text(stage.name)

    start = time.perf_counter()
    results = StageRunner(cfg, store).run_until("pack", progress=note_stage)
    return {"wall_s": time.perf_counter() - start, "peak_rss_mb": peak_rss_mb(),
            "built": [r.artifact.stage for r in results if not r.reused]}


def _io_counters() -> dict[str, int]:
    counters: dict[str, int] = {}
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            key, _, value = line.partition(":")
            counters[key] = int(value)
    except OSError:
        pass
    return counters


def _stage(job: dict[str, Any], cfg: Any, store: Any) -> dict[str, Any]:
    """Materialise ``job["stage"]`` (its upstream artifacts reused, built first if missing): the stage's own
    time, its artifact's size, and the process's storage reads and writes."""
    from pipelines.runner import StageRunner
    from pipelines.stages.common import peak_rss_mb

    start, io0 = time.perf_counter(), _io_counters()
    results = StageRunner(cfg, store).run_until(job["stage"])
    io1 = _io_counters()
    own = results[-1]
    return {"wall_s": time.perf_counter() - start, "peak_rss_mb": peak_rss_mb(), "reused": own.reused,
            "version": own.artifact.version, "stage_s": float(own.artifact.timings.get("total_s", 0.0)),
            "artifact_bytes": sum(int(f.get("bytes", 0)) for f in own.artifact.manifest.get("files", [])),
            "built": [r.artifact.stage for r in results if not r.reused],
            "graph": dict(own.artifact.stats) if own.artifact.stage == "ingest" else None,
            "read_bytes": io1.get("read_bytes", 0) - io0.get("read_bytes", 0),
            "write_bytes": io1.get("write_bytes", 0) - io0.get("write_bytes", 0)}


def _train(job: dict[str, Any], cfg: Any, store: Any) -> dict[str, Any]:
    import dataclasses

    from pipelines.core.graphio import narrow_labels
    from pipelines.methods.policies.auto import resolved
    from pipelines.runner import StageRunner
    from pipelines.stages.common import peak_rss_mb
    from pipelines.stages.train import full_graph, open_features
    from storage_kernels.sampleset import SampleSet
    from trainer.device import resolve_device
    from trainer.train import sum_epoch_timers, train

    # Built, checked and verified by the prepare phase: only looked up here. Verifying again would read every
    # artifact inside the measured, memory-confined worker and warm the page cache the policies are compared on.
    cfg = cfg.model_copy(update={"verify": cfg.verify.model_copy(update={"on_reuse": "off"})})
    runner = StageRunner(cfg, store)
    runner.run_until("pack", checks=False)
    ordering, pack = runner.artifact("reorder"), runner.artifact("pack")
    cfg = resolved(cfg, runner.artifact("plan").stats)  # policy=auto: the policy, settings and threads it chose
    samples: Any = SampleSet(runner.artifact("sample").path)
    if job.get("max_train_batches") or job.get("max_eval_batches"):
        samples = TruncatedSamples(samples, int(job.get("max_train_batches", 0)), int(job.get("max_eval_batches", 0)))
    labels = narrow_labels(ordering.array("labels.npy"))  # in RAM: a map of the file faults per seed
    device = resolve_device(cfg.train.device)
    # evaluate once, after the last epoch (no early stopping): every earlier epoch's I/O is training I/O
    tcfg = dataclasses.replace(cfg.train, device=device, eval_every=cfg.train.epochs, patience=0)
    io_marks = [os_io()]

    def on_epoch(epoch: int, metrics: dict[str, float]) -> None:
        io_marks.append(os_io())

    source = open_features(cfg, cfg.policy, ordering, pack, samples, device)
    try:
        layerwise = full_graph(cfg, ordering, labels, store.tmp_dir)  # train.eval_mode=layerwise: evaluate on it
        result = train(tcfg, samples, source, labels, progress=on_epoch, layerwise=layerwise)
        counters = {"rows_by_tier": dict(source.rows_by_tier), "direct_io": bool(source.direct_io),
                    "fallback_reason": source.fallback_reason}
    finally:
        source.close()
    epochs = len(result.epoch_s)
    return {
        "epoch_s": [float(x) for x in result.epoch_s],
        "bytes_read": int(result.bytes_read),  # the source's count, training batches only
        "read_requests": int(result.read_requests),
        "os_read_bytes": [b["read_bytes"] - a["read_bytes"] for a, b in zip(io_marks, io_marks[1:], strict=False)],
        "major_faults": [b["major_faults"] - a["major_faults"] for a, b in zip(io_marks, io_marks[1:], strict=False)],
        "epochs": epochs,
        "eval_batches_run": len(samples.batch_ids("val")) + len(samples.batch_ids("test")),
        "eval_s": float(result.timers.get("eval_s", 0.0)),
        "test_acc": float(result.test_acc),
        "val_acc": float(result.val_acc),
        "losses": [float(x) for x in result.losses],
        "hit_rate_measured": float(result.cache_hit_rate),
        "train_rows_by_tier": {k: int(v) for k, v in result.rows_by_tier.items()},  # training batches only
        "timers": {k: float(v) for k, v in result.timers.items()},  # every epoch, the first (cold) one included
        # the epochs epoch_s's median is taken over, so ratios to it hold
        "steady_timers": sum_epoch_timers(steady_epochs(result.epoch_timers)),
        "peak_rss_mb": peak_rss_mb(),
        **counters,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the job in ``argv[0]``, write its result (or its error) as JSON to ``argv[1]``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m pipelines.bench.worker JOB.json OUT.json", file=sys.stderr)
        return 2
    job = json.loads(Path(args[0]).read_text())
    from pipelines.config import PipelineConfig
    from pipelines.core.paths import StrataPaths

    cfg = PipelineConfig.model_validate({**job["config"], "policy": job["policy"]})
    store = StrataPaths.at(job["root"]).store()
    phase = {"prepare": _prepare, "train": _train, "stage": _stage}.get(job["phase"])
    if phase is None:
        raise ValueError(f"'phase' expected prepare, train or stage (got {job['phase']!r})")
    out = phase(job, cfg, store)
    tmp = Path(args[1] + ".tmp")
    tmp.write_text(json.dumps(out))
    tmp.replace(args[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
