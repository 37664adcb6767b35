"""Link prediction at scale under a memory cgroup (issue 13's acceptance run): ``train.task=link`` with learned
embeddings, the train stage confined to a budget with the page cache counted.

The stages up to ``pack`` run first in an unconfined child (their artifacts are reused when they exist); the
files they wrote are then evicted from the page cache, and the ``train`` stage runs in a second child that
joins a fresh memory cgroup (:class:`pipelines.core.confine.MemoryCgroup`, v1 or v2) before it executes a single
instruction. The report (JSON on stdout and in ``--out``) holds the train stage's metrics and traffic, the
cgroup's limit, peak charge and OOM kills, and the table size against the budget::

    python benchmarks/link_scale.py --root /data/lp --policy mariusgnn --budget 976M \\
        --dataset synthetic:nodes=5000000,degree=4,dim=4,classes=4,seed=0,locality=0.9,window=16 \\
        --set plan.num_partitions=16 --set plan.buffer_partitions=2 --set plan.partition_order=beta \\
        --out beta.json

``--policy in_memory --budget none`` runs the in-memory reference on the same edges and negatives. Needs root
(or a delegated cgroup) for the confined run; says why not otherwise.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

#: Settings of every run (the link task over learned embeddings, as MariusGNN trains them).
BASE = ["train.task=link", "train.link_encoder=embedding", "train.patience=100", "verify.on_reuse=sampled"]
DEFAULT_DATASET = "synthetic:nodes=5000000,degree=4,dim=4,classes=4,seed=0,locality=0.9,window=16"
#: Train-stage stats the report keeps.
STATS = ("mrr", "hits@1", "hits@10", "sampled_mrr", "val_mrr", "random_mrr", "epoch_s", "eval_s", "out_of_core",
         "bytes_read", "read_requests", "bytes_written", "partition_loads", "writebacks", "max_resident",
         "buffer_bytes", "load_wait_s", "partitions_prefetched", "node_file_bytes", "num_partitions",
         "buffer_partitions", "partition_order", "train_edges", "valid_edges", "test_edges", "best_epoch")


def _worker(root: str, dataset: str, overrides: list[str], until: str) -> None:
    """Run the stage graph up to ``until``; print one JSON line (the train stage's stats when it ran)."""
    from pipelines.config import PipelineConfig
    from pipelines.core.paths import StrataPaths
    from pipelines.runner import StageRunner

    cfg = PipelineConfig.load(dataset=dataset, overrides=overrides)
    runner = StageRunner(cfg, StrataPaths.at(root).store())
    t0 = time.perf_counter()
    runner.run_until(until, checks=False)
    out: dict[str, Any] = {"until": until, "wall_s": time.perf_counter() - t0,
                           "maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if until == "train":
        stats = runner.artifact("train").stats
        out.update({k: stats.get(k) for k in STATS})
        out["embedding_dim"] = cfg.train.embedding_dim
        out["version"] = runner.artifact("train").version
    print(json.dumps(out), flush=True)


def _child(args: argparse.Namespace, overrides: list[str], until: str, preexec: Any = None) -> dict[str, Any]:
    from pipelines.core.confine import json_child

    argv = [sys.executable, __file__, "--worker", until, "--root", str(args.root), "--dataset", args.dataset,
            *[x for o in overrides for x in ("--set", o)]]
    return {"until": until, **json_child(argv, preexec)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="the data root (artifacts, catalog, MLflow)")
    parser.add_argument("--dataset", default=DEFAULT_DATASET)
    parser.add_argument("--policy", default="mariusgnn")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--embedding-dim", type=int, default=64)
    parser.add_argument("--budget", default="976M", help="the train stage's cgroup limit, or 'none' (unconfined)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="KEY=VALUE, repeatable")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(str(args.root), args.dataset, args.overrides, args.worker)
        return 0

    from pipelines.core.confine import evict_page_cache, run_within

    overrides = [*BASE, f"policy={args.policy}", f"train.epochs={args.epochs}",
                 f"train.embedding_dim={args.embedding_dim}", *args.overrides]
    prepared = _child(args, overrides, "pack")
    if prepared.get("failed"):
        print(json.dumps({"prepare": prepared}), file=sys.stderr)
        return 1
    report: dict[str, Any] = {"dataset": args.dataset, "policy": args.policy, "overrides": overrides,
                              "prepare": prepared}
    evict_page_cache([args.root])  # the run starts with the data on disk, not in the page cache
    try:
        confinement, train = run_within(args.budget, "strata-link",
                                        lambda join: _child(args, overrides, "train", join))
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    report.update(confinement, train=train)
    if not train.get("failed") and train.get("node_file_bytes") and report.get("limit_bytes"):
        report["table_over_budget"] = train["node_file_bytes"] / report["limit_bytes"]
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if not train.get("failed") else 1


if __name__ == "__main__":
    sys.exit(main())
