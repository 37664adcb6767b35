"""``outre``: OUTRE's partition-based batching with historical embeddings (Sheng et al., 2024).

- :mod:`.policy`: the policy (the CPU budget split between a feature cache and historical embeddings, the
  pruned batches and the staleness schedule);
- :mod:`.trace`: the pruning of a batch's sampled trace by the historical cache.
"""

from pipelines.methods.policies.outre.policy import Outre

__all__ = ["Outre"]
