"""The feature loader alone: wall and CPU time of reading and assembling the training batches, per policy.

The stages up to ``pack`` run first for each policy (their artifacts are reused when they exist). Then, in one
process, each policy's feature source (the one training opens, ``pipelines.stages.train.open_features``)
reads and assembles ``--epochs`` epochs of training batches in turn, with no model: the loader's own cost,
which competes with compute for the cores when training. Policies alternate within each repeat, after one
warm-up pass each; the report gives every pass's wall and process CPU seconds and the source's bytes and
requests per pass::

    python benchmarks/loader_cpu.py --root strata_data --dataset demo --policies diskgnn,in_memory --repeats 2

An entry may carry its own settings after a colon, ``;``-separated, to compare variants of one policy in the
same process: ``--policies "diskgnn,diskgnn:pack.read_gap_blocks=8"``.

``--profile`` adds a cProfile of one more pass of each policy (top functions by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
from pathlib import Path
from typing import Any


def _open(args: argparse.Namespace, entry: str) -> tuple[Any, list[Any]]:
    from pipelines.config import PipelineConfig
    from pipelines.core.paths import StrataPaths
    from pipelines.runner import StageRunner
    from pipelines.stages.train import open_features
    from storage_kernels.sampleset import SampleSet
    from trainer.features.iobackend import set_io_defaults

    policy, _, own = entry.partition(":")
    own_sets = [item for item in own.split(";") if item]
    cfg = PipelineConfig.load(dataset=args.dataset, overrides=[*args.overrides, *own_sets, f"policy={policy}"])
    set_io_defaults(cfg.train.io_backend, cfg.train.io_queue_depth)  # as the train stage does
    runner = StageRunner(cfg, StrataPaths.at(str(args.root)).store())
    runner.run_until("pack", checks=False)
    samples = SampleSet(runner.artifact("sample").path)
    source = open_features(cfg, policy, runner.artifact("reorder"), runner.artifact("pack"), samples, "cpu")
    batches = [samples.batch(b) for e in range(args.epochs) for b in samples.batch_ids("train", e % samples.epochs)]
    return source, batches


def _pass(source: Any, batches: list[Any]) -> dict[str, float]:
    bytes0, requests0 = source.bytes_read, source.read_requests
    t0, c0 = time.perf_counter(), time.process_time()
    for batch in batches:
        read = source.read(batch)
        source.assemble(read)
        source.release(read)  # the batch is done: its staging block may take the next (as training does)
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "bytes_read": float(source.bytes_read - bytes0), "read_requests": float(source.read_requests - requests0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("strata_data"))
    parser.add_argument("--dataset", default="demo")
    parser.add_argument("--policies", default="diskgnn,in_memory",
                        help="comma-separated policy names, each optionally NAME:KEY=VALUE;KEY=VALUE")
    parser.add_argument("--epochs", type=int, default=3, help="training epochs of batches per pass")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override KEY=VALUE")
    parser.add_argument("--profile", action="store_true", help="also profile one pass per policy")
    parser.add_argument("--out", type=Path, help="write the report as JSON")
    args = parser.parse_args()

    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    opened = {name: _open(args, name) for name in names}
    report: dict[str, Any] = {"dataset": args.dataset, "epochs": args.epochs, "batches": {}, "passes": {}}
    for name, (source, batches) in opened.items():
        report["batches"][name] = len(batches)
        _pass(source, batches)  # warm-up: first-touch allocations, the sources' lazily built state
        report["passes"][name] = []
    for _ in range(args.repeats):
        for name, (source, batches) in opened.items():
            report["passes"][name].append(_pass(source, batches))
    for name, passes in report["passes"].items():
        walls = ", ".join(f"{p['wall_s']:.3f}" for p in passes)
        cpus = ", ".join(f"{p['cpu_s']:.3f}" for p in passes)
        print(f"{name}: wall {walls} s, CPU {cpus} s, {passes[0]['bytes_read'] / 2**20:.1f} MiB in "
              f"{passes[0]['read_requests']:.0f} requests a pass ({report['batches'][name]} batches)")
    if args.profile:
        report["profile"] = {}
        for name, (source, batches) in opened.items():
            profile = cProfile.Profile()
            profile.runcall(_pass, source, batches)
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(12)
            report["profile"][name] = text.getvalue()
            print(f"--- {name}\n{text.getvalue()}")
    for source, _ in opened.values():
        source.close()
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
