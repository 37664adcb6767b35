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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pipelines.core.sections import RunConfig, Section
from pipelines.methods.policies.inputs import FeatureInputs, PackInputs, PlanInputs, TierPlan
from pipelines.methods.policies.reads import EpochReads, file_block_reads
from pipelines.methods.policies.tiers import frequency_plan, uncached_training_rows
from storage_kernels.registry import Registry
from trainer.config import artifact_effect

if TYPE_CHECKING:
    from pipelines.methods.policies.sharded import ShardedPack
    from trainer.features import FeatureSource

__all__ = ["POLICIES", "FeatureInputs", "PackInputs", "PlanInputs", "Policy", "TierPlan", "register_policy"]


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
    #: The policy's own settings, by config section (``{"plan": ..., "pack": ...}``): frozen pydantic models of
    #: :func:`trainer.config.setting` fields that :mod:`pipelines.config` adds to those sections, so the policy's
    #: knobs are declared here, with the policy, and set as ``--set plan.<field>=...``. Built-in policies only
    #: (``pipelines.methods.policies.BUILTIN``): the sections are assembled when ``pipelines.config`` loads.
    settings: ClassVar[Mapping[str, type[Section]]] = {}
    #: The ``artifact="selected"`` settings of the plan/pack/train sections this policy reads: they change
    #: this policy's artifacts only (``pipelines.config.artifact_params``). Its own ``settings`` declared
    #: ``artifact="selected"`` are added by :meth:`__init_subclass__`; list others (e.g. a train field) here.
    reads: ClassVar[frozenset[str]] = frozenset()
    #: Whether ``train.task=link`` with learned embeddings (``train.link_encoder=embedding``) trains them out of
    #: core in this policy's partition buffer (``mariusgnn``) rather than in memory.
    link_embeddings_out_of_core: ClassVar[bool] = False
    #: Whether the policy trains on exactly the sampled batches, as ``in_memory`` does (same model, same
    #: accuracy): False for a policy that changes what a batch sees (``mariusgnn``'s partition buffer,
    #: ``outre``'s pruned batches and historical embeddings). ``policy=auto`` considers only exact ones unless
    #: ``plan.auto_candidates`` names others.
    exact_samples: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = {name for model in cls.settings.values() for name, info in model.model_fields.items()
               if artifact_effect(info) == "selected"}
        cls.reads = frozenset(cls.reads) | own

    def resident_bytes(self, cfg: RunConfig, feature_bytes: int) -> dict[str, int]:
        """The RAM this policy's caches and buffers hold for ``feature_bytes`` of features, by the setting that
        sizes each (``pipelines.budget.check_fits`` holds them against ``memory_budget``). Default: the CPU
        cache, ``plan.cpu_cache_bytes`` (or its fraction), which the seed systems' plans fill."""
        return {"plan.cpu_cache": int(cfg.plan.budgets(feature_bytes)["cpu"])}

    def plan(self, inputs: PlanInputs) -> TierPlan:
        """Default: no cache; every node a batch reads is read from disk (or RAM) by the feature source."""
        return frequency_plan(inputs, {"gpu": 0, "cpu": 0})

    def predict_reads(self, inputs: PlanInputs, plan: TierPlan) -> EpochReads:
        """The bytes and read requests one training epoch of this policy reads from disk under ``plan`` (its own
        plan of ``inputs``), for ``policy=auto``'s cost model (:mod:`pipelines.methods.policies.reads`).
        Default: page-merged aligned reads of every uncached row a batch reads from the feature file."""
        return file_block_reads(inputs, plan)

    def training_reads_disk(self, plan: TierPlan) -> bool:
        """Whether training batches read feature rows from disk under ``plan`` (its own plan): the compute
        threads then leave the loader a core where that costs the step nothing
        (:func:`pipelines.methods.policies.auto.threads.thread_choice`). Default: some row a training batch reads
        is in neither cache of the plan."""
        return uncached_training_rows(plan)

    def auto_variants(self, cfg: RunConfig, feature_bytes: int, reads: EpochReads) -> list[dict[str, Any]]:
        """Settings (``{"section.field": value}``) besides ``cfg``'s own under which ``policy=auto`` also weighs
        this policy, given what it predicted it ``reads`` under ``cfg``: its main knobs' alternatives. Default:
        none."""
        return []

    def pack(self, inputs: PackInputs) -> dict[str, Any]:
        """Default: nothing to lay out; the feature source reads the ordered feature file (or RAM)."""
        return {"layout": "none"}

    def sharded_pack(self) -> ShardedPack | None:
        """How this policy's pack runs partitioned (``pipelines.shards.pack``: a global part, shards of
        independent units, a merge), or None when it is one global pass. Policies that lay nothing out shard
        trivially without saying so (``pipelines.shards.pack.sharded_pack_for``)."""
        return None

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
