"""Node encoders of link prediction: representations of a batch's distinct nodes.

``gnn`` (:class:`GNNEncoder`)
    a :data:`trainer.models.MODELS` network (``train.model``: GraphSAGE, GCN, GAT, ...) with ``embedding_dim``
    outputs over the neighbourhoods of the nodes sampled from the *training* graph (held-out edges absent) with
    ``sample.fanouts`` (``storage_kernels.kernels.sample_blocks``), on the node features;
``embedding`` (:class:`EmbeddingEncoder`)
    a learned row per node (``trainer.link.embeddings``), no features; its rows are updated by Adagrad
    (:meth:`EmbeddingEncoder.apply_updates`), the decoder's parameters by the dense optimizer.

Both take ``encode(nodes, seed)`` with ``nodes`` distinct int64 and return ``(len(nodes), D)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import nn

from storage_kernels import kernels
from storage_kernels.sampleset import SampledBatch
from trainer.link.embeddings import EmbeddingStore
from trainer.models import GraphModel, to_tensor_blocks

__all__ = ["EmbeddingEncoder", "GNNEncoder", "sampled_batch"]


def sampled_batch(indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray, fanouts: Sequence[int], seed: int
                  ) -> SampledBatch:
    """The sampled layered neighbourhood of ``seeds`` as a ``SampledBatch`` (blocks input layer first)."""
    out = kernels.sample_blocks(indptr, indices, seeds, fanouts, seed)
    return SampledBatch(0, "link", 0, 0, out.nodes, out.hop_counts, list(out.indptrs), list(out.cols))


class GNNEncoder(nn.Module):
    """``model`` over sampled neighbourhoods of the training CSR ``indptr``/``indices`` and ``features``."""

    def __init__(self, model: GraphModel, features: torch.Tensor, indptr: np.ndarray, indices: np.ndarray,
                 fanouts: Sequence[int]) -> None:
        super().__init__()
        self.model = model  # type: ignore[assignment]  # a GraphModel is an nn.Module
        self.features = features
        self.indptr, self.indices = indptr, indices
        self.fanouts = list(fanouts)

    def encode(self, nodes: np.ndarray, seed: int) -> torch.Tensor:
        batch = sampled_batch(self.indptr, self.indices, nodes, self.fanouts, seed)
        device = self.features.device
        x = self.features[torch.from_numpy(np.asarray(batch.nodes, dtype=np.int64)).to(device)]
        return self.model(x, to_tensor_blocks(batch.blocks(), device))  # (len(nodes), D)

    def dense_parameters(self) -> Iterator[nn.Parameter]:
        return self.model.parameters()

    def apply_updates(self) -> None:
        """Nothing sparse: the model's weights are updated by the dense optimizer."""


class EmbeddingEncoder(nn.Module):
    """Learned embeddings in ``store``; the rows of the last :meth:`encode` are a leaf whose gradient
    :meth:`apply_updates` applies with Adagrad (learning rate ``lr``)."""

    def __init__(self, store: EmbeddingStore, lr: float, device: torch.device | str = "cpu") -> None:
        super().__init__()
        self.store, self.lr, self.device = store, float(lr), torch.device(device)
        self._last: tuple[np.ndarray, torch.Tensor] | None = None

    def encode(self, nodes: np.ndarray, seed: int) -> torch.Tensor:
        rows = torch.from_numpy(np.ascontiguousarray(self.store.read(nodes))).to(self.device)
        if torch.is_grad_enabled() and self.training:
            rows.requires_grad_(True)
            self._last = (nodes, rows)
        return rows

    def dense_parameters(self) -> Iterator[nn.Parameter]:
        return iter(())

    def apply_updates(self) -> None:
        """Adagrad on the rows of the last training :meth:`encode` (after ``loss.backward()``)."""
        if self._last is None:
            return
        nodes, rows = self._last
        self._last = None
        if rows.grad is not None:
            self.store.update(nodes, rows.grad.detach().cpu().numpy(), self.lr)
