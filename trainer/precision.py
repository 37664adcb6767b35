"""Mixed precision for training and evaluation: ``train.autocast`` (``none`` | ``bf16``).

``bf16`` runs the forward pass (and the loss) under ``torch.autocast`` with bfloat16: matrix products in
bfloat16, reductions and the loss in float32, the weights and their gradients float32 (bfloat16 keeps
float32's exponent range, so no loss scaling is needed). It is meant for CUDA GPUs with bfloat16 support
(Ampere and later); on the CPU it runs under torch's CPU autocast (correct, usually not faster). Autocast is
thread-local: the loader's threads are unaffected, and the backward pass runs outside the context.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

import torch

__all__ = ["AUTOCAST_MODES", "autocast"]

AUTOCAST_MODES: tuple[str, ...] = ("none", "bf16")


def autocast(device: torch.device | str, mode: str) -> AbstractContextManager[object]:
    """The context the forward pass runs in for ``train.autocast=mode`` on ``device``.

    Raises ValueError for an unknown mode, or ``bf16`` on a CUDA device without bfloat16 support.
    """
    device = torch.device(device)
    if mode not in AUTOCAST_MODES:
        raise ValueError(f"'train.autocast' expected one of {AUTOCAST_MODES} (got {mode!r})")
    if mode == "none":
        return contextlib.nullcontext()
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(f"'train.autocast' expected a GPU with bfloat16 support for bf16 (got "
                         f"{torch.cuda.get_device_name(device)}); use train.autocast=none")
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"'train.autocast' expected a cuda or cpu device for bf16 (got {device.type})")
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
