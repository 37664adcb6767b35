"""The compute side of ``policy=auto``'s cost model: seconds per training batch, measured on a few batches.

The configured model (``train.model`` and its sizes) trains ``probe_batches`` of the first sampled epoch's
training batches, their features gathered into memory first (so no policy's reads are timed), once per
candidate thread count; the median step (forward, backward, Adam) after one warm-up step is the batch's
compute time. It is the same for every policy, so it decides how much of a policy's reading hides behind
compute, and which thread count trains fastest.

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

__all__ = ["ComputeProbe", "probe_compute", "usable_cores"]


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


def probe_compute(inputs: PlanInputs, probe_batches: int = 4, cores: int | None = None) -> ComputeProbe:
    """Time the configured model's training step on ``probe_batches`` batches at each thread count to try."""
    import torch

    from trainer.blocks import to_tensor_blocks
    from trainer.device import resolve_device
    from trainer.models import build_model, model_options

    graph, samples, tcfg = inputs.graph, inputs.samples, inputs.cfg.train
    batches = epoch_batches(inputs)
    device = resolve_device(tcfg.device)
    labels = np.asarray(graph.labels)
    num_classes = int(labels.max()) + 1 if len(labels) else 1

    def load(b: int) -> tuple[torch.Tensor, list, torch.Tensor]:
        """One batch's inputs, gathered outside the timed step (and one at a time: wide features make a
        batch's rows hundreds of MB)."""
        batch = samples.batch(b)
        x = torch.from_numpy(np.ascontiguousarray(graph.features[np.asarray(batch.nodes)], dtype=np.float32))
        y = torch.from_numpy(np.asarray(labels[np.asarray(batch.seeds)], dtype=np.int64))
        return x.to(device), to_tensor_blocks(batch.blocks(), device), y.to(device)

    probed = batches[: probe_batches + 1]  # one warm-up step, then the timed ones
    before = torch.get_num_threads()
    timings: dict[int, float] = {}
    try:
        for threads in _thread_counts(cores or usable_cores()):
            torch.set_num_threads(threads)
            torch.manual_seed(0)
            model = build_model(model=tcfg.model, in_dim=graph.feature_dim, hidden_dim=tcfg.hidden_dim,
                                out_dim=num_classes, num_layers=samples.num_layers, dropout=tcfg.dropout,
                                **model_options(tcfg)).to(device)
            opt = torch.optim.Adam(model.parameters(), lr=tcfg.lr, weight_decay=tcfg.weight_decay)
            steps = []
            for b in probed:
                x, blocks, y = load(b)
                start = time.perf_counter()
                loss = torch.nn.functional.cross_entropy(model(x, blocks), y, ignore_index=-1)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                steps.append(time.perf_counter() - start)
                del x, blocks, y, loss
            timed = steps[1:] or steps
            timings[threads] = statistics.median(timed) if timed else 0.0
            del model, opt
    finally:
        torch.set_num_threads(before)
    return ComputeProbe(timings, len(batches), max(len(probed) - 1, 0), device)
