"""``strata gc``: remove the artifact versions no configuration in use needs any more.

A dry run by default: a table of every version with keep/remove and the reason, and the bytes a ``--yes`` run
would free; then how many quarantined copies under ``<root>/.quarantine/`` it removes
(:func:`storage_kernels.retention.plan_quarantine`; ``--json`` lists each with the reason). The rules and the safeguards
(run locks, open files, upstream lineage) are :mod:`storage_kernels.retention`'s.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pipelines.core.formatting import format_bytes
from pipelines.tracking.model_registry import champion_artifacts
from storage_kernels.retention import Decision, gc_apply, gc_plan, parse_duration

__all__ = ["command"]

_out = Console(soft_wrap=True)
_err = Console(stderr=True, soft_wrap=True)


def _row(d: Decision) -> dict[str, Any]:
    v = d.version
    return {"dataset": v.dataset, "stage": v.stage, "version": v.version, "bytes": v.bytes,
            "last_used": time.strftime("%Y-%m-%d %H:%M", time.localtime(v.last_used)),
            "action": "keep" if d.keep else "remove", "reason": d.reason, "path": str(v.path)}


def command(
    dataset: str | None = typer.Option(None, "--dataset", "-d", help="Only this dataset (directory name)."),
    root: str | None = typer.Option(None, "--root", help="Data root (default: $STRATA_HOME, else ./strata_data)."),
    keep_last: int = typer.Option(1, "--keep-last", min=0,
                                  help="Keep this many most recently used versions of each stage of each dataset."),
    keep_within: str = typer.Option("0", "--keep-within",
                                    help="Also keep every version used within this long, e.g. 12h or 7d."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Remove them (without it: a dry run that only reports)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
) -> None:
    """Remove superseded artifact versions: every stage keeps its most recently used version(s), what those
    were built from, the registered champions' train versions, and whatever a live process has open. A dry run
    unless --yes."""
    from pipelines.core.paths import existing_root

    base = existing_root(root, dataset)  # ValueError: one line and exit 2 (pipelines.cli.errors)
    within = parse_duration(keep_within)
    now = time.time()
    gc = gc_plan(base, dataset, keep_last, within, now, pinned=champion_artifacts(base))
    decisions, stale, reclaimable = gc.decisions, gc.stale, gc.reclaimable_bytes
    doomed = gc.removable
    removed, skipped, freed, q_removed = [], [], 0, []
    if yes:
        with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                      console=_err, transient=True, disable=json_out or not _err.is_terminal) as progress:
            task = progress.add_task("gc: removing", total=reclaimable)
            result = gc_apply(gc, lambda v: progress.advance(task, v.bytes))
        removed = ["/".join(v.key) for v in result.removed]
        skipped = [{"artifact": "/".join(v.key), "why": why} for v, why in result.skipped]
        freed = result.bytes_freed
        q_removed = result.quarantine_removed
    rows = [_row(d) for d in decisions]
    q_doomed = [d.entry for d in gc.quarantine if not d.keep]
    q_bytes = sum(e.bytes for e in (q_removed if yes else q_doomed))
    q_note = (f"{'removed' if yes else 'would remove'} {len(q_removed if yes else q_doomed)} of "
              f"{len(gc.quarantine)} quarantined copies ({format_bytes(q_bytes)}) under {base / '.quarantine'}"
              if gc.quarantine else "")
    if json_out:
        doc = {"root": str(base), "dry_run": not yes, "keep_last": keep_last, "keep_within_s": within,
               "versions": rows, "removable": len(doomed), "reclaimable_bytes": reclaimable,
               "removed": removed, "skipped": skipped, "bytes_freed": freed,
               "stale_catalog_rows": ["/".join(k) for k in stale],
               "quarantine": [{"path": str(d.entry.path), "dataset": d.entry.dataset, "stage": d.entry.stage,
                               "version": d.entry.version, "bytes": d.entry.bytes,
                               "quarantined_at": time.strftime("%Y-%m-%d %H:%M", time.localtime(
                                   d.entry.quarantined_at)),
                               "action": "keep" if d.keep else "remove", "reason": d.reason}
                              for d in gc.quarantine],
               "quarantine_removed": [str(e.path) for e in q_removed]}
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    if not rows:
        _err.print(f"no artifacts under {base}" + (f"; {'dropped' if yes else 'found'} {len(stale)} catalog rows "
                                                   "of missing directories" if stale else ""), highlight=False)
        if q_note:
            _out.print(q_note, highlight=False)
        return
    for name in dict.fromkeys(r["dataset"] for r in rows):  # one table per dataset, in order
        table = Table(title=f"{name}" + ("" if yes else " (dry run)"), title_justify="left")
        for column in ("stage", "version", "size", "last used", "action", "reason"):
            table.add_column(column, overflow="fold", no_wrap=column in ("version", "size", "last used"),
                             justify="right" if column == "size" else "left")
        for r in (r for r in rows if r["dataset"] == name):
            action = "[green]keep[/]" if r["action"] == "keep" else "[bold red]remove[/]"
            table.add_row(r["stage"], r["version"], format_bytes(r["bytes"]), r["last_used"], action, r["reason"])
        _out.print(table)
    if not yes:
        stale_note = f"; {len(stale)} catalog rows point at missing directories" if stale else ""
        _out.print(f"{len(doomed)} of {len(rows)} versions removable, {format_bytes(reclaimable)}{stale_note}; "
                   "run again with --yes to remove them", highlight=False)
        if q_note:
            _out.print(q_note, highlight=False)
        return
    stale_note = f"; dropped {len(stale)} catalog rows of missing directories" if stale else ""
    _out.print(f"removed {len(removed)} versions, freed {format_bytes(freed)}{stale_note}", highlight=False)
    for s in skipped:
        _out.print(f"left {s['artifact']}: {s['why']}", highlight=False)
    if q_note:
        _out.print(q_note, highlight=False)
