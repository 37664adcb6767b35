"""One memory budget for a whole run (``memory_budget``): the settings it sizes, and the check that the
resident buffers a configuration asks for fit it.

``memory_budget = B`` is the RAM a run may hold of the graph's data: caches, read buffers, the page cache
(the interpreter and its libraries come on top). Every setting below that is left at its default is sized
from ``B``; a setting the user gave keeps its value, and :func:`check_fits` refuses a plan whose resident
buffers exceed ``B`` (with no budget: the machine's memory):

- ``plan.cpu_cache_bytes``: ``B * CACHE_SHARE``, a policy's CPU cache (the feature cache; ``outre`` splits it
  with its historical cache, ``mariusgnn`` holds its partition buffer in it);
- ``plan.disk_cache_buffer_bytes``: the rest, ``diskgnn``'s segment window;
- ``sample.eval_batch_size``: ``sample.batch_size``, so evaluation needs no more working memory than training;
- ``ingest.memory_mb``, ``reorder.memory_mb``, ``pack.memory_mb``, ``train.layerwise_memory_mb``,
  ``export.memory_mb`` and ``predict.memory_mb`` (the streaming stages' buffers, the export's batches): their
  default or half the budget (at least :data:`STAGE_MEMORY_MIN`), whichever is smaller.

What is not covered: the page cache of a run that is not confined (``strata bench --memory-budget``
confines each run in a memory cgroup where it can), the GPU cache (device memory), and the working set:
the interpreter, torch, the model, the batches in flight (at most ``train.loader_memory_mb`` of feature rows)
and a policy's per-batch buffers (``hyperbatch``'s
``plan.hyperbatch_bytes`` of blocks among them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipelines.core.confine import memory_limit
from pipelines.core.formatting import format_bytes
from pipelines.core.sections import is_section, section_fields
from pipelines.methods.policies import POLICIES

__all__ = ["CACHE_SHARE", "STAGE_MEMORY_MIN", "check_fits", "fill_from_budget", "resident_bytes"]

#: Share of the budget for a policy's CPU cache; the rest goes to ``diskgnn``'s segment window and the page
#: cache (topology, addresses).
CACHE_SHARE = 0.5
#: The least streaming memory a reorder, pack or layer-wise pass is given under a budget.
STAGE_MEMORY_MIN = 64 << 20
_MB = 1 << 20


def fill_from_budget(data: Mapping[str, Any], budget: int, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Raw configuration ``data`` (a ``PipelineConfig``'s input) with the settings of the module docstring that
    are absent or at their default sized from ``budget`` bytes; everything else as given. ``defaults`` holds a
    default object of each section it sizes (``plan``, ``sample``, ``ingest``, ``reorder``, ``pack``, ``train``,
    ``export``, ``predict``)."""
    sections: dict[str, dict[str, Any]] = {}
    for name in defaults:  # each as a plain dict of what was given (a section object gives every field)
        given = data.get(name) or {}
        sections[name] = {k: getattr(given, k) for k in section_fields(given)} if is_section(given) else dict(given)

    def unset(name: str, *keys: str) -> bool:
        return all(sections[name].get(k, getattr(defaults[name], k)) == getattr(defaults[name], k) for k in keys)

    plan, sample = sections["plan"], sections["sample"]
    if unset("plan", "cpu_cache_bytes", "cpu_cache_fraction"):
        plan["cpu_cache_bytes"] = int(budget * CACHE_SHARE)
    if unset("plan", "disk_cache_buffer_bytes", "disk_cache_buffer_fraction"):
        plan["disk_cache_buffer_bytes"] = int(budget * (1 - CACHE_SHARE))
    if unset("sample", "eval_batch_size"):
        sample["eval_batch_size"] = sample.get("batch_size", defaults["sample"].batch_size)
    stage_mb = max(STAGE_MEMORY_MIN, budget // 2) // _MB
    for name, key in (("ingest", "memory_mb"), ("reorder", "memory_mb"), ("pack", "memory_mb"),
                      ("train", "layerwise_memory_mb"), ("export", "memory_mb"), ("predict", "memory_mb")):
        if unset(name, key):
            sections[name][key] = min(getattr(defaults[name], key), stage_mb)
    return {**data, **sections}


def resident_bytes(cfg: Any, feature_bytes: int) -> dict[str, int]:
    """The RAM buffers ``cfg``'s policy holds for a graph of ``feature_bytes`` feature bytes, by setting
    (``Policy.resident_bytes``: the CPU cache, ``diskgnn``'s segment window, ``in_memory``'s feature file)."""
    return POLICIES.get(cfg.policy)().resident_bytes(cfg, feature_bytes)


def check_fits(cfg: Any, feature_bytes: int, machine_bytes: int | None = None) -> None:
    """``ValueError`` naming the settings when the resident buffers of :func:`resident_bytes` (each counted at
    most ``feature_bytes``: no buffer holds more rows than the feature file has) exceed ``cfg.memory_budget``,
    or, with no budget, the memory this process may use (``machine_bytes``, default
    :func:`pipelines.core.confine.memory_limit`): a run that could only end in an out-of-memory kill."""
    parts = {k: min(v, feature_bytes) for k, v in resident_bytes(cfg, feature_bytes).items()}
    total = sum(parts.values())
    detail = " + ".join(f"{k} {format_bytes(v)}" for k, v in parts.items())
    budget = cfg.memory_budget
    if budget is not None:
        if total > budget:
            raise ValueError(f"'memory_budget' expected to hold the policy's resident buffers, {detail} = "
                             f"{format_bytes(total)} (got {format_bytes(budget)}): lower those settings or leave "
                             "them at their defaults, which the budget sizes (or choose an out-of-core policy)")
        return
    if machine_bytes is None:
        machine_bytes = memory_limit()
    if total > machine_bytes:
        raise ValueError(f"'plan' expected caches that fit this machine's {format_bytes(machine_bytes)} of memory (got "
                         f"{detail} = {format_bytes(total)} for {format_bytes(feature_bytes)} of features): set "
                         "memory_budget (strata run --memory-budget 4G), smaller cache fractions, or an out-of-core "
                         "policy")
