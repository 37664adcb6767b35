"""Ginex's changeset store: the Belady-optimal feature-cache changesets of every superbatch of the training
trace (the ``pack`` artifact of the ``ginex`` policy), its writer and its reader.

The *trace* is the sample set's training batches, sampled epoch by sampled epoch, each in step order (the order
training reads them; epochs beyond the sampled ones replay it). It is cut into *superbatches* of
``superbatch_size`` batches that never span two sampled epochs (0: one superbatch per sampled epoch), so every
training epoch starts a superbatch. Each superbatch is simulated on its own by ``kernels.belady_changesets``
(inspector): a cache of ``cache_rows`` nodes, filled at the superbatch's start with its first distinct nodes
(initial prefetch), then after each batch changed by Belady's rule, new rows coming from the batch itself.

Files (int64 ``.npy`` unless said; ``T`` trace positions, ``B`` superbatches):

``ginex_meta.json``
    ``format`` (:data:`FORMAT_VERSION`), ``cache_rows``, ``superbatch_size``, ``num_nodes``.
``ginex_trace.npy`` (T,)
    the batch id at every trace position.
``ginex_superbatch_ptr.npy`` (B+1,)
    superbatch ``b`` is trace positions ``[ptr[b], ptr[b+1])``.
``ginex_init_ptr.npy`` (B+1,) / ``ginex_init_ids.npy``
    the initial cache of superbatch ``b``: ``init_ids[init_ptr[b]:init_ptr[b+1]]``.
``ginex_update_ptr.npy`` (T+1,) / ``ginex_in_ids.npy`` / ``ginex_out_ids.npy`` / ``ginex_in_positions.npy``
    the changeset applied after position ``t`` (entries ``update_ptr[t]:update_ptr[t+1]``): ``out_ids[k]``'s
    cache slot receives node ``in_ids[k]``, whose row is the batch's row ``in_positions[k]``.
``ginex_hits.npy`` (T,)
    the batch's rows the simulated cache holds (predicted hits; batch node lists are distinct).

Nothing here knows about torch or Dagster.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from storage_kernels import kernels

if TYPE_CHECKING:
    from storage_kernels.sampleset import SampleSet
    from storage_kernels.store import ArtifactBuilder

__all__ = [
    "CHANGESET_FILES",
    "FORMAT_VERSION",
    "META",
    "ChangesetStore",
    "ChangesetWriter",
    "SuperbatchChanges",
    "iter_changesets",
    "simulation_bytes",
    "trace_superbatches",
    "write_changesets",
]

#: Version of the files below (``ginex_meta.json``'s ``format``); the reader refuses any other.
FORMAT_VERSION = 1
META = "ginex_meta.json"
TRACE = "ginex_trace.npy"
SUPERBATCH_PTR = "ginex_superbatch_ptr.npy"
INIT_PTR = "ginex_init_ptr.npy"
INIT_IDS = "ginex_init_ids.npy"
UPDATE_PTR = "ginex_update_ptr.npy"
IN_IDS = "ginex_in_ids.npy"
OUT_IDS = "ginex_out_ids.npy"
IN_POSITIONS = "ginex_in_positions.npy"
HITS = "ginex_hits.npy"
#: Every file a changeset store has.
CHANGESET_FILES = (META, TRACE, SUPERBATCH_PTR, INIT_PTR, INIT_IDS, UPDATE_PTR, IN_IDS, OUT_IDS, IN_POSITIONS, HITS)


def trace_superbatches(samples: SampleSet, superbatch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(trace, superbatch_ptr)``: the training batch ids in trace order and the superbatch boundaries (trace
    positions), ``superbatch_size`` batches each within every sampled epoch (0: one per sampled epoch)."""
    if superbatch_size < 0:
        raise ValueError(f"'plan.superbatch_size' expected >= 0 (got {superbatch_size})")
    trace: list[int] = []
    bounds = [0]
    for epoch in range(samples.epochs):
        ids = samples.batch_ids("train", epoch)
        step = superbatch_size or max(len(ids), 1)
        for lo in range(0, len(ids), step):
            trace.extend(ids[lo : lo + step])
            bounds.append(len(trace))
    return np.asarray(trace, dtype=np.int64), np.asarray(bounds, dtype=np.int64)


