"""The cache/batching policy interface and registry: each seed system is one entry.

A policy decides, at three points of the stage graph, how features are kept and read:

``plan(inputs) -> TierPlan``
    the tier of every node (GPU cache, CPU cache, disk) from the sampled access trace. The default plans no
    cache: every row a batch reads comes from the tier the policy's feature source reads.
``pack(inputs) -> dict``
    writes the on-disk layout training reads into the ``pack`` artifact's builder and returns its statistics.
    The default writes nothing (``layout: none``): the policy reads the ordered feature file (or RAM).
``features(inputs) -> FeatureSource``
    the trainer's feature source (``trainer.features``) for this run's batches. Required.

``plan`` and ``pack`` artifacts carry the policy's name in their version, so policies never share a layout by
accident. Adding one: a module with a :class:`Policy` subclass registered in :data:`POLICIES`, plus one import
line in ``pipelines/methods/policies/__init__.py`` (``docs/EXTENDING.md``). ``strata run --set policy=NAME`` and the
Dagster run config (``settings.policy``) select it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from storage_kernels.registry import Registry

if TYPE_CHECKING:
    from pipelines.config import PipelineConfig
    from pipelines.core.graphio import GraphArrays
    from pipelines.stages.common import Progress
    from storage_kernels.sampleset import SampleSet
    from storage_kernels.store import Artifact, ArtifactBuilder
    from trainer.features import FeatureSource

__all__ = ["POLICIES", "FeatureInputs", "PackInputs", "PlanInputs", "Policy", "TierPlan", "register_policy"]


@dataclass(frozen=True)
class PlanInputs:
    """What a policy plans from: the ordered graph, the offline samples (the access trace), the config."""

    graph: GraphArrays
    samples: SampleSet
    cfg: PipelineConfig
    progress: Progress | None = None


@dataclass
class TierPlan:
    """A plan: ``tier`` (int8, ``storage_kernels.packstore.Tier`` codes) and ``slot`` (int64, row within its
    cache, -1 otherwise) per node, the cache node lists (sorted), the access ``frequency`` per node,
    statistics (budgets, predicted hit rates) for the artifact, and any further ``arrays`` the policy's pack
    stage reads (saved under their file names)."""

    tier: np.ndarray
    slot: np.ndarray
    gpu_nodes: np.ndarray
    cpu_nodes: np.ndarray
    frequency: np.ndarray
    stats: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class PackInputs:
    """What a policy lays out: the ordered graph, the samples, the ``plan`` artifact, the config, and the
    builder of the ``pack`` artifact to write into."""

    graph: GraphArrays
    samples: SampleSet
    plan: Artifact
    cfg: PipelineConfig
    builder: ArtifactBuilder
    progress: Progress | None = None


@dataclass(frozen=True)
class FeatureInputs:
    """What a policy opens its feature source on: the ``reorder`` artifact (``features.npy`` in the training
    order), the ``pack`` artifact it wrote (None where a caller has none: only policies that lay nothing out
    accept that), the sample set, the resolved device."""

    reorder: Artifact
    pack: Artifact | None
    samples: SampleSet
    device: str
    cfg: PipelineConfig


class Policy(ABC):
    """A cache/batching policy (see the module docstring). Subclasses set ``name`` and ``description``."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: False for a reference that holds the whole graph in RAM: ``strata bench`` runs it without a budget.
    out_of_core: ClassVar[bool] = True
    #: True when the policy's cache is the OS page cache (a memory map): it has no cache of its own to size.
    page_cache: ClassVar[bool] = False
    #: Why the policy's batches train only inside Strata's own training step ("" when they train any model):
    #: ``pipelines.batches`` refuses to serve them to a loop of the user's own, with this reason.
    own_training_step: ClassVar[str] = ""
    #: The ``artifact="selected"`` settings of the plan/pack/train sections this policy reads: they change
    #: this policy's artifacts only (``pipelines.config.artifact_params``).
    reads: ClassVar[frozenset[str]] = frozenset()

    def resident_bytes(self, cfg: PipelineConfig, feature_bytes: int) -> dict[str, int]:
        """The RAM this policy's caches and buffers hold for ``feature_bytes`` of features, by the setting that
        sizes each (``pipelines.budget.check_fits`` holds them against ``memory_budget``). Default: the CPU
        cache, ``plan.cpu_cache_bytes`` (or its fraction), which the seed systems' plans fill."""
        return {"plan.cpu_cache": int(cfg.plan.budgets(feature_bytes)["cpu"])}

    def plan(self, inputs: PlanInputs) -> TierPlan:
        """Default: no cache; every node a batch reads is read from disk (or RAM) by the feature source."""
        from pipelines.methods.policies.tiers import frequency_plan

        return frequency_plan(inputs, {"gpu": 0, "cpu": 0})

    def pack(self, inputs: PackInputs) -> dict[str, Any]:
        """Default: nothing to lay out; the feature source reads the ordered feature file (or RAM)."""
        return {"layout": "none"}

    @abstractmethod
    def features(self, inputs: FeatureInputs) -> FeatureSource:
        """The trainer's feature source for the training and evaluation batches of ``inputs.samples``."""


#: Every policy, by ``policy`` name (instantiated per use: policies hold no state between stages).
POLICIES: Registry[type[Policy]] = Registry("policy")


def register_policy(cls: type[Policy]) -> type[Policy]:
    """Class decorator: register ``cls`` under its ``name``."""
    if not cls.name:
        raise ValueError(f"'{cls.__name__}.name' expected a policy name (got {cls.name!r})")
    POLICIES.register(cls.name, cls)
    return cls
