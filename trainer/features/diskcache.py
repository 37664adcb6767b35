"""The disk-cache tier: each batch's rows in its segment's disk cache (DiskGNN's third level), read with
page-merged aligned reads of ``disk_cache.bin``."""

from __future__ import annotations

from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN
from storage_kernels.packstore import BatchAddresses, PackedStore, Tier
from trainer.features.base import DirectFile, FeatureTier, TierRead, read_blocks

__all__ = ["DiskCacheTier"]


class DiskCacheTier(FeatureTier):
    """The nodes addressed to ``Tier.DISK_CACHE`` (slot = row in the batch's segment cache, which starts at
    ``BatchAddresses.cache_offset`` of ``disk_cache.bin``); the rest goes to ``fallback`` (the packed chunk).

    The read stage fetches every 4096-byte block holding one of the batch's rows exactly once, coalescing
    consecutive blocks into one request (DiskGNN merges same-page requests), with aligned direct reads
    (``O_DIRECT`` when the filesystem allows it) into a reusable aligned buffer, and copies the rows straight
    into their rows of the staging block: nothing is left to gather. ``bytes_read`` is then exactly
    ``4096 x`` the batch's distinct blocks (``storage_kernels.packstore.cache_blocks``), which the pack stage
    predicts.

    >>> store = PackedStore(packed_dir, samples)
    >>> tier = DiskCacheTier(store, fallback=PackedChunkTier(store, FileTier(features_path)))
    """

    reads_disk = True

    def __init__(self, store: PackedStore, fallback: FeatureTier | None = None, *, num_threads: int = 0) -> None:
        if not store.has_disk_cache:
            raise ValueError(f"'{store.path}' expected the disk-cache files of a packed store (got none)")
        super().__init__(Tier.DISK_CACHE, store.feature_dim, fallback, f"disk cache ({store.disk_cache_path})")
        self.store = store
        self.num_threads = int(num_threads)
        self._file = DirectFile(store.disk_cache_path, "disk-cache rows")
        self.direct_io, self.fallback_reason = self._file.direct, self._file.fallback_reason
        self._buffer = kernels.aligned_empty(DATA_ALIGN)

    def num_slots(self, addr: BatchAddresses) -> int:
        return addr.cache_rows

    def fetch(self, addr: BatchAddresses, part: TierRead) -> None:
        assert part.staging is not None  # reserved by the source before the I/O
        # the distinct blocks of the part's rows (sorted; packstore.cache_blocks's) and each row's place in them
        blocks, at = kernels.blocks_for_rows(part.slot, addr.cache_offset, self.store.row_bytes)
        # the buffer grows to at most the largest segment cache
        self._buffer, nbytes, runs = read_blocks(self._file, blocks, self._buffer, self.num_threads)
        self.bytes_read += nbytes
        self.read_requests += runs
        kernels.gather_rows_at_into(self._buffer, at, part.staging, part.pos, self.num_threads)

    def gather(self, part: TierRead) -> None:
        """Nothing to do: the read stage put the rows in place."""

    def close(self) -> None:
        self._file.close()
