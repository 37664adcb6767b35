"""One typed configuration for a whole run: a section per stage, named like the stage.

:class:`PipelineConfig` holds the dataset, the cache/batching ``policy`` and one section per stage of the
stage graph (``ingest``, ``reorder``, ``partition``, ``sample``, ``plan``, ``pack``, ``train``, ``export``,
``predict``).
The CLI parses it once (file, then ``--set section.key=value`` overrides, then keywords) and hands the typed
object on; Dagster runs carry the same fields as typed run config (:mod:`pipelines.orchestration.resources`).

Every field is declared with :func:`trainer.config.setting`, which says whether it changes the artifact of
its stage. :func:`artifact_params` turns those declarations into the parameters an artifact version is hashed
from -- the only place that decision is made. Fields declared ``artifact="selected"`` belong to one method
(a reorder strategy's seed, a partitioner's knobs) and count only when the method the section selects says
it reads them (the registry entry's ``reads``).

Names that pick a method (``reorder.strategy``, ``partition.method``, ``sample.sampler``, ``train.model``,
``policy``) are checked against their registries, so a toy method registered by a test or a plugin is valid
configuration without touching this file.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from pipelines.budget import fill_from_budget
from pipelines.core.confine import parse_bytes
from pipelines.core.errors import explain_validation
from pipelines.core.sections import SEED_BOUNDS, Bytes, Section, is_section, section_fields
from pipelines.methods.orders import REORDER_STRATEGIES
from pipelines.methods.orders.settings import ReorderConfig
from pipelines.methods.partitioners import PARTITIONERS
from pipelines.methods.partitioners.settings import PartitionConfig
from pipelines.methods.policies import BUILTIN_POLICIES, POLICIES
from pipelines.methods.samplers import SAMPLERS
from storage_kernels.registry import Registry
from trainer.architectures import MODELS  # names declared without torch; trainer.models registers them
from trainer.config import TrainConfig, artifact_effect, setting

__all__ = [
    "ExportConfig",
    "IngestConfig",
    "PackConfig",
    "PartitionConfig",
    "PipelineConfig",
    "PlanConfig",
    "PredictConfig",
    "ReorderConfig",
    "SampleConfig",
    "TrainConfig",
    "VerifyConfig",
    "artifact_params",
    "dagster_size_string",
    "dataset_slug",
    "describe_settings",
    "is_section",
    "section_fields",
]

#: The fields whose values name a registry entry, by section (checked on validation: a toy method registered
#: by a test or a plugin is valid configuration), and, per section, the one that selects the section's method:
#: that entry's ``reads`` decide which of the section's ``artifact="selected"`` fields count.
_NAMED: dict[str, dict[str, Registry[Any]]] = {
    "reorder": {"strategy": REORDER_STRATEGIES, "partition_method": PARTITIONERS},
    "partition": {"method": PARTITIONERS},
    "sample": {"sampler": SAMPLERS},
}
_SELECTOR = {"reorder": "strategy", "partition": "method"}


def _fanouts_valid(value: list[int]) -> list[int]:
    """Each hop samples at least one neighbour, or all of them (-1); a 0 would train on the seeds alone."""
    if not value or any(f != -1 and f < 1 for f in value):
        raise ValueError(f"a non-empty list of neighbours per hop, each >= 1 or -1 for all (got {value})")
    return value


#: ``sample.fanouts``: checked as a whole, so the message shows the list.
Fanouts = Annotated[list[int], AfterValidator(_fanouts_valid)]


def _budget_bytes(value: Any) -> int | None:
    return None if value is None else parse_bytes(value, "memory_budget")


#: ``memory_budget``: bytes, or a size such as ``512M``, ``2G``, ``1.5GiB`` (binary units).
MemoryBudget = Annotated[int | None, BeforeValidator(_budget_bytes)]


def dagster_size_string(info: FieldInfo) -> bool:
    """Whether a setting is typed as a size string (``"2G"``) in Dagster's run config: ``memory_budget``. (The
    byte settings, ``Bytes``, take sizes from the CLI and config files but stay integers there, so that run
    configs written with numbers keep working.)"""
    return any(isinstance(m, BeforeValidator) and m.func is _budget_bytes for m in info.metadata)


def _owned(section: str) -> tuple[type[Section], ...]:
    """The settings the built-in policies declare for ``section`` (``Policy.settings``), as base classes in
    the order their fields are listed: the first policy's first (pydantic collects fields from the last base)."""
    return tuple(reversed([cls.settings[section] for cls in BUILTIN_POLICIES if section in cls.settings]))


