"""What the kernel families' wrappers share: the one import of ``storage_kernels._native``, its alignment
constant and the argument normalisation every wrapper applies before a keyword call (small index arrays to
contiguous int64, large CSR arrays checked to be int64 already, optional index arrays with None kept).

Private to :mod:`storage_kernels.kernels`; the rest of Strata imports the wrappers from the package.
"""

from __future__ import annotations

import numpy as np

from storage_kernels import _native

DIRECT_ALIGN = _native.DIRECT_ALIGN  # bytes; O_DIRECT offsets, lengths and addresses are multiples of it


def _index_array(name: str, values) -> np.ndarray:
    """Small index arrays (seeds, ids, offsets): any integer dtype -> contiguous 1-D int64."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"'{name}' expected a 1-D integer array (got shape {arr.shape})")
    if arr.dtype.kind not in "iu":
        if arr.size:
            raise ValueError(f"'{name}' expected an integer array (got {arr.dtype})")
        arr = arr.astype(np.int64)
    return np.ascontiguousarray(arr, dtype=np.int64)


def _int64_array(name: str, values) -> np.ndarray:
    """Large read-only arrays (the CSR): must already be int64, so no hidden O(E) copy per call."""
    arr = np.asarray(values)
    if arr.dtype != np.int64 or arr.ndim != 1:
        raise ValueError(f"'{name}' expected a 1-D int64 array (got {arr.dtype} array of shape {arr.shape})")
    return np.ascontiguousarray(arr)


def _optional_indexes(**arrays) -> dict[str, np.ndarray | None]:
    """Optional index arrays (weights, visit orders) as keyword arguments of a kernel, each normalised like
    :func:`_index_array` and None kept: ``_native.f(..., **_optional_indexes(visit=visit))``."""
    return {name: None if values is None else _index_array(name, values) for name, values in arrays.items()}
