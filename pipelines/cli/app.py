"""The ``strata`` command line: run the asset graph through Dagster, open the UIs, inspect the catalog.

Results go to stdout (``--json``: exactly one JSON document, or one JSON object per line for ``catalog ls``);
progress, logs and errors go to stderr. A failed run exits non-zero with the failing stage and its exception
text; ``--verbose`` adds Dagster's logs and the full traceback.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.json import JSON
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, Progress, ProgressColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from pipelines.cli.errors import StrataGroup
from pipelines.cli.models import models_app
from pipelines.config import PipelineConfig
from pipelines.ops.gc import command as gc_command
from pipelines.ops.verify import command as verify_command

if TYPE_CHECKING:
    import dagster as dg

    from pipelines.core.paths import StrataPaths

__all__ = ["app"]

app = typer.Typer(
    cls=StrataGroup,  # an exception escaping a command: one line on stderr, exit 2 (known) or 1
    name="strata",
    help="Out-of-core GNN training: Dagster-staged artifacts, a C storage engine, MLflow tracking.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
catalog_app = typer.Typer(help="Inspect the DuckDB artifact catalog.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")
config_app = typer.Typer(help="Show the configuration a run would use.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.command("verify")(verify_command)
app.command("gc")(gc_command)
app.add_typer(models_app, name="models")

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

_REPO_ROOT = Path(__file__).resolve().parents[2]
_WORKSPACE = _REPO_ROOT / "workspace.yaml"
_DAGSTER_YAML = "telemetry:\n  enabled: false\n"
_QUIET_LOGGERS = ("mlflow", "alembic", "urllib3", "git")
_UI_SHUTDOWN_S = 30

RootOption = typer.Option(None, "--root", help="Data root (default: $STRATA_HOME, else ./strata_data).")
SetOption = typer.Option(None, "--set", help="Override a setting: section.key=value (repeatable).")
ConfigOption = typer.Option(None, "--config", "-c", help="YAML or JSON PipelineConfig file.", dir_okay=False)


@app.callback()
def _main(ctx: typer.Context, debug: bool = typer.Option(
        False, "--debug", help="Show the full traceback of an error (also STRATA_DEBUG=1).")) -> None:
    """Out-of-core GNN training: Dagster-staged artifacts, a C storage engine, MLflow tracking."""
    ctx.obj = {"debug": debug}


# ------------------------------------------------------------------------------------------- helpers


def _fail(message: str, code: int = 1) -> NoReturn:
    err.print(Text.assemble(("error: ", "bold red"), message), highlight=False)
    raise typer.Exit(code)


def _load_config(dataset: str | None, config: Path | None, overrides: list[str] | None) -> PipelineConfig:
    """Validate the configuration up front: bad ``--set`` keys or values exit 2 with the config's message."""
    try:
        return PipelineConfig.load(config, overrides or [], dataset=dataset)
    except (ValueError, FileNotFoundError) as e:
        _fail(str(e), code=2)


def _paths(root: str | None, create: bool = True) -> StrataPaths:
    from pipelines.core.paths import StrataPaths, resolve_root

    resolved = resolve_root(root)
    if resolved.exists() and not resolved.is_dir():
        _fail(f"'--root' expected a directory (got a file: {resolved})", code=2)
    return StrataPaths.at(root) if create else StrataPaths(resolved)


@contextlib.contextmanager
def _dagster_home(paths: StrataPaths) -> Iterator[Path]:
    """Point ``DAGSTER_HOME`` at ``<root>/dagster_home`` (created, telemetry off) for the block's duration."""
    home = paths.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(_DAGSTER_YAML)
    previous = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        yield home
    finally:
        if previous is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = previous


@contextlib.contextmanager
def _quiet_libraries(verbose: bool) -> Iterator[None]:
    """Without ``--verbose``, keep library chatter (MLflow migrations, Dagster beta warnings) off the screen."""
    if verbose:
        yield
        return
    saved = {name: logging.getLogger(name).level for name in _QUIET_LOGGERS}
    saved_env = os.environ.get("MLFLOW_LOGGING_LEVEL")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read when MLflow is first imported
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
        if saved_env is None:
            os.environ.pop("MLFLOW_LOGGING_LEVEL", None)


def _stage_names() -> list[str]:
    from pipelines.graph import STAGE_NAMES

    return list(STAGE_NAMES)


def _human_bytes(n: Any) -> str:
    from pipelines.core.formatting import format_bytes

    return format_bytes(n) if isinstance(n, (int, float)) else ""


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


# ------------------------------------------------------------------------------------------ reporters
# Both implement pipelines.orchestration.resources.RunReporter's methods. They do not subclass it, so that commands
# which
# never run Dagster (datasets, catalog) do not pay for importing it.


