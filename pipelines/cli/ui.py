"""``strata ui``: the Dagster UI (webserver and daemon) on a data root's run history, in its own process group.

It runs :mod:`pipelines.cli.dagster_dev`, what ``dg dev -w workspace.yaml`` runs, not the superseded
``dagster dev`` (which prints a deprecation warning on every start).

The workspace file at the repository root (``workspace.yaml``) is used when present, else the definitions module;
:mod:`pipelines.cli.ui_process` runs the server and stops its whole process group on Ctrl-C or a ``kill``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import typer

from pipelines.cli.options import ConfigOption, RootOption, dagster_home, err, fail, strata_paths

__all__ = ["ui"]

_REPO_ROOT = Path(__file__).resolve().parents[2]
_WORKSPACE = _REPO_ROOT / "workspace.yaml"
_UI_SHUTDOWN_S = 30


def ui(
    root: str | None = RootOption,
    port: int = typer.Option(3000, "--port", "-p", help="Dagster webserver port."),
    host: str = typer.Option("127.0.0.1", "--host", help="Dagster webserver host."),
    dataset: str | None = typer.Option(None, "--dataset", "-d", help="Default dataset of UI-launched runs."),
    config: Path | None = ConfigOption,
) -> None:
    """Start the Dagster UI (webserver and daemon, as `dg dev` does) on this data root's run history."""
    paths = strata_paths(root)
    with dagster_home(paths) as home:
        env = {**os.environ, "DAGSTER_HOME": str(home), "STRATA_HOME": str(paths.root)}
    if dataset:
        env["STRATA_DATASET"] = dataset
    if config:
        env["STRATA_CONFIG"] = str(config.resolve())
    target = ["-w", str(_WORKSPACE)] if _WORKSPACE.exists() else ["-m", "pipelines.orchestration.definitions"]
    command = [sys.executable, "-m", "pipelines.cli.dagster_dev", *target, "--port", str(port), "--host", host]
    err.print(f"Dagster UI on http://{host}:{port} (DAGSTER_HOME={home}); Ctrl-C to stop.", highlight=False)
    err.print(_ui_datasets_line(paths.root, env), highlight=False)
    from pipelines.cli.ui_process import run_process_group

    # its own process group: SIGINT/SIGTERM to `strata ui` stop the UI and everything it started
    code = run_process_group(command, env, _REPO_ROOT if _WORKSPACE.exists() else None, _UI_SHUTDOWN_S,
                             log=lambda message: err.print(message, highlight=False))
    raise typer.Exit(code)


def _ui_datasets_line(root: Path, env: Mapping[str, str]) -> str:
    """``datasets under ROOT: demo, tiny (default: demo)``: what the UI offers and defaults to."""
    from pipelines.orchestration.ui_datasets import default_config, materialized_datasets

    names = [d.name for d in materialized_datasets(root)]
    try:
        default = default_config(root, env.get("STRATA_CONFIG"), env.get("STRATA_DATASET")).dataset
    except (ValueError, FileNotFoundError) as e:
        fail(str(e), code=2)
    return f"datasets under {root}: {', '.join(names) or 'none yet'} (default: {default})"
