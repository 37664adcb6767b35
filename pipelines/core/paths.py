"""Where Strata keeps things: the data root and the paths derived from it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from storage_kernels.catalog import Catalog
from storage_kernels.store import ArtifactStore

__all__ = ["StrataPaths", "existing_root", "resolve_root"]

DEFAULT_ROOT = "strata_data"


def resolve_root(root: str | Path | None = None) -> Path:
    """``--root`` if given, else ``$STRATA_HOME``, else ``./strata_data``; returned absolute."""
    chosen = root or os.environ.get("STRATA_HOME") or DEFAULT_ROOT
    return Path(chosen).expanduser().resolve()


def existing_root(root: str | Path | None = None, dataset: str | None = None) -> Path:
    """:func:`resolve_root`, which must be a directory, for commands that only read or tidy a root (``verify``,
    ``gc``); ``dataset``, when given, must name a dataset directory (no path, pattern or hidden name).
    ``ValueError`` naming the option otherwise (the CLI prints it and exits 2)."""
    base = resolve_root(root)
    if not base.is_dir():
        raise ValueError(f"'--root' expected a directory (got {base})")
    if dataset is not None and (not dataset or dataset.startswith(".") or "/" in dataset or "*" in dataset):
        raise ValueError(f"'--dataset' expected a dataset directory name (got {dataset!r})")
    return base


@dataclass(frozen=True)
class StrataPaths:
    """Every location under one data root (artifacts, catalog, MLflow, Dagster home)."""

    root: Path

    @classmethod
    def at(cls, root: str | Path | None = None) -> StrataPaths:
        path = resolve_root(root)
        path.mkdir(parents=True, exist_ok=True)
        return cls(path)

    @property
    def catalog_path(self) -> Path:
        return self.root / "catalog.duckdb"

    @property
    def mlflow_dir(self) -> Path:
        return self.root / "mlflow"

    @property
    def mlflow_tracking_uri(self) -> str:
        return f"sqlite:///{self.mlflow_dir / 'mlflow.db'}"

    @property
    def mlflow_artifact_root(self) -> str:
        return (self.mlflow_dir / "artifacts").as_uri()

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster_home"

    def store(self) -> ArtifactStore:
        return ArtifactStore(self.root)

    def catalog(self) -> Catalog:
        """The root's catalog; a write that finds it damaged rebuilds it from the manifests and goes on."""
        return Catalog(self.catalog_path, heal_from=self.root)