class _LineReporter:
    """Plain one-line-per-event progress on stderr (``--json`` or a non-terminal stderr)."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __enter__(self) -> _LineReporter:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def stage_started(self, stage: str) -> None:
        return None

    def stage_progress(self, stage: str, description: str, done: int, total: int) -> None:
        return None

    def stage_finished(self, stage: str, version: str, reused: bool, seconds: float) -> None:
        self.console.print(f"[strata] {stage}: {'reused' if reused else 'built'} {version} ({seconds:.1f} s)",
                           markup=False, highlight=False)

    def stage_failed(self, stage: str, error: BaseException) -> None:
        self.console.print(f"[strata] {stage}: failed ({type(error).__name__})", markup=False, highlight=False)

    def check_finished(self, stage: str, check: str, passed: bool, detail: str) -> None:
        if not passed:
            self.console.print(f"[strata] {stage}: check {check} failed: {detail}", markup=False,
                               highlight=False)


class _StageBar(BarColumn):
    """A bar only for stages that started (rich pulses bars of unstarted tasks otherwise)."""

    def render(self, task: Any) -> Any:
        return super().render(task) if task.started else Text(" " * (self.bar_width or 0))


class _LiveProgress:
    """A rich ``Progress`` display shown while the ``with`` block runs."""

    progress: Progress

    def __enter__(self) -> _LiveProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()


class _RichReporter(_LiveProgress):
    """Live per-stage status: waiting, running (with the stage's own progress), built or reused, failed."""

    def __init__(self, console: Console, stages: list[str]) -> None:
        columns: list[str | ProgressColumn] = [
            TextColumn("{task.fields[icon]}"),
            TextColumn("[bold]{task.fields[stage]:<13}"),
            _StageBar(bar_width=28),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[detail]}"),
        ]
        self.progress = Progress(*columns, console=console, refresh_per_second=8)
        self.tasks = {
            s: self.progress.add_task(s, total=1, start=False, icon="[dim]·[/]", stage=s, detail="[dim]waiting[/]")
            for s in stages
        }
        self.checks: dict[str, list[str]] = {s: [] for s in stages}
        self.summary: dict[str, str] = {}

    def _detail(self, stage: str) -> str:
        checks = self.checks[stage]
        failed = [c for c in checks if c.startswith("!")]
        text = self.summary.get(stage, "")
        if failed:
            text += f" · [red]check {failed[0][1:]} failed[/]"
        elif checks:
            text += f" · [green]{len(checks)} check{'s' if len(checks) > 1 else ''} ok[/]"
        return text

    def stage_started(self, stage: str) -> None:
        task = self.tasks[stage]
        self.progress.start_task(task)
        self.progress.update(task, total=None, icon="[yellow]▶[/]", detail="running")

    def stage_progress(self, stage: str, description: str, done: int, total: int) -> None:
        self.progress.update(self.tasks[stage], total=total if total > 0 else None, completed=done,
                             detail=escape(description))

    def stage_finished(self, stage: str, version: str, reused: bool, seconds: float) -> None:
        icon, word = ("[cyan]↺[/]", "reused") if reused else ("[green]✓[/]", "built")
        self.summary[stage] = f"{word} {version}"
        task = self.tasks[stage]
        self.progress.update(task, total=1, completed=1, icon=icon, detail=self._detail(stage))
        self.progress.stop_task(task)

    def stage_failed(self, stage: str, error: BaseException) -> None:
        self.summary[stage] = f"[red]failed: {type(error).__name__}[/]"
        task = self.tasks[stage]
        self.progress.update(task, icon="[red]✗[/]", detail=self._detail(stage))
        self.progress.stop_task(task)

    def check_finished(self, stage: str, check: str, passed: bool, detail: str) -> None:
        self.checks[stage].append(check if passed else f"!{check}")
        icon = None if passed else "[red]✗[/]"
        fields: dict[str, Any] = {"detail": self._detail(stage)}
        if icon:
            fields["icon"] = icon
        self.progress.update(self.tasks[stage], **fields)


