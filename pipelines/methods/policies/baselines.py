"""The baselines every policy is measured against: ``in_memory``, ``mmap`` and ``naive``.

``in_memory``
    every feature row in RAM (the upper bound; the artifact's ``features.npy`` loaded whole).
``mmap``
    the ordered feature file memory-mapped (``np.load(mmap_mode="r")``): rows are gathered from the map and
    the OS page cache decides what stays in memory -- what PyG users do today. Its reads are page faults,
    invisible to the source's counters (``bytes_read`` 0); ``strata bench`` counts them from the process's
    I/O accounting instead (``/proc/self/io``, major faults), and confines the page cache with a memory cgroup.
``naive``
    every needed row read from the ordered feature file with its own aligned direct read of the 4 KiB
    block(s) holding it, each time it is needed, no cache (the PyG+ / DGL-OnDisk baseline).

Neither plans a cache nor lays anything out (the :class:`~pipelines.methods.policies.base.Policy` defaults).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np

from pipelines.methods.policies.base import FeatureInputs, PlanInputs, Policy, TierPlan, register_policy
from pipelines.methods.policies.reads import EpochReads, row_reads, training_rows
from storage_kernels.halfwords import as_words

if TYPE_CHECKING:
    from pipelines.core.sections import RunConfig
    from trainer.features import FeatureSource

__all__ = ["InMemory", "Mmap", "Naive"]


@register_policy
class InMemory(Policy):
    name = "in_memory"
    description = "Every feature row in RAM (the upper bound)."
    out_of_core = False
    mmap_mode: ClassVar[Literal["r"] | None] = None  # None: the feature file loaded whole

    def resident_bytes(self, cfg: RunConfig, feature_bytes: int) -> dict[str, int]:
        return {"the feature file (in_memory)": int(feature_bytes)}

    def predict_reads(self, inputs: PlanInputs, plan: TierPlan) -> EpochReads:
        return EpochReads(0, 0, model="every row in RAM")

    def training_reads_disk(self, plan: TierPlan) -> bool:
        return False  # every row in RAM

    def features(self, inputs: FeatureInputs) -> FeatureSource:
        from trainer.features import InMemoryFeatures

        rows = np.load(inputs.reorder.file("features.npy"), mmap_mode=self.mmap_mode)
        return InMemoryFeatures(as_words(rows), device=inputs.device)  # float16 files: rows of 4-byte words


@register_policy
class Mmap(InMemory):
    name = "mmap"
    description = "The feature file memory-mapped; the OS page cache is the only cache (what PyG users do)."
    out_of_core = True
    page_cache = True
    mmap_mode = "r"

    def resident_bytes(self, cfg: RunConfig, feature_bytes: int) -> dict[str, int]:
        return {}  # the page cache holds what the kernel lets it

    def predict_reads(self, inputs: PlanInputs, plan: TierPlan) -> EpochReads:
        return Policy.predict_reads(self, inputs, plan)  # page faults of the blocks a batch reads, nothing cached

    def training_reads_disk(self, plan: TierPlan) -> bool:
        return Policy.training_reads_disk(self, plan)  # its page faults read the disk


@register_policy
class Naive(Policy):
    name = "naive"
    description = "One aligned direct read per needed row, every time, no cache (PyG+/DGL-OnDisk)."

    def resident_bytes(self, cfg: RunConfig, feature_bytes: int) -> dict[str, int]:
        return {}  # no cache

    def predict_reads(self, inputs: PlanInputs, plan: TierPlan) -> EpochReads:
        return row_reads(inputs, training_rows(inputs), queue_depth=32)

    def features(self, inputs: FeatureInputs) -> FeatureSource:
        from trainer.features import NaiveDiskFeatures

        return NaiveDiskFeatures(inputs.reorder.file("features.npy"), device=inputs.device)
