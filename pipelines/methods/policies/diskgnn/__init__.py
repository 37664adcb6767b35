"""``diskgnn``: DiskGNN's offline-sampled, packed feature store (Liu et al., 2025), in four modules.

- :mod:`.policy`: the policy (plan: static GPU/CPU caches of the trace's hottest rows; pack; features);
- :mod:`.layout`: the pack's on-disk layout (cache blocks, segment disk caches, packed chunks, address tables);
- :mod:`.search`: the (m, s) search for the segment disk caches within ``pack.disk_budget``;
- :mod:`.window`: the segment window's Belady schedule (a RAM buffer of segment disk-cache blocks).
"""

from pipelines.methods.policies.diskgnn.policy import DiskGNN

__all__ = ["DiskGNN"]
