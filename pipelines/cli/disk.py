"""``strata disk-profile``: the disk under a data root as ``policy=auto`` sees it (measured once, cached)."""

from __future__ import annotations

import json
import sys

import typer

from pipelines.cli.options import RootOption, out, strata_paths

__all__ = ["disk_profile_command"]


def disk_profile_command(root: str | None = RootOption, refresh: bool = typer.Option(
        False, "--refresh", help="Measure again (after moving the root, or if the disk was busy the first time)."),
        json_out: bool = typer.Option(False, "--json", help="Print the profile as JSON.")) -> None:
    """Show the data root's disk profile (sequential MB/s, random 4 KiB reads/s): what policy=auto predicts
    epoch times with. Measured on first use (a 256 MiB scratch file, a few seconds) and cached in the root."""
    from pipelines.core.disk_profile import disk_profile

    paths = strata_paths(root)
    profile = disk_profile(paths.root, refresh=refresh)
    if json_out:
        sys.stdout.write(json.dumps(profile.to_dict()) + "\n")
        return
    out.print(f"{paths.root}: {profile.describe()}; measured {profile.measured_at}", highlight=False)
