"""What passes between the stages and a policy: the inputs of ``plan``, ``pack`` and ``features``, and the plan.

The plan, pack and train stages build these; a policy (:mod:`pipelines.methods.policies.base`) reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pathlib import Path

    from pipelines.core.graphio import GraphArrays
    from pipelines.core.progress import Progress
    from pipelines.core.sections import RunConfig
    from storage_kernels.sampleset import SampleSet
    from storage_kernels.store import Artifact, ArtifactBuilder

__all__ = ["FeatureInputs", "PackInputs", "PlanInputs", "TierPlan"]


@dataclass(frozen=True)
class PlanInputs:
    """What a policy plans from: the ordered graph, the offline samples (the access trace), the config."""

    graph: GraphArrays
    samples: SampleSet
    cfg: RunConfig
    progress: Progress | None = None
    #: The data root (``policy=auto`` keeps the disk's profile there); None where a caller has none.
    data_root: Path | None = None


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
    cfg: RunConfig
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
    cfg: RunConfig
