"""``strata bench``: the training suite (every policy under one memory budget), the locality suite (every
reorder strategy and partition method on one graph) and the stages suite (every stage confined on its own),
each written to a JSON report and shown as tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from pipelines.cli.options import (
    ConfigOption,
    RootOption,
    SetOption,
    err,
    fmt,
    human_bytes,
    load_config,
    out,
    quiet_libraries,
    strata_paths,
)
from pipelines.cli.progress import ProgressCallback

__all__ = ["bench"]


def bench(
    dataset: str = typer.Option(..., "--dataset", "-d", help="Built-in name or source spec."),
    out_path: Path = typer.Option(..., "--out", "-o", help="Where to write the JSON report.", dir_okay=False),
    root: str | None = RootOption,
    config: Path | None = ConfigOption,
    overrides: list[str] | None = SetOption,
    suite: str = typer.Option(
        "training", "--suite", help="training: every policy under one memory budget; locality: reorder and "
        "partition; stages: every stage in its own process and memory cgroup (time, memory, disk)."
    ),
    stages: str | None = typer.Option(
        None, "--stages", help="stages: comma-separated stage names (default: every stage, ingest to predict)."),
    policies: str = typer.Option(
        "all", "--policies", help="training: 'all' or a comma-separated list of policies (the names --policy takes)."
    ),
    memory_budget: str | None = typer.Option(
        None, "--memory-budget",
        help="training, stages: memory for the graph's data (caches, buffers, page cache), e.g. 512M or 2G; each "
        "run is confined to it plus the working set by a memory cgroup (needs root).",
    ),
    memory_overhead: str | None = typer.Option(
        None, "--memory-overhead",
        help="training: the working set beyond the budget (default: measured on the naive policy); stages: "
        "the interpreter and libraries (default 768M).",
    ),
    repeats: int = typer.Option(1, "--repeats", help="training: alternating repeats per policy (median reported).",
                                min=1),
    timeout: float | None = typer.Option(
        None, "--timeout", help="training: seconds one policy's run may take; past it the run is stopped and "
        "reported as timed out, with the bytes it had read.", min=1),
    eval_batches: int | None = typer.Option(
        None, "--eval-batches", help="training: evaluate on the first N validation and test batches only (timing "
        "runs on large graphs; the accuracies are then those of that subset).", min=1),
    strategies: str | None = typer.Option(
        None, "--strategies", help="locality: comma-separated reorder strategies (default: all)."
    ),
    methods: str | None = typer.Option(
        None, "--methods",
        help="locality: comma-separated partition methods (default: range, metis, fennel, grem; fennel-single and "
        "grem-single run them without the multilevel scheme).",
    ),
    partition_order: str = typer.Option(
        "community", "--partition-order",
        help="locality: the ordering partitioners stream (community: Rabbit order, as the pipeline does after "
        "reorder.strategy=community; identity: ingested ids).",
    ),
) -> None:
    """Benchmarks. ``training`` (default): train once per feature path (in memory, naive direct reads, packed
    store) and compare. ``locality``: every reorder strategy and partition method on one graph."""
    cfg = load_config(dataset, config, overrides)
    paths = strata_paths(root)
    if suite == "locality":
        from pipelines.bench.locality import REORDER_STRATEGIES

        if partition_order not in REORDER_STRATEGIES:
            err.print(f"'--partition-order' expected one of {', '.join(REORDER_STRATEGIES)} (got {partition_order!r})")
            raise typer.Exit(2)
        _bench_locality(cfg, paths, out_path, _names(strategies, "strategies"), _names(methods, "methods"),
                        partition_order)
        return
    if suite == "stages":
        _bench_stages(cfg, paths, out_path, stages, memory_budget, memory_overhead)
        return
    if suite != "training":
        err.print(f"'--suite' expected training, locality or stages (got {suite!r})")
        raise typer.Exit(2)
    from pipelines.bench.policies import BenchError, resolve_policies, run_bench
    from pipelines.core.confine import parse_bytes

    try:
        names = resolve_policies(policies)
        budget = parse_bytes(memory_budget) if memory_budget is not None else None
        overhead = parse_bytes(memory_overhead, "--memory-overhead") if memory_overhead is not None else None
    except ValueError as e:
        err.print(str(e))
        raise typer.Exit(2) from None
    try:
        with quiet_libraries(verbose=False), ProgressCallback(err) as progress:
            report = run_bench(cfg, paths, out_path, progress=progress, policies=names, memory_budget=budget,
                               memory_overhead=overhead, repeats=repeats, timeout_s=timeout,
                               eval_batches=eval_batches)
    except BenchError as e:
        err.print(str(e))
        raise typer.Exit(1) from None
    table = Table(title=f"strata bench: {report.get('dataset', cfg.dataset)}", title_justify="left")
    columns = ("epoch_s", "compute_threads", "bytes_read", "read_requests", "read_amplification", "test_acc",
               "hit_rate_predicted", "hit_rate_measured", "peak_cgroup_mb", "disk_blowup", "speedup_vs_naive")
    table.add_column("policy")
    for column in columns:
        table.add_column(column, justify="right")
    for name, row in report.get("policies", {}).items():
        cells = [human_bytes(row.get(c)) if c.startswith("bytes") else fmt(row.get(c)) for c in columns]
        table.add_row(name, *cells)
    # eleven numeric columns: wider than a terminal rather than truncated to "…"
    Console(width=max(out.width, 180), soft_wrap=True).print(table)
    auto = report.get("auto")
    if auto:
        ratios = ", ".join(f"{c['policy']}{' ' + str(c['settings']) if c['settings'] else ''} "
                           f"{fmt(c['predicted_over_measured'])}"
                           for c in auto["candidates"] if c["predicted_over_measured"] is not None)
        out.print(f"auto chose {auto['chosen']} {auto['settings']}: epoch {fmt(auto['epoch_s'])} s, "
                  f"{fmt(auto['over_best'])}x the best policy's ({auto['best_policy']}, "
                  f"{fmt(auto['best_epoch_s'])} s); "
                  f"predicted/measured epoch: {ratios or 'none measured'}", highlight=False)
    disk = report.get("disk", {})
    out.print(f"memory budget: {human_bytes(report.get('memory_budget'))}, confinement: {report.get('confinement')}; "
              f"disk sequential read: {fmt(disk.get('seq_read_mb_s'))} MB/s (direct I/O: {disk.get('direct_io')}); "
              f"report written to {out_path} (plot: {Path(out_path).with_suffix('.png')})", highlight=False)


def _bench_stages(cfg: Any, paths: Any, out_path: Path, stages: str | None, memory_budget: str | None,
                  memory_overhead: str | None) -> None:
    from pipelines.bench.policies import BenchError
    from pipelines.bench.stages import run_stage_bench
    from pipelines.core.confine import parse_bytes
    from pipelines.graph import STAGE_NAMES

    try:
        names = tuple(n.strip() for n in stages.split(",") if n.strip()) if stages else STAGE_NAMES
        budget = parse_bytes(memory_budget) if memory_budget is not None else None
        overhead = parse_bytes(memory_overhead, "--memory-overhead") if memory_overhead is not None else None
        with quiet_libraries(verbose=False), ProgressCallback(err) as progress:
            report = run_stage_bench(cfg, paths, out_path, progress=progress, memory_budget=budget,
                                     memory_overhead=overhead, stages=names)
    except ValueError as e:
        err.print(str(e))
        raise typer.Exit(2) from None
    except BenchError as e:
        err.print(str(e))
        raise typer.Exit(1) from None
    table = Table(title=f"strata bench --suite stages: {report['dataset']}", title_justify="left")
    columns = ("stage_s", "wall_s", "peak_anon_mb", "peak_cgroup_mb", "oom_kills", "artifact_bytes",
               "write_bytes", "disk_high_water_bytes")
    table.add_column("stage")
    for column in columns:
        table.add_column(column, justify="right")
    for name, row in report["stages"].items():
        if row.get("error"):
            table.add_row(name, f"error: {row['error']}", *([""] * (len(columns) - 1)))
            continue
        table.add_row(name, *(human_bytes(row.get(c)) if c.endswith("bytes") else fmt(row.get(c)) for c in columns))
    Console(width=max(out.width, 140), soft_wrap=True).print(table)
    disk = report["disk"]
    out.print(f"cgroup limit: {human_bytes(report.get('cgroup_limit'))} ({report['confinement']}); artifacts "
              f"{human_bytes(disk.get('total_bytes'))} = {fmt(disk.get('total_over_features'))}x the feature file; "
              f"report written to {out_path}", highlight=False)


def _names(value: str | None, option: str) -> tuple[str, ...] | None:
    """Parse a comma-separated ``--strategies``/``--methods`` value, checking every name."""
    from pipelines.bench.locality import PARTITION_VARIANTS, REORDER_STRATEGIES

    if value is None:
        return None
    known = REORDER_STRATEGIES if option == "strategies" else PARTITION_VARIANTS
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        err.print(f"'--{option}' expected a comma-separated list of {', '.join(known)} (got {value!r})")
        raise typer.Exit(2)
    return names


def _bench_locality(cfg: Any, paths: Any, out_path: Path, strategies: tuple[str, ...] | None,
                    methods: tuple[str, ...] | None, partition_order: str) -> None:
    from pipelines.bench.locality import PARTITION_METHODS, REORDER_STRATEGIES, run_locality_bench

    with quiet_libraries(verbose=False), ProgressCallback(err) as progress:
        report = run_locality_bench(cfg, paths, out_path, progress=progress,
                                    strategies=strategies or REORDER_STRATEGIES,
                                    methods=methods or PARTITION_METHODS, partition_order=partition_order)
    graph = report["graph"]
    reorder_table = Table(title=f"reorder ({graph['nodes']:,} nodes, {graph['edges']:,} edges)",
                          title_justify="left")
    reorder_columns = ("time_s", "peak_rss_mb", "pages_per_batch", "pages_vs_random", "avg_edge_gap")
    _add_rows(reorder_table, "strategy", reorder_columns, report["reorder"])
    out.print(reorder_table)
    part_table = Table(title=f"partition (streaming the {report['settings']['partition_order']} order)",
                       title_justify="left")
    part_columns = ("time_s", "peak_rss_mb", "stage_extra_rss_mb", "edge_cut", "balance", "cut_vs_metis",
                    "memory_vs_metis")
    _add_rows(part_table, "method", part_columns, report["partition"])
    out.print(part_table)
    rr = report["redundancy"]
    out.print(f"redundancy ratio: random {fmt(rr['random'])}, partition ({rr['partition_method']}, "
              f"{rr['num_parts']} parts) {fmt(rr['partition'])}, change {fmt(rr.get('change'))}; "
              f"report written to {out_path}", highlight=False)


def _add_rows(table: Table, key: str, columns: tuple[str, ...], rows: dict[str, dict]) -> None:
    table.add_column(key, justify="left")
    for column in columns:
        table.add_column(column, justify="right")
    for name, row in rows.items():
        if "error" in row:
            table.add_row(name, f"error: {row['error']}", *([""] * (len(columns) - 1)))
        else:
            table.add_row(name, *(fmt(row.get(c)) for c in columns))
