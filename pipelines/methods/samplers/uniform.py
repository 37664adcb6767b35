"""``uniform``: per-layer uniform neighbour sampling without replacement (GraphSAGE's sampler), in C.

Every hop samples ``fanouts[h]`` distinct neighbours of each destination (all of them when the degree is at
most the fanout; ``-1`` = all) with a counter-based random stream per (seed, hop, node), so the blocks are the
same for any thread count (:func:`storage_kernels.kernels.sample_blocks`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pipelines.methods.samplers.base import SAMPLERS, Sampler
from storage_kernels import kernels

if TYPE_CHECKING:
    from pipelines.core.graphio import GraphArrays

__all__ = ["uniform"]


def uniform(graph: GraphArrays, seeds: np.ndarray, fanouts: np.ndarray, seed: int, num_threads: int
            ) -> kernels.SampledBlocks:
    return kernels.sample_blocks(graph.indptr, graph.indices, seeds, fanouts, seed, num_threads=num_threads)


SAMPLERS.register("uniform", Sampler("uniform", uniform, "Per-layer uniform sampling without replacement."))
