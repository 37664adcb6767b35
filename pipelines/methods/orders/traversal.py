"""``bfs`` (scipy's C BFS from the highest-degree vertex) and ``rcm`` (reverse Cuthill-McKee).

Both hold the adjacency in memory: an int32 copy of ``indices`` plus an int8 data array, about 5 bytes per
edge, plus O(N).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.methods.orders.base import strategy
from pipelines.methods.orders.simple import degree_descending

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

    from pipelines.core.graphio import GraphArrays
    from pipelines.methods.orders.settings import ReorderConfig
    from pipelines.methods.partitioners.settings import PartitionConfig

__all__ = ["bfs", "rcm"]


def _adjacency(graph: GraphArrays) -> csr_matrix:
    from scipy.sparse import csr_matrix

    n = graph.num_nodes
    data = np.ones(graph.num_edges, dtype=np.int8)
    return csr_matrix((data, np.asarray(graph.indices), np.asarray(graph.indptr)), shape=(n, n))


@strategy("bfs", "Breadth-first from the top hub; unreached nodes follow in degree order.")
def bfs(graph: GraphArrays, rc: ReorderConfig, pc: PartitionConfig, info: dict[str, Any]) -> np.ndarray:
    from scipy.sparse.csgraph import breadth_first_order

    n = graph.num_nodes
    if n == 0:
        return np.arange(0, dtype=np.int64)
    by_degree = degree_descending(graph)
    reached = breadth_first_order(_adjacency(graph), int(by_degree[0]), directed=True, return_predecessors=False)
    seen = np.zeros(n, dtype=bool)
    seen[reached] = True
    return np.concatenate([reached.astype(np.int64), by_degree[~seen[by_degree]]])


@strategy("rcm", "Reverse Cuthill-McKee (bandwidth reduction).")
def rcm(graph: GraphArrays, rc: ReorderConfig, pc: PartitionConfig, info: dict[str, Any]) -> np.ndarray:
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    if graph.num_nodes == 0:
        return np.arange(0, dtype=np.int64)
    return reverse_cuthill_mckee(_adjacency(graph), symmetric_mode=True).astype(np.int64)