class _ProgressCallback(_LiveProgress):
    """A ``progress(description, done, total)`` callback drawing one rich bar per description."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("{task.description:<32}"), BarColumn(bar_width=30), TaskProgressColumn(),
            TimeElapsedColumn(), console=console,
        )
        self.tasks: dict[str, Any] = {}

    def __call__(self, description: str, done: int, total: int) -> None:
        if description not in self.tasks:
            self.tasks[description] = self.progress.add_task(description, total=total if total > 0 else None)
        self.progress.update(self.tasks[description], completed=done, total=total if total > 0 else None)


# ---------------------------------------------------------------------------------------------- run


def _failure_message(result: dg.ExecuteInProcessResult, verbose: bool) -> str:
    """The failing stage (or check) and the real exception text, not Dagster's wrapper."""
    from pipelines.graph import STAGE_NAMES, get_stage

    lines: list[str] = []
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed:
            stage = evaluation.asset_key.to_user_string()
            lines.append(f"check '{stage}:{evaluation.check_name}' failed: {evaluation.description}")
    for event in result.get_step_failure_events():
        error = event.step_failure_data.error if event.step_failure_data else None
        if error is None or error.cls_name == "DagsterAssetCheckFailedError":
            continue  # reported above from the evaluation itself
        step = event.step_key or "?"
        where = f"stage '{step}' ({get_stage(step).function})" if step in STAGE_NAMES else f"step '{step}'"
        cause = error.cause or error
        lines.append(f"{where} failed: {cause.message.strip()}")
        inner = cause.cause or cause.context
        while inner is not None:
            lines.append(f"  caused by: {inner.message.strip()}")
            inner = inner.cause or inner.context
        if verbose:
            lines.append(error.to_string())
    if not lines:
        failure = result.get_run_failure_event()
        lines.append(failure.message if failure is not None else "the Dagster run failed")
    return "\n".join(lines)


def _summary(result: dg.ExecuteInProcessResult, cfg: PipelineConfig, paths: StrataPaths) -> dict[str, Any]:
    """The run's artifacts (from Dagster's materializations) and the headline numbers of train and export."""
    from pipelines.cli.summary import run_summary
    from pipelines.stages.train import HEADLINE_METRICS, LINK_HEADLINE_METRICS

    materialized: dict[str, dict[str, Any]] = {}
    for event in result.get_asset_materialization_events():
        mat = event.materialization
        meta = {k: v.value for k, v in mat.metadata.items()}
        materialized[mat.asset_key.to_user_string()] = meta
    artifacts = [
        {"stage": stage, "version": m.get("version"), "reused": bool(m.get("reused")), "bytes": m.get("bytes"),
         "seconds": m.get("asset_seconds"), "path": str(m.get("path"))}
        for stage in _stage_names()
        if (m := materialized.get(stage)) is not None
    ]
    store = paths.store()
    stats: dict[str, dict[str, Any]] = {}
    for stage in ("train", "export"):
        if stage in materialized:
            stats[stage] = store.open(cfg.dataset_name, stage, materialized[stage]["version"]).stats
    model, export = stats.get("train", {}), stats.get("export", {})
    headline = LINK_HEADLINE_METRICS if cfg.train.task == "link" else HEADLINE_METRICS
    metrics = {k: model.get(k) for k in headline} if model else {}
    metrics.update({k: v for k, v in model.items()
                    if k not in metrics and isinstance(v, (int, float)) and not isinstance(v, bool)})
    return {**run_summary(cfg, paths, artifacts, metrics, model, export), "dagster_run_id": result.run_id}


def _emit_summary(summary: dict[str, Any], start: float, json_out: bool) -> None:
    """Add the run's ``seconds`` since ``start`` and print the summary: one JSON line, or tables."""
    summary["seconds"] = round(time.perf_counter() - start, 3)
    if json_out:
        sys.stdout.write(json.dumps(summary, default=str) + "\n")
        sys.stdout.flush()
    else:
        _print_summary(summary)


def _print_summary(summary: Mapping[str, Any]) -> None:
    table = Table(title=f"Artifacts of {summary['dataset']}", title_justify="left")
    for column in ("stage", "version", "status", "size", "seconds"):
        table.add_column(column, justify="right" if column in ("size", "seconds") else "left")
    for a in summary["artifacts"]:
        status = "[cyan]reused[/]" if a["reused"] else "[green]built[/]"
        table.add_row(a["stage"], a["version"], status, _human_bytes(a.get("bytes")), _fmt(a.get("seconds")))
    out.print(table)

    metrics = Table(title="Metrics", title_justify="left")
    metrics.add_column("metric")
    metrics.add_column("value", justify="right")
    for key, value in summary["metrics"].items():
        shown = f"{value} ({_human_bytes(value)})" if key.startswith("bytes") and value is not None else _fmt(value)
        metrics.add_row(key, shown)
    out.print(metrics)

    ml = summary["mlflow"]
    registry = Table(title="MLflow", title_justify="left", show_header=False)
    registry.add_column("key")
    registry.add_column("value")
    for key in ("tracking_uri", "run_id", "model_name", "model_version", "champion_version"):
        registry.add_row(key, _fmt(ml.get(key)))
    out.print(registry)
    run = (f"Dagster UI: [bold]strata ui --root {summary['root']}[/]   (run {summary['dagster_run_id']})"
           if summary["dagster_run_id"] else f"torchrun:   {summary.get('world_size')} ranks (not a Dagster run)")
    out.print(
        f"{run}\n"
        f"MLflow UI:  [bold]mlflow ui --backend-store-uri {ml['tracking_uri']}[/]",
        highlight=False,
    )


