"""BatchLoader: order and content, stage threads, read-ahead bounds, failures reach the consumer, early exit
stops the threads."""

from __future__ import annotations

import threading
import time
import traceback

import numpy as np
import pytest
import torch

from tests.trainer.conftest import requires_cuda
from trainer.features import FeatureSourceBase, InMemoryFeatures, PackedFeatures
from trainer.loader import BatchLoader, BatchLoaderError


class FlakySource(FeatureSourceBase):
    """Serves rows from an array (unsplit: ``load`` only); raises OSError on one batch; records what it loaded
    and from which thread."""

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


@pytest.mark.parametrize("sequential", [False, True])
def test_extra_derives_more_of_each_batch_in_the_assemble_stage(dataset, sequential: bool) -> None:
    threads: set[str] = set()

    def extra(batch, device):
        threads.add(threading.current_thread().name)
        return {"seeds": torch.from_numpy(np.array(batch.seeds)).to(device), "hops": len(batch.indptrs)}

    ids = dataset.samples.batch_ids("train", 0)
    loader = BatchLoader(dataset.samples, InMemoryFeatures(dataset.features), ids, dataset.labels,
                         sequential=sequential, extra=extra)
    for lb in loader:
        batch = dataset.samples.batch(lb.batch_id)
        assert lb.extra["seeds"].tolist() == batch.seeds.tolist() and lb.extra["hops"] == batch.num_layers
    assert threads == ({threading.current_thread().name} if sequential else {"strata-assemble"})
    assert next(iter(BatchLoader(dataset.samples, InMemoryFeatures(dataset.features), ids, dataset.labels))).extra == {}


def test_an_unsplit_source_loads_in_the_load_stage(dataset) -> None:
    source = FlakySource(dataset.features)
    list(BatchLoader(dataset.samples, source, [0, 1], dataset.labels))
    assert source.threads == {"strata-load"}


class StagedSource(InMemoryFeatures):
    """A real in-memory source that records which thread ran each stage and how many batches were read and
    not yet assembled; ``assemble_delay_s`` makes the assemble stage the slow one."""

    def __init__(self, features: np.ndarray, reads_ahead: int, assemble_delay_s: float = 0.0) -> None:
        super().__init__(features)
        self.reads_ahead, self.assemble_delay_s = reads_ahead, assemble_delay_s
        self.threads: dict[str, set[str]] = {"read": set(), "assemble": set()}
        self.outstanding = self.max_outstanding = 0
        self._count_lock = threading.Lock()

    @property
    def max_reads_ahead(self) -> int:
        return self.reads_ahead

    def read(self, batch):
        self.threads["read"].add(threading.current_thread().name)
        with self._count_lock:
            self.outstanding += 1
            self.max_outstanding = max(self.max_outstanding, self.outstanding)
        return super().read(batch)

    def assemble(self, read):
        self.threads["assemble"].add(threading.current_thread().name)
        time.sleep(self.assemble_delay_s)
        x = super().assemble(read)
        with self._count_lock:
            self.outstanding -= 1
        return x


@pytest.mark.parametrize("reads_ahead", [1, 3])
def test_stages_run_on_their_own_threads_within_the_read_ahead_bound(dataset, reads_ahead: int) -> None:
    ids = dataset.samples.batch_ids("train", 0)
    source = StagedSource(dataset.features, reads_ahead, assemble_delay_s=0.02)
    loader = BatchLoader(dataset.samples, source, ids, dataset.labels, prefetch=2)
    for lb in loader:
        assert torch.equal(lb.x, torch.from_numpy(dataset.features[dataset.samples.batch(lb.batch_id).nodes]))
    assert source.threads == {"read": {"strata-load"}, "assemble": {"strata-assemble"}}
    # the slow assemble stage lets reads run ahead exactly as far as the source allows
    assert source.max_outstanding == min(reads_ahead, len(ids))
    assert loader.timers["load_busy_s"] > 0 and loader.timers["assemble_busy_s"] >= 0.02 * len(ids)
    # the assemble stage mostly sleeps: busy, but not on a core
    assert 0 < loader.timers["assemble_cpu_s"] < 0.5 * loader.timers["assemble_busy_s"]


