"""The link-prediction training loop: batches of positive edges, shared negatives, softmax loss, early stopping.

One epoch is a sequence of :class:`LinkBatch` es (by default :func:`shuffled_batches`: the training edges in a
seeded random order, each in a random direction, cut into ``link_batch_size`` positives with ``negatives`` nodes
per chunk of ``negative_chunk`` positives, ``trainer.link.negatives``). A policy may supply its own epoch order
(``mariusgnn``'s edge buckets, ``trainer.link.outofcore``). Per batch: the distinct nodes of the positives and
negatives are encoded once (``trainer.link.encoders``), each positive scores against its chunk's negatives, and
the loss is the softmax cross-entropy of the positive among ``[positive, negatives]`` (MariusGNN's); the dense
weights (GNN, decoder) step with Adam, learned embeddings with Adagrad.

Validation MRR (:func:`evaluate_split`; filtered when the graph is small enough, ``train.filtered_eval``) picks
the best epoch (early stopping with ``train.patience``/``train.min_delta``); the best weights are restored and
the test split evaluated once, against sampled negatives and, when filtering applies, against all nodes.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from trainer.link.decoders import Decoder
from trainer.link.metrics import filtered_ranks, random_mrr, rank_metrics, ranks_against
from trainer.link.negatives import NegativeSampler, chunk_bounds
from trainer.link.split import EdgeSplit

__all__ = ["EVAL_NODES_PER_BATCH", "LinkBatch", "LinkGraph", "LinkResult", "batch_seed", "embed_nodes",
           "evaluate_split", "link_step", "shuffled_batches", "train_link", "use_filtered"]

EVAL_NODES_PER_BATCH = 4096  # nodes encoded per evaluation batch
_MASK62 = (1 << 62) - 1


@dataclass(frozen=True)
class LinkGraph:
    """The split and the two CSRs link prediction reads: the training topology (encoder neighbourhoods,
    degree negatives; built on first use, so a run that needs neither -- learned embeddings with uniform
    negatives -- never holds it) and the full graph (the known edges filtered ranking removes)."""

    split: EdgeSplit
    known_indptr: np.ndarray
    known_indices: np.ndarray

    @classmethod
    def build(cls, split: EdgeSplit, known_indptr: np.ndarray, known_indices: np.ndarray) -> LinkGraph:
        return cls(split, np.asarray(known_indptr, np.int64), np.asarray(known_indices, np.int64))

    @cached_property
    def _train_csr(self) -> tuple[np.ndarray, np.ndarray]:
        return self.split.train_csr()

    @property
    def train_indptr(self) -> np.ndarray:
        return self._train_csr[0]

    @property
    def train_indices(self) -> np.ndarray:
        return self._train_csr[1]

    @property
    def num_nodes(self) -> int:
        return self.split.num_nodes


@dataclass(frozen=True)
class LinkBatch:
    """Positive edges ``(B, 2)`` (source, destination) and the negatives ``(C, n)`` of their chunks."""

    edges: np.ndarray
    negatives: np.ndarray


@dataclass
class LinkResult:
    """What a link-prediction run produced (the test metrics of the best weights under ``metrics``)."""

    metrics: dict[str, float]
    losses: list[float]
    val_mrr: list[float]
    epoch_s: list[float]
    best_epoch: int
    stopped_epoch: int
    early_stopped: bool
    state_dict: dict[str, torch.Tensor]  # the encoder's dense weights (model.*) and the decoder's (decoder.*)
    timers: dict[str, float] = field(default_factory=dict)


def batch_seed(seed: int, epoch: int, batch: int) -> int:
    """The sampling seed of one training batch (a non-negative int64)."""
    return ((int(seed) * 1_000_003 + int(epoch)) * 100_003 + int(batch)) & _MASK62


def shuffled_batches(edges: np.ndarray, sampler: NegativeSampler, cfg: Any, epoch: int) -> Iterator[LinkBatch]:
    """The default epoch: ``edges`` shuffled (seeded by ``cfg.seed`` and ``epoch``), each in a random direction,
    in batches of ``cfg.link_batch_size`` with ``cfg.negatives`` negatives per ``cfg.negative_chunk``."""
    rng = np.random.default_rng([int(cfg.seed), int(epoch)])
    order = rng.permutation(len(edges))
    flip = rng.random(len(edges)) < 0.5
    directed = edges[order]
    directed[flip] = directed[flip][:, ::-1]
    for lo in range(0, len(directed), cfg.link_batch_size):
        batch = directed[lo: lo + cfg.link_batch_size]
        chunks = len(chunk_bounds(len(batch), cfg.negative_chunk)) - 1
        yield LinkBatch(batch, sampler.sample(chunks, cfg.negatives, rng))


#: Queries evaluated together on a large graph: their nodes' embeddings are what evaluation holds in memory.
_EVAL_GROUP_QUERIES = 16384


def _distinct(*arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct ids of the arrays and each entry's position among them."""
    flat = np.concatenate([np.asarray(a, np.int64).ravel() for a in arrays])
    return np.unique(flat, return_inverse=True)


