"""A chain of tiers as one :class:`~trainer.features.base.FeatureSource`, the factory that composes one,
and the three sources Strata trains from (thin compositions).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from storage_kernels.packstore import BatchAddresses, NodeRanges, PackedStore, Tier
from storage_kernels.windowstore import SegmentWindow
from trainer.features.base import FeatureSourceBase, FeatureTier, NodeBatch, TierRead
from trainer.features.buffers import READ_BUFFERS
from trainer.features.cache import CPUCacheTier, GPUCacheTier, MemoryTier
from trainer.features.diskcache import DiskCacheTier
from trainer.features.file import FileRows, FileTier
from trainer.features.packed import PackedChunkTier
from trainer.features.staging import StagingLease, StagingPool
from trainer.features.window import WindowedDiskCacheTier

__all__ = [
    "AddressBook",
    "BatchRead",
    "InMemoryFeatures",
    "NaiveDiskFeatures",
    "PackedFeatures",
    "TieredSource",
    "compose_tiers",
    "tiered_source",
]

_CACHE_TIERS = (Tier.GPU, Tier.CPU)  # rows served from them count as cache hits


class AddressBook(Protocol):
    """Where every node of a batch is read from: a :class:`PackedStore`, or a policy's own addressing."""

    path: Path
    feature_dim: int

    def addresses(self, batch: int, num_nodes: int | None = None) -> BatchAddresses: ...


@dataclass
class BatchRead:
    """A batch after the read stage: its addresses, every tier's part (outermost tier first) and the host
    staging block (``(n, F)`` float32 in node order, pinned with CUDA) whose rows the host parts fill at their
    positions (the rows of device tiers are left for the assemble stage to write on the device). On the CPU
    the block is the batch's output, leased from the source's :class:`StagingPool` (``lease``; ``None`` with
    CUDA) until ``TieredSource.release`` or ``keep``."""

    addresses: BatchAddresses
    parts: list[TierRead]
    staging: torch.Tensor  # (n, F)
    lease: StagingLease | None = None


