"""``train.autocast=bf16``: the forward pass under torch.autocast with bfloat16 -- on the CPU through torch's CPU
autocast (every model trains and lands near float32's accuracy), on CUDA where a GPU is present."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.trainer.conftest import requires_cuda
from trainer.config import TrainConfig
from trainer.features import InMemoryFeatures
from trainer.precision import autocast
from trainer.train import train

CFG = TrainConfig(hidden_dim=16, dropout=0.5, lr=0.01, epochs=3, seed=7, prefetch=2, device="cpu")


def test_autocast_modes_and_errors():
    assert TrainConfig().autocast == "none"
    with pytest.raises(ValueError, match="'TrainConfig.autocast' expected a value in range"):
        TrainConfig(autocast="fp8")
    with pytest.raises(ValueError, match=r"'train.autocast' expected one of \('none', 'bf16'\)"):
        autocast("cpu", "fp16")
    with autocast("cpu", "bf16"):
        assert torch.is_autocast_enabled("cpu")
        y = torch.nn.functional.linear(torch.randn(4, 8), torch.randn(3, 8))
    assert y.dtype == torch.bfloat16  # the product really ran in bfloat16
    with autocast("cpu", "none"):
        assert torch.nn.functional.linear(torch.randn(4, 8), torch.randn(3, 8)).dtype == torch.float32


@pytest.mark.parametrize("model", ["graphsage", "gcn", "gat"])
def test_bf16_on_cpu_trains_like_float32(dataset, model):
    cfg = dataclasses.replace(CFG, model=model)
    full = train(cfg, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels)
    half = train(dataclasses.replace(cfg, autocast="bf16"), dataset.samples, InMemoryFeatures(dataset.features),
                 dataset.labels)
    assert half.losses != full.losses  # bf16 really changed the arithmetic
    assert half.losses[-1] < half.losses[0]
    assert all(v.dtype == torch.float32 for v in half.best_state_dict.values())  # weights stay float32
    assert abs(half.val_acc - full.val_acc) <= 0.05 and abs(half.test_acc - full.test_acc) <= 0.05, (half, full)


@pytest.mark.gpu
@requires_cuda
def test_bf16_on_cuda_trains_like_float32(dataset):
    cfg = dataclasses.replace(CFG, device="cuda")
    full = train(cfg, dataset.samples, InMemoryFeatures(dataset.features, device="cuda"), dataset.labels)
    half = train(dataclasses.replace(cfg, autocast="bf16"), dataset.samples,
                 InMemoryFeatures(dataset.features, device="cuda"), dataset.labels)
    assert half.losses[-1] < half.losses[0]
    assert abs(half.test_acc - full.test_acc) <= 0.05
