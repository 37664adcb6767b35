"""A new policy, partitioner, reorder strategy and model are added here, in a test module, without touching any
existing file: one registration each, then the whole pipeline uses them by name (docs/EXTENDING.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.methods.orders import REORDER_STRATEGIES, ReorderStrategy
from pipelines.methods.partitioners import PARTITIONERS, Partitioner
from pipelines.methods.policies import POLICIES, FeatureInputs, PlanInputs, Policy, TierPlan
from pipelines.methods.policies.tiers import assign_tiers
from pipelines.runner import StageRunner
from storage_kernels.packstore import Tier
from trainer.models import MODELS


# ---- a toy partitioner: node v goes to part v mod p (balanced by construction) ----------------------------
def stripes(graph: Any, p: int, cfg: Any, run: Any) -> np.ndarray:
    run.info["toy"] = "stripes"
    return (np.arange(graph.num_nodes) % p).astype(np.int32)


# ---- a toy reorder strategy: ids reversed ------------------------------------------------------------------
def reversed_ids(graph: Any, rc: Any, pc: Any, info: dict) -> np.ndarray:
    return np.arange(graph.num_nodes, dtype=np.int64)[::-1].copy()


# ---- a toy policy: the CPU cache holds the highest-degree nodes; features from RAM -------------------------
class HotByDegree(Policy):
    name = "toy-hot-degree"
    description = "CPU cache of the highest-degree nodes (not the trace's hottest); reads from RAM."

    def plan(self, inputs: PlanInputs) -> TierPlan:
        graph = inputs.graph
        degree = np.diff(np.asarray(graph.indptr)).astype(np.int64)
        rows = inputs.cfg.plan.budgets(graph.num_nodes * graph.row_bytes)["cpu"] // graph.row_bytes
        tier, slot, gpu, cpu = assign_tiers(degree + 1, 0, rows)  # every node "accessed", ranked by degree
        tier[tier == Tier.PACKED] = Tier.FILE
        return TierPlan(tier, slot, gpu, cpu, degree, {"cpu_cache_rows": len(cpu)})

    def features(self, inputs: FeatureInputs):
        from trainer.features import InMemoryFeatures

        return InMemoryFeatures(np.load(inputs.reorder.file("features.npy")), device=inputs.device)


# ---- a toy model: a 2-layer MLP over each seed's own features (ignores the graph) --------------------------
class SeedMLP(nn.Module):
    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int, num_layers: int, dropout: float) -> None:
        super().__init__()
        self.in_dim, self.num_layers = in_dim, num_layers
        self._args = {"in_dim": in_dim, "hidden_dim": hidden_dim, "out_dim": out_dim, "num_layers": num_layers,
                      "dropout": dropout}
        self.net = nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, out_dim))

    @property
    def model_args(self) -> dict[str, Any]:
        return dict(self._args)

    def forward(self, x: torch.Tensor, blocks: Any) -> torch.Tensor:
        return self.net(x[: blocks[-1].num_dst])  # (num_seeds, out_dim)

    def forward_dst_pos(self, x: torch.Tensor, edges: Any) -> torch.Tensor:
        return self.net(x.index_select(0, edges[-1][2]))


@pytest.fixture
def toys() -> Iterator[None]:
    PARTITIONERS.register("toy-stripes", Partitioner("toy-stripes", stripes))
    REORDER_STRATEGIES.register("toy-reverse", ReorderStrategy("toy-reverse", reversed_ids))
    POLICIES.register(HotByDegree.name, HotByDegree)
    MODELS.register("toy-mlp", SeedMLP)
    try:
        yield
    finally:
        PARTITIONERS.unregister("toy-stripes")
        REORDER_STRATEGIES.unregister("toy-reverse")
        POLICIES.unregister(HotByDegree.name)
        MODELS.unregister("toy-mlp")


def test_unregistered_names_are_refused_by_the_config() -> None:
    for key, value in (("partition.method", "toy-stripes"), ("reorder.strategy", "toy-reverse"),
                       ("policy", "toy-hot-degree"), ("train.model", "toy-mlp")):
        with pytest.raises(ValueError, match=f"'{key}' expected one of"):
            PipelineConfig.load(overrides=[f"{key}={value}"])


def test_toy_methods_run_through_the_whole_pipeline(toys: None, tmp_path) -> None:
    cfg = PipelineConfig.load(dataset="tiny", overrides=[
        "partition.method=toy-stripes", "partition.num_parts=4", "reorder.strategy=toy-reverse",
        "policy=toy-hot-degree", "train.model=toy-mlp", "train.epochs=2", "sample.epochs=1", "train.device=cpu",
        "plan.cpu_cache_fraction=0.2"])
    runner = StageRunner(cfg, StrataPaths.at(tmp_path).store())
    results = {r.artifact.stage: r.artifact for r in runner.run_until("export")}  # every stage's checks pass

    perm = results["reorder"].array("perm.npy")
    assert np.array_equal(perm, np.arange(len(perm))[::-1])
    parts = results["partition"].array("parts.npy")
    assert np.array_equal(parts, np.arange(len(parts)) % 4) and results["partition"].stats["toy"] == "stripes"

    plan = results["plan"]
    degree = np.diff(results["reorder"].array("indptr.npy"))
    cpu_nodes = plan.array("cpu_nodes.npy")
    assert 0 < len(cpu_nodes) == plan.stats["cpu_cache_rows"]
    assert degree[cpu_nodes].min() >= np.sort(degree)[::-1][len(cpu_nodes) - 1]  # the highest degrees
    assert results["pack"].stats["layout"] == "none" and results["pack"].stats["policy"] == "toy-hot-degree"

    trained = results["train"]
    assert trained.json("model.json")["architecture"] == "toy-mlp" and 0.0 <= trained.stats["test_acc"] <= 1.0
    assert results["export"].stats["onnx_max_abs_diff"] < 1e-4  # the toy model exported and verified too
