"""The training configuration -- one for the library, the CLI and Dagster -- and the ``setting`` helper.

:class:`TrainConfig` is the ``train`` section of ``pipelines.config.PipelineConfig`` as it is: every field is
reachable from ``strata run --set train.<field>=...`` and from Dagster's run config, and the same frozen
object is logged whole to MLflow and stored in every checkpoint.

:func:`setting` declares a configuration field for every section of Strata: its default, its description,
and whether it changes the artifact its stage writes (``artifact``). The version hash of an artifact is
computed from those declarations in one place (``pipelines.config.artifact_params``); a field that only
changes speed (threads, queue depths, buffer sizes) says ``artifact=False`` and never causes a rebuild.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

__all__ = ["LINK_FIELDS", "ArtifactEffect", "TrainConfig", "artifact_effect", "setting"]

#: How a field enters its stage's artifact version: always (True), never (False), or only when the
#: method selected for the stage declares that it reads the field ("selected").
ArtifactEffect = bool | Literal["selected"]
_ARTIFACT_KEY = "strata_artifact"


def setting(default: Any = PydanticUndefined, description: str = "", *, artifact: ArtifactEffect = True,
            default_factory: Any = None, **constraints: Any) -> Any:
    """A described configuration field (pydantic ``Field``) that declares its effect on the artifact."""
    if artifact not in (True, False, "selected"):
        raise ValueError(f"'artifact' expected True, False or 'selected' (got {artifact!r})")
    extra = {_ARTIFACT_KEY: artifact}
    if default_factory is not None:
        return Field(default_factory=default_factory, description=description, json_schema_extra=extra,
                     **constraints)
    return Field(default, description=description, json_schema_extra=extra, **constraints)


def artifact_effect(info: FieldInfo) -> ArtifactEffect:
    """What :func:`setting` declared for a field (a plain ``Field`` counts as ``True``)."""
    extra = info.json_schema_extra
    return extra.get(_ARTIFACT_KEY, True) if isinstance(extra, dict) else True


#: The settings of ``task=link`` (declared ``artifact="selected"``: node-classification versions do not change).
LINK_FIELDS = frozenset({"task", "link_encoder", "decoder", "embedding_dim", "embedding_lr", "link_batch_size",
                         "negatives", "negative_chunk", "negative_sampler", "eval_negatives", "filtered_eval",
                         "filtered_max_nodes", "link_valid_fraction", "link_test_fraction", "link_split_seed"})


def _link_checks(cfg: TrainConfig) -> dict[str, bool]:
    """Ranges of the link-prediction settings (the held-out fractions leave edges to train on)."""
    return {"embedding_dim": cfg.embedding_dim >= 1, "embedding_lr": cfg.embedding_lr > 0.0,
            "link_batch_size": cfg.link_batch_size >= 1, "negatives": cfg.negatives >= 1,
            "negative_chunk": cfg.negative_chunk >= 1, "eval_negatives": cfg.eval_negatives >= 1,
            "filtered_max_nodes": cfg.filtered_max_nodes >= 0,
            "link_valid_fraction": 0.0 < cfg.link_valid_fraction < 0.5,
            "link_test_fraction": 0.0 < cfg.link_test_fraction < 0.5
            and cfg.link_valid_fraction + cfg.link_test_fraction < 0.9,
            "link_split_seed": cfg.link_split_seed >= 0}


@dataclass(frozen=True, config=ConfigDict(extra="forbid", allow_inf_nan=False))  # inf/NaN: refused, named
class TrainConfig:
    """Hyper-parameters and run options of :func:`trainer.train.train`.

    Flat on purpose (nanoGPT style): every field is a primitive, so the whole config goes to
    ``mlflow.log_params`` and into the checkpoint dict as is, and ``TrainConfig.from_dict`` reads it back.
    """

    # model
    model: str = setting("graphsage", "Architecture: a name registered in trainer.models.MODELS.")
    hidden_dim: int = setting(128, "Width of every hidden layer.")
    num_layers: int = setting(0, "Layers; 0 = one per sampled hop (len(sample.fanouts)), otherwise must equal it.")
    num_classes: int = setting(0, "Output classes; 0 = labels.max() + 1.")
    dropout: float = setting(0.5, "Dropout between layers, training only.")
    heads: int = setting(4, "gat: attention heads (hidden layers concatenate them, hidden_dim / heads channels "
                         "each; the last layer averages them).", artifact="selected")
    # optimizer
    lr: float = setting(0.01, "Adam learning rate.")
    weight_decay: float = setting(5e-4, "Adam weight decay (L2 penalty).")
    # loop
    epochs: int = setting(200, "Maximum training epochs (early stopping usually ends sooner); epoch e uses the "
                                "train batches of sample epoch e % sample.epochs.")
    eval_every: int = setting(1, "Evaluate on the validation batches every N epochs (and after the last one).")
    eval_mode: str = setting("sampled", "Validation/test accuracy from the sampled eval batches (sampled) or by "
                             "full-neighbourhood layer-wise inference over the nodes they depend on, streamed from "
                             "disk in bounded memory (layerwise; trainer/layerwise.py).")
    layerwise_memory_mb: int = setting(256, "eval_mode=layerwise: the memory inference works in (half for a "
                                       "target interval's accumulators and edges; layer tables beyond an eighth "
                                       "go to scratch files). Smaller: more intervals, each re-reading its sources.",
                                       artifact=False)
    patience: int = setting(10, "Early stopping: stop at an evaluation when validation accuracy has not "
                                      "improved for this many epochs; the best weights are restored. 0 = never.")
    min_delta: float = setting(0.001, "Early stopping: an improvement must exceed the best validation "
                                          "accuracy by more than this to count.")
    seed: int = setting(0, "Seed of model initialisation and dropout.")
    deterministic: bool = setting(True, "torch.use_deterministic_algorithms (warn only where an op has none).")
    num_threads: int = setting(0, "torch intra-op threads while training; 0 = the plan's choice (a probe of the "
                               "model's step at all cores and one fewer; `strata plan --explain`), else torch's "
                               "setting, one fewer on the CPU when the pipelined loader reads the disk.",
                               artifact=False)
    # data pipeline
    prefetch: int = setting(2, "Loader queue depth (batches read ahead of compute).", artifact=False)
    loader_memory_mb: int = setting(
        1024, "Feature rows of the batches in flight at most (read ahead, assembled, in the step): the loader "
        "waits before reading a batch that would pass it, unless none is in flight (wide features: a batch's "
        "rows can be hundreds of MiB). 0 = prefetch alone bounds them.", artifact=False)
    sequential: bool = setting(False, "No stage threads: load, assemble and compute in turn (ablation).",
                               artifact=False)
    device: str = setting("auto", "cpu, cuda[:i] or auto (CUDA when available).")
    autocast: str = setting("none", "Mixed precision of the forward pass: none (float32) or bf16 (torch.autocast "
                            "with bfloat16; for CUDA GPUs with bf16 support, also runs under CPU autocast).")
    io_backend: str = setting("auto", "Feature-file reads: uring (io_uring, queue_depth requests in flight), pread "
                              "(thread pool) or auto (uring when the kernel allows it).", artifact=False)
    io_queue_depth: int = setting(
        256, "io_uring reads in flight per read call (1..4096); deeper queues reap more completions per system "
        "call.", artifact=False)
    # checkpoints
    checkpoint_path: str = setting("", "Write a checkpoint here after every epoch ('' = none).", artifact=False)
    checkpoint_every: int = setting(0, "Also checkpoint every N training batches (steps), mid-epoch; 0 = only "
                                       "after each epoch. trainer.train needs checkpoint_path; the pipeline's "
                                       "train stage checkpoints into its resume dir.", artifact=False)
    resume: str = setting("", "Continue from this checkpoint ('' = train from scratch).", artifact=False)
    warm_start: Literal["none", "champion"] = setting(
        "none", "Initial weights (read by the train stage, pipelines.tracking.warmstart): none (seeded random init) or "
        "champion (the registered model's 'champion' version when its architecture and weight shapes match; "
        "the retrain schedule and the source sensor set it).")
    # data parallel (trainer.distributed; the world size enters the train artifact's version)
    distributed: bool = setting(False, "DistributedDataParallel over the torchrun ranks (also on when RANK and "
                                "WORLD_SIZE are set); alone, a world of one.", artifact=False)
    # link prediction (trainer/link; these enter the train artifact's version only under task=link)
    task: Literal["node", "link"] = setting(
        "node", "node: node classification; link: link prediction on held-out edges (trainer/link), reporting "
        "mrr and hits@1/3/10.", artifact="selected")
    link_encoder: Literal["gnn", "embedding"] = setting(
        "gnn", "task=link: node representations from `model` over sampled neighbourhoods of the features (gnn) "
        "or learned node embeddings alone (embedding, Adagrad).", artifact="selected")
    decoder: Literal["dot", "distmult"] = setting(
        "distmult", "task=link: edge score <h_u, h_v> (dot) or <h_u, r, h_v> with a learned diagonal r "
        "(distmult).", artifact="selected")
    embedding_dim: int = setting(64, "task=link: width of the node representations (the encoder's output).",
                                 artifact="selected")
    embedding_lr: float = setting(0.1, "task=link, encoder embedding: Adagrad learning rate of the embeddings.",
                                  artifact="selected")
    link_batch_size: int = setting(1024, "task=link: positive training edges per batch.", artifact="selected")
    negatives: int = setting(128, "task=link: negative nodes drawn per chunk of positives (shared by the chunk, "
                             "as MariusGNN does).", artifact="selected")
    negative_chunk: int = setting(128, "task=link: positives per chunk sharing one set of negatives.",
                                  artifact="selected")
    negative_sampler: Literal["uniform", "degree"] = setting(
        "uniform", "task=link: negatives uniform over the nodes, or proportional to the training degree (an "
        "endpoint of a uniformly drawn training edge).", artifact="selected")
    eval_negatives: int = setting(1000, "task=link: sampled negatives each validation/test query is ranked "
                                  "against (shared per chunk of negative_chunk queries).", artifact="selected")
    filtered_eval: Literal["auto", "on", "off"] = setting(
        "auto", "task=link: also rank every held-out edge against all nodes with the known edges filtered out "
        "(auto: when the graph has at most filtered_max_nodes nodes); the headline mrr/hits are then filtered.",
        artifact="selected")
    filtered_max_nodes: int = setting(50_000, "task=link: node count up to which filtered_eval=auto filters.",
                                      artifact="selected")
    link_valid_fraction: float = setting(0.05, "task=link: fraction of the undirected edges held out for "
                                         "validation (removed from the training graph).", artifact="selected")
    link_test_fraction: float = setting(0.05, "task=link: fraction of the undirected edges held out for test "
                                        "(removed from the training graph).", artifact="selected")
    link_split_seed: int = setting(0, "task=link: seed of the train/valid/test edge split.", artifact="selected")

    def __post_init__(self) -> None:
        checks = {
            "hidden_dim": self.hidden_dim >= 1,
            "num_layers": self.num_layers >= 0,
            "num_classes": self.num_classes >= 0,
            "dropout": 0.0 <= self.dropout < 1.0,
            "heads": self.heads >= 1,
            "lr": self.lr > 0.0,
            "weight_decay": self.weight_decay >= 0.0,
            "epochs": self.epochs >= 1,
            "eval_every": self.eval_every >= 1,
            "patience": self.patience >= 0,
            "min_delta": 0.0 <= self.min_delta < 1.0,
            "checkpoint_every": self.checkpoint_every >= 0,
            "prefetch": self.prefetch >= 1,
            "loader_memory_mb": self.loader_memory_mb >= 0,
            "num_threads": self.num_threads >= 0,
            "model": bool(self.model),
            "device": self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"),
            "io_backend": self.io_backend in ("auto", "uring", "pread"),
            "io_queue_depth": 1 <= self.io_queue_depth <= 4096,
            "autocast": self.autocast in ("none", "bf16"),
            "eval_mode": self.eval_mode in ("sampled", "layerwise"),
            "layerwise_memory_mb": self.layerwise_memory_mb >= 0,
        }
        checks.update(_link_checks(self))
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"'TrainConfig.{name}' expected a value in range (got {getattr(self, name)!r})")

    def selected_reads(self) -> frozenset[str]:
        """The ``artifact="selected"`` fields the selected model reads (its registry entry's ``reads``)."""
        from trainer.models import model_reads

        return frozenset(model_reads(self.model)) | (LINK_FIELDS if self.task == "link" else frozenset())

    def to_dict(self) -> dict[str, Any]:
        """Flat ``{field: primitive}`` dict (MLflow params, checkpoint ``config``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError`` naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"'TrainConfig' expected fields from {sorted(names)} (got unknown {unknown})")
        return cls(**values)
