"""The invariants of the ``plan`` artifact: the caches within the configured GPU and CPU budgets
(``budgets_respected``) and every sampled node in a tier, the cache lists filling their rows
(``sampled_nodes_tiered``)."""

from __future__ import annotations

import numpy as np

from pipelines.checks.base import CheckInputs, Finding, StageCheck, _check_range, _chunks, _first
from storage_kernels.packstore import Tier

__all__ = ["BUDGETS_RESPECTED", "SAMPLED_NODES_TIERED", "check_plan_budgets", "check_plan_tiers"]

# a plan's tiers: never read, GPU cache, CPU cache, packed chunk, feature file (eval only); DISK_CACHE is pack's
_TIERS = tuple(int(t) for t in Tier if t != Tier.DISK_CACHE)


def check_plan_budgets(
    gpu_rows: int, cpu_rows: int, row_bytes: int, gpu_budget: int, cpu_budget: int
) -> Finding:
    """Cache rows x row bytes within each tier's budget."""
    f = Finding()
    for tier, rows, budget in (("gpu", gpu_rows, gpu_budget), ("cpu", cpu_rows, cpu_budget)):
        used = rows * row_bytes
        f.facts.update({f"{tier}_cache_bytes": used, f"{tier}_budget_bytes": budget})
        if used > budget:
            f.fail(f"'{tier}_nodes.npy' expected at most {budget} bytes of cache "
                   f"(got {rows} rows x {row_bytes} B = {used})")
    return f


def check_plan_tiers(
    tier: np.ndarray, slot: np.ndarray, gpu_nodes: np.ndarray, cpu_nodes: np.ndarray, sampled: np.ndarray
) -> Finding:
    """Every sampled node is in exactly one tier; cache node lists match ``tier`` and fill their slots."""
    f = Finding()
    n = len(tier)
    t = np.asarray(tier)
    counts = {v: int(np.count_nonzero(t == v)) for v in _TIERS}
    f.facts.update({"gpu_rows": counts[Tier.GPU], "cpu_rows": counts[Tier.CPU], "packed_nodes": counts[Tier.PACKED],
                    "eval_only_nodes": counts[Tier.FILE], "unread_nodes": counts[Tier.NONE]})
    if sum(counts.values()) != n:
        bad = _first(~np.isin(t, _TIERS))
        f.fail(f"'tier[{bad}]' expected one of {_TIERS} (got {int(t[bad])})")
        return f
    for code, name, listed in ((Tier.GPU, "gpu_nodes", gpu_nodes), (Tier.CPU, "cpu_nodes", cpu_nodes)):
        listed = np.asarray(listed)
        _check_range(f, name, listed, 0, n)
        if not f.passed:
            return f
        if len(listed) != counts[code] or (t[listed] != code).any():
            f.fail(f"'{name}.npy' expected exactly the {counts[code]} nodes of tier {code} (got {len(listed)} "
                   f"entries, {int(np.count_nonzero(t[listed] != code))} in another tier)")
            return f
        slots = np.sort(np.asarray(slot)[listed])
        if not np.array_equal(slots, np.arange(len(listed))):
            f.fail(f"'slot' of {name} expected rows 0..{len(listed) - 1} of the cache, each once")
            return f
    for start, stop in _chunks(len(sampled)):
        ids = np.asarray(sampled[start:stop])
        _check_range(f, "samples nodes", ids, 0, n)
        if not f.passed:
            return f
        got = t[ids]
        if (got < 0).any():
            i = _first(got < 0)
            f.fail(f"'tier[{int(ids[i])}]' expected a tier >= 0 for a sampled node (got {int(got[i])})")
            return f
    return f


def _budgets_respected(c: CheckInputs) -> Finding:
    from pipelines.config import PlanConfig

    art = c.artifact
    features = c.upstream("reorder").array("features.npy")
    row_bytes = int(features.shape[1]) * features.dtype.itemsize
    # recomputed from the plan's parameters, not its stats
    params = {k: v for k, v in art.params.items() if k in PlanConfig.model_fields}
    chosen = (art.stats.get("auto") or {}).get("settings", {})  # policy=auto: the plan settings it chose
    params.update({k.split(".", 1)[1]: v for k, v in chosen.items() if k.startswith("plan.")})
    plan_cfg = PlanConfig.model_validate(params)
    budgets = plan_cfg.budgets(int(features.shape[0]) * row_bytes)
    return check_plan_budgets(len(art.array("gpu_nodes.npy")), len(art.array("cpu_nodes.npy")), row_bytes,
                              budgets["gpu"], budgets["cpu"])


def _sampled_nodes_tiered(c: CheckInputs) -> Finding:
    art = c.artifact
    return check_plan_tiers(art.array("tier.npy"), art.array("slot.npy"), art.array("gpu_nodes.npy"),
                            art.array("cpu_nodes.npy"), c.upstream("sample").array("nodes.npy"))


BUDGETS_RESPECTED = StageCheck("budgets_respected", "Cache rows x row bytes within the GPU and CPU budgets the "
                               "configuration asked for.", _budgets_respected)
SAMPLED_NODES_TIERED = StageCheck("sampled_nodes_tiered", "Every node the samples read has a tier >= 0; the cache "
                                  "node lists are exactly the tier-0/1 nodes and fill their cache rows.",
                                  _sampled_nodes_tiered)
