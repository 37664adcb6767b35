"""Reorder strategies: every ``reorder.strategy``, behind one registry (:data:`REORDER_STRATEGIES`).

The interface is in :mod:`pipelines.methods.orders.base`; each module below registers its strategies (a new one is one
new module plus one line here, ``docs/EXTENDING.md``).
"""

from pipelines.methods.orders import by_partition, community, simple, traversal  # noqa: F401  (registration)
from pipelines.methods.orders.base import REORDER_STRATEGIES, ReorderStrategy, compute_order, strategy

__all__ = ["REORDER_STRATEGIES", "ReorderStrategy", "compute_order", "strategy"]
