"""Strata's Dagster assets: one thin asset per stage, in ``pipelines/assets/<asset>.py``.

Each asset calls ``pipelines.stages.<stage>.run(...)`` through :func:`pipelines.assets.common.run_stage_asset`
and manages its own files (no IO managers); :mod:`pipelines.assets.common` says how upstream artifacts are
resolved. Each asset's ``code_version`` is bumped together with its stage's ``FORMAT_VERSION``; the data
version Dagster records is the artifact version (a hash of parameters, format and upstream versions).
"""

from __future__ import annotations

import dagster as dg

from pipelines.assets import export, graph, model, ordering, packed, partitioning, plan, samples
from pipelines.assets.common import GROUP_PREPROCESS, GROUP_TRAINING, STAGE_SPECS

__all__ = ["ALL_ASSETS", "GROUP_PREPROCESS", "GROUP_TRAINING", "STAGE_SPECS"]

#: Every asset, in topological order (the same order as ``STAGE_SPECS``).
ALL_ASSETS: list[dg.AssetsDefinition] = [
    graph.graph,
    ordering.ordering,
    partitioning.partitioning,
    samples.samples,
    plan.plan,
    packed.packed,
    model.model,
    export.export,
]
