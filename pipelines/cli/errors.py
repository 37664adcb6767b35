"""The CLI's last line of defence: any exception a command lets through becomes one clear line on stderr.

Known problems -- a bad configuration or input (``ValueError`` and the project's error types), a file or
directory that cannot be used (permissions, a full disk, a read-only filesystem, a file where a directory is
expected), a database that cannot be written (SQLite inside MLflow or Dagster, DuckDB) -- print
``error: <what> expected <...> (got <...>)`` and exit with code 2. Anything else prints one line naming the
exception type and exits 1. A traceback is shown only with ``strata --debug`` (or ``STRATA_DEBUG=1``).

Messages never include the contents of a file: OS errors are described by their errno and path, database
errors by their first line.
"""

from __future__ import annotations

import errno
import os
import pickle
from typing import Any

import click
import typer
from typer.core import TyperGroup

__all__ = ["EXIT_KNOWN", "EXIT_UNKNOWN", "StrataGroup", "describe", "exit_code_of", "is_debug"]

EXIT_KNOWN = 2
EXIT_UNKNOWN = 1
_MAX_CHARS = 400

# errno -> what the path was expected to offer
_EXPECTED = {
    errno.EACCES: "permission to use it", errno.EPERM: "permission to use it",
    errno.ENOSPC: "free space on its filesystem", errno.EDQUOT: "free quota on its filesystem",
    errno.EROFS: "a writable filesystem", errno.ENOTDIR: "a directory on the way (a file is in the way)",
    errno.EEXIST: "no file in the way", errno.EISDIR: "a file (got a directory)",
    errno.ENOENT: "an existing path", errno.ENAMETOOLONG: "a shorter path", errno.EMFILE: "free file descriptors",
    errno.EIO: "a readable device",
}
_DB_HINTS = (("disk is full", "free space on the disk"), ("readonly database", "a writable database file"),
             ("unable to open database", "a database file it can open"), ("locked", "the database unlocked"),
             ("disk i/o error", "a readable disk"))


def is_debug(ctx: click.Context | None = None) -> bool:
    """Whether tracebacks are wanted (``strata --debug`` or ``STRATA_DEBUG=1``)."""
    if os.environ.get("STRATA_DEBUG", "") not in ("", "0"):
        return True
    root = ctx.find_root() if ctx is not None else None
    return bool(root is not None and (root.params.get("debug") or (root.obj or {}).get("debug")))


def _first_line(text: str) -> str:
    line = next((part.strip() for part in str(text).splitlines() if part.strip()), "")
    return line if len(line) <= _MAX_CHARS else line[: _MAX_CHARS - 3] + "..."


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return seen


def _os_error(e: OSError) -> str | None:
    if e.errno is None or e.errno not in errno.errorcode:
        return _first_line(str(e)) or None  # the project's own FileNotFoundError("'x' expected ...")
    where = e.filename if e.filename is not None else "a path"
    name = errno.errorcode[e.errno]
    return f"'{where}' expected {_EXPECTED.get(e.errno, 'a usable path')} (got {name}: {e.strerror})"


def _database_error(e: BaseException) -> str | None:
    """SQLite (MLflow's and Dagster's stores, through SQLAlchemy) and DuckDB errors: their first line."""
    module = type(e).__module__ or ""
    database = module.startswith(("sqlite3", "sqlalchemy", "duckdb", "_duckdb"))
    if not (database or type(e).__name__ == "OperationalError"):
        return None
    orig = getattr(e, "orig", None) or e
    text = _first_line(str(orig)).lower()
    expected = next((hint for key, hint in _DB_HINTS if key in text), "a working database")
    return f"'database' expected {expected} (got {type(orig).__name__}: {_first_line(str(orig))})"


def describe(exc: BaseException) -> tuple[str, int]:
    """``(one line, exit code)`` for an exception escaping a command."""
    known = (ValueError, OSError, pickle.UnpicklingError, RuntimeError, KeyError)
    own = _first_line(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc))
    if isinstance(exc, known) and own.startswith("'"):  # the project's own message already names what and where
        return own, EXIT_KNOWN
    chain = _chain(exc)
    for e in chain:  # the root cause that says most: an OS or database error anywhere in the chain
        if isinstance(e, OSError) and e.errno is not None:
            message = _os_error(e)
            if message:
                return message, EXIT_KNOWN
    for e in chain:
        message = _database_error(e)
        if message:
            return message, EXIT_KNOWN
    if isinstance(exc, known) and own:
        return own, EXIT_KNOWN
    return (f"internal error: {type(exc).__name__}: {_first_line(str(exc))} (rerun with `strata --debug ...` "
            "for the traceback)", EXIT_UNKNOWN)


#: Exception classes of bad input or settings when raised with the project's message form ("'what' expected ...");
#: a corrupted artifact (``ArtifactCorrupted``) is not among them: the next run rebuilds it.
_INPUT_ERRORS = frozenset({"ValueError", "FileNotFoundError", "NotADirectoryError", "IsADirectoryError",
                           "PermissionError", "UnpicklingError", "OSError"})


def exit_code_of(class_name: str, message: str) -> int:
    """The exit code of an error known only by its class name and message (a failed Dagster step's):
    :data:`EXIT_KNOWN` for bad input or settings (one of the plain input error classes whose message is the
    project's ``'what' expected ...``), else :data:`EXIT_UNKNOWN`."""
    known = class_name in _INPUT_ERRORS and message.lstrip().startswith("'")
    return EXIT_KNOWN if known else EXIT_UNKNOWN


class StrataGroup(TyperGroup):
    """The ``strata`` command group: turns escaping exceptions into one line and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
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
