"""Peak memory of every stage of `strata run`, each stage in its own process and its own memory cgroup.

For each stage in order, ``strata run --until STAGE`` runs in a fresh child that joins a fresh memory cgroup
(:class:`pipelines.core.confine.MemoryCgroup`, page cache counted) before it starts; the upstream stages'
artifacts exist by then and are reused, so the cgroup's peak is the stage's own (plus the interpreter and the
reuse checks). Per stage one JSON line: the cgroup's peak charge (``cgroup_peak_mb``, page cache included),
the anonymous memory's peak sampled every 50 ms (``anon_peak_mb``), the OOM kills and the wall time; a stage
that fails ends the run::

    python benchmarks/stage_memory.py --root /tmp/wide --limit 8G \\
        --dataset "synthetic:nodes=20000,degree=80,dim=4096,classes=16" [--set train.epochs=4 ...]

Needs root (or a delegated cgroup).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time

from pipelines.core.confine import MemoryCgroup, cgroup_support, parse_bytes
from pipelines.graph import STAGES


def measure(root: str, dataset: str, limit: int, stage: str, sets: list[str]) -> dict:
    """One stage (its upstream reused) in a fresh cgroup of ``limit`` bytes: its peaks and outcome."""
    argv = [sys.executable, "-m", "pipelines.cli", "run", "--dataset", dataset, "--root", root, "--until", stage,
            "--json", *[a for s in sets for a in ("--set", s)]]
    with MemoryCgroup(limit, cgroup_support(), name="strata-stage-memory") as cgroup:
        anon, done = [0], threading.Event()

        def sample() -> None:
            while not done.wait(0.05):
                anon[0] = max(anon[0], cgroup.anon_bytes())

        poller = threading.Thread(target=sample, daemon=True)
        poller.start()
        start = time.perf_counter()
        proc = subprocess.run(argv, preexec_fn=cgroup.join_argv(), capture_output=True, text=True)
        done.set()
        poller.join()
        return {"stage": stage, "returncode": proc.returncode, "cgroup_peak_mb": (cgroup.peak_bytes() or 0) >> 20,
                "anon_peak_mb": anon[0] >> 20, "oom_kills": cgroup.oom_kills(),
                "wall_s": round(time.perf_counter() - start, 1), "stderr_tail": proc.stderr[-500:] if
                proc.returncode else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--limit", default="8G", help="each stage's cgroup limit, page cache counted")
    parser.add_argument("--set", action="append", default=[], dest="sets", help="a setting, section.key=value")
    args = parser.parse_args()
    if not cgroup_support().available:
        sys.exit(f"no memory cgroup can be made here: {cgroup_support().reason}")
    for stage in STAGES:
        row = measure(args.root, args.dataset, parse_bytes(args.limit, "--limit"), stage.name, args.sets)
        print(json.dumps(row), flush=True)
        if row["returncode"]:
            break


if __name__ == "__main__":
    main()
