"""Dagster resources: which data root and which typed configuration a run uses, and who watches its progress.

The run's :class:`~pipelines.config.PipelineConfig` travels as typed Dagster config: :func:`settings_type`
mirrors every section and field of ``PipelineConfig`` (same names, types and descriptions) as ``dg.Config``
classes whose defaults are a base configuration, so the launchpad shows the effective values and a partial
run config (``resources: strata: config: settings: train: epochs: 3``) overrides just those fields. The names
that pick a method (``policy``, ``reorder.strategy``, ...) are plain strings here and are checked against
their registries when the step builds its ``PipelineConfig``.

Resources are chosen in one place, :func:`build_resources`: ``pipelines.orchestration.definitions`` calls it with the
environment's defaults (``STRATA_HOME``, ``STRATA_DATASET``, ``STRATA_CONFIG``) and the CLI with the
configuration it parsed, so the UI, a schedule and ``strata run`` resolve the same configuration.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import TYPE_CHECKING, Any, Literal, Union

import dagster as dg
from pydantic import BaseModel, Field, PrivateAttr, create_model

from pipelines.config import PipelineConfig, dagster_size_string, is_section, section_fields

if TYPE_CHECKING:
    from pipelines.core.paths import StrataPaths
    from pipelines.runner import StageRunner

__all__ = ["REPORTER_KEY", "RESOURCE_KEY", "RunReporter", "StrataResource", "build_resources", "run_config_settings",
           "settings_type"]

#: Resource key of :class:`StrataResource` (assets and checks take a parameter of this name).
RESOURCE_KEY = "strata"
#: Resource key of the :class:`RunReporter`.
REPORTER_KEY = "reporter"


def _dagster_type(annotation: Any) -> Any:
    """A Dagster-config type for a config field's annotation (``Literal`` -> ``str``, ``Annotated[T, ...]`` ->
    ``T``; the rest as is)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:  # a validated type (``Bytes``): its base type; PipelineConfig validates
        return _dagster_type(typing.get_args(annotation)[0])
    if origin is Literal:
        return type(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _dagster_type(args[0]) | None if len(args) == 1 else annotation
    return annotation


def _section_type(name: str, section: Any) -> type[dg.Config]:
    fields: dict[str, Any] = {}
    for field_name, info in section_fields(section).items():
        value = getattr(section, field_name)
        if is_section(value):
            nested = _section_type(f"{name}_{field_name}", value)
            fields[field_name] = (nested, Field(default_factory=nested, description=f"The {field_name} section."))
            continue
        default = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        kind = _dagster_type(info.annotation)
        if dagster_size_string(info):  # "2G" in the launchpad; PipelineConfig parses it
            kind, default = str | None, None if default is None else str(default)
        fields[field_name] = (kind, Field(default=default, description=info.description))
    return create_model(f"{name.title().replace('_', '')}Settings", __base__=dg.Config, **fields)


def run_config_settings(cfg: PipelineConfig) -> dict[str, Any]:
    """``cfg`` as the ``settings`` of a run config: ``cfg.to_dict()`` with sizes as strings (their launchpad type)."""
    data = cfg.to_dict()

    def stringify(section: Any, values: dict[str, Any]) -> None:
        for name, info in section_fields(section).items():
            value = getattr(section, name)
            if is_section(value):
                stringify(value, values[name])
            elif dagster_size_string(info) and values[name] is not None:
                values[name] = str(values[name])

    stringify(cfg, data)
    return data


@functools.lru_cache(maxsize=16)
def _settings_type_cached(base_json: str) -> type[dg.Config]:
    return _section_type("strata", PipelineConfig.model_validate_json(base_json))


def settings_type(base: PipelineConfig) -> type[dg.Config]:
    """``dg.Config`` classes mirroring ``PipelineConfig``, with ``base``'s values as their defaults."""
    return _settings_type_cached(base.model_dump_json())


class StrataResource(dg.ConfigurableResource):
    """The data root and the run's typed configuration (``settings``: every section of ``PipelineConfig``)."""

    root: str | None = Field(default=None, description="Data root; None means $STRATA_HOME, else ./strata_data.")
    settings: dg.Config = Field(default_factory=lambda: settings_type(PipelineConfig())(),
                                description="The run's configuration (see `strata config show`).")
    _runner: StageRunner | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Claim an untagged run for this process and recover after killed runs.

        ``strata run`` tags its Dagster run with its owner (``strata/owner.*``) and recovers before it starts;
        a run launched from the UI, a schedule or a sensor is tagged here, by its run worker, so that a later
        run reports it failed if its process is killed (:mod:`pipelines.ops.recovery`), and recovers here too
        (stale temp dirs and orphaned MLflow and Dagster runs of dead owners). Only an in-process run worker
        claims its run: the step processes of a multiprocess run come and go while their run lives on.
        """
        import multiprocessing

        from pipelines.ops.recovery import DAGSTER_OWNER_PREFIX, recover
        from storage_kernels.owner import Owner

        run, instance = context.dagster_run, context.instance
        if run is None or instance is None or multiprocessing.parent_process() is not None:
            return
        if Owner.from_tags(dict(run.tags), DAGSTER_OWNER_PREFIX) is not None:
            return  # the CLI's run: tagged and recovered before it started
        instance.add_run_tags(run.run_id, Owner.me().tags(DAGSTER_OWNER_PREFIX))
        message = recover(self.paths(), instance).message()
        if message and context.log is not None:
            context.log.info(message)

    def pipeline_config(self) -> PipelineConfig:
        """The validated configuration of this run (``ValueError`` naming the bad setting otherwise)."""
        return PipelineConfig.validated(self.settings.model_dump())

    def paths(self) -> StrataPaths:
        """Every location under the data root (created if missing)."""
        from pipelines.core.paths import StrataPaths

        return StrataPaths.at(self.root)

    def runner(self, log: Any = None) -> StageRunner:
        """This run's :class:`~pipelines.runner.StageRunner` (warnings go to ``log``, the calling step's).

        Dagster builds a resource once per run and process, so the steps that share a process share the
        runner: a stage is resolved (its source opened, its version computed) once per run there, and steps
        in other processes resolve their own.
        """
        from pipelines.runner import StageRunner

        def warn(stage: str, result: Any) -> None:
            if log is not None:
                log.warning(f"upstream '{stage}' had no artifact for this configuration: built {result.version} "
                            f"outside its asset (materialize '{stage}' to record it in Dagster)")

        if self._runner is None:
            from pipelines.orchestration.ui_datasets import record_last_run

            cfg, paths = self.pipeline_config(), self.paths()
            record_last_run(paths.root, cfg)  # the UI and its schedule default to the last dataset run
            self._runner = StageRunner(cfg, paths.store())
        self._runner.on_upstream_built = warn
        return self._runner


def _resource_for(base: PipelineConfig, root: str | None) -> StrataResource:
    settings = settings_type(base)
    cls = create_model("StrataResource", __base__=StrataResource,
                       settings=(settings, Field(default_factory=settings, description="The run's configuration.")))
    return cls(root=root)


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


def build_resources(root: str | None = None, config: PipelineConfig | None = None,
                    reporter: RunReporter | None = None) -> dict[str, object]:
    """The resource dict every Strata job runs with (the only place resources are chosen)."""
    return {
        RESOURCE_KEY: _resource_for(config if config is not None else PipelineConfig(), root),
        REPORTER_KEY: reporter if reporter is not None else RunReporter(),
    }
