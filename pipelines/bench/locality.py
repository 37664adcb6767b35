"""``strata bench --suite locality``: every reorder strategy and partition method on one graph.

The graph is ingested once. Each strategy and method then runs in its own subprocess (``python -m
pipelines.bench.locality worker ...``), so its peak RSS is its own and a method that cannot run at this size
(METIS past its memory budget, say) is reported with ``"error"`` instead of stopping the suite. Measured:

- reorder: time, peak RSS, feature-file pages touched per sampled mini-batch, average edge gap |u - v|;
- partition: time, peak RSS, edge-cut fraction and balance (largest part / mean part);
- redundancy: OUTRE's ratio (sampled input nodes per training seed) for random vs partition-based batches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.core.progress import Progress
from pipelines.methods.orders import REORDER_STRATEGIES as _ORDERS
from pipelines.methods.partitioners import PARTITIONERS
from pipelines.runner import StageRunner
from pipelines.stages.common import peak_rss_mb

__all__ = ["REORDER_STRATEGIES", "PARTITION_METHODS", "PARTITION_VARIANTS", "add_ratios", "run_locality_bench",
           "redundancy_ratio"]

#: Every registered order, ``random`` (the baseline of ``pages_vs_random``) first.
REORDER_STRATEGIES = ("random", *(n for n in _ORDERS.names() if n != "random"))
#: Every registered partitioner.
PARTITION_METHODS = PARTITIONERS.names()
# Ablation rows (``--methods``): the multilevel methods without the scheme (partition.multilevel=false).
PARTITION_VARIANTS = (*PARTITION_METHODS, *(f"{n}-single" for n, p in PARTITIONERS.items() if p.multilevel))
RR_TRAIN_PER_PART = 128


def redundancy_ratio(graph: Any, batches: list[np.ndarray], fanouts: list[int], seed: int) -> float:
    """OUTRE's RR: total sampled neighbourhood size over total training seeds, for the given batches."""
    from storage_kernels import kernels

    fan = np.asarray(fanouts, dtype=np.int64)
    sampled = seeds = 0
    for i, batch in enumerate(batches):
        nodes = kernels.sample_blocks(graph.indptr, graph.indices, np.asarray(batch, dtype=np.int64), fan,
                                      seed + i).nodes
        sampled += len(nodes)
        seeds += len(batch)
    return sampled / max(seeds, 1)


def _reset_peak_rss() -> float | None:
    """Reset the kernel's peak-RSS mark (Linux ``clear_refs``); returns the current RSS in MiB, or None."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _proc_status_mb("VmRSS")
    except OSError:
        return None


def _proc_status_mb(key: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _memory(baseline_mb: float | None) -> dict[str, float]:
    """Process peak RSS, plus the stage's own peak above the resident baseline when measurable."""
    out = {"peak_rss_mb": round(peak_rss_mb(), 1)}
    stage_peak = _proc_status_mb("VmHWM") if baseline_mb is not None else None
    if stage_peak is not None and baseline_mb is not None:
        out["stage_peak_rss_mb"] = round(stage_peak, 1)
        out["stage_extra_rss_mb"] = round(max(stage_peak - baseline_mb, 0.0), 1)
    return out


def _worker(kind: str, name: str, cfg_json: str, root: str) -> dict[str, Any]:
    """Run one strategy/method in this (fresh) process and return its measurements.

    A partition worker partitions the ordering named by ``cfg.reorder.strategy`` (the suite's
    ``partition_order``): every method sees the same input, and streaming methods stream it in that order."""
    from pipelines.core.graphio import load_graph
    from pipelines.methods.orders.locality import average_edge_gap, pages_per_batch

    cfg = PipelineConfig.model_validate(json.loads(cfg_json))
    store = StrataPaths.at(root).store()
    start = time.perf_counter()
    if kind == "reorder":
        cfg = cfg.model_copy(update={"reorder": cfg.reorder.model_copy(update={"strategy": name})})
        runner = StageRunner(cfg, store)
        runner.artifact("ingest")
        baseline = _reset_peak_rss()
        art = runner.artifact("reorder")
        memory = _memory(baseline)
        arrays = load_graph(art)
        return {
            "time_s": round(art.stats.get("time_s", time.perf_counter() - start), 3),
            **memory,
            "pages_per_batch": float(art.stats.get("pages_per_batch", pages_per_batch(arrays))),
            "avg_edge_gap": float(art.stats.get("avg_edge_gap", average_edge_gap(arrays))),
        }
    method, _, variant = name.partition("-")
    cfg = cfg.model_copy(update={"partition": cfg.partition.model_copy(
        update={"method": method, "multilevel": cfg.partition.multilevel and variant != "single"})})
    runner = StageRunner(cfg, store)
    runner.artifact("reorder")
    start = time.perf_counter()
    baseline = _reset_peak_rss()
    art = runner.artifact("partition")
    row = {
        "time_s": round(art.stats.get("time_s", time.perf_counter() - start), 3),
        **_memory(baseline),
        "edge_cut": float(art.stats["edge_cut"]),
        "balance": float(art.stats["balance"]),
    }
    for key in ("multilevel", "ml_levels", "ml_coarse_nodes", "ml_initial_cut"):
        if key in art.stats:
            row[key] = art.stats[key]
    return row


