"""One typed configuration for a whole run: a section per stage, named like the stage.

:class:`PipelineConfig` holds the dataset, the cache/batching ``policy`` and one section per stage of the
stage graph (``ingest``, ``reorder``, ``partition``, ``sample``, ``plan``, ``pack``, ``train``, ``export``).
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
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo

from storage_kernels.registry import Registry
from trainer.config import TrainConfig, artifact_effect, setting

__all__ = [
    "ExportConfig",
    "IngestConfig",
    "PackConfig",
    "PartitionConfig",
    "PipelineConfig",
    "PlanConfig",
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


# The registries that setting values name, imported when first needed (they import the stages' code).
def _orders() -> Registry[Any]:
    from pipelines.methods.orders import REORDER_STRATEGIES

    return REORDER_STRATEGIES


def _partitioners() -> Registry[Any]:
    from pipelines.methods.partitioners import PARTITIONERS

    return PARTITIONERS


def _samplers() -> Registry[Any]:
    from pipelines.methods.samplers import SAMPLERS

    return SAMPLERS


def _policies() -> Registry[Any]:
    from pipelines.methods.policies import POLICIES

    return POLICIES


def _models() -> Registry[Any]:
    from trainer.architectures import MODELS  # names declared without torch; trainer.models registers them

    return MODELS


#: Bounds of every seed: numpy's generators and the C kernels take a non-negative int64.
_SEED = {"ge": 0, "lt": 1 << 63}


def _fanouts_valid(value: list[int]) -> list[int]:
    """Each hop samples at least one neighbour, or all of them (-1); a 0 would train on the seeds alone."""
    if not value or any(f != -1 and f < 1 for f in value):
        raise ValueError(f"a non-empty list of neighbours per hop, each >= 1 or -1 for all (got {value})")
    return value


#: ``sample.fanouts``: checked as a whole, so the message shows the list.
Fanouts = Annotated[list[int], AfterValidator(_fanouts_valid)]


def _budget_bytes(value: Any) -> int | None:
    from pipelines.core.confine import parse_bytes

    return None if value is None else parse_bytes(value, "memory_budget")


def _size(value: Any) -> Any:
    """A byte count given as a size string (``"2G"``) -> int; anything else for the field's own checks."""
    from pipelines.core.confine import parse_bytes

    if isinstance(value, str) and re.search(r"[A-Za-z]", value):
        try:
            return parse_bytes(value)
        except ValueError:  # pydantic names the field: "'plan.cpu_cache_bytes' expected a size ..."
            raise ValueError(f"a size such as 512M, 2G or 1.5GiB, or a number of bytes (got {value!r})") from None
    return value


#: ``memory_budget``: bytes, or a size such as ``512M``, ``2G``, ``1.5GiB`` (binary units).
MemoryBudget = Annotated[int | None, BeforeValidator(_budget_bytes)]
#: A byte-count setting: an int, or a size such as ``512M`` or ``2G``.
Bytes = Annotated[int, BeforeValidator(_size)]


def dagster_size_string(info: FieldInfo) -> bool:
    """Whether a setting is typed as a size string (``"2G"``) in Dagster's run config: ``memory_budget``. (The
    byte settings, ``Bytes``, take sizes from the CLI and config files but stay integers there, so that run
    configs written with numbers keep working.)"""
    return any(isinstance(m, BeforeValidator) and m.func is _budget_bytes for m in info.metadata)


