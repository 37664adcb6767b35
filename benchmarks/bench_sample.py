"""Benchmark sample_blocks: 1M-node random graph, avg degree 20, 1024 seeds."""
import sys
import time

import numpy as np

from storage_kernels import kernels

N, HALF_E = 1_000_000, 10_000_000
rng = np.random.default_rng(0)
src = rng.integers(0, N, HALF_E)
dst = rng.integers(0, N, HALF_E)
t = time.perf_counter()
chunks = 8
def factory():
    for i in range(chunks):
        s = slice(i * HALF_E // chunks, (i + 1) * HALF_E // chunks)
        yield np.concatenate([src[s], dst[s]]), np.concatenate([dst[s], src[s]])
indptr, indices = kernels.build_csr(factory, N)
print(f"build_csr: {N} nodes, {indices.size} entries in {time.perf_counter() - t:.2f} s")

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
for fanouts in ([15, 10, 5], [10, 15, 20]):
    for threads in (1, 2):
        times = []
        for r in range(reps):
            seeds = rng.choice(N, 1024, replace=False)
            t = time.perf_counter()
            out = kernels.sample_blocks(indptr, indices, seeds, fanouts, seed=r, num_threads=threads)
            times.append(time.perf_counter() - t)
        ms = np.array(times[2:]) * 1e3
        edges = sum(c.size for c in out.cols)
        print(f"fanouts={fanouts} threads={threads}: median {np.median(ms):.1f} ms, min {ms.min():.1f} ms "
              f"(nodes={out.nodes.size}, hop_counts={out.hop_counts.tolist()}, edges={edges})")
