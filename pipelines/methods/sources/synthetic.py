"""A seeded synthetic graph with heavy-tailed degrees and planted communities, generated lazily in blocks.

Model (all vectorised NumPy per block of nodes):

- Communities are contiguous blocks of *positions* ``0..N-1`` (sizes mildly unequal, seeded); a node's id is a
  keyed pseudo-random bijection (a 4-round Feistel network with cycle walking) of its position, so ids are not
  sorted by community and no O(N) permutation array is ever held. A node's label is its community.
- Out-degree: a truncated power law (continuous Pareto with pdf exponent ``DEGREE_EXPONENT`` capped at
  ``max_degree``, stochastically rounded) whose mean is ``degree / 2``; edges are then symmetrised, so the
  mean CSR degree is about ``degree``.
- Each edge's target community is the source's own with probability ``homophily``, otherwise a uniformly
  random community (which may again be its own). Within the community the target's offset is
  ``floor(size * u ** POPULARITY_EXPONENT)``: low offsets are popular, so each community has hubs (the
  in-degree tail is a power law too).
- Features: a per-class centroid (a random direction of norm ``FEATURE_SIGNAL``) plus standard normal noise,
  float32. Features alone classify clearly above chance but far from perfectly; neighbours (mostly in the same
  community) help. ``feature_noise`` is the standard deviation of that noise (default
  :data:`DEFAULT_FEATURE_NOISE`): the higher, the less a node's own row says and the more its neighbours must.
- Label noise: each node's label is, with probability ``label_noise`` (default :data:`DEFAULT_LABEL_NOISE`),
  redrawn uniformly from the classes (possibly its own), independently of the edges and features, which follow
  the community. No model can beat ``1 - label_noise * (1 - 1 / classes)`` in expectation; the defaults make
  in-memory GraphSAGE land well below 1 (``docs/usage/own-graph.md``), so that "the same accuracy as in memory"
  says something. ``label_noise=0,feature_noise=1`` gives the graphs of generator version 1 (separable).
- Splits: each node independently lands in train / val / test with probabilities ``SPLIT_FRACTIONS``, scaled
  by ``labeled / sum(SPLIT_FRACTIONS)`` when ``labeled`` is set (large graphs label few nodes: ogbn-papers100M
  1.4%).

Determinism: every block of ``BLOCK_NODES`` consecutive node ids draws from its own
``SeedSequence(seed, spawn_key=(stream, block))``, so any block can be regenerated on its own and the output
does not depend on the chunk size used to iterate (chunks are whole blocks, except the last).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from pipelines.methods.sources.base import (
    DEFAULT_CHUNK_ROWS,
    EdgeChunk,
    GraphSource,
    dataset_name,
    feature_chunk_rows,
    symmetrise_chunk,
)
from pipelines.methods.sources.kinds import SOURCE_KINDS, SourceKind
from pipelines.methods.sources.options import OptionParser, parse_float, parse_int
from storage_kernels import kernels

__all__ = [
    "BLOCK_NODES",
    "DEFAULT_FEATURE_NOISE",
    "DEFAULT_LABEL_NOISE",
    "DEGREE_EXPONENT",
    "FEATURE_SIGNAL",
    "GENERATOR_VERSION",
    "POPULARITY_EXPONENT",
    "SPLIT_FRACTIONS",
    "SyntheticGraph",
    "SyntheticParams",
    "synthetic_source",
]

GENERATOR_VERSION = "strata-synthetic-2"
BLOCK_NODES = 4096
"""Nodes per generation block (the unit of independent regeneration)."""
DEGREE_EXPONENT = 2.1
"""pdf exponent of the out-degree power law."""
POPULARITY_EXPONENT = 2.5
"""Target offset = floor(size * u ** POPULARITY_EXPONENT); in-degree tail exponent 1 + p/(p-1) ~ 2.67."""
FEATURE_SIGNAL = 1.5
"""Norm of each class centroid; the noise is N(0, feature_noise**2) per feature."""
DEFAULT_FEATURE_NOISE = 3.0
"""Default standard deviation of the per-feature noise (version 1: 1.0)."""
DEFAULT_LABEL_NOISE = 0.1
"""Default fraction of nodes whose label is redrawn uniformly (version 1: 0)."""
SPLIT_FRACTIONS = (0.1, 0.1, 0.2)
"""Probability of train, val, test for each node (the rest is in no split)."""

# SeedSequence spawn-key streams.
_GLOBAL, _EDGES, _FEATURES, _SPLITS, _LABELS = 0, 1, 2, 3, 4
_FEISTEL_ROUNDS = 4


@dataclass(frozen=True)
class SyntheticParams:
    """Parameters of the synthetic generator (the graph is a function of these alone).

    Attributes:
        nodes: number of nodes.
        degree: target mean degree of the symmetrised graph (before loops/duplicates are dropped).
        dim: feature dimension.
        classes: number of communities = label classes.
        seed: master seed.
        homophily: probability that an edge's target community is the source's own.
        max_degree: cap on a node's generated out-degree (0 = ``min(N - 1, max(4 * mean, sqrt(N) * mean))``).
        locality: probability that an edge is *local*: its target lies within ``window`` positions of the
            source inside the source's community (fine-grained clusters, as in real graphs; 0 = none). Ids
            are still scrambled, so only a reordering recovers this locality on disk.
        window: half-width, in positions, of the neighbourhood of a local edge.
        labeled: fraction of nodes in a split (train:val:test stay 1:1:2); the default is
            ``sum(SPLIT_FRACTIONS)``.
        label_noise: fraction of nodes whose label is redrawn uniformly from the classes, independently of
            the graph and the features (0 = the label is the community).
        feature_noise: standard deviation of the Gaussian noise added to the class centroid (of norm
            ``FEATURE_SIGNAL``) in every feature.
    """

    nodes: int
    degree: float = 10.0
    dim: int = 32
    classes: int = 4
    seed: int = 0
    homophily: float = 0.8
    max_degree: int = 0
    locality: float = 0.0
    window: int = 512
    labeled: float = sum(SPLIT_FRACTIONS)
    label_noise: float = DEFAULT_LABEL_NOISE
    feature_noise: float = DEFAULT_FEATURE_NOISE

    def __post_init__(self) -> None:
        checks = (
            ("nodes", self.nodes, self.nodes >= 2, "an integer >= 2"),
            ("degree", self.degree, self.degree > 0, "a positive number"),
            ("dim", self.dim, self.dim >= 1, "a positive integer"),
            (
                "classes",
                self.classes,
                1 <= self.classes <= max(1, self.nodes // 2),
                "an integer in [1, nodes/2]",
            ),
            ("seed", self.seed, self.seed >= 0, "a non-negative integer"),
            ("homophily", self.homophily, 0.0 <= self.homophily <= 1.0, "a probability in [0, 1]"),
            ("max_degree", self.max_degree, self.max_degree >= 0, "a non-negative integer"),
            ("locality", self.locality, 0.0 <= self.locality <= 1.0, "a probability in [0, 1]"),
            ("window", self.window, self.window >= 1, "a positive integer"),
            ("labeled", self.labeled, 0.0 < self.labeled <= 1.0, "a fraction in (0, 1]"),
            ("label_noise", self.label_noise, 0.0 <= self.label_noise <= 1.0, "a fraction in [0, 1]"),
            ("feature_noise", self.feature_noise, 0.0 <= self.feature_noise < math.inf,
             "a finite number >= 0"),
        )
        for name, value, ok, expected in checks:
            if not ok:
                raise ValueError(f"'synthetic.{name}' expected {expected} (got {value})")
        if self.degree / 2 >= self.out_degree_cap:
            raise ValueError(
                f"'synthetic.degree' expected less than 2 * max_degree = {2 * self.out_degree_cap} "
                f"(got {self.degree})"
            )

    @property
    def out_degree_cap(self) -> int:
        """The effective cap on generated out-degrees."""
        if self.max_degree:
            return min(self.max_degree, self.nodes - 1)
        mean = self.degree / 2
        return int(min(self.nodes - 1, max(4 * mean, math.sqrt(self.nodes) * mean)))

    @property
    def split_fractions(self) -> tuple[float, float, float]:
        """Probability of train, val and test for each node."""
        scale = self.labeled / sum(SPLIT_FRACTIONS)
        return tuple(f * scale for f in SPLIT_FRACTIONS)  # type: ignore[return-value]

    def spec_items(self) -> dict[str, Any]:
        """The parameters that name the graph (``labeled`` only when set, so older specs keep their names)."""
        items = asdict(self)
        if items["labeled"] == sum(SPLIT_FRACTIONS):
            del items["labeled"]
        return items


class _Feistel:
    """A keyed bijection of ``[0, n)``: a balanced Feistel network on ``2 * half`` bits with cycle walking, whose
    round function is the SplitMix64 finaliser of ``x ^ key`` masked to ``half`` bits (in C:
    :func:`storage_kernels.kernels.feistel_walk`; its NumPy twin is the tests' reference)."""

    def __init__(self, n: int, keys: np.ndarray) -> None:
        self.n = n
        self.half = max(1, math.ceil(math.ceil(math.log2(max(n, 2))) / 2))
        self.keys = np.asarray(keys, dtype=np.uint64)

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Position -> node id."""
        return kernels.feistel_walk(x, self.keys, self.half, self.n)

    def inverse(self, y: np.ndarray) -> np.ndarray:
        """Node id -> position."""
        return kernels.feistel_walk(y, self.keys, self.half, self.n, inverse=True)


def _solve_degree_scale(mean: float, cap: int, alpha: float = DEGREE_EXPONENT) -> float:
    """Scale ``s`` with ``E[min(s * W, cap)] = mean`` for Pareto ``W`` (x_min 1, pdf exponent ``alpha``)."""
    a = alpha - 1.0

    def expected(s: float) -> float:
        c = cap / s  # cap in units of W
        if c <= 1.0:
            return float(cap)
        return s * (1.0 + (c ** (1.0 - a) - 1.0) / (1.0 - a))

    low, high = 1e-9, float(cap)
    for _ in range(100):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if expected(mid) < mean else (low, mid)
    return 0.5 * (low + high)


class SyntheticGraph:
    """The generator: any block of nodes can be regenerated independently.

    Args:
        params: the generator parameters.
        name: dataset name (defaults to a slug of the parameters).
    """

    def __init__(self, params: SyntheticParams, name: str | None = None) -> None:
        self.params = params
        p = params
        self.name = name or dataset_name(
            f"synthetic_n{p.nodes}_d{p.degree:g}_f{p.dim}_c{p.classes}_s{p.seed}_h{p.homophily:g}"
        )
        rng = self._rng(_GLOBAL, 0)
        weights = 1.0 + 0.5 * rng.random(p.classes)
        bounds = np.round(np.concatenate([[0.0], np.cumsum(weights)]) / weights.sum() * p.nodes).astype(
            np.int64
        )
        self.bounds = bounds  # (C+1,) community c = positions [bounds[c], bounds[c+1])
        self.sizes = np.diff(bounds)
        centroids = rng.standard_normal((p.classes, p.dim))
        centroids *= FEATURE_SIGNAL / np.linalg.norm(centroids, axis=1, keepdims=True)
        self.centroids = centroids.astype(np.float32)
        self.permutation = _Feistel(p.nodes, rng.integers(0, 2**63, size=_FEISTEL_ROUNDS, dtype=np.uint64))
        self.mean_out_degree = p.degree / 2.0
        self.degree_scale = _solve_degree_scale(self.mean_out_degree, p.out_degree_cap)
        self.num_blocks = -(-p.nodes // BLOCK_NODES)

    def _rng(self, stream: int, block: int) -> np.random.Generator:
        return np.random.Generator(
            np.random.PCG64(np.random.SeedSequence(self.params.seed, spawn_key=(stream, block)))
        )

    def block_range(self, block: int) -> tuple[int, int]:
        """Node ids ``[start, stop)`` of a block."""
        if not 0 <= block < self.num_blocks:
            raise IndexError(f"'block' expected an index in [0, {self.num_blocks}) (got {block})")
        start = block * BLOCK_NODES
        return start, min(start + BLOCK_NODES, self.params.nodes)

    def labels_of(self, ids: np.ndarray) -> np.ndarray:
        """Community (= label) of each node id."""
        positions = self.permutation.inverse(ids)
        return np.searchsorted(self.bounds, positions, side="right").astype(np.int64) - 1

    def labels_block(self, block: int) -> np.ndarray:
        """A block's labels, int64: the community, redrawn uniformly for a ``label_noise`` fraction of nodes."""
        start, stop = self.block_range(block)
        labels = self.labels_of(np.arange(start, stop))
        if self.params.label_noise > 0:  # drawn only when asked: its own stream, so edges/features do not move
            rng = self._rng(_LABELS, block)
            redraw = rng.random(stop - start) < self.params.label_noise
            labels[redraw] = rng.integers(0, self.params.classes, size=int(redraw.sum()))
        return labels

    def labels(self) -> np.ndarray:
        """All labels (N,), computed block by block, in the narrowest signed type that holds ``-1`` and every
        class (int8 for up to 127 classes): the source holds them through the whole ingest."""
        out = np.empty(self.params.nodes, dtype=np.min_scalar_type(-max(self.params.classes, 1)))
        for b in range(self.num_blocks):
            start, stop = self.block_range(b)
            out[start:stop] = self.labels_block(b)
        return out

    def out_degrees(self, block: int) -> np.ndarray:
        """Generated out-degrees of a block's nodes (before self loops are dropped)."""
        start, stop = self.block_range(block)
        rng = self._rng(_EDGES, block)
        return self._draw_degrees(rng, stop - start)

    def _draw_degrees(self, rng: np.random.Generator, count: int) -> np.ndarray:
        u = rng.random(count)
        w = np.minimum(
            self.degree_scale * (1.0 - u) ** (-1.0 / (DEGREE_EXPONENT - 1.0)), self.params.out_degree_cap
        )
        return np.floor(w + rng.random(count)).astype(np.int64)

    def edges_block(self, block: int) -> EdgeChunk:
        """A block's generated edges ``(source, target)`` in one direction (self loops dropped)."""
        p = self.params
        start, stop = self.block_range(block)
        rng = self._rng(_EDGES, block)
        ids = np.arange(start, stop, dtype=np.int64)
        deg = self._draw_degrees(rng, stop - start)
        src = np.repeat(ids, deg)
        src_comm = np.repeat(self.labels_of(ids), deg)
        count = len(src)
        same = rng.random(count) < p.homophily
        comm = np.where(same, src_comm, rng.integers(0, p.classes, size=count))
        offset = np.floor(self.sizes[comm] * rng.random(count) ** POPULARITY_EXPONENT).astype(np.int64)
        target = self.bounds[comm] + offset
        if p.locality > 0:  # drawn only when asked, so graphs without locality keep their random streams
            local = rng.random(count) < p.locality
            src_pos = np.repeat(self.permutation.inverse(ids), deg)[local]
            home = src_comm[local]
            step = rng.integers(-p.window, p.window + 1, size=int(local.sum()))
            target[local] = np.clip(src_pos + step, self.bounds[home], self.bounds[home + 1] - 1)
        dst = self.permutation.forward(target)
        keep = src != dst
        return src[keep], dst[keep]

    def features_block(self, block: int) -> np.ndarray:
        """A block's feature rows, float32 (rows, dim)."""
        start, stop = self.block_range(block)
        rng = self._rng(_FEATURES, block)
        x = rng.standard_normal((stop - start, self.params.dim), dtype=np.float32)
        if self.params.feature_noise != 1.0:
            x *= np.float32(self.params.feature_noise)
        x += self.centroids[self.labels_of(np.arange(start, stop))]
        return x

    def split_block(self, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A block's (train, val, test) node ids, sorted."""
        start, stop = self.block_range(block)
        u = self._rng(_SPLITS, block).random(stop - start)
        edges = np.cumsum(self.params.split_fractions)
        which = np.searchsorted(edges, u, side="right")  # 0 train, 1 val, 2 test, 3 none
        ids = np.arange(start, stop, dtype=np.int64)
        return ids[which == 0], ids[which == 1], ids[which == 2]

    def _block_groups(self, chunk_nodes: int) -> Iterator[range]:
        per = max(1, -(-chunk_nodes // BLOCK_NODES))
        for first in range(0, self.num_blocks, per):
            yield range(first, min(first + per, self.num_blocks))

    def edge_chunks(self, chunk_nodes: int = DEFAULT_CHUNK_ROWS) -> Iterator[EdgeChunk]:
        """Symmetrised edge chunks, each covering the edges generated by ``~chunk_nodes`` source nodes."""
        workers = max(1, min(len(os.sched_getaffinity(0)), 8))
        with ThreadPoolExecutor(workers) as pool:  # blocks are independent; NumPy and the kernels drop the GIL
            for group in self._block_groups(chunk_nodes):
                parts = list(pool.map(self.edges_block, group))
                yield symmetrise_chunk(
                    np.concatenate([s for s, _ in parts]), np.concatenate([d for _, d in parts])
                )

    def feature_chunks(self, chunk_nodes: int = DEFAULT_CHUNK_ROWS) -> Iterator[np.ndarray]:
        """Feature rows in node order, ``~chunk_nodes`` rows per chunk (whole blocks; fewer rows for wide
        features, :func:`~pipelines.methods.sources.base.feature_chunk_rows`)."""
        for group in self._block_groups(feature_chunk_rows(self.params.dim, chunk_nodes)):
            yield np.concatenate([self.features_block(b) for b in group])

    def description(self) -> dict:
        """Parameters, model constants and sizes (JSON-serialisable)."""
        return {
            "kind": "synthetic",
            "generator": GENERATOR_VERSION,
            "params": self.params.spec_items(),
            "block_nodes": BLOCK_NODES,
            "degree_exponent": DEGREE_EXPONENT,
            "popularity_exponent": POPULARITY_EXPONENT,
            "feature_signal": FEATURE_SIGNAL,
            "label_noise_ceiling": 1.0 - self.params.label_noise * (1.0 - 1.0 / self.params.classes),
            "split_fractions": list(self.params.split_fractions),
            "out_degree_cap": self.params.out_degree_cap,
            "community_sizes": self.sizes.tolist(),
        }

    def source(self, chunk_nodes: int = DEFAULT_CHUNK_ROWS) -> GraphSource:
        """The :class:`GraphSource` view (labels and splits are computed now, O(N) memory)."""
        splits = [self.split_block(b) for b in range(self.num_blocks)]
        train, val, test = (np.concatenate([s[i] for s in splits]) for i in range(3))
        spec = "synthetic:" + ",".join(f"{k}={v}" for k, v in self.params.spec_items().items())
        return GraphSource(
            name=self.name,
            num_nodes=self.params.nodes,
            feature_dim=self.params.dim,
            num_classes=self.params.classes,
            edge_chunks=lambda: self.edge_chunks(chunk_nodes),
            feature_chunks=lambda: self.feature_chunks(chunk_nodes),
            labels=self.labels(),
            train_idx=train,
            val_idx=val,
            test_idx=test,
            description=self.description(),
            undirected=True,
            deduplicated=False,
            files={"source": spec},
        )


def synthetic_source(
    nodes: int,
    degree: float = 10.0,
    dim: int = 32,
    classes: int = 4,
    seed: int = 0,
    *,
    homophily: float = 0.8,
    max_degree: int = 0,
    locality: float = 0.0,
    window: int = 512,
    labeled: float = sum(SPLIT_FRACTIONS),
    label_noise: float = DEFAULT_LABEL_NOISE,
    feature_noise: float = DEFAULT_FEATURE_NOISE,
    name: str | None = None,
    chunk_nodes: int = DEFAULT_CHUNK_ROWS,
) -> GraphSource:
    """A synthetic :class:`GraphSource` (see the module docstring for the model)."""
    params = SyntheticParams(
        nodes=int(nodes),
        degree=float(degree),
        dim=int(dim),
        classes=int(classes),
        seed=int(seed),
        homophily=float(homophily),
        max_degree=int(max_degree),
        locality=float(locality),
        window=int(window),
        labeled=float(labeled),
        label_noise=float(label_noise),
        feature_noise=float(feature_noise),
    )
    return SyntheticGraph(params, name=name).source(chunk_nodes)


#: Keys of a ``synthetic:`` spec -> value parser (the :class:`SyntheticParams` fields).
SYNTHETIC_KEYS: dict[str, OptionParser] = {
    "nodes": parse_int,
    "degree": parse_float,
    "dim": parse_int,
    "classes": parse_int,
    "seed": parse_int,
    "homophily": parse_float,
    "max_degree": parse_int,
    "locality": parse_float,
    "window": parse_int,
    "labeled": parse_float,
    "label_noise": parse_float,
    "feature_noise": parse_float,
}


def synthetic_params(text: str, spec: str) -> dict[str, Any]:
    """Parse ``nodes=N,degree=D,...`` (the text after ``synthetic:``) into :class:`SyntheticParams` keywords."""
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


def _open(rest: str, spec: str, options: dict[str, Any]) -> GraphSource:
    return SyntheticGraph(SyntheticParams(**synthetic_params(rest, spec))).source(**options)


SOURCE_KINDS.register("synthetic", SourceKind(
    "synthetic",
    "synthetic:nodes=N,degree=D,dim=F,classes=C,seed=S[,homophily=P,max_degree=M,locality=L,window=W,labeled=F,"
    "label_noise=E,feature_noise=S]",
    {"chunk_nodes": parse_int},
    "Seeded power-law graph with planted communities (labels; a label_noise fraction redrawn uniformly, default "
    f"{DEFAULT_LABEL_NOISE:g}) and class-centroid features (plus N(0, feature_noise^2) noise, default "
    f"{DEFAULT_FEATURE_NOISE:g}): in-memory GraphSAGE lands well below accuracy 1 by default.",
    _open,
))