def _run_isolated(kind: str, name: str, cfg: PipelineConfig, root: Path, timeout_s: float) -> dict[str, Any]:
    """Run ``_worker`` in a fresh interpreter; a failure or timeout becomes ``{"error": ...}``."""
    cmd = [sys.executable, "-m", "pipelines.bench.locality", "worker", kind, name, cfg.model_dump_json(), str(root)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": tail[:500]}
    return json.loads(lines[-1])


def run_locality_bench(cfg: PipelineConfig, paths: StrataPaths, out_path: str | Path | None = None,
                       progress: Progress | None = None, strategies: tuple[str, ...] = REORDER_STRATEGIES,
                       methods: tuple[str, ...] = PARTITION_METHODS, rr_batches: int = 50,
                       timeout_s: float = 3600, partition_order: str = "community") -> dict[str, Any]:
    """Measure every reorder strategy and partition method on ``cfg.dataset``; returns (and writes) the report.

    Partitioners (and the redundancy measurement) run on the ``partition_order`` ordering of the graph -- by
    default ``community``, the order Strata's pipeline gives them when ``reorder.strategy=community``;
    ``identity`` streams the ingested ids. METIS does not depend on it; streaming methods do, a lot."""
    from pipelines.bench.policies import write_report
    from pipelines.core.graphio import load_graph
    from pipelines.stages.sample import train_batches

    store = paths.store()
    graph_art = StageRunner(cfg, store).result("ingest", progress).artifact
    report: dict[str, Any] = {
        "dataset": cfg.dataset,
        "graph": {"nodes": int(graph_art.stats["num_nodes"]), "edges": int(graph_art.stats["num_edges"])},
        "settings": {"fanouts": list(cfg.sample.fanouts), "batch_size": cfg.sample.batch_size,
                     "num_parts": cfg.partition.num_parts, "partition_order": partition_order,
                     "row_bytes": load_graph(graph_art).row_bytes, "cpu_count": os.cpu_count()},
        "reorder": {},
        "partition": {},
    }
    total = len(strategies) + len(methods)
    for i, name in enumerate(strategies):
        report["reorder"][name] = _run_isolated("reorder", name, cfg, paths.root, timeout_s)
        if progress:
            progress("locality: strategies and methods", i + 1, total)
    part_cfg = cfg.model_copy(update={"reorder": cfg.reorder.model_copy(update={"strategy": partition_order})})
    for j, name in enumerate(methods):
        report["partition"][name] = _run_isolated("partition", name, part_cfg, paths.root, timeout_s)
        if progress:
            progress("locality: strategies and methods", len(strategies) + j + 1, total)

    # Redundancy ratio: the same number of random and partition-based batches on the ingested graph. As in
    # OUTRE (10,000 parts, macro batches of 20), parts are small: about RR_TRAIN_PER_PART training nodes each.
    rr_method = next((m for m in ("fennel", "grem", "metis", "range") if "error" not in
                      report["partition"].get(m, {"error": ""})), "range")
    num_train = int(graph_art.stats.get("train_nodes", 0)) or int(graph_art.stats["num_nodes"]) // 10
    rr_parts = int(np.clip(num_train // RR_TRAIN_PER_PART, 2, 16384))
    rr_cfg = part_cfg.model_copy(update={
        "partition": cfg.partition.model_copy(update={"method": rr_method, "num_parts": rr_parts}),
    })
    rr_runner = StageRunner(rr_cfg, store)
    ordering = rr_runner.artifact("reorder")
    parts = np.asarray(rr_runner.artifact("partition").array("parts.npy"))
    graph = load_graph(ordering)
    train = np.asarray(graph.train_idx)
    sc = cfg.sample
    random_batches = train_batches(train, sc.batch_size, 0, sc.seed, None, sc.macro_parts)[:rr_batches]
    part_batches = train_batches(train, sc.batch_size, 0, sc.seed, parts, sc.macro_parts)[:rr_batches]
    rr_random = redundancy_ratio(graph, random_batches, list(sc.fanouts), sc.seed)
    rr_partition = redundancy_ratio(graph, part_batches, list(sc.fanouts), sc.seed)
    report["redundancy"] = {
        "random": rr_random,
        "partition": rr_partition,
        "change": round(rr_partition / rr_random - 1.0, 4) if rr_random else None,
        "partition_method": rr_method,
        "num_parts": rr_parts,
        "macro_parts": sc.macro_parts,
        "batches": min(len(random_batches), len(part_batches)),
    }
    add_ratios(report)
    if out_path is not None:
        write_report(out_path, report)
    return report


def add_ratios(report: dict[str, Any]) -> None:
    """Add the acceptance ratios in place: ``pages_vs_random`` per strategy; ``cut_vs_metis`` and
    ``memory_vs_metis`` per method (the stage's own peak above its loaded baseline when both rows have it, else
    the process peaks)."""
    random_pages = report["reorder"].get("random", {}).get("pages_per_batch")
    for row in report["reorder"].values():
        if random_pages and "pages_per_batch" in row:
            row["pages_vs_random"] = round(row["pages_per_batch"] / random_pages, 4)
    metis = report["partition"].get("metis", {})
    for row in report["partition"].values():
        if "error" in row or "error" in metis or not metis:
            continue
        if metis.get("edge_cut"):
            row["cut_vs_metis"] = round(row["edge_cut"] / metis["edge_cut"], 4)
        # the same measure on both sides: the stage's own peak when both have it, else the process peak
        key = "stage_extra_rss_mb" if row.get("stage_extra_rss_mb") is not None and metis.get(
            "stage_extra_rss_mb") else "peak_rss_mb"
        if metis.get(key) and row.get(key) is not None:
            row["memory_vs_metis"] = round(row[key] / metis[key], 4)


def main(argv: list[str]) -> int:
    if len(argv) != 5 or argv[0] != "worker":
        print("usage: python -m pipelines.bench.locality worker reorder|partition NAME CONFIG_JSON ROOT",
              file=sys.stderr)
        return 2
    print(json.dumps(_worker(argv[1], argv[2], argv[3], argv[4])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
