"""The compute side of ``policy=auto``'s cost model: seconds per training batch, measured on a few batches.

The configured model (``train.model`` and its sizes) trains ``probe_batches`` of the first sampled epoch's
training batches, their features gathered into memory first (so no policy's reads are timed), each batch once
at every candidate thread count, the counts interleaved (batch 1 at 2 then 1 threads, batch 2 at 1 then 2, ...)
so that a burst of other work on the machine slows every count alike instead of one; the median step
(forward, backward, Adam) after one warm-up step per count is the batch's compute time. It is the same for
every policy, so it decides how much of a policy's reading hides behind compute, and which thread count
trains fastest. After :data:`PROBE_SECONDS` of timed steps it stops early (wide features: a step can take
seconds), with at least 2 batches timed.

Issue 29 measured why: timing the counts one after the other, 3 batches each, a plan on ``demo`` found 1
thread within 5% of 2 (0.0512 against 0.0497 s) where six other plans on the same graph found 2 threads 25%
faster (0.040 against 0.053 s), and its run trained 22% slower on 1 thread.

The thread counts tried are those of the cores the run may use (:func:`usable_cores`): all of them, and one
fewer (leaving the loader a core) -- on a small graph the step is short and torch's threads cost more than
they give (issue 29 measured ``tiny`` at 0.25 s an epoch on 2 threads, 0.011 s on 1).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipelines.methods.policies.inputs import PlanInputs
from pipelines.methods.policies.reads import epoch_batches

__all__ = ["PROBE_SECONDS", "ComputeProbe", "probe_compute", "usable_cores"]

#: Timed steps stop after this many seconds (at least 2 batches timed at every thread count).
PROBE_SECONDS = 10.0


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota when one is set."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(cores, 1)


@dataclass(frozen=True)
class ComputeProbe:
    """Median seconds per training batch at each thread count tried, and the batches an epoch has."""

    seconds_per_batch: dict[int, float]
    batches_per_epoch: int
    probe_batches: int
    device: str

    @property
    def best_threads(self) -> int:
        """The thread count with the shortest step (ties: fewer threads)."""
        return min(self.seconds_per_batch, key=lambda t: (self.seconds_per_batch[t], t))

    def epoch_seconds(self, threads: int) -> float:
        """Compute time of one epoch at ``threads`` (the nearest thread count tried)."""
        tried = min(self.seconds_per_batch, key=lambda t: (abs(t - threads), t))
        return self.seconds_per_batch[tried] * self.batches_per_epoch

    def to_dict(self) -> dict[str, Any]:
        """The probe as a plan records it (``strata plan --explain`` prints it)."""
        return {"seconds_per_batch": {str(t): round(s, 6) for t, s in self.seconds_per_batch.items()},
                "batches_per_epoch": self.batches_per_epoch, "probe_batches": self.probe_batches,
                "device": self.device}


def _thread_counts(cores: int) -> list[int]:
    return sorted({cores, max(cores - 1, 1)})


def probe_compute(inputs: PlanInputs, probe_batches: int = 8, cores: int | None = None) -> ComputeProbe:
    """Time the configured model's training step on ``probe_batches`` batches at each thread count to try
    (interleaved: the module docstring)."""
    import torch

    from trainer.blocks import to_tensor_blocks
    from trainer.device import resolve_device
    from trainer.features.file import read_values
    from trainer.models import build_model, model_options

    graph, samples, tcfg = inputs.graph, inputs.samples, inputs.cfg.train
    batches = epoch_batches(inputs)
    device = resolve_device(tcfg.device)
    labels = np.asarray(graph.labels)
    in_dim = graph.value_dim or graph.feature_dim  # float16 files: the values' width, not the words'
    num_classes = int(labels.max()) + 1 if len(labels) else 1

    def load(b: int) -> tuple[torch.Tensor, list, torch.Tensor]:
        """One batch's inputs, gathered outside the timed step (and one at a time: wide features make a
        batch's rows hundreds of MB)."""
        batch = samples.batch(b)
        nodes = np.asarray(batch.nodes)
        if graph.features_path is not None:  # aligned block reads: a memory map's faults read ahead per row
            x = torch.from_numpy(read_values(graph.features_path, nodes, in_dim))
        else:
            x = torch.from_numpy(np.ascontiguousarray(graph.features[nodes], dtype=np.float32))
        y = torch.from_numpy(np.asarray(labels[np.asarray(batch.seeds)], dtype=np.int64))
        return x.to(device), to_tensor_blocks(batch.blocks(), device), y.to(device)

    before = torch.get_num_threads()
    counts = _thread_counts(cores or usable_cores())
    steps: dict[int, list[float]] = {t: [] for t in counts}
    torch.manual_seed(0)
    model = build_model(model=tcfg.model, in_dim=in_dim, hidden_dim=tcfg.hidden_dim, out_dim=num_classes,
                        num_layers=samples.num_layers, dropout=tcfg.dropout, **model_options(tcfg)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=tcfg.lr, weight_decay=tcfg.weight_decay)

    def step(x: torch.Tensor, blocks: list, y: torch.Tensor, threads: int) -> float:
        torch.set_num_threads(threads)
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x, blocks), y, ignore_index=-1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - start

    # one warm-up batch, then the timed ones; an epoch of fewer batches is cycled (Cora: one batch an epoch)
    probed = [batches[i % len(batches)] for i in range(probe_batches + 1)] if batches else []
    timed = 0.0
    try:
        for i, b in enumerate(probed):
            x, blocks, y = load(b)
            for threads in (counts if i % 2 else counts[::-1]):  # interleaved, the order alternating
                seconds = step(x, blocks, y, threads)
                if i:
                    steps[threads].append(seconds)
                    timed += seconds
            del x, blocks, y
            if i >= 2 and timed > PROBE_SECONDS:
                break
    finally:
        torch.set_num_threads(before)
    timings = {t: statistics.median(v) if v else 0.0 for t, v in steps.items()}
    return ComputeProbe(timings, len(batches), min((len(v) for v in steps.values()), default=0), device)