class _Section(BaseModel):
    """A frozen config section.

    ``NAMED`` maps the fields (dotted paths for nested ones) whose values name a registry entry to that
    registry: they are checked on validation. ``SELECTOR`` is the one among them that picks the section's
    method, whose entry's ``reads`` decide which ``artifact="selected"`` fields count.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    NAMED: ClassVar[dict[str, Callable[[], Registry[Any]]]] = {}
    SELECTOR: ClassVar[str | None] = None

    @model_validator(mode="after")
    def _registered_names(self) -> _Section:
        for path, registry in self.NAMED.items():
            value: Any = self
            for part in path.split("."):
                value = getattr(value, part)
            registry().check(value)  # ValueError: "'<registry kind>' expected one of ... (got ...)"
        return self

    def selected_reads(self) -> frozenset[str]:
        """What the selected method reads: its ``artifact="selected"`` fields and any other sections."""
        if self.SELECTOR is None:
            return frozenset()
        return frozenset(self.NAMED[self.SELECTOR]().get(getattr(self, self.SELECTOR)).reads)


class IngestConfig(_Section):
    options: dict[str, str] = setting(
        default_factory=dict,
        description="Source options, e.g. features=PATH.npy, labels=PATH.npy for edgelist sources.",
    )
    chunk_edges: int = setting(4_000_000, "Edges per chunk while building the CSR.", artifact=False, gt=0)
    feature_dtype: Literal["float32", "float16"] = setting(
        "float32", "Element type of the stored feature file: float16 halves the bytes stored and read (every "
        "tier moves rows as opaque 4-byte words; an odd dimension gets a zero pad column) and is upcast to "
        "float32 when a batch is assembled (storage_kernels/halfwords.py).")


class ReorderConfig(_Section):
    NAMED: ClassVar[dict[str, Callable[[], Registry[Any]]]] = {"strategy": _orders, "partition_method": _partitioners}
    SELECTOR: ClassVar[str | None] = "strategy"

    strategy: str = setting(
        "degree",
        "Vertex order (pipelines.methods.orders): identity, random (baseline), degree (hot first), bfs (from the top "
        "hub), rcm (reverse Cuthill-McKee), community (Rabbit Order: hierarchical communities, hubs first) or "
        "partition (nodes of each partition contiguous).",
    )
    seed: int = setting(0, "Seed of the random order and of community detection tie-breaks.", artifact="selected",
                        **_SEED)
    chunk_rows: int = setting(65_536, "Rows per chunk when rewriting features.", artifact=False, gt=0)
    memory_mb: int = setting(1024, "Memory budget of the external permutation (bucket size).", artifact=False,
                             gt=0)
    community_method: Literal["rabbit", "label_propagation"] = setting(
        "rabbit",
        "Communities of `community`: rabbit (incremental aggregation, dendrogram walked depth first) or "
        "label_propagation (flat communities by size, hubs first inside).",
        artifact="selected",
    )
    community_iterations: int = setting(10, "Label-propagation rounds (label_propagation only).",
                                        artifact="selected", gt=0)
    hub_fraction: float = setting(
        0.01, "`community`: this fraction of nodes, highest degree first, form one contiguous hot prefix.",
        artifact="selected", ge=0, le=1,
    )
    partition_method: str = setting("fennel", "Partitioner used by the `partition` strategy.", artifact="selected")
    partition_parts: int = setting(64, "Number of parts used by the `partition` strategy.", artifact="selected",
                                   gt=0)


class PartitionConfig(_Section):
    NAMED: ClassVar[dict[str, Callable[[], Registry[Any]]]] = {"method": _partitioners}
    SELECTOR: ClassVar[str | None] = "method"

    method: str = setting(
        "range",
        "Partitioner (pipelines.methods.partitioners): range (contiguous ids), metis (pymetis, in memory), fennel "
        "(streaming, OUTRE's variant) or grem (streaming recursive bisection).",
    )
    num_parts: int = setting(16, "Number of partitions.", gt=0)
    imbalance: float = setting(0.05, "Allowed imbalance: every part holds <= (1+imbalance)*N/p nodes.", ge=0)
    seed: int = setting(0, "Seed for stream order and tie-breaks.", **_SEED)
    chunk_nodes: int = setting(1_000_000, "Nodes per streamed chunk (fennel, grem).", artifact="selected", gt=0)
    train_penalty: float = setting(1.0, "OUTRE: weight of the training-node balance penalty (fennel).",
                                   artifact="selected", ge=0)
    bloom_bits: int = setting(1 << 20, "FENNEL: bits per part-neighbourhood Bloom filter.", artifact="selected",
                              gt=0)
    two_level_threshold: int = setting(
        128, "FENNEL: above this many parts, partition in two levels (sqrt(p) x sqrt(p)).", artifact="selected",
        gt=1,
    )
    grem_chunk_fraction: float = setting(0.1, "GREM: chunk size as a fraction of nodes.", artifact="selected",
                                         gt=0, le=1)
    multilevel: bool = setting(
        True,
        "fennel, grem: coarsen the graph by size-constrained label propagation (the finest level streamed from "
        "disk), run the method on the coarsest graph and refine while projecting back (false: the single-level "
        "streaming algorithm).",
        artifact="selected",
    )
    memory_mb: int = setting(4096, "Memory budget; metis refuses graphs whose CSR exceeds it.", gt=0)


class SampleConfig(_Section):
    NAMED: ClassVar[dict[str, Callable[[], Registry[Any]]]] = {"sampler": _samplers}

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
    seed: int = setting(0, "Sampling seed.", **_SEED)
    num_threads: int = setting(0, "Sampler threads (0 = all cores); output does not depend on it.",
                               artifact=False, ge=0)
    batching: Literal["random", "partition"] = setting(
        "random",
        "Training batches: random shuffles, or OUTRE's partition-based macro batches (random groups of "
        "partitions whose training nodes are shuffled and cut into batches).",
    )
    macro_parts: int = setting(20, "Partitions per macro batch when batching=partition.", gt=0)


class PlanConfig(_Section):
    gpu_cache_fraction: float = setting(0.0, "GPU cache size as a fraction of feature bytes.", ge=0, le=1)
    cpu_cache_fraction: float = setting(0.1, "CPU cache size as a fraction of feature bytes.", ge=0, le=1)
    gpu_cache_bytes: Bytes | None = setting(None, "Absolute GPU cache budget (overrides the fraction).", ge=0)
    cpu_cache_bytes: Bytes | None = setting(None, "Absolute CPU cache budget (overrides the fraction).", ge=0)
    disk_cache_buffer_fraction: float = setting(
        0.1, "diskgnn: the segment window, a RAM buffer of segment disk-cache rows (each block read at most once while "
        "a later batch of its segment needs it, Belady eviction, scheduled at pack time), as a fraction of feature "
        "bytes; 0 = none (every batch reads all its disk-cache blocks).", artifact="selected", ge=0, le=1)
    disk_cache_buffer_bytes: Bytes | None = setting(
        None, "diskgnn: absolute segment-window buffer (overrides the fraction).", artifact="selected", ge=0)
    hyperbatch_bytes: Bytes = setting(
        64 << 20, "hyperbatch: RAM budget of one hyperbatch (the distinct 4 KiB blocks of its batches' rows).",
        artifact="selected", ge=4096,
    )
    hotset_refresh_epochs: int = setting(
        1, "hyperbatch: re-select the hotset from decayed access counters every this many epochs (0 = never).",
        artifact=False, ge=0,
    )
    hotset_decay: float = setting(0.5, "hyperbatch: per-epoch decay of the hotset's access counters.",
                                  artifact=False, ge=0, le=1)
    staleness: int = setting(0, "outre: iterations a historical embedding is reused before it is recomputed "
                             "(1 = no reuse; 0 = min(100, training batches per epoch): OUTRE's 100, but never "
                             "older than an epoch).", artifact="selected", ge=0)
    superbatch_size: int = setting(
        0, "ginex: training batches per superbatch, whose cache changesets are precomputed together (never "
        "spanning two sampled epochs); 0 = one superbatch per sampled epoch.", artifact="selected", ge=0,
    )
    num_partitions: int = setting(
        0, "mariusgnn: physical partitions p of the feature file (0 = MariusGNN's rule p = min(NO/D, sqrt(EO/D)), "
        "raised until two fit the CPU budget).", artifact="selected", ge=0)
    buffer_partitions: int = setting(
        0, "mariusgnn: partitions c the CPU buffer holds (0 = the largest c with c*PO + 2c^2*EBO under the CPU "
        "budget plan.cpu_cache_bytes / cpu_cache_fraction).", artifact="selected", ge=0)
    partition_order: Literal["beta", "comet", "random", "alg7"] = setting(
        "alg7", "mariusgnn: order of partition sets when the training partitions do not fit the buffer: BETA "
        "(greedy, fewest swaps), COMET (random logical partitions, deferred assignment), random swaps (every pair "
        "co-resident), or alg7 (every partition read once: node classification's Alg. 7; under "
        "train.task=link, which must pair every two partitions, alg7 means beta).", artifact="selected")
    prefetch_partitions: int = setting(
        1, "mariusgnn, train.task=link: spare buffer slots the prefetch thread reads the next set's incoming "
        "partitions into while the current set trains (0 = every load synchronous); the buffer holds c + this "
        "many partitions, and the rows trained do not depend on it.", artifact=False, ge=0)
    static_fill: Literal["random", "connected"] = setting(
        "random", "mariusgnn: the static set's c - k other partitions, re-drawn every epoch: uniformly (the thesis) "
        "or in proportion to their edges to the training partitions.", artifact="selected")
    train_first: bool = setting(
        True, "mariusgnn: lay the training nodes out in the first k partitions (one static set per epoch, zero "
        "swaps, when k < c); false: partitions by locality only, always an order.", artifact="selected")

    def disk_cache_buffer(self, feature_bytes: int) -> int:
        """Bytes of the segment window's buffer: the absolute budget when set, else the fraction of the features."""
        if self.disk_cache_buffer_bytes is not None:
            return self.disk_cache_buffer_bytes
        return int(self.disk_cache_buffer_fraction * feature_bytes)

    def budgets(self, feature_bytes: int) -> dict[str, int]:
        """``{"gpu": bytes, "cpu": bytes}``: the absolute budget when set, else the fraction of the features."""
        return {
            "gpu": self.gpu_cache_bytes if self.gpu_cache_bytes is not None else int(self.gpu_cache_fraction
                                                                                     * feature_bytes),
            "cpu": self.cpu_cache_bytes if self.cpu_cache_bytes is not None else int(self.cpu_cache_fraction
                                                                                     * feature_bytes),
        }


