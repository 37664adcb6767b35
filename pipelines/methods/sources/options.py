"""Parsers of source option values: ``--set ingest.options.KEY=VALUE`` arrives as a string (or typed from a
file), and each source kind declares which parser each of its options takes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["OptionParser", "parse_bool", "parse_float", "parse_int", "parse_str"]

OptionParser = Callable[[str, Any], Any]  # (name for errors, raw value) -> typed value

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_int(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"'{key}' expected an integer (got {value!r})")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip().replace("_", ""))
    except ValueError as e:
        raise ValueError(f"'{key}' expected an integer (got {value!r})") from e


def parse_float(key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"'{key}' expected a number (got {value!r})")
    try:
        return float(str(value).strip())
    except ValueError as e:
        raise ValueError(f"'{key}' expected a number (got {value!r})") from e


def parse_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE | _FALSE:
        return text in _TRUE
    raise ValueError(f"'{key}' expected one of true/false/1/0/yes/no (got {value!r})")


def parse_str(key: str, value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise ValueError(f"'{key}' expected a non-empty value (got {value!r})")
    return text
