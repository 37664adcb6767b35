"""Source specs: ``tiny``, ``demo``, ``synthetic:k=v,...``, ``planetoid:DIR/NAME``, ``ogb:DIR``,
``edgelist:FILE``.

:func:`parse_source_spec` turns a spec plus the ``--set`` options (strings from the CLI, or typed values)
into a :class:`GraphSource`. Every option is checked against the kind's list of valid keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.sources.base import GraphSource
from pipelines.sources.edgelist import edgelist_source
from pipelines.sources.ogb import ogb_source
from pipelines.sources.planetoid import planetoid_source
from pipelines.sources.synthetic import SyntheticGraph, SyntheticParams

__all__ = [
    "BUILTIN_DATASETS",
    "SOURCE_KINDS",
    "SYNTHETIC_KEYS",
    "BuiltinDataset",
    "SourceKind",
    "parse_source_spec",
]


@dataclass(frozen=True)
class BuiltinDataset:
    """A named synthetic dataset (``strata datasets`` lists these).

    Attributes:
        name: the spec, e.g. ``tiny``.
        description: one line for humans.
        params: :class:`SyntheticParams` keyword arguments.
    """

    name: str
    description: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        """The equivalent ``synthetic:...`` spec."""
        return "synthetic:" + ",".join(f"{k}={v}" for k, v in self.params.items())


BUILTIN_DATASETS: dict[str, BuiltinDataset] = {
    "tiny": BuiltinDataset(
        "tiny",
        "Synthetic: 2,500 nodes, mean degree ~10, 32 features, 6 classes (~0.3 MB of features); "
        "the whole pipeline runs in seconds.",
        {"nodes": 2_500, "degree": 10, "dim": 32, "classes": 6, "seed": 0},
    ),
    "demo": BuiltinDataset(
        "demo",
        "Synthetic: 200,000 nodes, mean degree ~15, 128 features, 8 classes (~100 MB of features, "
        "~3M directed edges); the pipeline runs in a few minutes on 2 cores.",
        {"nodes": 200_000, "degree": 15, "dim": 128, "classes": 8, "seed": 0},
    ),
}


@dataclass(frozen=True)
class SourceKind:
    """One ``kind:`` prefix: its syntax, the valid ``--set`` options and a one-line help."""

    kind: str
    syntax: str
    options: tuple[str, ...]
    help: str


SOURCE_KINDS: dict[str, SourceKind] = {
    "synthetic": SourceKind(
        "synthetic",
        "synthetic:nodes=N,degree=D,dim=F,classes=C,seed=S[,homophily=P,max_degree=M]",
        ("chunk_nodes",),
        "Seeded power-law graph with planted communities (labels) and class-centroid features.",
    ),
    "planetoid": SourceKind(
        "planetoid",
        "planetoid:DIR/NAME (NAME = cora | citeseer | pubmed; files DIR/ind.NAME.*)",
        ("normalize_features", "chunk_rows"),
        "Planetoid citation graph with the standard split "
        "(features row-normalised unless normalize_features=false).",
    ),
    "ogb": SourceKind(
        "ogb",
        "ogb:DIR (DIR/raw/*.csv[.gz], DIR/split/<name>/{train,valid,test}.csv[.gz])",
        ("split", "undirected", "num_classes", "block_bytes"),
        "OGB node-property-prediction raw directory, streamed.",
    ),
    "edgelist": SourceKind(
        "edgelist",
        "edgelist:FILE (.csv/.tsv/.txt[.gz] two integer columns, or .parquet with src,dst)",
        (
            "features",
            "labels",
            "train_idx",
            "val_idx",
            "test_idx",
            "num_nodes",
            "num_classes",
            "undirected",
            "seed",
            "chunk_rows",
        ),
        "Edge list plus features=PATH.npy and labels=PATH.npy (required); "
        "train_idx/val_idx/test_idx .npy files or a seeded 60/20/20 split.",
    ),
}


def _int(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"'{key}' expected an integer (got {value!r})")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip().replace("_", ""))
    except ValueError as e:
        raise ValueError(f"'{key}' expected an integer (got {value!r})") from e


def _float(key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"'{key}' expected a number (got {value!r})")
    try:
        return float(str(value).strip())
    except ValueError as e:
        raise ValueError(f"'{key}' expected a number (got {value!r})") from e


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE | _FALSE:
        return text in _TRUE
    raise ValueError(f"'{key}' expected one of true/false/1/0/yes/no (got {value!r})")


def _str(key: str, value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise ValueError(f"'{key}' expected a non-empty value (got {value!r})")
    return text


SYNTHETIC_KEYS: dict[str, Callable[[str, Any], Any]] = {
    "nodes": _int,
    "degree": _float,
    "dim": _int,
    "classes": _int,
    "seed": _int,
    "homophily": _float,
    "max_degree": _int,
    "locality": _float,
    "window": _int,
}
"""Keys of a ``synthetic:`` spec -> value parser (the :class:`SyntheticParams` fields)."""

_OPTION_PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "chunk_nodes": _int,
    "chunk_rows": _int,
    "normalize_features": _bool,
    "split": _str,
    "undirected": _bool,
    "num_classes": _int,
    "num_nodes": _int,
    "block_bytes": _int,
    "features": _str,
    "labels": _str,
    "train_idx": _str,
    "val_idx": _str,
    "test_idx": _str,
    "seed": _int,
}


def _options(kind: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check option keys against the kind's list and parse their values."""
    valid = SOURCE_KINDS[kind].options
    parsed: dict[str, Any] = {}
    for key, value in (options or {}).items():
        if key not in valid:
            raise ValueError(f"'option {key}' expected one of {list(valid)} for {kind} sources (got {key!r})")
        parsed[key] = _OPTION_PARSERS[key](f"option {key}", value)
    return parsed


