"""ONNX export with dynamic subgraph shapes (checked in onnxruntime)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch

from trainer.export import export_onnx, onnx_input_names, random_subgraph, verify_onnx
from trainer.models import GraphSAGE

IN_DIM, NUM_LAYERS = 12, 2


@pytest.fixture(scope="module")
def model() -> GraphSAGE:
    torch.manual_seed(0)
    return GraphSAGE(IN_DIM, 16, 4, NUM_LAYERS, dropout=0.5)


@pytest.fixture(scope="module")
def onnx_path(model: GraphSAGE, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_onnx(model, tmp_path_factory.mktemp("onnx") / "sage.onnx", IN_DIM, NUM_LAYERS, opset=18)


@pytest.mark.parametrize(("num_seeds", "fanout", "seed"), [(3, 3, 10), (40, 6, 11)])
def test_onnx_matches_torch_on_two_subgraph_sizes(model: GraphSAGE, onnx_path: Path, num_seeds: int,
                                                   fanout: int, seed: int) -> None:
    x, blocks = random_subgraph(IN_DIM, NUM_LAYERS, num_seeds=num_seeds, fanout=fanout, seed=seed)
    for b in blocks:  # the case index_add_ exports wrongly: destinations that receive several messages
        assert b.edge_dst.unique().numel() < b.edge_dst.numel()
    assert blocks[-1].num_dst == num_seeds != 5  # export traced a 5-seed example: shapes must be dynamic
    assert verify_onnx(onnx_path, model, (x, blocks)) < 1e-5
    assert model.training  # verify_onnx restores the mode


def test_onnx_graph_uses_scatter_add_and_no_rank_guards(onnx_path: Path) -> None:
    graph = onnx.load(str(onnx_path)).graph
    ops = [n.op_type for n in graph.node]
    assert "If" not in ops
    scatters = [n for n in graph.node if n.op_type == "ScatterElements"]
    assert len(scatters) == 2 * NUM_LAYERS  # messages and degrees, per layer
    assert all(a.s == b"add" for n in scatters for a in n.attribute if a.name == "reduction")
    assert [i.name for i in graph.input] == onnx_input_names(NUM_LAYERS)
    dims = {i.name: i.type.tensor_type.shape.dim[0].dim_param for i in graph.input}
    assert dims["x"] == "num_nodes" and dims["dst_pos_1"] == "num_dst_1"


def test_export_onnx_rejects_mismatched_dims(model: GraphSAGE, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'in_dim' expected 12"):
        export_onnx(model, tmp_path / "x.onnx", in_dim=7, num_layers=NUM_LAYERS)
    with pytest.raises(ValueError, match="'opset' expected >= 16"):
        export_onnx(model, tmp_path / "x.onnx", opset=13)