class TieredSource(FeatureSourceBase):
    """A chain of :class:`FeatureTier` (``top`` and its fallbacks) as a feature source (split in two stages).

    Each batch's addresses come from ``store`` (``PackedStore.addresses``); without a store the chain is one
    tier and every node is addressed to it by node id (``BatchAddresses.single_tier``). ``load(batch)`` is
    ``assemble(read(batch))`` under a lock (one batch at a time: a tier's read buffer is reused), and the
    caller keeps the tensor (:meth:`keep`):

    :meth:`read`
        the I/O stage: checks the addresses, lets each tier take its nodes, hands the host tiers one
        ``(n, F)`` staging block in node order (pinned with CUDA), and lets each tier read what it must (file
        rows go straight to their rows of the block).
    :meth:`assemble`
        host tiers gather their rows straight to their rows of the block (C, GIL released): on CPU the block
        is the batch's output, with CUDA it goes to the device in one contiguous copy; device tiers then write
        their rows on the device. No reordering copy.
    :meth:`release` / :meth:`keep`
        the batch is done: on the CPU its staging block (the tensor :meth:`assemble` returned) goes back to
        the pool, or leaves it with the caller (see :mod:`trainer.features.staging`).

    Counters are the tiers' (``bytes_read``, ``rows_by_tier`` keyed by ``Tier.label``) plus the seconds of
    the two stages (``read_s``, ``assemble_s``).
    """

    def __init__(self, top: FeatureTier, device: torch.device | str = "cpu", store: AddressBook | None = None
                 ) -> None:
        self.top = top
        self.tiers = top.chain()
        self.store = store
        self.device = torch.device(device)
        self.name = type(self).__name__
        # several tiers need per-node addresses: a store's, or a subclass's own (``addresses`` overridden)
        if store is None and len(self.tiers) > 1 and type(self).addresses is TieredSource.addresses:
            raise ValueError(f"'{self.name}' expected a packed store to address {len(self.tiers)} tiers "
                             f"({', '.join(t.tier.label for t in self.tiers)}) (got store=None)")
        if store is not None and store.feature_dim != top.feature_dim:
            raise ValueError(f"'{store.path}' expected {top.feature_dim} columns like {top.name} "
                             f"(got {store.feature_dim})")
        self._served = {t.tier for t in self.tiers}
        if len(self._served) < len(self.tiers):  # an address names a tier code: one tier serves each
            raise ValueError(f"'{self.name}' expected tiers of distinct codes (got "
                             f"{[f'{t.name}: {t.tier.label}' for t in self.tiers]})")
        self.read_s = 0.0
        self.assemble_s = 0.0
        self._lock = threading.Lock()
        self.staging_pool = StagingPool()  # CPU blocks lent to one batch at a time (unused with CUDA)

    # ---------------------------------------------------------------------------------------- counters
    @property
    def feature_dim(self) -> int:
        return self.top.feature_dim

    @property
    def bytes_read(self) -> int:
        """Bytes read from disk by every tier (whole aligned blocks)."""
        return sum(t.bytes_read for t in self.tiers)

    @property
    def read_requests(self) -> int:
        """Read requests issued to the disk by every tier."""
        return sum(t.read_requests for t in self.tiers)

    @property
    def rows_by_tier(self) -> dict[str, int]:
        """Rows served, keyed by ``Tier.label`` (every readable tier, 0 where none)."""
        rows = {t.label: 0 for t in Tier.readable()}
        for t in self.tiers:
            rows[t.tier.label] += t.rows_served
        return rows

    @property
    def hit_rate(self) -> float:
        """Fraction of rows served from the GPU or CPU cache (0.0 before any row)."""
        rows = self.rows_by_tier
        total = sum(rows.values())
        return sum(rows[t.label] for t in _CACHE_TIERS) / total if total else 0.0

    @property
    def direct_io(self) -> bool:
        """Whether every tier that reads the disk uses ``O_DIRECT`` (False without one)."""
        io = [t for t in self.tiers if t.reads_disk]
        return bool(io) and all(t.direct_io for t in io)

    @property
    def fallback_reason(self) -> str:
        """The tiers' reasons for not reading directly, joined ("" when none)."""
        return "; ".join(t.fallback_reason for t in self.tiers if t.fallback_reason)

    def tier(self, tier: Tier) -> FeatureTier:
        """The outermost tier of the chain serving ``tier``."""
        for t in self.tiers:
            if t.tier == tier:
                return t
        raise KeyError(f"'{self.name}' has no {Tier(tier).label} tier (got {[t.tier.label for t in self.tiers]})")

    def stats(self) -> dict[str, float]:
        """Flat counters for ``MlflowTracker.log_metrics`` (``bytes_read_<tier>`` per disk tier)."""
        out: dict[str, float] = {"bytes_read": float(self.bytes_read),
                                 "read_requests": float(self.read_requests), "cache_hit_rate": self.hit_rate,
                                 "direct_io": float(self.direct_io), "read_s": self.read_s,
                                 "assemble_s": self.assemble_s}
        out.update({f"rows_{label}": float(n) for label, n in self.rows_by_tier.items()})
        for t in self.tiers:
            if t.reads_disk:
                key = f"bytes_read_{t.tier.label}"
                out[key] = out.get(key, 0.0) + t.bytes_read
        return out

    def reset_counters(self) -> None:
        """Zero the byte, row and time counters (capabilities and the fallback reasons stay)."""
        for t in self.tiers:
            t.reset_counters()
        self.read_s = self.assemble_s = 0.0

    # ---------------------------------------------------------------------------------------- stages
    split = True  # read, then assemble

    def addresses(self, batch: NodeBatch) -> BatchAddresses:
        """``batch``'s address table: from the store, or every node to the single tier by node id."""
        if self.store is not None:
            return self.store.addresses(int(batch.batch), len(batch.nodes))
        return BatchAddresses.single_tier(int(batch.batch), batch.nodes, self.top.tier)

    @property
    def max_reads_ahead(self) -> int:
        """How many batches may be read and not yet assembled: the fewest read buffers a tier rotates
        (``trainer.features.buffers``; 0 = any number). A pipelined loader keeps within it."""
        bounds = [t.max_reads_ahead for t in self.tiers if t.max_reads_ahead > 0]
        return min(bounds) if bounds else 0

    def read(self, batch: NodeBatch) -> BatchRead:
        """The I/O stage: validate the batch's addresses, let each tier take its nodes and read (timed into
        ``read_s``)."""
        t0 = time.perf_counter()
        try:
            return self._read(batch)
        finally:
            self.read_s += time.perf_counter() - t0

    def _read(self, batch: NodeBatch) -> BatchRead:
        return self._read_into(batch)

    def _read_into(self, batch: NodeBatch, num_rows: int | None = None, rows: np.ndarray | None = None
                   ) -> BatchRead:
        """The read stage of ``batch`` into an ``(num_rows, F)`` staging block whose rows ``rows`` (distinct,
        ascending, one per node) receive the batch's nodes and whose other rows are zeros; by default the block
        is the batch (``rows = arange(n)``). A source that reads only some of a batch's nodes (pruned rows)
        lays them out in the whole batch's block this way, with no copy after."""
        addr = self.addresses(batch)
        groups = addr.groups()  # the nodes by tier code (checks every code)
        counts = np.diff(groups.ptr)  # rows per tier code
        for t in Tier.readable():
            if counts[t] and t not in self._served:
                if t == Tier.FILE:
                    raise ValueError(f"'{self.name}' expected features_path to read the {counts[t]} tier-3 (file) "
                                     f"rows of batch {addr.batch} (got None)")
                raise ValueError(f"'{self.name}' expected a {t.label} tier for the {counts[t]} tier-{int(t)} "
                                 f"({t.label}) rows of batch {addr.batch} (got tiers "
                                 f"{[s.tier.label for s in self.tiers]})")
        parts = self.top.select(addr, groups)
        n = len(addr.tier) if num_rows is None else int(num_rows)
        if rows is not None:
            if len(rows) != len(addr.tier):
                raise ValueError(f"'rows' expected one row per node of batch {addr.batch}, {len(addr.tier)} "
                                 f"(got {len(rows)})")
            for p in parts:
                p.pos = rows[p.pos]  # the tiers write (and the device tiers scatter) at these rows
        # (n, F) in node order: every host tier writes its rows at their positions. With CUDA page-locked
        # (torch's caching host allocator reuses it once the copy reading it has completed); on CPU it is the
        # batch's output, leased from the pool until the batch is done (release) or kept by the caller (keep)
        lease = None
        if self.device.type == "cuda":
            staging = torch.empty((n, self.feature_dim), dtype=torch.float32, pin_memory=True)
        else:
            lease = self.staging_pool.take(n, self.feature_dim)
            staging = lease.tensor
        try:
            staging_np = staging.numpy()
            if rows is not None and len(rows) < n:
                unread = np.ones(n, dtype=bool)
                unread[rows] = False
                staging_np[unread] = 0.0
            for p in parts:
                if len(p.pos) and not p.tier.on_device:
                    p.staging = staging_np
            for p in parts:
                if len(p.pos):
                    p.tier.fetch(addr, p)
        except BaseException:
            if lease is not None:
                lease.release()  # no batch came of it
            raise
        return BatchRead(addr, parts, staging, lease)

    def assemble(self, read: BatchRead) -> torch.Tensor:
        """The gather stage: ``(n, feature_dim)`` float32 rows in node order on ``device`` (timed into
        ``assemble_s``)."""
        t0 = time.perf_counter()
        try:
            return self._assemble(read)
        finally:
            self.assemble_s += time.perf_counter() - t0

    def _assemble(self, read: BatchRead) -> torch.Tensor:
        for p in read.parts:
            if len(p.pos) and not p.tier.on_device:
                p.tier.gather(p)
        # CPU: the block is the output; CUDA: one contiguous copy, the device tiers' rows overwritten below
        x = self._to_device(read.staging)  # (n, F)
        for p in read.parts:
            if len(p.pos) and p.tier.on_device:
                p.tier.gather_device(p, x)
        return x

    def release(self, read: BatchRead) -> None:
        """``read``'s batch is done (nothing reads its tensors any more): its staging block may take another
        batch."""
        if read.lease is not None:
            read.lease.release()

    def keep(self, read: BatchRead) -> None:
        """The caller keeps ``read``'s tensors for good: its staging block leaves the pool."""
        if read.lease is not None:
            read.lease.keep()

    def load(self, batch: NodeBatch) -> torch.Tensor:
        """Features of ``batch.nodes`` in order, ``(len(batch.nodes), feature_dim)`` float32 on ``device``; the
        caller keeps the tensor."""
        with self._lock:
            read = self.read(batch)
            try:
                return self.assemble(read)
            finally:
                self.keep(read)

    def _to_device(self, host: torch.Tensor) -> torch.Tensor:
        # non_blocking from pinned memory: the copy is queued on the current stream, no host sync
        return host.to(self.device, non_blocking=True) if self.device.type != "cpu" else host

    def close(self) -> None:
        """Release every tier's file descriptors."""
        for t in self.tiers:
            t.close()

    def __enter__(self) -> TieredSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{self.name}({self.top!r}, device={str(self.device)!r})"


