"""Pipelined batch loader: batches flow through stages on their own threads, joined by bounded queues.

The stages, after DiskGNN (section 5.3), each a thread (``sequential=True`` runs them inline, in turn: the
ablation baseline):

``load``
    ``samples.batch(i)`` (the batch's record in the memory-mapped sample set) and the source's I/O stage
    (``source.read``: direct reads of packed chunks and file blocks, GIL released);
``assemble``
    the source's gather stage (``source.assemble``: caches and loaded rows in input-node order, on the
    device), then the topology (blocks to edge tensors) and the labels;
``compute``
    the consumer (forward, backward, update).

Queues between stages hold at most ``prefetch`` batches, and with ``max_bytes`` the batches in flight (read,
assembled, or held by the consumer) hold at most that many bytes of feature rows (``num_nodes x feature_dim``
float32 each): the load stage waits before reading a batch that would pass it, unless no other batch is in
flight. With wide features a batch's rows are hundreds of MiB, and ``2 * prefetch + 3`` of them would be
gigabytes. A source that is not split into ``read`` and
``assemble`` (``FeatureSource.split``) is loaded whole in the ``load`` stage. A source's ``max_reads_ahead``
(read buffers it rotates; 0 = any) bounds how many batches may have been read and not yet assembled: the
load stage takes a slot before each read and the assemble stage gives it back when the batch's assemble
ends, so a chunk buffer is never overwritten before its rows are gathered (``trainer.features.buffers``).

Who owns a batch's staging block (on the CPU, the block ``LoadedBatch.x`` is a view of): by default the
consumer, for good (``FeatureSource.keep``): a loop may keep any batch's tensors as long as it likes, and no
block is reused. A consumer that promises to be done with a batch when it asks for the next one (its step
over, no tensor of the batch kept: Strata's own training and evaluation loops, ``trainer.train`` and
``trainer.evaluation``) passes ``release_batches=True``: the loader then releases each batch at that moment
(``FeatureSource.release``) and the source reuses its block for a later batch, which saves the page faults of
a fresh block per batch. Batches the loader drops (an early exit, a failure) are released either way.

Timers (seconds, cumulative over the loader's life): ``load_busy_s`` and ``assemble_busy_s`` (each stage's
work), ``graph_s`` (topology: batch record + block conversion), ``read_s`` and ``assemble_s`` (the source's
two stages), ``label_s``, ``wait_s`` (consumer blocked on an empty queue: the loader is the bottleneck) and
``stall_s`` (stages blocked on a full queue or a read buffer: compute is the bottleneck). ``load_cpu_s`` and
``assemble_cpu_s`` are the CPU time (user + system, ``time.thread_time``) of the stage threads' work: against
the busy times they say whether a stage computes or waits (for the disk, or for a core). Each stage's thread
writes its own timers only (:attr:`BatchLoader.timers` sums them): the load stage takes the change of the
source's ``read_s`` over its read (and of ``assemble_s`` too for an unsplit source, whose ``load`` does both),
the assemble stage the change of ``assemble_s`` over its assemble.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from storage_kernels.sampleset import SampledBatch
from trainer.batch import LoadedBatch, Samples
from trainer.blocks import to_tensor_blocks
from trainer.features.base import FeatureSource

__all__ = ["BatchLoader", "BatchLoaderError", "LoadedBatch", "Samples"]

_POLL_S = 0.05  # how often a blocked put/get re-checks the stop event / the reader's liveness


class BatchLoaderError(RuntimeError):
    """A stage thread failed; ``__cause__`` is the original exception with its traceback."""


@dataclass
class _Failure:
    batch_id: int
    error: Exception


class _Stopped(Exception):
    """The loader was stopped while its load stage waited for room (``max_bytes``)."""


class _End:
    """The reader's last item: every batch was delivered."""


_END = _End()
_Item = tuple[LoadedBatch, Any] | _Failure | _End  # what the assemble stage puts into the consumer's queue
_TIMERS = ("load_busy_s", "assemble_busy_s", "load_cpu_s", "assemble_cpu_s", "graph_s", "read_s", "assemble_s",
           "label_s", "wait_s", "stall_s")


