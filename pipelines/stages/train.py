"""Train stage: the configured model on the offline samples, features through the policy, tracked in MLflow.

The ``train`` artifact holds the best-validation weights (``state_dict.pt``, a plain tensor dict loaded with
``weights_only=True``), the architecture (``model.json``: the registered model name and its constructor
arguments) and the run's metrics. The MLflow run gets the same files (under ``train/``), every setting
(:mod:`pipelines.tracking.run_logging`), the versions of the artifacts it was trained from as tags, one point per epoch
for each curve, the summary once under its own names, and plots (``plots/``: :mod:`pipelines.tracking.plots`).
The export stage logs the MLflow model. The version carries the policy's name and the resolved device.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipelines.budget import check_fits
from pipelines.config import PipelineConfig
from pipelines.core.formatting import format_bytes, markdown_table
from pipelines.core.graphio import feature_dim, narrow_labels
from pipelines.core.paths import StrataPaths
from pipelines.core.progress import Progress
from pipelines.methods.policies import POLICIES, FeatureInputs
from pipelines.methods.policies.auto import choice_stats, resolved
from pipelines.stages.common import StageResult, materialize, stage_version
from pipelines.tracking.links import mlflow_run_url
from pipelines.tracking.run_logging import (
    artifact_tags,
    auto_params,
    lineage,
    run_params,
    stage_seconds,
    summary_metrics,
)
from storage_kernels.sampleset import SampleSet
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

if TYPE_CHECKING:
    from pipelines.tracking.warmstart import WarmStart
    from trainer.features import FeatureSource
    from trainer.layerwise import LayerwiseGraph

__all__ = ["ALSO_READS", "FORMAT_VERSION", "HEADLINE_METRICS", "LINK_HEADLINE_METRICS",
           "check_reused_plan", "full_graph", "load_model", "open_features", "run",
           "summary", "train_rank", "version"]

FORMAT_VERSION = 1
#: Configuration this stage reads beyond its own section (it enters the artifact version).
ALSO_READS = ("policy",)
#: The metrics ``strata run`` reports (from the artifact's stats).
HEADLINE_METRICS = ("test_acc", "val_acc", "epoch_s", "bytes_read", "cache_hit_rate")
#: The metrics of a ``train.task=link`` artifact (pipelines/stages/train_link.py).
LINK_HEADLINE_METRICS = ("mrr", "hits@1", "hits@3", "hits@10", "val_mrr")


def open_features(cfg: PipelineConfig, policy: str, reorder: Artifact, pack: Artifact | None, samples: SampleSet,
                  device: str) -> FeatureSource:
    """The feature source ``policy`` trains from (``pack`` must be the artifact it wrote, when it lays one out);
    over a float16 feature file its batches are decoded to float32 at assembly (``trainer.features.half``)."""
    if policy == cfg.policy and pack is not None:  # policy=auto: the policy and settings its plan chose
        cfg = resolved(cfg, pack.stats)
        policy = cfg.policy
    source = POLICIES.get(policy)().features(FeatureInputs(reorder, pack, samples, device, cfg))
    if reorder.array("features.npy").dtype == np.float16:
        from trainer.features.half import HalfFeatures

        source = HalfFeatures(source, int(reorder.stats["feature_dim"]))
    return source


def check_reused_plan(cfg: PipelineConfig, reorder: Artifact) -> None:
    """The plan checked its caches when it was built; a plan reused under a new ``memory_budget`` is checked
    here, before a source opens its caches (``pipelines.budget.check_fits``)."""
    check_fits(cfg, int(np.load(reorder.file("features.npy"), mmap_mode="r").nbytes))


def check_splits(reorder: Artifact, labels: np.ndarray) -> None:
    """Node classification trains on ``train``, stops early on ``val`` and reports ``test``: each needs a node.
    ``ValueError`` naming the empty split and the sizes (a random split of a handful of labelled nodes can leave
    one empty), instead of a NaN accuracy failing the run when its history is written."""
    sizes = {name: int(reorder.array(f"{name}_idx.npy").shape[0]) for name in ("train", "val", "test")}
    empty = [name for name, size in sizes.items() if size == 0]
    if empty:
        split = "/".join(str(s) for s in sizes.values())
        raise ValueError(
            f"'{empty[0]}' split expected at least one labelled node for node classification (got 0; {len(labels)} "
            f"nodes, {int((labels >= 0).sum())} labelled, train/val/test {split}): give the source its own split "
            "(edgelist: --set ingest.options.val_idx=PATH.npy, and train_idx, test_idx) or label more nodes")


#: A split with fewer labelled nodes than this is named in the run's warnings: its accuracy moves in steps of
#: 1/size (at least 0.05), too coarse for early stopping or a comparison.
TINY_SPLIT = 20


def input_warnings(reorder: Artifact, labels: np.ndarray, num_classes: int) -> list[str]:
    """What the run trains on but a user should know (the train artifact's stats ``warnings``, printed in the
    run summary): a class with labelled nodes but none in ``train`` (the model can never predict it; some real
    datasets have such classes, so this warns and trains) and a split smaller than :data:`TINY_SPLIT`."""
    splits = {name: np.asarray(reorder.array(f"{name}_idx.npy"), dtype=np.int64) for name in ("train", "val", "test")}
    size = max(num_classes, int(labels.max()) + 1 if labels.size else 0)
    counts = {name: np.bincount(labels[idx], minlength=size) for name, idx in splits.items()}
    out = []
    for c in np.flatnonzero((counts["train"] == 0) & ((counts["val"] + counts["test"]) > 0)).tolist():
        out.append(f"class {c} has no training node (val {int(counts['val'][c])}, test {int(counts['test'][c])}, "
                   f"train 0 of {len(splits['train'])}): the model cannot learn it; its nodes count as errors")
    for name, idx in splits.items():
        if 0 < len(idx) < TINY_SPLIT:
            out.append(f"'{name}' split has {len(idx)} labelled node{'s' * (len(idx) != 1)}: its accuracy moves in "
                       f"steps of {1 / len(idx):.2g}")
    return out


def full_graph(cfg: PipelineConfig, reorder: Artifact, labels: np.ndarray, scratch: Path) -> LayerwiseGraph | None:
    """The full graph ``train.eval_mode=layerwise`` evaluates on (the reorder artifact's CSR, feature file and
    val/test nodes; inference works in ``train.layerwise_memory_mb``, its scratch tables under ``scratch``), else
    None."""
    if cfg.train.eval_mode != "layerwise":
        return None
    from trainer.layerwise import LayerwiseGraph

    scratch.mkdir(parents=True, exist_ok=True)
    return LayerwiseGraph(
        np.asarray(reorder.array("indptr.npy")), reorder.array("indices.npy"), reorder.file("features.npy"),
        feature_dim(reorder), labels,
        {s: np.asarray(reorder.array(f"{s}_idx.npy")) for s in ("val", "test")}, scratch,
        memory_bytes=cfg.train.layerwise_memory_mb << 20, num_threads=cfg.train.num_threads)


def run(store: ArtifactStore, cfg: PipelineConfig, *, reorder: Artifact, sample: Artifact, plan: Artifact,
        pack: Artifact, progress: Progress | None = None) -> StageResult:
    """Train, log to MLflow and write the ``train`` artifact."""
    from trainer.device import resolve_device
    from trainer.features.iobackend import set_io_defaults
    from trainer.tracking import MlflowTracker
    from trainer.train import train

    device = resolve_device(cfg.train.device)
    policy_cfg = resolved(cfg, plan.stats)  # policy=auto: the policy, settings and threads its plan chose
    tcfg = dataclasses.replace(policy_cfg.train, device=device)  # CPU and GPU runs are different artifacts
    paths = StrataPaths(store.root)
    upstream = {"reorder": reorder, "sample": sample, "plan": plan, "pack": pack}
    if cfg.train.task == "link":  # link prediction: pipelines/stages/train_link.py
        from pipelines.stages import train_link as link

        return link.train(store, cfg, reorder=reorder, upstream=upstream, format_version=FORMAT_VERSION,
                          also=ALSO_READS, derived=_derived(device), progress=progress)
    warm = _warm_start(store, cfg)
    notes: list[str] = []  # lines for the log beside the artifact (a refused resume checkpoint)

    def build(builder: ArtifactBuilder) -> None:
        import torch

        from pipelines.ops.recovery import MLFLOW_OWNER_PREFIX
        from storage_kernels.owner import Owner

        sample_set = SampleSet(sample.path)
        labels = narrow_labels(reorder.array("labels.npy"))  # in RAM: a map of the file faults per seed
        check_splits(reorder, labels)
        warnings = input_warnings(reorder, labels, cfg.train.num_classes or int(labels.max()) + 1)
        tracker = MlflowTracker(paths.mlflow_tracking_uri, paths.mlflow_artifact_root,
                                experiment=f"strata-{cfg.dataset_name}")
        set_io_defaults(cfg.train.io_backend, cfg.train.io_queue_depth)  # every DirectFile the policy opens
        check_reused_plan(policy_cfg, reorder)
        source = open_features(policy_cfg, policy_cfg.policy, reorder, pack, sample_set, device)
        # a policy's own training state (OUTRE's historical embeddings) is not in a checkpoint, and the ranks of
        # a data parallel run would have to resume together: those train from scratch after a kill
        stateless = source.train_hook is None and "world_size" not in _derived(device)
        run_cfg, resumed, refused = (resumable(store, cfg.dataset_name, builder.version, tcfg) if stateless
                                     else (tcfg, tcfg.resume, ""))
        if refused:  # a checkpoint that failed its digest: in the run summary, the MLflow run and the log
            warnings.insert(0, f"resume checkpoint {refused}")
            notes.append(f"resume checkpoint {refused}")

        def on_epoch(epoch: int, metrics: dict[str, float]) -> None:
            if progress:
                progress("train: epochs", epoch + 1, tcfg.epochs)

        ancestors = lineage(store, cfg.dataset_name, upstream)
        tags = {"strata.dataset": cfg.dataset_name, "strata.model_version": builder.version,
                "strata.policy": cfg.policy, "strata.chosen_policy": policy_cfg.policy, **artifact_tags(ancestors),
                **Owner.me().tags(MLFLOW_OWNER_PREFIX),  # a later run fails this one if we are killed
                **({"strata.resumed_from": resumed} if resumed else {}),
                **({"strata.resume_refused": refused} if refused else {})}
        try:
            with tracker.run(run_name=f"{cfg.dataset_name}-{builder.version}", tags=tags) as run_id:
                tracker.log_params(run_params(cfg))  # the trainer logs the train section itself
                tracker.log_params(auto_params(plan.stats))  # policy=auto: what it chose, predicted, and why
                if warnings:
                    tracker.set_tags({"strata.warnings": "; ".join(warnings)[:5000]})
                result = train(run_cfg, sample_set, source, labels, tracker=tracker, progress=on_epoch, init=warm,
                               layerwise=full_graph(cfg, reorder, labels, store.tmp_dir))
                if warm is not None:  # visible in the run (tag, param), the artifact's stats and the log
                    tracker.set_tags({"strata.warm_start_from": warm.tag})
                    tracker.log_params({"warm_start_from": warm.tag})
                    builder.stats.update({"warm_start_from": warm.tag, "warm_start": warm.describe()})
                    if progress:
                        progress(f"train: {warm.describe()}", 0, 0)
                state_path = builder.add_file("state_dict.pt")
                torch.save(result.best_state_dict, state_path)
                builder.write_json("model.json", {"architecture": tcfg.model, **result.model_args})
                builder.write_json("history.json", _history(result))
                headline = _headline(result, source)
                curves = tracker.client.get_run(run_id).data.metrics.keys()
                tracker.log_metrics(summary_metrics(headline, curves))  # once, under names no curve uses
                for name in ("state_dict.pt", "model.json", "history.json"):
                    tracker.log_artifact(builder.dir / name, "train")
                _log_plots(tracker, result, plan, ancestors)
        finally:
            source.close()
        builder.stats.update(headline)
        builder.stats.update({"mlflow_run_id": run_id, "mlflow_experiment_id": tracker.experiment_id,
                              "mlflow_tracking_uri": paths.mlflow_tracking_uri,
                              "device": device, "policy": cfg.policy, "warnings": warnings,
                              **choice_stats(plan.stats)})

    result = materialize(store, cfg, "train", FORMAT_VERSION, upstream, build, also=ALSO_READS,
                         derived=_derived(device, warm))
    shutil.rmtree(store.resume_dir(cfg.dataset_name, "train", result.version), ignore_errors=True)  # done
    result.notes.extend(notes)
    if warm is not None or cfg.train.warm_start != "none":
        result.notes.append(_warm_note(result, warm))
    return result


def resumable(store: ArtifactStore, dataset: str, version: str, tcfg: Any) -> tuple[Any, str, str]:
    """``tcfg`` set to checkpoint into the resume dir of this ``train`` version (unless it names its own
    ``checkpoint_path``), and to resume from the checkpoint a killed run left there (unless it names its own
    ``resume``). Returns the config, the checkpoint resumed from ('' = none) and why a checkpoint found there
    was not resumed ('' = none was refused).

    The checkpoint lives under ``<root>/.tmp/resume/`` keyed by the artifact's version, so a rerun of the
    same configuration finds it, and the stale-temp cleanup keeps it until the artifact is published. It is
    resumed only when its bytes match the digest written beside it (``trainer.checkpoint``): one that does
    not, or has none, is moved aside to ``<root>/.quarantine/`` and training starts from scratch.
    """
    if tcfg.checkpoint_path:
        return tcfg, tcfg.resume, ""
    path = store.resume_dir(dataset, "train", version) / "checkpoint.pt"
    resume, refused = tcfg.resume, ""
    if not resume and path.is_file():
        from storage_kernels.integrity import quarantine
        from trainer.checkpoint import CheckpointUnverified, load_checkpoint

        try:
            load_checkpoint(path)  # its digest first: a flipped bit in a tensor loads without complaint
            resume = str(path)
        except CheckpointUnverified as e:  # never resumed; kept aside for inspection
            moved = quarantine(store.root, path.parent, f"resume checkpoint refused: {e}")
            where = f"moved to {moved}" if moved is not None else "already moved aside"
            refused = f"{e}: not resumed, trained from scratch ({where})"
        except (ValueError, KeyError, OSError):  # unreadable: train from scratch rather than fail the stage
            path.unlink(missing_ok=True)
    return dataclasses.replace(tcfg, checkpoint_path=str(path), resume=resume), resume, refused


def _warm_start(store: ArtifactStore, cfg: PipelineConfig) -> WarmStart | None:
    """The champion to start from with ``train.warm_start=champion`` (None: off, or no champion yet)."""
    from pipelines.tracking.warmstart import find_warm_start

    return find_warm_start(cfg, store) if cfg.train.warm_start == "champion" else None


def _warm_note(result: StageResult, warm: WarmStart | None) -> str:
    """The log line of a ``train.warm_start=champion`` run: where training started, or why nothing ran."""
    if result.reused:
        since = f"champion version {warm.champion.version}" if warm is not None else "no champion"
        how = result.artifact.stats.get("warm_start", "from scratch")
        return (f"nothing retrained: the source snapshot, the upstream artifacts and the champion ({since}) are "
                f"unchanged since this artifact was trained ({how})")
    return warm.describe() if warm is not None else "no champion registered yet: trained from scratch"


def _finite_or_none(values: Any) -> list[Any]:
    """A curve for JSON: an epoch without a value (NaN: not evaluated that epoch, ``train.eval_every``) is null."""
    return [None if isinstance(v, float) and not math.isfinite(v) else v for v in values]


def _history(result: Any) -> dict[str, Any]:
    """``history.json``: the per-epoch curves (null where an epoch was not evaluated) and how training ended."""
    return {"loss": _finite_or_none(result.losses), "train_acc": _finite_or_none(result.train_acc),
            "val_acc": _finite_or_none(result.val_accs),
            "epoch_s": result.epoch_s, "timers": result.timers, "best_epoch": result.best_epoch,
            "stopped_epoch": result.stopped_epoch, "early_stopped": result.early_stopped}


def _log_plots(tracker: Any, result: Any, plan: Artifact, ancestors: dict[str, Any]) -> None:
    """Curves, per-tier rows and stage timing as PNGs under the run's ``plots/`` artifacts."""
    import tempfile

    from pipelines.tracking.plots import write_run_plots

    rows = {k: int(v) for k, v in result.rows_by_tier.items()}  # training batches only, as the plan predicts
    total = sum(rows.values())
    measured = {k: v / total for k, v in rows.items()} if total else {}
    predicted = {t: float(plan.stats[f"predicted_hit_rate_{t}"]) for t in ("gpu", "cpu")
                 if f"predicted_hit_rate_{t}" in plan.stats}
    loop = {k: float(v) for k, v in result.timers.items() if k.endswith("_s")}
    with tempfile.TemporaryDirectory(prefix="strata-plots-") as tmp:
        write_run_plots(Path(tmp), {"loss": result.losses, "train_acc": result.train_acc, "val_acc": result.val_accs},
                        result.best_epoch, measured, predicted, stage_seconds(ancestors), loop)
        tracker.log_artifact(tmp, "plots")


