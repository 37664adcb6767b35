"""Plain-text formatting shared by the CLI, the stage summaries and the Dagster metadata (no Dagster here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["Markdown", "Url", "format_bytes", "markdown_table"]


class Markdown(str):
    """Text to show as Markdown (Dagster renders it as such; the CLI prints it as is)."""


class Url(str):
    """A link (Dagster shows it as a clickable URL; the CLI prints it as is)."""


def format_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def markdown_table(rows: list[Mapping[str, Any]] | Mapping[str, Any], columns: list[str] | None = None) -> Markdown:
    """A Markdown table: a mapping gives ``key | value`` rows; a list of mappings one row each."""
    if isinstance(rows, Mapping):
        rows = [{"key": k, "value": v} for k, v in rows.items()]
        columns = ["key", "value"]
    columns = columns or (list(rows[0]) if rows else [])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return Markdown("\n".join(lines))
