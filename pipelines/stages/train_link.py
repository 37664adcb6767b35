"""The train and export stages under ``train.task=link``: link prediction on held-out edges (``trainer.link``).

``pipelines.stages.train.run`` and ``pipelines.stages.export.run`` hand over to :func:`train` and
:func:`export` when the task is ``link``; the stage graph, the artifact versioning (the ``train`` section's
link settings enter the version only under ``task=link``) and the Dagster assets are the same.

The ``train`` artifact holds ``state_dict.pt`` (the encoder's dense weights ``model.*`` and the decoder's
``decoder.*``), ``embeddings.npy`` (the learned table, encoder ``embedding``), ``model.json`` (encoder, decoder,
dimensions, the GNN's constructor arguments), ``history.json`` (loss and validation MRR per epoch) and
``link_split.npz`` (the train/valid/test edges: the source's own split when the reorder artifact carries one,
``pipelines.methods.sources.linksplit``, else a pure function of its CSR and ``train.link_split_seed``; stats
``link_split`` says which, and ``fixed_*`` rank against the source's own negatives when it has them).
Its stats carry ``mrr``, ``hits@1``, ``hits@3``, ``hits@10`` (test; filtered when
the graph is small enough, else against sampled negatives), their ``sampled_``/``filtered_``/``val_`` variants
and ``random_mrr`` (a random scorer's expected sampled MRR). MLflow gets the same numbers with ``@`` spelled
``_at_`` (MLflow's metric names allow no ``@``).

The ``export`` artifact is ``model.onnx`` (encoder + decoder scoring node pairs, verified in onnxruntime against
PyTorch relative to the largest score, ``trainer.link.export``) registered in MLflow as ``strata-<dataset>-link``
(the ``champion`` alias follows validation MRR). No fp16/int8 variants and no browser app: the web app shows
node classification only.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.config import PipelineConfig
from pipelines.core.graphio import feature_values
from pipelines.core.progress import Progress
from pipelines.methods.policies import POLICIES
from pipelines.methods.policies.auto import resolved
from pipelines.stages.common import StageResult, materialize
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["LINK_ONNX_TOLERANCE", "PREFETCH_RESERVE", "export", "is_link", "link_model_name", "load_scorer",
           "mlflow_name", "train"]

LINK_ONNX_TOLERANCE = 1e-4  # on max |onnx - torch| / max(1, max |score|)
PREFETCH_RESERVE = 1  # partitions of the CPU budget the automatic c leaves to the prefetch thread's spare slot


def is_link(artifact: Artifact) -> bool:
    """Whether a ``train`` artifact was trained with ``task=link``."""
    return artifact.stats.get("task") == "link"


def mlflow_name(key: str) -> str:
    """A metric name MLflow accepts (``hits@10`` -> ``hits_at_10``)."""
    return key.replace("@", "_at_")


def link_model_name(cfg: PipelineConfig) -> str:
    return cfg.export.model_name or f"strata-{cfg.dataset_name}-link"


def train(store: ArtifactStore, cfg: PipelineConfig, *, reorder: Artifact, upstream: dict[str, Artifact],
          format_version: int, also: tuple[str, ...], derived: dict[str, Any],
          progress: Progress | None = None) -> StageResult:
    """Split the reorder artifact's edges, train the link predictor, log to MLflow, write the artifact."""
    from pipelines.core.paths import StrataPaths
    from pipelines.methods.sources.linksplit import read_link_split
    from pipelines.ops.recovery import MLFLOW_OWNER_PREFIX
    from pipelines.tracking.run_logging import artifact_tags, lineage, run_params, summary_metrics
    from storage_kernels.owner import Owner
    from trainer.link.run import build_link
    from trainer.link.split import EdgeSplit
    from trainer.link.train import train_link
    from trainer.tracking import MlflowTracker

    if cfg.train.warm_start != "none":
        raise ValueError(f"'train.warm_start' expected none under train.task=link (got {cfg.train.warm_start})")
    if "world_size" in derived:
        raise ValueError(f"'train.task' link expected a single process (got a data parallel world of "
                         f"{derived['world_size']})")
    device = derived["device"]
    tcfg = dataclasses.replace(cfg.train, device=device)
    paths = StrataPaths(store.root)

    def build(builder: ArtifactBuilder) -> None:
        import torch

        indptr = np.asarray(reorder.array("indptr.npy"), dtype=np.int64)
        indices = np.asarray(reorder.array("indices.npy"), dtype=np.int64)
        features = feature_values(reorder) if tcfg.link_encoder == "gnn" else None
        if features is not None and features.dtype != np.float32:
            features = np.asarray(features, dtype=np.float32)
        layout = _partitioning(cfg, len(indptr) - 1) if _is_out_of_core(resolved(cfg, upstream["plan"].stats)) else None
        # a scratch sibling of the builder's dir: unique to this build (two runs of one version never share it)
        # and removed by ArtifactStore.cleanup_tmp once its process is gone
        node_file = builder.scratch_sibling("link-embeddings", ".bin") if layout is not None else None

        def partitioned(num_nodes: int) -> Any:  # the table lives in the node file from the start
            from trainer.link.outofcore import PartitionedEmbeddings

            assert layout is not None and node_file is not None
            store.tmp_dir.mkdir(parents=True, exist_ok=True)
            return PartitionedEmbeddings(node_file, num_nodes, tcfg.embedding_dim, layout[0], layout[1],
                                         tcfg.seed, num_threads=tcfg.num_threads,
                                         prefetch=cfg.plan.prefetch_partitions)

        given = read_link_split(reorder)  # the source's own split, or None: generate the deterministic one
        source_split = given is not None
        negatives = given[1] if given is not None else {}
        run = build_link(tcfg, indptr, indices, features, cfg.sample.fanouts, device,
                         embeddings=partitioned if layout is not None else None,
                         split=EdgeSplit(len(indptr) - 1, *given[0].values()) if given is not None else None)
        del given  # the run's split holds the edges now (out of core, only its bucket-grouped copy below)
        run.graph.split.save(builder.add_file("link_split.npz"))  # as split, before any reordering
        ooc = _OutOfCore(run.encoder.store, cfg, run.graph, *layout) if layout is not None else None
        if ooc is not None:  # the bucket-grouped copy is the training edge list now: do not hold two
            run.graph = dataclasses.replace(run.graph, split=dataclasses.replace(run.graph.split, train=ooc.grouped))
        tracker = MlflowTracker(paths.mlflow_tracking_uri, paths.mlflow_artifact_root,
                                experiment=f"strata-{cfg.dataset_name}")
        tags = {"strata.dataset": cfg.dataset_name, "strata.model_version": builder.version,
                "strata.policy": cfg.policy, "strata.task": "link",
                **artifact_tags(lineage(store, cfg.dataset_name, upstream)), **Owner.me().tags(MLFLOW_OWNER_PREFIX)}

        def on_epoch(epoch: int, metrics: dict[str, float]) -> None:
            if progress:
                progress("train: link epochs", epoch + 1, tcfg.epochs)

        class _Renamed:  # per-epoch curves under MLflow-safe names
            def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
                tracker.log_metrics({mlflow_name(k): v for k, v in metrics.items()}, step=step)

        with tracker.run(run_name=f"{cfg.dataset_name}-{builder.version}", tags=tags) as run_id:
            tracker.log_params({**run_params(cfg), **tcfg.to_dict()})
            try:
                result = train_link(tcfg, run.graph, run.encoder, run.decoder, run.sampler, tracker=_Renamed(),
                                    progress=on_epoch, epoch_batches=ooc.epoch_batches if ooc else None,
                                    keep_best=ooc is None)
                fixed = _fixed_metrics(tcfg, run, negatives, reorder.stats.get("link_negatives"))
                torch.save(result.state_dict, builder.add_file("state_dict.pt"))
                files = ["state_dict.pt", "model.json", "history.json"]
                store_ = getattr(run.encoder, "store", None)
                if ooc is not None:  # streamed partition by partition from the node file
                    # blocks reserved up front: a full disk is an OSError here, not a SIGBUS while it fills
                    table = builder.allocate_array("embeddings.npy", np.float32, (store_.num_nodes, store_.dim))
                    store_.write_table(table)
                    table.flush()
                    del table
                    files.append("embeddings.npy")
                elif store_ is not None:
                    np.save(builder.add_file("embeddings.npy"), store_.table)
                    files.append("embeddings.npy")
            finally:
                if ooc is not None:
                    ooc.close()
            builder.write_json("model.json", run.model_args)
            builder.write_json("history.json", {"loss": result.losses, "val_mrr": result.val_mrr,
                                                "epoch_s": result.epoch_s, "best_epoch": result.best_epoch,
                                                "stopped_epoch": result.stopped_epoch,
                                                "early_stopped": result.early_stopped})
            headline = {**result.metrics, **fixed, "link_split": "source" if source_split else "generated",
                        **run.graph.split.counts(),
                        "best_epoch": result.best_epoch, "stopped_epoch": result.stopped_epoch,
                        "early_stopped": result.early_stopped, "final_loss": result.losses[-1],
                        "epoch_s": float(np.mean(result.epoch_s[1:] or result.epoch_s)),
                        "eval_s": result.timers["eval_s"], **(ooc.stats() if ooc else {"out_of_core": False})}
            curves = tracker.client.get_run(run_id).data.metrics.keys()
            renamed = {("best_val_mrr" if k == "val_mrr" else mlflow_name(k)): v for k, v in headline.items()}
            tracker.log_metrics(summary_metrics(renamed, curves))  # once, under names no curve uses
            for name in files:
                tracker.log_artifact(builder.dir / name, "train")
        builder.stats.update(headline)
        builder.stats.update({"task": "link", "mlflow_run_id": run_id, "mlflow_experiment_id": tracker.experiment_id,
                              "mlflow_tracking_uri": paths.mlflow_tracking_uri, "device": device,
                              "policy": cfg.policy, "link_encoder": tcfg.link_encoder, "decoder": tcfg.decoder})

    return materialize(store, cfg, "train", format_version, upstream, build, also=also, derived=derived)


