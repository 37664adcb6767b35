"""``auto`` (the default policy): each run planned by predicted epoch time, not by a fixed name.

At the plan stage, with the sampled trace in hand, ``auto``:

1. takes the memory the run may use: ``memory_budget``, or without one :data:`MEMORY_SHARE` of the memory this
   process may use (the lower of :func:`pipelines.core.confine.memory_limit` and the kernel's ``MemAvailable``),
   stated in the plan;
2. measures (once per data root, :mod:`pipelines.core.disk_profile`) the disk, and probes the model's compute
   time per batch at each thread count it may use (:mod:`.probe`);
3. for every candidate (the registered policies that train the sampled batches exactly, ``Policy.exact_samples``,
   and whose cache is not the OS page cache; ``plan.auto_candidates`` names others) and each of its variants
   (``Policy.auto_variants``: e.g. ``diskgnn`` with its segment window's RAM given to the CPU cache), refuses it
   when its resident buffers exceed that memory, else plans it and predicts one epoch's reads
   (``Policy.predict_reads``) and time (:mod:`.cost`);
4. keeps the plan of the fastest (the plan artifact holds it, as if that policy had been forced) and records
   the choice, its settings and every candidate's prediction in the plan's ``auto`` statistic.

The pack and train stages, and everything that opens the run's batches, see the chosen policy with its
settings (:func:`resolved`); the artifacts keep ``policy=auto`` in their versions. A user can always force a
policy (``--policy diskgnn``); ``auto`` never picks one the budget refuses.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pipelines.core.confine import memory_limit
from pipelines.core.disk_profile import DiskProfile, disk_profile, measure_disk
from pipelines.core.formatting import format_bytes
from pipelines.methods.policies.auto.cost import TIE, Candidate, choose, epoch_seconds, pipelined, threads_for
from pipelines.methods.policies.auto.probe import ComputeProbe, probe_compute, usable_cores
from pipelines.methods.policies.auto.settings import AutoPlanSettings
from pipelines.methods.policies.auto.spill import PlanSpill
from pipelines.methods.policies.auto.threads import THREADS_STAT
from pipelines.methods.policies.base import POLICIES, FeatureInputs, Policy, register_policy
from pipelines.methods.policies.inputs import PlanInputs, TierPlan

if TYPE_CHECKING:
    from pipelines.core.sections import RunConfig
    from trainer.features import FeatureSource

__all__ = ["MEMORY_SHARE", "Auto", "candidate_names", "choice_stats", "choice_version", "resolved",
           "usable_memory", "with_settings"]

#: Without a ``memory_budget``: the share of the memory this process may use that ``auto`` lets a plan hold
#: (the rest: the interpreter, torch, the batches in flight, the page cache of the topology).
MEMORY_SHARE = 0.5
AUTO = "auto"


def with_settings(cfg: RunConfig, policy: str, settings: dict[str, Any]) -> RunConfig:
    """``cfg`` with ``policy`` and the ``section.field`` ``settings`` set (values already valid: they come from
    ``auto``'s own candidates or its recorded choice)."""
    sections: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        section, name = key.split(".", 1)
        sections.setdefault(section, {})[name] = value
    update: dict[str, Any] = {"policy": policy}
    for section, values in sections.items():
        current = getattr(cfg, section)
        update[section] = (dataclasses.replace(current, **values) if dataclasses.is_dataclass(current)  # train
                           else current.model_copy(update=values))
    return cfg.model_copy(update=update)  # type: ignore[attr-defined]


def resolved(cfg: RunConfig, plan_stats: dict[str, Any] | None) -> RunConfig:
    """The configuration the stages after ``plan`` run under: with ``policy=auto``, the policy and settings its
    plan chose (``plan_stats``: the plan or pack artifact's statistics); with a forced policy, the compute threads
    its plan chose (:mod:`.threads`; a pack's statistics have none: the policy unchanged)."""
    if cfg.policy != AUTO:  # a forced policy: the threads its plan chose (.threads), unless the user set them
        threads = (plan_stats or {}).get(THREADS_STAT)
        if threads and cfg.train.num_threads == 0:
            return with_settings(cfg, cfg.policy, {"train.num_threads": int(threads["train.num_threads"])})
        return cfg
    choice = (plan_stats or {}).get("auto")
    if not choice:
        raise ValueError("'policy' auto expected a plan artifact with its choice ('auto' statistic; got none): "
                         "run the plan stage with policy=auto")
    settings = dict(choice["settings"])
    if cfg.train.num_threads != 0:  # threads set by the user win (a speed knob: the plan is reused across them)
        settings.pop("train.num_threads", None)
    return with_settings(cfg, choice["policy"], settings)


def choice_stats(stats: dict[str, Any] | None) -> dict[str, Any]:
    """The part of a plan's statistics that says what ``auto`` chose (copied into the pack's, so that whatever
    holds only the pack can resolve the run's policy too); empty for any other policy."""
    choice = (stats or {}).get("auto")
    if not choice:
        return {}
    settings = {k: v for k, v in choice["settings"].items() if not k.startswith("train.")}  # the pack's own part:
    # the threads come from a timing, and a pack of one version must have one content (sharded or not)
    return {"chosen_policy": choice["policy"], "auto": {"policy": choice["policy"], "settings": settings}}


def choice_version(stats: dict[str, Any] | None) -> dict[str, Any]:
    """What ``auto`` chose, as a parameter of the pack's version (and so of everything after it): the plan's
    version cannot hold its choice, which rests on measurements (a plan rebuilt after a deletion may choose
    otherwise), so the artifacts laid out for one choice are never reused for another. The compute threads,
    a speed knob, are left out. Empty for any other policy."""
    choice = (stats or {}).get("auto")
    if not choice:
        return {}
    settings = {k: v for k, v in choice["settings"].items() if not k.startswith("train.")}
    return {"auto_choice": {"policy": choice["policy"], "settings": settings}}


def usable_memory(cfg: RunConfig) -> tuple[int, str]:
    """The bytes a plan may hold resident, and how they were chosen (for the record)."""
    if cfg.memory_budget is not None:
        return int(cfg.memory_budget), f"memory_budget {format_bytes(cfg.memory_budget)}"
    limit, available = memory_limit(), _available_memory()
    usable = min(limit, available) if available else limit
    return int(usable * MEMORY_SHARE), (f"no memory_budget: {MEMORY_SHARE:.0%} of the {format_bytes(usable)} this "
                                        f"process may use (limit {format_bytes(limit)}, available "
                                        f"{format_bytes(available) if available else 'unknown'})")


def _available_memory() -> int:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (0 where there is none): what other processes leave."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def candidate_names(cfg: RunConfig) -> tuple[list[str], dict[str, str]]:
    """The policies ``auto`` plans, and those it leaves out with the reason."""
    named = list(cfg.plan.auto_candidates)
    for name in named:
        POLICIES.check(name)  # checked when the config loaded; a plugin may have gone since
    names, left_out = [], {}
    for name in named or POLICIES.names():
        cls = POLICIES.get(name)
        if name == AUTO:
            continue
        if not named and cls.page_cache:
            left_out[name] = "its cache is the OS page cache, which no budget bounds"
        elif not named and not cls.exact_samples:
            left_out[name] = "trains other batches than the sampled ones (accuracy may differ); name it in " \
                             "plan.auto_candidates to consider it"
        else:
            names.append(name)
    return names, left_out


def _disk(inputs: PlanInputs) -> DiskProfile:
    """The data root's profile (cached there); with no root known, measured in the temp folder."""
    if inputs.data_root is not None:
        return disk_profile(inputs.data_root)
    return measure_disk(tempfile.gettempdir())


@register_policy
class Auto(Policy):
    name = AUTO
    description = ("The default: plans each run by predicted epoch time from the sampled trace, a measured disk "
                   "profile and a compute probe; picks the fastest policy (and its cache split and threads) that "
                   "fits the memory budget. `strata plan --explain` shows why.")
    settings = {"plan": AutoPlanSettings}

    def resident_bytes(self, cfg: RunConfig, feature_bytes: int) -> dict[str, int]:
        return {}  # the chosen policy's, checked against the budget when auto chooses

    def plan(self, inputs: PlanInputs) -> TierPlan:
        cfg, graph = inputs.cfg, inputs.graph
        feature_bytes = graph.num_nodes * graph.row_bytes
        usable, memory_note = usable_memory(cfg)
        names, left_out = candidate_names(cfg)
        if inputs.progress:
            inputs.progress("plan (auto): measuring the disk and the model's step", 0, len(names))
        start = time.perf_counter()
        disk = _disk(inputs)
        if cfg.train.task == "node":
            probe = probe_compute(inputs, cfg.plan.auto_probe_batches, cores=usable_cores())
        else:  # link prediction trains on edges, not these batches: the reads alone decide
            probe = ComputeProbe({usable_cores(): 0.0}, 0, 0, "not probed (train.task link)")
        measure_s = time.perf_counter() - start
        candidates: list[Candidate] = []
        plans = PlanSpill(inputs.data_root)  # the plans that can still be chosen, on disk
        try:
            best, plan = self._compare(inputs, names, usable, feature_bytes, disk, probe, candidates, plans)
        finally:
            plans.close()  # the chosen plan's mappings stay valid
        return self._chosen(cfg, plan, best, candidates, usable, memory_note, feature_bytes, disk, probe, measure_s,
                            left_out)

    def _compare(self, inputs: PlanInputs, names: list[str], usable: int, feature_bytes: int, disk: Any, probe: Any,
                 candidates: list[Candidate], plans: PlanSpill) -> tuple[Candidate, TierPlan]:
        """Plan and predict every candidate; the best one and its plan."""
        cfg = inputs.cfg
        kept: set[int] = set()
        for i, name in enumerate(names):
            policy = POLICIES.get(name)()
            variants: list[dict[str, Any]] = [{}]
            while variants:  # the policy's own settings first; its variants from what they were predicted to read
                settings = variants.pop(0)
                ccfg = with_settings(cfg, name, settings)
                resident = policy.resident_bytes(ccfg, feature_bytes)
                c = Candidate(name, settings=dict(settings),
                              resident_bytes=sum(min(v, feature_bytes) for v in resident.values()))
                candidates.append(c)
                if c.resident_bytes > usable:
                    c.refused = (f"holds {format_bytes(c.resident_bytes)} resident "
                                 f"({', '.join(resident)}), more than {format_bytes(usable)}")
                    continue
                cin = replace(inputs, cfg=ccfg, progress=None)
                start = time.perf_counter()
                try:
                    tier_plan = policy.plan(cin)
                    c.reads = policy.predict_reads(cin, tier_plan)
                except ValueError as e:  # a setting this policy cannot meet (pack.disk_budget too small, ...)
                    c.refused = f"its plan failed: {e}"
                    continue
                finally:
                    c.plan_s = time.perf_counter() - start
                plans.put(len(candidates) - 1, tier_plan)
                kept.add(len(candidates) - 1)
                del tier_plan
                c.threads = threads_for(c.reads.bytes > 0, probe)
                c.io_s, c.compute_s = epoch_seconds(c.reads, disk, probe, c.threads)
                c.epoch_s = pipelined(c.io_s, c.compute_s, probe.batches_per_epoch)
                # hold only plans that can still be chosen (N-sized arrays each): choose() takes from within TIE
                # of the fastest, and the fastest only gets faster
                fastest = min(x.epoch_s for x in candidates if not x.refused)
                for k in [k for k in kept if candidates[k].epoch_s > fastest * (1 + TIE) + 1e-9]:
                    plans.drop(k)
                    kept.discard(k)
                if not settings:
                    variants = policy.auto_variants(cfg, feature_bytes, c.reads)
            if inputs.progress:
                inputs.progress("plan (auto): predicting each policy's epoch", i + 1, len(names))
        best = choose(candidates)
        return best, plans.take(candidates.index(best))

    def _chosen(self, cfg: RunConfig, plan: TierPlan, best: Candidate, candidates: list[Candidate], usable: int,
                memory_note: str, feature_bytes: int, disk: Any, probe: Any, measure_s: float,
                left_out: Any) -> TierPlan:
        """The chosen plan with ``auto``'s record of the choice in its statistics."""
        settings = dict(best.settings)
        if cfg.train.num_threads == 0:  # a thread count the user set is kept
            settings["train.num_threads"] = best.threads
        plan.stats.update({
            "policy": AUTO,
            "chosen_policy": best.policy,
            "auto": {
                "policy": best.policy,
                "settings": settings,
                "predicted_epoch_s": round(best.epoch_s, 6),
                "memory": {"usable_bytes": usable, "how": memory_note, "feature_bytes": feature_bytes},
                "disk": disk.to_dict(),
                "compute": probe.to_dict(),
                "measure_s": round(measure_s, 3),  # the disk profile (when not cached) and the compute probe
                "candidates": [c.to_dict() for c in candidates],
                "left_out": left_out,
            },
        })
        return plan

    def features(self, inputs: FeatureInputs) -> FeatureSource:
        raise ValueError("'policy' auto expected to be resolved to its chosen policy before opening features "
                         "(pipelines.methods.policies.auto.resolved)")

