"""The compute threads of a run whose policy is forced, chosen as ``policy=auto`` chooses its own.

A forced policy's plan probes the model's step (:mod:`.probe`: all the cores the run may use, and one fewer) and
records the threads :func:`~pipelines.methods.policies.auto.cost.threads_for` gives it, whether its training
reads the disk (``Policy.training_reads_disk``), in the plan's ``threads`` statistic; the train stage (and
``strata bench``) run at them (:func:`pipelines.methods.policies.auto.resolved`). So no policy's epoch, and no
ratio to ``in_memory``'s, rests on a thread rule measured on another machine (issue 29: leaving the loader a
core cost ``diskgnn`` 14% an epoch on ``demo`` and 53% with wide features on a 2-core VM, where it had saved 11%
on another). ``train.num_threads`` set by the user wins, and ``train.task=link`` (which trains on edges, not the
probed batches) keeps the trainer's own rule (:func:`trainer.train.compute_threads`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipelines.methods.policies.auto.cost import threads_for
from pipelines.methods.policies.auto.probe import probe_compute, usable_cores

if TYPE_CHECKING:
    from pipelines.methods.policies.base import Policy
    from pipelines.methods.policies.inputs import PlanInputs, TierPlan

__all__ = ["THREADS_STAT", "thread_choice"]

#: The plan statistic that holds a forced policy's thread choice.
THREADS_STAT = "threads"


def thread_choice(inputs: PlanInputs, policy: Policy, plan: TierPlan) -> dict[str, Any] | None:
    """The compute threads ``policy`` trains at under its ``plan`` of ``inputs``, with the probe and the reason
    (the plan's :data:`THREADS_STAT` statistic); None when the user set ``train.num_threads`` or the task is
    link prediction."""
    cfg = inputs.cfg
    if cfg.train.num_threads != 0 or cfg.train.task != "node":
        return None
    probe = probe_compute(inputs, cfg.plan.auto_probe_batches, cores=usable_cores())
    reads_disk = policy.training_reads_disk(plan)
    threads = threads_for(reads_disk, probe)
    if reads_disk and threads < probe.best_threads:
        how = "training reads the disk and one thread fewer is within 5% in the probe: the loader gets a core"
    elif reads_disk:
        how = "training reads the disk, but fewer threads are slower in the probe"
    else:
        how = "training reads no disk: the probe's fastest"
    return {"train.num_threads": threads, "reads_disk": reads_disk, "how": how, "compute": probe.to_dict()}
