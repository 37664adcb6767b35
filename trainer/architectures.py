"""The registry of model architectures, :data:`MODELS`, importable without torch.

Its entries live in :mod:`trainer.models` (``graphsage``), :mod:`trainer.gcn` and :mod:`trainer.gat`, which
need torch; that module is the registry's provider, imported on the first lookup. The built-in names are
declared here, so validating ``train.model`` in a configuration (every Dagster step process and CLI command
does) does not import torch: a preprocessing step never uses it.
"""

from __future__ import annotations

from typing import Any

from storage_kernels.registry import Registry

__all__ = ["BUILTIN_MODELS", "MODELS"]

#: The architectures :mod:`trainer.models` registers (it fails to import if one is missing).
BUILTIN_MODELS = ("graphsage", "gcn", "gat")

#: Architectures by name (``TrainConfig.model``); register one with ``@MODELS.register("name")``.
MODELS: Registry[Any] = Registry("train.model", provider="trainer.models")
MODELS.declare(*BUILTIN_MODELS)
