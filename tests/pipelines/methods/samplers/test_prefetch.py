"""Sampling with each hop's rows read ahead gives the sampler's own blocks, for every registered sampler, on a
memory-mapped CSR; the sample stage reads ahead only when the CSR outgrows the memory budget."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.core.graphio import GraphArrays
from pipelines.methods.samplers import SAMPLERS
from pipelines.methods.samplers.prefetch import csr_outgrows_memory, sample_prefetched
from storage_kernels import kernels
from tests.storage_kernels.reference import random_graph


@pytest.fixture
def mapped(tmp_path) -> GraphArrays:
    indptr, indices = random_graph(4000, 12, seed=5)
    np.save(tmp_path / "indptr.npy", indptr)
    np.save(tmp_path / "indices.npy", indices)
    empty = np.zeros(0, dtype=np.int64)
    csr = (np.load(tmp_path / f"{name}.npy", mmap_mode="r") for name in ("indptr", "indices"))
    return GraphArrays(*csr, np.zeros((4000, 1), np.float32), np.zeros(4000, np.int64), empty, empty, empty)


@pytest.mark.parametrize("name", sorted(SAMPLERS.names()))
@pytest.mark.parametrize("fanouts", [[5], [5, 4], [3, -1, 2], [10, 10, 10]])
def test_read_ahead_gives_the_samplers_blocks(mapped, monkeypatch, name, fanouts):
    sampler = SAMPLERS.get(name)
    advised = []
    real = kernels.prefetch_rows
    monkeypatch.setattr(kernels, "prefetch_rows", lambda *a: advised.append(real(*a)) or advised[-1])
    seeds = np.random.default_rng(len(fanouts)).choice(4000, 64, replace=False)
    fanouts = np.asarray(fanouts, dtype=np.int64)
    want = sampler.sample(mapped, seeds, fanouts, 99, 2)
    got = sample_prefetched(sampler, mapped, seeds, fanouts, 99, 2)
    assert len(advised) == len(fanouts) and all(a > 0 for a in advised)  # the seeds', then each hop's
    for a, b in zip(got, want, strict=True):
        if isinstance(a, list):
            assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
        else:
            np.testing.assert_array_equal(a, b)
    advised.clear()
    sample_prefetched(sampler, mapped, seeds, fanouts, 99, 2, prefetch=False)
    assert advised == []


def test_read_ahead_only_when_the_csr_outgrows_the_budget(mapped):
    csr = mapped.indptr.nbytes + mapped.indices.nbytes
    assert csr_outgrows_memory(mapped, csr - 1)
    assert not csr_outgrows_memory(mapped, csr)
    assert not csr_outgrows_memory(mapped, None)  # this machine's memory holds a few hundred KiB
