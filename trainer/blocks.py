"""The block types every model consumes: :class:`TensorBlock`, one layer's bipartite graph as an edge list on
the device, built from a sample set's CSR block (:class:`BlockLike`) by :func:`to_tensor_blocks`.

A module of its own so that the models (``trainer.models``, ``trainer.gcn``, ``trainer.gat``) and their shared
forward (``trainer.split_forward``) import it without importing each other; ``trainer.models`` re-exports the
three names (their home before this module).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

__all__ = ["BlockLike", "TensorBlock", "to_tensor_blocks"]


class BlockLike(Protocol):
    """What :meth:`TensorBlock.from_block` needs of a ``storage_kernels.sampleset.Block``."""

    num_src: int
    num_dst: int
    indptr: np.ndarray  # int64 (num_dst + 1,)
    cols: np.ndarray  # int64 (E,), positions < num_src


@dataclass(frozen=True)
class TensorBlock:
    """One layer's bipartite graph as an edge list: edge ``k`` carries ``h[edge_src[k]]`` to ``edge_dst[k]``.

    ``edge_src`` indexes the layer input (rows ``< num_src``), ``edge_dst`` the destination nodes
    (``< num_dst``), which are the first ``num_dst`` rows of the layer input. ``indptr``, when known (a block
    from the sample set), is the same edges' CSR over the destinations (``edge_dst`` ascending): int64 on the
    CPU, for the C aggregation of training on the CPU (:mod:`trainer.native_ops`).
    """

    edge_src: torch.Tensor  # int64 (E,)
    edge_dst: torch.Tensor  # int64 (E,)
    num_dst: int
    indptr: torch.Tensor | None = None  # int64 (num_dst + 1,), CPU

    @classmethod
    def from_block(cls, block: BlockLike, device: torch.device | str | None = None) -> TensorBlock:
        """Convert a CSR block (``indptr`` over destinations, ``cols`` = source positions), vectorised."""
        indptr = np.asarray(block.indptr, dtype=np.int64)
        cols = np.asarray(block.cols, dtype=np.int64)
        if indptr.shape != (block.num_dst + 1,):
            raise ValueError(f"'Block.indptr' expected shape ({block.num_dst + 1},) (got {indptr.shape})")
        if cols.shape != (int(indptr[-1]),):
            raise ValueError(f"'Block.cols' expected shape ({int(indptr[-1])},) (got {cols.shape})")
        degree = torch.from_numpy(np.diff(indptr))  # (num_dst,)
        # repeat_interleave(repeats) = [0]*deg[0] + [1]*deg[1] + ...; output_size avoids a length pass
        edge_dst = torch.repeat_interleave(degree, output_size=cols.shape[0])  # (E,)
        # sample-set arrays are read-only memmap slices; torch wants writable memory
        edge_src = torch.from_numpy(cols if cols.flags.writeable else cols.copy())  # (E,)
        csr = torch.from_numpy(indptr if indptr.flags.writeable else indptr.copy())  # (num_dst + 1,), stays on CPU
        if device is not None and torch.device(device).type != "cpu":
            edge_src = edge_src.to(device, non_blocking=True)
            edge_dst = edge_dst.to(device, non_blocking=True)
        return cls(edge_src=edge_src, edge_dst=edge_dst, num_dst=int(block.num_dst), indptr=csr)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> TensorBlock:
        """The same block on ``device`` (``indptr`` stays on the CPU)."""
        return TensorBlock(
            self.edge_src.to(device, non_blocking=non_blocking),
            self.edge_dst.to(device, non_blocking=non_blocking),
            self.num_dst,
            self.indptr,
        )

    def dst_pos(self) -> torch.Tensor:
        """Positions of the destination nodes in the layer input, ``arange(num_dst)`` (the ONNX input that
        carries ``num_dst`` as a dynamic shape)."""
        return torch.arange(self.num_dst, dtype=torch.int64, device=self.edge_src.device)


def to_tensor_blocks(blocks: Sequence[BlockLike], device: torch.device | str | None = None) -> list[TensorBlock]:
    """``[TensorBlock.from_block(b) for b in blocks]`` (input layer first, as ``SampledBatch.blocks()``)."""
    return [TensorBlock.from_block(b, device) for b in blocks]
