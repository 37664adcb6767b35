"""Run one partition method through the partition stage at the 10M-node scale (root /tmp/loc10m).

Usage: python benchmarks/partition_10m.py grem|fennel|metis|range  (prints one JSON line; the configuration is
the locality suite's, so the suite reuses the artifact).
"""

import json
import sys
import time

from pipelines.config import PipelineConfig
from pipelines.settings import StrataPaths
from pipelines.stages import ingest, partition, reorder

SPEC = "synthetic:nodes=10000000,degree=24,dim=16,classes=16,seed=1,locality=0.5,window=256"


def main(method: str) -> None:
    overrides = ["partition.num_parts=16", "reorder.strategy=identity", f"partition.method={method}"]
    cfg = PipelineConfig.load(overrides=overrides, dataset=SPEC)
    store = StrataPaths.at("/tmp/loc10m").store()
    graph = ingest.run(store, cfg).artifact
    ordering = reorder.run(store, cfg, graph=graph).artifact
    start = time.time()
    try:
        result = partition.run(store, cfg, ordering=ordering)
    except (ValueError, MemoryError) as e:
        print(json.dumps({"method": method, "error": f"{type(e).__name__}: {e}"}), flush=True)
        return
    keys = ("time_s", "peak_rss_mb", "edge_cut", "balance", "train_balance")
    print(json.dumps({"method": method, "reused": result.reused, "wall_s": round(time.time() - start, 1),
                      **{k: result.artifact.stats.get(k) for k in keys}}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
