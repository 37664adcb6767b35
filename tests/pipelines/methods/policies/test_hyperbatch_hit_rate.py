"""``policy=hyperbatch``'s predicted hit rate is what training measures (``train.epochs == sample.epochs``), with
the hotset holding part of the rows training reads and with room for all of them: the plan replays the feature
source's decayed counters and refreshes, which replace the planned hotset after the first epoch."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.methods.policies.hyperbatch import simulate_hotset
from pipelines.runner import StageRunner
from storage_kernels.store import ArtifactStore

BASE = ["policy=hyperbatch", "sample.epochs=3", "train.epochs=3", "sample.batch_size=64", "train.device=cpu",
        "train.hidden_dim=16", "partition.num_parts=4", "plan.hyperbatch_bytes=65536"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> ArtifactStore:
    return StrataPaths.at(tmp_path_factory.mktemp("hb-hits")).store()


def _run(store: ArtifactStore, *overrides: str) -> tuple[dict, dict]:
    cfg = PipelineConfig.load(dataset="tiny", overrides=[*BASE, *overrides])
    results = {r.artifact.stage: r.artifact for r in StageRunner(cfg, store).run_until("train")}
    return results["plan"].stats, results["train"].stats


PART = "plan.cpu_cache_fraction=0.3"  # the hotset holds about a third of the rows training reads
ALL = "plan.cpu_cache_fraction=1.0"  # room for every row training reads


@pytest.mark.parametrize("overrides", [(PART,), (ALL,),
                                       ("plan.cpu_cache_fraction=0.2", "plan.hotset_decay=0.3",
                                        "plan.hotset_refresh_epochs=2")])
def test_training_measures_the_predicted_hit_rate(store: ArtifactStore, overrides: tuple[str, ...]) -> None:
    plan, train = _run(store, *overrides)
    measured = train["cache_hit_rate"]
    assert 0 < measured < 1
    assert measured == pytest.approx(plan["predicted_hit_rate"], abs=1e-3)
    assert plan["predicted_hit_rate_cpu"] == plan["predicted_hit_rate"]
    # the planned hotset's share of the accesses (the prediction before the refreshes were replayed) misses
    assert abs(plan["planned_hotset_hit_rate"] - measured) > 2e-3


def test_the_regimes_are_the_ones_named(store: ArtifactStore) -> None:
    part, _ = _run(store, PART)
    assert part["cpu_cache_rows"] < part["accessed_nodes"] // 2
    full, _ = _run(store, ALL)
    assert full["cpu_budget_bytes"] // full["row_bytes"] >= full["accessed_nodes"] == full["cpu_cache_rows"]
    assert full["planned_hotset_hit_rate"] == 1.0 > full["predicted_hit_rate"]  # the refreshes evict read rows


def test_simulation_by_hand() -> None:
    """Three epochs over four nodes, a one-row hotset: the refresh follows the decayed counters."""
    nodes = np.array([0, 1, 0, 2, 2, 3, 2, 3, 1, 3], dtype=np.int64)
    epochs = [[(0, 2), (2, 4)], [(4, 6), (6, 8)], [(8, 10)]]  # reads 0,1,0,2 | 2,3,2,3 | 1,3
    indptr = np.arange(5)  # degree 1 each
    hits, accesses = simulate_hotset(nodes, epochs, indptr, np.array([0]), 1, 0.5, 1)
    # epoch 0 with the planned {0}: 2 hits; counters 0:2 1:1 2:1 -> {0}; epoch 1 reads no 0; counters
    # 0:1 1:0.5 2:2.5 3:2 -> {2}; epoch 2 reads 1, 3
    assert (hits, accesses) == ([2, 0, 0], [4, 4, 2])
    never, _ = simulate_hotset(nodes, epochs, indptr, np.array([3]), 1, 0.5, 0)  # no refresh: {3} throughout
    assert never == [0, 2, 1]
    weighed, _ = simulate_hotset(nodes, epochs, np.array([0, 1, 10, 11, 12]), np.array([0]), 1, 0.5, 1)
    assert weighed == [2, 0, 1]  # degree 9 puts node 1 (counter 1 after epoch 0) first from epoch 1 on
