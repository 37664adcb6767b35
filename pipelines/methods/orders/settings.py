"""The ``reorder`` section: which vertex order, and the knobs of the strategies that read them.

Declared beside the strategies it configures; :mod:`pipelines.config` checks ``strategy`` and
``partition_method`` against their registries and derives the artifact parameters.
"""

from __future__ import annotations

from typing import Literal

from pipelines.core.sections import SEED_BOUNDS, Section
from trainer.config import setting

__all__ = ["ReorderConfig"]


class ReorderConfig(Section):
    """The ``reorder`` section: the strategy and its knobs (``artifact="selected"``: those the strategy reads)."""

    strategy: str = setting(
        "degree",
        "Vertex order (pipelines.methods.orders): identity, random (baseline), degree (hot first), bfs (from the top "
        "hub), rcm (reverse Cuthill-McKee), community (Rabbit Order: hierarchical communities, hubs first) or "
        "partition (nodes of each partition contiguous).",
    )
    seed: int = setting(0, "Seed of the random order and of community detection tie-breaks.", artifact="selected",
                        **SEED_BOUNDS)
    chunk_rows: int = setting(65_536, "Rows per chunk when rewriting features.", artifact=False, gt=0)
    memory_mb: int = setting(1024, "Memory budget of the external permutation (bucket size).", artifact=False,
                             gt=0)
    community_method: Literal["rabbit", "label_propagation"] = setting(
        "rabbit",
        "Communities of `community`: rabbit (incremental aggregation, dendrogram walked depth first) or "
        "label_propagation (flat communities by size, hubs first inside).",
        artifact="selected",
    )
    community_iterations: int = setting(10, "Label-propagation rounds (label_propagation only).",
                                        artifact="selected", gt=0)
    hub_fraction: float = setting(
        0.01, "`community`: this fraction of nodes, highest degree first, form one contiguous hot prefix.",
        artifact="selected", ge=0, le=1,
    )
    partition_method: str = setting("fennel", "Partitioner used by the `partition` strategy.", artifact="selected")
    partition_parts: int = setting(64, "Number of parts used by the `partition` strategy.", artifact="selected",
                                   gt=0)
