"""Where training runs: ``TrainConfig.device`` (``cpu``, ``cuda[:i]`` or ``auto``) to a concrete device string."""

from __future__ import annotations

import torch

__all__ = ["resolve_device"]


def resolve_device(requested: str) -> str:
    """``auto`` picks CUDA when available, else the CPU; any other value is returned as it is, except an
    explicit ``cuda[:i]`` on a machine without CUDA, which is a ``ValueError`` naming the setting.

    >>> resolve_device("cpu")
    'cpu'
    """
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"'train.device' expected cpu or auto on a machine without CUDA (got {requested!r})")
    return requested
