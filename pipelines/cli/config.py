"""``strata config show``: the effective configuration a run would use, with every default.

One block per setting, ``key = value`` with its description wrapped and indented below it, so that it reads at
80 columns and through a pipe (the console's width: the terminal's, else ``COLUMNS``, else 80).
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import typer

from pipelines.cli.options import ConfigOption, DatasetOption, SetOption, load_config, out

__all__ = ["config_app", "settings_lines"]

config_app = typer.Typer(help="Show the configuration a run would use.", no_args_is_help=True)

_EFFECT = {True: "rebuilds: yes", False: "rebuilds: no", "selected": "rebuilds: if used"}
#: What the tags after a value mean (printed once, above the settings).
_LEGEND = ("rebuilds: whether the setting changes its stage's artifact version ('if used': only for the method that "
          "reads it). (default: X) marks a setting that differs from its default. --json prints the values alone.")
_INDENT = "    "


def settings_lines(rows: Iterable[Mapping[str, Any]], width: int) -> list[str]:
    """Plain lines for :func:`pipelines.config.describe_settings` rows, none wider than ``width`` (at least 40).

    Each setting is ``key = value  [rebuilds: ...]`` (``(default: X)`` added where the value differs), its
    description wrapped below with an indent; a ``[section]`` line (and a blank one) starts each section.
    """
    width = max(40, width)
    lines: list[str] = []
    section = ""
    for row in rows:
        head = str(row["key"]).rpartition(".")[0]
        if head != section:
            section = head
            lines += ["", f"[{head}]"]
        value = json.dumps(row["value"])
        changed = row["value"] != row["default"]
        tags = (f"(default: {json.dumps(row['default'])})  " if changed else "") + f"[{_EFFECT[row['artifact']]}]"
        lines += textwrap.wrap(f"{row['key']} = {value}  {tags}", width, subsequent_indent=_INDENT * 2,
                               break_on_hyphens=False)
        lines += textwrap.wrap(str(row["description"]), width, initial_indent=_INDENT, subsequent_indent=_INDENT,
                               break_on_hyphens=False)
    return lines


@config_app.command("show")
def config_show(
    dataset: str | None = DatasetOption,
    config: Path | None = ConfigOption,
    overrides: list[str] | None = SetOption,
    json_out: bool = typer.Option(False, "--json", help="Print the effective configuration as JSON."),
) -> None:
    """Print the effective configuration (file, then --set, then --dataset) with every default."""
    from pipelines.config import describe_settings

    cfg = load_config(dataset, config, overrides)
    if json_out:
        sys.stdout.write(json.dumps(cfg.to_dict()) + "\n")
        return
    out.print(f"Effective configuration ({cfg.dataset_name})", markup=False, highlight=False)
    lines = [*textwrap.wrap(_LEGEND, max(40, out.width)), "", *settings_lines(describe_settings(cfg), out.width)]
    for line in lines:
        out.print(line, markup=False, highlight=False)
