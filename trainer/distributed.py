"""Distributed data parallel training: one process per rank, launched by ``torchrun``.

:func:`trainer.train.train` asks :meth:`DistributedRun.start` whether this process is one rank of several:
it is when ``torchrun`` set ``RANK`` / ``WORLD_SIZE`` in the environment, or when ``train.distributed`` is
true (a single process then forms a world of one). A rank then

- trains the :class:`~torch.nn.parallel.DistributedDataParallel` wrapper of the model (gradients are
  averaged over the ranks in every step, so every rank keeps identical weights);
- takes batch ``i`` of each epoch's train list when ``i % world_size == rank`` (:func:`shard_batches`), the
  same number on every rank: the last ``len % world_size`` batches of an epoch are dropped, so no rank waits
  in a gradient all-reduce that another never starts;
- evaluates its share of the val/test batches with the plain model and all-reduces the correct and
  labelled counts (:meth:`DistributedRun.evaluate`), so every rank sees the same accuracy and takes the same
  decisions (best epoch, stopping);
- reports epoch statistics reduced over the ranks (:meth:`DistributedRun.reduce_stats`): loss and train
  accuracy averaged, bytes / read requests / rows summed, times the slowest rank's, plus
  ``rank_param_spread``, the largest difference of any weight from rank 0's (0.0 when in sync).

Only rank 0 writes checkpoints, artifacts and MLflow records (``train`` drops the others' tracker and
checkpoint path). The process group uses NCCL on CUDA (device ``cuda:LOCAL_RANK``) and gloo on the CPU.

With ``N`` ranks one optimizer step consumes ``N`` batches (their mean gradient): the effective batch is
``N`` times the sampled one and an epoch has ``N`` times fewer steps.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainer.loader import BatchLoader

__all__ = ["DistributedEpochStats", "DistributedRun", "launched_by_torchrun", "shard_batches"]

_LAUNCH_ENV = ("RANK", "WORLD_SIZE")  # set by torchrun (and torch.distributed.launch) for every worker


def launched_by_torchrun() -> bool:
    """Whether this process was started as one rank of a ``torchrun`` job (``RANK`` and ``WORLD_SIZE`` set)."""
    return all(k in os.environ for k in _LAUNCH_ENV)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"'{name}' expected an integer in the environment (got {value!r})") from None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shard_batches(batch_ids: Sequence[int], rank: int, world_size: int) -> list[int]:
    """This rank's train batches: ``batch_ids[i]`` for ``i % world_size == rank``, truncated to
    ``len(batch_ids) // world_size`` per rank (the remainder is dropped: every rank takes as many steps).

    >>> shard_batches([10, 11, 12, 13, 14], 1, 2)
    [11, 13]
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"'rank' expected 0 <= rank < {world_size} (got {rank})")
    per_rank = len(batch_ids) // world_size
    if per_rank == 0:
        raise ValueError(f"'samples' expected at least {world_size} train batches per epoch for {world_size} "
                         f"ranks (got {len(batch_ids)})")
    return [int(b) for b in batch_ids[rank : per_rank * world_size : world_size]]


class _TransparentDDP(DistributedDataParallel):
    """DDP whose ``state_dict`` / ``load_state_dict`` are the wrapped model's (no ``module.`` prefix), so
    checkpoints and best weights are the same files as a single process writes."""

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)


@dataclass
class DistributedEpochStats:
    """An :class:`~trainer.train.EpochStats` reduced over the ranks, plus the ranks' weight spread."""

    base: Any  # the reduced EpochStats (every field the same on every rank)
    rank_param_spread: float  # max |w - w_rank0| over every weight and rank (0.0 when the ranks are in sync)

    def __getattr__(self, name: str) -> Any:  # loss, train_acc, epoch_s, bytes_read, ... of the reduced stats
        if name == "base":  # not yet set (copy/unpickle): no recursion
            raise AttributeError(name)
        return getattr(self.base, name)

    def metrics(self) -> dict[str, float]:
        """The reduced stats' metrics and ``rank_param_spread``."""
        return {**self.base.metrics(), "rank_param_spread": self.rank_param_spread}


