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

Queues between stages hold at most ``prefetch`` batches. A source that is not split into ``read`` and
``assemble`` is loaded whole in the ``load`` stage. A source's ``max_reads_ahead`` (read buffers it
rotates; 0 = any) bounds how many batches may have been read and not yet assembled, so a chunk buffer is
never overwritten before its rows are gathered.

Timers (seconds, cumulative over the loader's life): ``load_busy_s`` and ``assemble_busy_s`` (each stage's
work), ``graph_s`` (topology: batch record + block conversion), ``read_s`` and ``assemble_s`` (the source's
two stages), ``label_s``, ``wait_s`` (consumer blocked on an empty queue: the loader is the bottleneck) and
``stall_s`` (stages blocked on a full queue or a read buffer: compute is the bottleneck). ``load_cpu_s`` and
``assemble_cpu_s`` are the CPU time (user + system, ``time.thread_time``) of the stage threads' work: against
the busy times they say whether a stage computes or waits (for the disk, or for a core).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from storage_kernels.sampleset import SampledBatch
from trainer.features import FeatureSource
from trainer.models import TensorBlock, to_tensor_blocks

__all__ = ["BatchLoader", "BatchLoaderError", "LoadedBatch", "Samples"]

_POLL_S = 0.05  # how often a blocked put/get re-checks the stop event / the reader's liveness


class Samples(Protocol):
    """What the loader reads of a sample set (``storage_kernels.sampleset.SampleSet``): one batch by id."""

    def batch(self, i: int) -> SampledBatch: ...


@dataclass
class LoadedBatch:
    """One batch ready for the model; ``ready`` is set when its copies were queued on a side CUDA stream."""

    batch_id: int
    x: torch.Tensor  # (num_nodes, F) float32
    y: torch.Tensor  # (num_seeds,) int64, -1 = unlabelled
    blocks: list[TensorBlock]  # input layer first
    ready: torch.cuda.Event | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # the loader's ``extra(batch, device)``, if it has one

    @property
    def num_seeds(self) -> int:
        return int(self.y.shape[0])


class BatchLoaderError(RuntimeError):
    """A stage thread failed; ``__cause__`` is the original exception with its traceback."""


@dataclass
class _Failure:
    batch_id: int
    error: Exception


class _End:
    """The reader's last item: every batch was delivered."""


_END = _End()
_Item = LoadedBatch | _Failure | _End  # what the assemble stage puts into the consumer's queue


