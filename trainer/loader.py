"""Pipelined batch loader: a reader thread reads and assembles batches ahead of the training step.

The reader thread runs ``samples.batch(i)`` (topology from the memory-mapped sample set), converts the blocks
to edge tensors and calls ``source.load(batch)`` (feature read + assemble), then puts a :class:`LoadedBatch`
into a bounded queue of depth ``prefetch``; SSD reads and host work overlap the consumer's compute. With
``sequential=True`` there is no thread (the ablation baseline).

Timers (seconds, cumulative over the loader's life): ``graph_s`` (topology + block conversion), ``read_s`` and
``assemble_s`` (the source's two stages), ``label_s``, ``wait_s`` (consumer blocked on an empty queue: the
loader is the bottleneck) and ``stall_s`` (reader blocked on a full queue: compute is the bottleneck).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

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

    @property
    def num_seeds(self) -> int:
        return int(self.y.shape[0])


class BatchLoaderError(RuntimeError):
    """The reader thread failed; ``__cause__`` is the original exception with its traceback."""


@dataclass
class _Failure:
    batch_id: int
    error: Exception


class _End:
    """The reader's last item: every batch was delivered."""


_END = _End()
_Item = LoadedBatch | _Failure | _End  # what the reader thread puts into the queue


class BatchLoader:
    """Iterate ``LoadedBatch`` for ``batch_ids`` in order.

    >>> for lb in BatchLoader(samples, source, samples.batch_ids("train", 0), labels, prefetch=2):
    ...     loss = F.cross_entropy(model(lb.x, lb.blocks), lb.y)

    Each iteration starts a fresh reader thread; leaving the loop early (``break``, an exception, or
    :meth:`close`) stops and joins it. A reader exception is re-raised in the consumer as
    :class:`BatchLoaderError` chained (``from``) to the original.
    """

    def __init__(self, samples: Samples, source: FeatureSource, batch_ids: Sequence[int], labels: np.ndarray,
                 prefetch: int = 2, device: torch.device | str = "cpu", sequential: bool = False) -> None:
        if prefetch < 1:
            raise ValueError(f"'prefetch' expected >= 1 (got {prefetch})")
        labels = np.asarray(labels)
        if labels.ndim != 1 or labels.dtype != np.int64:
            raise ValueError(f"'labels' expected a 1-D int64 array (got {labels.dtype} {labels.shape})")
        self.samples, self.source, self.labels = samples, source, labels
        self.batch_ids = [int(b) for b in batch_ids]
        self.prefetch, self.sequential = int(prefetch), bool(sequential)
        self.device = torch.device(device)
        self.timers = dict.fromkeys(("graph_s", "read_s", "assemble_s", "label_s", "wait_s", "stall_s"), 0.0)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._queue: queue.Queue[_Item] = queue.Queue(maxsize=self.prefetch)

    def __len__(self) -> int:
        return len(self.batch_ids)

    @property
    def is_running(self) -> bool:
        """Whether a reader thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    # ----------------------------------------------------------------------------------------------------
    def _load_one(self, batch_id: int) -> LoadedBatch:
        """Topology, features and labels of one batch (runs in the reader thread, or inline if sequential)."""
        t0 = time.perf_counter()
        batch = self.samples.batch(batch_id)
        blocks = to_tensor_blocks(batch.blocks(), self.device)
        t1 = time.perf_counter()
        r0, a0 = self.source.read_s, self.source.assemble_s
        x = self.source.load(batch)  # (num_nodes, F)
        self.timers["read_s"] += self.source.read_s - r0
        self.timers["assemble_s"] += self.source.assemble_s - a0
        t2 = time.perf_counter()
        seeds = np.asarray(batch.nodes[: int(batch.hop_counts[0])])  # (num_seeds,)
        y = torch.from_numpy(self.labels[seeds])  # (num_seeds,)
        if self.device.type != "cpu":
            y = y.to(self.device, non_blocking=True)
        self.timers["graph_s"] += t1 - t0
        self.timers["label_s"] += time.perf_counter() - t2
        return LoadedBatch(batch_id=batch_id, x=x, y=y, blocks=blocks)

    def _put(self, item: _Item) -> bool:
        """Put unless stopped; returns False when the consumer asked to stop."""
        t0 = time.perf_counter()
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
                self.timers["stall_s"] += time.perf_counter() - t0
                return True
            except queue.Full:
                continue
        return False

    def _reader(self) -> None:
        stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        batch_id = -1
        try:
            for batch_id in self.batch_ids:
                if self._stop.is_set():
                    return
                if stream is None:
                    item = self._load_one(batch_id)
                else:
                    # copies and cache gathers run on a side stream; the consumer waits on this event
                    with torch.cuda.stream(stream):
                        item = self._load_one(batch_id)
                        item.ready = torch.cuda.Event()
                        item.ready.record(stream)
                if not self._put(item):
                    return
            self._put(_END)
        except Exception as e:  # forwarded to the consumer, which raises it chained
            self._put(_Failure(batch_id, e))

    # ----------------------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[LoadedBatch]:
        if self.sequential:
            for batch_id in self.batch_ids:
                yield self._load_one(batch_id)
            return
        self.close()  # a previous, unfinished iteration
        self._stop.clear()
        self._queue = queue.Queue(maxsize=self.prefetch)
        self._thread = threading.Thread(target=self._reader, name="strata-batch-reader", daemon=True)
        self._thread.start()
        try:
            while True:
                item = self._get()
                if isinstance(item, _End):
                    return
                if isinstance(item, _Failure):
                    raise BatchLoaderError(
                        f"'BatchLoader' reader expected to load batch {item.batch_id} "
                        f"(got {type(item.error).__name__}: {item.error})"
                    ) from item.error
                if item.ready is not None:
                    current = torch.cuda.current_stream(self.device)
                    current.wait_event(item.ready)  # GPU-side wait, no host sync
                    for t in [item.x, item.y, *(e for b in item.blocks for e in (b.edge_src, b.edge_dst))]:
                        t.record_stream(current)  # allocated on the side stream, used on this one
                yield item
        finally:
            self.close()

    def _get(self) -> _Item:
        t0 = time.perf_counter()
        try:
            while True:
                try:
                    return self._queue.get(timeout=_POLL_S)
                except queue.Empty:
                    if not self.is_running:
                        try:
                            return self._queue.get_nowait()
                        except queue.Empty as e:
                            raise BatchLoaderError("'BatchLoader' reader expected to send a result "
                                                   "(got a thread that exited silently)") from e
        finally:
            self.timers["wait_s"] += time.perf_counter() - t0

    def close(self) -> None:
        """Stop the reader thread (if any), drop queued batches and join it."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> BatchLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
