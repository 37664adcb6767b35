"""Links into the MLflow UI, for Dagster metadata (the run that trained a model, the registered version).

The MLflow UI is a separate server (``mlflow ui --backend-store-uri sqlite:///ROOT/mlflow/mlflow.db``, port
5000 by default); ``STRATA_MLFLOW_UI`` names its base URL when it runs elsewhere.
"""

from __future__ import annotations

import os
from urllib.parse import quote

from pipelines.core.formatting import Url

__all__ = ["DEFAULT_MLFLOW_UI", "MLFLOW_UI_ENV", "mlflow_model_version_url", "mlflow_run_url", "mlflow_ui_base"]

MLFLOW_UI_ENV = "STRATA_MLFLOW_UI"
DEFAULT_MLFLOW_UI = "http://127.0.0.1:5000"


def mlflow_ui_base() -> str:
    """``$STRATA_MLFLOW_UI`` or ``http://127.0.0.1:5000``, without a trailing slash."""
    return (os.environ.get(MLFLOW_UI_ENV) or DEFAULT_MLFLOW_UI).rstrip("/")


def mlflow_run_url(run_id: str, experiment_id: str | None = None) -> Url:
    """The run's page (``#/runs/ID`` redirects to its experiment when the experiment id is unknown)."""
    where = f"runs/{quote(run_id)}"
    if experiment_id:
        where = f"experiments/{quote(str(experiment_id))}/{where}"
    return Url(f"{mlflow_ui_base()}/#/{where}")


def mlflow_model_version_url(name: str, version: int | str) -> Url:
    """The registered model version's page."""
    return Url(f"{mlflow_ui_base()}/#/models/{quote(name)}/versions/{quote(str(version))}")