def test_packed_chunks_survive_reads_ahead_of_assembly(dataset, packed_dir) -> None:
    from trainer.features import PackedFeatures

    ids = dataset.samples.batch_ids("train", 0)
    with PackedFeatures(packed_dir, dataset.samples, features_path=dataset.features_path) as source:
        assert source.max_reads_ahead == 2  # its chunk buffers (double buffering)
        slow = source.assemble

        def slow_assemble(read):
            time.sleep(0.01)  # let the load stage fill every chunk buffer
            return slow(read)

        source.assemble = slow_assemble  # type: ignore[method-assign]
        for lb in BatchLoader(dataset.samples, source, ids, dataset.labels, prefetch=2):
            nodes = dataset.samples.batch(lb.batch_id).nodes
            assert torch.equal(lb.x, torch.from_numpy(dataset.features[nodes])), lb.batch_id


class OverlappingSource(FeatureSourceBase):
    """A split source whose assemble of batch ``i`` runs while the read of batch ``i + 1`` is in flight (each
    waits for the other), timing its stages as ``TieredSource`` does: each stage adds its own seconds."""

    split = True

    def __init__(self, features: np.ndarray, num_batches: int) -> None:
        self.features, self.feature_dim = features, features.shape[1]
        self.reading = [threading.Event() for _ in range(num_batches + 1)]  # read of the i-th batch started
        self.assembled = [threading.Event() for _ in range(num_batches)]
        self.count = 0

    def read(self, batch):
        t0 = time.perf_counter()
        i, self.count = self.count, self.count + 1
        self.reading[i].set()
        if i > 0:
            assert self.assembled[i - 1].wait(5.0)  # the previous batch's assemble ends during this read
        self.read_s += time.perf_counter() - t0
        return i, batch

    def assemble(self, read):
        t0 = time.perf_counter()
        i, batch = read
        assert self.reading[i + 1].wait(5.0)  # the next batch's read is in flight (the test sets the last)
        time.sleep(0.02)
        self.assemble_s += time.perf_counter() - t0
        self.assembled[i].set()
        return torch.from_numpy(self.features[batch.nodes])


def test_each_stage_times_itself_once_when_assemble_overlaps_read(dataset) -> None:
    """The load stage takes the change of the source's read_s over a read, the assemble stage that of its
    assemble_s: an assemble that ends while a read is in flight is counted once, by the assemble stage."""
    ids = dataset.samples.batch_ids("train", 0)[:4]
    source = OverlappingSource(dataset.features, len(ids))
    source.reading[len(ids)].set()  # no read follows the last batch
    loader = BatchLoader(dataset.samples, source, ids, dataset.labels, prefetch=2)
    assert [lb.batch_id for lb in loader] == ids
    assert source.assemble_s >= 0.02 * len(ids)
    assert loader.timers["assemble_s"] == pytest.approx(source.assemble_s, rel=1e-9)
    assert loader.timers["read_s"] == pytest.approx(source.read_s, rel=1e-9)


def test_a_released_batch_is_done_when_the_consumer_asks_for_the_next(dataset) -> None:
    """Strata's own loops (``release_batches``): a CPU batch's staging block is reused only after the consumer
    asked for the next batch (never under the batch it holds); every lease is settled, an early exit included."""
    ids = dataset.samples.batch_ids("train", 0) * 3
    source = InMemoryFeatures(dataset.features)
    for lb in BatchLoader(dataset.samples, source, ids, dataset.labels, prefetch=2, release_batches=True):
        time.sleep(0.002)  # the stages run ahead meanwhile
        assert torch.equal(lb.x, torch.from_numpy(dataset.features[dataset.samples.batch(lb.batch_id).nodes]))
    pool = source.staging_pool
    assert pool.reused > 0 and pool.lent == 0
    for i, _ in enumerate(BatchLoader(dataset.samples, source, ids, dataset.labels, prefetch=2,
                                      release_batches=True)):
        if i == 2:
            break
    assert pool.lent == 0  # the held batch and those queued or in flight were released


@pytest.mark.parametrize("sequential", [False, True])
def test_kept_batches_are_never_reused(dataset, sequential: bool) -> None:
    """By default (a user's own loop, ``pipelines.batches``) every batch's tensors may outlive the loop."""
    ids = dataset.samples.batch_ids("train", 0) * 3
    source = InMemoryFeatures(dataset.features)
    kept = list(BatchLoader(dataset.samples, source, ids, dataset.labels, sequential=sequential))
    for lb in kept:
        assert torch.equal(lb.x, torch.from_numpy(dataset.features[dataset.samples.batch(lb.batch_id).nodes]))
    assert source.staging_pool.reused == 0 and source.staging_pool.lent == 0


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
    assert "load" in frames and "_loader" in frames  # the load stage's own traceback survives
    assert not loader.is_running


