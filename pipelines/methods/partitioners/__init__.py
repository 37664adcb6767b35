"""Partitioners: every ``partition.method``, behind one registry (:data:`PARTITIONERS`).

The interface and the function other code calls (:func:`partition_graph`) are in
:mod:`pipelines.methods.partitioners.base`; each method is a module that registers itself, imported below (a new
method is one new module plus one line here, ``docs/EXTENDING.md``).
"""

from pipelines.methods.partitioners import fennel, grem, metis, ranges  # noqa: F401  (registration: one line per method)
from pipelines.methods.partitioners.base import (
    PARTITIONERS,
    Partitioner,
    PartitionRun,
    partition_graph,
    partition_graph_info,
    range_parts,
)
from pipelines.methods.partitioners.metis import metis_csr_bytes, metis_peak_bytes

__all__ = [
    "PARTITIONERS",
    "PartitionRun",
    "Partitioner",
    "metis_csr_bytes",
    "metis_peak_bytes",
    "partition_graph",
    "partition_graph_info",
    "range_parts",
]
