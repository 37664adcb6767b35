"""GCN and GAT export to ONNX (opset 18) and match PyTorch in onnxruntime on real sampled blocks of other
batch sizes than the traced one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from storage_kernels import kernels
from storage_kernels.sampleset import Block
from trainer.export import export_onnx, onnx_input_names, random_subgraph, verify_onnx
from trainer.models import TensorBlock, build_model, to_tensor_blocks

NUM_LAYERS = 2
TOLERANCE = 1e-5  # the export stage refuses above 1e-4
CASES = {"gcn": {}, "gat": {"heads": 4}, "gat-2": {"heads": 2}}


@pytest.fixture(scope="module", params=sorted(CASES))
def exported(request: pytest.FixtureRequest, dataset, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[torch.nn.Module, Path]:
    name = request.param.split("-")[0]
    torch.manual_seed(0)
    model = build_model(name, in_dim=dataset.features.shape[1], hidden_dim=16, out_dim=dataset.num_classes,
                        num_layers=NUM_LAYERS, dropout=0.5, **CASES[request.param])
    return model, export_onnx(model, tmp_path_factory.mktemp("onnx") / f"{request.param}.onnx", opset=18)


def _sampled(dataset, num_seeds: int, fanouts: list[int], seed: int) -> tuple[torch.Tensor, list[TensorBlock]]:
    """A batch of ``num_seeds`` train seeds sampled with the pipeline's sampler (real block shapes)."""
    seeds = np.random.default_rng(seed).choice(dataset.splits["train"], num_seeds, replace=False)
    out = kernels.sample_blocks(dataset.indptr, dataset.indices, seeds, fanouts, seed=seed)
    blocks = [Block(num_src=int(out.hop_counts[h + 1]), num_dst=int(out.hop_counts[h]), indptr=out.indptrs[h],
                    cols=out.cols[h]) for h in reversed(range(len(fanouts)))]
    return torch.from_numpy(dataset.features[out.nodes]), to_tensor_blocks(blocks)


def test_onnx_matches_torch_on_sampled_batches(exported, dataset) -> None:
    model, path = exported
    batch = dataset.samples.batch(dataset.samples.batch_ids("val")[0])  # a batch of the sample set as stored
    examples = [(torch.from_numpy(dataset.features[batch.nodes]), to_tensor_blocks(batch.blocks()))]
    examples += [_sampled(dataset, n, fanouts, seed) for n, fanouts, seed in ((3, [4, 3], 1), (61, [10, 10], 2))]
    for x, blocks in examples:
        assert blocks[-1].num_dst != 5  # export traced 5 seeds: the graph is dynamic in every size
        assert verify_onnx(path, model, (x, blocks)) < TOLERANCE
    assert [b[-1].num_dst for _, b in examples] == [16, 3, 61]
    assert model.training  # verify_onnx restores the mode


def test_onnx_matches_torch_with_repeated_destinations_and_no_edges(exported, dataset) -> None:
    model, path = exported
    dim = dataset.features.shape[1]
    x, blocks = random_subgraph(dim, NUM_LAYERS, num_seeds=40, fanout=6, seed=11)
    for b in blocks:  # the case index_add_ exports wrongly: destinations that receive several messages
        assert b.edge_dst.unique().numel() < b.edge_dst.numel()
    assert verify_onnx(path, model, (x, blocks)) < TOLERANCE
    x, blocks = random_subgraph(dim, NUM_LAYERS, num_seeds=1, fanout=2, seed=3)
    assert blocks[-1].edge_dst.numel() == 0  # a seed without sampled neighbours: only its self loop
    assert verify_onnx(path, model, (x, blocks)) < TOLERANCE


def test_onnx_graph_is_opset_18_with_scatter_reductions_only(exported) -> None:
    model, path = exported
    proto = onnx.load(str(path))
    assert {o.domain: o.version for o in proto.opset_import}[""] == 18
    ops = [n.op_type for n in proto.graph.node]
    assert "If" not in ops
    reductions = [a.s for n in proto.graph.node if n.op_type == "ScatterElements" for a in n.attribute
                  if a.name == "reduction"]
    assert len(reductions) == ops.count("ScatterElements") > 0  # every scatter reduces (no plain overwrite)
    want = {b"add", b"max"} if type(model).__name__ == "GAT" else {b"add"}
    assert set(reductions) == want
    assert [i.name for i in proto.graph.input] == onnx_input_names(NUM_LAYERS)
    (out,) = proto.graph.output
    dims = out.type.tensor_type.shape.dim
    assert dims[0].dim_param == "num_seeds" and dims[1].dim_value == model.out_dim  # rank 2, as declared
