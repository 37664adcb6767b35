"""What a training run logs to MLflow beyond the trainer's curves: every setting, artifact versions, summary.

The trainer logs its own section flat (``epochs``, ``hidden_dim``, ...: ``trainer.train.train``) and a point
per epoch for every curve (``loss``, ``val_acc``, ``epoch_s``, ...). The train stage adds:

- :func:`run_params`: every other setting of the run, dotted (``dataset``, ``policy``, ``sample.fanouts``,
  ``plan.cpu_cache_fraction``, ...), so a run says which sampling, plan and policy shaped it;
- :func:`artifact_tags`: the version of every artifact it was trained from, up to ``ingest``
  (``strata.upstream.<stage>``), found through the manifests' lineage (:func:`lineage`);
- :func:`summary_metrics`: the run's summary (best validation accuracy, test accuracy, mean epoch time, ...)
  logged once, under names no curve uses, so no curve gets a spurious extra point.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from pipelines.config import PipelineConfig, describe_settings
from pipelines.tracking.model_registry import model_name_for
from storage_kernels.store import Artifact, ArtifactStore

__all__ = ["artifact_tags", "auto_params", "lineage", "pipeline_order", "run_params", "stage_seconds",
           "summary_metrics"]

#: Summary names of headline metrics that are also curves (the rest get ``total_``).
_SUMMARY_NAMES = {"val_acc": "best_val_acc", "epoch_s": "mean_epoch_s", "train_acc": "final_train_acc",
                  "loss": "final_loss"}


def auto_params(plan_stats: Mapping[str, Any]) -> dict[str, str]:
    """``policy=auto``'s choice as MLflow params (``auto.policy``, ``auto.predicted_epoch_s``, the settings it
    chose, and each candidate's predicted epoch); empty for a forced policy."""
    record = plan_stats.get("auto")
    if not record:
        return {}
    params = {"auto.policy": str(record["policy"]), "auto.predicted_epoch_s": str(record["predicted_epoch_s"])}
    params.update({f"auto.{k}": str(v) for k, v in record["settings"].items()})
    for i, c in enumerate(record["candidates"]):
        params[f"auto.candidate.{i}"] = (f"{c['policy']} {c['settings'] or ''} epoch_s={c['epoch_s']}"
                                         + (f" refused: {c['refused']}" if c["refused"] else ""))[:500]
    return params


def run_params(cfg: PipelineConfig, skip_sections: Collection[str] = ("train",)) -> dict[str, str]:
    """Every setting of ``cfg`` outside ``skip_sections`` (the trainer logs its own), dotted, as strings; a
    setting left to a default the run derives is logged as derived (``export.model_name``: the name it
    registers under)."""
    out: dict[str, str] = {}
    for row in describe_settings(cfg):
        key = row["key"]
        if key.split(".", 1)[0] in skip_sections and "." in key:
            continue
        value = row["value"]
        out[key] = "" if value is None else str(value)
    if "export.model_name" in out:
        out["export.model_name"] = model_name_for(cfg)
    return out


def lineage(store: ArtifactStore, dataset: str, upstream: Mapping[str, Artifact]) -> dict[str, Artifact | str]:
    """Every artifact reachable from ``upstream`` through the manifests, by stage (the version string where
    an ancestor is no longer on disk)."""
    found: dict[str, Artifact | str] = {}
    pending = list(upstream.values())
    while pending:
        artifact = pending.pop()
        found[artifact.stage] = artifact
        for stage, version in artifact.upstream.items():
            if stage in found:
                continue
            ancestor = store.find(dataset, stage, version)
            found[stage] = ancestor if ancestor is not None else version
            if ancestor is not None:
                pending.append(ancestor)
    return found


def artifact_tags(artifacts: Mapping[str, Artifact | str]) -> dict[str, str]:
    """``strata.upstream.<stage>``: the version of each artifact of :func:`lineage`."""
    return {f"strata.upstream.{stage}": a if isinstance(a, str) else a.version
            for stage, a in sorted(artifacts.items())}


def pipeline_order(artifacts: Mapping[str, Artifact | str]) -> list[str]:
    """The stages of :func:`lineage` in pipeline order: each after the stages its artifact was built from (its
    manifest's upstream), ties by name (an ancestor no longer on disk has no known upstream)."""
    after = {stage: {u for u in a.upstream if u in artifacts} if isinstance(a, Artifact) else set()
             for stage, a in artifacts.items()}
    order: list[str] = []
    while after:
        ready = sorted(s for s, ups in after.items() if not ups - set(order))
        if not ready:  # a cycle cannot come from manifests; keep the rest by name rather than loop
            ready = sorted(after)
        order.append(ready[0])
        del after[ready[0]]
    return order


def stage_seconds(artifacts: Mapping[str, Artifact | str]) -> dict[str, float]:
    """Build time (``timings.total_s``) of each artifact of :func:`lineage`, in pipeline order."""
    out = {}
    for stage in pipeline_order(artifacts):
        artifact = artifacts[stage]
        if isinstance(artifact, Artifact) and "total_s" in artifact.timings:
            out[stage] = float(artifact.timings["total_s"])
    return out


def summary_metrics(headline: Mapping[str, Any], curves: Collection[str]) -> dict[str, float]:
    """Numeric headline values renamed away from the curve names in ``curves`` (logged once, at step 0)."""
    out: dict[str, float] = {}
    for key, value in headline.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        name = key
        if key in curves:
            name = _SUMMARY_NAMES.get(key, f"total_{key}")
        out[name] = float(value)
    return out
