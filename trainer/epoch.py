"""One training epoch's bookkeeping, for ``trainer.train``'s loop: where the epoch stands (:class:`EpochProgress`,
checkpointed), what its pass measured (:class:`EpochStats`, taken by an :class:`EpochMeter`), and the stage-timer
arithmetic over epochs (:func:`sum_epoch_timers`, :func:`overlap`, :func:`gpu_step_share`).

The meter never touches the model: the loop runs the training step itself and tells the meter when a step
starts and ends (CUDA events) and when the progress must be up to date (before a checkpoint or a caller's
``on_step``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from storage_kernels.packstore import Tier
from trainer.features import FeatureSource
from trainer.loader import BatchLoader

__all__ = [
    "CACHE_TIERS",
    "STAGE_BUSY_TIMERS",
    "EpochMeter",
    "EpochProgress",
    "EpochStats",
    "gpu_step_share",
    "overlap",
    "stage_ratios",
    "sum_epoch_timers",
]

CACHE_TIERS = (Tier.GPU.label, Tier.CPU.label)  # rows counted as cache hits

#: The pipeline's stages, by busy timer (``BatchLoader`` and the training loop).
STAGE_BUSY_TIMERS = ("load_busy_s", "assemble_busy_s", "compute_busy_s")


@dataclass
class EpochStats:
    """What one pass over the train batches measured (:meth:`EpochMeter.finish`)."""

    loss: float  # mean train loss over the batches
    train_acc: float  # accuracy over the labelled seeds, dropout on
    epoch_s: float  # wall time of the pass, up to the last step's completion
    bytes_read: int  # feature bytes the source read during the pass
    read_requests: int  # read requests the source issued during the pass
    rows: dict[str, int]  # rows served per tier label during the pass
    timers: dict[str, float]  # the loader's stage timers (seconds)

    @property
    def cache_hit_rate(self) -> float:
        """Fraction of the pass's rows served from the GPU/CPU caches (0.0 without rows)."""
        total = sum(self.rows.values())
        return sum(self.rows.get(k, 0) for k in CACHE_TIERS) / total if total else 0.0

    def metrics(self) -> dict[str, float]:
        """Flat per-epoch metrics for the tracker (validation accuracy is added by the caller)."""
        return {"loss": self.loss, "train_acc": self.train_acc, "epoch_s": self.epoch_s,
                "bytes_read": float(self.bytes_read), "read_requests": float(self.read_requests),
                "cache_hit_rate": self.cache_hit_rate, **self.timers, **stage_ratios(self.epoch_s, self.timers)}


def overlap(epoch_s: float, timers: dict[str, float]) -> float:
    """Epoch time over the slowest stage's busy time: 1.0 when the stages overlap perfectly, up to the number
    of stages when they run in turn (0.0 without busy times)."""
    slowest = max((timers.get(k, 0.0) for k in STAGE_BUSY_TIMERS), default=0.0)
    return epoch_s / slowest if slowest > 0 else 0.0


