"""Streamed layer-wise evaluation (``train.eval_mode=layerwise``) at scale, under a memory cgroup.

The stages up to ``reorder`` run first in an unconfined child (their artifacts are reused when they exist); the
files are then evicted from the page cache and a second child joins a fresh memory cgroup
(:class:`pipelines.core.confine.MemoryCgroup`, v1 or v2, page cache counted) before it imports anything heavy. It
builds the model (untrained, seeded: time and traffic do not depend on the weights; the equality with the
model's forward is the tests' job) and runs :func:`trainer.layerwise.layerwise_logits` on each split's nodes
(``--splits val,test``: a pass each; ``val+test``: one pass over their union, as training's last evaluation).
The report (JSON on stdout and in ``--out``) holds per split the wall time, the per-layer report (targets,
sources, intervals, bytes read by the inference's own reads), the process's bytes read from disk
(``/proc/self/io``), and the cgroup's limit, peak charge and OOM kills::

    python benchmarks/layerwise_scale.py --root /data/big --budget 2G --memory-mb 512 \\
        --dataset "synthetic:nodes=10000000,degree=10,dim=128,classes=16,seed=1,locality=0.9,window=64,labeled=0.04"

Needs root (or a delegated cgroup) for the confined run; ``--budget none`` runs unconfined.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_DATASET = "synthetic:nodes=10000000,degree=10,dim=128,classes=16,seed=1,locality=0.9,window=64,labeled=0.04"


def _worker(args: argparse.Namespace) -> None:
    """Prepare (``--worker reorder``) or evaluate (``--worker evaluate``); print one JSON line."""
    from pipelines.config import PipelineConfig
    from pipelines.core.paths import StrataPaths
    from pipelines.runner import StageRunner

    cfg = PipelineConfig.load(dataset=args.dataset, overrides=[
        "verify.on_reuse=sampled", "train.eval_mode=layerwise", f"train.layerwise_memory_mb={args.memory_mb}",
        *args.overrides])
    store = StrataPaths.at(str(args.root)).store()
    runner = StageRunner(cfg, store)
    t0 = time.perf_counter()
    runner.run_until("reorder", checks=args.worker == "reorder")
    out: dict[str, Any] = {"worker": args.worker, "prepare_s": time.perf_counter() - t0}
    if args.worker == "evaluate":
        import numpy as np
        import torch

        from pipelines.bench.worker import storage_read_bytes
        from pipelines.stages.train import full_graph
        from trainer.layerwise import layerwise_logits
        from trainer.models import build_model

        reorder = runner.artifact("reorder")
        labels = np.asarray(reorder.array("labels.npy"), dtype=np.int64)
        graph = full_graph(cfg, reorder, labels, store.tmp_dir)
        assert graph is not None
        torch.manual_seed(0)
        model = build_model(args.model, in_dim=graph.feature_dim, hidden_dim=args.hidden_dim,
                            out_dim=int(labels.max()) + 1, num_layers=args.layers, dropout=0.5)
        for group in args.splits.split(","):  # "val+test": one pass over the union, as train() evaluates them
            nodes = np.unique(np.concatenate([graph.splits[split] for split in group.split("+")]))
            report: list[dict[str, int]] = []
            before, t1 = storage_read_bytes(), time.perf_counter()
            logits = layerwise_logits(model, graph, nodes, report=report)
            out[group] = {"nodes": len(nodes), "wall_s": time.perf_counter() - t1,
                          "os_read_bytes": storage_read_bytes() - before, "layers": report,
                          "finite": bool(np.isfinite(logits).all())}
        out["feature_file_bytes"] = graph.features_path.stat().st_size
    out["maxrss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(out), flush=True)


def _child(args: argparse.Namespace, worker: str, preexec: Any = None) -> dict[str, Any]:
    from pipelines.core.confine import json_child

    argv = [sys.executable, __file__, "--worker", worker, "--root", str(args.root), "--dataset", args.dataset,
            "--memory-mb", str(args.memory_mb), "--model", args.model, "--layers", str(args.layers),
            "--hidden-dim", str(args.hidden_dim), "--splits", args.splits,
            *[x for o in args.overrides for x in ("--set", o)]]
    return {"worker": worker, **json_child(argv, preexec)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="the data root (artifacts, catalog)")
    parser.add_argument("--dataset", default=DEFAULT_DATASET)
    parser.add_argument("--budget", default="2G", help="the evaluation's cgroup limit, or 'none' (unconfined)")
    parser.add_argument("--memory-mb", type=int, default=512, help="train.layerwise_memory_mb")
    parser.add_argument("--model", default="graphsage")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden-dim", type=int, default=128)
    parser.add_argument("--splits", default="val,test",
                        help="comma-separated passes, each a split or splits joined by '+' (one pass over their union)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="KEY=VALUE, repeatable")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0

    from pipelines.core.confine import evict_page_cache, run_within

    prepared = _child(args, "reorder")
    if prepared.get("failed"):
        print(json.dumps({"prepare": prepared}), file=sys.stderr)
        return 1
    report: dict[str, Any] = {"dataset": args.dataset, "model": args.model, "layers": args.layers,
                              "hidden_dim": args.hidden_dim, "layerwise_memory_mb": args.memory_mb,
                              "overrides": args.overrides}
    evict_page_cache([args.root])  # the run starts with the data on disk, not in the page cache
    try:
        confinement, evaluated = run_within(args.budget, "strata-layerwise",
                                            lambda join: _child(args, "evaluate", join))
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    report.update(confinement, evaluate=evaluated)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if not report["evaluate"].get("failed") else 1


if __name__ == "__main__":
    sys.exit(main())