def _run_pipeline(dataset: str | None, root: str | None, config: Path | None, overrides: list[str] | None,
                  json_out: bool, verbose: bool, until: str | None,
                  after: Callable[[dict[str, Any]], None] | None = None, memory_budget: str | None = None,
                  policy: str | None = None) -> None:
    """Materialize the stages up to ``until`` (default: all) through Dagster, in process, and print a summary
    (``after(summary)`` first, a stage command's extra step, e.g. ``export --web``). ``memory_budget`` and
    ``policy`` are the settings of those names (after ``overrides``)."""
    if dataset is None and config is None:
        _fail("'--dataset' expected a built-in name or source spec (got none; see `strata datasets`)", code=2)
    flags = [f"{key}={value}" for key, value in (("memory_budget", memory_budget), ("policy", policy))
             if value is not None]
    cfg = _load_config(dataset, config, [*(overrides or []), *flags])
    from pipelines.graph import STAGE_NAMES
    from pipelines.graph import until as stages_until

    if until is not None and until not in STAGE_NAMES:
        _fail(f"'--until' expected one of {', '.join(STAGE_NAMES)} (got {until!r})", code=2)
    selected = [s.name for s in stages_until(until)] if until else list(STAGE_NAMES)
    paths = _paths(root)
    from pipelines.cli.distributed import launched_by_torchrun

    if launched_by_torchrun():  # one rank of a data parallel job: no Dagster (pipelines/cli/distributed.py)
        _run_torchrun(cfg, paths, json_out, verbose, until)
        return

    import dagster as dg

    from pipelines.orchestration.definitions import STRATA_JOB, make_definitions
    from pipelines.orchestration.resources import RESOURCE_KEY, build_resources, run_config_settings

    use_live = not json_out and err.is_terminal
    reporter: _RichReporter | _LineReporter = _RichReporter(err, selected) if use_live else _LineReporter(err)
    job = make_definitions(build_resources(str(paths.root), cfg, reporter)).resolve_job_def(STRATA_JOB)
    log_level = "INFO" if verbose else "CRITICAL"  # failures are reported below, without the stack dump
    run_config = {"loggers": {"console": {"config": {"log_level": log_level}}},
                  # typed, and shown in the UI; a resource's run config replaces all its configured values
                  "resources": {RESOURCE_KEY: {"config": {"root": str(paths.root),
                                                          "settings": run_config_settings(cfg)}}}}
    if not json_out:
        err.print(f"strata run: [bold]{cfg.dataset_name}[/] under {paths.root}"
                  + (f" (until {until})" if until else "")
                  + (f", memory budget {_human_bytes(cfg.memory_budget)}" if cfg.memory_budget else ""),
                  highlight=False)
    from pipelines.ops.recovery import DAGSTER_OWNER_PREFIX, recover
    from storage_kernels.locks import dataset_lock
    from storage_kernels.owner import Owner

    start = time.perf_counter()
    def waiting(message: str) -> None:
        err.print(f"strata run: {message}", highlight=False)

    # one run per dataset and root at a time: a second run waits here, then reuses what the first built
    with dataset_lock(paths.root, cfg.dataset_name, on_wait=waiting), _dagster_home(paths), \
            _quiet_libraries(verbose), _dagster_instance(paths) as instance:
        recovered = recover(paths, instance).message()  # leftovers of killed runs (dead owners only)
        if recovered:
            err.print(f"strata run: {recovered}", highlight=False)
        with reporter:
            result = job.execute_in_process(
                instance=instance,
                run_config=run_config,
                raise_on_error=False,
                asset_selection=[dg.AssetKey(name) for name in selected] if until else None,
                tags={"strata/dataset": cfg.dataset_name, "strata/launched_by": "cli",
                      **Owner.me().tags(DAGSTER_OWNER_PREFIX)},  # the next run fails this one if it is killed
            )
    if not result.success:
        _fail(f"strata run for {cfg.dataset_name!r} failed (Dagster run {result.run_id}):\n"
              + _failure_message(result, verbose))
    summary = _summary(result, cfg, paths)
    if after is not None:
        try:
            after(summary)
        except (OSError, RuntimeError, ValueError) as e:  # TimeoutError is an OSError
            _fail(f"strata {until or 'run'}: {e}")
    _emit_summary(summary, start, json_out)


def _dagster_instance(paths: StrataPaths) -> Any:
    """``DagsterInstance.get()``, created under a root-wide lock: the first use of a fresh ``dagster_home``
    creates its SQLite schema, which runs of two datasets on one root must not do at once."""
    from dagster import DagsterInstance

    from storage_kernels.locks import root_lock

    with root_lock(paths.root, "dagster"):
        return DagsterInstance.get()


