"""Full-neighbourhood layer-wise inference for evaluation (``train.eval_mode=layerwise``), in bounded memory.

Sampled evaluation answers with a sampled neighbourhood; the exact answer aggregates every neighbour at every
layer, and an L-hop full neighbourhood is most of a large graph. Layer-wise inference computes it one layer
at a time over all nodes instead: layer ``i`` runs over node chunks, each chunk's full one-hop block built in
C (:func:`storage_kernels.kernels.sample_blocks` with fanout -1: the chunk first, then its new neighbours),
its input rows gathered from layer ``i - 1``'s table -- for layer 0 streamed from the feature file with
aligned direct reads (:class:`trainer.features.FileRows`, float16 files decoded) -- and its output written
to layer ``i``'s table. Only two tables live at once (the one read and the one written); a table larger
than ``memory_bytes`` is a float32 memmap in ``scratch_dir``. The last layer runs only for the nodes asked
about. Each layer applies the model's own layer module and the activation between layers, dropout off, so
the result equals the model's forward on the full-neighbourhood blocks (a test checks 1e-5).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from storage_kernels import kernels
from storage_kernels.arrays import read_header
from storage_kernels.sampleset import Block
from trainer.features.file import FileRows
from trainer.features.half import decode_half_words
from trainer.gcn import GCNConv
from trainer.models import GraphSAGE, TensorBlock
from trainer.split import LayerwiseSplit

__all__ = ["LayerwiseGraph", "layer_step", "layerwise_accuracy", "layerwise_logits"]


@dataclass
class LayerwiseGraph:
    """What layer-wise evaluation reads: the full CSR, the feature file, labels and the evaluation splits.

    ``feature_dim`` is the model's input width (a float16 file's rows are decoded to it); ``chunk_nodes``
    destinations per block; ``memory_bytes`` the largest layer table kept in RAM (larger ones are memmaps in
    ``scratch_dir``, default the system's temporary directory).
    """

    indptr: np.ndarray  # int64 (N + 1,)
    indices: np.ndarray  # int64 (E,)
    features_path: Path
    feature_dim: int
    labels: np.ndarray  # int64 (N,)
    splits: dict[str, np.ndarray] = field(default_factory=dict)  # split -> node ids
    scratch_dir: Path | None = None
    chunk_nodes: int = 8192
    memory_bytes: int = 256 << 20
    num_threads: int = 0

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1


def layer_step(model: torch.nn.Module, i: int, h: torch.Tensor, block: TensorBlock,
               src_degree: torch.Tensor | None = None) -> torch.Tensor:
    """Layer ``i`` of ``model`` on its input rows ``h`` (destinations first) in evaluation form: the layer,
    then ReLU unless it is the last (dropout is off in evaluation). Supports GraphSAGE and the
    :class:`~trainer.split.LayerwiseSplit` models (GCN, GAT). ``src_degree`` (num_src,): the sources'
    full-graph out-degrees with self loop, which GCN's normalisation needs when the block is a chunk's."""
    last = i == model.num_layers - 1
    if isinstance(model, GraphSAGE):
        out = model.layers[i](h, h[: block.num_dst], block.edge_src, block.edge_dst)
    elif isinstance(model.layers[i], GCNConv):
        out = model.layers[i](h, block.edge_src, block.edge_dst, block.dst_pos(), src_degree=src_degree)
    elif isinstance(model, LayerwiseSplit):
        out = model.layers[i](h, block.edge_src, block.edge_dst, block.dst_pos())
    else:
        raise ValueError(f"'train.eval_mode' layerwise expected a model with per-layer modules (graphsage, gcn, "
                         f"gat) (got {type(model).__name__})")
    return out if last else F.relu(out)


def _chunks(nodes: np.ndarray, size: int) -> Iterator[np.ndarray]:
    for lo in range(0, len(nodes), size):
        yield nodes[lo : lo + size]


def _table(rows: int, cols: int, graph: LayerwiseGraph, scratch: Path) -> np.ndarray:
    """A float32 (rows, cols) layer table: in RAM within ``memory_bytes``, else a memmap in ``scratch``."""
    if rows * cols * 4 <= graph.memory_bytes:
        return np.empty((rows, cols), dtype=np.float32)
    path = tempfile.NamedTemporaryFile(dir=scratch, suffix=".f32", delete=False).name
    return np.memmap(path, dtype=np.float32, mode="w+", shape=(rows, cols))


@torch.no_grad()
def layerwise_logits(model: torch.nn.Module, graph: LayerwiseGraph, nodes: np.ndarray,
                     device: torch.device | str = "cpu") -> np.ndarray:
    """Full-neighbourhood logits of ``nodes`` (``(len(nodes), out_dim)`` float32), layer by layer over every
    node (see the module docstring). ``model`` is switched to eval mode and back."""
    device = torch.device(device)
    nodes = np.ascontiguousarray(nodes, dtype=np.int64)
    everyone = np.arange(graph.num_nodes, dtype=np.int64)
    was_training = model.training
    model.eval()
    file = FileRows(graph.features_path, num_threads=graph.num_threads)
    half = read_header(graph.features_path).dtype == np.float16  # rows of 4-byte words: decode them
    # every node is a destination of the full graph: its out-degree there is its count in `indices` + its loop
    out_degree = torch.from_numpy(np.bincount(np.asarray(graph.indices), minlength=graph.num_nodes) + 1)
    with tempfile.TemporaryDirectory(dir=graph.scratch_dir, prefix="layerwise-") as scratch:
        try:
            prev: np.ndarray | None = None  # layer i's input table (None: the feature file)
            for i in range(model.num_layers):
                targets = nodes if i == model.num_layers - 1 else everyone
                out: np.ndarray | None = None
                for lo, chunk in zip(range(0, len(targets), graph.chunk_nodes),
                                     _chunks(targets, graph.chunk_nodes), strict=True):
                    blk = kernels.sample_blocks(graph.indptr, graph.indices, chunk, [-1], seed=0,
                                                num_threads=graph.num_threads)  # chunk first, then neighbours
                    if prev is None:  # layer 0: the rows straight from the feature file
                        words = np.empty((len(blk.nodes), file.feature_dim), dtype=np.float32)
                        file.read(blk.nodes, words, merge=True)
                        h = torch.from_numpy(words)
                        if half:
                            h = decode_half_words(h, graph.feature_dim)
                    else:
                        h = torch.from_numpy(kernels.gather_rows(prev, blk.nodes, num_threads=graph.num_threads))
                    block = TensorBlock.from_block(Block(len(blk.nodes), len(chunk), blk.indptrs[0], blk.cols[0]),
                                                   device)
                    degree = out_degree[torch.from_numpy(blk.nodes)].to(device)  # (n_src,)
                    y = layer_step(model, i, h.to(device), block, degree).float().cpu().numpy()  # (len(chunk), d)
                    if out is None:
                        out = _table(len(targets), y.shape[1], graph, Path(scratch))
                    out[lo : lo + len(chunk)] = y
                if out is None:  # no targets
                    return np.empty((0, 0), dtype=np.float32)
                prev = out
            assert prev is not None
            return np.array(prev)  # a copy: the last table may be a memmap in the scratch directory
        finally:
            file.close()
            model.train(was_training)


def layerwise_accuracy(model: torch.nn.Module, graph: LayerwiseGraph, split: str,
                       device: torch.device | str = "cpu") -> float:
    """Accuracy of the full-neighbourhood predictions on ``graph.splits[split]``'s labelled nodes (nan when
    none is labelled)."""
    if split not in graph.splits:
        raise ValueError(f"'splits' expected {split!r} among {sorted(graph.splits)} (got none)")
    nodes = np.asarray(graph.splits[split], dtype=np.int64)
    labels = np.asarray(graph.labels)[nodes]
    keep = labels >= 0
    if not keep.any():
        return float("nan")
    pred = layerwise_logits(model, graph, nodes[keep], device).argmax(axis=1)
    return float(np.mean(pred == labels[keep]))
