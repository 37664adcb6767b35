"""DiskGNN's (m, s) search alone: the powers-of-two grid of segment sizes against the refined search.

Runs the stages up to ``plan`` for ``diskgnn`` (reusing what is built), builds the training trace the pack stage
searches, then times :func:`pipelines.methods.policies.diskgnn.search.search` with the grid alone (``segment_sizes``
= the
powers of two) and with the default refinement, alternating, in one process. Prints and reports each run's
seconds, the chosen ``(m, s)``, the exact read bytes over the trace, and the candidates evaluated::

    python benchmarks/pack_search.py --root strata_data --dataset demo --repeats 2

``--scan 16,19,32`` also prints, for each segment size given, whether a layout fits the budget and, for the
``s`` the search picks at that size, the exact bytes read per epoch and the read requests per
batch of the disk-cache reads through the segment window (runs of consecutive blocks, plus one packed chunk)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("strata_data"))
    parser.add_argument("--dataset", default="demo")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override KEY=VALUE")
    parser.add_argument("--scan", default="", help="comma-separated segment sizes to cost one by one")
    parser.add_argument("--out", type=Path, help="write the report as JSON")
    args = parser.parse_args()

    from pipelines.config import PipelineConfig
    from pipelines.core.graphio import feature_dim
    from pipelines.core.paths import StrataPaths
    from pipelines.methods.policies.diskgnn.search import cache_layout, evaluate, m_grid, search, training_trace
    from pipelines.runner import StageRunner
    from storage_kernels.packstore import store_budget_bytes
    from storage_kernels.sampleset import SampleSet

    cfg = PipelineConfig.load(dataset=args.dataset, overrides=[*args.overrides, "policy=diskgnn"])
    runner = StageRunner(cfg, StrataPaths.at(str(args.root)).store())
    runner.run_until("plan", checks=False)
    reorder, plan = runner.artifact("reorder"), runner.artifact("plan")
    samples = SampleSet(runner.artifact("sample").path)
    num_nodes = len(reorder.array("labels.npy"))
    row_bytes = feature_dim(reorder) * np.dtype(reorder.array("features.npy").dtype).itemsize
    feature_bytes = num_nodes * row_bytes
    # as the pack stage budgets it (diskgnn_layout.write_layout): the store minus the GPU/CPU cache blocks
    cache_bytes = sum(len(plan.array(f"{tier}_nodes.npy")) for tier in ("gpu", "cpu")) * row_bytes
    store_budget = store_budget_bytes(cfg.pack.disk_budget, feature_bytes)
    budget = None if store_budget is None else int(store_budget) - cache_bytes
    trace = training_trace(samples, np.asarray(plan.array("tier.npy")))
    buffer_rows = cfg.plan.disk_cache_buffer(feature_bytes) // row_bytes

    report: dict[str, Any] = {"dataset": args.dataset, "budget_bytes": budget, "batches": trace.num_batches,
                              "runs": {"grid": [], "refined": []}}
    for _ in range(args.repeats):
        for name, sizes in (("grid", m_grid(trace.num_batches)), ("refined", None)):
            start = time.perf_counter()
            choice = search(trace, row_bytes, budget, k=cfg.pack.minhash_k, num_threads=cfg.pack.num_threads,
                            buffer_rows=buffer_rows, order=cfg.pack.disk_cache_order,
                            gap_blocks=cfg.pack.read_gap_blocks, segment_sizes=sizes)
            run = {"seconds": time.perf_counter() - start, "segment_batches": choice.segment_batches,
                   "cache_rows": choice.cache_rows, "read_bytes": choice.read_bytes,
                   "store_bytes": choice.store_bytes, "evaluated": choice.evaluated,
                   "candidates": choice.candidates}
            report["runs"][name].append(run)
            print(f"{name}: {run['seconds']:.2f} s, m = {choice.segment_batches}, s = {choice.cache_rows}, "
                  f"{choice.read_bytes / 2**20:.1f} MiB read over the trace, {choice.evaluated} evaluated")
    report["scan"] = []
    epochs = max(samples.epochs, 1)
    for m in [int(v) for v in args.scan.split(",") if v.strip()]:
        try:  # the search restricted to this size: its best s within the budget
            only = search(trace, row_bytes, budget, k=cfg.pack.minhash_k, num_threads=cfg.pack.num_threads,
                          buffer_rows=buffer_rows, order=cfg.pack.disk_cache_order,
                          gap_blocks=cfg.pack.read_gap_blocks, segment_sizes=[m])
            s_fit = only.cache_rows if only.segment_batches == m else None  # else pure packing fits
        except ValueError:  # no layout of this size fits
            s_fit = None
        row: dict[str, Any] = {"m": m, "fits": s_fit is not None}
        if s_fit is not None:
            cost = evaluate(trace, only.segments, cache_layout(only.segments, s_fit), row_bytes,
                            cfg.pack.num_threads, buffer_rows, cfg.pack.read_gap_blocks)
            requests = trace.num_batches  # one packed chunk a batch
            if cost.window is not None:  # runs of consecutive disk-cache blocks, per batch
                blocks, ptr = cost.window.read_blocks, cost.window.read_ptr
                starts = np.ones(len(blocks), bool)
                starts[1:] = blocks[1:] != blocks[:-1] + 1
                starts[ptr[:-1][np.diff(ptr) > 0]] = True
                requests += int(starts.sum())
            row.update(s=int(s_fit), store_bytes=cost.store_bytes, epoch_read_bytes=cost.total_read_bytes / epochs,
                       requests_per_batch=requests / trace.num_batches)
            print(f"m = {m}: s = {s_fit}, {row['epoch_read_bytes'] / 2**20:.1f} MiB an epoch, "
                  f"{row['requests_per_batch']:.1f} requests a batch, store {cost.store_bytes / 2**20:.1f} MiB")
        else:
            print(f"m = {m}: no layout fits the budget")
        report["scan"].append(row)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
