"""The streamed tier helpers (``pipelines.methods.policies.tiers``) against their whole-array NumPy references:
counting by ``kernels.csr_count`` in chunks, the evaluation mask, and the top-k ranking from a histogram."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.methods.policies import tiers
from pipelines.methods.policies.tiers import access_frequency, accessed_mask, assign_tiers, ranked_nodes
from storage_kernels.packstore import Tier


def _reference_assign(freq, gpu_rows, cpu_rows, eval_nodes):
    accessed = np.flatnonzero(freq > 0)
    ranked = accessed[np.argsort(-freq[accessed], kind="stable")]
    gpu, cpu = np.sort(ranked[:gpu_rows]), np.sort(ranked[gpu_rows : gpu_rows + cpu_rows])
    tier = np.full(len(freq), Tier.NONE, dtype=np.int8)
    if eval_nodes is not None:
        tier[eval_nodes] = Tier.FILE
    tier[accessed] = Tier.PACKED
    tier[cpu], tier[gpu] = Tier.CPU, Tier.GPU
    slot = np.full(len(freq), -1, dtype=np.int64)
    slot[gpu], slot[cpu] = np.arange(len(gpu)), np.arange(len(cpu))
    return tier, slot, gpu, cpu


@pytest.mark.parametrize("chunk", [1, 5, 1 << 24])
def test_counts_and_masks_match_bincount(monkeypatch, chunk) -> None:
    monkeypatch.setattr(tiers, "_TRACE_CHUNK", chunk)
    rng = np.random.default_rng(chunk)
    n = 300
    nodes = rng.integers(0, n, 2000)
    ranges = [(a, b) for a, b in zip(range(0, 2000, 37), [*range(37, 2000, 37), 2000], strict=True)]
    want = sum(np.bincount(nodes[a:b], minlength=n) for a, b in ranges)
    np.testing.assert_array_equal(access_frequency(nodes, ranges, n), want)
    np.testing.assert_array_equal(accessed_mask(nodes, ranges[:3], n), np.bincount(nodes[:111], minlength=n) > 0)
    with pytest.raises(IndexError):
        access_frequency(np.array([0, n]), [(0, 2)], n)


@pytest.mark.parametrize("chunk", [3, 1 << 24])
@pytest.mark.parametrize(("gpu_rows", "cpu_rows"), [(0, 0), (0, 10), (4, 17), (50, 400), (0, 10_000)])
def test_assign_tiers_matches_the_full_sort(monkeypatch, chunk, gpu_rows, cpu_rows) -> None:
    monkeypatch.setattr(tiers, "_TRACE_CHUNK", chunk)
    rng = np.random.default_rng(gpu_rows + cpu_rows)
    freq = rng.integers(0, 4, 1000) * rng.integers(0, 2, 1000)  # many ties, many unread
    eval_mask = rng.random(1000) < 0.5
    got = assign_tiers(freq, gpu_rows, cpu_rows, eval_mask)
    want = _reference_assign(freq, gpu_rows, cpu_rows, np.flatnonzero(eval_mask))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
        assert g.dtype == w.dtype
    assert ranked_nodes(np.zeros(5, np.int64), 3).tolist() == []
