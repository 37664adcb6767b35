"""``strata run`` and the stage verbs (``strata ingest`` .. ``strata predict``: ``run --until STAGE``).

A run materializes the selected stages through Dagster, in process, under the dataset's lock, with live
progress on stderr (:mod:`pipelines.cli.progress`), and prints a summary: the artifacts, the headline metrics
and the MLflow run (``--json``: one JSON document). Under torchrun the ranks run the stages without Dagster
(:mod:`pipelines.cli.distributed`).

A failed run keeps the exit-code contract of an error escaping any command (:mod:`pipelines.core.errors`): the
failed stage's own exception becomes one ``error:`` line naming the setting or file and the problem, exit 2 for
bad settings, inputs and environment (a missing or malformed input, a full disk, a corrupted artifact) and 1 for
a bug (naming the exception type and the stage) or a failed check. The traceback is in the Dagster run's log
(``strata ui``), above the line with ``--verbose``, and raised with ``strata --debug``.
"""

from __future__ import annotations

import inspect
import json
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from pipelines.cli.errors import EXIT_UNKNOWN, describe, describe_remote, is_debug
from pipelines.cli.options import (
    ConfigOption,
    DatasetOption,
    RootOption,
    SetOption,
    dagster_home,
    err,
    fail,
    fmt,
    human_bytes,
    load_config,
    out,
    quiet_libraries,
    strata_paths,
)
from pipelines.cli.progress import LineReporter, RichReporter
from pipelines.config import PipelineConfig

if TYPE_CHECKING:
    import dagster as dg

    from pipelines.core.paths import StrataPaths

__all__ = ["register_stage_commands", "run"]

JsonOption = typer.Option(False, "--json", help="Print one JSON object (only) on stdout.")
VerboseOption = typer.Option(False, "--verbose", "-v", help="Dagster logs and full tracebacks.")
MemoryBudgetOption = typer.Option(
    None, "--memory-budget", help="RAM for the graph's data, e.g. 2G: sizes the caches, buffers and streaming "
    "stages left at their defaults (the setting memory_budget; docs/USAGE.md, 'Memory budget').")
PolicyOption = typer.Option(
    None, "--policy", "-p", help="Cache/batching policy (the setting policy): diskgnn (default), ginex, hyperbatch, "
    "mariusgnn, outre, in_memory, mmap, naive, or a plugin's (README, 'Choosing a policy').")


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
                                     "stages run); default: every stage, ingest to export (predict runs only "
                                     "when asked: --until predict, or strata predict)."),
) -> None:
    """Materialize the stages (ingest .. export) for one dataset through Dagster, in process.

    Unchanged stages are reused; blocking checks gate each stage; the run shows in `strata ui`.
    """
    _run_pipeline(dataset=dataset, root=root, config=config, overrides=overrides, json_out=json_out,
                  verbose=verbose, until=until, memory_budget=memory_budget, policy=policy)


