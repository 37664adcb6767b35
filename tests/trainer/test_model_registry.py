"""The model registry: build by name, train a model registered from a test, export it, rebuild it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainer.config import TrainConfig
from trainer.export import export_onnx, random_subgraph, verify_onnx
from trainer.features import InMemoryFeatures
from trainer.models import MODELS, GraphSAGE, TensorBlock, build_model, load_trained
from trainer.train import train


class SumSAGE(nn.Module):
    """A toy architecture: ``h_dst' = lin(h_dst + sum_{j in N(i)} h_src[j])``, ReLU between layers."""

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int, num_layers: int, dropout: float) -> None:
        super().__init__()
        self.in_dim, self.num_layers, self.dropout = in_dim, num_layers, dropout
        self.hidden_dim, self.out_dim = hidden_dim, out_dim
        dims = [in_dim] + [hidden_dim] * (num_layers - 1) + [out_dim]
        self.lins = nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(num_layers))

    @property
    def model_args(self) -> dict[str, Any]:
        return {"in_dim": self.in_dim, "hidden_dim": self.hidden_dim, "out_dim": self.out_dim,
                "num_layers": self.num_layers, "dropout": self.dropout}

    def _layer(self, i: int, h: torch.Tensor, h_dst: torch.Tensor, edge_src: torch.Tensor,
               edge_dst: torch.Tensor) -> torch.Tensor:
        msg = h.index_select(0, edge_src)  # (E, F)
        index = edge_dst.unsqueeze(1).expand_as(msg)  # (E, F)
        total = h_dst.scatter_reduce(0, index, msg, reduce="sum", include_self=True)  # (D, F)
        out = self.lins[i](total)
        return out if i == self.num_layers - 1 else F.dropout(F.relu(out), self.dropout, self.training)

    def forward(self, x: torch.Tensor, blocks: Sequence[TensorBlock]) -> torch.Tensor:
        h = x
        for i, b in enumerate(blocks):
            h = self._layer(i, h, h[: b.num_dst], b.edge_src, b.edge_dst)
        return h

    def forward_dst_pos(self, x: torch.Tensor,
                        edges: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        h = x
        for i, (edge_src, edge_dst, dst_pos) in enumerate(edges):
            h = self._layer(i, h, h.index_select(0, dst_pos), edge_src, edge_dst)
        return h


@pytest.fixture
def toy() -> Iterator[str]:
    MODELS.register("toy", SumSAGE)
    try:
        yield "toy"
    finally:
        MODELS.unregister("toy")
    assert "toy" not in MODELS


ARGS = {"in_dim": 6, "hidden_dim": 8, "out_dim": 3, "num_layers": 2, "dropout": 0.5}


def test_graphsage_is_registered_and_built_by_name() -> None:
    assert MODELS.get("graphsage") is GraphSAGE
    net = build_model("graphsage", **ARGS)
    assert isinstance(net, GraphSAGE) and net.model_args == ARGS
    assert isinstance(build_model(**{"model": "graphsage", **ARGS}), GraphSAGE)  # a TrainResult's model_args


def test_build_model_rejects_unknown_names_and_arguments() -> None:
    with pytest.raises(ValueError, match=r"'train.model' expected one of .*graphsage.* \(got 'nope'\)"):
        build_model("nope", **ARGS)
    with pytest.raises(ValueError, match=r"'model_args' expected exactly .* \(got unknown \['width'\], "
                                         r"missing \['hidden_dim'\]\)"):
        build_model("graphsage", **{**{k: v for k, v in ARGS.items() if k != "hidden_dim"}, "width": 8})


def test_a_registered_model_trains_exports_and_rebuilds(dataset, toy: str, tmp_path: Path) -> None:
    cfg = TrainConfig(model=toy, hidden_dim=8, dropout=0.0, lr=0.01, epochs=3, seed=3,
                      checkpoint_path=str(tmp_path / "ckpt.pt"))
    result = train(cfg, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels)
    assert result.model_args == {"model": toy, "in_dim": dataset.features.shape[1], "hidden_dim": 8,
                                 "out_dim": dataset.num_classes, "num_layers": 2, "dropout": 0.0}
    assert result.losses[-1] < result.losses[0]
    assert torch.load(tmp_path / "ckpt.pt", weights_only=True)["model_args"]["model"] == toy

    net = build_model(**result.model_args)
    assert isinstance(net, SumSAGE)
    net.load_state_dict(result.best_state_dict)
    onnx_path = export_onnx(net, tmp_path / "toy.onnx")
    for num_seeds, seed in ((3, 1), (25, 2)):
        example = random_subgraph(net.in_dim, net.num_layers, num_seeds=num_seeds, fanout=4, seed=seed)
        assert verify_onnx(onnx_path, net, example) < 1e-5

    torch.save(result.best_state_dict, tmp_path / "state_dict.pt")
    info = {"architecture": toy, **result.model_args}  # what the train stage writes to model.json
    rebuilt = load_trained(info, tmp_path / "state_dict.pt")
    assert isinstance(rebuilt, SumSAGE) and not rebuilt.training
    x, blocks = random_subgraph(net.in_dim, net.num_layers, seed=4)
    net.eval()
    torch.testing.assert_close(rebuilt(x, blocks), net(x, blocks), rtol=0, atol=0)

    with pytest.raises(ValueError, match=r"expected model_args \{'model': 'graphsage'"):
        train(dataclasses.replace(cfg, model="graphsage", checkpoint_path="", resume=str(tmp_path / "ckpt.pt"),
                                  epochs=4), dataset.samples, InMemoryFeatures(dataset.features), dataset.labels)


def test_load_trained_reads_a_model_json_from_before_the_registry(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = GraphSAGE(**ARGS)
    torch.save(net.state_dict(), tmp_path / "state_dict.pt")
    info = {"architecture": "graphsage", "aggregation": "mean",
            **{k: v for k, v in ARGS.items() if k != "dropout"}}
    rebuilt = load_trained(info, tmp_path / "state_dict.pt")
    assert isinstance(rebuilt, GraphSAGE) and not rebuilt.training and rebuilt.dropout == 0.0
    for name, value in net.state_dict().items():
        assert torch.equal(rebuilt.state_dict()[name], value)


def test_load_trained_rejects_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="'state_dict' expected a file at"):
        load_trained({"model": "graphsage", **ARGS}, tmp_path / "missing.pt")
    with pytest.raises(ValueError, match=r"'model.json' expected a model name under 'model' \(got keys"):
        load_trained(ARGS, tmp_path / "missing.pt")
