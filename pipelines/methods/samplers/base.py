"""The neighbour-sampler interface and registry.

A sampler is a :class:`Sampler` entry of :data:`SAMPLERS`: for one mini-batch it returns the layered blocks
of :class:`storage_kernels.kernels.SampledBlocks` -- ``nodes`` (seeds first, then the nodes each hop reached,
in first-seen order), ``hop_counts`` (nodes known after each hop), and per hop a CSR (``indptrs[h]``,
``cols[h]``) over the destinations ``nodes[:hop_counts[h]]`` whose columns are positions into ``nodes``. The
result must be a pure function of ``(graph, seeds, fanouts, seed)``: the sample stage derives ``seed`` per
batch, and an artifact must not depend on ``num_threads``. Adding one: a module that registers it, plus one
import line in ``pipelines/methods/samplers/__init__.py`` (``docs/EXTENDING.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from storage_kernels.kernels import SampledBlocks
from storage_kernels.registry import Registry

if TYPE_CHECKING:
    from pipelines.core.graphio import GraphArrays

__all__ = ["SAMPLERS", "SampleFn", "Sampler", "batch_seed"]

#: ``sample(graph, seeds, fanouts, seed, num_threads) -> SampledBlocks``
SampleFn = Callable[["GraphArrays", np.ndarray, np.ndarray, int, int], SampledBlocks]


@dataclass(frozen=True)
class Sampler:
    """One registered neighbour sampler (see the module docstring for the contract)."""

    name: str
    sample: SampleFn
    description: str = ""


_SPLIT_CODE = {"train": 0, "val": 1, "test": 2}


def batch_seed(seed: int, split: str, epoch: int, step: int) -> int:
    """The sampler seed of one batch (independent streams per batch, stable across runs)."""
    state = np.random.SeedSequence([seed & 0xFFFFFFFF, _SPLIT_CODE[split], epoch, step]).generate_state(2)
    return int(state[0]) << 32 | int(state[1])


#: Every neighbour sampler, by ``sample.sampler`` name.
SAMPLERS: Registry[Sampler] = Registry("sample.sampler")
