"""ONNX export with dynamic subgraph shapes (checked in onnxruntime)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from trainer.export import export_onnx, onnx_feed, onnx_input_names, random_subgraph, verify_onnx
from trainer.message_passing import project_first
from trainer.models import GraphSAGE, TensorBlock, build_model

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


def _largest_intermediate(path: Path, feed: dict[str, np.ndarray]) -> int:
    """Elements of the largest tensor any node of the ONNX model at ``path`` computes on ``feed`` (every node
    output is made a graph output and read back)."""
    import onnxruntime as ort

    proto = onnx.load(str(path))
    typed = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(proto).graph.value_info}
    computed = [name for node in proto.graph.node for name in node.output if name]
    outputs = {o.name for o in proto.graph.output}
    assert set(computed) - outputs <= set(typed)  # every intermediate is read back: none can hide
    proto.graph.output.extend(typed[name] for name in computed if name not in outputs)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return max(np.asarray(v).size for v in session.run(None, feed))


def _dense_subgraph(in_dim: int, num_nodes: int, num_seeds: int, edges: int) -> tuple[torch.Tensor,
                                                                                      list[TensorBlock]]:
    """Two layers over few nodes and many edges (repeated pairs): edge-sized tensors dwarf node-sized ones."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(num_nodes, in_dim, generator=gen)
    blocks = []
    for num_dst, num_edges in ((num_nodes, edges), (num_seeds, edges // 4)):
        edge_dst = torch.sort(torch.randint(0, num_dst, (num_edges,), generator=gen)).values
        blocks.append(TensorBlock(torch.randint(0, num_nodes, (num_edges,), generator=gen), edge_dst, num_dst))
    return x, blocks


def test_projection_first_only_where_narrower() -> None:
    assert project_first(4096, 128) and project_first(129, 128)
    assert not project_first(128, 128) and not project_first(12, 16)
    sage = build_model("graphsage", in_dim=4096, hidden_dim=128, out_dim=3, num_layers=2, dropout=0.0)
    assert [layer.message_width for layer in sage.layers] == [128, 3]
    gat = build_model("gat", in_dim=4096, hidden_dim=128, out_dim=3, num_layers=2, dropout=0.0, heads=4)
    assert [layer.message_width for layer in gat.layers] == [128, 12]  # heads x channels, projected in any form


@pytest.mark.parametrize("name", ["graphsage", "gcn", "gat"])
def test_wide_input_export_aggregates_at_the_projected_width(name: str, tmp_path: Path) -> None:
    wide, hidden, nodes, edges = 256, 8, 40, 4000
    torch.manual_seed(0)
    net = build_model(name, in_dim=wide, hidden_dim=hidden, out_dim=3, num_layers=2, dropout=0.5)
    path = export_onnx(net, tmp_path / f"{name}.onnx")
    x, blocks = _dense_subgraph(wide, nodes, num_seeds=10, edges=edges)
    assert verify_onnx(path, net, (x, blocks)) < 1e-5  # projecting first is the same function
    largest = _largest_intermediate(path, onnx_feed(x, blocks))
    widest_message = max(layer.message_width for layer in net.layers)  # 8 (GAT's last layer: 4 heads x 3)
    # messages at the input width would be (edges (+ self loops)) x 256 = 1M+ elements
    assert largest <= max(nodes * wide, (edges + nodes) * widest_message) < edges * wide // 10
