"""The packed tier: each batch's uncached rows, read as one aligned chunk of ``packed.bin`` (DiskGNN)."""

from __future__ import annotations

import numpy as np

from storage_kernels import kernels
from storage_kernels.packstore import BatchAddresses, PackedStore, Tier
from trainer.features.base import DirectFile, FeatureTier, TierRead
from trainer.features.buffers import READ_BUFFERS, ReadBuffers

__all__ = ["PackedChunkTier"]


class PackedChunkTier(FeatureTier):
    """The nodes addressed to ``Tier.PACKED`` (slot = row within the batch's chunk), from one sequential
    aligned read of the batch's chunk (``O_DIRECT`` when the filesystem allows it) into a reusable aligned
    buffer; the rest goes to ``fallback`` (the feature file, for unpacked evaluation batches).

    The chunk a read stage leaves in ``TierRead.buffer`` is a view of one of the tier's ``num_buffers``
    :class:`~trainer.features.buffers.ReadBuffers` (default :data:`~trainer.features.buffers.READ_BUFFERS`):
    it stays valid until the batch's assemble ends, since the tier declares ``max_reads_ahead = num_buffers``
    (see there).

    >>> store = PackedStore(packed_dir, samples)
    >>> tier = PackedChunkTier(store, fallback=FileTier(features_path))
    """

    reads_disk = True

    def __init__(self, store: PackedStore, fallback: FeatureTier | None = None, *, num_threads: int = 0,
                 num_buffers: int = READ_BUFFERS) -> None:
        super().__init__(Tier.PACKED, store.feature_dim, fallback, f"packed chunks ({store.packed_path})")
        self.buffers = ReadBuffers(num_buffers, store.max_chunk_bytes)  # every chunk fits: never replaced
        self.store = store
        self.num_threads = int(num_threads)
        # packed.bin: opened once, O_DIRECT when the filesystem accepts it
        self._file = DirectFile(store.packed_path, "chunks")
        self.direct_io, self.fallback_reason = self._file.direct, self._file.fallback_reason

    @property
    def max_reads_ahead(self) -> int:  # type: ignore[override]
        """The chunk buffers: a chunk stays valid until its batch's assemble ends within this many reads."""
        return self.buffers.count

    def num_slots(self, addr: BatchAddresses) -> int:
        return addr.chunk_rows

    def fetch(self, addr: BatchAddresses, part: TierRead) -> None:
        buffer = self.buffers.next(addr.chunk_bytes)
        # one sequential read of the whole chunk (its length is padded to the alignment) into the buffer
        self.bytes_read += self._file.pread(np.array([addr.chunk_offset], np.int64),
                                            np.array([addr.chunk_bytes], np.int64), buffer, np.zeros(1, np.int64),
                                            self.num_threads)
        self.read_requests += 1
        nbytes = addr.chunk_rows * self.store.row_bytes
        part.buffer = buffer[:nbytes].view(np.float32).reshape(addr.chunk_rows, self.feature_dim)  # (R, F)

    def gather(self, part: TierRead) -> None:
        assert part.buffer is not None  # fetched by the read stage
        kernels.gather_rows_into(part.buffer, part.slot, part.staging, part.pos, self.num_threads)

    def close(self) -> None:
        self._file.close()
