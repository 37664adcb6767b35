"""The reorder-strategy interface and registry.

A strategy is a :class:`ReorderStrategy` entry of :data:`REORDER_STRATEGIES`: a function that returns
``perm`` (new id -> old id, int64, a permutation of ``[0, N)``) for a graph. The reorder stage applies it with
the bounded-memory external permutation, so a strategy only decides the order. Adding one: a module that
defines the function and registers it, plus one import line in ``pipelines/methods/orders/__init__.py``
(``docs/EXTENDING.md``).

Entry contract: ``order(graph, reorder_cfg, partition_cfg, info) -> perm``; ``info`` receives statistics the
``reorder`` artifact records. ``reads`` names the ``reorder`` fields declared ``artifact="selected"`` the
strategy uses, or another section it reads whole (``"partition"``): they enter the artifact version only
when this strategy is selected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from storage_kernels.registry import Registry

if TYPE_CHECKING:
    from pipelines.core.graphio import GraphArrays
    from pipelines.methods.orders.settings import ReorderConfig
    from pipelines.methods.partitioners.settings import PartitionConfig

__all__ = ["REORDER_STRATEGIES", "OrderFn", "ReorderStrategy", "compute_order"]

OrderFn = Callable[["GraphArrays", "ReorderConfig", "PartitionConfig", dict[str, Any]], np.ndarray]


@dataclass(frozen=True)
class ReorderStrategy:
    """One registered vertex order (see the module docstring for the contract)."""

    name: str
    order: OrderFn
    description: str = ""
    reads: tuple[str, ...] = ()


#: Every vertex order, by ``reorder.strategy`` name.
REORDER_STRATEGIES: Registry[ReorderStrategy] = Registry("reorder.strategy")


def strategy(name: str, description: str, reads: tuple[str, ...] = ()) -> Callable[[OrderFn], OrderFn]:
    """Decorator: register ``fn`` as the strategy ``name``."""

    def register(fn: OrderFn) -> OrderFn:
        REORDER_STRATEGIES.register(name, ReorderStrategy(name, fn, description, reads))
        return fn

    return register


def compute_order(graph: GraphArrays, strategy: str, reorder_cfg: ReorderConfig | None = None,
                  partition_cfg: PartitionConfig | None = None, info: dict[str, Any] | None = None) -> np.ndarray:
    """Return ``perm`` (new id -> old id, int64) for ``strategy``; ``info`` (if given) receives extra stats."""
    from pipelines.methods.orders.settings import ReorderConfig
    from pipelines.methods.partitioners.settings import PartitionConfig

    entry = REORDER_STRATEGIES.get(strategy)
    perm = entry.order(graph, reorder_cfg if reorder_cfg is not None else ReorderConfig(),
                       partition_cfg if partition_cfg is not None else PartitionConfig(),
                       info if info is not None else {})
    return np.asarray(perm, dtype=np.int64)
