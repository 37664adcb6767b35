"""Feature sources: given a sampled batch, return its input features ``(len(batch.nodes), F)`` in node order.

Three sources share one counter set (exposed to MLflow through :meth:`CountingSource.stats`):

``InMemoryFeatures``
    the whole feature matrix in RAM (or memory-mapped); one gather per batch. The reference.
``PackedFeatures``
    DiskGNN's four-level store without the disk-cache level: GPU cache (device memory), CPU cache (pinned
    host memory when CUDA is used) and the batch's packed chunk, read with one aligned sequential
    ``pread`` (``O_DIRECT`` when the filesystem allows it) and assembled in node order from the precomputed
    address table (``addr_tier`` / ``addr_slot``). Evaluation batches are not packed: their uncached rows
    (tier 3, ``file``) are read from the feature file with block-merged aligned reads.
``NaiveDiskFeatures``
    the PyG+ / DGL-OnDisk baseline: every needed row is its own aligned direct read of the 4096-byte
    block(s) holding it, every time it is needed; ``bytes_read`` counts the whole blocks.

Counters (units in the names where they are not counts): ``bytes_read``, ``rows_by_tier`` (keys ``gpu``,
``cpu``, ``packed``, ``file``), ``hit_rate`` (fraction of rows served from the GPU/CPU caches),
``direct_io`` and ``fallback_reason`` (why ``O_DIRECT`` is not used, "" when it is), ``read_s`` and
``assemble_s`` (seconds in the two stages of :meth:`load`).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from storage_kernels import kernels
from storage_kernels.arrays import align_up, blocks_of_rows, read_header

__all__ = [
    "BLOCK_BYTES",
    "TIERS",
    "CountingSource",
    "FeatureSource",
    "FileRows",
    "InMemoryFeatures",
    "NaiveDiskFeatures",
    "PackedFeatures",
]

BLOCK_BYTES = 4096  # O_DIRECT granularity: offsets, lengths and buffer addresses are multiples of it
TIERS = ("gpu", "cpu", "packed", "file")
_TIER_CODES = {0: "gpu", 1: "cpu", 2: "packed", 3: "file"}  # plan / packed ``addr_tier`` codes


class _BatchLike(Protocol):
    batch: int
    nodes: np.ndarray


class _SamplesLike(Protocol):
    num_batches: int

    def node_range(self, i: int) -> tuple[int, int]: ...


@runtime_checkable
class FeatureSource(Protocol):
    """What the loader and the trainer need of a feature source."""

    feature_dim: int
    bytes_read: int
    rows_by_tier: dict[str, int]
    direct_io: bool
    fallback_reason: str

    @property
    def hit_rate(self) -> float: ...

    def load(self, batch: Any) -> torch.Tensor: ...

    def stats(self) -> dict[str, float]: ...

    def close(self) -> None: ...


class CountingSource:
    """Shared counters and the ``load = assemble(read(batch))`` skeleton (one batch at a time: a lock
    spans both stages, since the read stage may fill a buffer the assemble stage consumes)."""

    def __init__(self, feature_dim: int, device: torch.device | str = "cpu") -> None:
        self.feature_dim = int(feature_dim)
        self.device = torch.device(device)
        self.bytes_read = 0
        self.rows_by_tier = dict.fromkeys(TIERS, 0)
        self.direct_io = False
        self.fallback_reason = ""
        self.read_s = 0.0
        self.assemble_s = 0.0
        self._lock = threading.Lock()

    @property
    def hit_rate(self) -> float:
        """Fraction of rows served from the GPU or CPU cache (0.0 before any row)."""
        total = sum(self.rows_by_tier.values())
        return (self.rows_by_tier["gpu"] + self.rows_by_tier["cpu"]) / total if total else 0.0

    def load(self, batch: Any) -> torch.Tensor:
        """Features of ``batch.nodes`` in order, ``(len(batch.nodes), feature_dim)`` float32 on ``device``."""
        with self._lock:
            t0 = time.perf_counter()
            raw = self._read(batch)
            t1 = time.perf_counter()
            x = self._assemble(batch, raw)
            self.read_s += t1 - t0
            self.assemble_s += time.perf_counter() - t1
        return x

    def stats(self) -> dict[str, float]:
        """Flat counters for ``MlflowTracker.log_metrics``."""
        out: dict[str, float] = {"bytes_read": float(self.bytes_read), "cache_hit_rate": self.hit_rate,
                                 "direct_io": float(self.direct_io), "read_s": self.read_s,
                                 "assemble_s": self.assemble_s}
        out.update({f"rows_{tier}": float(n) for tier, n in self.rows_by_tier.items()})
        return out

    def reset_counters(self) -> None:
        """Zero the byte, row and time counters (capabilities and the fallback reason stay)."""
        self.bytes_read = 0
        self.rows_by_tier = dict.fromkeys(TIERS, 0)
        self.read_s = self.assemble_s = 0.0

    def close(self) -> None:
        """Release file descriptors (no-op for in-memory sources)."""

    def __enter__(self) -> CountingSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, batch: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _assemble(self, batch: Any, raw: Any) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _host_empty(self, rows: int) -> torch.Tensor:
        """Host staging tensor ``(rows, F)``: pinned when the target is a GPU (async H2D copies)."""
        return torch.empty((rows, self.feature_dim), dtype=torch.float32,
                           pin_memory=self.device.type == "cuda")

    def _to_device(self, host: torch.Tensor) -> torch.Tensor:
        # non_blocking from pinned memory: the copy is queued on the current stream, no host sync
        return host.to(self.device, non_blocking=True) if self.device.type != "cpu" else host


def _check_features(array: np.ndarray, what: str) -> np.ndarray:
    if array.ndim != 2 or array.dtype != np.float32:
        raise ValueError(f"'{what}' expected a 2-D float32 array (got {array.dtype} {array.shape})")
    if not array.flags.c_contiguous:
        raise ValueError(f"'{what}' expected C-contiguous rows (got a strided array)")
    return array


# --------------------------------------------------------------------------------------------------------
class InMemoryFeatures(CountingSource):
    """Every row from one in-memory (or memory-mapped) ``(N, F)`` float32 array; counted as the CPU tier.

    ``bytes_read`` stays 0: a memory map reads through the page cache, which this source cannot see (the
    reason is in ``fallback_reason``).
    """

    def __init__(self, features: np.ndarray, device: torch.device | str = "cpu", num_threads: int = 0) -> None:
        self.features = _check_features(features, "features")
        super().__init__(self.features.shape[1], device)
        self.num_threads = int(num_threads)
        if isinstance(features, np.memmap):
            self.fallback_reason = "memory-mapped: reads go through the page cache and are not counted"

    def _read(self, batch: _BatchLike) -> torch.Tensor:
        nodes = np.ascontiguousarray(batch.nodes, dtype=np.int64)
        out = self._host_empty(len(nodes))
        kernels.gather_rows(self.features, nodes, out.numpy(), self.num_threads)  # (n, F)
        self.rows_by_tier["cpu"] += len(nodes)
        return out

    def _assemble(self, batch: _BatchLike, raw: torch.Tensor) -> torch.Tensor:
        return self._to_device(raw)


# --------------------------------------------------------------------------------------------------------
class PackedFeatures(CountingSource):
    """A ``packed`` artifact: GPU cache + CPU cache + one packed chunk per batch (``docs/CONTRACTS.md``).

    Loads ``gpu_cache.npy`` onto ``device`` and ``cpu_cache.npy`` into (pinned, with CUDA) host memory once,
    opens ``packed.bin`` once with ``open_direct``, and keeps one aligned buffer of the largest chunk.
    ``samples`` gives each batch's range in ``nodes.npy``, which indexes ``addr_tier`` / ``addr_slot``.
    ``features_path`` (the ordering's ``features.npy``) serves tier-3 rows, which only evaluation batches
    have; without it such a batch raises ``ValueError``.
    """

    FILES = ("gpu_cache.npy", "cpu_cache.npy", "packed.bin", "chunk_offset.npy", "chunk_rows.npy",
             "addr_tier.npy", "addr_slot.npy")

    def __init__(self, packed_dir: str | Path, samples: _SamplesLike, device: torch.device | str = "cpu",
                 features_path: str | Path | None = None, num_threads: int = 0) -> None:
        self.packed_dir = Path(packed_dir)
        for name in self.FILES:
            if not (self.packed_dir / name).exists():
                raise FileNotFoundError(f"'packed' expected {self.packed_dir / name} (got no such file)")
        gpu = _check_features(np.load(self.packed_dir / "gpu_cache.npy"), "gpu_cache.npy")
        cpu = _check_features(np.load(self.packed_dir / "cpu_cache.npy"), "cpu_cache.npy")
        if gpu.shape[1] != cpu.shape[1]:
            raise ValueError(f"'cpu_cache.npy' expected {gpu.shape[1]} columns like gpu_cache.npy "
                             f"(got {cpu.shape[1]})")
        super().__init__(gpu.shape[1], device)
        self.samples = samples
        self.num_threads = int(num_threads)
        # caches: loaded once; the CPU cache is pinned so the GPU path copies it asynchronously
        self.gpu_cache = torch.from_numpy(gpu).to(self.device)  # (Ng, F)
        self.cpu_cache = torch.from_numpy(cpu)  # (Nc, F)
        if self.device.type == "cuda":
            self.cpu_cache = self.cpu_cache.pin_memory()
        self.cache_bytes = gpu.nbytes + cpu.nbytes
        # address tables: memory-mapped, sliced per batch
        self.chunk_offset = np.load(self.packed_dir / "chunk_offset.npy").astype(np.int64, copy=False)
        self.chunk_rows = np.load(self.packed_dir / "chunk_rows.npy").astype(np.int64, copy=False)
        self.addr_tier = np.load(self.packed_dir / "addr_tier.npy", mmap_mode="r")
        self.addr_slot = np.load(self.packed_dir / "addr_slot.npy", mmap_mode="r")
        self._validate()
        # packed.bin: opened once, O_DIRECT when the filesystem accepts it
        self.chunk_bytes = align_up(self.chunk_rows * self.feature_dim * 4)  # (NB,) aligned read lengths
        self.fd, self.direct_io = kernels.open_direct(str(self.packed_dir / "packed.bin"))
        if not self.direct_io:
            self.fallback_reason = (f"O_DIRECT refused by the filesystem of {self.packed_dir / 'packed.bin'}; "
                                    "chunks are read through the page cache")
        self._buffer = kernels.aligned_empty(max(int(self.chunk_bytes.max(initial=0)), BLOCK_BYTES))
        self.file: FileRows | None = None
        if features_path is not None:
            self.file = FileRows(features_path, num_threads)
            if self.file.feature_dim != self.feature_dim:
                raise ValueError(f"'{features_path}' expected {self.feature_dim} columns like the caches "
                                 f"(got {self.file.feature_dim})")
            if self.file.fallback_reason and not self.fallback_reason:
                self.fallback_reason = self.file.fallback_reason

    def _validate(self) -> None:
        nb = self.samples.num_batches
        for name, arr in (("chunk_offset.npy", self.chunk_offset), ("chunk_rows.npy", self.chunk_rows)):
            if arr.shape != (nb,):
                raise ValueError(f"'{name}' expected shape ({nb},) (one per batch) (got {arr.shape})")
        if nb and np.any(self.chunk_offset % BLOCK_BYTES):
            bad = int(np.flatnonzero(self.chunk_offset % BLOCK_BYTES)[0])
            raise ValueError(f"'chunk_offset.npy' expected multiples of {BLOCK_BYTES} "
                             f"(got {int(self.chunk_offset[bad])} for batch {bad})")
        if self.addr_tier.shape != self.addr_slot.shape:
            raise ValueError(f"'addr_slot.npy' expected shape {self.addr_tier.shape} like addr_tier.npy "
                             f"(got {self.addr_slot.shape})")
        total = self.samples.node_range(nb - 1)[1] if nb else 0
        if self.addr_tier.shape[0] < total:
            raise ValueError(f"'addr_tier.npy' expected >= {total} entries (one per nodes.npy entry) "
                             f"(got {self.addr_tier.shape[0]})")
        size = (self.packed_dir / "packed.bin").stat().st_size
        ends = self.chunk_offset + align_up(self.chunk_rows * self.feature_dim * 4)
        if nb and int(ends.max()) > size:
            b = int(np.argmax(ends))
            raise ValueError(f"'packed.bin' expected >= {int(ends[b])} bytes (batch {b}'s chunk padded to "
                             f"{BLOCK_BYTES}) (got {size})")

    def _read(self, batch: _BatchLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        b = int(batch.batch)
        start, stop = self.samples.node_range(b)
        if stop - start != len(batch.nodes):
            raise ValueError(f"'batch {b}' expected {stop - start} nodes from node_range "
                             f"(got {len(batch.nodes)})")
        tier = np.asarray(self.addr_tier[start:stop])  # (n,) int8
        slot = np.asarray(self.addr_slot[start:stop], dtype=np.int64)  # (n,)
        rows = int(self.chunk_rows[b])
        if rows:
            # one sequential read of the whole chunk into the reusable aligned buffer
            self.bytes_read += kernels.pread_ranges(
                self.fd, np.array([self.chunk_offset[b]], np.int64), np.array([self.chunk_bytes[b]], np.int64),
                self._buffer, np.zeros(1, np.int64), self.direct_io, self.num_threads,
            )
        chunk = self._buffer[: rows * self.feature_dim * 4].view(np.float32).reshape(rows, self.feature_dim)
        return tier, slot, chunk  # chunk (rows, F) is a view: valid until the next read

    def _assemble(self, batch: _BatchLike, raw: tuple[np.ndarray, np.ndarray, np.ndarray]) -> torch.Tensor:
        tier, slot, chunk = raw
        b, n = int(batch.batch), len(tier)
        limits = {0: self.gpu_cache.shape[0], 1: self.cpu_cache.shape[0], 2: chunk.shape[0],
                  3: self.file.num_rows if self.file is not None else 0}
        pos: dict[int, np.ndarray] = {}
        for code, limit in limits.items():
            pos[code] = np.flatnonzero(tier == code)  # (n_code,) positions in node order
            if code == 3 and len(pos[3]) and self.file is None:
                raise ValueError(f"'PackedFeatures' expected features_path to read the {len(pos[3])} tier-3 "
                                 f"(file) rows of batch {b} (got None)")
            if len(pos[code]) and not 0 <= int(slot[pos[code]].min()) <= int(slot[pos[code]].max()) < limit:
                raise IndexError(f"'addr_slot' of batch {b} expected slots in [0, {limit}) for tier {code} "
                                 f"(got {int(slot[pos[code]].min())}..{int(slot[pos[code]].max())})")
            self.rows_by_tier[_TIER_CODES[code]] += len(pos[code])
        if sum(len(p) for p in pos.values()) != n:
            bad = int(np.flatnonzero(~np.isin(tier, tuple(limits)))[0])
            raise ValueError(f"'addr_tier' of batch {b} expected 0, 1, 2 or 3 (got {int(tier[bad])} at node {bad})")

        # host rows (CPU cache, packed chunk, feature file) go to one staging tensor, then into node order
        host_pos = np.concatenate([pos[1], pos[2], pos[3]])  # (n1 + n2 + n3,)
        host = self._host_empty(len(host_pos))  # (n1 + n2 + n3, F)
        host_np = host.numpy()
        n1, n12 = len(pos[1]), len(pos[1]) + len(pos[2])
        if n1:
            kernels.gather_rows(self.cpu_cache.numpy(), slot[pos[1]], host_np[:n1], self.num_threads)
        if n12 > n1:
            kernels.gather_rows(chunk, slot[pos[2]], host_np[n1:n12], self.num_threads)
        if len(pos[3]):
            assert self.file is not None  # checked above
            self.bytes_read += self.file.read(slot[pos[3]], host_np[n12:], merge=True)
        x = torch.empty((n, self.feature_dim), dtype=torch.float32, device=self.device)  # (n, F)
        x.index_copy_(0, torch.from_numpy(host_pos).to(self.device, non_blocking=True), self._to_device(host))
        if len(pos[0]):
            gpu_pos = torch.from_numpy(pos[0]).to(self.device, non_blocking=True)
            gpu_slot = torch.from_numpy(slot[pos[0]]).to(self.device, non_blocking=True)
            x.index_copy_(0, gpu_pos, self.gpu_cache.index_select(0, gpu_slot))
        return x

    def close(self) -> None:
        if getattr(self, "fd", -1) >= 0:
            kernels.close_fd(self.fd)
            self.fd = -1
        if getattr(self, "file", None) is not None:
            self.file.close()

    def __del__(self) -> None:
        self.close()


# --------------------------------------------------------------------------------------------------------
class FileRows:
    """Rows of a C-order float32 ``.npy`` feature file read with aligned (``O_DIRECT`` when allowed) block
    reads into a reusable aligned buffer.

    ``merge=False`` is the per-row baseline: every requested row is its own read of the 4096-byte block(s)
    holding it, repeats included. ``merge=True`` reads each needed block once, coalescing consecutive blocks
    into one read (DiskGNN merges same-page requests the same way).
    """

    def __init__(self, path: str | Path, num_threads: int = 0, max_buffer_bytes: int = 64 << 20) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"'features' expected an .npy file at {self.path} (got no such file)")
        header = read_header(self.path)
        shape, dtype, self.data_offset = header.shape, header.dtype, header.data_offset
        if len(shape) != 2 or dtype != np.float32 or header.fortran_order:
            order = "Fortran" if header.fortran_order else "C"
            raise ValueError(f"'{self.path}' expected a 2-D C-order float32 array (got {dtype} {shape} {order})")
        if self.data_offset % 4:
            raise ValueError(f"'{self.path}' expected its data at a multiple of 4 bytes (got {self.data_offset})")
        self.num_rows, self.feature_dim = shape
        self.row_bytes = self.feature_dim * 4
        self.num_threads = int(num_threads)
        self.slot_bytes = align_up(BLOCK_BYTES - 4 + self.row_bytes)  # whole blocks one row can span
        self.max_buffer_bytes = max(int(max_buffer_bytes), self.slot_bytes)
        self.fd, self.direct = kernels.open_direct(str(self.path))
        self.fallback_reason = "" if self.direct else (
            f"O_DIRECT refused by the filesystem of {self.path}; rows are read through the page cache")
        self._buffer = kernels.aligned_empty(self.slot_bytes)

    def _ensure(self, nbytes: int) -> np.ndarray:
        if self._buffer.nbytes < nbytes:
            self._buffer = kernels.aligned_empty(nbytes)
        return self._buffer

    def read(self, ids: np.ndarray, out: np.ndarray, merge: bool) -> int:
        """``out[k] = features[ids[k]]`` (``out`` (len(ids), F) float32); returns the bytes read."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self.num_rows):
            bad = int(np.flatnonzero((ids < 0) | (ids >= self.num_rows))[0])
            raise IndexError(f"'{self.path}' expected row ids < {self.num_rows} (got {int(ids[bad])} at {bad})")
        step = self.max_buffer_bytes // self.slot_bytes  # rows per round: bounds the buffer either way
        if not merge:
            total = 0
            for lo in range(0, len(ids), step):
                total += self._read_each(ids[lo : lo + step], out[lo : lo + step])
            return total
        # rounds of at most max_buffer_bytes of distinct blocks, visiting rows in file order: a row's blocks
        # are all in one round, and consecutive rounds share at most one boundary block
        order = np.argsort(ids, kind="stable")
        row_off = self.data_offset + ids[order] * self.row_bytes  # (k,) ascending
        first, last = row_off // BLOCK_BYTES, (row_off + self.row_bytes - 1) // BLOCK_BYTES  # (k,) ascending
        budget = self.max_buffer_bytes // BLOCK_BYTES  # >= the blocks of one row (slot_bytes)
        total, lo = 0, 0
        while lo < len(ids):
            hi = int(np.searchsorted(last, first[lo] + budget - 1, side="right"))
            part = order[lo:hi]
            rows = np.empty((len(part), self.feature_dim), dtype=np.float32)  # (k_round, F)
            total += self._read_merged(ids[part], rows)
            out[part] = rows
            lo = hi
        return total

    def _read_each(self, ids: np.ndarray, out: np.ndarray) -> int:
        k = len(ids)
        row_off = self.data_offset + ids * self.row_bytes  # (k,) byte offset of each row in the file
        block_off = row_off // BLOCK_BYTES * BLOCK_BYTES  # (k,)
        lengths = align_up(row_off + self.row_bytes) - block_off  # (k,) one or more whole blocks
        out_offsets = np.arange(k, dtype=np.int64) * self.slot_bytes  # (k,) one slot per row
        buffer = self._ensure(k * self.slot_bytes)
        nbytes = kernels.pread_ranges(self.fd, block_off, lengths, buffer, out_offsets, self.direct,
                                      self.num_threads)
        self._extract(buffer, out_offsets + row_off - block_off, out)
        return nbytes

    def _read_merged(self, ids: np.ndarray, out: np.ndarray) -> int:
        row_off = self.data_offset + ids * self.row_bytes  # (k,)
        first = row_off // BLOCK_BYTES  # (k,) first block of each row
        blocks = blocks_of_rows(ids, self.row_bytes, self.data_offset, BLOCK_BYTES)  # (m,) needed, sorted
        run_start = np.flatnonzero(np.diff(blocks, prepend=-2) != 1)  # (r,) where consecutive runs begin
        run_len = np.diff(np.append(run_start, len(blocks)))  # (r,) blocks per run
        buffer = self._ensure(len(blocks) * BLOCK_BYTES)
        nbytes = kernels.pread_ranges(self.fd, blocks[run_start] * BLOCK_BYTES, run_len * BLOCK_BYTES, buffer,
                                      run_start * BLOCK_BYTES, self.direct, self.num_threads)
        # a row's blocks are consecutive in ``blocks``, hence contiguous in the buffer
        self._extract(buffer, np.searchsorted(blocks, first) * BLOCK_BYTES + row_off % BLOCK_BYTES, out)
        return nbytes

    def _extract(self, buffer: np.ndarray, byte_pos: np.ndarray, out: np.ndarray) -> None:
        floats = buffer.view(np.float32)
        out[:] = floats[(byte_pos // 4)[:, None] + np.arange(self.feature_dim)]  # (k, F)

    def close(self) -> None:
        if getattr(self, "fd", -1) >= 0:
            kernels.close_fd(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()


class NaiveDiskFeatures(CountingSource):
    """The per-row baseline (PyG+ / DGL-OnDisk / GraphBolt ``DiskBasedFeature`` without a cache): each
    needed row is its own aligned read of the 4096-byte block(s) that contain it, every time; counted as
    the ``file`` tier. Reads go through ``pread_ranges`` in rounds of at most ``max_buffer_bytes``.
    """

    def __init__(self, features_path: str | Path, device: torch.device | str = "cpu", num_threads: int = 0,
                 max_buffer_bytes: int = 64 << 20) -> None:
        self.file = FileRows(features_path, num_threads, max_buffer_bytes)
        super().__init__(self.file.feature_dim, device)
        self.direct_io, self.fallback_reason = self.file.direct, self.file.fallback_reason

    def _read(self, batch: _BatchLike) -> torch.Tensor:
        out = self._host_empty(len(batch.nodes))  # (n, F)
        self.bytes_read += self.file.read(batch.nodes, out.numpy(), merge=False)
        self.rows_by_tier["file"] += len(batch.nodes)
        return out

    def _assemble(self, batch: _BatchLike, raw: torch.Tensor) -> torch.Tensor:
        return self._to_device(raw)

    def close(self) -> None:
        self.file.close()