def _fixed_metrics(tcfg: Any, run: Any, negatives: dict[str, np.ndarray], kind: str | None) -> dict[str, float]:
    """``fixed_*`` (test) and ``val_fixed_*`` metrics against the source's own negatives
    (``trainer.link.fixed_negatives``); {} when it has none."""
    from trainer.link.fixed_negatives import evaluate_fixed

    out: dict[str, float] = {}
    for name, split_id, prefix in (("valid", 1, "val_"), ("test", 2, "")):
        if name in negatives:
            edges = getattr(run.graph.split, name)
            metrics = evaluate_fixed(run.encoder, run.decoder, edges, negatives[name], str(kind), tcfg, split_id)
            out.update({prefix + k: v for k, v in metrics.items()})
    return out


def _is_out_of_core(cfg: PipelineConfig) -> bool:
    """Learned embeddings train out of core under a policy that says so (``mariusgnn``: its partition buffer,
    ``Policy.link_embeddings_out_of_core``); the GNN encoder trains in memory."""
    return POLICIES.get(cfg.policy).link_embeddings_out_of_core and cfg.train.link_encoder == "embedding"


class _OutOfCore:
    """The node file, buffer and bucket order of an out-of-core run (``trainer.link.outofcore``)."""

    def __init__(self, store: Any, cfg: PipelineConfig, graph: Any, p: int, c: int, order: str) -> None:
        from trainer.link.outofcore import bucket_batches, group_buckets, partition_bounds

        self.store, self.cfg, self.p, self.c, self.order = store, cfg, p, c, order
        self.bounds = partition_bounds(graph.num_nodes, p)
        self.grouped, self.ptr = group_buckets(graph.split.train, self.bounds)
        self._batches = bucket_batches

    def epoch_batches(self, epoch: int) -> Any:
        return self._batches(self.grouped, self.ptr, self.bounds, self.cfg.train, self.order, self.c, epoch,
                             self.store.activate, self.store.prefetch)

    def stats(self) -> dict[str, Any]:
        s = self.store
        buffer_bytes = s.num_slots * s.stride  # c resident + the prefetch spares
        budget = self.cfg.plan.budgets(s.num_nodes * s.row_bytes)["cpu"]
        return {"out_of_core": True, "num_partitions": self.p, "buffer_partitions": self.c,
                "partition_order": self.order, "bytes_read": s.bytes_read, "read_requests": s.read_requests,
                "bytes_written": s.bytes_written, "write_requests": s.write_requests, "partition_loads": s.loads,
                "writebacks": s.writebacks, "max_resident": s.max_resident, "direct_io": bool(s.reader.direct),
                "node_file_bytes": int(s.offsets[-1] + s.lengths[-1]),
                "prefetch_partitions": s.prefetch_depth, "partitions_prefetched": s.prefetched,
                "max_slots_used": s.max_slots_used, "buffer_bytes": buffer_bytes, "cpu_budget_bytes": budget,
                "buffer_within_budget": buffer_bytes <= budget, "load_wait_s": s.load_wait_s,
                "write_waits": s.write_waits}

    def close(self) -> None:
        self.store.close()
        self.store.path.unlink(missing_ok=True)