# ------------------------------------------------------------------------------------------------ factory
def compose_tiers(store: PackedStore | None, features_path: str | Path | None, device: torch.device | str = "cpu",
                  *, caches: Sequence[Tier | str] | None = None, packed: bool = True, merge: bool = True,
                  num_threads: int = 0, max_buffer_bytes: int = 64 << 20,
                  num_buffers: int = READ_BUFFERS) -> FeatureTier:
    """The tier chain :func:`tiered_source` wraps (outermost returned); see there for the arguments."""
    device = torch.device(device)
    pin = device.type == "cuda"  # host rows that go to a GPU are page-locked, for async copies
    if caches is None:  # the store's two caches, outermost first; none without a store
        caches = (Tier.GPU, Tier.CPU) if store is not None else ()
    wanted: list[Tier] = []
    for c in caches:
        t = Tier.__members__.get(c.upper()) if isinstance(c, str) else c
        if t not in _CACHE_TIERS or t in wanted:
            raise ValueError(f"'caches' expected distinct tiers from gpu, cpu (got {list(caches)})")
        wanted.append(Tier(t))
    if wanted and store is None:
        raise ValueError(f"'caches' expected a packed store to address the cache rows (got store=None, "
                         f"caches={list(caches)})")
    tier: FeatureTier | None = None
    if features_path is not None:
        tier = FileTier(features_path, merge=merge, num_threads=num_threads, max_buffer_bytes=max_buffer_bytes)
    if store is not None and packed:
        tier = PackedChunkTier(store, tier, num_threads=num_threads, num_buffers=num_buffers)
        if store.has_disk_cache:  # the store addresses rows to its segment caches: serve them (through its window)
            disk_tier = WindowedDiskCacheTier if SegmentWindow.present(store.path) else DiskCacheTier
            tier = disk_tier(store, tier, num_threads=num_threads)
    for cache in reversed(wanted):  # innermost first, so that caches[0] ends outermost
        assert store is not None  # checked above
        rows = store.cache(cache)  # (rows, F) loaded into memory
        if cache == Tier.GPU:
            tier = GPUCacheTier(rows, device, tier)
        else:
            tier = CPUCacheTier(rows, tier, pin_memory=pin, num_threads=num_threads)
    if tier is None:
        raise ValueError(f"'tiered_source' expected at least one tier (got store={store!r}, packed={packed}, "
                         f"caches={list(caches)}, features_path=None)")
    return tier


