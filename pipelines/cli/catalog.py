"""``strata catalog``: list, show and rebuild the DuckDB artifact catalog of a data root."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import typer
from rich.json import JSON
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from pipelines.cli.options import RootOption, err, fail, fmt, human_bytes, out, strata_paths

__all__ = ["catalog_app"]

catalog_app = typer.Typer(help="Inspect the DuckDB artifact catalog.", no_args_is_help=True)


def _catalog_row(artifact: Mapping[str, Any]) -> dict[str, Any]:
    return {k: artifact.get(k) for k in ("dataset", "stage", "version", "path", "bytes", "created_at",
                                          "format_version", "library_version", "params", "stats")}


@catalog_app.command("ls")
def catalog_ls(
    dataset: str | None = typer.Option(None, "--dataset", "-d", help="Only this dataset (directory name)."),
    stage: str | None = typer.Option(None, "--stage", "-s", help="Only this stage (graph, ordering, ...)."),
    root: str | None = RootOption,
    json_out: bool = typer.Option(False, "--json", help="One JSON object per line per artifact."),
) -> None:
    """List the artifacts in the catalog."""
    paths = strata_paths(root, create=False)
    artifacts = paths.catalog().list_artifacts(dataset, stage)
    if json_out:
        for a in artifacts:
            sys.stdout.write(json.dumps(_catalog_row(a), default=str) + "\n")
        sys.stdout.flush()
        return
    if not artifacts:
        err.print(f"no artifacts in {paths.catalog_path}", highlight=False)
        return
    table = Table()
    for column in ("dataset", "stage", "version", "size", "created_at", "path"):
        table.add_column(column, justify="right" if column == "size" else "left",
                         overflow="fold", no_wrap=column in ("version", "size"))
    for a in artifacts:
        table.add_row(a["dataset"], a["stage"], a["version"], human_bytes(a["bytes"]), str(a["created_at"]),
                      str(a["path"]))
    out.print(table)


@catalog_app.command("show")
def catalog_show(
    version: str = typer.Argument(..., help="Artifact version (or a unique prefix)."),
    root: str | None = RootOption,
    json_out: bool = typer.Option(False, "--json", help="Print the record as JSON."),
) -> None:
    """Show one artifact: manifest fields, files, lineage and metrics."""
    paths = strata_paths(root, create=False)
    try:
        record = paths.catalog().get(version)
    except ValueError as e:
        fail(str(e))
    if record is None:
        fail(f"'version' expected an artifact in {paths.catalog_path} (got {version!r}; try `strata catalog ls`)")
    if json_out:
        sys.stdout.write(json.dumps(record, default=str) + "\n")
        return
    head = Table.grid(padding=(0, 2))
    for key in ("dataset", "stage", "version", "path", "created_at", "format_version", "library_version"):
        head.add_row(f"[bold]{key}[/]", str(record.get(key)))
    head.add_row("[bold]bytes[/]", f"{record['bytes']} ({human_bytes(record['bytes'])})")
    out.print(Panel(head, title=f"{record['dataset']}/{record['stage']}/{record['version']}", expand=False))
    out.print(Panel(JSON.from_data(record.get("params") or {}), title="params", expand=False))

    stats = Table(title="stats", title_justify="left")
    stats.add_column("key")
    stats.add_column("value", justify="right")
    for key, value in sorted((record.get("stats") or {}).items()):
        stats.add_row(key, fmt(value))
    out.print(stats)

    files = Table(title="files", title_justify="left")
    for column in ("name", "dtype", "shape", "size", "checksum"):
        files.add_column(column)
    for f in record.get("files", []):
        files.add_row(f["name"], str(f.get("dtype") or "raw"), str(f.get("shape") or ""),
                      human_bytes(f.get("bytes")), str(f.get("checksum", ""))[:24])
    out.print(files)

    lineage = Table(title="lineage", title_justify="left")
    lineage.add_column("direction")
    lineage.add_column("stage")
    lineage.add_column("version")
    for stage, upstream_version in (record.get("lineage") or {}).items():
        lineage.add_row("upstream", stage, upstream_version)
    for d in record.get("downstream", []):
        lineage.add_row("downstream", d["stage"], d["version"])
    out.print(lineage)

    if record.get("metrics"):
        metrics = Table(title="metrics", title_justify="left")
        for column in ("key", "value", "step", "recorded_at"):
            metrics.add_column(column)
        for m in record["metrics"]:
            metrics.add_row(m["key"], fmt(m["value"]), fmt(m.get("step")), str(m.get("recorded_at")))
        out.print(metrics)


@catalog_app.command("predictions")
def catalog_predictions(
    node_ids: list[str] = typer.Argument(..., help="Node ids as the source names them (integers; the original "
                                         "string ids of a graph with named nodes)."),
    dataset: str = typer.Option(..., "--dataset", "-d", help="The dataset (a built-in name or source spec)."),
    version: str | None = typer.Option(None, "--version", help="A predict artifact version (default: the newest)."),
    root: str | None = RootOption,
    json_out: bool = typer.Option(False, "--json", help="One JSON object per line per node found."),
) -> None:
    """Look nodes up in the predictions of `strata predict`: the predict artifact the catalog records (the
    newest), queried with DuckDB (read_parquet over its predictions.parquet). Ids not found are named on stderr;
    none found exits 2."""
    from pipelines.config import dataset_slug
    from pipelines.stages.predict import catalogued_predictions, lookup

    paths = strata_paths(root, create=False)
    try:
        path = catalogued_predictions(paths.catalog(), dataset_slug(dataset), version)
        ids: list[int] | list[str] = [int(i) for i in node_ids] if all(_is_int(i) for i in node_ids) else node_ids
        table = lookup(path, ids)
    except (LookupError, ValueError) as e:
        fail(str(e), code=2)
    rows = table.to_pylist()
    key = "node_id" if isinstance(ids[0], int) else "original_id"
    missing = [i for i in ids if i not in {r[key] for r in rows}]
    if missing:
        err.print(f"not in {path}: {', '.join(map(str, missing[:20]))}", highlight=False)
    if not rows:
        fail(f"'node_ids' expected nodes of {dataset} (got none of {len(ids)} in {path})", code=2)
    if json_out:
        for row in rows:
            sys.stdout.write(json.dumps(row, default=str) + "\n")
        sys.stdout.flush()
        return
    shown = Table(title=str(path), title_justify="left")
    for column in table.column_names:
        shown.add_column(column, overflow="fold")
    for row in rows:
        shown.add_row(*(_cell(v) for v in row.values()))
    out.print(shown)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _cell(value: Any) -> str:
    if isinstance(value, list):  # an embedding: its first values
        head = ", ".join(f"{v:.4g}" for v in value[:4])
        return f"[{head}{', ...' if len(value) > 4 else ''}] ({len(value)})"
    return fmt(value)


@catalog_app.command("rebuild")
def catalog_rebuild(root: str | None = RootOption) -> None:
    """Re-create the catalog's artifacts, files and lineage from the manifests; bad manifests are skipped and
    reported, metrics are kept and restored from the manifests of artifacts that have none. A damaged catalog
    file (not a DuckDB database, or corrupt) is moved aside to catalog.duckdb.damaged-<time> first."""
    paths = strata_paths(root)
    try:
        report = paths.catalog().rebuild_report(paths.root)
    except ValueError as e:
        fail(str(e), code=2)
    if report.moved_aside is not None:
        err.print(Text.assemble(("damaged: ", "bold yellow"), f"{paths.catalog_path} ({report.damage}) moved to "
                                f"{report.moved_aside}"), highlight=False)
    count = report.indexed
    for _path, problem in report.skipped:
        err.print(Text.assemble(("skipped: ", "bold yellow"), problem), highlight=False)
    message = f"indexed {count} artifact{'s' if count != 1 else ''} in {paths.catalog_path}"
    if report.metrics_restored:
        message += f"; restored {report.metrics_restored} metric rows from the manifests"
    if report.skipped:
        message += f"; skipped {len(report.skipped)} bad manifest(s) (`strata verify --repair` quarantines them)"
    out.print(message, highlight=False)
