"""The stage graph, written once: every stage's name, function, upstream stages, checks and description.

One name per node: the stage ``reorder`` is the function ``pipelines.stages.reorder.run``, the config section
``reorder``, the artifact directory ``<root>/<dataset>/reorder/<version>/``, the Dagster asset ``reorder`` and
the CLI verb ``strata reorder``. Everything that walks the pipeline derives from :data:`STAGES`: the Dagster
assets and asset checks (:mod:`pipelines.orchestration.assets`), the Dagster-free runner (:mod:`pipelines.runner`), the
benchmarks and the CLI (``strata run --until STAGE``).

``strata run`` materializes every stage but ``predict`` (:data:`RUN_STAGE_NAMES`); ``--until predict`` or
``strata predict`` runs it.

A stage function has one shape: ``run(store, cfg, *, <upstream artifacts by stage name>, progress=None) ->
StageResult``; its ``summary(artifact)`` gives the metadata Dagster shows. No Dagster import here.

Artifacts built before the stages were renamed live under the old directory names (``graph``, ``ordering``,
``partitioning``, ``samples``, ``packed``, ``model``); they stay listed and readable (``strata catalog ls``) but
are not reused, because the stage name is part of every version (README, "Upgrading").
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pipelines.checks import (
    ADDRESSES_IN_BOUNDS,
    BLOCKS_IN_RANGE,
    BUDGETS_RESPECTED,
    CHANGESETS_REPLAY,
    CHUNKS_ALIGNED,
    CSR_VALID,
    DISK_BUDGET_RESPECTED,
    FEATURES_FINITE,
    PARTS_BALANCED,
    PARTS_COVER_NODES,
    PERMUTATION_BIJECTIVE,
    SAME_GRAPH,
    SAMPLED_NODES_TIERED,
    SEEDS_MATCH_SPLIT,
    StageCheck,
)
from pipelines.checks.aligned import ALIGNED_LAYOUT
from pipelines.checks.model import ACCURACY_RECORDED, EXPORT_FILES, ONNX_MATCHES_TORCH
from pipelines.ops.content import CONTENT_CHECKS, ContentCheck
from pipelines.stages import export, ingest, pack, partition, plan, predict, reorder, sample, train
from pipelines.stages.common import StageResult
from storage_kernels.store import Artifact, ArtifactStore

__all__ = ["GROUP_INFERENCE", "GROUP_PREPROCESS", "GROUP_TRAINING", "RUN_STAGE_NAMES", "STAGES", "STAGE_NAMES",
           "Stage", "get_stage", "until"]

#: Asset groups: preprocessing (ingest .. pack), training (train, export) and inference (predict).
GROUP_PREPROCESS = "preprocess"
GROUP_TRAINING = "training"
GROUP_INFERENCE = "inference"


@dataclass(frozen=True)
class Stage:
    """One node of the stage graph."""

    name: str
    run: Callable[..., StageResult]
    upstream: tuple[str, ...]
    group: str
    description: str
    kinds: frozenset[str]
    summary: Callable[[Artifact], dict[str, Any]]
    checks: tuple[StageCheck, ...] = ()
    #: Whether a plain ``strata run`` (no ``--until``) runs it; ``predict`` runs only when asked for.
    on_run: bool = True

    @property
    def function(self) -> str:
        """The stage function's dotted path (for messages and metadata)."""
        return f"{self.run.__module__}.{self.run.__name__}"

    @property
    def format_version(self) -> int:
        """The stage module's ``FORMAT_VERSION`` (part of every version; the asset's ``code_version``)."""
        return int(sys.modules[self.run.__module__].FORMAT_VERSION)

    @property
    def also_reads(self) -> tuple[str, ...]:
        """Configuration the stage reads beyond its own section (its module's ``ALSO_READS``, if any)."""
        return tuple(getattr(sys.modules[self.run.__module__], "ALSO_READS", ()))


