"""``strata config show``: the effective configuration a run would use, with every default."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from pipelines.cli.options import ConfigOption, DatasetOption, SetOption, load_config, out

__all__ = ["config_app"]

config_app = typer.Typer(help="Show the configuration a run would use.", no_args_is_help=True)


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
    table = Table(title=f"Effective configuration ({cfg.dataset_name})", title_justify="left")
    for column in ("setting", "value", "default", "artifact"):
        table.add_column(column, no_wrap=True)
    table.add_column("description", overflow="fold", ratio=1)
    for row in describe_settings(cfg):
        changed = row["value"] != row["default"]
        value = f"[bold]{escape(json.dumps(row['value']))}[/]" if changed else escape(json.dumps(row["value"]))
        effect = {True: "yes", False: "no", "selected": "if used"}[row["artifact"]]
        table.add_row(row["key"], value, escape(json.dumps(row["default"])), effect, escape(row["description"]))
    out.print(table)
    out.print("artifact: whether the setting changes its stage's artifact version ('if used': only for the method "
              "that reads it). Bold: differs from the default.", highlight=False)
