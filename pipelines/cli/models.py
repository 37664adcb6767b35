"""``strata models``: the MLflow model registry of a data root (list, show, promote, export).

Every registered version is an MLflow model (a pyfunc over the weights plus the ONNX flavor); ``export``
copies one out as a folder that ``mlflow.pyfunc.load_model(DIR)`` loads, or just its ``model.onnx``, after
checking each file against the digests recorded when the version was logged
(:mod:`pipelines.tracking.registry_digests`): a file that differs is refused (exit 2).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["models_app"]

models_app = typer.Typer(help="List, inspect, promote and export registered models (MLflow registry).",
                         no_args_is_help=True)

_out = Console(soft_wrap=True)
_err = Console(stderr=True, soft_wrap=True)

_Root = typer.Option(None, "--root", help="Data root (default: $STRATA_HOME, else ./strata_data).")
_Json = typer.Option(False, "--json", help="Print JSON on stdout.")
_Version = typer.Option(None, "--version", "-v", help="Version number or @alias (default: the champion).")


def _fail(message: str, code: int = 2) -> NoReturn:
    _err.print(Text.assemble(("error: ", "bold red"), message), highlight=False)
    raise typer.Exit(code)


def _client(root: str | None) -> Any:
    from pipelines.core.paths import StrataPaths, resolve_root
    from trainer.model_versions import registry_client

    paths = StrataPaths(resolve_root(root))
    if not (paths.mlflow_dir / "mlflow.db").exists():
        _fail(f"'root' expected an MLflow store at {paths.mlflow_dir / 'mlflow.db'} (got none: run "
              "`strata run` first)")
    return registry_client(paths.mlflow_tracking_uri)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if ms else ""


def _acc(value: float) -> str:
    return "" if value != value else f"{value:.4f}"  # NaN: no val_acc tag


def _version(client: Any, name: str, ref: str | None) -> Any:
    from trainer.model_versions import get_version

    try:
        return get_version(client, name, ref)
    except ValueError as e:
        _fail(str(e))


@models_app.command("ls")
def models_ls(root: str | None = _Root, json_out: bool = _Json) -> None:
    """List every registered model version: aliases, validation accuracy, run."""
    from trainer.model_versions import list_versions

    versions = list_versions(_client(root))
    if json_out:
        sys.stdout.write(json.dumps([v.to_dict() for v in versions]) + "\n")
        return
    if not versions:
        _err.print("no registered models (the export stage registers one per training run)", highlight=False)
        return
    table = Table()
    for column in ("model", "version", "aliases", "val_acc", "run", "created (UTC)"):
        table.add_column(column, justify="right" if column in ("version", "val_acc") else "left")
    for v in versions:
        table.add_row(v.name, str(v.version), ", ".join(v.aliases), _acc(v.val_acc), (v.run_id or "")[:12],
                      _when(v.created_ms))
    _out.print(table)


@models_app.command("show")
def models_show(name: str = typer.Argument(..., help="Registered model name (e.g. strata-tiny)."),
                version: str | None = _Version, root: str | None = _Root, json_out: bool = _Json) -> None:
    """Show one version: aliases, accuracy, its run's summary metrics, flavors and input signature."""
    import mlflow
    from mlflow.artifacts import download_artifacts

    client = _client(root)
    info = _version(client, name, version)
    run = client.get_run(info.run_id) if info.run_id else None
    metrics = {k: v for k, v in (run.data.metrics if run else {}).items()
               if k in ("best_val_acc", "test_acc", "mean_epoch_s", "best_epoch", "total_bytes_read")}
    with tempfile.TemporaryDirectory(prefix="strata-mlmodel-") as tmp:  # Model.load wants a local path
        model = mlflow.models.Model.load(download_artifacts(artifact_uri=f"{info.source}/MLmodel", dst_path=tmp))
    record = {**info.to_dict(), "metrics": metrics, "flavors": sorted(model.flavors),
              "inputs": (model.signature.inputs.input_names() if model.signature and model.signature.inputs
                         else list((model.metadata or {}).get("strata_subgraph_inputs", []))),  # or node_id
              "input_example": bool(model.saved_input_example_info),
              "run_name": run.info.run_name if run else None}
    if json_out:
        sys.stdout.write(json.dumps(record, default=str) + "\n")
        return
    grid = Table.grid(padding=(0, 2))
    for key in ("name", "version", "aliases", "val_acc", "uri", "run_id", "run_name", "source", "flavors",
                "inputs", "input_example", "metrics"):
        value = record[key]
        text = ", ".join(map(str, value)) if isinstance(value, list) else (
            ", ".join(f"{k}={v:.4g}" for k, v in value.items()) if isinstance(value, dict) else str(value))
        grid.add_row(f"[bold]{key}[/]", text)
    _out.print(grid)


