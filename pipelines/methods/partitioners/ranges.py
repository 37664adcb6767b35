"""``range``: contiguous id ranges of near-equal size (good after a locality-preserving reorder)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pipelines.methods.partitioners.base import PARTITIONERS, Partitioner, PartitionRun, range_parts
from pipelines.methods.partitioners.partgraph import PartGraph

if TYPE_CHECKING:
    from pipelines.methods.partitioners.settings import PartitionConfig

__all__ = ["contiguous_ranges"]


def contiguous_ranges(graph: PartGraph, p: int, cfg: PartitionConfig, run: PartitionRun) -> np.ndarray:
    """Node ``v`` goes to part ``v * p // n``."""
    return range_parts(graph.num_nodes, p)


PARTITIONERS.register("range", Partitioner("range", contiguous_ranges, description="Contiguous id ranges."))
