"""Benchmark the two read backends of DirectFile on a real file (not a test).

On a file of ``--size-gib`` GiB (created once under ``--path``, /tmp by default), opened with O_DIRECT and
evicted from the page cache (fsync + posix_fadvise DONTNEED) before every run:

(a) ``sequential``: dd-style 8 MiB direct reads, one after the other (``pread_ranges``, one thread);
(b) ``chunks``: packed-chunk-like reads: the file cut into aligned chunks of 1-8 MiB read in file order, one
    call per chunk as ``PackedChunkTier`` does (``uring_read_ranges`` vs the ``pread`` pool), and all chunks
    in one ``uring_read_ranges`` call (pieces of 4 MiB, ``--chunk-depth`` in flight);
(c) ``random``: ``--random-reads`` distinct random 4 KiB pages, in random order, at queue depths 1, 4, 16, 64:
    io_uring (``queue_depth=qd``, ``merge=False`` so that both backends issue the same requests) vs the
    ``pread`` pool (``num_threads=qd``: one blocking read per thread in flight), plus io_uring with merging.

Every case runs ``--repeats`` times, the cases alternating within a repeat; the table shows the median time and
the median CPU time of the process (all threads, user + system; per read for (c)): on a machine with few cores a
backend that spends less CPU per read leaves more of it to training.
Results go to stdout and to ``--json``.

    python benchmarks/io_backends.py                     # ~1-2 minutes on a 400 MB/s virtual disk
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from storage_kernels import kernels

ALIGN = kernels.DIRECT_ALIGN
MIB = 1 << 20
SEQ_READ = 8 * MIB
DEPTHS = (1, 4, 16, 64)


def make_file(path: Path, size: int) -> None:
    """``size`` bytes of incompressible data at ``path`` (kept when it is already there with that size)."""
    if path.exists() and path.stat().st_size == size:
        return
    rng = np.random.default_rng(0)
    block = rng.integers(0, 256, 64 * MIB, dtype=np.uint8)
    with open(path, "wb") as f:
        for i in range(size // block.nbytes):
            block[:8] = np.frombuffer(np.int64(i).tobytes(), np.uint8)  # every block differs
            f.write(block.tobytes())
        f.write(block[: size % block.nbytes].tobytes())
        f.flush()
        os.fsync(f.fileno())


def evict(path: Path) -> None:
    """Drop the file's pages from the page cache (they are clean: written and fsynced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed(path: Path, run: Callable[[], int]) -> tuple[float, float, int]:
    """(seconds, CPU seconds of the whole process -- every thread, user + system --, bytes) of one cold run."""
    evict(path)
    start, cpu = time.perf_counter(), time.process_time()
    nbytes = run()
    return time.perf_counter() - start, time.process_time() - cpu, nbytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", type=Path, default=Path("/tmp/strata_io_bench.bin"))
    ap.add_argument("--size-gib", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--random-reads", type=int, default=8192)
    ap.add_argument("--chunk-depth", type=int, default=16)
    ap.add_argument("--json", type=Path, default=Path("/tmp/strata_io_backends.json"))
    ap.add_argument("--keep", action="store_true", help="keep the data file for the next run")
    args = ap.parse_args()

    ok, why = kernels.io_uring_available()
    if not ok:
        raise SystemExit(f"io_uring unavailable here ({why}): nothing to compare")
    size = int(args.size_gib * (1 << 30)) // SEQ_READ * SEQ_READ
    t0 = time.perf_counter()
    make_file(args.path, size)
    print(f"file {args.path}: {size / MIB:.0f} MiB ready in {time.perf_counter() - t0:.1f} s")
    fd, direct = kernels.open_direct(args.path)
    if not direct:
        raise SystemExit(f"O_DIRECT refused by the filesystem of {args.path}: the numbers would be the page cache's")

    rng = np.random.default_rng(1)
    # (b) chunks of 1-8 MiB (aligned) tiling the file in order
    sizes = rng.integers(1 * MIB // ALIGN, 8 * MIB // ALIGN + 1, size // MIB) * ALIGN
    ends = np.cumsum(sizes)
    sizes = sizes[ends <= size]
    chunk_off = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    chunk_len = sizes.astype(np.int64)
    # (c) distinct random pages in random order, fresh ones for every run (pages a run has read may sit in a
    # cache below the guest that fadvise cannot reach); each read lands in its own 4 KiB slot
    page_perm = rng.permutation(size // ALIGN).astype(np.int64)
    page_window = [0]
    pages = page_perm[: args.random_reads]
    page_len = np.full(len(pages), ALIGN, np.int64)
    page_dst = np.arange(len(pages), dtype=np.int64) * ALIGN

    def fresh_pages() -> np.ndarray:
        start = page_window[0] * len(pages) % (len(page_perm) - len(pages) + 1)
        page_window[0] += 1
        return page_perm[start : start + len(pages)] * ALIGN

    seq_buf = kernels.aligned_empty(SEQ_READ)
    chunk_buf = kernels.aligned_empty(int(chunk_len.max()))
    all_buf = kernels.aligned_empty(int(chunk_len.sum()))
    page_buf = kernels.aligned_empty(len(pages) * ALIGN)
    zero = np.zeros(1, np.int64)

    def sequential() -> int:
        for off in range(0, size, SEQ_READ):
            kernels.pread_ranges(fd, np.array([off]), np.array([SEQ_READ]), seq_buf, zero, True, 1)
        return size

    def chunks(backend: str) -> Callable[[], int]:
        def run() -> int:
            total = 0
            for off, n in zip(chunk_off, chunk_len, strict=True):
                o, ln = np.array([off]), np.array([n])
                if backend == "uring":
                    total += kernels.uring_read_ranges(fd, o, ln, chunk_buf, zero, True, args.chunk_depth)[0]
                else:
                    total += kernels.pread_ranges(fd, o, ln, chunk_buf, zero, True, 1)
            return total
        return run

    def chunks_one_call() -> int:
        dst = np.concatenate([[0], np.cumsum(chunk_len)[:-1]]).astype(np.int64)
        return kernels.uring_read_ranges(fd, chunk_off, chunk_len, all_buf, dst, True, args.chunk_depth)[0]

    def random_pages(backend: str, depth: int, merge: bool = False) -> Callable[[], int]:
        def run() -> int:
            page_off = fresh_pages()
            if backend == "uring":
                return kernels.uring_read_ranges(fd, page_off, page_len, page_buf, page_dst, True, depth, merge)[0]
            return kernels.pread_ranges(fd, page_off, page_len, page_buf, page_dst, True, depth)
        return run

    cases: list[tuple[str, str, str, Callable[[], int]]] = [
        ("a", "sequential 8 MiB direct reads (dd-style)", "pread x1", sequential),
        ("b", f"chunks 1-8 MiB, one call each ({len(chunk_off)} chunks)", "pread x1", chunks("pread")),
        ("b", f"chunks 1-8 MiB, one call each ({len(chunk_off)} chunks)", f"uring qd{args.chunk_depth}",
         chunks("uring")),
        ("b", "chunks 1-8 MiB, all in one call", f"uring qd{args.chunk_depth}", chunks_one_call),
    ]
    for depth in DEPTHS:
        label = f"random 4 KiB pages ({len(pages)}), depth {depth}"
        cases.append(("c", label, f"pread threads={depth}", random_pages("pread", depth)))
        cases.append(("c", label, f"uring qd={depth}", random_pages("uring", depth)))
    cases.append(("c", f"random 4 KiB pages ({len(pages)}), depth 64", "uring qd=64 merge", random_pages("uring", 64,
                                                                                                      True)))

    samples: dict[int, list[float]] = {i: [] for i in range(len(cases))}
    cpu: dict[int, list[float]] = {i: [] for i in range(len(cases))}
    nbytes: dict[int, int] = {}
    for _ in range(args.repeats):  # alternate: every case once per repeat
        for i, (_, _, _, run) in enumerate(cases):
            seconds, cpu_s, nbytes[i] = timed(args.path, run)
            samples[i].append(seconds)
            cpu[i].append(cpu_s)
    kernels.close_fd(fd)

    rows = []
    # CPU: the process's user + system time while the case ran (interrupt time the kernel does not charge to
    # a task is not in it); per read for the random pages, where the read count is the same for every backend
    print(f"\n{'':2} {'workload':<46} {'backend':<20} {'median s':>9} {'MB/s':>9} {'IOPS':>9} {'CPU s':>7} "
          f"{'CPU us/read':>11}")
    for i, (part, label, backend, _) in enumerate(cases):
        med, med_cpu = statistics.median(samples[i]), statistics.median(cpu[i])
        mbps = nbytes[i] / med / 1e6
        iops = len(pages) / med if part == "c" else None
        per_read = med_cpu / len(pages) * 1e6 if part == "c" else None
        rows.append({"part": part, "workload": label, "backend": backend, "median_s": med, "runs_s": samples[i],
                     "cpu_s": med_cpu, "cpu_runs_s": cpu[i], "cpu_us_per_read": per_read,
                     "bytes": nbytes[i], "MB_per_s": mbps, "iops": iops})
        iops_s = f"{iops:9.0f}" if iops is not None else f"{'':9}"
        per_read_s = f"{per_read:11.2f}" if per_read is not None else f"{'':11}"
        print(f"{part:2} {label:<46} {backend:<20} {med:9.3f} {mbps:9.1f} {iops_s} {med_cpu:7.3f} {per_read_s}")
    result = {
        "file": str(args.path), "size_bytes": size, "repeats": args.repeats, "direct": direct,
        "kernel": platform.release(), "cpus": os.cpu_count(), "random_reads": len(pages),
        "chunk_depth": args.chunk_depth, "rows": rows,
    }
    args.json.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {args.json}")
    if not args.keep:
        args.path.unlink()


if __name__ == "__main__":
    main()
