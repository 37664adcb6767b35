"""Neighbour samplers: every ``sample.sampler``, behind one registry (:data:`SAMPLERS`).

The interface is in :mod:`pipelines.methods.samplers.base`; each module below registers its sampler (a new one is one
new module plus one line here, ``docs/EXTENDING.md``).
"""

from pipelines.methods.samplers import dense, uniform  # noqa: F401  (registration)
from pipelines.methods.samplers.base import SAMPLERS, Sampler, batch_seed

__all__ = ["SAMPLERS", "Sampler", "batch_seed"]
