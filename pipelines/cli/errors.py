"""The CLI's last line of defence: any exception a command lets through becomes one clear line on stderr.

The exit-code contract (:mod:`pipelines.core.errors`, docs/usage/cli.md): bad settings, inputs and
environment -- a configuration or input file, a setting out of range, a file or directory that cannot be used
(permissions, a full disk, a read-only filesystem), a corrupted artifact, a database that cannot be written --
print ``error: '<what>' expected <...> (got <...>)`` and exit with code 2; anything else (a bug) prints one
line naming the exception type and exits 1. A traceback is shown only with ``strata --debug`` (or
``STRATA_DEBUG=1``). ``strata run`` applies the same rules to an error raised inside a stage
(:mod:`pipelines.cli.run`).
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from typing import Any

import click
import typer
from typer.core import TyperGroup

from pipelines.core.errors import EXIT_KNOWN, EXIT_UNKNOWN, describe, describe_remote, exit_code_of

__all__ = ["EXIT_KNOWN", "EXIT_UNKNOWN", "StrataGroup", "describe", "describe_remote", "exit_code_of", "is_debug"]


#: ``strata --debug`` of the command running now (typer's own copy of click keeps its context to itself)
_DEBUG: ContextVar[bool] = ContextVar("strata_debug", default=False)


def is_debug(ctx: click.Context | None = None) -> bool:
    """Whether tracebacks are wanted (``strata --debug`` or ``STRATA_DEBUG=1``); without ``ctx``, for the
    command :class:`StrataGroup` is running."""
    if os.environ.get("STRATA_DEBUG", "") not in ("", "0"):
        return True
    if ctx is None:
        return _DEBUG.get()
    root = ctx.find_root()
    return bool(root.params.get("debug") or (root.obj or {}).get("debug"))


class StrataGroup(TyperGroup):
    """The ``strata`` command group: turns escaping exceptions into one line and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        token = _DEBUG.set(is_debug(ctx))
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, click.exceptions.Exit, click.ClickException, click.exceptions.Abort,
                KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:
            if is_debug(ctx) or type(exc).__module__.split(".")[0] in ("typer", "click"):
                raise  # usage errors (BadParameter, ...) and exits are the CLI framework's to report
            message, code = describe(exc)
            click.echo(f"error: {message}", err=True)
            raise typer.Exit(code) from None
        finally:
            _DEBUG.reset(token)
