"""``strata plan --explain``: why ``policy=auto`` chose what it chose, candidate by candidate.

The plan stage records the choice in its artifact's ``auto`` statistic
(:mod:`pipelines.methods.policies.auto.policy`); this prints it: the memory the run may use, the disk profile,
the compute probe, and per candidate its predicted reads, I/O, compute and epoch time, its resident memory, or
why it was refused or left out. ``--json`` puts the same record in the summary under ``auto``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from pipelines.cli.options import out
from pipelines.cli.stage_options import StageOptions, option_param
from pipelines.core.formatting import format_bytes

__all__ = ["PLAN_OPTIONS", "choice_line", "explain_table", "forced_line"]


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def explain_table(record: Mapping[str, Any]) -> Table:
    """One row per candidate of ``auto``'s record (the plan artifact's ``auto`` statistic)."""
    table = Table(title=f"policy=auto chose {record['policy']}", title_justify="left")
    for column in ("candidate", "epoch s", "io s", "compute s", "read/epoch", "requests", "resident", "threads",
                   "note"):
        table.add_column(column, justify="left" if column in ("candidate", "note") else "right",
                         overflow="fold")
    chosen = (record["policy"], record["settings"])
    for c in record["candidates"]:
        settings = ", ".join(f"{k}={v}" for k, v in c["settings"].items())
        name = c["policy"] + (f" ({settings})" if settings else "")
        reads = c.get("reads") or {}
        mark = (c["policy"], {**c["settings"], **{k: v for k, v in chosen[1].items() if k.startswith("train.")}})
        note = c["refused"] or ("chosen" if mark == chosen else reads.get("model", ""))
        table.add_row(name, _seconds(c["epoch_s"]), _seconds(c["io_s"] if reads else None),
                      _seconds(c["compute_s"] if reads else None),
                      format_bytes(reads["bytes"]) if reads else "", f"{reads['requests']:,}" if reads else "",
                      format_bytes(c["resident_bytes"]), str(c["threads"] or ""), note)
    for name, why in record.get("left_out", {}).items():
        table.add_row(name, "", "", "", "", "", "", "", f"left out: {why}")
    return table


def _per_batch(compute: Mapping[str, Any]) -> str:
    return ", ".join(f"{t} threads {float(s) * 1e3:.1f} ms" for t, s in compute["seconds_per_batch"].items())


def _context(record: Mapping[str, Any]) -> str:
    memory, disk, compute = record["memory"], record["disk"], record["compute"]
    per_batch = _per_batch(compute)
    return (f"memory: {format_bytes(memory['usable_bytes'])} usable ({memory['how']}); features "
            f"{format_bytes(memory['feature_bytes'])}\n"
            f"disk: {disk['seq_read_bytes_s'] / 1e6:,.0f} MB/s sequential, {disk['random_iops']:,.0f} random 4 KiB "
            f"reads/s (direct I/O: {disk['direct_io']}; `strata disk-profile --refresh` measures again)\n"
            f"compute ({compute['device']}): {per_batch} a batch, {compute['batches_per_epoch']} batches an epoch")


def choice_line(record: Mapping[str, Any]) -> str:
    """``auto -> diskgnn (predicted 0.69 s an epoch; strata plan --explain)`` for a run's summary."""
    settings = ", ".join(f"{k}={v}" for k, v in record["settings"].items())
    return (f"policy auto chose {record['policy']}" + (f" ({settings})" if settings else "")
            + f": predicted {record['predicted_epoch_s']:.3f} s an epoch (`strata plan --explain` says why)")


def forced_line(stats: Mapping[str, Any]) -> str:
    """What a forced policy's plan chose: only its compute threads (the plan's ``threads`` statistic)."""
    line = (f"policy {stats.get('policy', '?')} was forced (policy=auto plans by predicted epoch time and would say "
            "why it chose)")
    threads = stats.get("threads")
    if threads:
        per_batch = _per_batch(threads["compute"])
        line += (f"; compute threads {threads['train.num_threads']}: {threads['how']} ({per_batch} a batch, "
                 f"{threads['compute']['device']})")
    return line


def _explain_hook(explain: bool) -> Callable[[dict[str, Any]], None] | None:
    if not explain:
        return None

    def after(summary: dict[str, Any]) -> None:
        plan = next((a for a in summary["artifacts"] if a["stage"] == "plan"), None)
        if plan is None:
            raise RuntimeError("'plan' expected among the run's artifacts (got none)")
        stats = json.loads((Path(plan["path"]) / "manifest.json").read_text()).get("stats", {})
        record = stats.get("auto")
        if not record:
            out.print(forced_line(stats), highlight=False)
            return
        summary["auto"] = record
        out.print(_context(record), highlight=False)
        out.print(explain_table(record))

    return after


PLAN_OPTIONS = StageOptions(
    params={"explain": option_param(
        "explain", typer.Option(False, "--explain", help="Show why policy=auto chose its policy: every candidate's "
                                "predicted epoch, reads and memory."), bool)},
    hook=_explain_hook,
)
