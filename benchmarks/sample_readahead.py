"""Sampling an out-of-core CSR with and without each hop's rows read ahead (``sample_prefetched``).

Each run is its own process, after the CSR's pages are dropped from the page cache (``POSIX_FADV_DONTNEED``;
a process's own mapping would keep them), sampling the same batches of random seeds with the ``uniform``
sampler; variants alternate so drift hits both::

    python benchmarks/sample_readahead.py R/DATASET/reorder/VERSION --batches 20 --repeats 2

The directory is a ``reorder`` (or ``ingest``) artifact: ``indptr.npy`` and ``indices.npy``. Prints one JSON
line per run and the median ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def _drop(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def run_once(directory: Path, batches: int, fanouts: list[int], batch_size: int, prefetch: bool) -> dict:
    """Sample ``batches`` batches cold; returns the seconds and nodes sampled."""
    from pipelines.core.graphio import GraphArrays
    from pipelines.methods.samplers import SAMPLERS
    from pipelines.methods.samplers.prefetch import sample_prefetched
    from storage_kernels.arrays import advise_random

    for name in ("indptr.npy", "indices.npy"):
        _drop(directory / name)
    indptr = np.load(directory / "indptr.npy", mmap_mode="r")
    indices = np.load(directory / "indices.npy", mmap_mode="r")
    advise_random(indptr, indices)  # as the sample stage does
    empty = np.zeros(0, np.int64)
    graph = GraphArrays(indptr, indices, np.zeros((len(indptr) - 1, 1), np.float32), empty, empty, empty, empty)
    sampler, fan = SAMPLERS.get("uniform"), np.asarray(fanouts, dtype=np.int64)
    seeds = [np.sort(np.random.default_rng(b).choice(graph.num_nodes, batch_size, replace=False))
             for b in range(batches)]
    start, nodes = time.perf_counter(), 0
    for b, s in enumerate(seeds):
        nodes += len(sample_prefetched(sampler, graph, s.astype(np.int64), fan, b, 2, prefetch).nodes)
    return {"prefetch": prefetch, "s": round(time.perf_counter() - start, 3), "nodes": nodes, "batches": batches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--fanouts", default="10,10")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", choices=["plain", "prefetch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    fanouts = [int(f) for f in args.fanouts.split(",")]
    if args.child:
        print(json.dumps(run_once(args.directory, args.batches, fanouts, args.batch_size, args.child == "prefetch")))
        return
    times: dict[str, list[float]] = {"plain": [], "prefetch": []}
    for _ in range(args.repeats):
        for variant in ("plain", "prefetch"):
            out = subprocess.run([sys.executable, __file__, str(args.directory), "--batches", str(args.batches),
                                  "--batch-size", str(args.batch_size), "--fanouts", args.fanouts, "--child", variant],
                                 check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            print(out, flush=True)
            times[variant].append(json.loads(out)["s"])
    ratio = statistics.median(times["plain"]) / statistics.median(times["prefetch"])
    print(json.dumps({"median_plain_s": statistics.median(times["plain"]),
                      "median_prefetch_s": statistics.median(times["prefetch"]), "speedup": round(ratio, 2)}))


if __name__ == "__main__":
    main()
