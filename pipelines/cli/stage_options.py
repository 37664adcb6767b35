"""Options a stage command has beyond ``run``'s (``strata plan --explain``, ``strata export --web ...``).

Each such stage declares a :class:`StageOptions`: its extra parameters (typer options, as
:class:`inspect.Parameter`) and a hook that, given their values, returns what to do with the run's summary once
the stages ran (``pipelines.cli.run`` adds them to the stage's command).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["StageOptions", "option_param"]


@dataclass(frozen=True)
class StageOptions:
    """Options a stage command adds to ``run``'s, and the hook they make (called with the run's summary)."""

    params: dict[str, inspect.Parameter]
    hook: Callable[..., Callable[[dict[str, Any]], None] | None]
    #: The hook also takes ``run=``: the run's own options (dataset, root, config, overrides, ...), to check
    #: something before the stages run.
    sees_run: bool = False
    #: The command's help, when the generic "bring stage X up to date" does not say what it does.
    doc: str | None = None


def option_param(name: str, option: Any, annotation: Any) -> inspect.Parameter:
    """A keyword-only parameter ``name`` whose default is the typer ``option`` (a command's signature entry)."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)

