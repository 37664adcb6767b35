"""The progress a run shows on stderr: a live per-stage display, one line per event, or one bar per task.

:class:`RichReporter` (a terminal) and :class:`LineReporter` (``--json`` or a non-terminal stderr) implement
:class:`pipelines.orchestration.resources.RunReporter`'s methods for ``strata run`` (and keep each failed
stage's exception, which ``strata run`` describes in one line); :class:`ProgressCallback`
draws a stage function's ``progress(description, done, total)`` calls for ``strata bench``. They do not subclass
``RunReporter``, so that commands which never run Dagster (datasets, catalog) do not pay for importing it.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, ProgressColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

__all__ = ["LineReporter", "ProgressCallback", "RichReporter"]


class LineReporter:
    """Plain one-line-per-event progress on stderr (``--json`` or a non-terminal stderr)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.failures: list[tuple[str, BaseException]] = []  # (stage, error): what `strata run` reports

    def __enter__(self) -> LineReporter:
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
        self.failures.append((stage, error))
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


class RichReporter(_LiveProgress):
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
        self.failures: list[tuple[str, BaseException]] = []  # (stage, error): what `strata run` reports

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
        self.failures.append((stage, error))
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


class ProgressCallback(_LiveProgress):
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
