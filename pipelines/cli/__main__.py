"""``python -m pipelines.cli`` (and ``torchrun ... -m pipelines.cli``): the ``strata`` command."""

from pipelines.cli.app import app

if __name__ == "__main__":
    app()