class BatchLoader:
    """Iterate ``LoadedBatch`` for ``batch_ids`` in order.

    >>> for lb in BatchLoader(samples, source, samples.batch_ids("train", 0), labels, prefetch=2):
    ...     loss = F.cross_entropy(model(lb.x, lb.blocks), lb.y)

    ``extra(batch, device)`` (optional) derives more of each batch in the assemble stage, off the consumer's
    thread, into ``LoadedBatch.extra`` (``pipelines.batches``: PyG's ``edge_index`` and node ids); its tensors
    are treated as ``x`` is on a side CUDA stream.

    Each iteration starts fresh stage threads; leaving the loop early (``break``, an exception, or
    :meth:`close`) stops and joins them. A stage's exception is re-raised in the consumer as
    :class:`BatchLoaderError` chained (``from``) to the original.
    """

    def __init__(self, samples: Samples, source: FeatureSource, batch_ids: Sequence[int], labels: np.ndarray,
                 prefetch: int = 2, device: torch.device | str = "cpu", sequential: bool = False,
                 extra: Callable[[SampledBatch, torch.device], dict[str, Any]] | None = None) -> None:
        if prefetch < 1:
            raise ValueError(f"'prefetch' expected >= 1 (got {prefetch})")
        labels = np.asarray(labels)
        if labels.ndim != 1 or labels.dtype != np.int64:
            raise ValueError(f"'labels' expected a 1-D int64 array (got {labels.dtype} {labels.shape})")
        self.samples, self.source, self.labels = samples, source, labels
        self.batch_ids = [int(b) for b in batch_ids]
        self.prefetch, self.sequential = int(prefetch), bool(sequential)
        self.extra = extra
        self.device = torch.device(device)
        self.split = callable(getattr(source, "read", None)) and callable(getattr(source, "assemble", None))
        self.timers = dict.fromkeys(("load_busy_s", "assemble_busy_s", "load_cpu_s", "assemble_cpu_s", "graph_s",
                                     "read_s", "assemble_s", "label_s", "wait_s", "stall_s"), 0.0)
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._queues: list[queue.Queue[Any]] = []

    def __len__(self) -> int:
        return len(self.batch_ids)

    @property
    def is_running(self) -> bool:
        """Whether a stage thread is alive."""
        return any(t.is_alive() for t in self._threads)

    # ---------------------------------------------------------------------------------------------- stages
    def _load(self, batch_id: int) -> tuple[SampledBatch, Any]:
        """The load stage: the batch record and the source's I/O (or the whole ``load`` of an unsplit source)."""
        t0, c0 = time.perf_counter(), time.thread_time()
        batch = self.samples.batch(batch_id)
        t1 = time.perf_counter()
        r0, a0 = self.source.read_s, self.source.assemble_s
        data = self.source.read(batch) if self.split else self.source.load(batch)
        self.timers["read_s"] += self.source.read_s - r0
        self.timers["assemble_s"] += self.source.assemble_s - a0
        self.timers["graph_s"] += t1 - t0
        self.timers["load_busy_s"] += time.perf_counter() - t0
        self.timers["load_cpu_s"] += time.thread_time() - c0
        return batch, data

    def _assemble(self, batch_id: int, batch: SampledBatch, data: Any) -> LoadedBatch:
        """The assemble stage: rows in node order on the device, the edge tensors and the labels."""
        t0, c0 = time.perf_counter(), time.thread_time()
        if self.split:
            a0 = self.source.assemble_s
            x = self.source.assemble(data)  # (num_nodes, F)
            self.timers["assemble_s"] += self.source.assemble_s - a0
        else:
            x = data
        t1 = time.perf_counter()
        blocks = to_tensor_blocks(batch.blocks(), self.device)
        extra = self.extra(batch, self.device) if self.extra is not None else {}
        t2 = time.perf_counter()
        seeds = np.asarray(batch.nodes[: int(batch.hop_counts[0])])  # (num_seeds,)
        y = torch.from_numpy(self.labels[seeds])  # (num_seeds,)
        if self.device.type != "cpu":
            y = y.to(self.device, non_blocking=True)
        t3 = time.perf_counter()
        self.timers["graph_s"] += t2 - t1
        self.timers["label_s"] += t3 - t2
        self.timers["assemble_busy_s"] += t3 - t0
        self.timers["assemble_cpu_s"] += time.thread_time() - c0
        return LoadedBatch(batch_id=batch_id, x=x, y=y, blocks=blocks, extra=extra)

    def _load_one(self, batch_id: int) -> LoadedBatch:
        """Every stage of one batch in turn (the sequential mode)."""
        return self._assemble(batch_id, *self._load(batch_id))

    # ---------------------------------------------------------------------------------------------- threads
    def _put(self, q: queue.Queue[Any], item: Any) -> bool:
        """Put unless stopped; returns False when the consumer asked to stop."""
        t0 = time.perf_counter()
        while not self._stop.is_set():
            try:
                q.put(item, timeout=_POLL_S)
                self.timers["stall_s"] += time.perf_counter() - t0
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
                self.timers["stall_s"] += time.perf_counter() - t0
                return True
        return False

    def _loader(self, out: queue.Queue[Any], slots: threading.Semaphore | None) -> None:
        batch_id = -1
        try:
            for batch_id in self.batch_ids:
                if not self._acquire(slots):
                    return
                if not self._put(out, (batch_id, *self._load(batch_id))):
                    return
            self._put(out, _END)
        except Exception as e:  # forwarded to the consumer, which raises it chained
            self._put(out, _Failure(batch_id, e))

    def _assembler(self, inp: queue.Queue[Any], out: queue.Queue[_Item], slots: threading.Semaphore | None) -> None:
        stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        batch_id = -1
        try:
            while not self._stop.is_set():
                try:
                    item = inp.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
                if isinstance(item, (_End, _Failure)):
                    self._put(out, item)
                    return
                batch_id = item[0]
                if stream is None:
                    loaded = self._assemble(*item)
                else:
                    # copies and cache gathers run on a side stream; the consumer waits on this event
                    with torch.cuda.stream(stream):
                        loaded = self._assemble(*item)
                        loaded.ready = torch.cuda.Event()
                        loaded.ready.record(stream)
                if slots is not None:
                    slots.release()  # the batch's read buffer may be reused
                if not self._put(out, loaded):
                    return
        except Exception as e:
            self._put(out, _Failure(batch_id, e))

    # ---------------------------------------------------------------------------------------------- consumer
    def __iter__(self) -> Iterator[LoadedBatch]:
        if self.sequential:
            for batch_id in self.batch_ids:
                yield self._load_one(batch_id)
            return
        self.close()  # a previous, unfinished iteration
        self._stop.clear()
        ahead = int(getattr(self.source, "max_reads_ahead", 0)) if self.split else 0
        slots = threading.Semaphore(ahead) if ahead > 0 else None
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
                if item.ready is not None:
                    current = torch.cuda.current_stream(self.device)
                    current.wait_event(item.ready)  # GPU-side wait, no host sync
                    extra = [v for v in item.extra.values() if isinstance(v, torch.Tensor)]
                    for t in [item.x, item.y, *(e for b in item.blocks for e in (b.edge_src, b.edge_dst)), *extra]:
                        t.record_stream(current)  # allocated on the side stream, used on this one
                yield item
        finally:
            self.close()

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
            self.timers["wait_s"] += time.perf_counter() - t0

    def close(self) -> None:
        """Stop the stage threads (if any), drop queued batches and join them."""
        self._stop.set()
        for q in self._queues:
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        for t in self._threads:
            t.join()
        self._threads = []

    def __enter__(self) -> BatchLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