@dataclass
class DistributedRun:
    """This process's place in a data parallel job and the collectives ``train`` needs."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_group: bool  # True when start() created the process group (close() then destroys it)

    @classmethod
    def start(cls, requested: bool, device: str) -> DistributedRun | None:
        """Join (or form) the process group when launched by torchrun or ``requested``; None otherwise.

        ``device`` is the resolved ``train.device``: ``cuda`` becomes ``cuda:LOCAL_RANK`` (the NCCL
        backend), ``cpu`` uses gloo. An already initialised group (a caller that set it up) is reused and
        left open by :meth:`close`.
        """
        if not (requested or launched_by_torchrun()):
            return None
        owns = not dist.is_initialized()
        if owns:
            rank, world = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)
        else:
            rank, world = dist.get_rank(), dist.get_world_size()
        local_rank = _env_int("LOCAL_RANK", rank)
        dev = torch.device(device)
        if dev.type == "cuda":
            if dev.index is None or world > 1:  # one GPU per rank on its node
                dev = torch.device("cuda", local_rank)
            torch.cuda.set_device(dev)
        if owns:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            if "MASTER_PORT" not in os.environ:
                if world > 1:
                    raise ValueError("'MASTER_PORT' expected in the environment for a multi-rank job (got none; "
                                     "launch with torchrun)")
                os.environ["MASTER_PORT"] = str(_free_port())  # a world of one: any free port
            dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=rank, world_size=world)
        return cls(rank=rank, world_size=world, local_rank=local_rank, device=dev, owns_group=owns)

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that logs, checkpoints and writes artifacts."""
        return self.rank == 0

    def wrap(self, model: nn.Module) -> nn.Module:
        """``model`` (already on :attr:`device`, identical or not across ranks: DDP broadcasts rank 0's weights)
        wrapped for gradient averaging; its ``state_dict`` is the model's."""
        if self.device.type == "cuda":
            return _TransparentDDP(model, device_ids=[self.device.index], output_device=self.device.index)
        return _TransparentDDP(model)

    def shard(self, batch_ids: Sequence[int]) -> list[int]:
        """This rank's train batches of an epoch (:func:`shard_batches`)."""
        return shard_batches(batch_ids, self.rank, self.world_size)

    def shard_eval(self, batch_ids: Sequence[int]) -> list[int]:
        """This rank's evaluation batches: every ``world_size``-th from ``rank`` (counts may differ: evaluation
        has no collective until the final count)."""
        return [int(b) for b in batch_ids[self.rank :: self.world_size]]

    @torch.no_grad()
    def evaluate(self, model: nn.Module, loader: BatchLoader) -> float:
        """Accuracy over the labelled seeds of every rank's ``loader`` (each rank passes its
        :meth:`shard_eval` batches and the plain, unwrapped model); nan when no seed is labelled."""
        model.eval()
        counts = torch.zeros(2, dtype=torch.int64, device=self.device)  # correct, labelled
        for lb in loader:
            pred = model(lb.x, lb.blocks).argmax(dim=1)  # (num_seeds,)
            labelled = lb.y >= 0
            counts[0] += (pred == lb.y)[labelled].sum()
            counts[1] += labelled.sum()
        model.train()
        dist.all_reduce(counts)
        correct, total = counts.tolist()
        return correct / total if total else float("nan")

    def reduce_stats(self, stats: Any, model: nn.Module) -> DistributedEpochStats:
        """One epoch's :class:`~trainer.train.EpochStats` over every rank: loss and train accuracy averaged
        (each rank ran as many batches), bytes, read requests and rows summed, ``epoch_s`` and the timers the
        largest; plus the weight spread of ``model`` across the ranks."""
        tiers = sorted(stats.rows)
        sums = torch.tensor([stats.loss, stats.train_acc, stats.bytes_read, stats.read_requests,
                             *(stats.rows[k] for k in tiers)], dtype=torch.float64, device=self.device)
        timer_keys = sorted(stats.timers)
        maxes = torch.tensor([stats.epoch_s, *(stats.timers[k] for k in timer_keys)], dtype=torch.float64,
                             device=self.device)
        dist.all_reduce(sums)
        dist.all_reduce(maxes, op=dist.ReduceOp.MAX)
        s, m = sums.tolist(), maxes.tolist()
        reduced = dataclasses.replace(
            stats, loss=s[0] / self.world_size, train_acc=s[1] / self.world_size, bytes_read=int(s[2]),
            read_requests=int(s[3]), rows={k: int(v) for k, v in zip(tiers, s[4:], strict=True)},
            epoch_s=m[0], timers=dict(zip(timer_keys, m[1:], strict=True)))
        return DistributedEpochStats(reduced, self.param_spread(model))

    def param_spread(self, model: nn.Module) -> float:
        """The largest absolute difference between any weight of ``model`` and rank 0's, over every rank."""
        flat = torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])
        ref = flat.clone()
        dist.broadcast(ref, src=0)
        spread = (flat - ref).abs().max().reshape(1) if flat.numel() else torch.zeros(1, device=flat.device)
        dist.all_reduce(spread, op=dist.ReduceOp.MAX)
        return float(spread.item())

    def close(self) -> None:
        """Destroy the process group if :meth:`start` created it."""
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
