"""Run one partition method through the stage at the 10M-node scale (root /tmp/loc10m), printing one JSON line.

Usage: python benchmarks/partition_10m.py grem|fennel|metis|range
"""
import json
import sys
import time

sys.path.insert(0, ".")
from pipelines.config import PipelineConfig
from pipelines.settings import StrataPaths
from pipelines.stages import ingest, partition, reorder

spec = "synthetic:nodes=10000000,degree=24,dim=16,classes=16,seed=1,locality=0.5,window=256"
method = sys.argv[1]
cfg = PipelineConfig.load(overrides=["partition.num_parts=16", "reorder.strategy=identity", f"partition.method={method}"], dataset=spec)
store = StrataPaths.at("/tmp/loc10m").store()
g = ingest.run(store, cfg).artifact
o = reorder.run(store, cfg, graph=g).artifact
t = time.time()
try:
    r = partition.run(store, cfg, ordering=o)
    print(json.dumps({"method": method, "reused": r.reused, "wall_s": time.time() - t, **{k: r.artifact.stats.get(k) for k in ("time_s", "peak_rss_mb", "edge_cut", "balance", "train_balance")}}), flush=True)
except Exception as e:
    print(json.dumps({"method": method, "error": f"{type(e).__name__}: {e}"[:400]}), flush=True)
