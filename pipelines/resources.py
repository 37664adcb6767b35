"""Dagster resources: which data root and which configuration a run uses, and who watches its progress.

Resources are chosen in one place, :func:`build_resources`: ``pipelines.definitions`` calls it with the
environment's defaults (``STRATA_HOME``, ``STRATA_DATASET``, ``STRATA_CONFIG``) and the CLI calls it with its
flags, so the UI, a schedule and ``strata run`` resolve the same :class:`~pipelines.config.PipelineConfig`.

``pipelines.settings`` (and through it ``storage_kernels``) is imported lazily so that loading the Dagster
definitions never depends on the storage layer being importable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field

from pipelines.config import PipelineConfig

if TYPE_CHECKING:
    from pipelines.settings import StrataPaths

__all__ = ["RESOURCE_KEY", "REPORTER_KEY", "RunReporter", "StrataResource", "build_resources"]

#: Resource key of :class:`StrataResource` (assets and checks take a parameter of this name).
RESOURCE_KEY = "strata"
#: Resource key of the :class:`RunReporter`.
REPORTER_KEY = "reporter"


class StrataResource(dg.ConfigurableResource):
    """The data root and the run's configuration (file, then ``key=value`` overrides, then dataset)."""

    root: str | None = Field(
        default=None, description="Data root; None means $STRATA_HOME, else ./strata_data."
    )
    config_file: str | None = Field(default=None, description="YAML or JSON PipelineConfig file.")
    overrides: list[str] = Field(
        default_factory=list, description="'section.key=value' overrides, applied after the file."
    )
    dataset: str | None = Field(
        default=None, description="Built-in dataset name or source spec; wins over the file's 'dataset'."
    )

    def pipeline_config(self) -> PipelineConfig:
        """The validated configuration of this run (ValueError naming the bad key otherwise)."""
        return PipelineConfig.load(self.config_file, list(self.overrides), dataset=self.dataset)

    def paths(self) -> StrataPaths:
        """Every location under the data root (created if missing)."""
        from pipelines.settings import StrataPaths

        return StrataPaths.at(self.root)


class RunReporter:
    """Receives stage and check events while a run executes; this default ignores them.

    Dagster's own event log already records everything; a reporter exists so that the CLI can draw live
    progress of an in-process run. Methods must be cheap and must not raise.
    """

    def stage_started(self, stage: str) -> None:
        """``stage``'s asset began."""

    def stage_progress(self, stage: str, description: str, done: int, total: int) -> None:
        """A stage function reported progress (``total <= 0``: unknown)."""

    def stage_finished(self, stage: str, version: str, reused: bool, seconds: float) -> None:
        """``stage``'s asset materialized ``version`` (``reused``: it already existed)."""

    def stage_failed(self, stage: str, error: BaseException) -> None:
        """``stage``'s asset raised ``error`` (Dagster records and re-raises it)."""

    def check_finished(self, stage: str, check: str, passed: bool, detail: str) -> None:
        """An asset check of ``stage`` finished."""


def build_resources(
    root: str | None = None,
    config_file: str | None = None,
    overrides: Sequence[str] = (),
    dataset: str | None = None,
    reporter: RunReporter | None = None,
) -> dict[str, object]:
    """The resource dict every Strata job runs with (the only place resources are chosen)."""
    return {
        RESOURCE_KEY: StrataResource(
            root=root, config_file=config_file, overrides=list(overrides), dataset=dataset
        ),
        REPORTER_KEY: reporter if reporter is not None else RunReporter(),
    }