@models_app.command("promote")
def models_promote(name: str = typer.Argument(..., help="Registered model name."),
                   version: int = typer.Argument(..., help="Version to make champion."),
                   force: bool = typer.Option(False, "--force", help="Skip the gate (accuracy above the "
                                              "champion's)."),
                   root: str | None = _Root) -> None:
    """Move the ``champion`` alias to VERSION if its validation accuracy beats the champion's (or --force)."""
    from trainer.model_versions import PromotionRefused, promote

    client = _client(root)
    try:
        previous = promote(client, name, version, force=force)
    except PromotionRefused as e:
        _fail(str(e))
    except ValueError as e:
        _fail(str(e))
    was = f"was version {previous}" if previous is not None else "no champion before"
    _out.print(f"{name}@champion -> version {version} ({was})", highlight=False)


@models_app.command("export")
def models_export(name: str = typer.Argument(..., help="Registered model name."),
                  out_dir: Path = typer.Argument(..., help="Folder to write (created; must be empty)."),
                  version: str | None = _Version,
                  onnx_only: bool = typer.Option(False, "--onnx", help="Write only model.onnx."),
                  root: str | None = _Root) -> None:
    """Copy a version out: the MLflow model folder (MLmodel, model.onnx, weights, example) or model.onnx.

    First every file is checked against the digests recorded when the version was logged: one that differs
    (or is missing, or was not logged) is refused with exit 2 and nothing is written. A version registered
    before digests is exported and called unverified."""
    from mlflow.artifacts import download_artifacts

    from pipelines.tracking.registry_digests import UNVERIFIED, compare, location, recorded

    client = _client(root)
    info = _version(client, name, version)
    if out_dir.exists() and any(out_dir.iterdir()):
        _fail(f"'{out_dir}' expected an empty or new folder (got one with files)")
    try:
        digests = recorded(info.tags)
    except ValueError as e:
        _fail(f"{info.uri}: {e}; nothing exported")
    with tempfile.TemporaryDirectory(prefix="strata-model-") as tmp:
        local = Path(download_artifacts(artifact_uri=info.source, dst_path=tmp))
        if onnx_only and not (local / "model.onnx").exists():
            _fail(f"'{info.uri}' expected a model.onnx (got files {sorted(p.name for p in local.iterdir())})")
        if digests is not None:  # what is handed out: the downloaded copy
            problems = compare(local, digests["source"], location(info.source).rstrip("/"),
                               only=["model.onnx"] if onnx_only else None)
            if problems:
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                _fail(f"{problems[0].line()}{more}: the registered copy of {info.uri} is not what was logged; "
                      "nothing exported (`strata verify` checks every version)", 2)
        out_dir.mkdir(parents=True, exist_ok=True)
        if onnx_only:
            shutil.copyfile(local / "model.onnx", out_dir / "model.onnx")
        else:
            for item in local.iterdir():
                target = out_dir / item.name
                shutil.copytree(item, target) if item.is_dir() else shutil.copyfile(item, target)
    files = sorted(p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*") if p.is_file())
    checked = "checked against its digests" if digests is not None else UNVERIFIED
    _out.print(f"{info.uri} -> {out_dir} ({len(files)} files, {checked})", highlight=False)