class PackConfig(_Section):
    memory_mb: int = setting(256, "Memory budget for one feature partition while packing.", artifact=False, gt=0)
    num_threads: int = setting(0, "Packing threads (0 = all cores).", artifact=False, ge=0)
    disk_budget: float | None = setting(
        3.0, "diskgnn: disk budget of the store (cache blocks + segment disk caches + packed chunks) as a multiple "
        "of the feature file's bytes, counted in whole 4 KiB blocks (the store's unit); the (m, s) search reads the "
        "fewest bytes within it (null: unlimited, the fewest reads, as pure packing).", artifact="selected", gt=0)
    minhash_k: int = setting(2, "diskgnn: hash functions of the MinHash signature ordering each disk cache.",
                             artifact="selected", ge=1)
    disk_cache_order: Literal["uses", "minhash"] = setting(
        "uses", "diskgnn: row order of each segment disk cache: uses (by the training positions of a row's first 8 "
        "reads in its segment: rows read together share blocks, best for the segment window) or minhash (the "
        "paper's Alg. 1, minhash_k hashes).", artifact="selected")
    read_gap_blocks: int = setting(
        0, "diskgnn, with the segment window: a batch also reads the unneeded 4 KiB blocks between two of its runs "
        "of disk-cache blocks at most this many apart, so they are one read request (more bytes, fewer requests; "
        "the bytes stay exactly predicted).", artifact="selected", ge=0)