@dataclass(frozen=True)
class SuperbatchChanges:
    """One superbatch's simulation: its index, its trace positions ``[start, stop)``, the kernel's output and
    the rows each of its batches reads (``rows``, (stop - start,))."""

    index: int
    start: int
    stop: int
    changes: kernels.Changesets
    rows: np.ndarray


def _simulate(samples: SampleSet, batches: np.ndarray, num_nodes: int, cache_rows: int
              ) -> tuple[kernels.Changesets, np.ndarray]:
    ranges = [samples.node_range(int(b)) for b in batches]
    rows = np.asarray([stop - start for start, stop in ranges], dtype=np.int64)
    ptr = np.zeros(len(batches) + 1, dtype=np.int64)
    np.cumsum(rows, out=ptr[1:])
    ids = np.concatenate([np.asarray(samples.nodes[a:b]) for a, b in ranges]) if ranges else np.empty(0, np.int64)
    return kernels.belady_changesets(ptr, ids, num_nodes=num_nodes, num_entries=cache_rows), rows


def iter_changesets(samples: SampleSet, trace: np.ndarray, superbatch_ptr: np.ndarray, num_nodes: int,
                    cache_rows: int, num_threads: int = 0, memory_bytes: int | None = None
                    ) -> Iterator[SuperbatchChanges]:
    """Simulate every superbatch, yielded in order. Superbatches are independent: up to ``num_threads`` (0: all
    cores) run at once (the kernel releases the GIL), each with about :func:`simulation_bytes` of working
    memory; with ``memory_bytes``, only as many as fit it together (always at least one)."""
    workers = max(1, num_threads or len(os.sched_getaffinity(0)))
    count = len(superbatch_ptr) - 1
    window = 2 * workers  # bounded look-ahead: results are consumed in order
    if memory_bytes is None:
        need = np.zeros(count, dtype=np.int64)
        limit = 0
    else:
        rows = np.asarray([np.diff(samples.node_range(int(b)))[0] for b in trace], dtype=np.int64)
        cum = np.concatenate([[0], np.cumsum(rows)])
        need = simulation_bytes(num_nodes, cum[superbatch_ptr[1:]] - cum[superbatch_ptr[:-1]])
        limit = int(memory_bytes)

    def job(b: int) -> SuperbatchChanges:
        start, stop = int(superbatch_ptr[b]), int(superbatch_ptr[b + 1])
        changes, rows = _simulate(samples, trace[start:stop], num_nodes, cache_rows)
        return SuperbatchChanges(b, start, stop, changes, rows)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: deque[tuple[int, Future[SuperbatchChanges]]] = deque()
        held = nxt = 0
        for _ in range(count):
            while nxt < count and len(pending) < window and (
                    not pending or memory_bytes is None or held + int(need[nxt]) <= limit):
                pending.append((nxt, pool.submit(job, nxt)))
                held += int(need[nxt])
                nxt += 1
            b, future = pending.popleft()
            result = future.result()
            held -= int(need[b])
            yield result


def simulation_bytes(num_nodes: int, rows: Any) -> Any:
    """The working memory of one superbatch's simulation reading ``rows`` trace rows: its node ids and the
    kernel's occurrence CSR (8 bytes each per row), the kernel's per-node state and cursors (9 bytes a node)."""
    return 9 * int(num_nodes) + 16 * np.asarray(rows, dtype=np.int64)


