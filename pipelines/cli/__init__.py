"""The ``strata`` command (typer): :data:`app`, the console script's entry point (``pipelines.cli:app``).

One module per group of verbs; ``python -m pipelines.cli`` runs it too (as ``torchrun ... -m pipelines.cli``).
"""

from pipelines.cli.app import app

__all__ = ["app"]
