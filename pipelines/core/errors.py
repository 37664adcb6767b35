"""What an error means to the user: one line naming the file or setting and the problem, and an exit code.

The contract (docs/usage/cli.md, RELIABILITY.md): :data:`EXIT_KNOWN` (2) for bad settings, inputs and
environment, :data:`EXIT_UNKNOWN` (1) for bugs. Known problems are

- the project's own errors: a ``ValueError``, ``OSError``, ``KeyError``, ``RuntimeError`` or
  ``pickle.UnpicklingError`` whose message has the form ``'what' expected ... (got ...)`` (every check of a
  setting, an input file or an artifact raises one; a corrupted artifact's ``ArtifactCorrupted`` too: the disk
  changed it, and the next run rebuilds it), raised as is or as the cause (``raise ... from``) of another error;
- pydantic's validation errors, named by setting: ``'train.lr' expected a finite number (got inf)``;
- OS errors anywhere in the chain (a full disk, a read-only filesystem, a missing file): errno and path;
- database errors (SQLite in MLflow or Dagster, DuckDB): their first line.

Anything else is a bug: ``internal error: <type>: <message> (rerun with `strata --debug ...` ...)``. Lines never
quote the contents of a file: OS errors are described by errno and path, database errors by their first line.

:func:`describe` takes the exception itself; :func:`describe_remote` an error known only by class names and
messages (a Dagster step's recorded failure). Below the CLI so that the Dagster assets can log the same line.
"""

from __future__ import annotations

import ast
import errno
import pickle
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["EXIT_KNOWN", "EXIT_UNKNOWN", "describe", "describe_remote", "exit_code_of", "explain_validation"]

EXIT_KNOWN = 2
EXIT_UNKNOWN = 1
_MAX_CHARS = 1000  # one line still: longer ones lose their middle

# errno -> what the path was expected to offer
_EXPECTED = {
    errno.EACCES: "permission to use it", errno.EPERM: "permission to use it",
    errno.ENOSPC: "free space on its filesystem", errno.EDQUOT: "free quota on its filesystem",
    errno.EROFS: "a writable filesystem", errno.ENOTDIR: "a directory on the way (a file is in the way)",
    errno.EEXIST: "no file in the way", errno.EISDIR: "a file (got a directory)",
    errno.ENOENT: "an existing path", errno.ENAMETOOLONG: "a shorter path", errno.EMFILE: "free file descriptors",
    errno.EIO: "a readable device", errno.EFBIG: "a filesystem that takes files this large",
}
_DB_HINTS = (("disk is full", "free space on the disk"), ("readonly database", "a writable database file"),
             ("unable to open database", "a database file it can open"), ("locked", "the database unlocked"),
             ("disk i/o error", "a readable disk"))
_KNOWN_TYPES = (ValueError, OSError, pickle.UnpicklingError, RuntimeError, KeyError)
#: Class names of the project's error types (``'what' expected ...``) when only the name is known.
_INPUT_ERRORS = frozenset({"ValueError", "FileNotFoundError", "NotADirectoryError", "IsADirectoryError",
                           "PermissionError", "UnpicklingError", "OSError", "KeyError", "RuntimeError",
                           "ArtifactCorrupted", "FileExistsError"})
_OS_ERRORS = frozenset({"OSError", "IOError", "FileNotFoundError", "NotADirectoryError", "IsADirectoryError",
                        "PermissionError", "FileExistsError", "BlockingIOError", "TimeoutError"})
_ERRNO = re.compile(r"^\[Errno (\d+)\] (.+?)(?:: '(.*?)'(?: -> '.*')?)?$")


def _first_line(text: str) -> str:
    """The first non-empty line, at most ``_MAX_CHARS``: a longer one loses its middle, not its ``(got ...)``."""
    line = next((part.strip() for part in str(text).splitlines() if part.strip()), "")
    if len(line) <= _MAX_CHARS:
        return line
    tail = _MAX_CHARS // 4
    return line[: _MAX_CHARS - tail - 5] + " ... " + line[-tail:]


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception it was raised from or while handling."""
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and the errors it was explicitly raised from (``raise ... from``), not those it met while
    handling another: a bug raised in an ``except`` block is still a bug."""
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__
    return seen


def _os_error(e: OSError) -> str | None:
    if e.errno is None or e.errno not in errno.errorcode:
        return _first_line(str(e)) or None  # the project's own FileNotFoundError("'x' expected ...")
    where = e.filename if e.filename is not None else "a path"
    name = errno.errorcode[e.errno]
    return f"'{where}' expected {_EXPECTED.get(e.errno, 'a usable path')} (got {name}: {e.strerror})"


def _database_line(class_name: str, text: str) -> str:
    lower = text.lower()
    expected = next((hint for key, hint in _DB_HINTS if key in lower), "a working database")
    return f"'database' expected {expected} (got {class_name}: {text})"


def _database_error(e: BaseException) -> str | None:
    """SQLite (MLflow's and Dagster's stores, through SQLAlchemy) and DuckDB errors: their first line."""
    module = type(e).__module__ or ""
    database = module.startswith(("sqlite3", "sqlalchemy", "duckdb", "_duckdb"))
    if not (database or type(e).__name__ == "OperationalError"):
        return None
    orig = getattr(e, "orig", None) or e
    return _database_line(type(orig).__name__, _first_line(str(orig)))


