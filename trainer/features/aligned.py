"""Direct reads of the block-aligned feature file (``aligned.bin``, ``storage_kernels.alignedstore``).

:class:`AlignedBlocks` reads sets of whole 4 KiB blocks -- each run of consecutive blocks one aligned read
(``O_DIRECT`` when the filesystem allows it) -- into an aligned buffer, and extracts rows from such a buffer
with the native ``gather_rows_at``. The hyperbatch tier reads a hyperbatch's blocks with it; the hotset reads
the rows it loads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from storage_kernels import kernels
from storage_kernels.alignedstore import BlockLayout
from trainer.features.base import DirectFile, block_runs

__all__ = ["AlignedBlocks", "block_runs"]


class AlignedBlocks:
    """``aligned.bin`` at ``path`` (laid out by ``layout``), opened once for aligned direct reads.

    Counters: ``bytes_read`` and ``requests`` (one per run of consecutive blocks) since it was opened.
    """

    def __init__(self, path: str | Path, layout: BlockLayout, num_threads: int = 0) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"'aligned' expected the block-aligned feature file {self.path} (got no such file)")
        size = self.path.stat().st_size
        if size != layout.file_bytes:
            raise ValueError(f"'{self.path}' expected {layout.file_bytes} bytes ({layout.num_blocks} blocks of "
                             f"{layout.num_rows} rows of {layout.row_bytes} bytes) (got {size})")
        self.layout = layout
        self.num_threads = int(num_threads)
        self._file = DirectFile(self.path, "aligned blocks")
        self.direct, self.fallback_reason = self._file.direct, self._file.fallback_reason
        self.bytes_read = 0

    @property
    def requests(self) -> int:
        return self._file.requests

    def read(self, blocks: np.ndarray, buffer: np.ndarray | None) -> tuple[np.ndarray, int]:
        """Read ``blocks`` (sorted, distinct) back to back into ``buffer`` (an aligned uint8 buffer, replaced
        by a larger one when too small); returns ``(buffer, bytes read)``."""
        bb = self.layout.block_bytes
        need = max(len(blocks), 1) * bb
        if buffer is None or buffer.nbytes < need:
            buffer = kernels.aligned_empty(need)
        if not len(blocks):
            return buffer, 0
        if int(blocks[0]) < 0 or int(blocks[-1]) >= self.layout.num_blocks:
            raise IndexError(f"'{self.path}' expected blocks in [0, {self.layout.num_blocks}) "
                             f"(got {int(blocks[0])}..{int(blocks[-1])})")
        run_start, run_len = block_runs(blocks)
        nbytes = self._file.pread(blocks[run_start] * bb, run_len * bb, buffer, run_start * bb, self.num_threads)
        self.bytes_read += nbytes
        return buffer, nbytes

    def extract(self, buffer: np.ndarray, blocks: np.ndarray, nodes: np.ndarray, out: np.ndarray,
                pos: np.ndarray | None = None) -> None:
        """``out[pos[k]] = row of nodes[k]`` (``pos`` default ``arange(len(nodes))``, distinct) from ``buffer``
        holding ``blocks`` as :meth:`read` left them (``KeyError`` naming a node whose block is not there)."""
        offsets = self.layout.buffer_offsets(blocks, nodes)
        if pos is None:
            kernels.gather_rows_at(buffer, offsets, out, self.num_threads)
        else:
            kernels.gather_rows_at_into(buffer, offsets, out, pos, self.num_threads)

    def read_rows(self, nodes: np.ndarray, out: np.ndarray | None = None, pos: np.ndarray | None = None,
                  max_buffer_bytes: int = 64 << 20) -> np.ndarray:
        """``out[pos[k]] =`` the row of ``nodes[k]`` (sorted, distinct); returns ``out``. Without ``out``, a new
        ``(k, F)`` float32 array (``pos`` default ``arange(k)``). The rows go from the read blocks straight to
        their rows of ``out``, read in rounds of at most ``max_buffer_bytes`` of blocks (at least one row's),
        which bounds the read buffer."""
        layout = self.layout
        nodes = np.asarray(nodes, dtype=np.int64)
        if out is None:
            out = np.empty((len(nodes), layout.feature_dim), dtype=np.float32)
        pos = np.arange(len(nodes), dtype=np.int64) if pos is None else np.asarray(pos, dtype=np.int64)
        if len(pos) != len(nodes):
            raise ValueError(f"'pos' expected one row of 'out' per node, {len(nodes)} (got {len(pos)})")
        first = layout.first_block(nodes)  # (k,) ascending
        span = max(max_buffer_bytes // layout.block_bytes, layout.group_blocks)  # blocks one round may cover
        buffer, lo = None, 0
        while lo < len(nodes):
            hi = int(np.searchsorted(first, first[lo] + span - layout.group_blocks, side="right"))
            blocks = layout.blocks_of(nodes[lo:hi])
            buffer, _ = self.read(blocks, buffer)
            self.extract(buffer, blocks, nodes[lo:hi], out, pos[lo:hi])
            lo = hi
        return out

    def close(self) -> None:
        self._file.close()
