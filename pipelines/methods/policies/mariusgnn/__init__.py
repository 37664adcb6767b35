"""``mariusgnn``: MariusGNN's partition buffer for node classification (Waleffe et al., thesis ch. 5).

- :mod:`.policy`: the policy (physical partitions, the partition sets per epoch, batches re-sampled inside each
  set's subgraph; the feature source is ``trainer.features.partition_buffer``);
- :mod:`.tuning`: the auto-tuning rules for ``p`` and ``c``.

The partition orders themselves (BETA, COMET, Alg. 7, random) are :mod:`trainer.partition_orders`: the link
trainer walks them every epoch too.
"""

from pipelines.methods.policies.mariusgnn.policy import MariusGNN

__all__ = ["MariusGNN"]
