"""What every ``strata`` verb shares: the consoles, the common options, config and data-root loading, errors.

Results go to :data:`out` (stdout), progress, logs and errors to :data:`err` (stderr); :func:`fail` prints
``error: ...`` there and exits. :func:`dagster_home` and :func:`quiet_libraries` set up the process for the
verbs that run Dagster or MLflow (``run`` and the stage verbs, ``ui``, ``bench``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from pipelines.config import PipelineConfig

if TYPE_CHECKING:
    from pipelines.core.paths import StrataPaths

__all__ = ["ConfigOption", "DatasetOption", "RootOption", "SetOption", "dagster_home", "err", "fail", "fmt",
           "human_bytes", "load_config", "out", "quiet_libraries", "strata_paths"]

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

_DAGSTER_YAML = "telemetry:\n  enabled: false\n"
_QUIET_LOGGERS = ("mlflow", "alembic", "urllib3", "git")

RootOption = typer.Option(None, "--root", help="Data root (default: $STRATA_HOME, else ./strata_data).")
SetOption = typer.Option(None, "--set", help="Override a setting: section.key=value (repeatable).")
ConfigOption = typer.Option(None, "--config", "-c", help="YAML or JSON PipelineConfig file.", dir_okay=False)
DatasetOption = typer.Option(None, "--dataset", "-d", help="Built-in name or source spec (see `strata datasets`); "
                             "default: the config file's.")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: <message>`` on stderr and exit with ``code`` (2: bad input, the CLI's contract)."""
    err.print(Text.assemble(("error: ", "bold red"), message), highlight=False)
    raise typer.Exit(code)


def load_config(dataset: str | None, config: Path | None, overrides: list[str] | None) -> PipelineConfig:
    """Validate the configuration up front: bad ``--set`` keys or values exit 2 with the config's message."""
    try:
        return PipelineConfig.load(config, overrides or [], dataset=dataset)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e), code=2)


def strata_paths(root: str | None, create: bool = True) -> StrataPaths:
    """The data root's paths (``--root``, else ``$STRATA_HOME``, else ./strata_data), created unless ``create`` is
    False; a file in its place exits 2."""
    from pipelines.core.paths import StrataPaths, resolve_root

    resolved = resolve_root(root)
    if resolved.exists() and not resolved.is_dir():
        fail(f"'--root' expected a directory (got a file: {resolved})", code=2)
    return StrataPaths.at(root) if create else StrataPaths(resolved)


@contextlib.contextmanager
def dagster_home(paths: StrataPaths) -> Iterator[Path]:
    """Point ``DAGSTER_HOME`` at ``<root>/dagster_home`` (created, telemetry off) for the block's duration."""
    home = paths.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(_DAGSTER_YAML)
    previous = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        yield home
    finally:
        if previous is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = previous


@contextlib.contextmanager
def quiet_libraries(verbose: bool) -> Iterator[None]:
    """Without ``--verbose``, keep library chatter (MLflow migrations, Dagster beta warnings) off the screen."""
    if verbose:
        yield
        return
    saved = {name: logging.getLogger(name).level for name in _QUIET_LOGGERS}
    saved_env = os.environ.get("MLFLOW_LOGGING_LEVEL")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read when MLflow is first imported
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
        if saved_env is None:
            os.environ.pop("MLFLOW_LOGGING_LEVEL", None)


def human_bytes(n: Any) -> str:
    """A byte count for a table (:func:`pipelines.core.formatting.format_bytes`); "" for anything but a number."""
    from pipelines.core.formatting import format_bytes

    return format_bytes(n) if isinstance(n, (int, float)) else ""


def fmt(value: Any) -> str:
    """A table cell: a float to 4 significant digits, None as "", anything else as ``str``."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)
