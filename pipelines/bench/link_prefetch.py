"""The out-of-core embedding buffer's prefetch thread: time training waits for partition loads, with and without.

``python -m pipelines.bench.link_prefetch [--nodes N --dim D --partitions P --buffer C --depth K --epochs E
--repeats R --order O]`` generates a graph (each node linked to ``degree`` others, most within a window of
nearby ids, the rest anywhere: every partition pair has edges), splits it, and trains learned embeddings out
of core (``trainer.link.outofcore``) in the order ``O``, alternating synchronous loads (depth 0) and the
prefetch thread (depth ``K``), ``R`` times each (on a shared machine, alternating spreads the noise over
both). Prints one JSON line per run (``load_wait_s``: seconds training blocked making sets resident; the
buffer's traffic) and a summary: the mean wait of each, their ratio, and whether every run ended with the
same table (the prefetch thread must not change the rows trained).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["generated_graph", "main", "run_once"]


def generated_graph(nodes: int, degree: int, local: float, window: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A symmetric CSR: ``degree`` edges per node, a fraction ``local`` of them to ids within ``window``."""
    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(nodes, dtype=np.int64), degree)
    near = (src + rng.integers(1, window + 1, len(src))) % nodes
    far = rng.integers(0, nodes, len(src))
    dst = np.where(rng.random(len(src)) < local, near, far)
    keep = src != dst
    both = np.concatenate([np.stack([src[keep], dst[keep]], 1), np.stack([dst[keep], src[keep]], 1)])
    both = np.unique(both, axis=0)  # sorted by source, then destination: the CSR's order
    indptr = np.zeros(nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(both[:, 0], minlength=nodes), out=indptr[1:])
    return indptr, both[:, 1].copy()


def run_once(cfg: Any, graph: Any, order: str, p: int, c: int, depth: int, root: Path) -> dict[str, Any]:
    """Train out of core with prefetch ``depth``; the buffer's counters, seconds and a digest of the table."""
    from trainer.link.decoders import build_decoder
    from trainer.link.encoders import EmbeddingEncoder
    from trainer.link.negatives import NegativeSampler
    from trainer.link.outofcore import PartitionedEmbeddings, bucket_batches, group_buckets, partition_bounds
    from trainer.link.train import train_link

    n, dim = graph.num_nodes, cfg.embedding_dim
    bounds = partition_bounds(n, p)
    grouped, ptr = group_buckets(graph.split.train, bounds)
    torch.manual_seed(cfg.seed)
    store = PartitionedEmbeddings(root / f"emb-{depth}.bin", n, dim, p, c, cfg.seed, prefetch=depth)
    try:
        encoder = EmbeddingEncoder(store, cfg.embedding_lr)
        t0 = time.perf_counter()
        result = train_link(cfg, graph, encoder, build_decoder(cfg.decoder, dim), NegativeSampler("uniform", n),
                            epoch_batches=lambda e: bucket_batches(grouped, ptr, bounds, cfg, order, c, e,
                                                                   store.activate, store.prefetch),
                            keep_best=False)
        seconds = time.perf_counter() - t0
        table = store.write_table(np.empty((n, dim), np.float32))
        return {"depth": depth, "load_wait_s": round(store.load_wait_s, 4),
                "train_s": round(result.timers["train_s"], 3), "seconds": round(seconds, 3),
                "loads": store.loads, "prefetched": store.prefetched, "write_waits": store.write_waits,
                "bytes_read": store.bytes_read, "read_requests": store.read_requests,
                "bytes_written": store.bytes_written, "max_resident": store.max_resident,
                "max_slots_used": store.max_slots_used, "buffer_bytes": store.num_slots * store.stride,
                "partition_bytes": store.stride, "direct_io": bool(store.reader.direct),
                "mrr": result.metrics["mrr"],
                "table_sha1": hashlib.sha1(table.tobytes()).hexdigest()[:16]}
    finally:
        store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--degree", type=int, default=4)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--buffer", type=int, default=3)
    parser.add_argument("--depth", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--order", default="beta", choices=["beta", "comet", "random"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--dir", default=None, help="where the node files go (default: a temporary directory)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from pipelines.config import PipelineConfig
    from trainer.link.split import split_edges
    from trainer.link.train import LinkGraph

    cfg = PipelineConfig.load(overrides=["train.task=link", "train.link_encoder=embedding", f"train.epochs="
                                         f"{args.epochs}", f"train.embedding_dim={args.dim}", "train.patience=0",
                                         "train.filtered_eval=off", "train.eval_negatives=100"]).train
    indptr, indices = generated_graph(args.nodes, args.degree, 0.8, 64, 0)
    graph = LinkGraph.build(split_edges(indptr, indices, 0.02, 0.02, 0), indptr, indices)
    waits: dict[int, list[float]] = {0: [], args.depth: []}
    digests = set()
    with tempfile.TemporaryDirectory(prefix="strata-bench-prefetch-", dir=args.dir) as tmp:
        for r in range(args.repeats):
            for depth in (0, args.depth) if r % 2 == 0 else (args.depth, 0):  # alternate which goes first
                row = run_once(cfg, graph, args.order, args.partitions, args.buffer, depth, Path(tmp))
                waits[depth].append(row["load_wait_s"])
                digests.add(row["table_sha1"])
                print(json.dumps({"repeat": r, **row}), flush=True)
    sync, ahead = float(np.mean(waits[0])), float(np.mean(waits[args.depth]))
    print(json.dumps({"summary": True, "order": args.order, "nodes": args.nodes, "partitions": args.partitions,
                      "buffer": args.buffer, "depth": args.depth, "load_wait_s_sync": round(sync, 4),
                      "load_wait_s_prefetch": round(ahead, 4), "ratio": round(ahead / sync, 3) if sync else None,
                      "same_table": len(digests) == 1}), flush=True)


if __name__ == "__main__":
    main()
