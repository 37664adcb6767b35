"""Feature sources: given a sampled batch, return its input features ``(len(batch.nodes), F)`` in node order.

A source is a chain of tiers, GraphBolt style: each :class:`FeatureTier` serves the nodes whose address
(``storage_kernels.packstore``: a :class:`~storage_kernels.packstore.Tier` and a slot per node, precomputed
by the pack stage) names its tier, and leaves the rest to the tier it wraps (its fallback)::

    GPUCacheTier -> CPUCacheTier -> DiskCacheTier -> PackedChunkTier -> FileTier
    device rows     host rows,      merged block     one aligned read    aligned block reads of features.npy
                    pinned w/ CUDA  reads of the     of the batch chunk  (merged; per row for the naive baseline)
                                    segment cache
                                    (through a segment window when the pack scheduled one:
                                    WindowedDiskCacheTier)

:class:`TieredSource` turns a chain into a :class:`FeatureSource` (what ``BatchLoader`` and ``train`` call: every
member declared there, :class:`FeatureSourceBase` the defaults), with a read stage (I/O) separate from the
assemble stage (gathers in node order, H2D copies). A chunk read stays in one of :data:`READ_BUFFERS` rotating
:class:`ReadBuffers` until its batch's assemble ends; a CPU batch's staging block is leased from a
:class:`~trainer.features.staging.StagingPool` until the batch is done (``FeatureSource.release``).
:func:`tiered_source` composes one from parts; the sources Strata trains from are compositions:

``InMemoryFeatures(features)``
    one :class:`MemoryTier` over the whole matrix (counted as the CPU tier). The reference.
``PackedFeatures(packed_dir, samples, device=..., features_path=...)``
    the whole chain over a ``pack`` artifact (DiskGNN's four-level store).
``NaiveDiskFeatures(features_path)``
    one :class:`FileTier` without merging: each needed row is its own aligned direct read, every time.
``GinexFeatures(changes_dir, samples, features_path)``
    a CPU cache changed after every training batch by precomputed Belady-optimal changesets (Ginex), over
    the feature file (:mod:`trainer.features.ginex`).

Counters (units in the names): ``bytes_read`` (per tier and summed), ``rows_by_tier`` (keys ``gpu``, ``cpu``,
``packed``, ``file``, ``disk_cache``: ``Tier.label``), ``hit_rate``, ``direct_io`` / ``fallback_reason`` (why
``O_DIRECT`` is not used, "" when it is), ``read_s`` / ``assemble_s``. Measured costs of the three sources:
``BENCHMARKS.md``.
"""

from __future__ import annotations

from storage_kernels.arrays import DATA_ALIGN as BLOCK_BYTES  # O_DIRECT unit of the feature file's reads
from trainer.features.base import FeatureSource, FeatureSourceBase, FeatureTier, NodeBatch, TierRead, check_rows
from trainer.features.buffers import READ_BUFFERS, ReadBuffers
from trainer.features.cache import CPUCacheTier, GPUCacheTier, MemoryTier
from trainer.features.diskcache import DiskCacheTier
from trainer.features.file import FileRows, FileTier
from trainer.features.ginex import GinexFeatures
from trainer.features.packed import PackedChunkTier
from trainer.features.source import (
    BatchRead,
    InMemoryFeatures,
    NaiveDiskFeatures,
    PackedFeatures,
    TieredSource,
    compose_tiers,
    tiered_source,
)
from trainer.features.window import WindowedDiskCacheTier

__all__ = [
    "BLOCK_BYTES",
    "BatchRead",
    "CPUCacheTier",
    "DiskCacheTier",
    "FeatureSource",
    "FeatureSourceBase",
    "FeatureTier",
    "FileRows",
    "FileTier",
    "GPUCacheTier",
    "GinexFeatures",
    "InMemoryFeatures",
    "MemoryTier",
    "NaiveDiskFeatures",
    "NodeBatch",
    "PackedChunkTier",
    "PackedFeatures",
    "READ_BUFFERS",
    "ReadBuffers",
    "TierRead",
    "TieredSource",
    "WindowedDiskCacheTier",
    "check_rows",
    "compose_tiers",
    "tiered_source",
]
