"""``partition``: the nodes of each part contiguous (parts in label order, the previous order kept inside).

Labels come from :func:`pipelines.methods.partitioners.partition_graph` with ``reorder.partition_method`` and
``reorder.partition_parts``, the method's other knobs from the ``partition`` section (which is why this
strategy reads that section: its settings enter the ``reorder`` version).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.methods.orders.base import strategy

if TYPE_CHECKING:
    from pipelines.core.graphio import GraphArrays
    from pipelines.methods.orders.settings import ReorderConfig
    from pipelines.methods.partitioners.settings import PartitionConfig

__all__ = ["by_partition"]


@strategy("partition", "Nodes of each partition contiguous (reorder.partition_method, reorder.partition_parts).",
          reads=("partition_method", "partition_parts", "partition"))
def by_partition(graph: GraphArrays, rc: ReorderConfig, pc: PartitionConfig, info: dict[str, Any]) -> np.ndarray:
    from pipelines.methods.partitioners import partition_graph

    num_parts = min(rc.partition_parts, max(graph.num_nodes, 1))
    parts = np.asarray(partition_graph(graph, rc.partition_method, num_parts, pc))
    if parts.shape != (graph.num_nodes,):
        raise ValueError(f"'partition labels' expected shape ({graph.num_nodes},) (got {parts.shape})")
    info["num_parts"] = int(parts.max()) + 1 if parts.size else 0
    return np.argsort(parts, kind="stable").astype(np.int64)