def chunk_scores(decoder: Decoder, h_src: torch.Tensor, h_neg: torch.Tensor, chunk: int) -> torch.Tensor:
    """``(B, n)``: each positive's source against the ``n`` negatives ``h_neg`` (C, n, D) of its chunk of
    ``chunk`` consecutive positives (one batched matmul; the last chunk padded)."""
    num, dim = h_src.shape
    chunks = h_neg.shape[0]
    q = decoder.query(h_src)
    pad = chunks * chunk - num
    if pad:
        q = torch.cat([q, q.new_zeros(pad, dim)])
    return torch.bmm(q.view(chunks, chunk, dim), h_neg.transpose(1, 2)).reshape(chunks * chunk, -1)[:num]


def link_step(encoder: Any, decoder: Decoder, batch: LinkBatch, chunk: int, seed: int) -> torch.Tensor:
    """The loss of one batch: softmax cross-entropy of each positive among ``[positive, chunk's negatives]``."""
    num = len(batch.edges)
    nodes, pos = _distinct(batch.edges[:, 0], batch.edges[:, 1], batch.negatives)
    h = encoder.encode(nodes, seed)  # (U, D)
    index = torch.from_numpy(pos).to(h.device)
    h_src, h_dst = h[index[:num]], h[index[num: 2 * num]]
    h_neg = h[index[2 * num:]].view(*batch.negatives.shape, -1)  # (C, n, D)
    logits = torch.cat([decoder(h_src, h_dst)[:, None], chunk_scores(decoder, h_src, h_neg, chunk)], dim=1)
    return F.cross_entropy(logits, torch.zeros(num, dtype=torch.int64, device=h.device))


@torch.no_grad()
def embed_nodes(encoder: Any, nodes: np.ndarray, seed: int) -> torch.Tensor:
    """``(len(nodes), D)`` representations of distinct ``nodes``, encoded in batches (eval mode)."""
    was = encoder.training
    encoder.eval()
    out: torch.Tensor | None = None
    try:
        for lo in range(0, len(nodes), EVAL_NODES_PER_BATCH):  # into one tensor: no list of parts, no copy
            h = encoder.encode(nodes[lo: lo + EVAL_NODES_PER_BATCH], seed + lo)
            if out is None:
                out = h.new_empty((len(nodes), h.shape[1]))
            out[lo: lo + len(h)] = h
    finally:
        encoder.train(was)
    return out if out is not None else torch.empty(0)


def use_filtered(cfg: Any, num_nodes: int) -> bool:
    """Whether ``train.filtered_eval`` ranks against all nodes on this graph."""
    return cfg.filtered_eval == "on" or (cfg.filtered_eval == "auto" and num_nodes <= cfg.filtered_max_nodes)


