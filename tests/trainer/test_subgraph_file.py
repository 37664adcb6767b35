"""The browser app's subgraph file: a batch cut to its first seeds predicts as the full batch does, keeps the
prefix layout, and round-trips through ``subgraph.json`` + ``subgraph.bin`` (checked on read)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer.models import build_model, to_tensor_blocks
from trainer.subgraph_file import SUBGRAPH_FORMAT, read_subgraph, restrict_batch, write_subgraph


@pytest.fixture(scope="module")
def model(dataset) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model("graphsage", in_dim=dataset.features.shape[1], hidden_dim=16, out_dim=dataset.num_classes,
                       num_layers=dataset.samples.num_layers, dropout=0.0).eval()


@pytest.mark.parametrize("k", [1, 7, None])
def test_restricted_batch_predicts_as_the_full_batch(dataset, model, k: int | None) -> None:
    batch = dataset.samples.batch(dataset.samples.batch_ids("val")[0])
    k = k or batch.num_seeds
    sub = restrict_batch(batch, k)
    assert sub.num_seeds == k and np.array_equal(sub.seeds, batch.seeds[:k])
    assert len(np.unique(sub.nodes)) == len(sub.nodes) <= len(batch.nodes)
    for hop, (indptr, cols) in enumerate(zip(sub.indptrs, sub.cols, strict=True)):  # prefix layout
        assert len(indptr) == sub.hop_counts[hop] + 1 and cols.max() < sub.hop_counts[hop + 1]
    with torch.no_grad():
        full = model(torch.from_numpy(dataset.features[batch.nodes]), to_tensor_blocks(batch.blocks()))
        cut = model(torch.from_numpy(dataset.features[sub.nodes]), to_tensor_blocks(sub.blocks()))
    torch.testing.assert_close(cut, full[:k], rtol=0, atol=1e-5)
    if k < batch.num_seeds:
        assert len(sub.nodes) < len(batch.nodes)


def test_restrict_batch_rejects_more_seeds_than_the_batch(dataset) -> None:
    batch = dataset.samples.batch(0)
    with pytest.raises(ValueError, match=rf"'num_seeds' expected 1 <= num_seeds <= {batch.num_seeds}"):
        restrict_batch(batch, batch.num_seeds + 1)


def test_subgraph_file_round_trips_and_is_checked(dataset, tmp_path: Path) -> None:
    batch = restrict_batch(dataset.samples.batch(dataset.samples.batch_ids("val")[0]), 5)
    feats = dataset.features[batch.nodes]
    ids = batch.nodes * 10  # any int64 ids
    path = write_subgraph(tmp_path, batch, feats, ids, dataset.labels[batch.seeds], extra={"split": "val"})
    sub = read_subgraph(path)
    header = json.loads(path.read_text())
    assert header["format"] == SUBGRAPH_FORMAT and header["split"] == "val" and header["num_seeds"] == 5
    assert all(spec["offset"] % 16 == 0 for spec in header["arrays"].values())
    assert list(sub.feed) == header["inputs"] and np.array_equal(sub.feed["x"], feats)
    assert np.array_equal(sub.node_ids, ids) and np.array_equal(sub.labels, dataset.labels[batch.seeds])
    blocks = to_tensor_blocks(batch.blocks())
    for i, b in enumerate(blocks):
        assert np.array_equal(sub.feed[f"edge_src_{i}"], b.edge_src.numpy())
        assert np.array_equal(sub.feed[f"edge_dst_{i}"], b.edge_dst.numpy())
        assert np.array_equal(sub.feed[f"dst_pos_{i}"], np.arange(b.num_dst))
    blob = bytearray((tmp_path / "subgraph.bin").read_bytes())
    blob[-1] ^= 1
    (tmp_path / "subgraph.bin").write_bytes(bytes(blob))
    with pytest.raises(ValueError, match="subgraph.bin' expected sha256"):
        read_subgraph(path)
    with pytest.raises(ValueError, match=r"'features' expected shape \("):
        write_subgraph(tmp_path, batch, feats[1:], ids, dataset.labels[batch.seeds])
