"""Cache/batching policies: every ``policy``, behind one registry (:data:`POLICIES`).

The interface is in :mod:`pipelines.methods.policies.base`; each module below registers its policies (a new one is one
new module plus one line here, ``docs/EXTENDING.md``).
"""

from pipelines.methods.policies import baselines, diskgnn, ginex, hyperbatch, mariusgnn, outre  # noqa: F401  (registration)
from pipelines.methods.policies.base import (
    POLICIES,
    FeatureInputs,
    PackInputs,
    PlanInputs,
    Policy,
    TierPlan,
    register_policy,
)

__all__ = ["POLICIES", "FeatureInputs", "PackInputs", "PlanInputs", "Policy", "TierPlan", "register_policy"]
