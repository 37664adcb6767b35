"""DENSE against per-layer sampling: time and size of one mini-batch's sample (not a test).

On the ``demo`` graph (200k nodes, ~3M directed edges; or any built-in/``synthetic:`` spec via ``--dataset``),
batches of ``--batch-size`` training seeds are sampled by ``uniform`` (per-layer:
:func:`storage_kernels.kernels.sample_blocks`) and ``dense`` (MariusGNN's DENSE:
:func:`storage_kernels.kernels.sample_dense`), alternating batch by batch on the same seeds and batch seeds,
for every fanout list in ``--fanouts`` (default 1, 2 and 3 layers of 10, and GraphSAGE's 3-layer 15,10,5).
Per batch it records:

- ``ms``: wall time of the sampling call (``--threads`` threads);
- ``sampled_edges``: neighbour draws the sampler made and relabelled (per-layer: every hop's CSR; DENSE: its
  one CSR, ``cols[-1]``);
- ``block_edges``: edges of the blocks the trainer aggregates over (the sum of every hop's block; DENSE's
  share rows, so this is what training costs, not what sampling cost);
- ``nodes``: unique input nodes (feature rows to load).

The table gives medians over ``--batches`` batches (the first 2 are warm-up and dropped) and, for the time,
also the minimum (on shared cores the least disturbed run is the steadier figure). Results go to
stdout and to ``--json``::

    python benchmarks/bench_dense.py --json benchmarks/results/dense_vs_uniform.json      # ~20 s on demo
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from typing import Any

import numpy as np

from pipelines.methods.sources import parse_source_spec
from pipelines.methods.sources.base import dedupe_csr_rows
from storage_kernels import kernels

SAMPLERS = {"uniform": kernels.sample_blocks, "dense": kernels.sample_dense}


def load_csr(spec: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, indices, train_idx) of a dataset spec, built in memory as ingest would (deduplicated rows)."""
    source = parse_source_spec(spec)
    indptr, indices = kernels.build_csr(source.edge_chunks, source.num_nodes)
    indptr, indices = dedupe_csr_rows(indptr, np.asarray(indices))
    return indptr, np.ascontiguousarray(indices, dtype=np.int64), np.asarray(source.train_idx, dtype=np.int64)


def measure(name: str, out: kernels.SampledBlocks, seconds: float) -> dict[str, float]:
    sampled = len(out.cols[-1]) if name == "dense" and out.cols else sum(len(c) for c in out.cols)
    return {"ms": seconds * 1e3, "sampled_edges": sampled, "block_edges": sum(len(c) for c in out.cols),
            "nodes": len(out.nodes)}


def run(indptr: np.ndarray, indices: np.ndarray, train_idx: np.ndarray, fanouts: list[int], batches: int,
        batch_size: int, threads: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    per: dict[str, list[dict[str, float]]] = {name: [] for name in SAMPLERS}
    for b in range(batches + 2):
        seeds = rng.choice(train_idx, min(batch_size, len(train_idx)), replace=False)
        order = list(SAMPLERS) if b % 2 == 0 else list(reversed(SAMPLERS))  # alternate who runs first
        for name in order:
            t = time.perf_counter()
            out = SAMPLERS[name](indptr, indices, seeds, fanouts, seed=b, num_threads=threads)
            per[name].append(measure(name, out, time.perf_counter() - t))
    row: dict[str, Any] = {"fanouts": fanouts, "layers": len(fanouts)}
    for name, runs in per.items():
        runs = runs[2:]
        row[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        row[name]["min_ms"] = min(r["ms"] for r in runs)  # the least disturbed run: 2 shared cores are noisy
    u, d = row["uniform"], row["dense"]
    row["ratio_dense_to_uniform"] = {k: d[k] / u[k] if u[k] else None for k in u}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="demo")
    ap.add_argument("--fanouts", default="10;10,10;10,10,10;15,10,5",
                    help="fanout lists separated by ';' (seeds' hop first)")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    t = time.perf_counter()
    indptr, indices, train_idx = load_csr(args.dataset)
    print(f"{args.dataset}: {len(indptr) - 1} nodes, {len(indices)} directed edges "
          f"({time.perf_counter() - t:.1f} s to build)")
    rows = []
    header = (f"{'fanouts':>10} {'sampler':>8} {'ms':>8} {'min ms':>8} {'sampled edges':>14} {'block edges':>12} "
              f"{'nodes':>8}")
    print(header)
    for spec in args.fanouts.split(";"):
        fanouts = [int(f) for f in spec.split(",")]
        row = run(indptr, indices, train_idx, fanouts, args.batches, args.batch_size, args.threads)
        rows.append(row)
        for name in (*SAMPLERS, "ratio_dense_to_uniform"):
            r = row[name]
            label = "d/u" if name.startswith("ratio") else name
            digits = 2 if label == "d/u" else 0
            print(f"{spec:>10} {label:>8} {r['ms']:8.2f} {r['min_ms']:8.2f} {r['sampled_edges']:14.{digits}f} "
                  f"{r['block_edges']:12.{digits}f} {r['nodes']:8.{digits}f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dataset": args.dataset, "num_nodes": len(indptr) - 1, "num_edges": len(indices),
                       "batch_size": args.batch_size, "batches": args.batches, "threads": args.threads,
                       "cpus": os.cpu_count(), "machine": platform.machine(), "rows": rows}, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
