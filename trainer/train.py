"""Train a registered model on offline-sampled batches through a feature source; evaluate; checkpoint.

``train(cfg, samples, source, labels)`` reads top to bottom as one story: setup (processes, device, checks),
data (classes, evaluation batches), model init (scratch or a warm start), optimizer and training state (fresh or
resumed from a checkpoint), the evaluation helper, then the training loop -- per epoch its batches, per batch
the step ("forward backward update") and the mid-epoch checkpoint; then "evaluate and early stopping", "timing
and logging", "checkpoint" -- and "termination" (best weights restored, test accuracy). What the loop measures
and counts lives in :mod:`trainer.epoch` (:class:`~trainer.epoch.EpochMeter`, :class:`EpochProgress`,
:class:`EpochStats`), the evaluation in :mod:`trainer.evaluation` (:class:`~trainer.evaluation.SplitEvaluator`).
One epoch is the train batches of sample epoch ``epoch % samples.epochs``, so training epochs beyond the sampled
ones reuse samples (DiskGNN cites sample reuse as harmless to accuracy).

Early stopping: at each evaluation, a validation accuracy above the best by more than ``cfg.min_delta`` is a
new best (its weights are copied to the host); when ``cfg.patience`` epochs passed since the best, training
stops. At the end the best weights are loaded back into the model and the test split is evaluated once.

Everything that changes while training and must survive a restart is one :class:`TrainState`, including the
position inside an epoch (:class:`EpochProgress`): with ``cfg.checkpoint_every`` a checkpoint is also written
every N steps, and a run resumed from it continues at the next batch and ends with the same weights as an
uninterrupted one (same seed, deterministic mode). Checkpoints are plain dicts of tensors and primitives
(``trainer.checkpoint``): nothing is ever unpickled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from storage_kernels.packstore import Tier
from trainer.batch import Samples, TrainHook
from trainer.checkpoint import CHECKPOINT_FORMAT, load_checkpoint, save_checkpoint
from trainer.config import TrainConfig
from trainer.device import resolve_device
from trainer.distributed import DistributedRun
from trainer.epoch import (
    CACHE_TIERS,
    STAGE_BUSY_TIMERS,
    EpochMeter,
    EpochProgress,
    EpochStats,
    gpu_step_share,
    overlap,
    sum_epoch_timers,
)
from trainer.evaluation import SplitEvaluator, eval_batch_ids, evaluate
from trainer.features import FeatureSource
from trainer.layerwise import LayerwiseGraph
from trainer.loader import BatchLoader
from trainer.models import GraphModel, build_model, model_options
from trainer.precision import autocast

__all__ = [
    "CHECKPOINT_FORMAT",
    "STAGE_BUSY_TIMERS",
    "EpochProgress",
    "EpochStats",
    "TrainResult",
    "TrainHook",
    "TrainSamples",
    "TrainState",
    "Tracker",
    "compute_threads",
    "eval_batch_ids",
    "evaluate",
    "gpu_step_share",
    "overlap",
    "load_checkpoint",
    "save_checkpoint",
    "sum_epoch_timers",
    "train",
    "train_batch_ids",
]

_HISTORY = ("losses", "train_acc", "val_accs", "epoch_s")  # per-epoch lists of a TrainState


class Tracker(Protocol):
    """What ``train`` logs to (``trainer.tracking.MlflowTracker`` implements it)."""

    def log_params(self, params: dict[str, Any]) -> None: ...

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...


class TrainSamples(Samples, Protocol):
    """What ``train`` reads of a sample set (``storage_kernels.sampleset.SampleSet``)."""

    @property
    def num_layers(self) -> int: ...

    @property
    def epochs(self) -> int: ...

    def batch_ids(self, split: str, epoch: int | None = None) -> list[int]: ...


@dataclass
class TrainResult:
    """Everything a run produced; ``best_state_dict`` is the CPU state at the best validation epoch."""

    losses: list[float]  # mean train loss per epoch
    train_acc: list[float]  # train accuracy per epoch (over the seeds, dropout on)
    val_accs: list[float]  # val accuracy per epoch (nan where not evaluated)
    val_acc: float  # best val accuracy
    test_acc: float  # test accuracy of the best weights (nan when validation never improved)
    best_epoch: int
    stopped_epoch: int  # the last epoch trained (early stopping or cfg.epochs - 1)
    early_stopped: bool  # whether patience ended the run before cfg.epochs
    epoch_s: list[float]  # train-loop wall time per epoch (evaluation excluded)
    bytes_read: int  # feature bytes read from disk by the training batches (evaluation excluded)
    read_requests: int  # read requests the training batches issued to the disk (evaluation excluded)
    cache_hit_rate: float  # fraction of training rows served from the GPU/CPU caches
    best_state_dict: dict[str, torch.Tensor]
    timers: dict[str, float]  # loader stages summed over epochs, plus eval_s and train_s
    model_args: dict[str, Any]  # the MODELS name under "model" + constructor arguments: build_model(**model_args)
    config: dict[str, Any] = field(default_factory=dict)
    rows_by_tier: dict[str, int] = field(default_factory=dict)  # training rows served per tier label
    # each epoch's stage timers (EpochStats.timers) and its epoch_s: sum_epoch_timers of a slice of them
    epoch_timers: list[dict[str, float]] = field(default_factory=list)


def _cpu_copy(model: GraphModel) -> dict[str, torch.Tensor]:
    # device -> host copy of the weights: a CPU-GPU sync point (callers do it only when validation improves)
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


@dataclass
class TrainState:
    """Everything that changes while training and must survive a restart (the checkpoint's content).

    The position is (``epoch`` + 1, ``progress.batch``): ``epoch`` is the last finished epoch (-1 before the
    first) and ``progress`` the one in progress; ``step`` counts optimizer steps over the run. ``best`` holds
    ``val_acc``, ``test_acc`` and ``epoch`` of the best validation so far and ``best_state`` its CPU weights;
    ``stopped_epoch`` is the epoch early stopping ended the run at (-1 while it runs). ``counters`` holds the
    finished epochs' ``bytes_read``, ``read_requests`` and ``rows`` per tier label; ``rng_state`` /
    ``cuda_rng_state`` the generators at the last checkpoint (dropout continues where it stopped).
    """

    model: GraphModel
    optimizer: torch.optim.Optimizer
    model_args: dict[str, Any]
    config: dict[str, Any]
    device: torch.device
    epoch: int = -1
    history: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in _HISTORY})
    best: dict[str, Any] = field(default_factory=lambda: {"val_acc": -1.0, "test_acc": float("nan"), "epoch": -1})
    best_state: dict[str, torch.Tensor] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=lambda: {
        "bytes_read": 0, "read_requests": 0, "rows": {t.label: 0 for t in Tier.readable()}})
    rng_state: torch.Tensor | None = None
    cuda_rng_state: torch.Tensor | None = None
    step: int = 0
    progress: EpochProgress | None = None
    stopped_epoch: int = -1

    def __post_init__(self) -> None:
        if not self.best_state:  # before any evaluation the best weights are the initial ones
            self.best_state = _cpu_copy(self.model)
        if self.progress is None:
            self.progress = EpochProgress.start(self.device)

    # ---------------------------------------------------------------------------------------- updates
    def record_epoch(self, epoch: int, stats: EpochStats, val_acc: float) -> None:
        """Append one epoch to the history and the I/O counters; ``epoch`` becomes the last finished one."""
        for key, value in zip(_HISTORY, (stats.loss, stats.train_acc, val_acc, stats.epoch_s), strict=True):
            self.history[key].append(value)
        self.counters["bytes_read"] += stats.bytes_read
        self.counters["read_requests"] += stats.read_requests
        for k, v in stats.rows.items():
            self.counters["rows"][k] = self.counters["rows"].get(k, 0) + v
        self.epoch = epoch
        self.progress = EpochProgress.start(self.device)

    def record_best(self, val_acc: float, test_acc: float, epoch: int) -> None:
        """A new best validation accuracy: remember it and copy the weights to the host."""
        self.best = {"val_acc": val_acc, "test_acc": test_acc, "epoch": epoch}
        self.best_state = _cpu_copy(self.model)

    def restore_best(self) -> None:
        """Load the best weights back into the model (the initial ones if validation never improved)."""
        self.model.load_state_dict(self.best_state)

    # ---------------------------------------------------------------------------------------- checkpoint
    def to_checkpoint(self) -> dict[str, Any]:
        """The checkpoint dict (``CHECKPOINT_FORMAT``); captures the random generators now."""
        self.rng_state = torch.get_rng_state()
        assert self.progress is not None
        ckpt: dict[str, Any] = {
            "format": CHECKPOINT_FORMAT, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
            "model_args": self.model_args, "config": self.config, "epoch": self.epoch, "history": self.history,
            "best": self.best, "best_state_dict": self.best_state, "counters": self.counters,
            "rng_state": self.rng_state, "step": self.step, "batch": self.progress.batch,
            "progress": self.progress.to_dict(), "early_stopping": {"stopped_epoch": self.stopped_epoch},
        }
        if self.device.type == "cuda":
            self.cuda_rng_state = torch.cuda.get_rng_state(self.device)
            ckpt["cuda_rng_state"] = self.cuda_rng_state
        return ckpt

    @classmethod
    def from_checkpoint(cls, ckpt: dict[str, Any], model: GraphModel, optimizer: torch.optim.Optimizer,
                        config: dict[str, Any], device: torch.device) -> TrainState:
        """The state a checkpoint saved, loaded into ``model`` and ``optimizer`` (built like the saved ones;
        the caller checks ``model_args``). The generators are not touched: see :meth:`restore_rng`."""
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        return cls(
            model=model, optimizer=optimizer, model_args=dict(ckpt["model_args"]), config=config, device=device,
            epoch=int(ckpt["epoch"]), step=int(ckpt["step"]),
            progress=EpochProgress.from_dict(ckpt["progress"], device),
            stopped_epoch=int(ckpt["early_stopping"]["stopped_epoch"]),
            history={k: list(v) for k, v in ckpt["history"].items()},
            best=dict(ckpt["best"]),
            best_state={k: v.cpu() for k, v in ckpt["best_state_dict"].items()},
            counters={"bytes_read": int(ckpt["counters"]["bytes_read"]),
                      "read_requests": int(ckpt["counters"].get("read_requests", 0)),
                      "rows": dict(ckpt["counters"]["rows"])},
            rng_state=ckpt["rng_state"].cpu(),
            cuda_rng_state=ckpt["cuda_rng_state"].cpu() if "cuda_rng_state" in ckpt else None,
        )

    def restore_rng(self) -> None:
        """Set the process's generators to the saved ones (no-op for a state that never checkpointed)."""
        if self.rng_state is not None:
            torch.set_rng_state(self.rng_state)
        if self.device.type == "cuda" and self.cuda_rng_state is not None:
            torch.cuda.set_rng_state(self.cuda_rng_state, self.device)

    def result(self, timers: dict[str, float], max_epochs: int,
               epoch_timers: Sequence[dict[str, float]] = ()) -> TrainResult:
        """The run's :class:`TrainResult` (``max_epochs``: the configured epochs; ``epoch_timers``: each epoch's
        stage timers)."""
        rows = self.counters["rows"]
        total = sum(rows.values())
        return TrainResult(
            losses=self.history["losses"], train_acc=self.history["train_acc"], val_accs=self.history["val_accs"],
            val_acc=self.best["val_acc"], test_acc=self.best["test_acc"], best_epoch=self.best["epoch"],
            stopped_epoch=self.epoch, early_stopped=0 <= self.stopped_epoch < max_epochs - 1,
            epoch_s=self.history["epoch_s"], bytes_read=self.counters["bytes_read"],
            read_requests=self.counters["read_requests"],
            cache_hit_rate=sum(rows.get(k, 0) for k in CACHE_TIERS) / total if total else 0.0,
            best_state_dict=self.best_state, timers=timers, model_args=self.model_args, config=self.config,
            rows_by_tier=dict(rows), epoch_timers=list(epoch_timers),
        )


def compute_threads(num_threads: int, device: torch.device, sequential: bool, source: FeatureSource) -> int:
    """torch's intra-op threads while training: ``num_threads`` when set (> 0: the user's, or the pipeline's
    plan's choice from a probe, ``pipelines.methods.policies.auto.threads``); else, on the CPU with the
    pipelined loader over a source that reads the disk, one fewer than torch's own (at least 1), so that the
    loader's I/O and gathers have a core instead of preempting compute's threads; else torch's own.

    Measured on 2 vCPUs (BENCHMARKS): ``diskgnn`` on ``demo`` 11% faster an epoch with 1 thread than with
    torch's 2; at 11M nodes the same within noise; ``in_memory`` (no disk) is 17% slower with 1, so it keeps
    torch's."""
    if num_threads > 0:
        return num_threads
    cores = torch.get_num_threads()
    if device.type == "cpu" and not sequential and any(t.reads_disk for t in source.tiers):
        return max(cores - 1, 1)
    return cores


@contextlib.contextmanager
def _torch_modes(deterministic: bool, num_threads: int) -> Iterator[None]:
    """Process-wide torch settings for the block (deterministic algorithms, intra-op threads), then the
    previous ones."""
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.get_num_threads())
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS determinism on CUDA
        torch.use_deterministic_algorithms(True, warn_only=True)
    if num_threads:
        torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.set_num_threads(before[2])