def tiered_source(store: PackedStore | None, features_path: str | Path | None, device: torch.device | str = "cpu",
                  *, caches: Sequence[Tier | str] | None = None, packed: bool = True, merge: bool = True,
                  num_threads: int = 0, max_buffer_bytes: int = 64 << 20,
                  num_buffers: int = READ_BUFFERS) -> TieredSource:
    """Compose a feature source from parts, innermost first:

    1. ``features_path`` (optional): the feature file (``Tier.FILE``, slot = node id), read with aligned
       direct reads, block-merged (``merge=False``: one read per row, the naive baseline);
    2. ``store`` with ``packed``: each batch's chunk of ``packed.bin`` (``Tier.PACKED``), read into one of
       ``num_buffers`` rotating buffers (``trainer.features.buffers``: a pipelined loader reads at most that
       many batches ahead of assembly), and,
       when the store has one, its segment disk caches (``Tier.DISK_CACHE``, page-merged aligned reads of
       ``disk_cache.bin``);
    3. ``caches`` (``"gpu"``, ``"cpu"`` or :class:`Tier`, outermost first; default both with a store, none
       without): the store's cache blocks, the CPU one pinned with CUDA and the GPU one in ``device`` memory.

    Addresses come from ``store``; without a store the source is the feature file alone (every node read
    from it). Raises ``ValueError`` for caches without a store or neither a store nor a file.

    >>> store = PackedStore(pack_dir, samples)
    >>> source = tiered_source(store, features_path, "cuda")                    # what PackedFeatures is
    >>> source = tiered_source(store, features_path, "cuda", caches=("cpu",))  # no GPU cache
    >>> source = tiered_source(None, features_path, merge=False)                # the naive baseline
    """
    top = compose_tiers(store, features_path, device, caches=caches, packed=packed, merge=merge,
                        num_threads=num_threads, max_buffer_bytes=max_buffer_bytes, num_buffers=num_buffers)
    return TieredSource(top, device, store)