def _run_torchrun(cfg: PipelineConfig, paths: StrataPaths, json_out: bool, verbose: bool, until: str | None
                  ) -> None:
    """This rank's part of ``run_distributed``; rank 0 prints the summary, the others print nothing."""
    from pipelines.cli.distributed import run_distributed

    start = time.perf_counter()
    try:
        with _quiet_libraries(verbose):
            summary = run_distributed(cfg, paths, until)
    except (ValueError, RuntimeError) as e:
        _fail(f"strata {until or 'run'} under torchrun for {cfg.dataset_name!r} failed: {e}")
    if summary is None:
        return
    _emit_summary(summary, start, json_out)


DatasetOption = typer.Option(None, "--dataset", "-d", help="Built-in name or source spec (see `strata datasets`); "
                             "default: the config file's.")
JsonOption = typer.Option(False, "--json", help="Print one JSON object (only) on stdout.")
VerboseOption = typer.Option(False, "--verbose", "-v", help="Dagster logs and full tracebacks.")
MemoryBudgetOption = typer.Option(
    None, "--memory-budget", help="RAM for the graph's data, e.g. 2G: sizes the caches, buffers and streaming "
    "stages left at their defaults (the setting memory_budget; docs/USAGE.md, 'Memory budget').")
PolicyOption = typer.Option(
    None, "--policy", "-p", help="Cache/batching policy (the setting policy): diskgnn (default), ginex, hyperbatch, "
    "mariusgnn, outre, in_memory, mmap, naive, or a plugin's (README, 'Choosing a policy').")


@app.command()
def run(
    dataset: str | None = DatasetOption,
    root: str | None = RootOption,
    config: Path | None = ConfigOption,
    overrides: list[str] | None = SetOption,
    json_out: bool = JsonOption,
    verbose: bool = VerboseOption,
    memory_budget: str | None = MemoryBudgetOption,
    policy: str | None = PolicyOption,
    until: str | None = typer.Option(None, "--until", "-u", help="Stop after this stage (it and its upstream "
                                     "stages run); default: every stage, ingest to export."),
) -> None:
    """Materialize the stages (ingest .. export) for one dataset through Dagster, in process.

    Unchanged stages are reused; blocking checks gate each stage; the run shows in `strata ui`.
    """
    _run_pipeline(dataset=dataset, root=root, config=config, overrides=overrides, json_out=json_out,
                  verbose=verbose, until=until, memory_budget=memory_budget, policy=policy)


def _stage_command(name: str, description: str) -> None:
    """Register ``strata <name>``: ``strata run --until <name>``, with every option of ``run`` but ``--until``."""

    from pipelines.cli.web import stage_options

    extra = stage_options(name)  # options only this stage command has (export: --web, --screenshot)

    def command(**options: Any) -> None:
        after = extra.hook(**{k: options.pop(k) for k in extra.params}) if extra else None
        _run_pipeline(until=name, after=after, **options)

    params = [p for p in inspect.signature(run).parameters.values() if p.name != "until"]
    params += list(extra.params.values()) if extra else []
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation if extra and p.name in extra.params
                               else run.__annotations__[p.name] for p in params}
    summary = description.split(". ")[0].rstrip(".")
    command.__doc__ = f"Bring stage '{name}' (and its upstream stages) up to date: {summary}."
    app.command(name, rich_help_panel="Stages (each is `run --until STAGE`)")(command)


def _register_stage_commands() -> None:
    from pipelines.graph import STAGES

    for stage in STAGES:
        _stage_command(stage.name, stage.description)


_register_stage_commands()


# ---------------------------------------------------------------------------------------------- config


@config_app.command("show")
def config_show(
    dataset: str | None = DatasetOption,
    config: Path | None = ConfigOption,
    overrides: list[str] | None = SetOption,
    json_out: bool = typer.Option(False, "--json", help="Print the effective configuration as JSON."),
) -> None:
    """Print the effective configuration (file, then --set, then --dataset) with every default."""
    from pipelines.config import describe_settings

    cfg = _load_config(dataset, config, overrides)
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


# ----------------------------------------------------------------------------------------------- ui


@app.command()
def ui(
    root: str | None = RootOption,
    port: int = typer.Option(3000, "--port", "-p", help="Dagster webserver port."),
    host: str = typer.Option("127.0.0.1", "--host", help="Dagster webserver host."),
    dataset: str | None = typer.Option(None, "--dataset", "-d", help="Default dataset of UI-launched runs."),
    config: Path | None = ConfigOption,
) -> None:
    """Start the Dagster UI (`dagster dev`) on this data root's run history."""
    paths = _paths(root)
    with _dagster_home(paths) as home:
        env = {**os.environ, "DAGSTER_HOME": str(home), "STRATA_HOME": str(paths.root)}
    if dataset:
        env["STRATA_DATASET"] = dataset
    if config:
        env["STRATA_CONFIG"] = str(config.resolve())
    target = ["-w", str(_WORKSPACE)] if _WORKSPACE.exists() else ["-m", "pipelines.orchestration.definitions"]
    command = [sys.executable, "-m", "dagster", "dev", *target, "--port", str(port), "--host", host]
    err.print(f"Dagster UI on http://{host}:{port} (DAGSTER_HOME={home}); Ctrl-C to stop.", highlight=False)
    err.print(_ui_datasets_line(paths.root, env), highlight=False)
    from pipelines.cli.ui_process import run_process_group

    # its own process group: SIGINT/SIGTERM to `strata ui` stop dagster dev and everything it started
    code = run_process_group(command, env, _REPO_ROOT if _WORKSPACE.exists() else None, _UI_SHUTDOWN_S,
                             log=lambda message: err.print(message, highlight=False))
    raise typer.Exit(code)