def _run_pipeline(dataset: str | None, root: str | None, config: Path | None, overrides: list[str] | None,
                  json_out: bool, verbose: bool, until: str | None,
                  after: Callable[[dict[str, Any]], None] | None = None, memory_budget: str | None = None,
                  policy: str | None = None) -> None:
    """Materialize the stages up to ``until`` (default: all) through Dagster, in process, and print a summary
    (``after(summary)`` first, a stage command's extra step, e.g. ``export --web``). ``memory_budget`` and
    ``policy`` are the settings of those names (after ``overrides``)."""
    debug = is_debug()  # strata --debug: a failed stage's exception is raised as is
    if dataset is None and config is None:
        fail("'--dataset' expected a built-in name or source spec (got none; see `strata datasets`)", code=2)
    flags = [f"{key}={value}" for key, value in (("memory_budget", memory_budget), ("policy", policy))
             if value is not None]
    cfg = load_config(dataset, config, [*(overrides or []), *flags])
    from pipelines.graph import RUN_STAGE_NAMES, STAGE_NAMES
    from pipelines.graph import until as stages_until

    if until is not None and until not in STAGE_NAMES:
        fail(f"'--until' expected one of {', '.join(STAGE_NAMES)} (got {until!r})", code=2)
    selected = [s.name for s in stages_until(until)] if until else list(RUN_STAGE_NAMES)  # predict when asked
    paths = strata_paths(root)
    from pipelines.cli.distributed import launched_by_torchrun

    if launched_by_torchrun():  # one rank of a data parallel job: no Dagster (pipelines/cli/distributed.py)
        _run_torchrun(cfg, paths, json_out, verbose, until)
        return

    import dagster as dg

    from pipelines.orchestration.definitions import STRATA_JOB, make_definitions
    from pipelines.orchestration.resources import RESOURCE_KEY, build_resources, run_config_settings

    use_live = not json_out and err.is_terminal
    reporter: RichReporter | LineReporter = RichReporter(err, selected) if use_live else LineReporter(err)
    job = make_definitions(build_resources(str(paths.root), cfg, reporter)).resolve_job_def(STRATA_JOB)
    log_level = "INFO" if verbose else "CRITICAL"  # failures are reported below, without the stack dump
    run_config = {"loggers": {"console": {"config": {"log_level": log_level}}},
                  # typed, and shown in the UI; a resource's run config replaces all its configured values
                  "resources": {RESOURCE_KEY: {"config": {"root": str(paths.root),
                                                          "settings": run_config_settings(cfg)}}}}
    if not json_out:
        err.print(f"strata run: [bold]{cfg.dataset_name}[/] under {paths.root}"
                  + (f" (until {until})" if until else "")
                  + (f", memory budget {human_bytes(cfg.memory_budget)}" if cfg.memory_budget else ""),
                  highlight=False)
    from pipelines.ops.recovery import DAGSTER_OWNER_PREFIX, recover
    from storage_kernels.locks import dataset_lock
    from storage_kernels.owner import Owner

    start = time.perf_counter()
    def waiting(message: str) -> None:
        err.print(f"strata run: {message}", highlight=False)

    # one run per dataset and root at a time: a second run waits here, then reuses what the first built
    with dataset_lock(paths.root, cfg.dataset_name, on_wait=waiting), dagster_home(paths), \
            quiet_libraries(verbose), _dagster_instance(paths) as instance:
        recovered = recover(paths, instance).message()  # leftovers of killed runs (dead owners only)
        if recovered:
            err.print(f"strata run: {recovered}", highlight=False)
        with reporter:
            result = job.execute_in_process(
                instance=instance,
                run_config=run_config,
                raise_on_error=False,
                asset_selection=[dg.AssetKey(name) for name in selected],
                tags={"strata/dataset": cfg.dataset_name, "strata/launched_by": "cli",
                      **Owner.me().tags(DAGSTER_OWNER_PREFIX)},  # the next run fails this one if it is killed
            )
    if not result.success:
        message, code = _failure_line(result, reporter.failures, verbose, debug)
        fail(message, code=code)
    summary = _summary(result, cfg, paths)
    if after is not None:
        after(summary)  # its errors escape the command: one line, the same exit codes (pipelines.cli.errors)
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
    """This rank's part of ``run_distributed``; rank 0 prints the summary, the others print nothing. An error
    escapes the command: one line and the exit code of the contract (:mod:`pipelines.cli.errors`)."""
    from pipelines.cli.distributed import run_distributed

    start = time.perf_counter()
    with quiet_libraries(verbose):
        summary = run_distributed(cfg, paths, until)
    if summary is None:
        return
    _emit_summary(summary, start, json_out)


def _failure_line(result: dg.ExecuteInProcessResult, failures: list[tuple[str, BaseException]], verbose: bool,
                  debug: bool) -> tuple[str, int]:
    """One line and the exit code of a failed run.

    The first failed stage's own exception (the reporter kept it) is described as an error escaping a command
    would be (:func:`pipelines.core.errors.describe`): 2 for bad settings, inputs and environment, 1 for a bug.
    With ``strata --debug`` it is raised (its traceback shows); with ``--verbose`` its traceback is printed
    above the line. Without one (a failed check, an error outside a stage function), the first failed check
    (exit 1: the artifact breaks an invariant its stage promises), else the first failed step as Dagster
    recorded it (:func:`pipelines.core.errors.describe_remote`).
    """
    from pipelines.graph import STAGE_NAMES

    if failures:
        stage, error = failures[0]
        if debug or not isinstance(error, Exception):
            raise error  # KeyboardInterrupt and friends are not failures to describe
        if verbose:
            err.print("".join(traceback.format_exception(error)).rstrip(), markup=False, highlight=False)
        return describe(error, where=f"stage '{stage}' (Dagster run {result.run_id})")
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed:
            stage = evaluation.asset_key.to_user_string()
            detail = next(iter((evaluation.description or "").splitlines()), "")
            return f"check '{stage}:{evaluation.check_name}' failed: {detail}", EXIT_UNKNOWN
    for event in result.get_step_failure_events():
        error_info = event.step_failure_data.error if event.step_failure_data else None
        if error_info is None or error_info.cls_name == "DagsterAssetCheckFailedError":
            continue  # reported above from the evaluation itself
        if verbose or debug:
            err.print(error_info.to_string().rstrip(), markup=False, highlight=False)
        step = event.step_key or "?"
        where = f"{'stage' if step in STAGE_NAMES else 'step'} '{step}' (Dagster run {result.run_id})"
        return describe_remote(_error_chain(error_info.cause or error_info), where)  # the user's, not the wrapper
    failure = result.get_run_failure_event()  # a resource that failed to start, say
    run_error = getattr(failure.event_specific_data, "error", None) if failure is not None else None
    if run_error is not None:
        if verbose or debug:
            err.print(run_error.to_string().rstrip(), markup=False, highlight=False)
        return describe_remote(_error_chain(run_error), f"Dagster run {result.run_id}")
    text = failure.message if failure is not None and failure.message else "the Dagster run failed"
    return f"Dagster run {result.run_id} failed: {next(iter(text.splitlines()), text)}", EXIT_UNKNOWN


