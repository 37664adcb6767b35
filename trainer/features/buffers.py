"""The read buffers whose rows outlive the read stage, and how many of them a source rotates.

Most tiers copy what they read into the batch's staging block before their ``fetch`` returns (the file, the
disk cache and its window, the hyperbatch and partition buffers): their buffers are scratch, reused by the next
``fetch``, and bound nothing. A tier whose rows are gathered later, in the assemble stage (the packed chunk:
one aligned read of the whole chunk, gathered into node order afterwards), reads into :class:`ReadBuffers`.

:data:`READ_BUFFERS` is the one default count: the packed tier, the factories (``tiered_source``,
``compose_tiers``, ``PackedFeatures``) and so the loader's bound (``FeatureSource.max_reads_ahead``, the
fewest buffers a tier of the source rotates) all take it from here.
"""

from __future__ import annotations

import numpy as np

from storage_kernels import kernels

__all__ = ["READ_BUFFERS", "ReadBuffers"]

#: Read buffers a tier rotates by default: double buffering, so that the load stage reads batch ``i + 1``
#: while the assemble stage gathers batch ``i``.
READ_BUFFERS = 2


class ReadBuffers:
    """``count`` aligned ``uint8`` buffers of at least ``nbytes`` each, handed out in turn by :meth:`next`.

    Validity: the buffer :meth:`next` returns for batch ``i``'s read holds batch ``i``'s bytes from that read
    until the next ``count`` reads: exactly until batch ``i``'s assemble ends as long as no more than ``count``
    batches are read and not yet assembled. The owning tier declares ``max_reads_ahead = count``; the source's
    ``max_reads_ahead`` is the fewest any tier declares, and ``BatchLoader`` lets its load stage read a batch
    only while fewer than that many are read and not yet assembled (its assemble stage gives a slot back when a
    batch's assemble ends). ``TieredSource.load`` reads and assembles one batch at a time (under a lock).
    """

    def __init__(self, count: int = READ_BUFFERS, nbytes: int = 0) -> None:
        if count < 1:
            raise ValueError(f"'num_buffers' expected >= 1 (got {count})")
        self.count = int(count)
        self._buffers = [kernels.aligned_empty(int(nbytes)) for _ in range(self.count)]
        self._next = 0  # the buffer the next read fills

    def next(self, nbytes: int) -> np.ndarray:
        """The buffer for the next read, at least ``nbytes`` (replaced by a larger one when too small)."""
        i = self._next
        self._next = (i + 1) % self.count
        if self._buffers[i].nbytes < nbytes:
            self._buffers[i] = kernels.aligned_empty(int(nbytes))
        return self._buffers[i]

    @property
    def nbytes(self) -> int:
        """Bytes of every buffer together."""
        return sum(b.nbytes for b in self._buffers)

    def __repr__(self) -> str:
        return f"ReadBuffers({self.count} x {self._buffers[0].nbytes} bytes)"
