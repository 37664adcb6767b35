"""Train GraphSAGE on offline-sampled batches through a feature source; evaluate; checkpoint.

``train(cfg, samples, source, labels)`` reads top to bottom by phase: setup, model init (scratch or resume),
optimizer, evaluation helper, then the epoch loop ("forward backward update", "evaluate", "timing and
logging", "checkpoint"). One epoch is the train batches of sample epoch ``epoch % samples.epochs``, so
training epochs beyond the sampled ones reuse samples (DiskGNN cites sample reuse as harmless to accuracy).

Checkpoints are plain dicts of tensors and primitives written with ``torch.save`` and read back with
``torch.load(weights_only=True)``: nothing is ever unpickled.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from trainer.config import TrainConfig
from trainer.device import resolve_device
from trainer.loader import BatchLoader
from trainer.models import build_model

__all__ = ["CHECKPOINT_FORMAT", "TrainResult", "Tracker", "eval_batch_ids", "load_checkpoint", "train"]

CHECKPOINT_FORMAT = "strata-checkpoint-v1"


class Tracker(Protocol):
    """What ``train`` logs to (``trainer.tracking.MlflowTracker`` implements it)."""

    def log_params(self, params: dict[str, Any]) -> None: ...

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...


@dataclass
class TrainResult:
    """Everything a run produced; ``best_state_dict`` is the CPU state at the best validation epoch."""

    losses: list[float]  # mean train loss per epoch
    train_acc: list[float]  # train accuracy per epoch (over the seeds, dropout on)
    val_accs: list[float]  # val accuracy per epoch (nan where not evaluated)
    val_acc: float  # best val accuracy
    test_acc: float  # test accuracy at the best val epoch
    best_epoch: int
    epoch_s: list[float]  # train-loop wall time per epoch (evaluation excluded)
    bytes_read: int  # feature bytes read from disk by the training batches (evaluation excluded)
    cache_hit_rate: float  # fraction of training rows served from the GPU/CPU caches
    best_state_dict: dict[str, torch.Tensor]
    timers: dict[str, float]  # loader stages summed over epochs, plus eval_s and train_s
    model_args: dict[str, Any]  # the MODELS name under "model" + constructor arguments: build_model(**model_args)
    config: dict[str, Any] = field(default_factory=dict)


def eval_batch_ids(samples: Any, split: str) -> list[int]:
    """Evaluation batches of ``split``: those of sample epoch 0, or all of them if epoch 0 has none."""
    return samples.batch_ids(split, 0) or samples.batch_ids(split)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint dict (weights only: no unpickling of arbitrary objects)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"'checkpoint' expected a file at {path} (got no such file)")
    ckpt = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        got = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ValueError(f"'{path}' expected a {CHECKPOINT_FORMAT} checkpoint (got {got!r})")
    return ckpt


def _save_checkpoint(path: str | Path, ckpt: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(ckpt, tmp)
    os.replace(tmp, path)  # readers never see a half-written checkpoint


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


def _rate(rows_before: dict[str, int], rows_after: dict[str, int]) -> float:
    delta = {k: rows_after[k] - rows_before.get(k, 0) for k in rows_after}
    total = sum(delta.values())
    return (delta.get("gpu", 0) + delta.get("cpu", 0)) / total if total else 0.0


def train(
    cfg: TrainConfig,
    samples: Any,
    source: Any,
    labels: np.ndarray,
    eval_source: Any = None,
    tracker: Tracker | None = None,
    progress: Callable[[int, dict[str, float]], None] | None = None,
) -> TrainResult:
    """Train for ``cfg.epochs`` epochs and return losses, accuracies, timings and the best weights.

    ``samples`` is a ``SampleSet``; ``source`` a feature source (``trainer.features``) for the train
    batches and ``eval_source`` (default ``source``) for the val/test batches; ``labels`` int64 (N,).
    ``tracker.log_params`` gets the flat config, ``tracker.log_metrics`` the per-epoch metrics;
    ``progress(epoch, metrics)`` is called after each epoch.
    """
    # ------------------------------------------------------------------ setup
    device = torch.device(resolve_device(cfg.device))
    eval_source = source if eval_source is None else eval_source
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.dtype != np.int64:
        raise ValueError(f"'labels' expected a 1-D int64 array (got {labels.dtype} {labels.shape})")
    num_layers = int(samples.num_layers)
    if cfg.num_layers and cfg.num_layers != num_layers:
        raise ValueError(f"'TrainConfig.num_layers' expected {num_layers} (the sampled hops) "
                         f"(got {cfg.num_layers})")
    if samples.epochs < 1:
        raise ValueError(f"'samples' expected at least one sampled train epoch (got {samples.epochs})")
    num_classes = cfg.num_classes or int(labels.max()) + 1
    eval_ids = {split: eval_batch_ids(samples, split) for split in ("val", "test")}
    torch.manual_seed(cfg.seed)

    # ------------------------------------------------------------------ model init (scratch or resume)
    model_args = {"model": cfg.model, "in_dim": int(source.feature_dim), "hidden_dim": cfg.hidden_dim,
                  "out_dim": num_classes, "num_layers": num_layers, "dropout": cfg.dropout}
    ckpt: dict[str, Any] | None = None
    if cfg.resume:
        ckpt = load_checkpoint(cfg.resume, map_location=device)
        saved = {"model": "graphsage", **ckpt["model_args"]}  # v1 checkpoints before the registry: graphsage
        if saved != model_args:
            raise ValueError(f"'{cfg.resume}' expected model_args {model_args} (got {saved})")
    model = build_model(**model_args).to(device)

    # ------------------------------------------------------------------ optimizer
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    history: dict[str, list[float]] = {"losses": [], "train_acc": [], "val_accs": [], "epoch_s": []}
    best = {"val_acc": -1.0, "test_acc": float("nan"), "epoch": -1}
    best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    counters = {"bytes_read": 0, "rows": dict.fromkeys(("gpu", "cpu", "packed", "file"), 0)}
    start_epoch = 0
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        history = {k: list(v) for k, v in ckpt["history"].items()}
        best = dict(ckpt["best"])
        best_state = {k: v.cpu() for k, v in ckpt["best_state_dict"].items()}
        counters = {"bytes_read": int(ckpt["counters"]["bytes_read"]), "rows": dict(ckpt["counters"]["rows"])}
        start_epoch = int(ckpt["epoch"]) + 1
        torch.set_rng_state(ckpt["rng_state"].cpu())  # dropout continues where it stopped
        if device.type == "cuda" and "cuda_rng_state" in ckpt:
            torch.cuda.set_rng_state(ckpt["cuda_rng_state"].cpu(), device)
    if tracker is not None:
        tracker.log_params(cfg.to_dict())

    # ------------------------------------------------------------------ evaluation helper
    @torch.no_grad()
    def evaluate(split: str) -> float:
        """Accuracy over the labelled seeds of the split's evaluation batches (dropout off)."""
        model.eval()
        correct = torch.zeros((), dtype=torch.int64, device=device)
        total = torch.zeros((), dtype=torch.int64, device=device)
        for lb in BatchLoader(samples, eval_source, eval_ids[split], labels, cfg.prefetch, device,
                              cfg.sequential):
            pred = model(lb.x, lb.blocks).argmax(dim=1)  # (num_seeds,)
            labelled = lb.y >= 0
            correct += (pred == lb.y)[labelled].sum()
            total += labelled.sum()
        model.train()
        num_correct, num_total = correct.item(), total.item()  # note: CPU-GPU sync point, once per evaluation
        return num_correct / num_total if num_total else float("nan")

    # ------------------------------------------------------------------ loop
    timers: dict[str, float] = {"eval_s": 0.0, "train_s": 0.0}
    with _torch_modes(cfg.deterministic, cfg.num_threads):
        for epoch in range(start_epoch, cfg.epochs):
            train_ids = samples.batch_ids("train", epoch % samples.epochs)
            if not train_ids:
                raise ValueError(f"'samples' expected train batches for sample epoch {epoch % samples.epochs} "
                                 "(got none)")
            loader = BatchLoader(samples, source, train_ids, labels, cfg.prefetch, device, cfg.sequential)
            bytes_before, rows_before = source.bytes_read, dict(source.rows_by_tier)
            loss_sum = torch.zeros((), device=device)
            correct = torch.zeros((), dtype=torch.int64, device=device)
            seen = torch.zeros((), dtype=torch.int64, device=device)
            model.train()
            t0 = time.perf_counter()
            for lb in loader:
                # forward backward update
                logits = model(lb.x, lb.blocks)  # (num_seeds, C)
                loss = F.cross_entropy(logits, lb.y, ignore_index=-1)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                # running sums stay on the device: no host sync inside the step loop
                loss_sum += loss.detach()
                labelled = lb.y >= 0
                correct += (logits.detach().argmax(dim=1) == lb.y)[labelled].sum()
                seen += labelled.sum()

            # timing and logging
            epoch_loss = loss_sum.item() / len(train_ids)  # note: CPU-GPU sync point, waits for the last step
            epoch_s = time.perf_counter() - t0
            train_acc = correct.item() / max(seen.item(), 1)  # already synced above: no extra wait
            for k, v in loader.timers.items():
                timers[k] = timers.get(k, 0.0) + v
            timers["train_s"] += epoch_s
            epoch_bytes = source.bytes_read - bytes_before
            epoch_rows = dict(source.rows_by_tier)
            counters["bytes_read"] += epoch_bytes
            for k, v in epoch_rows.items():
                counters["rows"][k] = counters["rows"].get(k, 0) + v - rows_before.get(k, 0)

            # evaluate
            val_acc = float("nan")
            if (epoch + 1) % cfg.eval_every == 0 or epoch == cfg.epochs - 1:
                t1 = time.perf_counter()
                val_acc = evaluate("val")
                if val_acc > best["val_acc"]:
                    best = {"val_acc": val_acc, "test_acc": evaluate("test"), "epoch": epoch}
                    # device -> host copy of the weights (a sync point, only when validation improves)
                    best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
                timers["eval_s"] += time.perf_counter() - t1

            history["losses"].append(epoch_loss)
            history["train_acc"].append(train_acc)
            history["val_accs"].append(val_acc)
            history["epoch_s"].append(epoch_s)
            metrics = {"loss": epoch_loss, "train_acc": train_acc, "epoch_s": epoch_s,
                       "bytes_read": float(epoch_bytes), "cache_hit_rate": _rate(rows_before, epoch_rows),
                       **{k: v for k, v in loader.timers.items()}}
            if not math.isnan(val_acc):
                metrics["val_acc"] = val_acc
            if tracker is not None:
                tracker.log_metrics(metrics, step=epoch)
            if progress is not None:
                progress(epoch, metrics)

            # checkpoint
            if cfg.checkpoint_path:
                ckpt_out: dict[str, Any] = {
                    "format": CHECKPOINT_FORMAT, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "model_args": model_args, "config": cfg.to_dict(), "epoch": epoch, "history": history,
                    "best": best, "best_state_dict": best_state, "counters": counters,
                    "rng_state": torch.get_rng_state(),
                }
                if device.type == "cuda":
                    ckpt_out["cuda_rng_state"] = torch.cuda.get_rng_state(device)
                _save_checkpoint(cfg.checkpoint_path, ckpt_out)

    # ------------------------------------------------------------------ termination
    total_rows = sum(counters["rows"].values())
    return TrainResult(
        losses=history["losses"], train_acc=history["train_acc"], val_accs=history["val_accs"],
        val_acc=best["val_acc"], test_acc=best["test_acc"], best_epoch=best["epoch"],
        epoch_s=history["epoch_s"], bytes_read=counters["bytes_read"],
        cache_hit_rate=(counters["rows"]["gpu"] + counters["rows"]["cpu"]) / total_rows if total_rows else 0.0,
        best_state_dict=best_state, timers=timers, model_args=model_args, config=cfg.to_dict(),
    )
