"""Neighbour samplers: every ``sample.sampler``, behind one registry (:data:`SAMPLERS`).

The interface is in :mod:`pipelines.samplers.base`; each module below registers its sampler (a new one is one
new module plus one line here, ``docs/EXTENDING.md``).
"""

from pipelines.samplers import dense, uniform  # noqa: F401  (registration)
from pipelines.samplers.base import SAMPLERS, Sampler

__all__ = ["SAMPLERS", "Sampler"]
