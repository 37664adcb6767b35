"""The two nouns of the feature store: a :class:`FeatureTier` (one level, wrapping a fallback tier) and a
:class:`FeatureSource` (what the loader and the trainer call: ``read(batch)`` then ``assemble(read)``, or
``load(batch)``, -> the batch's rows in node order), with :class:`FeatureSourceBase` its defaults.

A tier serves the nodes of a batch whose address (``storage_kernels.packstore.BatchAddresses``) names its
:class:`~storage_kernels.packstore.Tier`, at their ``slot`` in that tier, and leaves every other node to its
fallback. Its work is split in two stages, so that a pipelined loader can run them on different threads:

``read`` (I/O)
    :meth:`FeatureTier.select` picks each tier's positions (a :class:`TierRead`, handing the rest to the
    fallback); the source hands every host tier the batch's staging block (``TierRead.staging``, ``(n, F)`` in
    node order: each tier writes its rows at its positions, so no reordering copy follows);
    :meth:`FeatureTier.fetch` does the tier's I/O -- file rows straight into their rows of the block, a chunk
    into the tier's read buffer.
``assemble`` (host and device work)
    :meth:`FeatureTier.gather` copies the tier's rows into their rows of the block (memory tiers, the chunk
    tier), or :meth:`FeatureTier.gather_device` writes them into the output on the device (device tiers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import torch

from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN
from storage_kernels.packstore import BatchAddresses, Tier
from trainer.features.iobackend import resolve_backend

if TYPE_CHECKING:
    from trainer.batch import TrainHook

__all__ = ["FeatureSource", "FeatureSourceBase", "FeatureTier", "NodeBatch", "TierRead", "block_positions",
           "block_runs", "check_rows", "read_blocks"]


class NodeBatch(Protocol):
    """What a feature source reads of a sampled batch (``storage_kernels.sampleset.SampledBatch``)."""

    @property
    def batch(self) -> int: ...

    @property
    def nodes(self) -> np.ndarray: ...


@runtime_checkable
class FeatureSource(Protocol):
    """What the loader, the trainer and the pipelines read of a feature source: every member is declared here
    and none is probed. :class:`FeatureSourceBase` has the defaults; ``TieredSource`` is the sources' base.

    Stages:

    ``split``
        True: the work is two stages, :meth:`read` (the I/O; ``BatchLoader``'s load thread) then
        :meth:`assemble` (rows in node order on the device; its assemble thread), and :meth:`release` or
        :meth:`keep` settles what the read handed out once the batch is done. False: :meth:`load` does it all
        (on the load thread) and the other three are never called.
    ``load(batch)``
        ``(len(batch.nodes), feature_dim)`` float32 rows in node order on the source's device, whatever
        ``split`` says; the caller keeps the tensor.
    ``max_reads_ahead``
        how many batches may be read and not yet assembled (0 = any): a buffer a read fills stays valid until
        the batch's assemble ends as long as a loader keeps within it (``trainer.features.buffers``).
    ``release(read)`` / ``keep(read)``
        the batch read as ``read`` is done: nothing reads its tensors any more, its staging block may take
        another batch (``release``: ``BatchLoader`` calls it when the consumer asks for the next batch or leaves
        the loop) -- or the caller keeps its tensors for good (``keep``: a user's own loop).

    Training: ``train_hook`` (``None``, or a policy's own training batches and forward: ``trainer.batch.TrainHook``);
    ``tiers`` (the tier chain, outermost first; empty for a source without tiers: ``trainer.train.compute_threads``
    asks whether one ``reads_disk``).

    Counters: ``bytes_read`` (bytes read from disk), ``read_requests`` (read requests issued to the disk),
    ``rows_by_tier`` (rows served, keyed by ``Tier.label``), ``hit_rate`` (fraction of rows from the GPU/CPU
    caches), ``direct_io`` and ``fallback_reason`` (why ``O_DIRECT`` is not used, "" when it is), ``read_s`` /
    ``assemble_s`` (seconds spent in the two stages, each written by the thread that runs its stage);
    ``stats()`` flattens them for ``MlflowTracker.log_metrics``.
    """

    train_hook: TrainHook | None

    @property
    def feature_dim(self) -> int: ...

    @property
    def split(self) -> bool: ...

    @property
    def max_reads_ahead(self) -> int: ...

    @property
    def tiers(self) -> Sequence[FeatureTier]: ...

    @property
    def bytes_read(self) -> int: ...

    @property
    def read_requests(self) -> int: ...

    @property
    def rows_by_tier(self) -> dict[str, int]: ...

    @property
    def hit_rate(self) -> float: ...

    @property
    def direct_io(self) -> bool: ...

    @property
    def fallback_reason(self) -> str: ...

    @property
    def read_s(self) -> float: ...

    @property
    def assemble_s(self) -> float: ...

    def load(self, batch: NodeBatch) -> torch.Tensor: ...

    def read(self, batch: NodeBatch) -> Any: ...

    def assemble(self, read: Any) -> torch.Tensor: ...

    def release(self, read: Any) -> None: ...

    def keep(self, read: Any) -> None: ...

    def stats(self) -> dict[str, float]: ...

    def close(self) -> None: ...


class FeatureSourceBase:
    """:class:`FeatureSource`'s defaults: an unsplit source (``load`` only; subclasses set ``feature_dim`` and
    implement :meth:`load`) with no tiers, no train hook, no read-ahead bound and zero counters. A split source
    sets ``split = True`` and implements :meth:`read` and :meth:`assemble` (``TieredSource``)."""

    split = False
    max_reads_ahead = 0
    tiers: Sequence[FeatureTier] = ()
    train_hook: TrainHook | None = None
    feature_dim: int
    bytes_read = 0
    read_requests = 0
    direct_io = False
    fallback_reason = ""
    read_s = 0.0
    assemble_s = 0.0

    @property
    def rows_by_tier(self) -> dict[str, int]:
        return {}

    @property
    def hit_rate(self) -> float:
        return 0.0

    def load(self, batch: NodeBatch) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, batch: NodeBatch) -> Any:
        raise NotImplementedError(f"'{type(self).__name__}' is not split into read and assemble (split=False)")

    def assemble(self, read: Any) -> torch.Tensor:
        raise NotImplementedError(f"'{type(self).__name__}' is not split into read and assemble (split=False)")

    def release(self, read: Any) -> None:
        """Nothing to give back by default."""

    def keep(self, read: Any) -> None:
        """Nothing to give away by default."""

    def stats(self) -> dict[str, float]:
        return {"bytes_read": float(self.bytes_read), "read_requests": float(self.read_requests),
                "cache_hit_rate": self.hit_rate, "direct_io": float(self.direct_io), "read_s": self.read_s,
                "assemble_s": self.assemble_s}

    def close(self) -> None:
        """Nothing to release by default."""


@dataclass
class TierRead:
    """One tier's part of a batch after the read stage.

    ``pos`` are the positions (in node order, ascending) the tier serves and ``slot`` their rows in the
    tier. ``staging`` (n, F) is the batch's host staging block in node order (host tiers): the tier writes
    row ``slot[k]`` to ``staging[pos[k]]`` and touches no other row (a file read fills its rows directly).
    A chunk read leaves ``buffer`` (R, F), the block to gather ``slot`` from (a view of one of the tier's
    :class:`~trainer.features.buffers.ReadBuffers`, valid until the batch's assemble ends).
    """

    tier: FeatureTier
    pos: np.ndarray  # (k,) int64
    slot: np.ndarray  # (k,) int64
    staging: np.ndarray | None = field(default=None, repr=False)  # (n, F) float32, the whole batch's block
    buffer: np.ndarray | None = field(default=None, repr=False)  # (R, F) float32


def check_rows(rows: np.ndarray, what: str) -> np.ndarray:
    """``rows`` if it is a 2-D C-contiguous float32 array, else ``ValueError`` naming ``what``."""
    if rows.ndim != 2 or rows.dtype != np.float32:
        raise ValueError(f"'{what}' expected a 2-D float32 array (got {rows.dtype} {rows.shape})")
    if not rows.flags.c_contiguous:
        raise ValueError(f"'{what}' expected C-contiguous rows (got a strided array)")
    return rows


class FeatureTier:
    """One level of a tiered feature store: serves the nodes addressed to ``tier`` and leaves the rest to
    ``fallback`` (``None``: the innermost tier).

    Subclasses set ``name`` (for messages), implement :meth:`num_slots` and either :meth:`gather` (host
    tiers) or, with ``on_device = True``, :meth:`gather_device`; I/O tiers set ``reads_disk = True``,
    ``direct_io`` and ``fallback_reason`` and override :meth:`fetch`.

    Counters: ``rows_served`` (rows of all batches this tier served), ``bytes_read`` (bytes it read from
    disk, whole aligned blocks included) and ``read_requests`` (read requests it issued: one per ``pread``
    range, which the disk sees whatever its cache).
    """

    on_device = False  # rows are written on the target device, not staged on the host
    reads_disk = False  # does I/O (``bytes_read``, ``direct_io`` and ``fallback_reason`` are meaningful)
    max_reads_ahead = 0  # reads that may precede their batch's gather: its ReadBuffers' count (0 = any: none)

    def __init__(self, tier: Tier, feature_dim: int, fallback: FeatureTier | None, name: str) -> None:
        self.tier = Tier(tier)
        if self.tier not in Tier.readable():
            raise ValueError(f"'{name}' expected a readable tier (got {self.tier.name})")
        self.feature_dim = int(feature_dim)
        self.fallback = fallback
        self.name = name
        if fallback is not None and fallback.feature_dim != self.feature_dim:
            raise ValueError(f"'{fallback.name}' expected {self.feature_dim} columns like {name} "
                             f"(got {fallback.feature_dim})")
        self.direct_io = False
        self.fallback_reason = ""
        self.rows_served = 0
        self.bytes_read = 0
        self.read_requests = 0

    def chain(self) -> list[FeatureTier]:
        """This tier and its fallbacks, outermost first."""
        return [self, *(self.fallback.chain() if self.fallback is not None else [])]

    # ------------------------------------------------------------------------------------------ read stage
    def select(self, addr: BatchAddresses, groups: kernels.TierGroups) -> list[TierRead]:
        """Every tier's part of the batch, this tier and its fallbacks, outermost first.

        ``groups`` are the batch's nodes by tier code (``addr.groups()``; the chain's codes are distinct, as
        ``TieredSource`` checks): this tier takes those addressed to it, checks their slots, and hands on.
        """
        code = int(self.tier)
        lo, hi = int(groups.ptr[code]), int(groups.ptr[code + 1])
        part = TierRead(self, groups.order[lo:hi], groups.slots[lo:hi])  # positions ascending, their slots
        if hi > lo:
            limit = self.num_slots(addr)
            first, last = int(groups.lo[code]), int(groups.hi[code])
            if first < 0 or last >= limit:
                raise IndexError(f"'addr_slot' of batch {addr.batch} expected slots in [0, {limit}) for tier "
                                 f"{code} ({self.tier.label}) (got {first}..{last})")
            self.rows_served += hi - lo
        rest = self.fallback.select(addr, groups) if self.fallback is not None else []
        return [part, *rest]

    def num_slots(self, addr: BatchAddresses) -> int:  # pragma: no cover - abstract
        """How many slots this tier has for ``addr``'s batch (slots must be below it)."""
        raise NotImplementedError

    def fetch(self, addr: BatchAddresses, part: TierRead) -> None:
        """The tier's I/O for a non-empty ``part`` (fills its rows of ``part.staging`` or sets ``part.buffer``);
        none by default."""

    # ------------------------------------------------------------------------------------------ assemble stage
    def gather(self, part: TierRead) -> None:  # pragma: no cover - abstract
        """Host tiers: ``part.staging[part.pos[k]] = row part.slot[k]`` (``part.staging`` (n, F) float32,
        C-contiguous, the batch's block in node order)."""
        raise NotImplementedError

    def gather_device(self, part: TierRead, x: torch.Tensor) -> None:  # pragma: no cover - abstract
        """Device tiers: ``x[part.pos[k]] = row part.slot[k]`` (``x`` (n, F) on the target device)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------ counters
    def stats(self) -> dict[str, float]:
        """``rows_served`` and ``bytes_read`` (and ``read_requests``, ``direct_io`` for I/O tiers)."""
        out = {"rows_served": float(self.rows_served), "bytes_read": float(self.bytes_read)}
        if self.reads_disk:
            out["read_requests"] = float(self.read_requests)
            out["direct_io"] = float(self.direct_io)
        return out

    def reset_counters(self) -> None:
        """Zero ``rows_served``, ``bytes_read`` and ``read_requests`` (capabilities and the fallback reason stay)."""
        self.rows_served = self.bytes_read = self.read_requests = 0

    def close(self) -> None:
        """Release file descriptors (no-op for memory tiers)."""

    def __repr__(self) -> str:
        inner = f" -> {self.fallback!r}" if self.fallback is not None else ""
        return f"{type(self).__name__}({self.tier.label}){inner}"


class DirectFile:
    """A file held open for aligned reads: ``O_DIRECT`` when its filesystem allows it (``direct``), else
    buffered reads, with ``fallback_reason`` saying so. Closed by :meth:`close` or when collected.

    ``backend`` picks the read path ("auto" | "uring" | "pread"; ``None``: the process default of
    :mod:`trainer.features.iobackend`, set from ``train.io_backend``): io_uring with ``queue_depth`` requests
    in flight, or the ``pread`` thread pool. ``self.backend`` is the one resolved, ``backend_reason`` why
    "auto" fell back to the pool.

    ``requests`` counts the read requests issued since it was opened: one per range, or under io_uring with
    ``merge`` one per contiguous file span after merging same/adjacent-page ranges."""

    def __init__(self, path: str | Path, what: str, backend: str | None = None,
                 queue_depth: int | None = None) -> None:
        self.path = Path(path)
        resolved = resolve_backend(backend, queue_depth)  # before opening: a refused "uring" leaks no fd
        self.backend, self.queue_depth, self.backend_reason = resolved
        self.fd, self.direct = kernels.open_direct(str(self.path))
        self.requests = 0
        self.fallback_reason = "" if self.direct else (
            f"O_DIRECT refused by the filesystem of {self.path}; {what} are read through the page cache")

    def pread(self, offsets: np.ndarray, lengths: np.ndarray, out: np.ndarray, out_offsets: np.ndarray,
              num_threads: int = 0, merge: bool = True) -> int:
        """``kernels.uring_read_ranges`` (merging same/adjacent-page ranges when ``merge``) or
        ``kernels.pread_ranges`` (on ``num_threads`` threads) on this file; returns the bytes read."""
        if self.backend == "uring":
            nbytes, reads = kernels.uring_read_ranges(self.fd, offsets, lengths, out, out_offsets, self.direct,
                                                      self.queue_depth, merge)
            self.requests += reads
            return nbytes
        self.requests += len(offsets)
        return kernels.pread_ranges(self.fd, offsets, lengths, out, out_offsets, self.direct, num_threads)

    def close(self) -> None:
        if getattr(self, "fd", -1) >= 0:
            kernels.close_fd(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()


def block_runs(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(run_start, run_len)``: the positions in ``blocks`` (sorted, distinct) where runs of consecutive
    blocks begin, and each run's length in blocks; one read request per run."""
    run_start = np.flatnonzero(np.diff(blocks, prepend=-2) != 1)  # (r,)
    run_len = np.diff(np.append(run_start, len(blocks)))  # (r,)
    return run_start.astype(np.int64), run_len.astype(np.int64)


def read_blocks(file: DirectFile, blocks: np.ndarray, buffer: np.ndarray,
                num_threads: int = 0) -> tuple[np.ndarray, int, int]:
    """Read the ``DATA_ALIGN`` blocks ``blocks`` (sorted, distinct) of ``file`` back to back into ``buffer`` (an
    aligned uint8 buffer, replaced by a larger one when too small), one request per run of consecutive
    blocks: ``(buffer, bytes read, runs)``. :func:`block_positions` then finds each row in the buffer."""
    if buffer.nbytes < len(blocks) * DATA_ALIGN:
        buffer = kernels.aligned_empty(len(blocks) * DATA_ALIGN)
    if not len(blocks):
        return buffer, 0, 0
    run_start, run_len = block_runs(blocks)
    nbytes = file.pread(blocks[run_start] * DATA_ALIGN, run_len * DATA_ALIGN, buffer, run_start * DATA_ALIGN,
                        num_threads)
    return buffer, nbytes, len(run_start)


def block_positions(blocks: np.ndarray, row_off: np.ndarray) -> np.ndarray:
    """Where the rows at file byte offsets ``row_off`` start in a buffer that :func:`read_blocks` filled with
    ``blocks``: a row's blocks are consecutive in ``blocks``, hence contiguous in the buffer."""
    return np.searchsorted(blocks, row_off // DATA_ALIGN) * DATA_ALIGN + row_off % DATA_ALIGN