def sum_epoch_timers(per_epoch: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Several epochs' stage timers (each :attr:`EpochStats.timers` with its ``epoch_s``) as one set: ``train_s``
    the sum of the epochs' times, every other timer its sum, ``overlap`` and ``gpu_step_share`` recomputed from
    the sums (ratios do not add). ``TrainResult.epoch_timers[1:]`` gives the steady epochs' timers, without the
    first (cold) one, as a benchmark's epoch time leaves it out."""
    total: dict[str, float] = {"train_s": 0.0}
    for timers in per_epoch:
        for k, v in timers.items():
            key = "train_s" if k == "epoch_s" else k
            total[key] = total.get(key, 0.0) + float(v)
    total.update(stage_ratios(total["train_s"], total))
    return total


def stage_ratios(epoch_s: float, timers: dict[str, float]) -> dict[str, float]:
    """The ratios the timers of ``epoch_s`` seconds of training give: ``overlap`` and, on CUDA,
    ``gpu_step_share`` (of one epoch's timers, or of several epochs' sums: ratios are not summed)."""
    return {"overlap": overlap(epoch_s, timers), **gpu_step_share(epoch_s, timers)}


def gpu_step_share(epoch_s: float, timers: dict[str, float]) -> dict[str, float]:
    """``{"gpu_step_share": fraction}``: the share of the epoch the GPU had a training step in hand
    (``gpu_step_s``, the steps' spans on the compute stream, over ``epoch_s``). 1.0 means compute never waited
    for a batch. It is not the kernels' occupancy: a step's span includes the gaps between its kernels (with a
    small model the host's launches, not the GPU, set a step's pace), so it bounds the kernels' busy time from
    above. Empty off CUDA (no ``gpu_step_s``)."""
    if "gpu_step_s" not in timers or epoch_s <= 0:
        return {}
    return {"gpu_step_share": timers["gpu_step_s"] / epoch_s}


@dataclass
class EpochProgress:
    """The epoch in progress: batches finished and running sums, checkpointed so that an epoch resumed mid-way
    reports the same loss and accuracy as an uninterrupted one. The sums stay on the device (no host sync in
    the step loop)."""

    batch: int  # train batches of the epoch finished so far
    loss_sum: torch.Tensor  # () float32: summed batch losses
    correct: torch.Tensor  # () int64: correct labelled seeds
    seen: torch.Tensor  # () int64: labelled seeds
    bytes_read: int = 0  # feature bytes the source read for the epoch (includes batches read ahead)
    read_requests: int = 0  # read requests the source issued for the epoch (likewise)
    rows: dict[str, int] = field(default_factory=dict)  # rows served per tier label
    elapsed_s: float = 0.0  # wall time of the epoch's steps so far

    @classmethod
    def start(cls, device: torch.device) -> EpochProgress:
        """Nothing done yet."""
        return cls(0, torch.zeros((), device=device), torch.zeros((), dtype=torch.int64, device=device),
                   torch.zeros((), dtype=torch.int64, device=device))

    def count_batch(self, loss: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> None:
        """Add one finished training batch: its loss, and its predictions against the labels ``y`` (-1:
        unlabelled). Device tensors only: no host sync."""
        self.loss_sum += loss.detach()
        labelled = y >= 0
        self.correct += (logits.detach().argmax(dim=1) == y)[labelled].sum()
        self.seen += labelled.sum()
        self.batch += 1

    def to_dict(self) -> dict[str, Any]:
        """Checkpoint form (tensors and primitives)."""
        return {"batch": self.batch, "loss_sum": self.loss_sum, "correct": self.correct, "seen": self.seen,
                "bytes_read": self.bytes_read, "read_requests": self.read_requests, "rows": dict(self.rows),
                "elapsed_s": self.elapsed_s}

    @classmethod
    def from_dict(cls, d: dict[str, Any], device: torch.device) -> EpochProgress:
        """Inverse of :meth:`to_dict`, the sums moved to ``device``."""
        return cls(int(d["batch"]), d["loss_sum"].to(device), d["correct"].to(device), d["seen"].to(device),
                   int(d["bytes_read"]), int(d["read_requests"]), {k: int(v) for k, v in d["rows"].items()},
                   float(d["elapsed_s"]))


class EpochMeter:
    """Measures one pass over an epoch's train batches (the rest of the epoch in ``progress``), from its
    creation to :meth:`finish`: wall and CPU time, the source's I/O counters, and on CUDA each step's span on
    the compute stream (:meth:`step_started` / :meth:`step_finished`: events, no host sync; summed, the time
    the GPU had a step in hand, the rest of the pass it waited for batches)."""

    def __init__(self, source: FeatureSource, progress: EpochProgress, device: torch.device) -> None:
        self.source, self.progress = source, progress
        self.t0, self.cpu0 = time.perf_counter(), time.process_time()
        # the source's counters and the time when they were last folded into the progress
        self._mark = (source.bytes_read, source.read_requests, dict(source.rows_by_tier), self.t0)
        self._on_cuda = device.type == "cuda"
        self._steps_on_gpu: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def step_started(self) -> None:
        """A training step is about to launch its first kernel."""
        if self._on_cuda:
            self._steps_on_gpu.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
            self._steps_on_gpu[-1][0].record()

    def step_finished(self) -> None:
        """The training step has launched its last kernel (the optimizer's update)."""
        if self._on_cuda:
            self._steps_on_gpu[-1][1].record()

    def fold_counters(self) -> None:
        """Bring the progress up to date: the source's counters and the wall time since the last fold."""
        source, p, mark = self.source, self.progress, self._mark
        rows = source.rows_by_tier
        p.bytes_read += source.bytes_read - mark[0]
        p.read_requests += source.read_requests - mark[1]
        for k, v in rows.items():
            p.rows[k] = p.rows.get(k, 0) + v - mark[2].get(k, 0)
        now = time.perf_counter()
        p.elapsed_s += now - mark[3]
        self._mark = (source.bytes_read, source.read_requests, dict(rows), now)

    def finish(self, loader: BatchLoader, num_batches: int) -> EpochStats:
        """The epoch's stats once ``loader`` is exhausted (``num_batches``: the epoch's batches in all, a resumed
        one's included: the loss's denominator)."""
        p = self.progress
        loss_mean = p.loss_sum.item() / max(num_batches, 1)  # note: CPU-GPU sync point, waits for the last step
        self.fold_counters()
        pass_s = time.perf_counter() - self.t0  # this pass only (a resumed epoch's loader timed only this pass too)
        train_acc = p.correct.item() / max(p.seen.item(), 1)  # already synced above: no extra wait
        timers = dict(loader.timers)
        timers["compute_busy_s"] = max(pass_s - timers.get("wait_s", 0.0), 0.0)  # the consumer stage's work
        # CPU time of the whole process over the pass (every thread: torch's pool too, including its OpenMP
        # workers spinning between parallel regions), and what is left of it after the loader's stages: on a
        # machine with few cores the stages compete for them, and overlapping the stages cannot shorten the epoch
        timers["cpu_s"] = time.process_time() - self.cpu0
        timers["compute_cpu_s"] = max(timers["cpu_s"] - timers["load_cpu_s"] - timers["assemble_cpu_s"], 0.0)
        if self._on_cuda:  # every event has completed: the .item() above waited for the stream
            timers["gpu_step_s"] = sum(start.elapsed_time(end) for start, end in self._steps_on_gpu) / 1000.0
        return EpochStats(loss=loss_mean, train_acc=train_acc, epoch_s=p.elapsed_s, bytes_read=p.bytes_read,
                          read_requests=p.read_requests, rows=dict(p.rows), timers=timers)
