"""The split forward OUTRE's historical cache needs: ``forward_last(forward_lower(...))`` is ``forward``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from storage_kernels import kernels
from storage_kernels.sampleset import SampledBatch
from tests.pipelines.stage_fixtures import random_symmetric_csr
from trainer.history import split_forward
from trainer.models import build_model, to_tensor_blocks


@pytest.mark.parametrize("model_name", ["graphsage", "gcn", "gat"])
@pytest.mark.parametrize("num_layers", [1, 2, 3])
def test_split_forward_equals_forward_bitwise_with_dropout(model_name: str, num_layers: int) -> None:
    indptr, indices = random_symmetric_csr(200, 6, 0)
    b = kernels.sample_blocks(indptr, indices, np.arange(0, 40, 2), np.full(num_layers, 4), 1)
    batch = SampledBatch(0, "train", 0, 0, np.asarray(b.nodes), np.asarray(b.hop_counts),
                         [np.asarray(x) for x in b.indptrs], [np.asarray(x) for x in b.cols])
    blocks = to_tensor_blocks(batch.blocks())
    x = torch.randn(len(batch.nodes), 8)
    model = build_model(model_name, in_dim=8, hidden_dim=16, out_dim=3, num_layers=num_layers, dropout=0.5).train()
    torch.manual_seed(3)
    want = model(x, blocks)
    torch.manual_seed(3)
    split = split_forward(model)
    h = split.forward_lower(x, blocks[:-1])
    assert h.shape[0] == int(batch.hop_counts[1])  # one row per source of the last layer
    assert torch.equal(split.forward_last(h, blocks[-1]), want)


def test_a_model_without_the_split_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="'train.model' expected a model with forward_lower and forward_last"):
        split_forward(torch.nn.Linear(2, 2))
