"""Typed configuration of every stage, with ``--set key=value`` overrides and file loading.

One :class:`PipelineConfig` describes a whole run. The stage functions take their own section; the Dagster
resource and the CLI build it once (file, then overrides) so the UI, the CLI and schedules agree.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "IngestConfig",
    "ReorderConfig",
    "PartitionConfig",
    "SampleConfig",
    "PlanConfig",
    "PackConfig",
    "TrainStageConfig",
    "ExportConfig",
    "PipelineConfig",
    "STAGES",
    "dataset_slug",
]

STAGES = ("graph", "ordering", "partitioning", "samples", "plan", "packed", "model", "export")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IngestConfig(_Section):
    options: dict[str, str] = Field(
        default_factory=dict,
        description="Source options, e.g. features=PATH.npy, labels=PATH.npy for edgelist sources.",
    )
    chunk_edges: int = Field(4_000_000, gt=0, description="Edges per chunk while building the CSR.")


class ReorderConfig(_Section):
    strategy: Literal["identity", "random", "degree", "bfs", "rcm", "community", "partition"] = Field(
        "degree",
        description="Vertex order: identity, random (baseline), degree (hot first), bfs (from the top hub), "
        "rcm (reverse Cuthill-McKee), community (Rabbit Order: hierarchical communities, hubs first) or "
        "partition (nodes of each partition contiguous).",
    )
    seed: int = Field(0, description="Seed of the random order and of community detection tie-breaks.")
    chunk_rows: int = Field(65_536, gt=0, description="Rows per chunk when rewriting features.")
    memory_mb: int = Field(1024, gt=0, description="Memory budget of the external permutation (bucket size).")
    community_method: Literal["rabbit", "label_propagation"] = Field(
        "rabbit",
        description="Communities of `community`: rabbit (incremental aggregation, dendrogram walked depth first) "
        "or label_propagation (flat communities by size, hubs first inside).",
    )
    community_iterations: int = Field(10, gt=0, description="Label-propagation rounds (label_propagation only).")
    hub_fraction: float = Field(
        0.01, ge=0, le=1,
        description="`community`: this fraction of nodes, highest degree first, form one contiguous hot prefix.",
    )
    partition_method: Literal["range", "metis", "fennel", "grem"] = Field(
        "fennel", description="Partitioner used by the `partition` strategy."
    )
    partition_parts: int = Field(64, gt=0, description="Number of parts used by the `partition` strategy.")


class PartitionConfig(_Section):
    method: Literal["range", "metis", "fennel", "grem"] = Field(
        "range",
        description="Partitioner: range (contiguous ids), metis (pymetis, in memory), fennel (streaming, "
        "OUTRE's variant) or grem (streaming recursive bisection).",
    )
    num_parts: int = Field(16, gt=0, description="Number of partitions.")
    imbalance: float = Field(0.05, ge=0, description="Allowed imbalance: every part holds <= (1+imbalance)*N/p nodes.")
    seed: int = Field(0, description="Seed for stream order and tie-breaks.")
    chunk_nodes: int = Field(1_000_000, gt=0, description="Nodes per streamed chunk (fennel, grem).")
    train_penalty: float = Field(1.0, ge=0, description="OUTRE: weight of the training-node balance penalty.")
    bloom_bits: int = Field(1 << 20, gt=0, description="FENNEL: bits per part-neighbourhood Bloom filter.")
    two_level_threshold: int = Field(
        128, gt=1, description="FENNEL: above this many parts, partition in two levels (sqrt(p) x sqrt(p))."
    )
    grem_chunk_fraction: float = Field(0.1, gt=0, le=1, description="GREM: chunk size as a fraction of nodes.")
    multilevel: bool = Field(
        True,
        description="fennel, grem: coarsen the graph by size-constrained label propagation (the finest level "
        "streamed from disk), run the method on the coarsest graph and refine while projecting back (false: "
        "the single-level streaming algorithm).",
    )
    memory_mb: int = Field(4096, gt=0, description="Memory budget; metis refuses graphs whose CSR exceeds it.")


class SampleConfig(_Section):
    fanouts: list[int] = Field(default_factory=lambda: [10, 10], description="Neighbours per hop, seeds first.")
    batch_size: int = Field(1024, gt=0, description="Seed nodes per mini-batch.")
    epochs: int = Field(3, gt=0, description="Training epochs sampled offline (reused cyclically).")
    eval_batch_size: int = Field(
        16384, gt=0, description="Seeds per validation/test batch (large, because eval neighbourhoods overlap)."
    )
    seed: int = Field(0, description="Sampling seed.")
    num_threads: int = Field(0, ge=0, description="Sampler threads (0 = all cores); output does not depend on it.")
    batching: Literal["random", "partition"] = Field(
        "random",
        description="Training batches: random shuffles, or OUTRE's partition-based macro batches (random groups "
        "of partitions whose training nodes are shuffled and cut into batches).",
    )
    macro_parts: int = Field(20, gt=0, description="Partitions per macro batch when batching=partition.")


class PlanConfig(_Section):
    gpu_cache_fraction: float = Field(0.0, ge=0, le=1, description="GPU cache size as a fraction of feature bytes.")
    cpu_cache_fraction: float = Field(0.1, ge=0, le=1, description="CPU cache size as a fraction of feature bytes.")
    gpu_cache_bytes: int | None = Field(None, ge=0, description="Absolute GPU cache budget (overrides fraction).")
    cpu_cache_bytes: int | None = Field(None, ge=0, description="Absolute CPU cache budget (overrides fraction).")


class PackConfig(_Section):
    memory_mb: int = Field(256, gt=0, description="Memory budget for one feature partition while packing.")
    num_threads: int = Field(0, ge=0, description="Packing threads (0 = all cores).")


class TrainStageConfig(_Section):
    hidden_dim: int = Field(128, gt=0, description="Hidden width.")
    dropout: float = Field(0.5, ge=0, lt=1, description="Dropout between layers.")
    lr: float = Field(0.01, gt=0, description="Adam learning rate.")
    weight_decay: float = Field(5e-4, ge=0, description="Adam weight decay.")
    epochs: int = Field(5, gt=0, description="Training epochs (sampled epochs are reused cyclically).")
    seed: int = Field(0, description="Model initialisation seed.")
    device: str = Field("auto", description="cpu, cuda or auto.")
    prefetch: int = Field(2, gt=0, description="Loader queue depth (batches read ahead).")
    feature_path: Literal["packed", "in_memory", "naive"] = Field(
        "packed", description="Where features come from: the packed store, RAM, or per-row direct reads."
    )


class ExportConfig(_Section):
    opset: int = Field(18, ge=18, description="ONNX opset (>= 18 for scatter_reduce max/min).")
    model_name: str | None = Field(None, description="Registered model name (default strata-<dataset>).")
    quantize: Literal["int8", "fp32"] = Field("int8", description="Weight format of the WASM bundle.")


class PipelineConfig(_Section):
    """The whole run: which dataset, and every stage's settings."""

    dataset: str = Field("tiny", description="Built-in dataset name or a source spec (see `strata datasets`).")
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    reorder: ReorderConfig = Field(default_factory=ReorderConfig)
    partition: PartitionConfig = Field(default_factory=PartitionConfig)
    sample: SampleConfig = Field(default_factory=SampleConfig)
    plan: PlanConfig = Field(default_factory=PlanConfig)
    pack: PackConfig = Field(default_factory=PackConfig)
    train: TrainStageConfig = Field(default_factory=TrainStageConfig)
    export: ExportConfig = Field(default_factory=ExportConfig)

    @property
    def dataset_name(self) -> str:
        """Directory-safe name of the dataset (a spec is hashed into a readable slug)."""
        return dataset_slug(self.dataset)

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: list[str] | None = None, **top: Any) -> PipelineConfig:
        """Build a config from an optional YAML/JSON file, then ``key=value`` overrides, then keywords."""
        data: dict[str, Any] = {}
        if path is not None:
            data = _read_config_file(Path(path))
        for item in overrides or []:
            _apply_override(data, item)
        for key, value in top.items():
            if value is not None:
                data[key] = value
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ValueError(f"invalid Strata config: {e}") from e

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def dataset_slug(spec: str) -> str:
    """A directory-safe dataset name: built-in names stay, specs become ``<kind>-<name>-<hash8>``."""
    if re.fullmatch(r"[A-Za-z0-9_.-]+", spec):
        return spec
    kind, _, rest = spec.partition(":")
    stem = re.sub(r"[^A-Za-z0-9]+", "-", Path(rest).name if kind != "synthetic" else rest).strip("-")[:24]
    digest = hashlib.sha256(spec.encode()).hexdigest()[:8]
    return "-".join(p for p in (re.sub(r"[^A-Za-z0-9]+", "", kind), stem, digest) if p)


def _read_config_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise FileNotFoundError(f"'--config' expected an existing YAML or JSON file (got {path})")
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text) or {}
    else:
        data = json.loads(text)
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
    if parts[:2] == ["ingest", "options"] or (len(parts) == 3 and parts[0] == "ingest" and parts[1] == "options"):
        node[parts[-1]] = raw  # source options stay strings (paths)
    else:
        node[parts[-1]] = _parse_value(raw)
