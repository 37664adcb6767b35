"""Plan stage: the storage tier of every node, chosen by the policy from the offline access trace.

``cfg.policy`` (an entry of :data:`pipelines.methods.policies.POLICIES`) plans; this stage writes its plan:

``tier.npy`` int8 (N,)
    ``storage_kernels.packstore.Tier`` codes: 0 GPU cache, 1 CPU cache, 2 packed (read by training batches),
    3 file (read only by evaluation batches), -1 never read.
``slot.npy`` int64 (N,)
    row within its cache, -1 otherwise.
``gpu_nodes.npy`` / ``cpu_nodes.npy`` int64
    the cached nodes, sorted (slot order).
``frequency.npy`` int64 (N,)
    how many training batches read each node.

Statistics: budgets, cache sizes and predicted hit rates (exact for the sampled trace); ``policy=auto``'s
choice (``auto``), or a forced policy's compute threads (``threads``, from a probe of the model's step:
:mod:`pipelines.methods.policies.auto.threads`). The version carries the policy's name.
"""

from __future__ import annotations

from typing import Any

from pipelines.budget import check_fits
from pipelines.config import PipelineConfig
from pipelines.core.formatting import format_bytes, markdown_table
from pipelines.core.graphio import load_graph
from pipelines.core.progress import Progress
from pipelines.methods.policies import POLICIES, PlanInputs
from pipelines.methods.policies.auto.policy import AUTO
from pipelines.methods.policies.auto.threads import THREADS_STAT, thread_choice
from pipelines.stages.common import StageResult, materialize
from storage_kernels.sampleset import SampleSet
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["ALSO_READS", "FORMAT_VERSION", "run", "summary"]

FORMAT_VERSION = 1
#: Configuration this stage reads beyond its own section (it enters the artifact version).
ALSO_READS = ("policy",)


def run(store: ArtifactStore, cfg: PipelineConfig, *, reorder: Artifact, sample: Artifact,
        progress: Progress | None = None) -> StageResult:
    """Write the ``plan`` artifact: tier and slot per node, cache node lists, predicted hit rates."""
    policy = POLICIES.get(cfg.policy)()

    def build(builder: ArtifactBuilder) -> None:
        graph = load_graph(reorder)
        check_fits(cfg, graph.num_nodes * graph.row_bytes)  # memory_budget: the caches it asks for fit in it
        inputs = PlanInputs(graph, SampleSet(sample.path), cfg, progress, data_root=store.root)
        plan = policy.plan(inputs)
        if cfg.policy != AUTO:  # auto chose its threads with its policy
            threads = thread_choice(inputs, policy, plan)
            if threads is not None:
                plan.stats[THREADS_STAT] = threads
        builder.save_array("tier.npy", plan.tier)
        builder.save_array("slot.npy", plan.slot)
        builder.save_array("gpu_nodes.npy", plan.gpu_nodes)
        builder.save_array("cpu_nodes.npy", plan.cpu_nodes)
        builder.save_array("frequency.npy", plan.frequency)
        for name, arr in plan.arrays.items():  # policy-specific (outre: candidates.npy)
            builder.save_array(name, arr)
        builder.stats.update({"policy": cfg.policy, **plan.stats})

    return materialize(store, cfg, "plan", FORMAT_VERSION, {"reorder": reorder, "sample": sample}, build,
                       also=ALSO_READS)


def summary(artifact: Artifact) -> dict[str, Any]:
    """Budgets, cache sizes and predicted hit rates per tier (asset metadata)."""
    s = artifact.stats
    rows = [
        {
            "tier": tier,
            "rows": s.get(f"{tier}_cache_rows", ""),
            "bytes": format_bytes(s.get(f"{tier}_cache_bytes", 0)),
            "budget": format_bytes(s.get(f"{tier}_budget_bytes", 0)),
            "predicted hit rate": s.get(f"predicted_hit_rate_{tier}", ""),
        }
        for tier in ("gpu", "cpu")
    ]
    miss = 1.0 - float(s.get("predicted_hit_rate", 0.0))
    rows.append({"tier": "disk", "rows": "", "bytes": "", "budget": "", "predicted hit rate": miss})
    rows.append({"tier": "feature file (eval only)", "rows": s.get("eval_only_nodes", ""), "bytes": "",
                 "budget": "", "predicted hit rate": ""})
    return {"tiers": markdown_table(rows)}
