"""BatchLoader: order and content, reader failures reach the consumer, early exit stops the thread."""

from __future__ import annotations

import threading
import time
import traceback

import numpy as np
import pytest
import torch

from tests.trainer.conftest import requires_cuda
from trainer.features import InMemoryFeatures
from trainer.loader import BatchLoader, BatchLoaderError


class FlakySource:
    """Serves rows from an array; raises OSError on one batch; records what it loaded and from which thread."""

    read_s = assemble_s = 0.0  # the loader reads the source's stage timers

    def __init__(self, features: np.ndarray, fail_on: int | None = None, delay_s: float = 0.0) -> None:
        self.features, self.fail_on, self.delay_s = features, fail_on, delay_s
        self.feature_dim = features.shape[1]
        self.loaded: list[int] = []
        self.threads: set[str] = set()

    def load(self, batch):
        self.threads.add(threading.current_thread().name)
        if batch.batch == self.fail_on:
            raise OSError(f"pread failed for batch {batch.batch}")
        time.sleep(self.delay_s)
        self.loaded.append(batch.batch)
        return torch.from_numpy(self.features[batch.nodes])


@pytest.mark.parametrize("sequential", [False, True])
def test_loader_yields_batches_in_order_with_features_and_labels(dataset, sequential: bool) -> None:
    ids = dataset.samples.batch_ids("train", 1)
    loader = BatchLoader(dataset.samples, InMemoryFeatures(dataset.features), ids, dataset.labels,
                         prefetch=2, sequential=sequential)
    seen = []
    for lb in loader:
        batch = dataset.samples.batch(lb.batch_id)
        assert torch.equal(lb.x, torch.from_numpy(dataset.features[batch.nodes]))
        assert lb.y.tolist() == dataset.labels[batch.seeds].tolist()
        assert [b.num_dst for b in lb.blocks] == [int(h) for h in batch.hop_counts[-2::-1]]
        seen.append(lb.batch_id)
    assert seen == ids
    assert not loader.is_running
    assert loader.timers["read_s"] > 0 and loader.timers["graph_s"] > 0


def test_loader_runs_the_source_in_a_reader_thread(dataset) -> None:
    source = FlakySource(dataset.features)
    list(BatchLoader(dataset.samples, source, [0, 1], dataset.labels))
    assert source.threads == {"strata-batch-reader"}


def test_reader_exception_is_reraised_chained(dataset) -> None:
    ids = dataset.samples.batch_ids("train", 0)
    source = FlakySource(dataset.features, fail_on=ids[2])
    loader = BatchLoader(dataset.samples, source, ids, dataset.labels, prefetch=2)
    got = []
    with pytest.raises(BatchLoaderError, match=rf"batch {ids[2]} \(got OSError: pread failed") as info:
        for lb in loader:
            got.append(lb.batch_id)
    assert got == ids[:2]  # everything before the failure was delivered, in order
    cause = info.value.__cause__
    assert isinstance(cause, OSError)
    frames = [f.name for f in traceback.extract_tb(cause.__traceback__)]
    assert "load" in frames and "_reader" in frames  # the reader thread's own traceback survives
    assert not loader.is_running


def test_early_exit_stops_the_reader(dataset) -> None:
    ids = dataset.samples.batch_ids("train", 0)
    source = FlakySource(dataset.features, delay_s=0.01)
    loader = BatchLoader(dataset.samples, source, ids, dataset.labels, prefetch=2)
    for i, _lb in enumerate(loader):
        if i == 1:
            break
    assert not loader.is_running  # generator close -> stop event -> join
    assert len(source.loaded) <= 2 + 2 + 1  # consumed + queued + one in flight
    n = len(source.loaded)
    time.sleep(0.1)
    assert len(source.loaded) == n  # nothing reads after shutdown
    assert [lb.batch_id for lb in loader] == ids  # a new iteration starts over


def test_loader_rejects_bad_arguments(dataset) -> None:
    source = FlakySource(dataset.features)
    with pytest.raises(ValueError, match="'prefetch' expected >= 1"):
        BatchLoader(dataset.samples, source, [0], dataset.labels, prefetch=0)
    with pytest.raises(ValueError, match="'labels' expected a 1-D int64 array"):
        BatchLoader(dataset.samples, source, [0], dataset.labels.astype(np.int32))


@pytest.mark.gpu
@requires_cuda
def test_loader_on_cuda_matches_cpu(dataset) -> None:
    ids = dataset.samples.batch_ids("train", 0)
    cpu = list(BatchLoader(dataset.samples, InMemoryFeatures(dataset.features), ids, dataset.labels))
    gpu = list(BatchLoader(dataset.samples, InMemoryFeatures(dataset.features, device="cuda"), ids, dataset.labels,
                           device="cuda"))
    for a, b in zip(cpu, gpu, strict=True):
        assert b.x.is_cuda and b.y.is_cuda and b.blocks[0].edge_src.is_cuda
        assert torch.equal(a.x, b.x.cpu()) and torch.equal(a.y, b.y.cpu())