class IngestConfig(Section):
    options: dict[str, str] = setting(
        default_factory=dict,
        description="Source options, e.g. features=PATH.npy, labels=PATH.npy for edgelist sources.",
    )
    chunk_edges: int = setting(4_000_000, "Edges per chunk while building the CSR.", artifact=False, gt=0)
    memory_mb: int = setting(
        1024, "Memory for building the CSR: a graph whose edges need more (about 40 bytes an edge) is built out "
        "of core, its edges distributed to scratch buckets of source rows and each bucket placed in turn.",
        artifact=False, gt=0)
    feature_dtype: Literal["float32", "float16"] = setting(
        "float32", "Element type of the stored feature file: float16 halves the bytes stored and read (every "
        "tier moves rows as opaque 4-byte words; an odd dimension gets a zero pad column) and is upcast to "
        "float32 when a batch is assembled (storage_kernels/halfwords.py).")


class SampleConfig(Section):
    sampler: str = setting("uniform", "Neighbour sampler (pipelines.methods.samplers): uniform (per-layer, without "
                           "replacement) or dense (MariusGNN's DENSE: one-hop samples reused across hops).")
    fanouts: Fanouts = setting(default_factory=lambda: [10, 10],
                               description="Neighbours per hop, seeds first (each >= 1, or -1 for all).")
    batch_size: int = setting(1024, "Seed nodes per mini-batch.", gt=0)
    epochs: int = setting(3, "Training epochs sampled offline (reused cyclically).", gt=0)
    eval_batch_size: int = setting(
        16384, "Seeds per validation/test batch at most (large, because eval neighbourhoods overlap); fewer when "
        "a batch's sampled feature rows would exceed sample.eval_memory_mb.", gt=0
    )
    eval_memory_mb: int = setting(
        1024, "Estimated feature bytes of one validation/test batch at most (its seeds times the nodes a seed's "
        "fanouts sample, at most every node, times the row bytes): eval_batch_size is lowered to fit, never below "
        "batch_size. Only the resulting batch size shapes the artifact.", artifact=False, gt=0,
    )
    seed: int = setting(0, "Sampling seed.", **SEED_BOUNDS)
    num_threads: int = setting(0, "Sampler threads (0 = all cores); output does not depend on it.",
                               artifact=False, ge=0)
    batching: Literal["random", "partition"] = setting(
        "random",
        "Training batches: random shuffles, or OUTRE's partition-based macro batches (random groups of "
        "partitions whose training nodes are shuffled and cut into batches).",
    )
    macro_parts: int = setting(20, "Partitions per macro batch when batching=partition.", gt=0)


class _PlanShared(Section):
    """The ``plan`` settings every caching policy reads: the GPU and CPU cache budgets."""

    gpu_cache_fraction: float = setting(0.0, "GPU cache size as a fraction of feature bytes.", ge=0, le=1)
    cpu_cache_fraction: float = setting(0.1, "CPU cache size as a fraction of feature bytes.", ge=0, le=1)
    gpu_cache_bytes: Bytes | None = setting(None, "Absolute GPU cache budget (overrides the fraction).", ge=0)
    cpu_cache_bytes: Bytes | None = setting(None, "Absolute CPU cache budget (overrides the fraction).", ge=0)

    def budgets(self, feature_bytes: int) -> dict[str, int]:
        """``{"gpu": bytes, "cpu": bytes}``: the absolute budget when set, else the fraction of the features."""
        return {
            "gpu": self.gpu_cache_bytes if self.gpu_cache_bytes is not None else int(self.gpu_cache_fraction
                                                                                     * feature_bytes),
            "cpu": self.cpu_cache_bytes if self.cpu_cache_bytes is not None else int(self.cpu_cache_fraction
                                                                                     * feature_bytes),
        }


class PlanConfig(*_owned("plan"), _PlanShared):
    """The ``plan`` section: the shared cache budgets, then each built-in policy's own plan settings
    (``Policy.settings["plan"]``, declared in the policy's module)."""


