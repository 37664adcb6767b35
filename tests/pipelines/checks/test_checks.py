"""The asset checks' invariants on hand-made arrays: each passes on a valid layout and names the first problem."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines import checks
from pipelines.checks import (
    check_csr,
    check_packed_addresses,
    check_packed_chunks,
    check_partition,
    check_permutation,
    check_plan_budgets,
    check_plan_tiers,
    check_sample_blocks,
    check_sample_seeds,
)
from pipelines.checks import graph as graph_checks

# A hand-drawn 4-node graph: 0-1, 0-2, 1-2, 2-3 (symmetrised).
INDPTR = np.array([0, 2, 4, 7, 8], dtype=np.int64)
INDICES = np.array([1, 2, 0, 2, 0, 1, 3, 2], dtype=np.int64)


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stream in chunks of 3 so the chunk boundaries are exercised by these tiny arrays."""
    monkeypatch.setattr(graph_checks, "_CHUNK", 3)  # where check_features_finite reads it


def test_csr_valid() -> None:
    finding = check_csr(INDPTR, INDICES, 4)
    assert finding.passed, finding.problems
    assert finding.facts["max_degree"] == 3


@pytest.mark.parametrize(
    ("indptr", "indices", "message"),
    [
        (np.array([1, 2, 4, 7, 8]), INDICES, "'indptr[0]' expected 0 (got 1)"),
        (np.array([0, 2, 4, 7, 9]), INDICES, "'indptr[-1]' expected len(indices) = 8 (got 9)"),
        (np.array([0, 5, 4, 7, 8]), INDICES, "non-decreasing"),
        (INDPTR, np.array([1, 2, 0, 2, 0, 1, 3, 4]), "'indices[7]' expected a value in [0, 4) (got 4)"),
        (INDPTR, np.array([1, 2, 0, 2, -1, 1, 3, 2]), "'indices[4]'"),
    ],
)
def test_csr_invalid(indptr: np.ndarray, indices: np.ndarray, message: str) -> None:
    finding = check_csr(indptr.astype(np.int64), indices.astype(np.int64), 4)
    assert not finding.passed
    assert message in finding.problems[0]


def test_csr_wrong_node_count() -> None:
    assert "expected 6 entries for 5 nodes" in check_csr(INDPTR, INDICES, 5).problems[0]


def test_permutation() -> None:
    perm = np.array([2, 0, 3, 1])
    inverse = np.argsort(perm)
    assert check_permutation(perm, inverse).passed
    bad = check_permutation(np.array([2, 0, 2, 1]), inverse)
    assert not bad.passed and "inverse[perm[" in bad.problems[0]
    assert "expected a value in [0, 4)" in check_permutation(np.array([2, 0, 4, 1]), inverse).problems[0]
    assert "expected 4 entries" in check_permutation(perm, inverse[:3]).problems[0]


def test_partition() -> None:
    parts = np.array([0, 1, 0, 1, 1], dtype=np.int32)
    part_ptr = np.array([0, 2, 5])
    part_nodes = np.array([0, 2, 1, 3, 4])
    assert check_partition(parts, part_ptr, part_nodes, 5).passed
    duplicated = check_partition(parts, part_ptr, np.array([0, 2, 1, 3, 3]), 5)
    assert "exactly once" in duplicated.problems[0]
    wrong_owner = check_partition(np.array([0, 1, 1, 1, 1], dtype=np.int32), part_ptr, part_nodes, 5)
    assert "'parts[2]' expected 0" in wrong_owner.problems[0]
    assert "part_ptr.npy" in check_partition(parts, np.array([0, 2, 4]), part_nodes, 5).problems[0]


def _two_batches() -> dict[str, np.ndarray]:
    """Two batches over the 4-node graph, one hop each (fanout all)."""
    # batch 0: seeds [0], nodes [0, 1, 2]; hop 0: 0 -> positions 1, 2.
    # batch 1: seeds [3, 1], nodes [3, 1, 2, 0]; hop 0: 3 -> 2; 1 -> 3, 2.
    return {
        "nodes": np.array([0, 1, 2, 3, 1, 2, 0]),
        "indptr": np.array([0, 2, 0, 1, 3]),
        "cols": np.array([1, 2, 2, 3, 2]),
        "node_offset": np.array([0, 3]),
        "indptr_offset": np.array([0, 2]),
        "cols_offset": np.array([0, 2]),
        "hop_counts": np.array([[1, 3], [2, 4]]),
        "edge_counts": np.array([[2], [3]]),
        "num_seeds": np.array([1, 2]),
    }


def _blocks(b: dict[str, np.ndarray]) -> checks.Finding:
    return check_sample_blocks(b["cols"], b["indptr"], len(b["nodes"]), b["node_offset"], b["indptr_offset"],
                               b["cols_offset"], b["hop_counts"], b["edge_counts"])


def test_sample_blocks() -> None:
    b = _two_batches()
    assert _blocks(b).passed, _blocks(b).problems
    b["cols"] = np.array([1, 2, 2, 4, 2])
    assert "'cols' of batch 1 hop 0 expected positions < 4 (got 4 at cols[3])" in _blocks(b).problems[0]
    b = _two_batches()
    b["indptr"] = np.array([0, 2, 0, 1, 2])
    assert "batch 1 hop 0 expected to end at its edge count 3 (got 2)" in _blocks(b).problems[0]
    b = _two_batches()
    b["cols_offset"] = np.array([0, 1])
    assert "cols.npy" in _blocks(b).problems[0]


