"""The changeset store (Ginex's pack layout): superbatches of the trace, the files against the kernel, the
reader's validation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from storage_kernels import kernels
from storage_kernels.changesets import (
    CHANGESET_FILES,
    HITS,
    META,
    SUPERBATCH_PTR,
    ChangesetStore,
    trace_superbatches,
    write_changesets,
)
from storage_kernels.sampleset import SampleSet
from storage_kernels.store import ArtifactStore
from tests.trainer.synth import make_dataset


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> SampleSet:
    return make_dataset(tmp_path_factory.mktemp("changesets-data"), num_nodes=200, batch_size=16, epochs=2).samples


def _write(root: Path, samples: SampleSet, rows: int, superbatch_size: int, threads: int = 0,
           memory_bytes: int | None = None):
    store = ArtifactStore(root, catalog=False)
    with store.builder("unit", "pack", f"r{rows}s{superbatch_size}t{threads}m{memory_bytes}", {}, {}) as builder:
        stats = write_changesets(builder, samples, 200, rows, superbatch_size, num_threads=threads,
                                 memory_bytes=memory_bytes)
        artifact = builder.publish()
    return artifact.path, stats


def test_superbatches_cut_each_sampled_epoch(samples: SampleSet) -> None:
    epochs = [samples.batch_ids("train", e) for e in range(samples.epochs)]
    trace, ptr = trace_superbatches(samples, 0)
    assert trace.tolist() == epochs[0] + epochs[1]
    assert ptr.tolist() == [0, len(epochs[0]), len(epochs[0]) + len(epochs[1])]
    trace, ptr = trace_superbatches(samples, 4)
    n0 = len(epochs[0])  # 8 batches of 16 train nodes (120 of them) per epoch
    assert ptr.tolist() == [0, 4, n0, n0 + 4, 2 * n0]
    with pytest.raises(ValueError, match=r"'plan.superbatch_size' expected >= 0 \(got -1\)"):
        trace_superbatches(samples, -1)


@pytest.mark.parametrize("rows,superbatch_size,threads", [(30, 3, 1), (30, 0, 2), (0, 2, 0), (500, 5, 0)])
def test_files_hold_each_superbatch_simulation(tmp_path: Path, samples: SampleSet, rows: int, superbatch_size: int,
                                               threads: int) -> None:
    path, stats = _write(tmp_path, samples, rows, superbatch_size, threads)
    store = ChangesetStore(path, samples.num_batches)
    trace, ptr = trace_superbatches(samples, superbatch_size)
    np.testing.assert_array_equal(store.trace, trace)
    np.testing.assert_array_equal(store.superbatch_ptr, ptr)
    hits = total = 0
    for b in range(len(ptr) - 1):
        batches = [np.asarray(samples.batch(int(i)).nodes) for i in trace[ptr[b] : ptr[b + 1]]]
        bp = np.zeros(len(batches) + 1, np.int64)
        np.cumsum([len(x) for x in batches], out=bp[1:])
        want = kernels.belady_changesets(bp, np.concatenate(batches), num_nodes=200, num_entries=rows)
        np.testing.assert_array_equal(store.init(b), want.init_ids)
        for i, t in enumerate(range(ptr[b], ptr[b + 1])):
            got = store.update(t)
            lo, hi = want.update_ptr[i], want.update_ptr[i + 1]
            for g, w in zip(got, (want.in_ids, want.out_ids, want.in_positions), strict=True):
                np.testing.assert_array_equal(g, w[lo:hi])
            assert store.position[trace[t]] == t and store.superbatch[t] == b
        np.testing.assert_array_equal(store.hits[ptr[b] : ptr[b + 1]], want.hits)
        hits += int(want.hits.sum())
        total += int(bp[-1])
    assert stats["predicted_hit_rate"] == pytest.approx(hits / total)
    assert stats["trace_rows"] == total and stats["cache_rows"] == rows
    assert (hits > 0) == (rows > 0)


def test_a_memory_bound_runs_fewer_superbatches_at_once_with_the_same_files(tmp_path: Path, samples: SampleSet,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from storage_kernels import changesets

    live, most, lock = [0], [0], threading.Lock()
    simulate = changesets._simulate

    def counted(*args, **kwargs):  # the real simulation, counting how many run at once
        with lock:
            live[0] += 1
            most[0] = max(most[0], live[0])
        try:
            return simulate(*args, **kwargs)
        finally:
            with lock:
                live[0] -= 1

    monkeypatch.setattr(changesets, "_simulate", counted)
    free_path, free_stats = _write(tmp_path / "a", samples, 30, 2, threads=4)
    bound_path, bound_stats = _write(tmp_path / "b", samples, 30, 2, threads=4, memory_bytes=1)
    assert most[0] >= 1 and free_stats == bound_stats
    for name in CHANGESET_FILES:
        assert (free_path / name).read_bytes() == (bound_path / name).read_bytes(), name
    most[0] = 0
    _write(tmp_path / "c", samples, 30, 2, threads=4, memory_bytes=1)
    assert most[0] == 1  # one superbatch at a time when even one exceeds the bound


def test_reader_refuses_missing_stale_or_inconsistent_files(tmp_path: Path, samples: SampleSet) -> None:
    path, _ = _write(tmp_path, samples, 30, 3)
    with pytest.raises(ValueError, match=r"ginex_trace.npy' expected distinct batch ids below 3"):
        ChangesetStore(path, 3)
    meta = json.loads((path / META).read_text())
    (path / META).chmod(0o644)
    (path / META).write_text(json.dumps({**meta, "format": 0}))
    with pytest.raises(ValueError, match=r"ginex_meta.json' expected format 1 \(got 0\); rebuild"):
        ChangesetStore(path, samples.num_batches)
    (path / META).write_text(json.dumps(meta))
    (path / HITS).chmod(0o644)
    np.save(path / HITS, np.zeros(3, np.int64))
    with pytest.raises(ValueError, match=r"'.*ginex_hits.npy' expected \d+ entries, one per trace position"):
        ChangesetStore(path, samples.num_batches)
    (path / SUPERBATCH_PTR).unlink()
    with pytest.raises(FileNotFoundError, match=r"'ginex' expected .*ginex_superbatch_ptr.npy"):
        ChangesetStore(path, samples.num_batches)
