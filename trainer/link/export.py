"""Export a trained link predictor to ONNX: encoder + decoder in one graph that scores node pairs.

``gnn`` encoder (:class:`GNNScorer`): the node classifier's inputs (``trainer.export``: ``x``, and per layer
``edge_src_i``/``edge_dst_i``/``dst_pos_i`` of one sampled subgraph, seeds first) plus ``pair_src``/``pair_dst``
(P,) int64, positions among the subgraph's seeds; output ``scores`` (P,) float32 -- the decoder's score of each
pair of seed representations.

``embedding`` encoder (:class:`EmbeddingScorer`): the learned table is an initializer of the graph; inputs
``src``/``dst`` (P,) int64 node ids, output ``scores`` (P,).

:func:`verify_link_onnx` runs the file in onnxruntime and returns the largest difference from PyTorch, absolute
and scaled by the largest score.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trainer.export import _declare_every_input, _flat_inputs, _inline_rank_ifs, onnx_input_names, random_subgraph
from trainer.link.decoders import Decoder, build_decoder

__all__ = ["EmbeddingScorer", "GNNScorer", "export_link_onnx", "link_example", "load_link_model",
           "verify_link_onnx"]


class GNNScorer(nn.Module):
    """``forward(x, *edges, pair_src, pair_dst)``: scores of seed pairs of one sampled subgraph."""

    def __init__(self, model: Any, decoder: Decoder) -> None:
        super().__init__()
        self.model, self.decoder = model, decoder

    def forward(self, x: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        edges, pair_src, pair_dst = rest[:-2], rest[-2], rest[-1]
        triples = [(edges[3 * i], edges[3 * i + 1], edges[3 * i + 2]) for i in range(self.model.num_layers)]
        h = self.model.forward_dst_pos(x, triples)  # (num_seeds, D)
        return self.decoder(h[pair_src], h[pair_dst])


class EmbeddingScorer(nn.Module):
    """``forward(src, dst)``: scores of node pairs from the learned table."""

    def __init__(self, table: torch.Tensor, decoder: Decoder) -> None:
        super().__init__()
        self.table = nn.Parameter(table, requires_grad=False)
        self.decoder = decoder

    def forward(self, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.table[src], self.table[dst])


def load_link_model(model_json: str | Path, state_dict: str | Path, embeddings: str | Path | None) -> nn.Module:
    """The scorer of a ``train`` artifact of ``task=link`` (weights only, never unpickled objects)."""
    info = json.loads(Path(model_json).read_text())
    state = torch.load(state_dict, map_location="cpu", weights_only=True)
    decoder = build_decoder(info["decoder"], int(info["embedding_dim"]))
    decoder.load_state_dict({k.removeprefix("decoder."): v for k, v in state.items() if k.startswith("decoder.")})
    if info["link_encoder"] == "gnn":
        from trainer.models import build_model

        model = build_model(**info["model_args"])
        model.load_state_dict({k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")})
        scorer: nn.Module = GNNScorer(model, decoder)
    else:
        if embeddings is None:
            raise ValueError(f"'{model_json}' names an embedding encoder but no embeddings.npy was given")
        scorer = EmbeddingScorer(torch.from_numpy(np.load(embeddings)), decoder)
    return scorer.eval()


def link_example(scorer: nn.Module, num_pairs: int = 8, seed: int = 0) -> dict[str, np.ndarray]:
    """A random ONNX feed for ``scorer``: a random subgraph and seed pairs, or random node-id pairs."""
    gen = np.random.default_rng(seed)
    if isinstance(scorer, GNNScorer):
        num_seeds = 6
        x, blocks = random_subgraph(scorer.model.in_dim, scorer.model.num_layers, num_seeds=num_seeds, fanout=3,
                                    seed=seed)
        names = onnx_input_names(len(blocks))
        feed = {n: t.numpy() for n, t in zip(names, _flat_inputs(x, blocks), strict=True)}
        feed["pair_src"] = gen.integers(0, num_seeds, num_pairs).astype(np.int64)
        feed["pair_dst"] = gen.integers(0, num_seeds, num_pairs).astype(np.int64)
        return feed
    n = scorer.table.shape[0]
    return {"src": gen.integers(0, n, num_pairs).astype(np.int64),
            "dst": gen.integers(0, n, num_pairs).astype(np.int64)}


def _torch_scores(scorer: nn.Module, feed: dict[str, np.ndarray]) -> np.ndarray:
    with torch.no_grad():
        return scorer(*[torch.from_numpy(v) for v in feed.values()]).numpy()


def export_link_onnx(scorer: nn.Module, path: str | Path, opset: int = 18) -> Path:
    """Export ``scorer`` (a :class:`GNNScorer` or :class:`EmbeddingScorer`) with dynamic first axes."""
    path = Path(path)
    feed = link_example(scorer, seed=1)
    names = list(feed)
    dynamic = {n: {0: f"len_{n}"} for n in names}
    dynamic["scores"] = {0: "num_pairs"}
    if "x" in dynamic:
        dynamic["x"] = {0: "num_nodes"}
    scorer = scorer.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(scorer, tuple(torch.from_numpy(v) for v in feed.values()), str(path), input_names=names,
                          output_names=["scores"], dynamic_axes=dynamic, opset_version=opset, dynamo=False,
                          do_constant_folding=True)
    if isinstance(scorer, GNNScorer):
        _inline_rank_ifs(path)
        _declare_every_input(path, names)
    return path


def verify_link_onnx(path: str | Path, scorer: nn.Module, feed: dict[str, np.ndarray] | None = None
                     ) -> tuple[float, float]:
    """``(max |onnxruntime - PyTorch|, scaled)`` of the pair scores on ``feed`` (default: :func:`link_example`,
    seed 7); ``scaled`` divides by ``max(1, max |score|)``: scores are unbounded dot products, so float32's
    rounding grows with them and a tolerance holds for the scaled difference."""
    import onnxruntime as ort

    feed = feed if feed is not None else link_example(scorer, seed=7)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(["scores"], feed)
    want = _torch_scores(scorer, feed)
    if got.shape != want.shape:
        raise ValueError(f"'onnx scores' expected shape {want.shape} (got {got.shape})")
    if not want.size:
        return 0.0, 0.0
    diff = float(np.abs(got - want).max())
    return diff, diff / max(1.0, float(np.abs(want).max()))
