"""Strata trainer: models, tiered feature sources, pipelined loader, train loop, MLflow tracking, export.

Names are re-exported lazily (``from trainer import GraphSAGE`` imports only what it needs; nothing here
imports mlflow or onnxruntime until used). The train function is ``trainer.train.train`` (the package
attribute ``trainer.train`` is the submodule).
"""

from __future__ import annotations

import importlib
from typing import Any

from storage_kernels.moved import install_moved

#: Modules renamed so that no two share a name with two meanings.
MOVED = {
    "trainer.split": "trainer.split_forward",
    "trainer.pruned": "trainer.pruned_samples",
    "trainer.features.pruned": "trainer.features.outre",
}
install_moved(MOVED)

__all__ = [
    "BatchLoader",
    "BatchLoaderError",
    "GraphSAGE",
    "InMemoryFeatures",
    "LoadedBatch",
    "MODELS",
    "MlflowTracker",
    "NaiveDiskFeatures",
    "PackedFeatures",
    "TensorBlock",
    "TieredSource",
    "TrainConfig",
    "TrainResult",
    "TrainState",
    "build_model",
    "export_onnx",
    "load_trained",
    "resolve_device",
    "tiered_source",
    "verify_onnx",
]

_WHERE = {
    "BatchLoader": "loader", "BatchLoaderError": "loader", "LoadedBatch": "loader",
    "GraphSAGE": "models", "TensorBlock": "blocks", "MODELS": "models", "build_model": "models",
    "load_trained": "models",
    "resolve_device": "device",
    "InMemoryFeatures": "features", "NaiveDiskFeatures": "features", "PackedFeatures": "features",
    "TieredSource": "features", "tiered_source": "features",
    "MlflowTracker": "tracking",
    "TrainConfig": "config",
    "TrainResult": "train", "TrainState": "train",
    "export_onnx": "export", "verify_onnx": "export",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'trainer' has no attribute {name!r}")
    return getattr(importlib.import_module(f"trainer.{_WHERE[name]}"), name)
