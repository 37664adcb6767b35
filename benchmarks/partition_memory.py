"""Stage-only peak memory of one partitioner on the 1M-node graph built by the locality suite under /tmp/loc1m.

Usage: python benchmarks/partition_memory.py grem|fennel|metis (run each in a fresh process; VmHWM after
clear_refs measures the partitioner alone).
"""
import glob
import json
import sys
import time

sys.path.insert(0, ".")
from pathlib import Path

from pipelines.config import PipelineConfig
from pipelines.stages.graphio import load_graph
from pipelines.stages.partition import cut_statistics, partition_graph
from storage_kernels.store import Artifact


def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"): return int(line.split()[1]) / 1024
method = sys.argv[1]
d = [p for p in glob.glob("/tmp/loc1m/*/ordering/*/") if Artifact(p).stats.get("strategy") == "identity"][0]
g = load_graph(Artifact(d))
cfg = PipelineConfig.load(overrides=["partition.num_parts=16"]).partition
Path("/proc/self/clear_refs").write_text("5"); base = status("VmRSS")
t = time.time(); parts = partition_graph(g, method, 16, cfg); el = time.time() - t
peak = status("VmHWM")
stats = cut_statistics(g, parts, 16)[0]
print(json.dumps({"method": method, "time_s": round(el, 1), "baseline_rss_mb": round(base), "peak_rss_mb": round(peak), "extra_mb": round(peak - base), "edge_cut": stats["edge_cut"], "balance": stats["balance"]}), flush=True)
