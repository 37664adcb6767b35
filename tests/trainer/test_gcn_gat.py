"""GCN and GAT over layered blocks: hand-drawn known answers, dense/loop references with repeated edges, the
edge softmax, the registry entries (GAT's ``heads``), training and rebuilding from ``model.json``."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from storage_kernels.sampleset import Block
from trainer.config import TrainConfig
from trainer.export import random_subgraph
from trainer.features import InMemoryFeatures
from trainer.gat import GAT, NEGATIVE_SLOPE
from trainer.gcn import GCN
from trainer.message_passing import edge_softmax
from trainer.models import MODELS, TensorBlock, build_model, load_trained, model_reads, to_tensor_blocks
from trainer.train import train

# Hand-drawn block: 4 source nodes, the first 3 are destinations.
#   dst 0 <- src 1, src 2      dst 1 <- src 0, src 3      dst 2 <- (nothing)
X4 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [4.0, 0.0]])
BLOCK4 = TensorBlock.from_block(Block(num_src=4, num_dst=3, indptr=np.array([0, 2, 4, 4]), cols=np.array([1, 2, 0, 3])))
ARGS = {"in_dim": 6, "hidden_dim": 8, "out_dim": 3, "num_layers": 2, "dropout": 0.5}


def _identity_gcn() -> GCN:
    model = GCN(in_dim=2, hidden_dim=2, out_dim=2, num_layers=1, dropout=0.0)
    with torch.no_grad():
        model.layers[0].lin.weight.copy_(torch.eye(2))
    return model


def test_gcn_layer_on_hand_drawn_block() -> None:
    out = _identity_gcn()(X4, [BLOCK4])
    # with self loops: in-degree+1 of dst = 3, 3, 1; out-degree (+1 if also a dst) of src = 2, 2, 2, 1
    r2, r3 = math.sqrt(2), math.sqrt(3)
    want = torch.tensor([
        [3 / (r3 * r2), 3 / (r3 * r2)],  # (x0 + x1 + x2) / (sqrt3 sqrt2)
        [1 / (r3 * r2) + 4 / r3, 1 / (r3 * r2)],  # (x1 + x0) / (sqrt3 sqrt2) + x3 / (sqrt3 * 1)
        [2 / r2, 2 / r2],  # only its self loop: x2 / (1 * sqrt2)
    ])
    torch.testing.assert_close(out, want)


def _dense_gcn(layer: torch.nn.Module, h: torch.Tensor, block: TensorBlock) -> torch.Tensor:
    """``D_dst^-1/2 (A + I) D_src^-1/2 h W + b`` with a dense (num_dst x num_src) count matrix."""
    a = torch.zeros(block.num_dst, h.shape[0])
    for s, d in zip(block.edge_src.tolist(), block.edge_dst.tolist(), strict=True):
        a[d, s] += 1.0  # a repeated edge counts twice
    a[torch.arange(block.num_dst), torch.arange(block.num_dst)] += 1.0
    deg_dst, deg_src = a.sum(1).clamp(min=1), a.sum(0).clamp(min=1)
    norm = a / deg_dst.sqrt()[:, None] / deg_src.sqrt()[None, :]
    return norm @ layer.lin(h) + layer.bias


def test_gcn_matches_dense_normalisation_with_repeated_edges() -> None:
    torch.manual_seed(0)
    model = GCN(5, 7, 3, num_layers=2, dropout=0.0).eval()
    x, blocks = random_subgraph(5, 2, num_seeds=6, fanout=4, seed=3)
    assert blocks[0].edge_dst.unique().numel() < blocks[0].edge_dst.numel()
    h = torch.relu(_dense_gcn(model.layers[0], x, blocks[0]))
    want = _dense_gcn(model.layers[1], h, blocks[1])
    torch.testing.assert_close(model(x, blocks), want)


def test_gat_with_zero_attention_averages_in_edges_and_self() -> None:
    model = GAT(in_dim=2, hidden_dim=2, out_dim=2, num_layers=1, dropout=0.0, heads=1)
    with torch.no_grad():
        model.layers[0].lin.weight.copy_(torch.eye(2))
        model.layers[0].att_src.zero_()
        model.layers[0].att_dst.zero_()
    out = model(X4, [BLOCK4])  # equal scores: the mean over each destination's in-edges and its self loop
    torch.testing.assert_close(out, torch.tensor([[1.0, 1.0], [5 / 3, 1 / 3], [2.0, 2.0]]))


def _loop_gat_layer(layer: torch.nn.Module, h: torch.Tensor, block: TensorBlock) -> torch.Tensor:
    """The attention layer one destination and one head at a time (explicit softmax over its in-edges)."""
    heads, c = layer.heads, layer.head_dim
    z = layer.lin(h).reshape(-1, heads, c)
    out = torch.zeros(block.num_dst, heads, c)
    for i in range(block.num_dst):
        srcs = torch.cat([block.edge_src[block.edge_dst == i], torch.tensor([i])])  # in-edges + self loop
        for k in range(heads):
            e = F.leaky_relu(z[srcs, k] @ layer.att_src[0, k] + z[i, k] @ layer.att_dst[0, k], NEGATIVE_SLOPE)
            out[i, k] = torch.softmax(e, 0) @ z[srcs, k]
    return (out.reshape(block.num_dst, heads * c) if layer.concat else out.mean(1)) + layer.bias


@pytest.mark.parametrize("heads", [1, 3])
def test_gat_matches_loop_reference_with_repeated_edges(heads: int) -> None:
    torch.manual_seed(heads)
    model = GAT(5, 6, 4, num_layers=2, dropout=0.5, heads=heads).eval()
    x, blocks = random_subgraph(5, 2, num_seeds=6, fanout=4, seed=8)
    assert blocks[1].edge_dst.unique().numel() < blocks[1].edge_dst.numel()
    h = torch.relu(_loop_gat_layer(model.layers[0], x, blocks[0]))
    assert h.shape[1] == 6  # hidden layer: heads concatenated, hidden_dim wide
    want = _loop_gat_layer(model.layers[1], h, blocks[1])  # last layer: heads averaged
    torch.testing.assert_close(model(x, blocks), want)


def test_edge_softmax_sums_to_one_per_destination_and_is_shift_stable() -> None:
    gen = torch.Generator().manual_seed(1)
    index = torch.tensor([0, 2, 0, 0, 2, 3])  # repeats; destination 1 has no edge
    scores = torch.randn(6, 2, generator=gen) + 1000.0  # exp(1000) overflows without the max shift
    like = torch.zeros(4, 2)
    alpha = edge_softmax(scores, index, like)
    assert torch.isfinite(alpha).all()
    sums = torch.zeros(4, 2).index_add_(0, index, alpha)
    torch.testing.assert_close(sums, torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]))
    torch.testing.assert_close(alpha[[0, 2, 3]], torch.softmax(scores[[0, 2, 3]], dim=0))


@pytest.mark.parametrize("name", ["gcn", "gat"])
def test_forward_equals_dst_pos_form_and_backprops(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(name, **{**ARGS, "num_layers": 3}).eval()
    x, blocks = random_subgraph(6, 3, num_seeds=4, fanout=3, seed=2)
    want = model(x, blocks)
    got = model.forward_dst_pos(x, [(b.edge_src, b.edge_dst, b.dst_pos()) for b in blocks])
    assert want.shape == (4, 3)
    torch.testing.assert_close(got, want)  # GCN's last layer (out < in) projects first there: float rounding
    model.train()
    model(x, blocks).square().sum().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("name", ["gcn", "gat"])
def test_forward_on_sampled_batch(dataset, name: str) -> None:
    batch = dataset.samples.batch(0)
    model = build_model(name, in_dim=dataset.features.shape[1], hidden_dim=8, out_dim=dataset.num_classes,
                        num_layers=batch.num_layers, dropout=0.5)
    x = torch.from_numpy(dataset.features[batch.nodes])
    assert model(x, to_tensor_blocks(batch.blocks())).shape == (batch.num_seeds, dataset.num_classes)


def test_registry_entries_and_heads() -> None:
    assert MODELS.get("gcn") is GCN and MODELS.get("gat") is GAT
    assert model_reads("gat") == ("heads",) and model_reads("gcn") == () == model_reads("graphsage")
    assert build_model("gat", **ARGS).heads == 4  # the default
    gat = build_model("gat", **ARGS, heads=2)
    assert gat.model_args == {**ARGS, "heads": 2} and build_model("gcn", **ARGS).model_args == ARGS
    assert gat.layers[0].lin.out_features == 8 and gat.layers[1].lin.out_features == 2 * 3
    with pytest.raises(ValueError, match=r"'model_args' expected exactly .* \(got unknown \['heads'\]"):
        build_model("gcn", **ARGS, heads=2)
    with pytest.raises(ValueError, match=r"'GAT.hidden_dim' expected a multiple of heads \(3\).* \(got 8\)"):
        build_model("gat", **ARGS, heads=3)
    with pytest.raises(ValueError, match=r"'GAT.heads' expected >= 1 \(got 0\)"):
        build_model("gat", **ARGS, heads=0)
    with pytest.raises(ValueError, match=r"'GCN.hidden_dim' expected >= 1 \(got 0\)"):
        build_model("gcn", **{**ARGS, "hidden_dim": 0})
    with pytest.raises(ValueError, match=r"'blocks' expected 2"):
        build_model("gcn", **ARGS)(torch.zeros(4, 6), [BLOCK4])
    with pytest.raises(ValueError, match=r"'TrainConfig.heads' expected a value in range \(got 0\)"):
        TrainConfig(model="gat", heads=0)


@pytest.mark.parametrize(("name", "extra"), [("gcn", {}), ("gat", {"heads": 2})])
def test_trains_and_rebuilds_from_model_json(dataset, tmp_path: Path, name: str, extra: dict) -> None:
    cfg = TrainConfig(model=name, hidden_dim=8, dropout=0.0, lr=0.02, epochs=4, seed=1, heads=2)
    result = train(cfg, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels)
    assert result.model_args == {"model": name, "in_dim": dataset.features.shape[1], "hidden_dim": 8,
                                 "out_dim": dataset.num_classes, "num_layers": 2, "dropout": 0.0, **extra}
    assert result.losses[-1] < result.losses[0] and result.val_acc > 1.5 / dataset.num_classes

    torch.save(result.best_state_dict, tmp_path / "state_dict.pt")
    rebuilt = load_trained({"architecture": name, **result.model_args}, tmp_path / "state_dict.pt")
    assert type(rebuilt) is MODELS.get(name) and not rebuilt.training and rebuilt.model_args == {
        k: v for k, v in result.model_args.items() if k != "model"}
    for key, value in result.best_state_dict.items():
        assert torch.equal(rebuilt.state_dict()[key], value)