def _derived(device: str, warm: WarmStart | None = None) -> dict[str, Any]:
    """Computed values that change the artifact: the device, the world size of a data parallel run (its ranks
    average the gradients of world-size batches per step), and the champion a warm start starts from."""
    import torch.distributed as dist

    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    return {"device": device, **({"world_size": world} if world > 1 else {}),
            **({"warm_start_from": warm.champion.identity()} if warm is not None else {})}


def version(store: ArtifactStore, cfg: PipelineConfig, upstream: dict[str, Artifact]) -> str:
    """The version :func:`run` gives the artifact for these upstream artifacts (in this process group)."""
    from trainer.device import resolve_device

    return stage_version(store, cfg, "train", FORMAT_VERSION, upstream, also=ALSO_READS,
                         derived=_derived(resolve_device(cfg.train.device), _warm_start(store, cfg)))


def train_rank(cfg: PipelineConfig, *, reorder: Artifact, sample: Artifact, pack: Artifact) -> None:
    """A data parallel rank other than 0: the same ``train`` call as :func:`run`'s, with nothing logged or
    written (rank 0's :func:`run` writes the artifact and the MLflow run)."""
    from trainer.device import resolve_device
    from trainer.train import train

    device = resolve_device(cfg.train.device)
    sample_set = SampleSet(sample.path)
    labels = narrow_labels(reorder.array("labels.npy"))  # in RAM: a map of the file faults per seed
    run_cfg = resolved(cfg, pack.stats)
    source = open_features(run_cfg, run_cfg.policy, reorder, pack, sample_set, device)
    try:
        train(dataclasses.replace(run_cfg.train, device=device), sample_set, source, labels)
    finally:
        source.close()