class ExportConfig(_Section):
    opset: int = setting(18, "ONNX opset (>= 18 for scatter_reduce max/min).", ge=18)
    model_name: str | None = setting(None, "Registered model name (default strata-<dataset>).", min_length=1,
                                     max_length=256, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    web_seeds: int = setting(32, "Validation seeds in the browser app's sample subgraph (subgraph.json/.bin).",
                             gt=0)
    calibration_batches: int = setting(4, "Training batches that calibrate the int8 variant's activation ranges.",
                                       gt=0)


class VerifyConfig(_Section):
    on_reuse: Literal["full", "sampled", "off"] = setting(
        "full",
        "Checks a reused artifact against its manifest before a stage reads it: full (re-hash every file: any "
        "changed byte is caught), sampled (size + 10 sampled 1 MiB blocks per file: files up to 10 MiB fully, "
        "larger ones only partly), off. A mismatch quarantines the artifact and fails the run.",
        artifact=False,
    )


class PipelineConfig(_Section):
    """The whole run: which dataset, which policy, and every stage's settings."""

    NAMED: ClassVar[dict[str, Callable[[], Registry[Any]]]] = {"policy": _policies, "train.model": _models}

    dataset: str = setting("tiny", "Built-in dataset name or a source spec (see `strata datasets`).")
    policy: str = setting(
        "diskgnn",
        "Cache/batching policy, an entry of pipelines.methods.policies.POLICIES (the seed systems and the baselines "
        "in_memory, mmap, naive; README 'Choosing a policy' compares them).",
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
    verify: VerifyConfig = Field(default_factory=VerifyConfig)

    @model_validator(mode="before")
    @classmethod
    def _sized_by_budget(cls, data: Any) -> Any:
        """With a ``memory_budget``, the settings it sizes (:func:`pipelines.budget.fill_from_budget`)."""
        if isinstance(data, Mapping) and data.get("memory_budget") is not None:
            from pipelines.budget import fill_from_budget

            return fill_from_budget(data, _budget_bytes(data["memory_budget"]))
        return data

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
            raise ValueError("invalid Strata config: " + "; ".join(_explain(err) for err in e.errors())) from e

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def is_section(value: Any) -> bool:
    """Whether ``value`` is a config section (a pydantic model or pydantic dataclass), not a setting's value."""
    return hasattr(value, "__pydantic_fields__")


def section_fields(section: Any) -> dict[str, FieldInfo]:
    """The declared fields of a config section (a pydantic model or a pydantic dataclass)."""
    fields = getattr(type(section), "model_fields", None)
    return dict(fields if fields is not None else type(section).__pydantic_fields__)


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


def artifact_params(cfg: PipelineConfig, stage: str, also: Iterable[str] = ()) -> dict[str, Any]:
    """The configuration an artifact of ``stage`` depends on, from the fields' declarations.

    ``stage``'s own section contributes its ``artifact=True`` fields and the ``artifact="selected"`` fields its
    selected method reads; a name the method reads that is not one of the section's fields is another section
    (or top-level field), included whole. ``also`` names further sections or top-level fields the stage reads
    (``policy`` for plan, pack and train), included whole; with ``policy`` among them, the policy's ``reads``
    (its ``artifact="selected"`` fields of this section, e.g. ``plan.staleness`` for ``outre``) count too.
    """
    section = getattr(cfg, stage)
    reads = section.selected_reads() if hasattr(section, "selected_reads") else frozenset()  # train: its model's
    own = section_fields(section)
    if "policy" in also:  # a stage shaped by the policy: the policy's own knobs of this section count too
        from pipelines.methods.policies import POLICIES

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


def _explain(error: Mapping[str, Any]) -> str:
    """One pydantic error as ``'section.key' expected ... (got ...)``."""
    loc = ".".join(str(part) for part in error.get("loc", ()))
    kind, message = error.get("type", ""), str(error.get("msg", ""))
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        return f"'{loc}' expected a known setting (got an unknown key; `strata config show` lists them)"
    if kind == "value_error":
        text = message.removeprefix("Value error, ")
        return text if text.startswith("'") else f"'{loc}' expected {text}"
    got = error.get("input")
    bound = _BOUNDS.get(kind)
    ctx = error.get("ctx") or {}
    if bound is not None and bound[1] in ctx:
        return f"'{loc}' expected {bound[0]} {ctx[bound[1]]} (got {got!r})"
    return f"'{loc}' expected {message[:1].lower() + message[1:]} (got {got!r})"


# pydantic's constraint errors, as "expected >= 1 (got 0)": error type -> (operator, key of its ctx)
_BOUNDS = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"), "less_than": ("<", "lt"),
           "less_than_equal": ("<=", "le"), "string_too_short": ("a length >=", "min_length"),
           "string_too_long": ("a length <=", "max_length"), "string_pattern_mismatch": ("a match of", "pattern")}


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
