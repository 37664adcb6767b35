"""Feature files stored as float16 (``ingest.feature_dtype=float16``): half the bytes on disk and read.

A float16 feature file is a C-order ``(N, Fp)`` float16 ``.npy`` (``Fp`` = the feature dimension ``F``
rounded up to even: an odd ``F`` gets one zero column), so ``numpy.load`` shows the real values. Everything
that moves rows -- the reorder permutation, packing, the caches, every feature tier, the C kernels and their
``O_DIRECT`` block reads -- handles a row as ``Fp / 2`` opaque 4-byte *words*: :func:`as_words` views the
array as ``(N, Fp / 2)`` float32 (no copy), so a row is ``2 * Fp`` bytes, a multiple of 4 as the tiers
require, and nothing in between knows or converts. Values are decoded (upcast to float32, the pad column
dropped) once, where a batch is assembled (``trainer.features.half``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = ["FEATURE_DTYPES", "FeatureDtype", "as_words", "encode_rows", "file_columns", "file_dtype"]

FeatureDtype = Literal["float32", "float16"]
FEATURE_DTYPES: tuple[str, ...] = ("float32", "float16")
_HALF_MAX = float(np.finfo(np.float16).max)


def file_dtype(feature_dtype: str) -> np.dtype:
    """The element dtype of the feature file for a ``feature_dtype`` setting."""
    if feature_dtype not in FEATURE_DTYPES:
        raise ValueError(f"'ingest.feature_dtype' expected one of {FEATURE_DTYPES} (got {feature_dtype!r})")
    return np.dtype(np.float16 if feature_dtype == "float16" else np.float32)


def file_columns(feature_dim: int, feature_dtype: str) -> int:
    """Columns of the feature file: ``F``, rounded up to even for float16 (whole 4-byte words per row)."""
    return feature_dim + (feature_dim % 2 if file_dtype(feature_dtype) == np.float16 else 0)


def encode_rows(rows: np.ndarray, feature_dtype: str, first_row: int = 0, what: str = "features") -> np.ndarray:
    """A float32 ``(k, F)`` chunk as the feature file stores it: unchanged for float32; for float16 rounded
    to nearest (ValueError naming the first value beyond float16's range +-65504, which would become inf;
    ``first_row`` numbers the rows in the message) and padded with a zero column when ``F`` is odd."""
    dtype = file_dtype(feature_dtype)
    if dtype == np.float32:
        return rows
    rows = np.asarray(rows)
    too_big = np.abs(rows) > _HALF_MAX
    if too_big.any():
        r, c = (int(i) for i in np.argwhere(too_big)[0])
        raise ValueError(f"'{what}' expected values within float16's range +-65504 for ingest.feature_dtype="
                         f"float16 (got {float(rows[r, c])} at row {first_row + r}, column {c})")
    out = np.zeros((rows.shape[0], file_columns(rows.shape[1], feature_dtype)), dtype=np.float16)
    out[:, : rows.shape[1]] = rows
    return out


def as_words(features: np.ndarray) -> np.ndarray:
    """The rows every tier moves: a float32 file as is; a float16 ``(N, Fp)`` file (``Fp`` even) viewed as
    ``(N, Fp / 2)`` float32 words (a view: a memmap stays a memmap)."""
    if features.dtype == np.float32:
        return features
    if features.dtype != np.float16 or features.ndim != 2 or features.shape[1] % 2:
        raise ValueError(f"'features.npy' expected (N, F) float32 or (N, even) float16 rows "
                         f"(got {features.dtype} {features.shape})")
    if not features.flags.c_contiguous:
        raise ValueError("'features.npy' expected C-contiguous float16 rows (got a strided array)")
    return features.view(np.float32)
