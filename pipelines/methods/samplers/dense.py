"""``dense``: MariusGNN's DENSE sampler (Delta Encoding of Neighborhood SamplEs), one-hop samples reused.

Each node's neighbours are sampled once per mini-batch, with the fanout of the first hop that reaches it, and
that one sample serves every later hop: hop ``h`` only samples the nodes new after hop ``h - 1``. The kernel
(:func:`storage_kernels.kernels.sample_dense`, in C) builds one CSR over the batch's nodes; each hop's block
is a prefix of it, so the result is in the sample-set layout the trainer already reads. Per batch it samples
and relabels ``sum_h |new nodes of hop h| * fanout`` edges instead of ``sum_h |nodes known at hop h| *
fanout`` (``benchmarks/bench_dense.py`` measures both). Hop 0 equals ``uniform``'s hop 0 for the same seed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pipelines.methods.samplers.base import SAMPLERS, Sampler
from storage_kernels import kernels

if TYPE_CHECKING:
    from pipelines.core.graphio import GraphArrays

__all__ = ["dense"]


def dense(graph: GraphArrays, seeds: np.ndarray, fanouts: np.ndarray, seed: int, num_threads: int
          ) -> kernels.SampledBlocks:
    return kernels.sample_dense(graph.indptr, graph.indices, seeds, fanouts, seed, num_threads=num_threads)


SAMPLERS.register("dense", Sampler("dense", dense, "MariusGNN's DENSE: each node's neighbours sampled once per "
                                   "batch (first hop's fanout) and reused at every hop."))
