"""The disk under a data root, measured once: sequential bandwidth and random 4 KiB read rate.

``policy=auto`` (:mod:`pipelines.methods.policies.auto`) predicts each policy's epoch from the bytes and the
read requests it would issue; this profile turns them into seconds. It is measured on a scratch file in the
root (``PROBE_BYTES``, written once, read back with ``O_DIRECT`` so the page cache does not flatter it), kept in
``<root>/disk_profile.json`` (and, for other roots on the same device, in the user's cache folder) and reused by
every later run; ``strata disk-profile --refresh`` measures again (after moving the root to another disk, or
when the disk was busy during the first measurement).

Random reads are timed at the queue depths the feature readers use: one request at a time, and as many in
flight as the readers keep (``train.io_backend=auto``: an io_uring of ``kernels.URING_QUEUE_DEPTH`` requests
where the kernel allows one, else ``RANDOM_QUEUE_DEPTH`` reads on the pread pool's threads). Where the
filesystem refuses ``O_DIRECT`` (tmpfs) the numbers are the page cache's, and ``direct_io`` says so.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from storage_kernels import kernels
from storage_kernels.kernels._common import DIRECT_ALIGN

__all__ = ["PROFILE_NAME", "DiskProfile", "disk_profile", "machine_cache", "measure_disk"]

PROFILE_NAME = "disk_profile.json"
#: Size of the scratch file read back: large enough to leave the drive's cache behind on a small machine,
#: small enough to write in a second or two.
PROBE_BYTES = 256 << 20
_SEQ_BLOCK = 8 << 20
_RANDOM_READS = 16384
#: Threads of the pread pool's random reads where no io_uring is available.
RANDOM_QUEUE_DEPTH = 32
_FORMAT = 2  # 2: the deep random reads through the readers' own backend (io_uring at its depth)


@dataclass(frozen=True)
class DiskProfile:
    """What a data root's disk delivers to Strata's readers (all reads aligned, ``O_DIRECT`` when possible)."""

    seq_read_bytes_s: float
    #: 4 KiB random reads per second, one in flight (per-row reads on one thread).
    random_iops_qd1: float
    #: 4 KiB random reads per second with ``random_queue_depth`` in flight (``random_backend``).
    random_iops: float
    direct_io: bool
    measured_at: str
    device: int = 0
    random_queue_depth: int = RANDOM_QUEUE_DEPTH
    random_backend: str = "pread"

    def to_dict(self) -> dict[str, Any]:
        return {"format": _FORMAT, **asdict(self)}

    def describe(self) -> str:
        """One line for a summary: ``980 MB/s sequential, 12,000 random 4 KiB reads/s (qd 32), ...``."""
        kind = "direct I/O" if self.direct_io else "page cache (no O_DIRECT here)"
        return (f"{self.seq_read_bytes_s / 1e6:,.0f} MB/s sequential, {self.random_iops:,.0f} random 4 KiB reads/s "
                f"at queue depth {self.random_queue_depth} ({self.random_backend}), {self.random_iops_qd1:,.0f} at 1 "
                f"({kind})")


def _write_probe(path: Path, nbytes: int) -> None:
    """A scratch file of ``nbytes`` of random bytes (not zeros: a compressing or deduplicating store would lie),
    flushed to the disk."""
    rng = np.random.default_rng(0)
    chunk = rng.integers(0, 256, size=min(nbytes, 16 << 20), dtype=np.uint8).tobytes()
    with open(path, "wb") as f:
        written = 0
        while written < nbytes:
            n = min(len(chunk), nbytes - written)
            f.write(chunk[:n])
            written += n
        f.flush()
        os.fsync(f.fileno())


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return max(time.perf_counter() - start, 1e-9)


def measure_disk(directory: str | Path, probe_bytes: int | None = None) -> DiskProfile:
    """Measure the disk holding ``directory`` (a scratch file of ``probe_bytes``, default :data:`PROBE_BYTES`,
    written there and removed)."""
    directory = Path(directory)
    probe_bytes = PROBE_BYTES if probe_bytes is None else probe_bytes
    directory.mkdir(parents=True, exist_ok=True)
    size = max(probe_bytes // DIRECT_ALIGN * DIRECT_ALIGN, _SEQ_BLOCK)
    path = directory / f".disk_probe.{os.getpid()}.bin"
    try:
        _write_probe(path, size)
        fd, direct = kernels.open_direct(path)
        try:
            buf = kernels.aligned_empty(_SEQ_BLOCK)
            offsets = np.arange(0, size, _SEQ_BLOCK, dtype=np.int64)

            def sequential() -> None:
                for off in offsets:
                    kernels.pread_ranges(fd, [int(off)], [min(_SEQ_BLOCK, size - int(off))], buf, [0], direct, 1)

            seq_s = _timed(sequential)
            rng = np.random.default_rng(1)
            blocks = rng.integers(0, size // DIRECT_ALIGN, size=_RANDOM_READS, dtype=np.int64) * DIRECT_ALIGN
            lengths = np.full(_RANDOM_READS, DIRECT_ALIGN, dtype=np.int64)
            out = kernels.aligned_empty(_RANDOM_READS * DIRECT_ALIGN)
            at = np.arange(_RANDOM_READS, dtype=np.int64) * DIRECT_ALIGN
            qd1 = blocks[: _RANDOM_READS // 4]
            qd1_s = _timed(lambda: kernels.pread_ranges(fd, qd1, lengths[: len(qd1)], out, at[: len(qd1)], direct, 1))
            uring = kernels.io_uring_available()[0]
            depth = kernels.URING_QUEUE_DEPTH if uring else RANDOM_QUEUE_DEPTH
            if uring:
                deep_s = _timed(lambda: kernels.uring_read_ranges(fd, blocks, lengths, out, at, direct,
                                                                  queue_depth=depth, merge=False))
            else:
                deep_s = _timed(lambda: kernels.pread_ranges(fd, blocks, lengths, out, at, direct, depth))
        finally:
            kernels.close_fd(fd)
        return DiskProfile(seq_read_bytes_s=size / seq_s, random_iops_qd1=len(qd1) / qd1_s,
                           random_iops=_RANDOM_READS / deep_s, direct_io=bool(direct),
                           measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), device=os.stat(directory).st_dev,
                           random_queue_depth=depth, random_backend="io_uring" if uring else "pread")
    finally:
        path.unlink(missing_ok=True)


def _load(path: Path, device: int) -> DiskProfile | None:
    """The cached profile at ``path`` when it is readable, of this format, and of the same device."""
    try:
        data = json.loads(path.read_text())
        if data.pop("format", None) != _FORMAT:
            return None
        profile = DiskProfile(**data)
    except (OSError, ValueError, TypeError):
        return None  # absent or unreadable: measured again (a cache, never an input)
    return profile if profile.device == device else None


def machine_cache(device: int) -> Path:
    """Where a profile of ``device`` is shared by every root on it (``$XDG_CACHE_HOME/strata``)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "strata" / f"disk_profile-{device}.json"


def _save(profile: DiskProfile, path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(profile.to_dict(), indent=2) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass  # a cache: an unwritable one means measuring again next time


def disk_profile(root: str | Path, refresh: bool = False) -> DiskProfile:
    """The profile of the disk holding data root ``root``: cached in ``<root>/disk_profile.json`` (and for
    other roots on the same device in :func:`machine_cache`), measured when neither holds one of this device,
    or when ``refresh``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    path, device = root / PROFILE_NAME, os.stat(root).st_dev
    shared = machine_cache(device)
    if not refresh:
        cached = _load(path, device) or _load(shared, device)
        if cached is not None:
            if not path.exists():
                _save(cached, path)
            return cached
    profile = measure_disk(root)
    _save(profile, path)
    _save(profile, shared)
    return profile
