"""Stage-only peak memory of one partitioner on the 1M-node graph built by the locality suite under /tmp/loc1m.

Usage: python benchmarks/partition_memory.py grem|fennel|metis  (one fresh process per method: VmHWM after
clear_refs measures the partitioner alone, not the imports or a parent's peak).
"""

import glob
import json
import sys
import time
from pathlib import Path

from pipelines.config import PipelineConfig
from pipelines.stages.graphio import load_graph
from pipelines.stages.partition import cut_statistics, partition_graph
from storage_kernels.store import Artifact


def status_mb(key: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def main(method: str, root: str = "/tmp/loc1m", parts: int = 16) -> None:
    orderings = [p for p in glob.glob(f"{root}/*/ordering/*/") if Artifact(p).stats.get("strategy") == "identity"]
    graph = load_graph(Artifact(orderings[0]))
    cfg = PipelineConfig.load(overrides=[f"partition.num_parts={parts}"]).partition
    Path("/proc/self/clear_refs").write_text("5")
    base = status_mb("VmRSS")
    start = time.time()
    labels = partition_graph(graph, method, parts, cfg)
    elapsed = time.time() - start
    peak = status_mb("VmHWM")
    stats = cut_statistics(graph, labels, parts)[0]
    print(json.dumps({"method": method, "time_s": round(elapsed, 1), "baseline_rss_mb": round(base),
                      "peak_rss_mb": round(peak), "extra_mb": round(peak - base), "edge_cut": stats["edge_cut"],
                      "balance": stats["balance"]}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