class ChangesetWriter:
    """Writes a changeset store into ``builder`` superbatch by superbatch (:meth:`extend`), in trace order.

    The header files (meta, trace, superbatch offsets) are written at once; :meth:`extend` appends the changes of
    one or more consecutive superbatches, with their offsets local to them (what ``kernels.belady_changesets``
    returns for one, or a store's own tables for a run of them: how the partitioned pack merges its shards);
    :meth:`close` writes the offset tables and returns the statistics."""

    def __init__(self, builder: ArtifactBuilder, trace: np.ndarray, superbatch_ptr: np.ndarray, num_nodes: int,
                 cache_rows: int, superbatch_size: int) -> None:
        builder.write_json(META, {"format": FORMAT_VERSION, "cache_rows": int(cache_rows),
                                  "superbatch_size": int(superbatch_size), "num_nodes": int(num_nodes)})
        builder.save_array(TRACE, trace)
        builder.save_array(SUPERBATCH_PTR, superbatch_ptr)
        self.builder, self.trace, self.cache_rows = builder, trace, int(cache_rows)
        self.superbatch_size, self.count = int(superbatch_size), len(superbatch_ptr) - 1
        self.writers = {name: builder.array_writer(name, np.int64) for name in (INIT_IDS, IN_IDS, OUT_IDS,
                                                                               IN_POSITIONS, HITS)}
        self.init_ptr: list[np.ndarray] = [np.zeros(1, np.int64)]
        self.update_ptr: list[np.ndarray] = [np.zeros(1, np.int64)]
        self.superbatches = self.prefetch_rows = self.rows = self.hits = self.changes = 0

    def extend(self, init_ptr: np.ndarray, init_ids: np.ndarray, update_ptr: np.ndarray, in_ids: np.ndarray,
               out_ids: np.ndarray, in_positions: np.ndarray, hits: np.ndarray, rows: int) -> None:
        """Append consecutive superbatches: ``init_ptr`` (S+1,) and ``update_ptr`` (T+1,) offsets from 0 into
        their ``init_ids`` and changeset arrays, ``hits`` (T,), ``rows`` the rows their batches read."""
        self.writers[INIT_IDS].append(init_ids)
        self.writers[IN_IDS].append(in_ids)
        self.writers[OUT_IDS].append(out_ids)
        self.writers[IN_POSITIONS].append(in_positions)
        self.writers[HITS].append(hits)
        self.init_ptr.append(self.prefetch_rows + np.asarray(init_ptr[1:], dtype=np.int64))
        self.update_ptr.append(self.changes + np.asarray(update_ptr[1:], dtype=np.int64))
        self.superbatches += len(init_ptr) - 1
        self.prefetch_rows += int(init_ptr[-1])
        self.changes += int(update_ptr[-1])
        self.rows += int(rows)
        self.hits += int(np.sum(hits))

    def add(self, sb: SuperbatchChanges) -> None:
        """Append one simulated superbatch."""
        c = sb.changes
        self.extend(np.asarray([0, len(c.init_ids)], dtype=np.int64), c.init_ids, c.update_ptr, c.in_ids,
                    c.out_ids, c.in_positions, c.hits, int(sb.rows.sum()))

    def close(self) -> dict[str, Any]:
        """Write the offset tables; the store's statistics (see :func:`write_changesets`)."""
        if self.superbatches != self.count:
            raise ValueError(f"'{SUPERBATCH_PTR}' expected {self.count} superbatches written (got "
                             f"{self.superbatches})")
        for w in self.writers.values():
            w.close()
        self.builder.save_array(INIT_PTR, np.concatenate(self.init_ptr))
        self.builder.save_array(UPDATE_PTR, np.concatenate(self.update_ptr))
        return {
            "cache_rows": self.cache_rows,
            "superbatch_size": self.superbatch_size,
            "superbatches": self.count,
            "trace_batches": len(self.trace),
            "trace_rows": self.rows,
            "predicted_hits": self.hits,
            "predicted_hit_rate": self.hits / self.rows if self.rows else 0.0,
            "changes": self.changes,
            "prefetch_rows": self.prefetch_rows,
        }


def write_changesets(builder: ArtifactBuilder, samples: SampleSet, num_nodes: int, cache_rows: int,
                     superbatch_size: int, num_threads: int = 0,
                     progress: Callable[[str, int, int], None] | None = None,
                     memory_bytes: int | None = None) -> dict[str, Any]:
    """Write the changeset store of ``samples``' training trace into ``builder``; returns its statistics
    (``predicted_hit_rate`` = predicted hits / training rows of the trace, changes, prefetch rows).
    ``memory_bytes`` bounds the superbatches simulated at once (:func:`iter_changesets`)."""
    trace, sb_ptr = trace_superbatches(samples, superbatch_size)
    writer = ChangesetWriter(builder, trace, sb_ptr, num_nodes, cache_rows, superbatch_size)
    for sb in iter_changesets(samples, trace, sb_ptr, num_nodes, cache_rows, num_threads, memory_bytes):
        writer.add(sb)
        if progress:
            progress("pack: changesets", sb.index + 1, writer.count)
    return writer.close()