@torch.no_grad()
def evaluate_split(encoder: Any, decoder: Decoder, graph: LinkGraph, edges: np.ndarray, cfg: Any, split_id: int,
                   filtered: bool) -> dict[str, float]:
    """Sampled (``sampled_mrr``, ``sampled_hits@k``) and, with ``filtered``, filtered (``filtered_*``) metrics of
    both directions of ``edges``; the sampled negatives are fixed per split (seeded by ``cfg.seed``)."""
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    bounds = chunk_bounds(len(src), cfg.negative_chunk)
    rng = np.random.default_rng([int(cfg.seed), 7919, split_id])

    def draw(chunks: int) -> np.ndarray:  # the next chunks' negatives (one stream: drawn whole or by group alike)
        return rng.integers(0, graph.num_nodes, size=(chunks, cfg.eval_negatives), dtype=np.int64)

    seed = batch_seed(cfg.seed, 1 << 20, split_id)
    decoder.eval()
    try:
        ranks = np.empty(len(src))
        if filtered:  # every node is a candidate: encode them all once (small graphs only)
            nodes = np.arange(graph.num_nodes, dtype=np.int64)
            negs = draw(len(bounds) - 1)
            h = embed_nodes(encoder, nodes, seed)
            where = lambda ids: torch.from_numpy(np.asarray(ids, np.int64)).to(h.device)  # noqa: E731
            h_src, h_dst = h[where(src)], h[where(dst)]
            _sampled_ranks(decoder, h_src, decoder(h_src, h_dst).float().cpu().numpy(), h, where, negs, bounds,
                           0, len(bounds) - 1, ranks)
        else:  # groups of chunks: memory bounded by the group's nodes and negatives, not by the split's
            group = max(1, _EVAL_GROUP_QUERIES // cfg.negative_chunk)
            for c0 in range(0, len(bounds) - 1, group):
                c1 = min(c0 + group, len(bounds) - 1)
                lo, hi = int(bounds[c0]), int(bounds[c1])
                negs = draw(c1 - c0)
                nodes, _ = _distinct(src[lo:hi], dst[lo:hi], negs)
                h = embed_nodes(encoder, nodes, seed)
                where = lambda ids, n=nodes, d=h.device: torch.from_numpy(np.searchsorted(n, ids)).to(d)  # noqa: E731
                h_src = h[where(src[lo:hi])]
                pos = decoder(h_src, h[where(dst[lo:hi])]).float().cpu().numpy()
                _sampled_ranks(decoder, h_src, pos, h, where, negs, bounds[c0: c1 + 1] - lo, 0, c1 - c0,
                               ranks[lo:hi])
        out = rank_metrics(ranks, "sampled_")
        if filtered:
            franks = np.empty(len(src))
            for lo in range(0, len(src), 1024):
                scores = decoder.score_candidates(h_src[lo: lo + 1024], h).float().cpu().numpy()
                franks[lo: lo + 1024] = filtered_ranks(scores, dst[lo: lo + 1024], src[lo: lo + 1024],
                                                       graph.known_indptr, graph.known_indices)
            out.update(rank_metrics(franks, "filtered_"))
    finally:
        decoder.train()
    return out


def _sampled_ranks(decoder: Decoder, h_src: torch.Tensor, pos: np.ndarray, h: torch.Tensor, where: Any,
                   negs: np.ndarray, bounds: np.ndarray, c0: int, c1: int, out: np.ndarray) -> None:
    """``out[k]``: the rank of query ``k`` (positions relative to ``h_src``/``pos``/``out``, whose chunk ``c``
    spans ``bounds[c]:bounds[c + 1]``) among its chunk's sampled negatives, for the chunks ``c0 .. c1 - 1``."""
    base = int(bounds[c0])
    for c in range(c0, c1):
        lo, hi = int(bounds[c]) - base, int(bounds[c + 1]) - base
        neg = decoder.score_candidates(h_src[lo:hi], h[where(negs[c])]).float().cpu().numpy()
        out[lo:hi] = ranks_against(pos[lo:hi], neg)


def _headline(metrics: dict[str, float], filtered: bool) -> dict[str, float]:
    """``mrr``/``hits@k``: the filtered metrics when filtering applies, else the sampled ones."""
    kind = "filtered_" if filtered else "sampled_"
    return {k.removeprefix(kind): v for k, v in metrics.items() if k.startswith(kind)}


def train_link(cfg: Any, graph: LinkGraph, encoder: Any, decoder: Decoder, sampler: NegativeSampler,
               epoch_batches: Callable[[int], Iterable[LinkBatch]] | None = None,
               tracker: Any = None, progress: Callable[[int, dict[str, float]], None] | None = None,
               keep_best: bool = True) -> LinkResult:
    """Train ``encoder`` + ``decoder`` on ``graph``'s training edges for at most ``cfg.epochs`` epochs (early
    stopping on validation MRR), then test. ``epoch_batches(epoch)`` overrides :func:`shuffled_batches`;
    ``keep_best=False`` ends with the last weights instead of the best (a store that cannot snapshot its
    embeddings: the out-of-core one)."""
    params = [*encoder.dense_parameters(), *decoder.parameters()]
    optimizer = torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay) if params else None
    if epoch_batches is None:
        def epoch_batches(epoch: int) -> Iterator[LinkBatch]:
            return shuffled_batches(graph.split.train, sampler, cfg, epoch)

    from trainer.train import _torch_modes  # train.deterministic and train.num_threads, as node training

    with _torch_modes(cfg.deterministic, cfg.num_threads):
        return _train_link(cfg, graph, encoder, decoder, optimizer, epoch_batches, tracker, progress, keep_best)