class _PackShared(Section):
    """The ``pack`` stage's own settings, whatever the policy."""

    memory_mb: int = setting(256, "Memory budget for one feature partition while packing.", artifact=False, gt=0)
    num_threads: int = setting(0, "Packing threads (0 = all cores).", artifact=False, ge=0)


class PackConfig(*_owned("pack"), _PackShared):
    """The ``pack`` section: the stage's memory and threads, then each built-in policy's own pack settings."""


class ExportConfig(Section):
    opset: int = setting(18, "ONNX opset (>= 18 for scatter_reduce max/min).", ge=18)
    model_name: str | None = setting(None, "Registered model name (default strata-<dataset>).", min_length=1,
                                     max_length=256, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    web_seeds: int = setting(32, "Validation seeds in the browser app's sample subgraph (subgraph.json/.bin).",
                             gt=0)
    calibration_batches: int = setting(4, "Export batches (the first training batches, cut to export.memory_mb) "
                                       "that calibrate the int8 variant's activation ranges.", gt=0)
    memory_mb: int = setting(
        512, "Working memory of one batch the export runs its ONNX models on (the variants' accuracy, int8 "
        "calibration, the sample subgraph): a batch over it is cut into parts of fewer seeds (feature rows plus "
        "each layer's edge-sized tensors, trainer/export_batches.py). Predictions do not depend on it.",
        artifact=False, gt=0)


class PredictConfig(Section):
    embedding: Literal["logits", "hidden", "none"] = setting(
        "logits",
        "The embedding column of `strata predict`'s rows: logits (the final layer's output: the built-in models "
        "have no separate classifier head, their last graph layer is it), hidden (the last layer's input, "
        "train.hidden_dim wide: the representation the classifying layer reads) or none (no column: the smallest "
        "file).")
    memory_mb: int = setting(
        256, "The memory layer-wise inference over every node works in (half for an interval's accumulators and "
        "edges, trainer/layerwise.py); more memory, fewer passes over the input. Predictions do not depend on it.",
        artifact=False, gt=0)
    chunk_nodes: int = setting(
        8192, "The fewest nodes an interval of layer-wise inference holds and a read window reads, whatever the "
        "memory (trainer/layerwise.py, LayerwiseGraph.chunk_nodes).", artifact=False, gt=0)
    row_group_rows: int = setting(
        65536, "Rows per Parquet row group of predictions.parquet.", artifact=False, gt=0)


class VerifyConfig(Section):
    on_reuse: Literal["full", "sampled", "off"] = setting(
        "full",
        "Checks a reused artifact against its manifest before a stage reads it: full (re-hash every file: any "
        "changed byte is caught), sampled (size + 10 sampled 1 MiB blocks per file: files up to 10 MiB fully, "
        "larger ones only partly), off. A mismatch quarantines the artifact and fails the run.",
        artifact=False,
    )


class PipelineConfig(Section):
    """The whole run: which dataset, which policy, and every stage's settings."""

    dataset: str = setting("tiny", "Built-in dataset name or a source spec (see `strata datasets`).")
    policy: str = setting(
        "auto",
        "Cache/batching policy, an entry of pipelines.methods.policies.POLICIES: auto (the default) plans each run "
        "by predicted epoch time and picks one of the others (the seed systems and the baselines in_memory, mmap, "
        "naive; `strata plan --explain` says why); name one to force it.",
    )
    memory_budget: MemoryBudget = setting(
        None, "RAM for the graph's data (caches, read buffers, page cache), e.g. 2G: sizes the CPU cache (half), "
        "the policy's read buffer and the streaming stages' memory wherever they are left at their defaults, and "
        "refuses a plan whose buffers exceed it (pipelines.budget); null: the fractions of the feature bytes.",
        artifact=False)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    reorder: ReorderConfig = Field(default_factory=ReorderConfig)
    partition: PartitionConfig = Field(default_factory=PartitionConfig)
    sample: SampleConfig = Field(default_factory=SampleConfig)
    plan: PlanConfig = Field(default_factory=PlanConfig)
    pack: PackConfig = Field(default_factory=PackConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    export: ExportConfig = Field(default_factory=ExportConfig)
    predict: PredictConfig = Field(default_factory=PredictConfig)
    verify: VerifyConfig = Field(default_factory=VerifyConfig)

    @model_validator(mode="before")
    @classmethod
    def _sized_by_budget(cls, data: Any) -> Any:
        """With a ``memory_budget``, the settings it sizes (:func:`pipelines.budget.fill_from_budget`)."""
        if isinstance(data, Mapping) and data.get("memory_budget") is not None:
            defaults = {"plan": PlanConfig(), "sample": SampleConfig(), "ingest": IngestConfig(),
                        "reorder": ReorderConfig(), "pack": PackConfig(), "train": TrainConfig(),
                        "export": ExportConfig(), "predict": PredictConfig()}
            return fill_from_budget(data, _budget_bytes(data["memory_budget"]), defaults)
        return data

    @field_validator(*_NAMED)
    @classmethod
    def _section_names(cls, section: Any, info: ValidationInfo) -> Any:
        """The section's fields that name a registry entry name a registered one."""
        for name, registry in _NAMED[str(info.field_name)].items():
            registry.check(getattr(section, name))  # ValueError: "'<registry kind>' expected one of ... (got ...)"
        return section

    @model_validator(mode="after")
    def _registered_names(self) -> PipelineConfig:
        """The policy and the model name registered entries."""
        POLICIES.check(self.policy)
        MODELS.check(self.train.model)
        for section, model in POLICIES.get(self.policy).settings.items():
            unknown = sorted(set(model.model_fields) - set(section_fields(getattr(self, section))))
            if unknown:  # a plugin's own settings: the sections were assembled from the built-in policies
                raise ValueError(f"'policy' {self.policy} expected its settings in the {section} section (got "
                                 f"{', '.join(unknown)}, which only a built-in policy can declare: "
                                 "pipelines.methods.policies.BUILTIN_POLICIES)")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> PipelineConfig:
        """Checks across sections (each section checked its own fields already)."""
        hops = len(self.sample.fanouts)
        if self.train.num_layers not in (0, hops):
            raise ValueError(f"'train.num_layers' expected 0 or len(sample.fanouts) = {hops} "
                             f"(got {self.train.num_layers})")
        return self

    @property
    def dataset_name(self) -> str:
        """Directory-safe name of the dataset (a spec is hashed into a readable slug)."""
        return dataset_slug(self.dataset)

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: Iterable[str] | None = None,
             **top: Any) -> PipelineConfig:
        """Build a config from an optional YAML/JSON file, then ``key=value`` overrides, then keywords.

        Every problem is one ``ValueError`` naming the setting: ``'sample.batch_size' expected ... (got -1)``.
        """
        data: dict[str, Any] = {}
        if path is not None:
            data = _read_config_file(Path(path))
        for item in overrides or []:
            _apply_override(data, item)
        for key, value in top.items():
            if value is not None:
                data[key] = value
        return cls.validated(data)

    @classmethod
    def validated(cls, data: Mapping[str, Any]) -> PipelineConfig:
        """``model_validate`` with pydantic's errors turned into one readable ``ValueError``."""
        try:
            return cls.model_validate(dict(data))
        except ValidationError as e:
            raise ValueError(explain_validation(e.errors())) from e

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _section_params(section: Any, selected: Collection[str] | None) -> dict[str, Any]:
    """Fields of ``section`` that change the artifact; ``selected=None`` keeps every selected field too."""
    out = {}
    for name, info in section_fields(section).items():
        effect = artifact_effect(info)
        if effect is True or (effect == "selected" and (selected is None or name in selected)):
            out[name] = _plain(getattr(section, name))
    return out


def _selected_reads(stage: str, section: Any) -> frozenset[str]:
    """What the section's selected method reads: its ``artifact="selected"`` fields and any other sections
    (the train section: its model's, and the link task's)."""
    if isinstance(section, TrainConfig):
        return section.selected_reads()
    if stage not in _SELECTOR:
        return frozenset()
    selector = _SELECTOR[stage]
    return frozenset(_NAMED[stage][selector].get(getattr(section, selector)).reads)


def artifact_params(cfg: PipelineConfig, stage: str, also: Iterable[str] = ()) -> dict[str, Any]:
    """The configuration an artifact of ``stage`` depends on, from the fields' declarations.

    ``stage``'s own section contributes its ``artifact=True`` fields and the ``artifact="selected"`` fields its
    selected method reads; a name the method reads that is not one of the section's fields is another section
    (or top-level field), included whole. ``also`` names further sections or top-level fields the stage reads
    (``policy`` for plan, pack and train), included whole; with ``policy`` among them, the policy's ``reads``
    (its ``artifact="selected"`` fields of this section, e.g. ``plan.staleness`` for ``outre``) count too.
    """
    section = getattr(cfg, stage)
    reads = _selected_reads(stage, section)
    own = section_fields(section)
    if "policy" in also:  # a stage shaped by the policy: the policy's own knobs of this section count too
        reads = reads | (frozenset(POLICIES.get(cfg.policy).reads) & frozenset(own))
    params = _section_params(section, reads)
    for name in [*sorted(r for r in reads if r not in own), *also]:
        value = getattr(cfg, name)
        params[name] = _section_params(value, None) if is_section(value) else value
    return params


def describe_settings(cfg: PipelineConfig) -> list[dict[str, Any]]:
    """One row per setting: ``key`` (dotted), ``value``, ``default``, ``artifact`` effect, ``description``."""
    rows = []
    defaults = PipelineConfig()

    def walk(prefix: str, section: Any, default: Any) -> None:
        for name, info in section_fields(section).items():
            value, base = getattr(section, name), getattr(default, name)
            if is_section(value):
                walk(f"{prefix}{name}.", value, base)
                continue
            rows.append({"key": prefix + name, "value": _plain(value), "default": _plain(base),
                         "artifact": artifact_effect(info), "description": info.description or ""})

    walk("", cfg, defaults)
    return rows


def dataset_slug(spec: str) -> str:
    """A directory-safe dataset name: built-in names stay, specs become ``<kind>-<name>-<hash8>``."""
    if re.fullmatch(r"[A-Za-z0-9_.-]+", spec):
        return spec
    kind, _, rest = spec.partition(":")
    stem = re.sub(r"[^A-Za-z0-9]+", "-", Path(rest).name if kind != "synthetic" else rest).strip("-")[:24]
    digest = hashlib.sha256(spec.encode()).hexdigest()[:8]
    return "-".join(p for p in (re.sub(r"[^A-Za-z0-9]+", "", kind), stem, digest) if p)


def _read_config_file(path: Path) -> dict[str, Any]:
    """The file's mapping; every problem is a ``ValueError`` naming the file and the position, never quoting
    the file's text (a wrong ``--config`` may point at anything)."""
    if not path.exists():
        raise FileNotFoundError(f"'--config' expected an existing YAML or JSON file (got {path})")
    if not path.is_file():
        raise ValueError(f"'--config' expected a YAML or JSON file (got a directory or special file: {path})")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"'{path}' expected UTF-8 text (got a binary file: byte {e.start})") from None
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "unknown position"
            raise ValueError(f"'{path}' expected valid YAML (got a syntax error at {where})") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"'{path}' expected valid JSON (got a syntax error at line {e.lineno}, "
                             f"column {e.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"'{path}' expected a mapping at the top level (got {type(data).__name__})")
    return data


def _parse_value(raw: str) -> Any:
    """``--set`` values are JSON when they parse as JSON (numbers, lists, booleans), else strings."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        if "," in raw and not raw.startswith(("[", "{")):
            return [_parse_value(part) for part in raw.split(",")]
        return raw


def _apply_override(data: dict[str, Any], item: str) -> None:
    if "=" not in item:
        raise ValueError(f"'--set' expected key=value (got {item!r})")
    key, raw = item.split("=", 1)
    parts = key.strip().split(".")
    if parts[0] not in PipelineConfig.model_fields:
        valid = ", ".join(sorted(PipelineConfig.model_fields))
        raise ValueError(f"'--set {key}' expected a key starting with one of: {valid} (got {parts[0]!r})")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(f"'--set {key}' expected {part} to be a section (got a value)")
    # source options stay strings (paths); everything else is typed by the section
    node[parts[-1]] = raw if parts[:2] == ["ingest", "options"] else _parse_value(raw)
