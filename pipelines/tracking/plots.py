"""Plots of a training run, as PNG files for MLflow's artifact view (matplotlib, Agg backend: no display).

- ``curves.png``: train loss, train and validation accuracy per epoch, the best epoch marked;
- ``tier_hit_rates.png``: the fraction of feature rows each tier served while training, beside the plan's
  prediction for that tier;
- ``stage_timing.png``: the build time of every stage artifact the run was trained from and the training
  loop's own phases (loader stages busy, evaluation).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_curves", "plot_stage_timing", "plot_tier_hit_rates", "write_run_plots"]


def _pyplot() -> Any:
    """``matplotlib.pyplot`` with the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt



def _save(plt: Any, fig: Any, path: Path) -> Path:
    """Lay out, write and close ``fig``; returns ``path``."""
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

def plot_curves(path: Path, losses: Sequence[float], train_acc: Sequence[float], val_acc: Sequence[float],
                best_epoch: int) -> Path:
    """Loss (left axis) and accuracies (right axis) per epoch; ``val_acc`` NaN where not evaluated."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    epochs = list(range(len(losses)))
    ax.plot(epochs, losses, color="tab:red", label="train loss")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss")
    acc = ax.twinx()
    acc.plot(epochs, train_acc, color="tab:blue", label="train accuracy")
    evaluated = [(e, v) for e, v in zip(epochs, val_acc, strict=False) if not math.isnan(v)]
    if evaluated:
        acc.plot(*zip(*evaluated, strict=True), color="tab:green", marker=".", label="validation accuracy")
    if best_epoch >= 0:
        acc.axvline(best_epoch, color="grey", linestyle=":", label=f"best epoch ({best_epoch})")
    acc.set_ylabel("accuracy")
    acc.set_ylim(0, 1)
    lines = ax.get_legend_handles_labels()
    more = acc.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="center right", fontsize=8)
    ax.set_title("Training curves")
    return _save(plt, fig, path)


def plot_tier_hit_rates(path: Path, measured: Mapping[str, float], predicted: Mapping[str, float]) -> Path:
    """Bars per tier: the measured fraction of rows served (and the plan's prediction where it made one)."""
    plt = _pyplot()
    tiers = list(dict.fromkeys([*measured, *predicted]))
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    width = 0.4
    xs = range(len(tiers))
    ax.bar([x - width / 2 for x in xs], [measured.get(t, 0.0) for t in tiers], width, label="measured (train)")
    ax.bar([x + width / 2 for x in xs], [predicted.get(t, 0.0) for t in tiers], width, label="predicted (plan)")
    ax.set_xticks(list(xs), tiers)
    ax.set_ylabel("fraction of feature rows")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title("Feature rows served per tier")
    return _save(plt, fig, path)


def plot_stage_timing(path: Path, stages: Mapping[str, float], loop: Mapping[str, float]) -> Path:
    """Horizontal bars: seconds per pipeline stage (``stages``) and per training-loop phase (``loop``)."""
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5), dpi=100)
    for ax, data, title in ((top, stages, "Stage build time (s)"), (bottom, loop, "Training loop (s, summed)")):
        names = list(data)
        ax.barh(names, [data[n] for n in names], color="tab:purple" if ax is top else "tab:orange")
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
    return _save(plt, fig, path)


def write_run_plots(out_dir: Path, history: Mapping[str, Sequence[float]], best_epoch: int,
                    measured_tiers: Mapping[str, float], predicted_tiers: Mapping[str, float],
                    stage_seconds: Mapping[str, float], loop_seconds: Mapping[str, float]) -> list[Path]:
    """Write the three plots into ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        plot_curves(out_dir / "curves.png", history["loss"], history["train_acc"], history["val_acc"], best_epoch),
        plot_tier_hit_rates(out_dir / "tier_hit_rates.png", measured_tiers, predicted_tiers),
        plot_stage_timing(out_dir / "stage_timing.png", stage_seconds, loop_seconds),
    ]
