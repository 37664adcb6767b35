"""``outre``'s own setting (plan section): how stale a historical embedding may get. :mod:`pipelines.config`
puts it in the ``plan`` section (``--set plan.staleness=100``); it changes only ``outre``'s artifacts."""

from __future__ import annotations

from pipelines.core.sections import Section
from trainer.config import setting

__all__ = ["OutrePlanSettings"]


class OutrePlanSettings(Section):
    """``outre``'s part of the ``plan`` section."""

    staleness: int = setting(0, "outre: iterations a historical embedding is reused before it is recomputed "
                             "(1 = no reuse; 0 = min(100, training batches per epoch): OUTRE's 100, but never "
                             "older than an epoch).", artifact="selected", ge=0)
