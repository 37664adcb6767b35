"""Cache/batching policies: every ``policy``, behind one registry (:data:`POLICIES`).

The interface is in :mod:`pipelines.methods.policies.base`. Each seed system is one module or subpackage here
that registers its policy and declares its own settings (``Policy.settings``); a new one is one new module
plus one line below (``docs/EXTENDING.md``).
"""

from pipelines.methods.policies.auto import Auto
from pipelines.methods.policies.base import (
    POLICIES,
    FeatureInputs,
    PackInputs,
    PlanInputs,
    Policy,
    TierPlan,
    register_policy,
)
from pipelines.methods.policies.baselines import InMemory, Mmap, Naive
from pipelines.methods.policies.diskgnn import DiskGNN
from pipelines.methods.policies.ginex import Ginex
from pipelines.methods.policies.hyperbatch import Hyperbatch
from pipelines.methods.policies.mariusgnn import MariusGNN
from pipelines.methods.policies.outre import Outre

#: The policies Strata ships, in the order their own settings are listed in the ``plan`` and ``pack`` sections
#: (``pipelines.config`` assembles those sections from them).
BUILTIN_POLICIES: tuple[type[Policy], ...] = (Auto, DiskGNN, Hyperbatch, Outre, Ginex, MariusGNN, InMemory, Mmap,
                                               Naive)
# auto plans as any of the others, under their settings: each of theirs that changes an artifact changes its own
Auto.reads = frozenset().union(*(p.reads for p in BUILTIN_POLICIES))

__all__ = ["BUILTIN_POLICIES", "POLICIES", "FeatureInputs", "PackInputs", "PlanInputs", "Policy", "TierPlan",
           "register_policy"]