def _partitioning(cfg: PipelineConfig, num_nodes: int) -> tuple[int, int, str]:
    """``(p, c, order)`` of an out-of-core run: ``p = plan.num_partitions`` or ``partition.num_parts``
    partitions of the node file, ``c = plan.buffer_partitions`` or as many as the CPU budget holds less one
    (at least 2) in memory, and the bucket order (``plan.partition_order``: beta, comet or random; alg7, node
    classification's default, means beta here). The one partition of the budget left over is the default
    prefetch slot (``plan.prefetch_partitions=1``); ``c`` does not depend on that setting, so neither do the
    results (a deeper prefetch goes over the budget: ``buffer_within_budget`` in the stats)."""
    order = cfg.plan.partition_order
    if order == "alg7":
        order = "beta"  # node classification's order (and the default): a link task pairs partitions, BETA
    if order not in ("beta", "comet", "random"):
        raise ValueError(f"'plan.partition_order' expected beta, comet or random under train.task=link (every pair "
                         f"of partitions must meet) (got {order})")
    dim = cfg.train.embedding_dim
    p = min(cfg.plan.num_partitions or cfg.partition.num_parts, num_nodes)
    part_bytes = -(-num_nodes // p) * 2 * dim * 4
    budget = cfg.plan.budgets(num_nodes * 2 * dim * 4)["cpu"]
    c = cfg.plan.buffer_partitions or max(2, budget // max(part_bytes, 1) - PREFETCH_RESERVE)
    c = min(c, p)
    if c < 2 and p > 1:
        raise ValueError(f"'plan.buffer_partitions' expected >= 2 to pair partitions (got {c})")
    return p, c, order


def load_scorer(train_artifact: Artifact) -> Any:
    """The PyTorch scorer (encoder + decoder) of a link ``train`` artifact."""
    from trainer.link.export import load_link_model

    emb = train_artifact.file("embeddings.npy") if "embeddings.npy" in train_artifact.files else None
    return load_link_model(train_artifact.file("model.json"), train_artifact.file("state_dict.pt"), emb)


def export(store: ArtifactStore, cfg: PipelineConfig, *, upstream: dict[str, Artifact], format_version: int,
           progress: Progress | None = None) -> StageResult:
    """ONNX of the link scorer (verified in onnxruntime), logged and registered in MLflow."""
    from pipelines.core.paths import StrataPaths
    from trainer.link.export import export_link_onnx, verify_link_onnx
    from trainer.tracking import MlflowTracker

    train_art = upstream["train"]
    paths = StrataPaths(store.root)
    name = link_model_name(cfg)

    def build(builder: ArtifactBuilder) -> None:
        scorer = load_scorer(train_art)
        onnx_path = builder.add_file("model.onnx")
        export_link_onnx(scorer, onnx_path, opset=cfg.export.opset)
        diff, scaled = verify_link_onnx(onnx_path, scorer)
        if not scaled <= LINK_ONNX_TOLERANCE:
            raise ValueError(f"'{onnx_path}' expected onnxruntime scores within {LINK_ONNX_TOLERANCE} of PyTorch, "
                             f"relative to the largest score (got max |diff| {diff:.3g}, scaled {scaled:.3g})")
        if progress:
            progress("export: link onnx verified", 1, 2)
        tracker = MlflowTracker(paths.mlflow_tracking_uri, paths.mlflow_artifact_root,
                                experiment=f"strata-{cfg.dataset_name}")
        run_id = train_art.stats["mlflow_run_id"]
        registered = _register(tracker, run_id, name, train_art, onnx_path)
        if progress:
            progress("export: registered", 2, 2)
        builder.stats.update({"task": "link", "model_name": name, **registered, "onnx_max_abs_diff": diff,
                              "onnx_max_scaled_diff": scaled,
                              "onnx_opset": cfg.export.opset, "onnx_bytes": onnx_path.stat().st_size,
                              "mlflow_run_id": run_id, "val_mrr": float(train_art.stats["val_mrr"]),
                              "web_app": "none (the browser app shows node classification only)"})

    return materialize(store, cfg, "export", format_version, upstream, build, derived={"model_name": name})


def _register(tracker: Any, run_id: str, name: str, train_art: Artifact, onnx_path: Path) -> dict[str, Any]:
    """Log the ONNX model (MLflow's onnx flavor) into the training run and register it, with the digests of the
    files logged (:mod:`pipelines.tracking.registry_digests`); the champion alias moves when validation MRR
    improves."""
    from pipelines.tracking.model_registry import EXPORT_DIR, MODEL_ARTIFACT, model_uri
    from pipelines.tracking.registry_digests import digests_tag, tree_digests
    from storage_kernels.arrays import file_checksum

    val_mrr = float(train_art.stats["val_mrr"])
    source_digests: dict[str, str] = {}

    def save(path: Path, model: Any) -> None:
        import mlflow.onnx
        import onnx

        mlflow.onnx.save_model(onnx.load(str(onnx_path)), str(path), mlflow_model=model,
                               metadata={"strata_dataset": train_art.dataset, "strata_task": "link",
                                         "strata_train_version": train_art.version, "val_mrr": val_mrr})
        source_digests.update(tree_digests(path))  # the files uploaded, as written

    with tracker.attach(run_id):
        model_id = tracker.log_model_dir(save, name=MODEL_ARTIFACT, tags={"strata.train_version": train_art.version})
        run_digests = {f"{EXPORT_DIR}/{onnx_path.name}": file_checksum(onnx_path)}
        tracker.log_artifact(onnx_path, EXPORT_DIR)
    version, champion = tracker.register(run_id, name, None, val_mrr, model_id=model_id,
                                         artifact_version=train_art.version,
                                         tags=digests_tag(source_digests, run_digests))
    return {"model_version": version, "champion_version": champion, "mlflow_model_id": model_id,
            "mlflow_model_uri": model_uri(name, version)}
