"""The scaling table of ``strata bench --suite stages`` reports at growing sizes (issue 30's acceptance).

Given two or more stage reports of the same graph family at growing node counts, prints a Markdown table: per
stage the seconds at each size, the growth of seconds per CSR entry from each size to the next (1.0 is linear;
> 1.5 is the issue's bar), the peak anonymous memory at each size and the marginal bytes per node between the
two largest sizes (what a further 10x costs), plus the bytes read and written at the largest. ``train`` is
also given per training node (an epoch's work scales with the training nodes, not the edges)::

    python benchmarks/scaling_table.py benchmarks/results/scale_stages_{1m,10m,100m}.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _load(path: Path) -> dict[str, Any]:
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: '{path}' expected a stage report (JSON) ({e})") from e
    if not isinstance(report.get("stages"), dict) or not isinstance(report.get("graph"), dict):
        raise SystemExit(f"error: '{path}' expected 'stages' and 'graph' (a `strata bench --suite stages` report)")
    return report


def _size(nodes: int) -> str:
    for unit, scale in (("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if nodes >= scale:
            return f"{nodes / scale:g}{unit}"
    return str(nodes)


def _fmt(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}" if abs(x) < 1000 else f"{x:,.0f}"


def table(reports: list[dict[str, Any]]) -> str:
    """The Markdown table of ``reports`` (ordered by node count here)."""
    reports = sorted(reports, key=lambda r: r["graph"]["num_nodes"])
    sizes = [_size(int(r["graph"]["num_nodes"])) for r in reports]
    stages = [s for s in reports[-1]["stages"] if all(s in r["stages"] for r in reports)]
    growth_heads = [f"s/entry {b}/{a}" for a, b in zip(sizes, sizes[1:], strict=False)]
    head = (["stage"] + [f"s, {s}" for s in sizes] + growth_heads + [f"peak anon MiB {' / '.join(sizes)}",
            f"bytes/node {sizes[-2]}->{sizes[-1]}", f"read GB {sizes[-1]}", f"written GB {sizes[-1]}"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for stage in stages:
        rows = [r["stages"][stage] for r in reports]
        per = "train_nodes" if stage == "train" else "num_edges"
        work = [max(int(r["graph"].get(per) or 0), 1) for r in reports]
        secs = [float(s.get("stage_s") or 0.0) for s in rows]
        growth = [(b / wb) / (a / wa) if a > 0 else None
                  for a, b, wa, wb in zip(secs, secs[1:], work, work[1:], strict=False)]
        anon = [float(s.get("peak_anon_mb") or 0.0) for s in rows]
        n0, n1 = (int(r["graph"]["num_nodes"]) for r in reports[-2:])
        per_node = (anon[-1] - anon[-2]) * 2**20 / (n1 - n0) if n1 > n0 else None
        name = f"{stage} (per train node)" if stage == "train" else stage
        cells = ([name] + [_fmt(s, 1) for s in secs] + [_fmt(g) for g in growth]
                 + [" / ".join(f"{a:,.0f}" for a in anon), _fmt(per_node, 1),
                    _fmt(rows[-1].get("read_bytes", 0) / 1e9, 1), _fmt(rows[-1].get("write_bytes", 0) / 1e9, 1)])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="stage reports (JSON), two or more sizes")
    args = parser.parse_args(argv)
    if len(args.reports) < 2:
        parser.error("expected two or more reports (sizes to compare)")
    reports = [_load(p) for p in args.reports]
    print(table(reports))
    for r in sorted(reports, key=lambda r: r["graph"]["num_nodes"]):
        g, d = r["graph"], r.get("disk", {})
        print(f"\n{_size(int(g['num_nodes']))}: {g['num_nodes']:,} nodes, {g['num_edges']:,} entries, "
              f"{g.get('train_nodes', 0):,} train nodes; budget {r.get('memory_budget', 0) / 2**20:,.0f} MiB, "
              f"cgroup {r.get('cgroup_limit', 0) / 2**20:,.0f} MiB ({r.get('confinement')}); artifacts "
              f"{d.get('total_over_features', float('nan')):.2f}x the feature file", end="")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