def _error_chain(info: Any) -> list[tuple[str, str]]:
    """``(class name, message)`` of a recorded error (Dagster's ``SerializableErrorInfo``) and of its causes."""
    chain: list[tuple[str, str]] = []
    while info is not None and len(chain) < 32:
        chain.append((info.cls_name or "", info.message))
        info = info.cause or info.context
    return chain


def _stage_names() -> list[str]:
    from pipelines.graph import STAGE_NAMES

    return list(STAGE_NAMES)


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
    for stage in ("plan", "train", "export"):
        if stage in materialized:
            stats[stage] = store.open(cfg.dataset_name, stage, materialized[stage]["version"]).stats
    model, export = stats.get("train", {}), stats.get("export", {})
    headline = LINK_HEADLINE_METRICS if cfg.train.task == "link" else HEADLINE_METRICS
    metrics = {k: model.get(k) for k in headline} if model else {}
    metrics.update({k: v for k, v in model.items()
                    if k not in metrics and isinstance(v, (int, float)) and not isinstance(v, bool)})
    chosen = stats.get("plan", {}).get("auto")
    policy = {"policy": cfg.policy, **({"chosen": chosen["policy"], "settings": chosen["settings"],
                                        "predicted_epoch_s": chosen["predicted_epoch_s"]} if chosen else {})}
    return {**run_summary(cfg, paths, artifacts, metrics, model, export), "policy": policy,
            "dagster_run_id": result.run_id}


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
        table.add_row(a["stage"], a["version"], status, human_bytes(a.get("bytes")), fmt(a.get("seconds")))
    out.print(table)

    metrics = Table(title="Metrics", title_justify="left")
    metrics.add_column("metric")
    metrics.add_column("value", justify="right")
    for key, value in summary["metrics"].items():
        shown = f"{value} ({human_bytes(value)})" if key.startswith("bytes") and value is not None else fmt(value)
        metrics.add_row(key, shown)
    out.print(metrics)
    for warning in summary.get("warnings", []):
        out.print(Text.assemble(("warning: ", "bold yellow"), warning))

    policy = summary.get("policy") or {}
    if policy.get("chosen"):
        from pipelines.cli.explain import choice_line

        out.print(choice_line({**policy, "policy": policy["chosen"]}), highlight=False)
    ml = summary["mlflow"]
    registry = Table(title="MLflow", title_justify="left", show_header=False)
    registry.add_column("key")
    registry.add_column("value")
    for key in ("tracking_uri", "run_id", "model_name", "model_version", "champion_version"):
        registry.add_row(key, fmt(ml.get(key)))
    out.print(registry)
    run = (f"Dagster UI: [bold]strata ui --root {summary['root']}[/]   (run {summary['dagster_run_id']})"
           if summary["dagster_run_id"] else f"torchrun:   {summary.get('world_size')} ranks (not a Dagster run)")
    out.print(
        f"{run}\n"
        f"MLflow UI:  [bold]mlflow ui --backend-store-uri {ml['tracking_uri']}[/]",
        highlight=False,
    )
    if summary.get("web"):
        from pipelines.cli.web import web_lines

        for line in web_lines(summary["web"]):
            out.print(line, markup=False, highlight=False)


def _stage_command(app: typer.Typer, name: str, description: str) -> None:
    """Register ``strata <name>`` on ``app``: ``strata run --until <name>``, with every option of ``run`` but
    ``--until``."""

    from pipelines.cli.explain import PLAN_OPTIONS
    from pipelines.cli.predict import PREDICT_OPTIONS
    from pipelines.cli.web import EXPORT_OPTIONS

    # options only this stage command has (plan: --explain; export: --web ...; predict: --out)
    extra = {"plan": PLAN_OPTIONS, "export": EXPORT_OPTIONS, "predict": PREDICT_OPTIONS}.get(name)

    def command(**options: Any) -> None:
        own = {k: options.pop(k) for k in extra.params} if extra else {}
        after = None
        if extra:  # a hook that checks before the run sees the run's options too (predict: the trained model)
            after = extra.hook(**own, run=dict(options)) if extra.sees_run else extra.hook(**own)
        _run_pipeline(until=name, after=after, **options)

    params = [p for p in inspect.signature(run).parameters.values() if p.name != "until"]
    params += list(extra.params.values()) if extra else []
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation if extra and p.name in extra.params
                               else run.__annotations__[p.name] for p in params}
    summary = description.split(". ")[0].rstrip(".")
    command.__doc__ = (extra.doc if extra and extra.doc
                       else f"Bring stage '{name}' (and its upstream stages) up to date: {summary}.")
    app.command(name, rich_help_panel="Stages (each is `run --until STAGE`)")(command)


def register_stage_commands(app: typer.Typer) -> None:
    """One command per stage of the graph (``strata ingest`` .. ``strata export``), in the graph's order."""
    from pipelines.graph import STAGES

    for stage in STAGES:
        _stage_command(app, stage.name, stage.description)
