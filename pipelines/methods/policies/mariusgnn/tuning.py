"""MariusGNN's auto-tuning rules for disk-based training (thesis section 5.4) and the policy's resolution.

The rule (:func:`autotune`): with ``NO`` the node (feature) bytes, ``EO`` the edge bytes and ``D`` the disk
block size, ``p = min(NO / D, sqrt(EO / D))`` -- the most partitions before the smallest read (a partition, or
an edge bucket of ``EO / p^2`` bytes) drops below a block; then the largest ``c`` with
``c * PO + 2 * c^2 * EBO + F < CPU`` (``PO = NO / p`` per partition, ``EBO = EO / p^2`` per bucket, two sorted
copies of the in-memory edges, ``F`` working memory); and ``l = 2p / c`` logical partitions (COMET, two of
them in the buffer).

:func:`resolve` turns the configuration into the policy's ``(p, c, l)``: ``plan.num_partitions`` /
``plan.buffer_partitions`` when set (non-zero), else the rule under the CPU budget (``plan.cpu_cache_bytes``
or ``plan.cpu_cache_fraction``), with one adjustment: a buffer must hold two partitions to pair them, so when
the rule's ``c`` is below 2 ``p`` is raised to the smallest value whose partitions fit two to the budget
(``budget_ok`` is False when not even that fits, e.g. a zero budget: ``c = 2`` over it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["BLOCK_BYTES", "EDGE_BYTES", "Tuning", "autotune", "buffer_capacity", "resolve"]

BLOCK_BYTES = 4096  # D: the direct-I/O block (partitions are read with aligned O_DIRECT reads)
EDGE_BYTES = 8  # bytes per stored CSR entry (int64 neighbour id)


@dataclass(frozen=True)
class Tuning:
    """The resolved ``p`` (physical partitions), ``c`` (buffer capacity in partitions), ``l`` (COMET's logical
    partitions), where each came from (``"config"`` or ``"auto"``), and whether ``c`` partitions fit the
    budget."""

    p: int
    c: int
    logical: int
    p_from: str
    c_from: str
    budget_ok: bool


def buffer_capacity(node_bytes: int, edge_bytes: int, p: int, cpu_bytes: int, fudge: int = 0) -> int:
    """The largest ``c <= p`` with ``c * PO + 2 * c^2 * EBO + F < cpu_bytes`` (0 when not even one fits)."""
    po, ebo = node_bytes / p, edge_bytes / p**2
    c = 0
    while c < p and (c + 1) * po + 2 * (c + 1) ** 2 * ebo + fudge < cpu_bytes:
        c += 1
    return c


def autotune(node_bytes: int, edge_bytes: int, cpu_bytes: int, block: int = BLOCK_BYTES, fudge: int = 0,
             ) -> tuple[int, int, int]:
    """The thesis's rules: ``(p, c, l)`` for ``node_bytes`` (NO), ``edge_bytes`` (EO) and ``cpu_bytes`` (CPU).

    >>> autotune(100 * 4096, 64 * 4096, 50 * 4096)  # p = min(100, 8); 2 x 51,200 + 2 x 4 x 4,096 < 204,800
    (8, 2, 8)
    """
    p = max(1, int(min(node_bytes / block, math.sqrt(edge_bytes / block))))
    c = buffer_capacity(node_bytes, edge_bytes, p, cpu_bytes, fudge)
    return p, c, max(1, math.ceil(2 * p / c)) if c else p


def resolve(num_nodes: int, row_bytes: int, num_edges: int, cpu_bytes: int, num_partitions: int = 0,
            buffer_partitions: int = 0) -> Tuning:
    """``(p, c, l)`` for a graph of ``num_nodes`` rows of ``row_bytes`` and ``num_edges`` CSR entries under
    ``cpu_bytes`` (the configured values win when non-zero; see the module docstring)."""
    node_bytes, edge_bytes = num_nodes * row_bytes, num_edges * EDGE_BYTES
    n = max(num_nodes, 1)
    p = min(num_partitions or autotune(node_bytes, edge_bytes, cpu_bytes)[0], n)
    if buffer_partitions:
        c = min(buffer_partitions, p)
    else:
        c = buffer_capacity(node_bytes, edge_bytes, p, cpu_bytes)
        if c < 2 and not num_partitions and cpu_bytes > 0:  # raise p until two partitions fit the budget
            p = min(max(p, math.ceil(2 * node_bytes / cpu_bytes)), n)
            c = buffer_capacity(node_bytes, edge_bytes, p, cpu_bytes)
            while c < 2 and p < n:
                p = min(2 * p, n)
                c = buffer_capacity(node_bytes, edge_bytes, p, cpu_bytes)
        c = max(c, min(2, p))
    budget_ok = c * node_bytes / p + 2 * c**2 * edge_bytes / p**2 < cpu_bytes
    logical = max(1, math.ceil(p / max(c // 2, 1)))
    return Tuning(p, c, logical, "config" if num_partitions else "auto", "config" if buffer_partitions else "auto",
                  budget_ok)