def test_sample_seeds() -> None:
    b = _two_batches()
    split = np.array(["train", "train"], dtype=object)
    epoch = np.array([0, 0])
    splits = {"train": np.array([0, 1, 3]), "val": np.array([2]), "test": np.array([], dtype=np.int64)}
    assert check_sample_seeds(b["nodes"], b["node_offset"], b["num_seeds"], split, epoch, splits).passed
    splits["train"] = np.array([0, 3])
    bad = check_sample_seeds(b["nodes"], b["node_offset"], b["num_seeds"], split, epoch, splits)
    assert "1 not in the split, e.g. 1" in bad.problems[0]


def test_plan_budgets() -> None:
    assert check_plan_budgets(2, 3, 128, 256, 384).passed
    bad = check_plan_budgets(2, 4, 128, 256, 384)
    assert "'cpu_nodes.npy' expected at most 384 bytes of cache (got 4 rows x 128 B = 512)" in bad.problems[0]


def test_plan_tiers() -> None:
    tier = np.array([0, 1, 2, -1, 3], dtype=np.int8)
    slot = np.array([0, 0, -1, -1, -1])
    sampled = np.array([0, 1, 2, 4, 1])
    assert check_plan_tiers(tier, slot, np.array([0]), np.array([1]), sampled).passed
    assert "'tier[3]' expected a tier >= 0" in check_plan_tiers(tier, slot, np.array([0]), np.array([1]),
                                                                 np.array([3])).problems[0]
    assert "cpu_nodes.npy" in check_plan_tiers(tier, slot, np.array([0]), np.array([2]), sampled).problems[0]
    bad_tier = np.array([0, 1, 2, 7, 3], dtype=np.int8)
    assert "'tier[3]' expected one of" in check_plan_tiers(bad_tier, slot, np.array([0]), np.array([1]),
                                                           sampled).problems[0]


def test_packed_addresses() -> None:
    # Batch 0 (train): nodes 0 (gpu), 1 (cpu), 2 (packed row 0). Batch 1 (eval): node 2 and 4 from the file.
    nodes = np.array([0, 1, 2, 2, 4])
    plan_tier = np.array([0, 1, 2, -1, 3], dtype=np.int8)
    addr_tier = np.array([0, 1, 2, 3, 3], dtype=np.int8)
    addr_slot = np.array([0, 0, 0, 2, 4])
    args = (nodes, plan_tier, np.array([0, 3]), np.array([3, 2]), np.array([1, 0]), 1, 1)
    assert check_packed_addresses(addr_tier, addr_slot, *args).passed
    out_of_chunk = check_packed_addresses(addr_tier, np.array([0, 0, 1, 2, 4]), *args)
    assert "'addr_slot[2]' (batch 0, tier 2) expected a row in [0, 1) (got 1)" in out_of_chunk.problems[0]
    wrong_tier = check_packed_addresses(np.array([1, 1, 2, 3, 3], dtype=np.int8), addr_slot, *args)
    assert "consistent with the plan's tier 0" in wrong_tier.problems[0]


def test_packed_chunks() -> None:
    rows = np.array([3, 0, 2])
    assert check_packed_chunks(np.array([0, 4096, 4096]), rows, 1000, 8192).passed
    assert "multiple of 4096" in check_packed_chunks(np.array([0, 4000, 4096]), rows, 1000, 8192).problems[0]
    assert "expected not to overlap" in check_packed_chunks(np.array([0, 0, 0]), rows, 2000, 16384).problems[0]
    assert "to end within" in check_packed_chunks(np.array([0, 8192, 8192]), rows, 1500, 8192).problems[0]


def test_same_graph_accepts_a_relabelling_and_rejects_a_changed_edge():
    from pipelines.checks import check_same_graph
    from tests.pipelines.stage_fixtures import random_symmetric_csr

    indptr, indices = random_symmetric_csr(300, 6, 1)
    perm = np.random.default_rng(0).permutation(300)
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(300)
    new_deg = np.diff(indptr)[perm]
    new_ptr = np.concatenate([[0], np.cumsum(new_deg)])
    new_idx = np.concatenate([inverse[indices[indptr[o] : indptr[o + 1]]] for o in perm])
    assert check_same_graph(indptr, indices, new_ptr, new_idx, perm, max_sample_edges=100).passed
    broken = new_idx.copy()
    broken[0] = (broken[0] + 1) % 300
    finding = check_same_graph(indptr, indices, new_ptr, broken, perm)
    assert not finding.passed and "neighbours of new node 0" in finding.problems[0]


def test_balance_check_names_the_oversized_part():
    from pipelines.checks import check_balance

    assert check_balance(np.repeat(np.arange(4), 25), 4, 0.05).passed
    parts = np.concatenate([np.zeros(40, dtype=np.int32), np.repeat(np.arange(1, 4), 20)])
    finding = check_balance(parts, 4, 0.05)
    assert not finding.passed and "'part 0'" in finding.problems[0]


def test_features_must_be_finite() -> None:
    from pipelines.checks import check_features_finite

    good = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert check_features_finite(good).passed
    bad = good.copy()
    bad[2, 1], bad[3, 0] = np.nan, np.inf
    finding = check_features_finite(bad, "x/features.npy")
    assert not finding.passed and finding.facts["non_finite_values"] == 2
    assert finding.problems[0] == ("'x/features.npy' expected finite values (got 2 NaN/inf; the first at row 2, "
                                   "column 1: nan)")
