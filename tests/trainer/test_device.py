"""resolve_device: ``auto`` follows CUDA availability; an explicit CUDA request without CUDA is refused."""

from __future__ import annotations

import pytest
import torch

from trainer.device import resolve_device


@pytest.mark.parametrize(("cuda", "want"), [(False, "cpu"), (True, "cuda")])
def test_auto_follows_cuda_availability(monkeypatch: pytest.MonkeyPatch, cuda: bool, want: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert resolve_device("auto") == want


def test_explicit_devices_pass_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("cpu") == "cpu" and resolve_device("cuda:1") == "cuda:1"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("cpu") == "cpu"


def test_cuda_without_cuda_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"^'train.device' expected cpu or auto on a machine without CUDA "
                                         r"\(got 'cuda'\)$"):
        resolve_device("cuda")
