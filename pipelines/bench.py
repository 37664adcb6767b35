"""``strata bench``: one graph, one process, three policies, the same samples and the same model.

Modes (each a policy of :data:`pipelines.policies.POLICIES`, trained on the same ``sample`` artifact):

``in_memory``
    every feature row in RAM (the upper bound);
``naive``
    every needed row read from the unpacked feature file with its own aligned direct read, each time it is
    needed (the PyG+ / DGL-OnDisk baseline: 4 KiB pages for rows of a few hundred bytes);
``strata``
    the configured policy (``policy``, default ``diskgnn``: caches chosen by the plan, each batch's remaining
    rows in one aligned chunk).

Also measured: the disk's sequential direct-read bandwidth on the feature file. All modes run in one process
on the same artifacts, so their ratios are meaningful even where absolute times are noisy. The pipeline is
resolved through the stage graph (:class:`pipelines.runner.StageRunner`), checks included.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.config import PipelineConfig
from pipelines.runner import StageRunner
from pipelines.settings import StrataPaths
from pipelines.stages.common import Progress, peak_rss_mb
from pipelines.stages.train import open_features
from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN
from storage_kernels.sampleset import SampleSet

__all__ = ["MODES", "measure_sequential_read", "run_bench", "write_report"]

#: Report mode -> policy (``None``: the configured policy).
MODES: dict[str, str | None] = {"in_memory": "in_memory", "naive": "naive", "strata": None}
_SEQ_READ_BLOCK = 8 << 20
_SEQ_READ_MAX = 1 << 30


def write_report(path: str | Path, report: dict[str, Any]) -> None:
    """Write a JSON report atomically (temp file, then rename), creating the folder."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, out)


def measure_sequential_read(path: Path, max_bytes: int = _SEQ_READ_MAX) -> dict[str, Any]:
    """Sequential aligned direct reads of ``path`` in 8 MiB requests; MB/s and whether O_DIRECT held."""
    size = min(path.stat().st_size, max_bytes) // DATA_ALIGN * DATA_ALIGN
    if size == 0:
        return {"seq_read_mb_s": 0.0, "bytes": 0, "direct_io": False}
    fd, direct = kernels.open_direct(path)
    try:
        block = min(_SEQ_READ_BLOCK, size)
        buf = kernels.aligned_empty(block)
        start = time.perf_counter()
        done = 0
        while done < size:
            n = min(block, size - done)
            n = n // DATA_ALIGN * DATA_ALIGN if direct else n
            if n == 0:
                break
            kernels.pread_ranges(fd, [done], [n], buf, [0], direct, num_threads=1)
            done += n
        elapsed = time.perf_counter() - start
    finally:
        kernels.close_fd(fd)
    return {"seq_read_mb_s": done / 1e6 / elapsed if elapsed > 0 else 0.0, "bytes": done, "direct_io": direct}


def _bytes_needed(samples: SampleSet, row_bytes: int) -> int:
    """Feature bytes one training epoch's batches need (every input row of every batch)."""
    return sum(int(np.diff(samples.node_range(b))[0]) * row_bytes for b in samples.batch_ids("train", 0))


def run_bench(cfg: PipelineConfig, paths: StrataPaths, out_path: str | Path | None = None,
              progress: Progress | None = None, modes: tuple[str, ...] = tuple(MODES)) -> dict[str, Any]:
    """Materialize the pipeline up to ``pack`` for each mode's policy and train once per mode; returns (and
    writes) the report."""
    import dataclasses

    from trainer.device import resolve_device
    from trainer.train import train

    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"'mode' expected one of {sorted(MODES)} (got {unknown})")
    store = paths.store()
    shared = StageRunner(cfg, store)
    shared.run_until("sample", progress=lambda stage: progress)
    graph, ordering, samples = shared.artifact("ingest"), shared.artifact("reorder"), shared.artifact("sample")
    sample_set = SampleSet(samples.path)
    labels = np.asarray(ordering.array("labels.npy"), dtype=np.int64)
    features_path = ordering.file("features.npy")
    row_bytes = int(np.load(features_path, mmap_mode="r").shape[1]) * 4
    device = resolve_device(cfg.train.device)
    tcfg = dataclasses.replace(cfg.train, device=device)
    report: dict[str, Any] = {
        "dataset": cfg.dataset,
        "graph": {k: graph.stats.get(k) for k in ("num_nodes", "num_edges", "feature_dim", "feature_bytes")},
        "config": {"fanouts": list(cfg.sample.fanouts), "batch_size": cfg.sample.batch_size,
                   "epochs": cfg.train.epochs, "cpu_cache_fraction": cfg.plan.cpu_cache_fraction,
                   "gpu_cache_fraction": cfg.plan.gpu_cache_fraction, "policy": cfg.policy, "device": device,
                   "cpu_count": os.cpu_count()},
        "disk": measure_sequential_read(Path(features_path)),
        "modes": {},
    }
    needed = _bytes_needed(sample_set, row_bytes)
    # Evaluation is not what is measured: it reads from RAM in every mode (same results either way).
    eval_source = open_features(cfg, "in_memory", ordering, None, sample_set, device)
    for i, mode in enumerate(modes):
        policy = MODES[mode] or cfg.policy
        runner = shared.derive(cfg.model_copy(update={"policy": policy}))  # ingest .. sample resolved once
        pack = runner.run_until("pack", progress=lambda stage: progress)[-1].artifact
        source = open_features(cfg, policy, ordering, pack, sample_set, device)
        try:
            result = train(tcfg, sample_set, source, labels, eval_source=eval_source)
        finally:
            source.close()
        steady = result.epoch_s[1:] if len(result.epoch_s) > 1 else result.epoch_s
        report["modes"][mode] = {
            "policy": policy,
            "epoch_s": float(np.mean(steady)),
            "epoch_s_all": [round(float(x), 4) for x in result.epoch_s],
            "bytes_read": int(result.bytes_read / len(result.epoch_s)),
            "bytes_needed": needed,
            "test_acc": float(result.test_acc),
            "val_acc": float(result.val_acc),
            "cache_hit_rate": float(result.cache_hit_rate),
            "direct_io": bool(source.direct_io),
            "timers": {k: round(float(v), 4) for k, v in result.timers.items()},
        }
        if progress:
            progress("bench: modes", i + 1, len(modes))
    eval_source.close()
    base = report["modes"].get("naive", {}).get("epoch_s")
    for entry in report["modes"].values():
        entry["speedup_vs_naive"] = base / entry["epoch_s"] if base and entry["epoch_s"] > 0 else None
    report["peak_rss_mb"] = round(peak_rss_mb(), 1)
    if out_path is not None:
        write_report(out_path, report)
    return report
