"""The invariants of every artifact: one check each, read from the artifact files (docs/CONTRACTS.md layouts).

Two layers, no Dagster here:

- pure functions ``check_*`` of (memory-mapped) arrays, which stream large arrays in chunks with vectorised
  NumPy (no Python loop per node or edge) and are unit-tested on hand-made arrays;
- :class:`StageCheck` bindings (``CSR_VALID``, ...) that open an artifact's files -- and the upstream artifacts
  its manifest names (``upstream``: stage -> version) -- and call them. The stage graph
  (:mod:`pipelines.graph`) lists each stage's checks; :mod:`pipelines.orchestration.assets` turns them into blocking
  Dagster asset checks, and :class:`pipelines.runner.StageRunner` can run them without Dagster.

A failing check is blocking: nothing downstream of a broken artifact runs. A failing content check (every check
but the model's: ``StageCheck.quarantine``) also quarantines the artifact (:func:`quarantine_failed`),
as a failed checksum does, so the next run rebuilds it; ``strata verify`` runs them too.

One module per artifact checked: :mod:`~pipelines.checks.base` (:class:`Finding`, :class:`StageCheck`,
:class:`CheckInputs` and the streaming helpers), :mod:`~pipelines.checks.graph` (ingest and reorder),
:mod:`~pipelines.checks.partition`, :mod:`~pipelines.checks.sample`, :mod:`~pipelines.checks.plan`,
:mod:`~pipelines.checks.pack` and :mod:`~pipelines.checks.aligned` (the policies' layouts), and
:mod:`~pipelines.checks.model` with :mod:`~pipelines.checks.link` (train and export). This package re-exports the
first six modules' names.
"""

from pipelines.checks.base import CheckInputs, Finding, StageCheck, quarantine_failed, quarantined_copy
from pipelines.checks.base import _batch_index as _batch_index  # tests read sample indexes with it
from pipelines.checks.graph import (
    CSR_VALID,
    FEATURES_FINITE,
    PERMUTATION_BIJECTIVE,
    SAME_GRAPH,
    check_csr,
    check_features_finite,
    check_permutation,
    check_same_graph,
)
from pipelines.checks.pack import (
    ADDRESSES_IN_BOUNDS,
    CHANGESETS_REPLAY,
    CHUNKS_ALIGNED,
    DISK_BUDGET_RESPECTED,
    check_changesets,
    check_disk_budget,
    check_disk_caches,
    check_packed_addresses,
    check_packed_chunks,
)
from pipelines.checks.partition import PARTS_BALANCED, PARTS_COVER_NODES, check_balance, check_partition
from pipelines.checks.plan import BUDGETS_RESPECTED, SAMPLED_NODES_TIERED, check_plan_budgets, check_plan_tiers
from pipelines.checks.sample import BLOCKS_IN_RANGE, SEEDS_MATCH_SPLIT, check_sample_blocks, check_sample_seeds

__all__ = [
    "CheckInputs",
    "Finding",
    "StageCheck",
    "quarantine_failed",
    "quarantined_copy",
    "check_csr",
    "check_features_finite",
    "check_permutation",
    "check_same_graph",
    "check_balance",
    "check_partition",
    "check_sample_blocks",
    "check_sample_seeds",
    "check_plan_budgets",
    "check_plan_tiers",
    "check_packed_addresses",
    "check_packed_chunks",
    "check_changesets",
    "check_disk_caches",
    "check_disk_budget",
    "CSR_VALID",
    "FEATURES_FINITE",
    "PERMUTATION_BIJECTIVE",
    "SAME_GRAPH",
    "PARTS_COVER_NODES",
    "PARTS_BALANCED",
    "BLOCKS_IN_RANGE",
    "SEEDS_MATCH_SPLIT",
    "BUDGETS_RESPECTED",
    "SAMPLED_NODES_TIERED",
    "ADDRESSES_IN_BOUNDS",
    "CHUNKS_ALIGNED",
    "DISK_BUDGET_RESPECTED",
    "CHANGESETS_REPLAY",
]
