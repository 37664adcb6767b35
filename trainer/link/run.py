"""Build a link-prediction run from arrays and train it: the split, the encoder, the decoder, the negatives.

:func:`build_link` turns a symmetric CSR, the node features and a ``TrainConfig`` (``train.task=link``) into
the :class:`~trainer.link.train.LinkGraph`, encoder, decoder and negative sampler; :func:`run_link` trains them
(:func:`trainer.link.train.train_link`). The pipeline's train stage (``pipelines.stages.train_link``) and the tests
call these; the model arguments (``model_args``) are what export rebuilds the network from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trainer.link.decoders import Decoder, build_decoder
from trainer.link.embeddings import InMemoryEmbeddings
from trainer.link.encoders import EmbeddingEncoder, GNNEncoder
from trainer.link.negatives import NegativeSampler
from trainer.link.split import EdgeSplit, split_edges
from trainer.link.train import LinkGraph, LinkResult, train_link

__all__ = ["LinkRun", "build_link", "run_link"]


@dataclass
class LinkRun:
    """The parts of one run (``model_args`` rebuild the network: ``trainer.link.export``)."""

    graph: LinkGraph
    encoder: Any
    decoder: Decoder
    sampler: NegativeSampler
    model_args: dict[str, Any]


def build_link(cfg: Any, indptr: np.ndarray, indices: np.ndarray, features: np.ndarray | None,
               fanouts: Sequence[int], device: str | torch.device = "cpu",
               embeddings: Callable[[int], Any] | None = None, split: EdgeSplit | None = None) -> LinkRun:
    """The split of the CSR's edges and a freshly initialised encoder/decoder (seeded by ``cfg.seed``).

    ``split``: the source's own split (``pipelines.methods.sources.linksplit``), used as given; without it the
    deterministic one is generated (:func:`~trainer.link.split.split_edges`).

    ``embeddings(num_nodes)`` makes the learned table of the ``embedding`` encoder (default: an
    :class:`InMemoryEmbeddings`); an out-of-core run passes its partitioned node file, so that no table as
    large as the graph's is ever allocated in memory."""
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    if split is None:
        split = split_edges(indptr, indices, cfg.link_valid_fraction, cfg.link_test_fraction, cfg.link_split_seed)
    elif split.num_nodes != len(indptr) - 1:
        raise ValueError(f"'split.num_nodes' expected the graph's {len(indptr) - 1} nodes (got {split.num_nodes})")
    graph = LinkGraph.build(split, indptr, indices)
    torch.manual_seed(cfg.seed)
    device = torch.device(device)
    args: dict[str, Any] = {"task": "link", "link_encoder": cfg.link_encoder, "decoder": cfg.decoder,
                            "embedding_dim": cfg.embedding_dim, "num_nodes": graph.num_nodes}
    if cfg.link_encoder == "gnn":
        if features is None:
            raise ValueError("'train.link_encoder' gnn expected node features (got none)")
        from trainer.models import build_model, model_options

        feats = torch.from_numpy(np.array(features, dtype=np.float32)).to(device)  # in RAM, writable
        model_args = {"model": cfg.model, "in_dim": int(feats.shape[1]), "hidden_dim": cfg.hidden_dim,
                      "out_dim": cfg.embedding_dim, "num_layers": len(fanouts), "dropout": cfg.dropout,
                      **model_options(cfg)}
        model = build_model(**model_args).to(device)
        encoder: Any = GNNEncoder(model, feats, graph.train_indptr, graph.train_indices, fanouts)
        args["model_args"] = model_args
    else:
        table = (embeddings(graph.num_nodes) if embeddings is not None
                 else InMemoryEmbeddings(graph.num_nodes, cfg.embedding_dim, cfg.seed))
        encoder = EmbeddingEncoder(table, cfg.embedding_lr, device)
    decoder = build_decoder(cfg.decoder, cfg.embedding_dim).to(device)
    degree = cfg.negative_sampler == "degree"  # only degree negatives read the training CSR
    sampler = NegativeSampler(cfg.negative_sampler, graph.num_nodes, graph.train_indices if degree else None)
    return LinkRun(graph, encoder, decoder, sampler, args)


def run_link(cfg: Any, indptr: np.ndarray, indices: np.ndarray, features: np.ndarray | None,
             fanouts: Sequence[int], device: str | torch.device = "cpu", tracker: Any = None,
             progress: Any = None) -> tuple[LinkRun, LinkResult]:
    """:func:`build_link` then :func:`~trainer.link.train.train_link`."""
    run = build_link(cfg, indptr, indices, features, fanouts, device)
    result = train_link(cfg, run.graph, run.encoder, run.decoder, run.sampler, tracker=tracker, progress=progress)
    return run, result