def test_early_exit_stops_the_reader(dataset) -> None:
    ids = dataset.samples.batch_ids("train", 0)
    source = FlakySource(dataset.features, delay_s=0.01)
    loader = BatchLoader(dataset.samples, source, ids, dataset.labels, prefetch=2)
    for i, _lb in enumerate(loader):
        if i == 1:
            break
    assert not loader.is_running  # generator close -> stop event -> join
    assert len(source.loaded) <= 2 + 2 * 2 + 2  # consumed + two queues + one in each stage
    n = len(source.loaded)
    time.sleep(0.1)
    assert len(source.loaded) == n  # nothing reads after shutdown
    assert [lb.batch_id for lb in loader] == ids  # a new iteration starts over


def test_loader_rejects_bad_arguments(dataset) -> None:
    source = FlakySource(dataset.features)
    with pytest.raises(ValueError, match="'prefetch' expected >= 1"):
        BatchLoader(dataset.samples, source, [0], dataset.labels, prefetch=0)
    with pytest.raises(ValueError, match="'labels' expected a 1-D signed integer array"):
        BatchLoader(dataset.samples, source, [0], dataset.labels.astype(np.float32))


def test_loader_gives_int64_labels_from_narrow_ones(dataset) -> None:
    ids = dataset.samples.batch_ids("train", 0)
    wide = list(BatchLoader(dataset.samples, InMemoryFeatures(dataset.features), ids, dataset.labels))
    narrow = list(BatchLoader(dataset.samples, InMemoryFeatures(dataset.features), ids, dataset.labels.astype(np.int8)))
    assert [lb.y.dtype for lb in narrow] == [torch.int64] * len(ids)
    assert [lb.y.tolist() for lb in narrow] == [lb.y.tolist() for lb in wide]


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


@pytest.mark.gpu
@requires_cuda
def test_pipelined_packed_loader_on_cuda_matches_cpu(dataset, packed_dir) -> None:
    """Every tier at once on CUDA, pipelined with reads ahead: the pinned node-order staging block goes to the
    device in one copy and the GPU-cache rows are written over it, all on the assembler's side stream; the
    consumer, waiting on each batch's event, sees exactly the CPU batches."""
    ids = dataset.samples.batch_ids("train", 0)
    path = dataset.features_path
    with PackedFeatures(packed_dir, dataset.samples, features_path=path) as on_cpu, \
            PackedFeatures(packed_dir, dataset.samples, device="cuda", features_path=path) as on_gpu:
        cpu = [(lb.batch_id, lb.x.clone()) for lb in BatchLoader(dataset.samples, on_cpu, ids, dataset.labels)]
        gpu = BatchLoader(dataset.samples, on_gpu, ids, dataset.labels, prefetch=2, device="cuda")
        for (batch_id, x), lb in zip(cpu, gpu, strict=True):
            assert lb.batch_id == batch_id and lb.x.is_cuda and lb.ready is not None
            assert torch.equal(lb.x.cpu(), x), batch_id
        assert on_gpu.rows_by_tier["gpu"] > 0 and on_gpu.rows_by_tier["packed"] > 0


@pytest.mark.parametrize("fits", [1, 2])
def test_batches_in_flight_stay_within_max_bytes(dataset, fits: int) -> None:
    """A loader whose consumer is slow reads ahead only as far as ``max_bytes`` of rows allows (a batch alone
    always passes), and yields every batch in order."""
    ids = dataset.samples.batch_ids("train", 0)
    row_bytes = dataset.features.shape[1] * 4
    largest = max(len(dataset.samples.batch(i).nodes) for i in ids) * row_bytes
    source = FlakySource(dataset.features)
    loader = BatchLoader(dataset.samples, source, ids, dataset.labels, prefetch=4, max_bytes=fits * largest)
    seen, ahead = [], []
    for lb in loader:
        time.sleep(0.05)  # a slow step: an unbounded loader would be prefetch x 2 + 1 batches ahead by now
        ahead.append(len(source.loaded) - len(seen))  # batches loaded but not yet done, this one included
        seen.append(lb.batch_id)
        assert loader._gate is not None and loader._gate.held <= max(fits * largest, largest)
    assert seen == ids and not loader.is_running
    assert max(ahead) <= fits < len(ids)
    with pytest.raises(ValueError, match="'max_bytes' expected >= 1 or None"):
        BatchLoader(dataset.samples, source, ids, dataset.labels, max_bytes=0)