# ------------------------------------------------------------------------------------------------ the three sources
class InMemoryFeatures(TieredSource):
    """Every row from one in-memory (or memory-mapped) ``(N, F)`` float32 array: one :class:`MemoryTier`,
    counted as the CPU tier (the ``in_memory`` baseline and the reference of every other source)."""

    def __init__(self, features: np.ndarray, device: torch.device | str = "cpu", num_threads: int = 0) -> None:
        super().__init__(MemoryTier(features, tier=Tier.CPU, num_threads=num_threads), device)
        self.features = features


class NaiveDiskFeatures(TieredSource):
    """The per-row baseline (PyG+ / DGL-OnDisk / GraphBolt's disk feature without a cache): one
    :class:`FileTier` with ``merge=False``, every needed row its own aligned read of the 4096-byte block(s)
    that contain it, every time; counted as the ``file`` tier."""

    def __init__(self, features_path: str | Path, device: torch.device | str = "cpu", num_threads: int = 0,
                 max_buffer_bytes: int = 64 << 20) -> None:
        tier = FileTier(features_path, merge=False, num_threads=num_threads, max_buffer_bytes=max_buffer_bytes)
        super().__init__(tier, device)
        self.file: FileRows = tier.file


class PackedFeatures(TieredSource):
    """A ``pack`` artifact (DiskGNN's four-level store): GPU cache -> CPU cache -> the batch's segment disk
    cache (when the store has one) -> the batch's packed chunk -> the feature file at ``features_path``
    (evaluation batches are not packed:
    their uncached rows are file-addressed; without ``features_path`` they raise ``ValueError``).

    ``tiered_source(PackedStore(packed_dir, samples), features_path, device)`` with the attributes of the
    caches (``gpu_cache``, ``cpu_cache`` tensors).
    """

    def __init__(self, packed_dir: str | Path, samples: NodeRanges, device: torch.device | str = "cpu",
                 features_path: str | Path | None = None, num_threads: int = 0,
                 num_buffers: int = READ_BUFFERS) -> None:
        store = PackedStore(packed_dir, samples)
        super().__init__(compose_tiers(store, features_path, device, num_threads=num_threads,
                                       num_buffers=num_buffers), device, store)
        self.packed_dir = Path(packed_dir)

    @property
    def gpu_cache(self) -> torch.Tensor:
        """``(Ng, F)`` on the device."""
        tier = self.tier(Tier.GPU)
        assert isinstance(tier, GPUCacheTier)
        return tier.rows

    @property
    def cpu_cache(self) -> torch.Tensor:
        """``(Nc, F)`` host rows, pinned with CUDA."""
        tier = self.tier(Tier.CPU)
        assert isinstance(tier, CPUCacheTier)
        return tier.tensor

    @property
    def cache_bytes(self) -> int:
        """Bytes of the two cache blocks."""
        return (self.gpu_cache.numel() + self.cpu_cache.numel()) * 4

