"""``policy=auto``'s cost model: a predicted epoch time for every candidate policy, and the choice.

For a candidate with reads ``R`` (bytes ``B``, requests ``Q`` at queue depth ``d``; its ``predict_reads``) on a
disk of sequential bandwidth ``W`` and random-read rate ``I(d)`` (:mod:`pipelines.core.disk_profile`):

    io      = max(B / W, Q / I(d))          the reads are bandwidth- or request-bound, whichever is slower
    compute = probe seconds per batch x batches per epoch, at the candidate's threads
    epoch   = max(io, compute) + min(io, compute) / batches
                                            the loader reads batch i+1 while batch i trains; the first
                                            batch's read (or the last batch's step) is not hidden

A candidate that reads the disk trains on one core fewer than the run may use when that is not slower in the
probe (the loader's reads and gathers get a core); one that does not (``in_memory``) takes the probe's best.
A candidate whose resident buffers (``Policy.resident_bytes``) exceed the memory the run may use is refused,
with the reason; the choice is the least predicted epoch among the rest (ties within ``TIE`` go to fewer
bytes read, then to the order of :data:`PREFERENCE`, then -- between settings of one policy -- to less memory).
The order before the memory: the dynamic caches' models are the least exact (at 10M nodes ``ginex`` and
``hyperbatch`` tied ``diskgnn``'s 1.09 s, measured 3.7 and 5.2 s against its 1.2 s, and won on memory).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pipelines.core.disk_profile import DiskProfile
from pipelines.methods.policies.auto.probe import ComputeProbe
from pipelines.methods.policies.reads import EpochReads

__all__ = ["PREFERENCE", "TIE", "Candidate", "choose", "epoch_seconds", "pipelined", "threads_for"]

#: Predicted epochs within this fraction of each other are a tie.
TIE = 0.05
#: Tie order: the simplest machinery first.
PREFERENCE = ("in_memory", "diskgnn", "ginex", "hyperbatch", "naive", "mariusgnn", "outre", "mmap")


@dataclass
class Candidate:
    """One policy as ``auto`` sees it: its predicted reads and epoch, the memory it holds, and whether (and
    why not) it may be chosen."""

    policy: str
    settings: dict[str, Any] = field(default_factory=dict)
    resident_bytes: int = 0
    reads: EpochReads | None = None
    threads: int = 0
    io_s: float = 0.0
    compute_s: float = 0.0
    epoch_s: float = float("inf")
    refused: str = ""
    #: Seconds ``auto`` spent planning this candidate and predicting its reads.
    plan_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["reads"] = asdict(self.reads) if self.reads is not None else None
        out["epoch_s"] = None if self.epoch_s == float("inf") else round(self.epoch_s, 6)
        out["io_s"], out["compute_s"] = round(self.io_s, 6), round(self.compute_s, 6)
        out["plan_s"] = round(self.plan_s, 3)
        return out


def threads_for(reads_disk: bool, probe: ComputeProbe) -> int:
    """The compute threads of a policy: the probe's best, or for one whose training reads the disk the most
    that leave the loader a core unless that is slower in the probe (by more than :data:`TIE`)."""
    best = probe.best_threads
    if not reads_disk:
        return best
    fewer = [t for t in probe.seconds_per_batch if t < max(probe.seconds_per_batch)]
    if not fewer:
        return best
    spare = max(fewer)
    return spare if probe.seconds_per_batch[spare] <= probe.seconds_per_batch[best] * (1 + TIE) else best


def epoch_seconds(reads: EpochReads, disk: DiskProfile, probe: ComputeProbe, threads: int) -> tuple[float, float]:
    """``(io_s, compute_s)`` of one epoch (the module docstring's model)."""
    iops = disk.random_iops if reads.queue_depth > 1 else disk.random_iops_qd1
    io = max(reads.bytes / max(disk.seq_read_bytes_s, 1.0), reads.requests / max(iops, 1.0)) if reads.bytes else 0.0
    return io, probe.epoch_seconds(threads)


def pipelined(io_s: float, compute_s: float, batches: int) -> float:
    """An epoch of ``batches`` whose reads (``io_s`` in all) overlap the steps (``compute_s``) of the batches
    before them: the longer of the two, plus one batch's share of the shorter (the pipeline's fill)."""
    return max(io_s, compute_s) + min(io_s, compute_s) / max(batches, 1)


def _rank(c: Candidate) -> tuple[float, int, int, int]:
    order = PREFERENCE.index(c.policy) if c.policy in PREFERENCE else len(PREFERENCE)
    return (c.epoch_s, c.reads.bytes if c.reads else 0, order, c.resident_bytes)


def choose(candidates: list[Candidate]) -> Candidate:
    """The candidate with the least predicted epoch among those not refused (module docstring for ties).
    ``ValueError`` listing every refusal when none is left."""
    allowed = [c for c in candidates if not c.refused]
    if not allowed:
        reasons = "; ".join(f"{c.policy}: {c.refused}" for c in candidates)
        raise ValueError(f"'policy' auto expected a candidate policy that fits (got none: {reasons})")
    fastest = min(c.epoch_s for c in allowed)
    close = [c for c in allowed if c.epoch_s <= fastest * (1 + TIE) + 1e-9]
    return min(close, key=lambda c: _rank(c)[1:])