def _synthetic_params(text: str, spec: str) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"'{spec}' expected key=value items separated by commas (got {item!r})")
        if key not in SYNTHETIC_KEYS:
            raise ValueError(
                f"'synthetic.{key}' expected one of {list(SYNTHETIC_KEYS)} (got {key!r} in '{spec}')"
            )
        if key in params:
            raise ValueError(f"'synthetic.{key}' expected once (got it twice in '{spec}')")
        params[key] = SYNTHETIC_KEYS[key](f"synthetic.{key}", value)
    if "nodes" not in params:
        raise ValueError(f"'synthetic.nodes' expected in the spec (got only {sorted(params)} in '{spec}')")
    return params


def parse_source_spec(spec: str, options: Mapping[str, Any] | None = None) -> GraphSource:
    """Build the :class:`GraphSource` a spec names.

    Args:
        spec: ``tiny`` | ``demo`` | ``synthetic:nodes=N,degree=D,dim=F,classes=C,seed=S`` |
            ``planetoid:DIR/NAME`` | ``ogb:DIR`` | ``edgelist:FILE``.
        options: ``--set`` options, valid keys per kind in :data:`SOURCE_KINDS` (values may be strings).

    Raises:
        ValueError: unknown name/kind/key or a bad value (the message lists what is valid).
        FileNotFoundError: a named file or directory is missing.
    """
    spec = spec.strip()
    if spec in BUILTIN_DATASETS:
        opts = _options("synthetic", options)
        builtin = BUILTIN_DATASETS[spec]
        graph = SyntheticGraph(SyntheticParams(**builtin.params), name=builtin.name)
        source = graph.source(**opts)
        source.description["builtin"] = builtin.name
        return source
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in SOURCE_KINDS:
        raise ValueError(
            f"'dataset' expected a built-in name {list(BUILTIN_DATASETS)} or a spec "
            f"{[k.syntax for k in SOURCE_KINDS.values()]} (got {spec!r})"
        )
    opts = _options(kind, options)
    rest = rest.strip()
    if kind == "synthetic":
        graph = SyntheticGraph(SyntheticParams(**_synthetic_params(rest, spec)))
        return graph.source(**opts)
    if not rest:
        raise ValueError(f"'{kind}:' expected a path, {SOURCE_KINDS[kind].syntax} (got {spec!r})")
    path = Path(rest).expanduser()
    if kind == "planetoid":
        if path.name in ("", ".", "..") or path.parent == path:
            raise ValueError(f"'{spec}' expected {SOURCE_KINDS[kind].syntax} (got no NAME)")
        return planetoid_source(path.parent, path.name, **opts)
    if kind == "ogb":
        return ogb_source(path, **opts)
    for required in ("features", "labels"):
        if required not in opts:
            raise ValueError(
                f"'option {required}' expected for edgelist sources, e.g. --set {required}=PATH.npy "
                "(got none)"
            )
    return edgelist_source(path, **opts)