class _ByteGate:
    """Bytes of the batches in flight, at most ``limit`` (a batch alone always passes), by batch id."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held = int(limit), 0
        self._bytes: dict[int, int] = {}
        self._cond = threading.Condition()

    def enter(self, batch_id: int, nbytes: int, stop: threading.Event) -> bool:
        """Wait until ``nbytes`` more fit (or nothing is in flight); False when ``stop`` is set first."""
        with self._cond:
            while self.held and self.held + nbytes > self.limit:
                if stop.is_set():
                    return False
                self._cond.wait(_POLL_S)
            self.held += nbytes
            self._bytes[batch_id] = self._bytes.get(batch_id, 0) + nbytes
            return True

    def leave(self, batch_id: int) -> None:
        """The batch is done (or dropped): its bytes are free."""
        with self._cond:
            self.held -= self._bytes.pop(batch_id, 0)
            self._cond.notify_all()


class BatchLoader:
    """Iterate ``LoadedBatch`` for ``batch_ids`` in order.

    >>> for lb in BatchLoader(samples, source, samples.batch_ids("train", 0), labels, prefetch=2):
    ...     loss = F.cross_entropy(model(lb.x, lb.blocks), lb.y)

    ``extra(batch, device)`` (optional) derives more of each batch in the assemble stage, off the consumer's
    thread, into ``LoadedBatch.extra`` (``pipelines.batches``: PyG's ``edge_index`` and node ids); its tensors
    are treated as ``x`` is on a side CUDA stream.

    Every batch's tensors are the consumer's to keep, unless ``release_batches=True``: then a batch is done,
    and its staging block reused, once the consumer asks for the next batch or leaves the loop (module
    docstring).

    Each iteration starts fresh stage threads; leaving the loop early (``break``, an exception, or
    :meth:`close`) stops and joins them. A stage's exception is re-raised in the consumer as
    :class:`BatchLoaderError` chained (``from``) to the original.
    """

    def __init__(self, samples: Samples, source: FeatureSource, batch_ids: Sequence[int], labels: np.ndarray,
                 prefetch: int = 2, device: torch.device | str = "cpu", sequential: bool = False,
                 extra: Callable[[SampledBatch, torch.device], dict[str, Any]] | None = None,
                 release_batches: bool = False, max_bytes: int | None = None) -> None:
        if prefetch < 1:
            raise ValueError(f"'prefetch' expected >= 1 (got {prefetch})")
        if max_bytes is not None and max_bytes < 1:
            raise ValueError(f"'max_bytes' expected >= 1 or None (got {max_bytes})")
        self.max_bytes = max_bytes
        self._gate: _ByteGate | None = None
        labels = np.asarray(labels)
        if labels.ndim != 1 or labels.dtype.kind != "i":
            raise ValueError(f"'labels' expected a 1-D signed integer array (got {labels.dtype} {labels.shape})")
        self.samples, self.source, self.labels = samples, source, labels
        self.batch_ids = [int(b) for b in batch_ids]
        self.prefetch, self.sequential = int(prefetch), bool(sequential)
        self.extra = extra
        self.release_batches = bool(release_batches)
        self.device = torch.device(device)
        self.split = bool(source.split)
        # each stage's timers, written by the thread that runs it alone (the consumer's: wait_s)
        self._stage_timers = {stage: dict.fromkeys(_TIMERS, 0.0) for stage in ("load", "assemble", "consume")}
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._queues: list[queue.Queue[Any]] = []

    def __len__(self) -> int:
        return len(self.batch_ids)

    @property
    def timers(self) -> dict[str, float]:
        """The stage timers (module docstring), summed over the stages' threads."""
        return {k: sum(t[k] for t in self._stage_timers.values()) for k in _TIMERS}

    @property
    def is_running(self) -> bool:
        """Whether a stage thread is alive."""
        return any(t.is_alive() for t in self._threads)

    # ---------------------------------------------------------------------------------------------- stages
    def _load(self, batch_id: int) -> tuple[SampledBatch, Any]:
        """The load stage: the batch record and the source's I/O (or the whole ``load`` of an unsplit source)."""
        timers = self._stage_timers["load"]
        t0, c0 = time.perf_counter(), time.thread_time()
        batch = self.samples.batch(batch_id)
        t1 = time.perf_counter()
        gate = self._gate
        if gate is not None and not gate.enter(batch_id, len(batch.nodes) * self.source.feature_dim * 4, self._stop):
            raise _Stopped
        timers["stall_s"] += time.perf_counter() - t1
        t1 = time.perf_counter()
        r0, a0 = self.source.read_s, self.source.assemble_s
        data = self.source.read(batch) if self.split else self.source.load(batch)
        timers["read_s"] += self.source.read_s - r0
        if not self.split:  # a split source's assemble_s is the assemble stage's, which may run meanwhile
            timers["assemble_s"] += self.source.assemble_s - a0
        timers["graph_s"] += t1 - t0
        timers["load_busy_s"] += time.perf_counter() - t0
        timers["load_cpu_s"] += time.thread_time() - c0
        return batch, data

    def _assemble(self, batch_id: int, batch: SampledBatch, data: Any) -> LoadedBatch:
        """The assemble stage: rows in node order on the device, the edge tensors and the labels."""
        timers = self._stage_timers["assemble"]
        t0, c0 = time.perf_counter(), time.thread_time()
        if self.split:
            a0 = self.source.assemble_s
            x = self.source.assemble(data)  # (num_nodes, F)
            timers["assemble_s"] += self.source.assemble_s - a0
        else:
            x = data
        t1 = time.perf_counter()
        blocks = to_tensor_blocks(batch.blocks(), self.device)
        extra = self.extra(batch, self.device) if self.extra is not None else {}
        t2 = time.perf_counter()
        seeds = np.asarray(batch.nodes[: int(batch.hop_counts[0])])  # (num_seeds,)
        y = torch.from_numpy(self.labels[seeds].astype(np.int64, copy=False))  # (num_seeds,): held narrow
        if self.device.type != "cpu":
            y = y.to(self.device, non_blocking=True)
        t3 = time.perf_counter()
        timers["graph_s"] += t2 - t1
        timers["label_s"] += t3 - t2
        timers["assemble_busy_s"] += t3 - t0
        timers["assemble_cpu_s"] += time.thread_time() - c0
        return LoadedBatch(batch_id=batch_id, x=x, y=y, blocks=blocks, extra=extra)

    def _done(self, data: Any, batch_id: int) -> None:
        """The consumer moved past the batch read as ``data``: with ``release_batches`` the source may reuse what
        it lent it; otherwise the consumer keeps it for good."""
        if self._gate is not None:
            self._gate.leave(batch_id)
        if self.split:
            if self.release_batches:
                self.source.release(data)
            else:
                self.source.keep(data)

    def _drop(self, item: Any) -> None:
        """A batch that never reaches the consumer (stopped, failed): nothing reads its tensors."""
        if not isinstance(item, tuple):  # _End, _Failure
            return
        if self._gate is not None:  # (batch_id, batch, data) or (LoadedBatch, data)
            self._gate.leave(item[0] if isinstance(item[0], int) else item[0].batch_id)
        if self.split:
            self.source.release(item[-1])

    # ---------------------------------------------------------------------------------------------- threads
    def _put(self, q: queue.Queue[Any], item: Any, timers: dict[str, float]) -> bool:
        """Put unless stopped; returns False when the consumer asked to stop."""
        t0 = time.perf_counter()
        while not self._stop.is_set():
            try:
                q.put(item, timeout=_POLL_S)
                timers["stall_s"] += time.perf_counter() - t0
                return True
            except queue.Full:
                continue
        return False

    def _acquire(self, slots: threading.Semaphore | None) -> bool:
        """Wait for a free read buffer (when the source bounds reads ahead) unless stopped."""
        if slots is None:
            return True
        t0 = time.perf_counter()
        while not self._stop.is_set():
            if slots.acquire(timeout=_POLL_S):
                self._stage_timers["load"]["stall_s"] += time.perf_counter() - t0
                return True
        return False

    def _loader(self, out: queue.Queue[Any], slots: threading.Semaphore | None) -> None:
        timers = self._stage_timers["load"]
        batch_id = -1
        try:
            for batch_id in self.batch_ids:
                if not self._acquire(slots):
                    return
                try:
                    item = (batch_id, *self._load(batch_id))
                except _Stopped:
                    return
                if not self._put(out, item, timers):
                    self._drop(item)
                    return
            self._put(out, _END, timers)
        except Exception as e:  # forwarded to the consumer, which raises it chained
            self._put(out, _Failure(batch_id, e), timers)

    def _assembler(self, inp: queue.Queue[Any], out: queue.Queue[_Item], slots: threading.Semaphore | None) -> None:
        timers = self._stage_timers["assemble"]
        stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        batch_id = -1
        try:
            while not self._stop.is_set():
                try:
                    item = inp.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
                if isinstance(item, (_End, _Failure)):
                    self._put(out, item, timers)
                    return
                batch_id, data = item[0], item[-1]
                try:
                    if stream is None:
                        loaded = self._assemble(*item)
                    else:
                        # copies and cache gathers run on a side stream; the consumer waits on this event
                        with torch.cuda.stream(stream):
                            loaded = self._assemble(*item)
                            loaded.ready = torch.cuda.Event()
                            loaded.ready.record(stream)
                except Exception:
                    self._drop(item)
                    raise
                if slots is not None:
                    slots.release()  # the batch's assemble ended: its read buffer may be reused
                if not self._put(out, (loaded, data), timers):
                    self._drop((loaded, data))
                    return
        except Exception as e:
            self._put(out, _Failure(batch_id, e), timers)

    # ---------------------------------------------------------------------------------------------- consumer
    def __iter__(self) -> Iterator[LoadedBatch]:
        if self.sequential:
            yield from self._sequential()
            return
        self.close()  # a previous, unfinished iteration
        self._stop.clear()
        ahead = self.source.max_reads_ahead if self.split else 0
        slots = threading.Semaphore(ahead) if ahead > 0 else None
        self._gate = _ByteGate(self.max_bytes) if self.max_bytes is not None else None
        loaded: queue.Queue[Any] = queue.Queue(maxsize=self.prefetch)
        ready: queue.Queue[_Item] = queue.Queue(maxsize=self.prefetch)
        self._queues = [loaded, ready]
        self._threads = [
            threading.Thread(target=self._loader, args=(loaded, slots), name="strata-load", daemon=True),
            threading.Thread(target=self._assembler, args=(loaded, ready, slots), name="strata-assemble",
                             daemon=True),
        ]
        for t in self._threads:
            t.start()
        current: Any = None  # the read of the batch the consumer holds: done when it asks for the next
        current_id = -1
        try:
            while True:
                item = self._get(ready)
                if isinstance(item, _End):
                    return
                if isinstance(item, _Failure):
                    raise BatchLoaderError(
                        f"'BatchLoader' stage expected to load batch {item.batch_id} "
                        f"(got {type(item.error).__name__}: {item.error})"
                    ) from item.error
                lb, current = item
                current_id = lb.batch_id
                if lb.ready is not None:
                    stream = torch.cuda.current_stream(self.device)
                    stream.wait_event(lb.ready)  # GPU-side wait, no host sync
                    extra = [v for v in lb.extra.values() if isinstance(v, torch.Tensor)]
                    for t in [lb.x, lb.y, *(e for b in lb.blocks for e in (b.edge_src, b.edge_dst)), *extra]:
                        t.record_stream(stream)  # allocated on the side stream, used on this one
                yield lb
                self._done(current, current_id)  # the consumer asked for the next batch: this one is done
                current = None
        finally:
            if current is not None:  # the consumer left the loop
                self._done(current, current_id)
            self.close()
            self._gate = None

    def _sequential(self) -> Iterator[LoadedBatch]:
        """Every stage of each batch in turn on the consumer's thread (the ablation baseline)."""
        for batch_id in self.batch_ids:
            batch, data = self._load(batch_id)
            try:
                lb = self._assemble(batch_id, batch, data)
            except Exception:
                self._drop((batch_id, batch, data))
                raise
            try:
                yield lb
            finally:  # the consumer asked for the next batch, or left the loop
                self._done(data, batch_id)

    def _get(self, q: queue.Queue[_Item]) -> _Item:
        t0 = time.perf_counter()
        try:
            while True:
                try:
                    return q.get(timeout=_POLL_S)
                except queue.Empty:
                    if not self.is_running:
                        try:
                            return q.get_nowait()
                        except queue.Empty as e:
                            raise BatchLoaderError("'BatchLoader' stages expected to send a result "
                                                   "(got threads that exited silently)") from e
        finally:
            self._stage_timers["consume"]["wait_s"] += time.perf_counter() - t0

    def close(self) -> None:
        """Stop the stage threads (if any), drop (and release) queued batches and join them."""
        self._stop.set()
        for t in self._threads:
            self._drain()
            t.join()
        self._drain()
        self._threads = []

    def _drain(self) -> None:
        for q in self._queues:
            while True:
                try:
                    self._drop(q.get_nowait())
                except queue.Empty:
                    break

    def __enter__(self) -> BatchLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