def _check_inputs(cfg: TrainConfig, samples: TrainSamples, labels: np.ndarray) -> np.ndarray:
    """``labels`` as an array, once they, the config's layer count and the sampled epochs are checked."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.dtype.kind != "i":
        raise ValueError(f"'labels' expected a 1-D signed integer array (got {labels.dtype} {labels.shape})")
    if cfg.num_layers and cfg.num_layers != samples.num_layers:
        raise ValueError(f"'TrainConfig.num_layers' expected {samples.num_layers} (the sampled hops) "
                         f"(got {cfg.num_layers})")
    if samples.epochs < 1:
        raise ValueError(f"'samples' expected at least one sampled train epoch (got {samples.epochs})")
    return labels


def _resumed_state(path: str, model: GraphModel, optimizer: torch.optim.Optimizer, model_args: dict[str, Any],
                   config: dict[str, Any], device: torch.device) -> TrainState:
    """The training state the checkpoint at ``path`` saved, loaded into ``model`` and ``optimizer`` (which must
    be built as its ``model_args`` say), with the random generators set to the saved ones."""
    ckpt = load_checkpoint(path, map_location=device)
    if ckpt["model_args"] != model_args:
        raise ValueError(f"'{path}' expected model_args {model_args} (got {ckpt['model_args']})")
    state = TrainState.from_checkpoint(ckpt, model, optimizer, config, device)
    state.restore_rng()  # dropout continues where it stopped
    return state


def train_batch_ids(samples: TrainSamples, hook: TrainHook | None, epoch: int) -> list[int]:
    """The train batches of ``epoch``: those of sample epoch ``epoch % samples.epochs``, or the ``hook``'s own
    where it lists them (a policy that re-batches the seeds: ``mariusgnn``)."""
    train_ids = samples.batch_ids("train", epoch % samples.epochs)
    own = hook.batch_ids(epoch % samples.epochs) if hook is not None else None
    if own is not None:
        train_ids = own
    if not train_ids:
        raise ValueError(f"'samples' expected train batches for sample epoch {epoch % samples.epochs} (got none)")
    return train_ids


def train(
    cfg: TrainConfig,
    samples: TrainSamples,
    source: FeatureSource,
    labels: np.ndarray,
    eval_source: FeatureSource | None = None,
    tracker: Tracker | None = None,
    progress: Callable[[int, dict[str, float]], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    init: Callable[[GraphModel, dict[str, Any]], None] | None = None,
    layerwise: LayerwiseGraph | None = None,
) -> TrainResult:
    """Train ``cfg.model`` for at most ``cfg.epochs`` epochs (early stopping after ``cfg.patience`` epochs
    without a better validation accuracy) and return losses, accuracies, timings and the best weights.

    ``samples`` is a ``SampleSet``; ``source`` a feature source (``trainer.features``) for the train
    batches and ``eval_source`` (default ``source``) for the val/test batches; ``labels`` signed integers (N,),
    int64 or narrower (int8 holds up to 127 classes: 1 byte a node at 100M nodes).
    ``tracker.log_params`` gets the flat config, ``tracker.log_metrics`` the per-epoch metrics;
    ``progress(epoch, metrics)`` is called after each epoch, ``on_step(epoch, batch)`` after each training
    step (``batch`` steps of ``epoch`` done) and after the checkpoint that step may write. ``init(model,
    model_args)`` may set the freshly built model's weights before the optimizer sees them (a warm start,
    ``pipelines.tracking.warmstart``; ``cfg.resume`` still wins). With ``cfg.eval_mode="layerwise"``, validation and
    test accuracy come from full-neighbourhood layer-wise inference over ``layerwise`` (the full graph,
    ``trainer.layerwise``) instead of the sampled eval batches. Under torchrun (or
    ``cfg.distributed``) every rank calls this and trains its share of the batches data parallel
    (``trainer.distributed``); only rank 0 logs and checkpoints.
    """
    # ------------------------------------------------------------------ setup: processes, device, checks
    if cfg.checkpoint_every and not cfg.checkpoint_path:
        raise ValueError(f"'TrainConfig.checkpoint_every' expected a checkpoint_path to write to "
                         f"(got checkpoint_every={cfg.checkpoint_every} and checkpoint_path='')")
    ddp = DistributedRun.start(cfg.distributed, resolve_device(cfg.device))  # None: a single process
    device = ddp.device if ddp else torch.device(resolve_device(cfg.device))
    if ddp and source.train_hook is not None:
        ddp.close()  # a policy's split forward and cache are per process: they do not go through DDP
        raise ValueError(f"'train.distributed' expected a policy without a train hook (got "
                         f"{type(source.train_hook).__name__})")
    if ddp and not ddp.is_main:  # only rank 0 logs and writes checkpoints
        tracker, cfg = None, dataclasses.replace(cfg, checkpoint_path="")
    labels = _check_inputs(cfg, samples, labels)
    autocast(device, cfg.autocast)  # refused here, before any work, where the device cannot run it
    if cfg.eval_mode == "layerwise" and (layerwise is None or ddp):
        if ddp:
            ddp.close()
        raise ValueError("'train.eval_mode' layerwise expected the full graph (a LayerwiseGraph) and a single "
                         f"process (got layerwise={type(layerwise).__name__}, distributed={ddp is not None})")

    # ------------------------------------------------------------------ data: classes, evaluation batches
    eval_source = source if eval_source is None else eval_source
    num_classes = cfg.num_classes or int(labels.max()) + 1
    eval_ids = {split: eval_batch_ids(samples, split) for split in ("val", "test")}

    # ------------------------------------------------------------------ model init (scratch or warm start)
    torch.manual_seed(cfg.seed)  # the initial weights, then every dropout mask
    model_args = {"model": cfg.model, "in_dim": int(source.feature_dim), "hidden_dim": cfg.hidden_dim,
                  "out_dim": num_classes, "num_layers": samples.num_layers, "dropout": cfg.dropout,
                  **model_options(cfg)}  # the settings the model reads beyond these (gat: heads)
    model = build_model(**model_args).to(device)
    if init is not None:  # before the optimizer and the initial best-weights copy
        init(model, model_args)

    # ------------------------------------------------------------------ optimizer, training state (fresh or resumed)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.resume:  # weights, optimizer, position, history, best weights and generators from the checkpoint
        state = _resumed_state(cfg.resume, model, optimizer, model_args, cfg.to_dict(), device)
    else:
        state = TrainState(model, optimizer, model_args, cfg.to_dict(), device)
    if ddp:
        state.model = ddp.wrap(model)  # trains through DDP; evaluation and state_dict use the plain model
    if tracker is not None:  # the resolved layer and class counts, not the config's 0 ("from the data")
        tracker.log_params({**cfg.to_dict(), "num_layers": samples.num_layers, "num_classes": num_classes})

    # ------------------------------------------------------------------ evaluation helper
    evaluator = SplitEvaluator(model, samples, eval_source, eval_ids, labels, device, cfg, layerwise, ddp)
    # layer-wise, the last epoch's val and test share one pass; its test accuracy counts if its weights are best
    final_test: tuple[int, float] | None = None

    # ------------------------------------------------------------------ training loop
    threads = compute_threads(cfg.num_threads, device, cfg.sequential, source)
    timers: dict[str, float] = {"eval_s": 0.0, "compute_threads": float(threads)}
    epoch_timers: list[dict[str, float]] = []  # this run's epochs (a resumed run: those after the checkpoint)
    after_each_step = bool(cfg.checkpoint_every) or on_step is not None  # a checkpoint or a caller may look
    with _torch_modes(cfg.deterministic, threads):
        epoch = state.epoch + 1
        while epoch < cfg.epochs and state.stopped_epoch < 0:
            # the epoch's batches, from the checkpointed batch when resuming mid-epoch
            hook: TrainHook | None = source.train_hook  # a policy's own topology and forward
            train_ids = train_batch_ids(samples, hook, epoch)
            if ddp:
                train_ids = ddp.shard(train_ids)  # this rank's share, as many as every other rank's
            p = state.progress  # the epoch's position and running sums
            assert p is not None
            # a step is over (backward freed what it saved) before the next batch is asked for: the loader may
            # then reuse the batch's staging block
            loader = BatchLoader(hook.samples if hook else samples, source, train_ids[p.batch:], labels,
                                 cfg.prefetch, device, cfg.sequential, release_batches=True,
                                 max_bytes=(cfg.loader_memory_mb << 20) or None)
            meter = EpochMeter(source, p, device)  # times the pass and counts its I/O from here
            state.model.train()
            for lb in loader:
                # forward backward update
                meter.step_started()
                with autocast(device, cfg.autocast):  # train.autocast: the forward only
                    logits = hook.forward(state.model, lb) if hook else state.model(lb.x, lb.blocks)  # (seeds, C)
                    loss = F.cross_entropy(logits, lb.y, ignore_index=-1)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                meter.step_finished()
                p.count_batch(loss, logits, lb.y)  # running sums stay on the device: no host sync
                state.step += 1

                # mid-epoch checkpoint (the epoch's last batch is checkpointed below), then the caller's on_step
                if after_each_step:
                    meter.fold_counters()  # the progress up to date: a checkpoint here resumes at the next batch
                    if cfg.checkpoint_every and state.step % cfg.checkpoint_every == 0 and p.batch < len(train_ids):
                        save_checkpoint(cfg.checkpoint_path, state.to_checkpoint())
                    if on_step is not None:
                        on_step(epoch, p.batch)
            stats = meter.finish(loader, len(train_ids))
            if ddp:
                stats = ddp.reduce_stats(stats, model)  # every rank reports the same numbers

            # evaluate and early stopping
            val_acc = float("nan")
            if (epoch + 1) % cfg.eval_every == 0 or epoch == cfg.epochs - 1:
                t0 = time.perf_counter()
                shared = cfg.eval_mode == "layerwise" and epoch == cfg.epochs - 1
                accs = evaluator.accuracies("val", "test") if shared else evaluator.accuracies("val")
                val_acc = accs["val"]
                if shared:
                    final_test = (epoch, accs["test"])
                if val_acc > state.best["val_acc"] + cfg.min_delta:
                    state.record_best(val_acc, float("nan"), epoch)  # test: once, for the final best weights
                if cfg.patience and not math.isnan(val_acc) and epoch - state.best["epoch"] >= cfg.patience:
                    state.stopped_epoch = epoch
                timers["eval_s"] += time.perf_counter() - t0

            # timing and logging
            state.record_epoch(epoch, stats, val_acc)
            epoch_timers.append({**stats.timers, "epoch_s": stats.epoch_s})
            metrics = stats.metrics()
            if not math.isnan(val_acc):
                metrics["val_acc"] = val_acc
            if tracker is not None:
                tracker.log_metrics(metrics, step=epoch)
            if progress is not None:
                progress(epoch, metrics)

            # checkpoint
            if cfg.checkpoint_path:
                save_checkpoint(cfg.checkpoint_path, state.to_checkpoint())
            epoch += 1

        # -------------------------------------------------------------- termination: best weights, test split
        state.restore_best()
        if final_test is not None and final_test[0] == state.best["epoch"]:
            state.best["test_acc"] = final_test[1]  # the restored weights are the ones it was computed with
        elif state.best["epoch"] >= 0:
            t0 = time.perf_counter()
            state.best["test_acc"] = evaluator.accuracies("test")["test"]
            timers["eval_s"] += time.perf_counter() - t0
    if ddp:
        ddp.close()
    timers.update(sum_epoch_timers(epoch_timers))  # the stages over the run's epochs, train_s, overlap
    return state.result(timers, cfg.epochs, epoch_timers)