def _ui_datasets_line(root: Path, env: Mapping[str, str]) -> str:
    """``datasets under ROOT: demo, tiny (default: demo)``: what the UI offers and defaults to."""
    from pipelines.orchestration.ui_datasets import default_config, materialized_datasets

    names = [d.name for d in materialized_datasets(root)]
    try:
        default = default_config(root, env.get("STRATA_CONFIG"), env.get("STRATA_DATASET")).dataset
    except (ValueError, FileNotFoundError) as e:
        _fail(str(e), code=2)
    return f"datasets under {root}: {', '.join(names) or 'none yet'} (default: {default})"


# ------------------------------------------------------------------------------------------ catalog


def _catalog_row(artifact: Mapping[str, Any]) -> dict[str, Any]:
    return {k: artifact.get(k) for k in ("dataset", "stage", "version", "path", "bytes", "created_at",
                                          "format_version", "library_version", "params", "stats")}


@catalog_app.command("ls")
def catalog_ls(
    dataset: str | None = typer.Option(None, "--dataset", "-d", help="Only this dataset (directory name)."),
    stage: str | None = typer.Option(None, "--stage", "-s", help="Only this stage (graph, ordering, ...)."),
    root: str | None = RootOption,
    json_out: bool = typer.Option(False, "--json", help="One JSON object per line per artifact."),
) -> None:
    """List the artifacts in the catalog."""
    paths = _paths(root, create=False)
    artifacts = paths.catalog().list_artifacts(dataset, stage)
    if json_out:
        for a in artifacts:
            sys.stdout.write(json.dumps(_catalog_row(a), default=str) + "\n")
        sys.stdout.flush()
        return
    if not artifacts:
        err.print(f"no artifacts in {paths.catalog_path}", highlight=False)
        return
    table = Table()
    for column in ("dataset", "stage", "version", "size", "created_at", "path"):
        table.add_column(column, justify="right" if column == "size" else "left",
                         overflow="fold", no_wrap=column in ("version", "size"))
    for a in artifacts:
        table.add_row(a["dataset"], a["stage"], a["version"], _human_bytes(a["bytes"]), str(a["created_at"]),
                      str(a["path"]))
    out.print(table)


@catalog_app.command("show")
def catalog_show(
    version: str = typer.Argument(..., help="Artifact version (or a unique prefix)."),
    root: str | None = RootOption,
    json_out: bool = typer.Option(False, "--json", help="Print the record as JSON."),
) -> None:
    """Show one artifact: manifest fields, files, lineage and metrics."""
    paths = _paths(root, create=False)
    try:
        record = paths.catalog().get(version)
    except ValueError as e:
        _fail(str(e))
    if record is None:
        _fail(f"'version' expected an artifact in {paths.catalog_path} (got {version!r}; try `strata catalog ls`)")
    if json_out:
        sys.stdout.write(json.dumps(record, default=str) + "\n")
        return
    head = Table.grid(padding=(0, 2))
    for key in ("dataset", "stage", "version", "path", "created_at", "format_version", "library_version"):
        head.add_row(f"[bold]{key}[/]", str(record.get(key)))
    head.add_row("[bold]bytes[/]", f"{record['bytes']} ({_human_bytes(record['bytes'])})")
    out.print(Panel(head, title=f"{record['dataset']}/{record['stage']}/{record['version']}", expand=False))
    out.print(Panel(JSON.from_data(record.get("params") or {}), title="params", expand=False))

    stats = Table(title="stats", title_justify="left")
    stats.add_column("key")
    stats.add_column("value", justify="right")
    for key, value in sorted((record.get("stats") or {}).items()):
        stats.add_row(key, _fmt(value))
    out.print(stats)

    files = Table(title="files", title_justify="left")
    for column in ("name", "dtype", "shape", "size", "checksum"):
        files.add_column(column)
    for f in record.get("files", []):
        files.add_row(f["name"], str(f.get("dtype") or "raw"), str(f.get("shape") or ""),
                      _human_bytes(f.get("bytes")), str(f.get("checksum", ""))[:24])
    out.print(files)

    lineage = Table(title="lineage", title_justify="left")
    lineage.add_column("direction")
    lineage.add_column("stage")
    lineage.add_column("version")
    for stage, upstream_version in (record.get("lineage") or {}).items():
        lineage.add_row("upstream", stage, upstream_version)
    for d in record.get("downstream", []):
        lineage.add_row("downstream", d["stage"], d["version"])
    out.print(lineage)

    if record.get("metrics"):
        metrics = Table(title="metrics", title_justify="left")
        for column in ("key", "value", "step", "recorded_at"):
            metrics.add_column(column)
        for m in record["metrics"]:
            metrics.add_row(m["key"], _fmt(m["value"]), _fmt(m.get("step")), str(m.get("recorded_at")))
        out.print(metrics)


