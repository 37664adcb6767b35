"""Decoding a float16 feature file's rows (``ingest.feature_dtype=float16``) where a batch is assembled.

Every tier of a source over a float16 file moves rows as 4-byte words (``storage_kernels.halfwords``): half
the bytes of float32 rows, read, cached and copied to the device unchanged. :class:`HalfFeatures` wraps such
a source and turns each assembled batch ``(n, W)`` of words into ``(n, F)`` float32 values on the batch's
device (a view as float16, the pad column dropped, one upcast), so the model and the loader see float32 rows
of the real width. Everything else -- counters, ``read`` and ``release`` for the pipelined loader, a policy's
``train_hook`` -- passes through to the wrapped source.
"""

from __future__ import annotations

from typing import Any

import torch

from trainer.features.base import FeatureSource, NodeBatch

__all__ = ["HalfFeatures", "decode_half_words"]


def decode_half_words(words: torch.Tensor, feature_dim: int) -> torch.Tensor:
    """``(n, W)`` float32 words holding ``2W`` float16 values per row -> ``(n, feature_dim)`` float32."""
    if words.dtype != torch.float32 or words.dim() != 2 or not 0 < feature_dim <= 2 * words.shape[1] <= feature_dim + 1:
        raise ValueError(f"'features' expected (n, {(feature_dim + 1) // 2}) float32 words of {feature_dim} float16 "
                         f"values (got {words.dtype} {tuple(words.shape)})")
    return words.contiguous().view(torch.float16)[:, :feature_dim].float()


class HalfFeatures:
    """A feature source over a float16 file whose batches come out as ``(n, feature_dim)`` float32.

    ``feature_dim``, ``load`` and ``assemble`` are its own; every other member of
    :class:`~trainer.features.base.FeatureSource` (``split``, ``read``, ``release``, the counters,
    ``train_hook``, ...) and whatever else the wrapped source has (its caches, ``reset_counters``) is the wrapped
    source's, through :meth:`__getattr__`.
    """

    def __init__(self, source: FeatureSource, feature_dim: int) -> None:
        words = int(source.feature_dim)
        if not 0 < feature_dim <= 2 * words <= feature_dim + 1:
            raise ValueError(f"'feature_dim' expected {2 * words - 1} or {2 * words} for a source of {words} words "
                             f"per row (got {feature_dim})")
        self.source = source
        self._dim = int(feature_dim)

    @property
    def feature_dim(self) -> int:
        return self._dim

    def load(self, batch: NodeBatch) -> torch.Tensor:
        return decode_half_words(self.source.load(batch), self._dim)

    def assemble(self, read: Any) -> torch.Tensor:
        return decode_half_words(self.source.assemble(read), self._dim)

    def __getattr__(self, name: str) -> Any:  # every member not defined here is the wrapped source's
        if name == "source":  # not yet set (during unpickling or a failed __init__)
            raise AttributeError(name)
        return getattr(self.source, name)

    def __enter__(self) -> HalfFeatures:
        return self

    def __exit__(self, *exc: object) -> None:
        self.source.close()

    def __repr__(self) -> str:
        return f"HalfFeatures({self.source!r}, feature_dim={self._dim})"
