"""``identity``, ``random`` (the baseline) and ``degree`` (hubs first: the hot set is one contiguous prefix)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.methods.orders.base import strategy
from storage_kernels import kernels

if TYPE_CHECKING:
    from pipelines.core.graphio import GraphArrays
    from pipelines.methods.orders.settings import ReorderConfig
    from pipelines.methods.partitioners.settings import PartitionConfig

__all__ = ["by_degree", "identity", "random_order"]


@strategy("identity", "Ingested ids unchanged.")
def identity(graph: GraphArrays, rc: ReorderConfig, pc: PartitionConfig, info: dict[str, Any]) -> np.ndarray:
    return np.arange(graph.num_nodes, dtype=np.int64)


@strategy("random", "A seeded random permutation (the baseline every order is compared with).", reads=("seed",))
def random_order(graph: GraphArrays, rc: ReorderConfig, pc: PartitionConfig, info: dict[str, Any]) -> np.ndarray:
    return np.random.default_rng(rc.seed).permutation(graph.num_nodes).astype(np.int64, copy=False)


def degree_descending(graph: GraphArrays) -> np.ndarray:
    """Node ids by degree, highest first (ties by id: a stable sort), int64.

    A counting sort in C that streams the (memory-mapped) offsets: the result is the only O(N) array, where
    ``argsort(-degrees)`` held the degrees, their negation, the result and the sort's buffer (~28 bytes/node)."""
    return kernels.degree_order(graph.indptr)


@strategy("degree", "Highest degree first, so the hot set is one contiguous prefix.")
def by_degree(graph: GraphArrays, rc: ReorderConfig, pc: PartitionConfig, info: dict[str, Any]) -> np.ndarray:
    return degree_descending(graph)
