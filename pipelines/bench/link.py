"""Link prediction in memory vs out of core (``policy=mariusgnn``), BETA vs COMET, on one graph.

``python -m pipelines.bench.link --dataset SPEC [--partitions P --buffer C --epochs E]`` resolves the graph
through the stage graph (ingest, reorder; reused when present) and trains learned embeddings (DistMult) four ways
from the same seed, each for ``E`` epochs and keeping the last epoch (no early stopping, so every variant
trains the same number of steps; one torch thread by default, so that a variant's result does not depend on
how many threads the BLAS picked):

``in_memory``
    the whole table in RAM, the default epoch (all training edges shuffled, negatives from all nodes);
``beta_in_memory`` / ``comet_in_memory``
    the table in RAM, epochs in the BETA / COMET edge-bucket order with negatives from the resident partitions
    (the out-of-core run's exact batches and negatives);
``beta_out_of_core`` / ``comet_out_of_core``
    the table and Adagrad state in the partitioned node file, ``C`` of ``P`` partitions in the buffer.

Prints one JSON line per variant: test ``mrr`` (filtered when the graph is small enough), ``sampled_mrr``,
``hits@10``, seconds, and the buffer's traffic for the out-of-core ones.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["main", "run_variants"]


def run_variants(spec: str, partitions: int, buffer: int, epochs: int, root: Path, overrides: list[str]
                 ) -> list[dict[str, Any]]:
    """Train the variants (see the module docstring); one result dict each."""
    from pipelines.config import PipelineConfig
    from pipelines.core.paths import StrataPaths
    from pipelines.runner import StageRunner
    from trainer.link.decoders import build_decoder
    from trainer.link.embeddings import InMemoryEmbeddings
    from trainer.link.encoders import EmbeddingEncoder
    from trainer.link.outofcore import PartitionedEmbeddings, bucket_batches, group_buckets, partition_bounds
    from trainer.link.run import build_link
    from trainer.link.train import train_link

    cfg = PipelineConfig.load(overrides=["train.task=link", "train.link_encoder=embedding", f"train.epochs={epochs}",
                                         "train.patience=0", *overrides], dataset=spec)
    reorder = StageRunner(cfg, StrataPaths.at(root).store()).artifact("reorder")
    indptr = np.asarray(reorder.array("indptr.npy"), np.int64)
    indices = np.asarray(reorder.array("indices.npy"), np.int64)
    tcfg = cfg.train
    run = build_link(tcfg, indptr, indices, None, [1])  # the split (deterministic) and the sampler
    n, dim = run.graph.num_nodes, tcfg.embedding_dim
    bounds = partition_bounds(n, partitions)
    grouped, ptr = group_buckets(run.graph.split.train, bounds)
    out = []
    for name in ("in_memory", "beta_in_memory", "beta_out_of_core", "comet_in_memory", "comet_out_of_core"):
        order = name.split("_")[0]
        torch.manual_seed(tcfg.seed)  # the same decoder initialisation for every variant
        with tempfile.TemporaryDirectory(prefix="strata-bench-link-") as tmp:
            store: Any = InMemoryEmbeddings(n, dim, tcfg.seed)
            batches = None
            if name != "in_memory":
                if name.endswith("out_of_core"):
                    store = PartitionedEmbeddings(Path(tmp) / "emb.bin", n, dim, partitions, buffer, tcfg.seed)
                on_set = store.activate if name.endswith("out_of_core") else (lambda s: None)

                def batches(e: int, order: str = order, on_set: Any = on_set) -> Any:
                    return bucket_batches(grouped, ptr, bounds, tcfg, order, buffer, e, on_set)

            encoder = EmbeddingEncoder(store, tcfg.embedding_lr)
            t0 = time.perf_counter()
            result = train_link(tcfg, run.graph, encoder, build_decoder(tcfg.decoder, dim), run.sampler,
                                epoch_batches=batches, keep_best=False)
            row = {"variant": name, "mrr": result.metrics["mrr"], "sampled_mrr": result.metrics["sampled_mrr"],
                   "hits@10": result.metrics["hits@10"], "filtered": bool(result.metrics["filtered"]),
                   "train_s": round(result.timers["train_s"], 2), "seconds": round(time.perf_counter() - t0, 2),
                   "final_loss": result.losses[-1]}
            if isinstance(store, PartitionedEmbeddings):
                row.update({"table_bytes": n * 2 * dim * 4, "buffer_bytes": buffer * store.stride,
                            "bytes_read": store.bytes_read, "bytes_written": store.bytes_written,
                            "partition_loads": store.loads, "max_resident": store.max_resident})
                store.close()
            out.append(row)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic:nodes=10000,degree=10,dim=8,classes=8,seed=0,locality=0.9,"
                        "window=8")
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--buffer", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: bit-identical runs; more lets MKL pick its own reduction order)")
    parser.add_argument("--root", default=None, help="data root (default: a temporary directory)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="section.key=value")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="strata-bench-link-root-") as tmp:
        root = Path(args.root) if args.root else Path(tmp)
        for row in run_variants(args.dataset, args.partitions, args.buffer, args.epochs, root, args.overrides):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