@catalog_app.command("rebuild")
def catalog_rebuild(root: str | None = RootOption) -> None:
    """Re-create the catalog's artifacts, files and lineage from the manifests; bad manifests are skipped and
    reported, metrics are kept and restored from the manifests of artifacts that have none."""
    paths = _paths(root)
    try:
        report = paths.catalog().rebuild_report(paths.root)
    except ValueError as e:
        _fail(str(e))
    count = report.indexed
    for _path, problem in report.skipped:
        err.print(Text.assemble(("skipped: ", "bold yellow"), problem), highlight=False)
    message = f"indexed {count} artifact{'s' if count != 1 else ''} in {paths.catalog_path}"
    if report.metrics_restored:
        message += f"; restored {report.metrics_restored} metric rows from the manifests"
    if report.skipped:
        message += f"; skipped {len(report.skipped)} bad manifest(s) (`strata verify --repair` quarantines them)"
    out.print(message, highlight=False)


# ----------------------------------------------------------------------------------------- datasets


@app.command()
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


# -------------------------------------------------------------------------------------------- bench


@app.command()
def bench(
    dataset: str = typer.Option(..., "--dataset", "-d", help="Built-in name or source spec."),
    out_path: Path = typer.Option(..., "--out", "-o", help="Where to write the JSON report.", dir_okay=False),
    root: str | None = RootOption,
    config: Path | None = ConfigOption,
    overrides: list[str] | None = SetOption,
    suite: str = typer.Option(
        "training", "--suite", help="training: every policy under one memory budget; locality: reorder and partition."
    ),
    policies: str = typer.Option(
        "all", "--policies", help="training: 'all' or a comma-separated list of policies (pipelines.methods.policies)."
    ),
    memory_budget: str | None = typer.Option(
        None, "--memory-budget",
        help="training: memory for the graph's data (caches, buffers, page cache), e.g. 512M or 2G; each run is "
        "confined to it plus the measured working set by a memory cgroup (needs root).",
    ),
    memory_overhead: str | None = typer.Option(
        None, "--memory-overhead",
        help="training: the working set beyond the budget (default: measured on the naive policy).",
    ),
    repeats: int = typer.Option(1, "--repeats", help="training: alternating repeats per policy (median reported).",
                                min=1),
    timeout: float | None = typer.Option(
        None, "--timeout", help="training: seconds one policy's run may take; past it the run is stopped and "
        "reported as timed out, with the bytes it had read.", min=1),
    eval_batches: int | None = typer.Option(
        None, "--eval-batches", help="training: evaluate on the first N validation and test batches only (timing "
        "runs on large graphs; the accuracies are then those of that subset).", min=1),
    strategies: str | None = typer.Option(
        None, "--strategies", help="locality: comma-separated reorder strategies (default: all)."
    ),
    methods: str | None = typer.Option(
        None, "--methods",
        help="locality: comma-separated partition methods (default: range, metis, fennel, grem; fennel-single and "
        "grem-single run them without the multilevel scheme).",
    ),
    partition_order: str = typer.Option(
        "community", "--partition-order",
        help="locality: the ordering partitioners stream (community: Rabbit order, as the pipeline does after "
        "reorder.strategy=community; identity: ingested ids).",
    ),
) -> None:
    """Benchmarks. ``training`` (default): train once per feature path (in memory, naive direct reads, packed
    store) and compare. ``locality``: every reorder strategy and partition method on one graph."""
    cfg = _load_config(dataset, config, overrides)
    paths = _paths(root)
    if suite == "locality":
        from pipelines.bench.locality import REORDER_STRATEGIES

        if partition_order not in REORDER_STRATEGIES:
            err.print(f"'--partition-order' expected one of {', '.join(REORDER_STRATEGIES)} (got {partition_order!r})")
            raise typer.Exit(2)
        _bench_locality(cfg, paths, out_path, _names(strategies, "strategies"), _names(methods, "methods"),
                        partition_order)
        return
    if suite != "training":
        err.print(f"'--suite' expected training or locality (got {suite!r})")
        raise typer.Exit(2)
    from pipelines.bench.policies import BenchError, resolve_policies, run_bench
    from pipelines.core.confine import parse_bytes

    try:
        names = resolve_policies(policies)
        budget = parse_bytes(memory_budget) if memory_budget is not None else None
        overhead = parse_bytes(memory_overhead, "--memory-overhead") if memory_overhead is not None else None
    except ValueError as e:
        err.print(str(e))
        raise typer.Exit(2) from None
    try:
        with _quiet_libraries(verbose=False), _ProgressCallback(err) as progress:
            report = run_bench(cfg, paths, out_path, progress=progress, policies=names, memory_budget=budget,
                               memory_overhead=overhead, repeats=repeats, timeout_s=timeout,
                               eval_batches=eval_batches)
    except BenchError as e:
        err.print(str(e))
        raise typer.Exit(1) from None
    table = Table(title=f"strata bench: {report.get('dataset', cfg.dataset)}", title_justify="left")
    columns = ("epoch_s", "bytes_read", "read_requests", "read_amplification", "test_acc", "hit_rate_predicted",
               "hit_rate_measured", "peak_cgroup_mb", "disk_blowup", "speedup_vs_naive")
    table.add_column("policy")
    for column in columns:
        table.add_column(column, justify="right")
    for name, row in report.get("policies", {}).items():
        cells = [_human_bytes(row.get(c)) if c.startswith("bytes") else _fmt(row.get(c)) for c in columns]
        table.add_row(name, *cells)
    # ten numeric columns: wider than a terminal rather than truncated to "…"
    Console(width=max(out.width, 180), soft_wrap=True).print(table)
    disk = report.get("disk", {})
    out.print(f"memory budget: {_human_bytes(report.get('memory_budget'))}, confinement: {report.get('confinement')}; "
              f"disk sequential read: {_fmt(disk.get('seq_read_mb_s'))} MB/s (direct I/O: {disk.get('direct_io')}); "
              f"report written to {out_path} (plot: {Path(out_path).with_suffix('.png')})", highlight=False)