class ChangesetStore:
    """Read side of a changeset store directory: validated, memory-mapped tables, per position and superbatch.

    ``num_batches`` (the sample set's) bounds the trace's batch ids. Construction checks that every file exists,
    the format version, and that the tables agree (``FileNotFoundError`` / ``ValueError`` naming the file)."""

    def __init__(self, path: str | Path, num_batches: int) -> None:
        self.path = Path(path)
        for name in CHANGESET_FILES:
            if not (self.path / name).exists():
                raise FileNotFoundError(f"'ginex' expected {self.path / name} (got no such file)")
        meta = json.loads((self.path / META).read_text())
        if meta.get("format") != FORMAT_VERSION:
            raise ValueError(f"'{self.path / META}' expected format {FORMAT_VERSION} (got {meta.get('format')!r}); "
                             "rebuild the pack artifact")
        self.cache_rows, self.num_nodes = int(meta["cache_rows"]), int(meta["num_nodes"])
        self.superbatch_size = int(meta["superbatch_size"])
        load = lambda name: np.load(self.path / name, mmap_mode="r")  # noqa: E731
        self.trace = np.asarray(load(TRACE), dtype=np.int64)
        self.superbatch_ptr = np.asarray(load(SUPERBATCH_PTR), dtype=np.int64)
        self.init_ptr = np.asarray(load(INIT_PTR), dtype=np.int64)
        self.update_ptr = np.asarray(load(UPDATE_PTR), dtype=np.int64)
        self.init_ids, self.in_ids, self.out_ids = load(INIT_IDS), load(IN_IDS), load(OUT_IDS)
        self.in_positions, self.hits = load(IN_POSITIONS), load(HITS)
        self._validate(num_batches)
        self.position = np.full(num_batches, -1, dtype=np.int64)  # batch id -> trace position (-1: none)
        self.position[self.trace] = np.arange(len(self.trace))
        self.superbatch = np.repeat(np.arange(self.num_superbatches), np.diff(self.superbatch_ptr))  # (T,)

    @property
    def num_superbatches(self) -> int:
        return len(self.superbatch_ptr) - 1

    def init(self, superbatch: int) -> np.ndarray:
        """The initial cache of ``superbatch`` (int64 node ids)."""
        return np.asarray(self.init_ids[self.init_ptr[superbatch] : self.init_ptr[superbatch + 1]])

    def update(self, position: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(in_ids, out_ids, in_positions)`` applied after trace position ``position``."""
        lo, hi = int(self.update_ptr[position]), int(self.update_ptr[position + 1])
        return (np.asarray(self.in_ids[lo:hi]), np.asarray(self.out_ids[lo:hi]),
                np.asarray(self.in_positions[lo:hi]))

    def _validate(self, num_batches: int) -> None:
        t, b = len(self.trace), self.num_superbatches
        checks = [
            (SUPERBATCH_PTR, b >= 0 and self.superbatch_ptr[0] == 0 and self.superbatch_ptr[-1] == t
             and bool(np.all(np.diff(self.superbatch_ptr) >= 0)), f"offsets from 0 to {t}, non-decreasing"),
            (INIT_PTR, len(self.init_ptr) == b + 1 and self.init_ptr[0] == 0
             and self.init_ptr[-1] == len(self.init_ids) and bool(np.all(np.diff(self.init_ptr) >= 0))
             and bool(np.all(np.diff(self.init_ptr) <= self.cache_rows)),
             f"{b + 1} offsets into {INIT_IDS}, at most {self.cache_rows} apart"),
            (UPDATE_PTR, len(self.update_ptr) == t + 1 and self.update_ptr[0] == 0
             and self.update_ptr[-1] == len(self.in_ids) == len(self.out_ids) == len(self.in_positions)
             and bool(np.all(np.diff(self.update_ptr) >= 0)), f"{t + 1} offsets into the changeset arrays"),
            (HITS, len(self.hits) == t, f"{t} entries, one per trace position"),
            (TRACE, t == 0 or (int(self.trace.min()) >= 0 and int(self.trace.max()) < num_batches
                               and len(np.unique(self.trace)) == t),
             f"distinct batch ids below {num_batches}"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"'{self.path / name}' expected {expected} (got a table that does not match)")
