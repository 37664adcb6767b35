"""``auto``'s own settings (the ``plan`` section): which policies it weighs and how long it probes compute.
They change only ``auto``'s plan (``artifact="selected"``)."""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from pipelines.core.sections import Section
from pipelines.methods.policies.base import POLICIES
from trainer.config import setting

__all__ = ["AutoPlanSettings"]


class AutoPlanSettings(Section):
    """``auto``'s part of the ``plan`` section."""

    auto_candidates: list[str] = setting(
        default_factory=list, description="auto: the policies to weigh, e.g. diskgnn,ginex (empty: every registered "
        "policy that trains the sampled batches exactly and has a cache of its own, i.e. not mariusgnn, outre or "
        "mmap).", artifact="selected")
    auto_probe_batches: int = setting(
        8, "auto, and every policy's thread choice: training batches timed (after one warm-up) at each thread "
        "count, interleaved, to predict the compute per batch (fewer when the steps pass 10 s).",
        artifact="selected", ge=1, le=64)

    @field_validator("auto_candidates", mode="before")
    @classmethod
    def _policy_names(cls, value: Any) -> Any:
        """A comma-separated string or a list; every name a registered policy other than auto."""
        names = [n.strip() for n in value.split(",")] if isinstance(value, str) else value
        if isinstance(names, list):
            names = [n for n in names if not isinstance(n, str) or n]
            known = [n for n in POLICIES.names() if n != "auto"]
            for name in names:
                if name not in known:
                    raise ValueError(f"policies auto may choose, of {', '.join(known)} (got {name!r})")
        return names