def _names(value: str | None, option: str) -> tuple[str, ...] | None:
    """Parse a comma-separated ``--strategies``/``--methods`` value, checking every name."""
    from pipelines.bench.locality import PARTITION_VARIANTS, REORDER_STRATEGIES

    if value is None:
        return None
    known = REORDER_STRATEGIES if option == "strategies" else PARTITION_VARIANTS
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        err.print(f"'--{option}' expected a comma-separated list of {', '.join(known)} (got {value!r})")
        raise typer.Exit(2)
    return names


def _bench_locality(cfg: Any, paths: Any, out_path: Path, strategies: tuple[str, ...] | None,
                    methods: tuple[str, ...] | None, partition_order: str) -> None:
    from pipelines.bench.locality import PARTITION_METHODS, REORDER_STRATEGIES, run_locality_bench

    with _quiet_libraries(verbose=False), _ProgressCallback(err) as progress:
        report = run_locality_bench(cfg, paths, out_path, progress=progress,
                                    strategies=strategies or REORDER_STRATEGIES,
                                    methods=methods or PARTITION_METHODS, partition_order=partition_order)
    graph = report["graph"]
    reorder_table = Table(title=f"reorder ({graph['nodes']:,} nodes, {graph['edges']:,} edges)",
                          title_justify="left")
    reorder_columns = ("time_s", "peak_rss_mb", "pages_per_batch", "pages_vs_random", "avg_edge_gap")
    _add_rows(reorder_table, "strategy", reorder_columns, report["reorder"])
    out.print(reorder_table)
    part_table = Table(title=f"partition (streaming the {report['settings']['partition_order']} order)",
                       title_justify="left")
    part_columns = ("time_s", "peak_rss_mb", "stage_extra_rss_mb", "edge_cut", "balance", "cut_vs_metis",
                    "memory_vs_metis")
    _add_rows(part_table, "method", part_columns, report["partition"])
    out.print(part_table)
    rr = report["redundancy"]
    out.print(f"redundancy ratio: random {_fmt(rr['random'])}, partition ({rr['partition_method']}, "
              f"{rr['num_parts']} parts) {_fmt(rr['partition'])}, change {_fmt(rr.get('change'))}; "
              f"report written to {out_path}", highlight=False)


def _add_rows(table: Table, key: str, columns: tuple[str, ...], rows: dict[str, dict]) -> None:
    table.add_column(key, justify="left")
    for column in columns:
        table.add_column(column, justify="right")
    for name, row in rows.items():
        if "error" in row:
            table.add_row(name, f"error: {row['error']}", *([""] * (len(columns) - 1)))
        else:
            table.add_row(name, *(_fmt(row.get(c)) for c in columns))


if __name__ == "__main__":
    app()