#: Every stage, in topological order.
STAGES: tuple[Stage, ...] = (
    Stage("ingest", ingest.run, (), GROUP_PREPROCESS,
          "CSR graph (symmetrised), float32 features, labels and train/val/test splits of the source.",
          frozenset({"numpy"}), ingest.summary, (CSR_VALID, FEATURES_FINITE)),
    Stage("reorder", reorder.run, ("ingest",), GROUP_PREPROCESS,
          "Permutation (perm/inverse) plus the CSR, features, labels and splits relabelled in the new order, so "
          "hot or nearby nodes sit together on disk.",
          frozenset({"numpy"}), reorder.summary, (PERMUTATION_BIJECTIVE, SAME_GRAPH, FEATURES_FINITE)),
    Stage("partition", partition.run, ("reorder",), GROUP_PREPROCESS,
          "Partition label of every node, per-part node lists, edge buckets, edge cut and balance.",
          frozenset({"numpy"}), partition.summary, (PARTS_COVER_NODES, PARTS_BALANCED)),
    Stage("sample", sample.run, ("reorder", "partition"), GROUP_PREPROCESS,
          "Offline-sampled layered blocks of every training epoch and of the val/test batches, with a Parquet "
          "batch index; its node lists are the access trace the planner counts.",
          frozenset({"numpy", "parquet"}), sample.summary, (BLOCKS_IN_RANGE, SEEDS_MATCH_SPLIT)),
    Stage("plan", plan.run, ("reorder", "sample"), GROUP_PREPROCESS,
          "The policy's tier of every node (GPU cache, CPU cache, disk, never read) within the cache budgets, with "
          "predicted hit rates (exact for the sampled trace).",
          frozenset({"numpy"}), plan.summary, (BUDGETS_RESPECTED, SAMPLED_NODES_TIERED)),
    Stage("pack", pack.run, ("reorder", "sample", "plan"), GROUP_PREPROCESS,
          "The policy's on-disk layout: cache blocks, per-segment disk caches, packed.bin with each batch's other "
          "disk rows in one aligned chunk, and per-node address tables aligned with the samples.",
          frozenset({"numpy"}), pack.summary,
          (ADDRESSES_IN_BOUNDS, CHUNKS_ALIGNED, ALIGNED_LAYOUT, CHANGESETS_REPLAY, DISK_BUDGET_RESPECTED)),
    Stage("train", train.run, ("reorder", "sample", "plan", "pack"), GROUP_TRAINING,
          "Best-validation model weights (state_dict), architecture and training history; the MLflow run holds "
          "the same files, parameters and per-epoch metrics.",
          frozenset({"pytorch", "mlflow"}), train.summary, (ACCURACY_RECORDED,)),
    Stage("export", export.run, ("reorder", "sample", "train"), GROUP_TRAINING,
          "ONNX model verified against PyTorch in onnxruntime, its fp16 and int8 variants, a browser app "
          "(onnxruntime-web) with a sample subgraph, and the registered "
          "model version (the 'champion' alias moves only when validation improves).",
          frozenset({"onnx", "mlflow"}), export.summary, (EXPORT_FILES, ONNX_MATCHES_TORCH)),
    Stage("predict", predict.run, ("reorder", "train"), GROUP_INFERENCE,
          "Every node's predicted class, its probability and an embedding (the logits by default), scored by the "
          "trained model layer-wise over the full graph in bounded memory, as predictions.parquet (query it by "
          "node id: strata catalog predictions).",
          frozenset({"pytorch", "parquet"}), predict.summary, on_run=False),
)

#: Stage names in topological order.
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
#: The stages a plain ``strata run`` materializes (ingest .. export: not ``predict``, an extra full pass).
RUN_STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES if s.on_run)
_BY_NAME = {s.name: s for s in STAGES}


def _check_topological(stages: Iterable[Stage]) -> None:
    seen: set[str] = set()
    for s in stages:
        missing = [u for u in s.upstream if u not in seen]
        if missing:
            raise AssertionError(f"stage {s.name!r} expected its upstream {missing} earlier in STAGES")
        seen.add(s.name)


_check_topological(STAGES)


def get_stage(name: str) -> Stage:
    """The stage called ``name`` (``ValueError`` listing the stages otherwise)."""
    if name not in _BY_NAME:
        raise ValueError(f"'stage' expected one of {', '.join(STAGE_NAMES)} (got {name!r})")
    return _BY_NAME[name]


def until(name: str) -> list[Stage]:
    """``name`` and every stage it depends on, in topological order."""
    wanted = {name}
    for s in reversed(STAGES[: STAGE_NAMES.index(get_stage(name).name) + 1]):
        if s.name in wanted:
            wanted.update(s.upstream)
    return [s for s in STAGES if s.name in wanted]


def _content_checks(stage: Stage) -> ContentCheck:
    """``stage``'s content checks (``StageCheck.quarantine``) as ``strata verify`` runs them: the failed ones."""

    def failed(artifact: Artifact, store: ArtifactStore) -> list[tuple[str, str]]:
        findings = [(c.name, c.run(artifact, store)) for c in stage.checks if c.quarantine]
        return [(name, f.problems[0]) for name, f in findings if not f.passed]

    return failed


for _stage in STAGES:  # verify's registry (pipelines.ops.content) names this module its provider
    CONTENT_CHECKS.register(_stage.name, _content_checks(_stage), replace=True)  # replace: a reload re-registers
