"""The ``partition`` section: which partitioner, and the knobs of the partitioners that read them.

Declared beside the partitioners it configures; :mod:`pipelines.config` checks ``method`` against the registry
and derives the artifact parameters.
"""

from __future__ import annotations

from pipelines.core.sections import SEED_BOUNDS, Section
from trainer.config import setting

__all__ = ["PartitionConfig"]


class PartitionConfig(Section):
    """The ``partition`` section: the partitioner and its knobs (``artifact="selected"``: those it reads)."""

    method: str = setting(
        "range",
        "Partitioner (pipelines.methods.partitioners): range (contiguous ids), metis (pymetis, in memory), fennel "
        "(streaming, OUTRE's variant) or grem (streaming recursive bisection).",
    )
    num_parts: int = setting(16, "Number of partitions.", gt=0)
    imbalance: float = setting(0.05, "Allowed imbalance: every part holds <= (1+imbalance)*N/p nodes.", ge=0)
    seed: int = setting(0, "Seed for stream order and tie-breaks.", **SEED_BOUNDS)
    chunk_nodes: int = setting(1_000_000, "Nodes per streamed chunk (fennel, grem).", artifact="selected", gt=0)
    train_penalty: float = setting(1.0, "OUTRE: weight of the training-node balance penalty (fennel).",
                                   artifact="selected", ge=0)
    bloom_bits: int = setting(1 << 20, "FENNEL: bits per part-neighbourhood Bloom filter.", artifact="selected",
                              gt=0)
    two_level_threshold: int = setting(
        128, "FENNEL: above this many parts, partition in two levels (sqrt(p) x sqrt(p)).", artifact="selected",
        gt=1,
    )
    grem_chunk_fraction: float = setting(0.1, "GREM: chunk size as a fraction of nodes.", artifact="selected",
                                         gt=0, le=1)
    multilevel: bool = setting(
        True,
        "fennel, grem: coarsen the graph by size-constrained label propagation (the finest level streamed from "
        "disk), run the method on the coarsest graph and refine while projecting back (false: the single-level "
        "streaming algorithm).",
        artifact="selected",
    )
    memory_mb: int = setting(4096, "Memory budget; metis refuses graphs whose CSR exceeds it.", gt=0)
