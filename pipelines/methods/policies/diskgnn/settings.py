"""``diskgnn``'s own settings: the segment window's RAM (plan section) and the store's disk budget and layout
(pack section). :mod:`pipelines.config` puts them in their sections (``--set plan.disk_cache_buffer_bytes=1G``,
``--set pack.disk_budget=2``); the ``artifact="selected"`` ones change only ``diskgnn``'s artifacts."""

from __future__ import annotations

from typing import Literal

from pipelines.core.sections import Bytes, Section
from trainer.config import setting

__all__ = ["DiskGNNPackSettings", "DiskGNNPlanSettings"]


class DiskGNNPlanSettings(Section):
    """``diskgnn``'s part of the ``plan`` section."""

    disk_cache_buffer_fraction: float = setting(
        0.1, "diskgnn: the segment window, a RAM buffer of segment disk-cache rows (each block read at most once while "
        "a later batch of its segment needs it, Belady eviction, scheduled at pack time), as a fraction of feature "
        "bytes; 0 = none (every batch reads all its disk-cache blocks).", artifact="selected", ge=0, le=1)
    disk_cache_buffer_bytes: Bytes | None = setting(
        None, "diskgnn: absolute segment-window buffer (overrides the fraction).", artifact="selected", ge=0)

    def disk_cache_buffer(self, feature_bytes: int) -> int:
        """Bytes of the segment window's buffer: the absolute budget when set, else the fraction of the features."""
        if self.disk_cache_buffer_bytes is not None:
            return self.disk_cache_buffer_bytes
        return int(self.disk_cache_buffer_fraction * feature_bytes)


class DiskGNNPackSettings(Section):
    """``diskgnn``'s part of the ``pack`` section."""

    disk_budget: float | None = setting(
        3.0, "diskgnn: disk budget of the store (cache blocks + segment disk caches + packed chunks) as a multiple "
        "of the feature file's bytes, counted in whole 4 KiB blocks (the store's unit); the (m, s) search reads the "
        "fewest bytes within it (null: unlimited, the fewest reads, as pure packing).", artifact="selected", gt=0)
    minhash_k: int = setting(2, "diskgnn: hash functions of the MinHash signature ordering each disk cache.",
                             artifact="selected", ge=1)
    disk_cache_order: Literal["uses", "minhash"] = setting(
        "uses", "diskgnn: row order of each segment disk cache: uses (by the training positions of a row's first 8 "
        "reads in its segment: rows read together share blocks, best for the segment window) or minhash (the "
        "paper's Alg. 1, minhash_k hashes).", artifact="selected")
    read_gap_blocks: int = setting(
        0, "diskgnn, with the segment window: a batch also reads the unneeded 4 KiB blocks between two of its runs "
        "of disk-cache blocks at most this many apart, so they are one read request (more bytes, fewer requests; "
        "the bytes stay exactly predicted).", artifact="selected", ge=0)
