"""Data parallel training (trainer.distributed): two gloo ranks against a single-process reference.

The reference is what DDP computes: in step k, rank r trains batch ``2k + r`` of the epoch's list and the
gradients are averaged, so one process taking the mean loss of batches ``2k`` and ``2k + 1`` per step (the
odd last batch dropped) must reach the same weights, losses, accuracies and bytes read up to float rounding.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

from storage_kernels.sampleset import SampleSet
from trainer.checkpoint import digest_path
from trainer.config import TrainConfig
from trainer.distributed import DistributedRun, shard_batches
from trainer.features import InMemoryFeatures, PackedFeatures
from trainer.loader import BatchLoader
from trainer.models import build_model, model_options
from trainer.train import eval_batch_ids, evaluate, load_checkpoint, train

WORLD = 2
CFG = TrainConfig(hidden_dim=16, dropout=0.0, lr=0.01, epochs=3, seed=7, prefetch=2, distributed=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(rank: int, port: int, cfg: TrainConfig, data: dict[str, str], out_dir: str) -> None:
    """One torchrun-style worker: the launcher's environment, then plain ``train``."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    samples = SampleSet(data["samples"])
    labels = np.load(data["labels"])
    epochs: list[dict[str, float]] = []
    with PackedFeatures(data["packed"], samples, features_path=data["features"]) as source:
        result = train(cfg, samples, source, labels, progress=lambda epoch, metrics: epochs.append(metrics))
    torch.save({"losses": result.losses, "val_accs": result.val_accs, "bytes_read": result.bytes_read,
                "read_requests": result.read_requests, "epochs": epochs}, Path(out_dir) / f"rank{rank}.pt")


def _reference(cfg: TrainConfig, samples: SampleSet, source: PackedFeatures, labels: np.ndarray
               ) -> tuple[torch.nn.Module, list[float], float, tuple[int, int]]:
    """One process, the mean gradient of batch pairs per step: the weights, losses per epoch, last val acc and
    the training batches' (bytes read, read requests)."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, in_dim=source.feature_dim, hidden_dim=cfg.hidden_dim,
                        out_dim=int(labels.max()) + 1, num_layers=samples.num_layers, dropout=cfg.dropout,
                        **model_options(cfg))
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    losses = []
    for epoch in range(cfg.epochs):
        ids = samples.batch_ids("train", epoch % samples.epochs)
        batches = list(BatchLoader(samples, source, ids[: len(ids) // WORLD * WORLD], labels, sequential=True))
        total = 0.0
        for pair in zip(batches[0::WORLD], batches[1::WORLD], strict=True):
            loss = sum(F.cross_entropy(model(b.x, b.blocks), b.y, ignore_index=-1) for b in pair) / WORLD
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
        losses.append(total / (len(batches) // WORLD))
    io = (source.bytes_read, source.read_requests)
    val = BatchLoader(samples, source, eval_batch_ids(samples, "val"), labels, sequential=True)
    return model, losses, evaluate(model, val, torch.device("cpu")), io


def test_shard_batches_gives_disjoint_equal_shares() -> None:
    ids = list(range(100, 109))
    shares = [shard_batches(ids, r, 2) for r in range(2)]
    assert shares == [[100, 102, 104, 106], [101, 103, 105, 107]]  # 108 dropped: equal step counts
    assert shard_batches(ids, 2, 3) == [102, 105, 108]
    with pytest.raises(ValueError, match="at least 4 train batches"):
        shard_batches(ids[:3], 0, 4)
    with pytest.raises(ValueError, match="'rank' expected"):
        shard_batches(ids, 2, 2)


def test_single_process_without_launcher_is_not_distributed(monkeypatch) -> None:
    for key in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    assert DistributedRun.start(False, "cpu") is None


def test_a_policy_train_hook_is_refused_and_the_group_closed(dataset, monkeypatch) -> None:
    for key in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)

    class HookedSource(InMemoryFeatures):  # a policy's own forward (outre's HistoryHook) is per process
        train_hook = staticmethod(lambda: None)

    with pytest.raises(ValueError, match="'train.distributed' expected a policy without a train hook"):
        train(CFG, dataset.samples, HookedSource(dataset.features), dataset.labels)
    assert not torch.distributed.is_initialized()


def test_two_ranks_stay_in_sync_and_match_the_averaged_gradient_reference(dataset, packed_dir, tmp_path) -> None:
    labels_path = tmp_path / "labels.npy"
    np.save(labels_path, dataset.labels)
    data = {"samples": str(dataset.samples.path), "labels": str(labels_path), "packed": str(packed_dir),
            "features": str(dataset.features_path)}
    ckpt = tmp_path / "ckpt" / "last.pt"
    cfg = dataclasses.replace(CFG, checkpoint_path=str(ckpt))
    mp.spawn(_rank_main, args=(_free_port(), cfg, data, str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]

    # in sync: every epoch every weight equals rank 0's, and both ranks report the same reduced numbers
    for r in ranks:
        assert [m["rank_param_spread"] for m in r["epochs"]] == [0.0] * cfg.epochs
    assert ranks[0]["losses"] == ranks[1]["losses"] and ranks[0]["val_accs"] == ranks[1]["val_accs"]
    assert ranks[0]["bytes_read"] == ranks[1]["bytes_read"] > 0
    # rank 0 wrote the checkpoint (and its digest); nobody else wrote one
    assert sorted(ckpt.parent.iterdir()) == [ckpt, digest_path(ckpt)]

    with PackedFeatures(packed_dir, dataset.samples, features_path=dataset.features_path) as source:
        model, losses, val_acc, io = _reference(cfg, dataset.samples, source, dataset.labels)
    weights = load_checkpoint(ckpt)["model"]
    assert weights.keys() == model.state_dict().keys()  # no DDP "module." prefix
    for k, v in model.state_dict().items():
        torch.testing.assert_close(weights[k], v, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ranks[0]["losses"], losses, rtol=1e-5, atol=1e-6)
    assert ranks[0]["val_accs"][-1] == pytest.approx(val_acc, abs=1.5 / len(dataset.splits["val"]))
    assert (ranks[0]["bytes_read"], ranks[0]["read_requests"]) == io  # the ranks' reads, summed
