"""The CPU training step with the C operations (``trainer.native_ops``) against their torch forms, in one process.

The stages up to ``sample`` run first (their artifacts are reused when they exist). One epoch's training
batches are then assembled in memory once (features gathered in node order, blocks, labels), so the timed loop
is the compute stage alone: forward, backward and the Adam step of every batch. For each model, each repeat
times one epoch with the C operations and one with the torch forms (``native_ops.torch_forms()``: the
aggregation by ``index_select`` + ``scatter_reduce``, GAT's attention by the edge-list operations of
``trainer.message_passing``, dropout by ``F.dropout``), alternating which goes first;
the report gives every epoch time, the per-repeat ratios and their median, and the top operators of one
profiled epoch in each form::

    python benchmarks/train_step.py --root strata_data --dataset demo --repeats 5 --out step.json

torch runs with its default intra-op threads (``--threads`` sets them).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch


def _batches(args: argparse.Namespace) -> tuple[list[tuple[torch.Tensor, list, torch.Tensor]], int, int]:
    from pipelines.config import PipelineConfig
    from pipelines.core.paths import StrataPaths
    from pipelines.runner import StageRunner
    from storage_kernels.sampleset import SampleSet
    from trainer.models import to_tensor_blocks

    cfg = PipelineConfig.load(dataset=args.dataset, overrides=args.overrides)
    runner = StageRunner(cfg, StrataPaths.at(str(args.root)).store())
    runner.run_until("sample", checks=False)
    reorder, sample = runner.artifact("reorder"), runner.artifact("sample")
    features = np.load(reorder.path / "features.npy", mmap_mode="r")
    labels = np.asarray(np.load(reorder.path / "labels.npy"), dtype=np.int64)
    samples = SampleSet(sample.path)
    data = []
    for i in samples.batch_ids("train", 0)[: args.batches or None]:
        b = samples.batch(i)
        y = labels[b.seeds].copy()
        x = np.asarray(features[b.nodes], dtype=np.float32)  # (num_nodes, F) in the batch's node order
        data.append((torch.from_numpy(x), to_tensor_blocks(b.blocks()), torch.from_numpy(y)))
    return data, int(features.shape[1]), int(labels.max()) + 1


def _epoch(model: torch.nn.Module, opt: torch.optim.Optimizer, data: list) -> float:
    t0 = time.perf_counter()
    for x, blocks, y in data:
        loss = torch.nn.functional.cross_entropy(model(x, blocks), y, ignore_index=-1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - t0


def _top_ops(model: torch.nn.Module, opt: torch.optim.Optimizer, data: list, rows: int = 8) -> list[dict[str, Any]]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _epoch(model, opt, data)
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:rows]
    return [{"op": e.key, "self_cpu_ms": e.self_cpu_time_total / 1000, "calls": e.count} for e in ops]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path("strata_data"))
    parser.add_argument("--dataset", default="demo")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="section.key=value")
    parser.add_argument("--models", default="graphsage,gcn,gat")
    parser.add_argument("--hidden-dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, default=0, help="time the first N training batches (0: all)")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from trainer.models import build_model
    from trainer.native_ops import torch_forms

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)  # as training runs (train.deterministic)
    data, in_dim, classes = _batches(args)
    report: dict[str, Any] = {
        "dataset": args.dataset, "batches": len(data), "threads": torch.get_num_threads(),
        "edges_per_batch": statistics.median(sum(int(b.edge_src.shape[0]) for b in blocks) for _, blocks, _ in data),
        "host": platform.processor() or platform.machine(), "torch": torch.__version__, "models": {},
    }
    for name in args.models.split(","):
        torch.manual_seed(0)
        model = build_model(name, in_dim=in_dim, hidden_dim=args.hidden_dim, out_dim=classes, num_layers=2,
                            dropout=0.5)
        opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
        _epoch(model, opt, data)  # warm-up (allocator, thread pool)
        times: dict[str, list[float]] = {"native": [], "torch": []}
        for r in range(args.repeats):
            order = ("native", "torch") if r % 2 == 0 else ("torch", "native")
            for form in order:
                if form == "torch":
                    with torch_forms():
                        times[form].append(_epoch(model, opt, data))
                else:
                    times[form].append(_epoch(model, opt, data))
        ratios = [t / n for t, n in zip(times["torch"], times["native"], strict=True)]
        with torch_forms():
            torch_ops = _top_ops(model, opt, data)
        entry = {"epoch_s": times, "median_epoch_s": {k: statistics.median(v) for k, v in times.items()},
                 "torch_over_native": ratios, "median_ratio": statistics.median(ratios),
                 "top_ops": {"native": _top_ops(model, opt, data), "torch": torch_ops}}
        report["models"][name] = entry
        print(f"{name}: native {entry['median_epoch_s']['native']:.3f} s, torch {entry['median_epoch_s']['torch']:.3f}"
              f" s an epoch; torch / native per repeat {', '.join(f'{x:.2f}' for x in ratios)}"
              f" (median {entry['median_ratio']:.2f}x)", flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