def _train_link(cfg: Any, graph: LinkGraph, encoder: Any, decoder: Decoder, optimizer: Any,
                epoch_batches: Callable[[int], Iterable[LinkBatch]], tracker: Any,
                progress: Callable[[int, dict[str, float]], None] | None, keep_best: bool) -> LinkResult:
    filtered = use_filtered(cfg, graph.num_nodes)
    store = getattr(encoder, "store", None)
    keep_best = keep_best and (store is None or hasattr(store, "snapshot"))  # out of core: the last epoch's
    snapshot = keep_best
    losses: list[float] = []
    val_mrr: list[float] = []
    epoch_s: list[float] = []
    best = {"mrr": -1.0, "epoch": -1, "state": None, "table": None}
    stopped, early = cfg.epochs - 1, False
    timers = {"train_s": 0.0, "eval_s": 0.0}
    encoder.train()
    decoder.train()
    for epoch in range(cfg.epochs):
        t0 = time.perf_counter()
        total, count = 0.0, 0
        for b, batch in enumerate(epoch_batches(epoch)):
            loss = link_step(encoder, decoder, batch, cfg.negative_chunk, batch_seed(cfg.seed, epoch, b))
            if optimizer is not None:
                optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if optimizer is not None:
                optimizer.step()
            encoder.apply_updates()
            total += float(loss.detach()) * len(batch.edges)
            count += len(batch.edges)
        losses.append(total / max(count, 1))
        epoch_s.append(time.perf_counter() - t0)
        timers["train_s"] += epoch_s[-1]
        metrics = {"loss": losses[-1], "epoch_s": epoch_s[-1]}
        if (epoch + 1) % cfg.eval_every == 0 or epoch == cfg.epochs - 1:
            t1 = time.perf_counter()
            mrr = _headline(evaluate_split(encoder, decoder, graph, graph.split.valid, cfg, 1, filtered),
                            filtered)["mrr"]
            timers["eval_s"] += time.perf_counter() - t1
            metrics["val_mrr"] = mrr
            if mrr > best["mrr"] + cfg.min_delta or not keep_best:
                best.update(mrr=mrr, epoch=epoch)
                if snapshot:
                    best["state"] = copy.deepcopy({"encoder": encoder.state_dict(), "decoder": decoder.state_dict()})
                    best["table"] = store.snapshot() if store is not None else None
            if cfg.patience and keep_best and epoch - best["epoch"] >= cfg.patience:
                stopped, early = epoch, True
        val_mrr.append(metrics.get("val_mrr", float("nan")))
        if tracker is not None:
            tracker.log_metrics(metrics, step=epoch)
        if progress is not None:
            progress(epoch, metrics)
        if early:
            break
    if snapshot and best["state"] is not None:
        encoder.load_state_dict(best["state"]["encoder"])
        decoder.load_state_dict(best["state"]["decoder"])
        if best["table"] is not None:
            store.restore(best["table"])
    t1 = time.perf_counter()
    valid = evaluate_split(encoder, decoder, graph, graph.split.valid, cfg, 1, filtered)
    test = evaluate_split(encoder, decoder, graph, graph.split.test, cfg, 2, filtered)
    timers["eval_s"] += time.perf_counter() - t1
    headline = _headline(test, filtered)
    metrics = {**headline, **test, "val_mrr": _headline(valid, filtered)["mrr"],
               **{f"val_{k}": v for k, v in valid.items()},
               "random_mrr": random_mrr(cfg.eval_negatives), "filtered": float(filtered)}
    state = {f"decoder.{k}": v.detach().cpu() for k, v in decoder.state_dict().items()}
    if hasattr(encoder, "model"):
        state.update({f"model.{k}": v.detach().cpu() for k, v in encoder.model.state_dict().items()})
    return LinkResult(metrics, losses, val_mrr, epoch_s, best["epoch"], stopped if early else len(losses) - 1,
                      early, state, timers)
