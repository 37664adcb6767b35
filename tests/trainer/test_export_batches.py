"""Export batches cut by bytes: the estimate grows with the feature and message widths, every part fits the
budget (or is one seed), the parts cover the batch's seeds in order and predict exactly what the batch does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from storage_kernels.sampleset import SampledBatch
from trainer.export_batches import MESSAGE_BYTES, cut_by_bytes, export_batches, feed_bytes, message_widths
from trainer.models import build_model, to_tensor_blocks
from trainer.subgraph_file import restrict_batch


def _batch() -> SampledBatch:
    """3 seeds, 5 nodes after hop 1 (4 edges), 9 nodes after hop 2 (7 edges)."""
    return SampledBatch(batch=0, split="val", epoch=0, step=0, nodes=np.arange(9, dtype=np.int64),
                        hop_counts=np.array([3, 5, 9]), indptrs=[np.array([0, 1, 3, 4]),
                                                                 np.array([0, 1, 2, 3, 5, 7])],
                        cols=[np.array([3, 4, 0, 1]), np.array([5, 6, 7, 8, 0, 2, 1])])


def test_feed_bytes_counts_feature_rows_and_messages_at_their_width() -> None:
    batch = _batch()
    # x twice (9 rows x 100 floats), layer 0 = hop 1: (7 edges + 5 dst), layer 1 = hop 0: (4 edges + 3 dst)
    want = 2 * 9 * 100 * 4 + (7 + 5) * (8 * MESSAGE_BYTES + 16) + (4 + 3) * (2 * MESSAGE_BYTES + 16)
    assert feed_bytes(batch, 100, [8, 2]) == want
    assert feed_bytes(batch, 100, [100, 2]) > want  # messages at the input width
    with pytest.raises(ValueError, match="'widths' expected 2 message widths"):
        feed_bytes(batch, 100, [8])


def test_message_widths_follow_the_projection_choice() -> None:
    sage = build_model("graphsage", in_dim=4096, hidden_dim=64, out_dim=5, num_layers=2, dropout=0.0)
    assert message_widths(sage) == [64, 5]
    narrow = build_model("gcn", in_dim=16, hidden_dim=64, out_dim=5, num_layers=2, dropout=0.0)
    assert message_widths(narrow) == [16, 5]

    class Opaque(torch.nn.Module):  # a model whose layers say nothing: the input width, the widest
        in_dim, num_layers = 300, 3

    assert message_widths(Opaque()) == [300, 300, 300]


@pytest.fixture(scope="module")
def model(dataset) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model("graphsage", in_dim=dataset.features.shape[1], hidden_dim=16, out_dim=dataset.num_classes,
                       num_layers=dataset.samples.num_layers, dropout=0.0).eval()


def test_parts_fit_the_budget_cover_the_seeds_and_predict_as_the_batch(dataset, model) -> None:
    batch = dataset.samples.batch(dataset.samples.batch_ids("val")[0])
    dim, widths = dataset.features.shape[1], message_widths(model)
    whole = feed_bytes(batch, dim, widths)
    budget = whole // 5
    parts = list(cut_by_bytes(batch, budget, lambda b: feed_bytes(b, dim, widths)))
    assert len(parts) >= 5
    assert all(feed_bytes(p, dim, widths) <= budget or p.num_seeds == 1 for p in parts)
    assert np.array_equal(np.concatenate([p.seeds for p in parts]), batch.seeds)
    with torch.no_grad():
        full = model(torch.from_numpy(dataset.features[batch.nodes]), to_tensor_blocks(batch.blocks()))
        cut = torch.cat([model(torch.from_numpy(dataset.features[p.nodes]), to_tensor_blocks(p.blocks()))
                         for p in parts])
    torch.testing.assert_close(cut, full, rtol=0, atol=1e-5)
    (same,) = cut_by_bytes(batch, whole, lambda b: feed_bytes(b, dim, widths))
    assert same is batch  # it fits: uncut
    tiny = list(cut_by_bytes(batch, 1, lambda b: feed_bytes(b, dim, widths)))  # nothing fits: one seed each
    assert [p.num_seeds for p in tiny] == [1] * batch.num_seeds


def test_export_batches_stop_at_the_limit_and_restrict_from_any_seed(dataset, model) -> None:
    ids = dataset.samples.batch_ids("train", 0)[:2]
    batches = [dataset.samples.batch(i) for i in ids]
    dim, widths = dataset.features.shape[1], message_widths(model)
    budget = feed_bytes(batches[0], dim, widths) // 3
    assert len(list(export_batches(batches, budget, dim, widths, limit=2))) == 2
    assert len(list(export_batches(batches, budget, dim, widths))) >= 6
    later = restrict_batch(batches[0], 2, first=3)
    assert np.array_equal(later.seeds, batches[0].seeds[3:5])
    with pytest.raises(ValueError, match="'num_seeds' expected 1 <= num_seeds"):
        restrict_batch(batches[0], batches[0].num_seeds, first=1)