def _headline(result: Any, source: Any) -> dict[str, Any]:
    """Headline metrics: steady-state epoch time skips the first epoch when there are several."""
    from trainer.train import STAGE_BUSY_TIMERS

    epochs = result.epoch_s[1:] if len(result.epoch_s) > 1 else result.epoch_s
    return {
        "val_acc": float(result.val_acc),
        "test_acc": float(result.test_acc),
        "best_epoch": int(result.best_epoch),
        "stopped_epoch": int(result.stopped_epoch),  # the last epoch trained (early stopping or train.epochs)
        "early_stopped": bool(result.early_stopped),
        "final_loss": float(result.losses[-1]),
        "epoch_s": float(np.mean(epochs)),
        "bytes_read": int(result.bytes_read),
        "bytes_read_per_epoch": int(result.bytes_read) / max(len(result.epoch_s), 1),
        "cache_hit_rate": float(result.cache_hit_rate),
        "read_requests": int(result.read_requests),
        # epoch time over the slowest loader stage's busy time (1.0: stages fully overlapped)
        "overlap": float(result.timers.get("overlap", 0.0)),
        **{k: float(result.timers.get(k, 0.0)) for k in STAGE_BUSY_TIMERS},
        # CUDA: the share of the training time the GPU had a step in hand (trainer.train.gpu_step_share)
        **({"gpu_step_share": float(result.timers["gpu_step_share"])} if "gpu_step_share" in result.timers else {}),
        "direct_io": bool(source.direct_io),
    }


def load_model(artifact: Artifact) -> Any:
    """Rebuild the trained model from a ``train`` artifact (weights only, never unpickled objects)."""
    from trainer.models import load_trained

    return load_trained(artifact.json("model.json"), Path(artifact.file("state_dict.pt")))


def summary(artifact: Artifact) -> dict[str, Any]:
    """Accuracies, epoch time, I/O and the MLflow run (asset metadata)."""
    s = artifact.stats
    rows = {k: s[k] for k in (*HEADLINE_METRICS, *LINK_HEADLINE_METRICS) if k in s}
    if "bytes_read" in rows:
        rows["bytes_read"] = f"{rows['bytes_read']} ({format_bytes(rows['bytes_read'])})"
    out: dict[str, Any] = {"metrics": markdown_table(rows)}
    if "mlflow_run_id" in s:
        out["mlflow_run_id"] = s["mlflow_run_id"]
        out["mlflow_run"] = mlflow_run_url(s["mlflow_run_id"], s.get("mlflow_experiment_id"))
    return out
