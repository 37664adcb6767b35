"""The ``strata`` command line: run the asset graph through Dagster, open the UIs, inspect the catalog.

Results go to stdout (``--json``: exactly one JSON document, or one JSON object per line for ``catalog ls``);
progress, logs and errors go to stderr. An error is one line, ``error: '<what>' expected <...> (got <...>)``, and
exit code 2 for bad settings, inputs and environment, 1 for a bug (:mod:`pipelines.core.errors`), also when it
is raised inside a stage; ``strata --debug`` shows the traceback, ``run --verbose`` adds Dagster's logs too.

This module is the typer app and its callback; every group of verbs lives in its own module and is registered
here, in the order ``strata --help`` lists them:

- :mod:`pipelines.cli.run`: ``run`` and the stage verbs (``ingest`` .. ``export``);
- :mod:`pipelines.cli.ui`: ``ui``; :mod:`pipelines.cli.datasets`: ``datasets``; :mod:`pipelines.cli.bench`:
  ``bench``;
- :mod:`pipelines.cli.catalog`, :mod:`pipelines.cli.config`, :mod:`pipelines.cli.models`: the ``catalog``,
  ``config`` and ``models`` groups; ``verify`` and ``gc`` come from :mod:`pipelines.ops`.

What they share (consoles, options, config loading) is in :mod:`pipelines.cli.options`, the progress displays
in :mod:`pipelines.cli.progress`, and the handling of errors that escape a command in :mod:`pipelines.cli.errors`.
"""

from __future__ import annotations

import typer

from pipelines.cli.bench import bench
from pipelines.cli.catalog import catalog_app
from pipelines.cli.config import config_app
from pipelines.cli.datasets import datasets
from pipelines.cli.disk import disk_profile_command
from pipelines.cli.errors import StrataGroup
from pipelines.cli.models import models_app
from pipelines.cli.run import register_stage_commands, run
from pipelines.cli.ui import ui
from pipelines.ops.gc import command as gc_command
from pipelines.ops.verify import command as verify_command

__all__ = ["app"]

app = typer.Typer(
    cls=StrataGroup,  # an exception escaping a command: one line on stderr, exit 2 (known) or 1
    name="strata",
    help="Out-of-core GNN training: Dagster-staged artifacts, a C storage engine, MLflow tracking.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _main(ctx: typer.Context, debug: bool = typer.Option(
        False, "--debug", help="Show the full traceback of an error (also STRATA_DEBUG=1).")) -> None:
    """Out-of-core GNN training: Dagster-staged artifacts, a C storage engine, MLflow tracking."""
    ctx.obj = {"debug": debug}


# the order of `strata --help`: commands (stage verbs in their own panel), then the groups
app.command("verify")(verify_command)
app.command("gc")(gc_command)
app.command()(run)
register_stage_commands(app)
app.command()(ui)
app.command()(datasets)
app.command()(bench)
app.command("disk-profile")(disk_profile_command)
app.add_typer(catalog_app, name="catalog")
app.add_typer(config_app, name="config")
app.add_typer(models_app, name="models")
