"""GraphSAGE over layered blocks: a hand-drawn known answer, the block conversion, a loop reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from storage_kernels.sampleset import Block
from trainer.export import random_subgraph
from trainer.models import GraphSAGE, TensorBlock, mean_aggregate, to_tensor_blocks

# Hand-drawn block: 4 source nodes, the first 3 are destinations.
#   dst 0 <- src 1, src 2      dst 1 <- src 0, src 3      dst 2 <- (nothing)
X4 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [4.0, 0.0]])
BLOCK4 = Block(num_src=4, num_dst=3, indptr=np.array([0, 2, 4, 4]), cols=np.array([1, 2, 0, 3]))


def test_tensor_block_from_csr_known_answer() -> None:
    tb = TensorBlock.from_block(BLOCK4)
    assert tb.edge_dst.tolist() == [0, 0, 1, 1]
    assert tb.edge_src.tolist() == [1, 2, 0, 3]
    assert tb.num_dst == 3
    assert tb.dst_pos().tolist() == [0, 1, 2]


def test_tensor_block_rejects_bad_csr() -> None:
    with pytest.raises(ValueError, match="'Block.indptr' expected shape"):
        TensorBlock.from_block(Block(num_src=4, num_dst=2, indptr=np.array([0, 2, 4, 4]), cols=np.arange(4)))
    with pytest.raises(ValueError, match="'Block.cols' expected shape"):
        TensorBlock.from_block(Block(num_src=4, num_dst=3, indptr=np.array([0, 2, 4, 4]), cols=np.arange(3)))


def test_sage_layer_on_hand_drawn_block() -> None:
    model = GraphSAGE(in_dim=2, hidden_dim=2, out_dim=2, num_layers=1, dropout=0.0)
    with torch.no_grad():
        conv = model.layers[0]
        conv.lin_self.weight.copy_(torch.eye(2))
        conv.lin_self.bias.zero_()
        conv.lin_neigh.weight.copy_(2 * torch.eye(2))
    out = model(X4, [TensorBlock.from_block(BLOCK4)])
    # dst0 = [1,0] + 2*mean([0,1],[2,2]) = [3,3]; dst1 = [0,1] + 2*mean([1,0],[4,0]) = [5,1]; dst2 = self only
    assert out.tolist() == [[3.0, 3.0], [5.0, 1.0], [2.0, 2.0]]


def test_mean_aggregate_matches_loop_reference_with_repeated_edges() -> None:
    gen = torch.Generator().manual_seed(3)
    h = torch.randn(9, 5, generator=gen)
    edge_src = torch.randint(0, 9, (30,), generator=gen)
    edge_dst = torch.randint(0, 4, (30,), generator=gen)  # many repeats, maybe an empty destination
    got = mean_aggregate(h, h[:6], edge_src, edge_dst)
    want = torch.zeros(6, 5)
    for i in range(6):
        srcs = edge_src[edge_dst == i]
        if len(srcs):
            want[i] = h[srcs].mean(dim=0)
    torch.testing.assert_close(got, want)


def test_forward_equals_dst_pos_form() -> None:
    torch.manual_seed(0)
    model = GraphSAGE(6, 8, 3, num_layers=3).eval()
    x, blocks = random_subgraph(6, 3, num_seeds=4, fanout=3, seed=2)
    want = model(x, blocks)
    got = model.forward_dst_pos(x, [(b.edge_src, b.edge_dst, b.dst_pos()) for b in blocks])
    assert want.shape == (4, 3)
    torch.testing.assert_close(got, want)  # the last layer (8 -> 3) projects before its mean: float rounding


def test_forward_on_sampled_batch(dataset) -> None:
    batch = dataset.samples.batch(0)
    model = GraphSAGE(dataset.features.shape[1], 8, dataset.num_classes, batch.num_layers)
    x = torch.from_numpy(dataset.features[batch.nodes])
    assert model(x, to_tensor_blocks(batch.blocks())).shape == (batch.num_seeds, dataset.num_classes)


def test_forward_rejects_wrong_inputs() -> None:
    model = GraphSAGE(2, 4, 2, num_layers=2)
    with pytest.raises(ValueError, match="'blocks' expected 2"):
        model(X4, [TensorBlock.from_block(BLOCK4)])
    with pytest.raises(ValueError, match=r"'x' expected shape \(num_nodes, 2\)"):
        model(torch.zeros(4, 3), [TensorBlock.from_block(BLOCK4)] * 2)
    with pytest.raises(ValueError, match="'GraphSAGE.num_layers' expected >= 1"):
        GraphSAGE(2, 4, 2, num_layers=0)


def test_large_no_grad_aggregation_goes_in_bounded_slices(monkeypatch) -> None:
    import trainer.models as models

    torch.manual_seed(0)
    h_src, like = torch.randn(50, 8), torch.empty(20, 8)
    edge_src, edge_dst = torch.randint(0, 50, (300,)), torch.randint(0, 20, (300,))
    whole = models.gather_scatter_sum(h_src, like, edge_src, edge_dst)  # autograd on: one scatter
    expected = torch.zeros(20, 8).index_add_(0, edge_dst, h_src[edge_src])
    torch.testing.assert_close(whole, expected)
    slices: list[int] = []
    select = torch.Tensor.index_select

    def counting_select(t, dim, index):
        slices.append(int(index.shape[0]))
        return select(t, dim, index)

    monkeypatch.setattr(models, "NO_GRAD_MESSAGE_ELEMENTS", 8 * 64)  # 64 edges of 8 features per slice
    monkeypatch.setattr(torch.Tensor, "index_select", counting_select)
    with torch.no_grad():
        sliced = models.gather_scatter_sum(h_src, like, edge_src, edge_dst)
    assert slices == [64, 64, 64, 64, 44]
    torch.testing.assert_close(sliced, expected)
