"""One flat, frozen training configuration: logged whole to MLflow and stored in every checkpoint."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["TrainConfig"]


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters and run options of :func:`trainer.train.train`.

    Flat on purpose (nanoGPT style): every field is a primitive, so the whole config goes to
    ``mlflow.log_params`` and into the checkpoint dict as is, and ``TrainConfig.from_dict`` reads it back.
    """

    # model
    hidden_dim: int = 256  # width of every hidden layer (DiskGNN uses 256 for SAGE)
    num_layers: int = 0  # 0 = one layer per sampled hop (len(samples.fanouts)); otherwise must equal it
    num_classes: int = 0  # 0 = labels.max() + 1
    dropout: float = 0.5  # between layers, training only
    # optimizer
    lr: float = 3e-3  # Adam learning rate
    weight_decay: float = 0.0  # Adam L2 penalty
    # loop
    epochs: int = 3  # training epochs; epoch e uses the train batches of sample epoch e % samples.epochs
    eval_every: int = 1  # evaluate on the val batches every N epochs (and always after the last one)
    seed: int = 0  # torch.manual_seed for init and dropout
    deterministic: bool = True  # torch.use_deterministic_algorithms (warn_only where an op has no twin)
    num_threads: int = 0  # torch intra-op threads during training; 0 = leave torch's setting
    # data pipeline
    prefetch: int = 2  # depth of the loader queue (batches read ahead of compute)
    sequential: bool = False  # no reader thread: read, assemble and compute in turn (ablation)
    device: str = "cpu"  # "cpu" or "cuda[:i]"
    # checkpoints
    checkpoint_path: str = ""  # "" = no checkpoint; otherwise written after every epoch (plain dict)
    resume: str = ""  # "" = train from scratch; otherwise a checkpoint path to continue from

    def __post_init__(self) -> None:
        checks = {
            "hidden_dim": self.hidden_dim >= 1,
            "num_layers": self.num_layers >= 0,
            "num_classes": self.num_classes >= 0,
            "dropout": 0.0 <= self.dropout < 1.0,
            "lr": self.lr > 0.0,
            "weight_decay": self.weight_decay >= 0.0,
            "epochs": self.epochs >= 1,
            "eval_every": self.eval_every >= 1,
            "prefetch": self.prefetch >= 1,
            "num_threads": self.num_threads >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"'TrainConfig.{name}' expected a value in range (got {getattr(self, name)!r})")

    def to_dict(self) -> dict[str, Any]:
        """Flat ``{field: primitive}`` dict (MLflow params, checkpoint ``config``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError`` naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"'TrainConfig' expected fields from {sorted(names)} (got unknown {unknown})")
        return cls(**values)
