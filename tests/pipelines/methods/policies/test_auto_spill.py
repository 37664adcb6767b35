"""``auto``'s candidate plans on disk (``pipelines.methods.policies.auto.spill``): what comes back is the plan."""

from __future__ import annotations

import numpy as np

from pipelines.methods.policies.auto.spill import PlanSpill
from pipelines.methods.policies.inputs import TierPlan


def _plan(seed: int) -> TierPlan:
    rng = np.random.default_rng(seed)
    n = 50
    return TierPlan(rng.integers(-1, 4, n).astype(np.int8), rng.integers(-1, 9, n), np.arange(3), np.arange(3, 9),
                    rng.integers(0, 5, n), {"seed": seed}, {"phys_part.npy": rng.integers(0, 4, n).astype(np.int32)})


def test_plans_come_back_whole_and_dropped_ones_leave_no_file(tmp_path) -> None:
    spill = PlanSpill(tmp_path)
    spill.put(0, _plan(0))
    spill.put(1, _plan(1))
    spill.drop(0)
    assert not list(spill.dir.glob("0-*"))
    got, want = spill.take(1), _plan(1)
    spill.close()  # the mappings taken stay readable
    assert not spill.dir.exists()
    for name in ("tier", "slot", "gpu_nodes", "cpu_nodes", "frequency"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
        assert getattr(got, name).dtype == getattr(want, name).dtype
    assert got.stats == {"seed": 1} and list(got.arrays) == ["phys_part.npy"]
    np.testing.assert_array_equal(got.arrays["phys_part.npy"], want.arrays["phys_part.npy"])
