"""Sampling a memory-mapped CSR with each hop's rows asked for ahead (:func:`sample_prefetched`).

A CSR larger than memory is read a few entries per row, rows far apart: sampled directly, every row is a
synchronous 4 KiB page fault, one at a time per sampling thread. Here, before the hops that read them, the
rows are handed to the kernel at once (:func:`storage_kernels.kernels.prefetch_rows`, ``MADV_WILLNEED``), so
the device serves a whole frontier in parallel: the seeds' rows first; then, for hop ``h`` >= 1, the rows of
the nodes the first ``h`` hops reach, found by running the sampler with ``fanouts[:h]``. That relies on a
sampler's hop ``h`` not depending on later fanouts (true of ``uniform`` and ``dense``, whose streams are
keyed by (seed, hop, node)); for one where it did, only the read-ahead would miss. The blocks returned are
always the sampler's own, from the last call: read-ahead changes what is in the page cache, nothing else.
The price is re-sampling the first hops (for two layers: the seeds' hop, a small fraction of the batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pipelines.core.confine import memory_limit
from storage_kernels import kernels
from storage_kernels.arrays import advise_random

if TYPE_CHECKING:
    from pipelines.core.graphio import GraphArrays
    from pipelines.methods.samplers.base import Sampler

__all__ = ["csr_outgrows_memory", "prepare_csr_reads", "sample_prefetched"]


def csr_outgrows_memory(graph: GraphArrays, memory_budget: int | None) -> bool:
    """Whether ``graph``'s CSR (offsets and entries) is larger than ``memory_budget`` bytes (None: the memory
    this process may use), so that sampling it misses the page cache and reading ahead pays. A CSR that the
    page cache holds gains nothing from it and would pay its system calls (2-5x the sampling time, measured
    on a resident 1M-node CSR)."""
    limit = memory_limit() if memory_budget is None else memory_budget
    return int(graph.indptr.nbytes) + int(graph.indices.nbytes) > limit


def prepare_csr_reads(graph: GraphArrays, memory_budget: int | None) -> bool:
    """Set up sampling reads of ``graph``'s CSR and say whether to read ahead: its file mappings are advised
    random (``advise_random``: a fault reads its page, not 128 KiB of read-around), and reading ahead pays
    when it is such a mapping that outgrows ``memory_budget`` (:func:`csr_outgrows_memory`)."""
    return advise_random(graph.indptr, graph.indices) > 0 and csr_outgrows_memory(graph, memory_budget)


def sample_prefetched(sampler: Sampler, graph: GraphArrays, seeds: np.ndarray, fanouts: np.ndarray, seed: int,
                      num_threads: int, prefetch: bool = True) -> kernels.SampledBlocks:
    """``sampler.sample(graph, seeds, fanouts, seed, num_threads)``, with the CSR rows of every hop read ahead
    when ``prefetch`` (the CSR is memory-mapped from a file: see the module docstring)."""
    if not prefetch or len(fanouts) == 0:
        return sampler.sample(graph, seeds, fanouts, seed, num_threads)
    kernels.prefetch_rows(graph.indptr, graph.indices, seeds)
    for hop in range(1, len(fanouts)):
        reached = sampler.sample(graph, seeds, fanouts[:hop], seed, num_threads)
        kernels.prefetch_rows(graph.indptr, graph.indices, reached.nodes[int(reached.hop_counts[hop - 1]):])
    return sampler.sample(graph, seeds, fanouts, seed, num_threads)