def _own_message(exc: BaseException) -> str:
    """The message as raised (a ``KeyError``'s str is the repr of its argument)."""
    return _first_line(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc))


def _internal(class_name: str, message: str, where: str | None) -> str:
    place = f" in {where}" if where else ""
    return (f"internal error{place}: {class_name}: {_first_line(message)} (rerun with `strata --debug ...` for "
            "the traceback)")


def _is_validation_error(exc: BaseException) -> bool:
    return type(exc).__name__ == "ValidationError" and (type(exc).__module__ or "").startswith("pydantic")


def describe(exc: BaseException, where: str | None = None) -> tuple[str, int]:
    """``(one line, exit code)`` for ``exc``; ``where`` (e.g. ``"stage 'train'"``) is named in the line of an
    internal error."""
    for e in _causes(exc):  # the project's own message says most: it names the setting or file
        if _is_validation_error(e):
            return explain_validation(e.errors()), EXIT_KNOWN  # type: ignore[attr-defined]
        own = _own_message(e)
        if isinstance(e, _KNOWN_TYPES) and own.startswith("'"):
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
    return _internal(type(exc).__name__, str(exc), where), EXIT_UNKNOWN


def _remote_message(class_name: str, message: str) -> str:
    """The first line of a recorded message without its ``Class: `` prefix; a ``KeyError``'s argument."""
    text = _first_line(message)
    head, sep, rest = text.partition(": ")
    if sep and head.split(".")[-1] == class_name:
        text = rest.strip()
    if class_name == "KeyError" and text[:1] in ("'", '"'):
        try:
            text = str(ast.literal_eval(text))
        except (ValueError, SyntaxError):
            pass
    return text


def describe_remote(chain: Sequence[tuple[str, str]], where: str | None = None) -> tuple[str, int]:
    """``(one line, exit code)`` for an error known only by its class name and message and those of its causes,
    outermost first (a failed Dagster step's ``SerializableErrorInfo``): the same rules as :func:`describe`."""
    errors = [(name, _remote_message(name, message)) for name, message in chain]
    for name, text in errors:
        if name in _INPUT_ERRORS and text.startswith("'"):
            return text, EXIT_KNOWN
    for name, text in errors:
        match = _ERRNO.match(text)
        if name in _OS_ERRORS and match:
            line = _os_error(OSError(int(match[1]), match[2], match[3]))
            if line:
                return line, EXIT_KNOWN
    for name, text in errors:
        if name in ("OperationalError", "DatabaseError", "IOException"):
            return _database_line(name, text), EXIT_KNOWN
    name, text = errors[0] if errors else ("Exception", "unknown error")
    return _internal(name, text, where), EXIT_UNKNOWN


def exit_code_of(class_name: str, message: str) -> int:
    """The exit code of an error known only by its class name and message (:func:`describe_remote`)."""
    return describe_remote([(class_name, message)])[1]


# ------------------------------------------------------------------------------------------ settings


def explain_validation(errors: Iterable[Mapping[str, Any]]) -> str:
    """pydantic's errors (``ValidationError.errors()``) as one line: ``'section.key' expected ... (got ...)``,
    joined by ``; ``."""
    return "; ".join(_explain(error) for error in errors)


# pydantic's constraint errors, as "expected >= 1 (got 0)": error type -> (operator, key of its ctx)
_BOUNDS = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"), "less_than": ("<", "lt"),
           "less_than_equal": ("<=", "le"), "string_too_short": ("a length >=", "min_length"),
           "string_too_long": ("a length <=", "max_length"), "string_pattern_mismatch": ("a match of", "pattern")}
# a section's own check names its class ("'TrainConfig.lr' expected ..."): the user set 'train.lr'
_CLASS_FIELD = re.compile(r"^'[A-Z][A-Za-z]*Config\.(\w+)'")


def _explain(error: Mapping[str, Any]) -> str:
    """One pydantic error as ``'section.key' expected ... (got ...)``."""
    loc = ".".join(str(part) for part in error.get("loc", ()))
    kind, message = error.get("type", ""), str(error.get("msg", ""))
    got = error.get("input")
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        return f"'{loc}' expected a known setting (got an unknown key; `strata config show` lists them)"
    if kind == "finite_number":  # inf or NaN, given as a number or as text
        return f"'{loc}' expected a finite number (got {got})"
    if kind == "value_error":
        text = message.removeprefix("Value error, ")
        if loc:
            text = _CLASS_FIELD.sub(lambda m: f"'{loc}.{m[1]}'", text, count=1)
        return text if text.startswith("'") else f"'{loc}' expected {text}"
    bound = _BOUNDS.get(kind)
    ctx = error.get("ctx") or {}
    if bound is not None and bound[1] in ctx:
        return f"'{loc}' expected {bound[0]} {ctx[bound[1]]} (got {got!r})"
    return f"'{loc}' expected {message[:1].lower() + message[1:]} (got {got!r})"
