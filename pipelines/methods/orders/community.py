"""``community``: nodes of a community contiguous, the hottest nodes first.

``reorder.community_method``: ``rabbit`` -- Rabbit Order (:func:`storage_kernels.kernels.rabbit_order`:
incremental modularity aggregation, dendrogram walked depth first, so communities and their sub-communities are
contiguous) -- or ``label_propagation`` (flat communities by synchronous label propagation in C, by size
descending, hubs first inside). Either way the ``reorder.hub_fraction`` highest-degree nodes come first, as
one contiguous hot set (the hyperbatch note's hotset; they are sampled from everywhere, so no community owns
them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.methods.orders.base import strategy
from pipelines.methods.orders.simple import degree_descending
from storage_kernels import kernels

if TYPE_CHECKING:
    from pipelines.core.graphio import GraphArrays
    from pipelines.methods.orders.settings import ReorderConfig
    from pipelines.methods.partitioners.settings import PartitionConfig

__all__ = ["community", "community_order", "hubs_first"]


def hubs_first(perm: np.ndarray, hubs: np.ndarray) -> np.ndarray:
    """``hubs`` (in their given order) first, then the other nodes in ``perm``'s order."""
    if len(hubs) == 0:
        return perm
    is_hub = np.zeros(len(perm), dtype=bool)
    is_hub[hubs] = True
    return np.concatenate([np.asarray(hubs, dtype=np.int64), perm[~is_hub[perm]]])


def community_order(labels: np.ndarray, degrees: np.ndarray) -> tuple[np.ndarray, int]:
    """Order nodes by community (size descending, ties by smallest member), hubs first inside a community.

    Returns ``(perm, num_communities)``.
    """
    n = len(labels)
    if n == 0:
        return np.arange(0, dtype=np.int64), 0
    _, first, comm, sizes = np.unique(labels, return_index=True, return_inverse=True, return_counts=True)
    # Rank communities: larger first; equal sizes by their smallest member (= first index, ids ascend).
    rank_of = np.empty(len(sizes), dtype=np.int64)
    rank_of[np.lexsort((first, -sizes))] = np.arange(len(sizes), dtype=np.int64)
    perm = np.lexsort((np.arange(n), -np.asarray(degrees), rank_of[comm.reshape(-1)])).astype(np.int64)
    return perm, len(sizes)


@strategy("community", "Communities contiguous (Rabbit Order or label propagation), a hub prefix first.",
          reads=("seed", "community_method", "community_iterations", "hub_fraction"))
def community(graph: GraphArrays, rc: ReorderConfig, pc: PartitionConfig, info: dict[str, Any]) -> np.ndarray:
    if rc.community_method == "rabbit":
        perm, num_communities = kernels.rabbit_order(graph.indptr, graph.indices)
    else:
        labels, rounds = kernels.label_propagation(graph.indptr, graph.indices, rc.community_iterations, rc.seed)
        perm, num_communities = community_order(labels, np.asarray(graph.degrees()))
        info["lp_rounds"] = rounds
    hubs = int(round(rc.hub_fraction * graph.num_nodes))
    info.update({"community_method": rc.community_method, "num_communities": num_communities, "hub_nodes": hubs})
    return hubs_first(perm, degree_descending(graph)[:hubs])
