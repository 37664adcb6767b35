"""``strata datasets``: the built-in datasets and the source spec kinds a ``--dataset`` may name."""

from __future__ import annotations

import json
import sys

import typer
from rich.table import Table

from pipelines.cli.options import out

__all__ = ["datasets"]


def datasets(json_out: bool = typer.Option(False, "--json", help="Print the list as JSON.")) -> None:
    """List the built-in datasets and the source spec kinds (with their options)."""
    from pipelines.methods.sources.spec import BUILTIN_DATASETS, SOURCE_KINDS

    if json_out:
        doc = {
            "builtin": {name: {"description": d.description, "params": d.params, "spec": d.spec}
                        for name, d in BUILTIN_DATASETS.items()},
            "kinds": {name: {"syntax": k.syntax, "options": list(k.options), "help": k.help}
                      for name, k in SOURCE_KINDS.items()},
        }
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    builtin = Table(title="Built-in datasets (--dataset NAME)", title_justify="left")
    for column in ("name", "description", "parameters"):
        builtin.add_column(column, overflow="fold")
    for name, d in BUILTIN_DATASETS.items():
        builtin.add_row(name, d.description, ", ".join(f"{k}={v}" for k, v in d.params.items()))
    out.print(builtin)
    kinds = Table(title="Source specs (--dataset KIND:...; options via --set ingest.options.KEY=VALUE)",
                  title_justify="left")
    for column in ("kind", "syntax", "options", "description"):
        kinds.add_column(column, overflow="fold")
    for name, k in SOURCE_KINDS.items():
        kinds.add_row(name, k.syntax, ", ".join(k.options), k.help)
    out.print(kinds)
