"""Wrappers of the ``nn/`` kernels: the CPU forms of a GNN layer's training-time operations -- sum / mean
aggregation over a block's CSR (``aggregate.c``), dropout with a counter-based mask (``dropout.c``) and GAT's
fused attention (``attention.c``), each with its backward (``trainer/native_ops.py`` wraps them for autograd).
"""

from __future__ import annotations

import numpy as np

from storage_kernels.kernels._common import _index_array, _int64_array, _native

# ---- training-time model operations (nn/) -------------------------------------------------------------------
# The CPU forms of a GNN layer's aggregation and of dropout (trainer/native_ops.py wraps them for autograd).


def csr_sum(indptr, cols, src: np.ndarray, out: np.ndarray | None = None, mean: bool = False,
            num_threads: int = 0) -> np.ndarray:
    """``out[d] = sum_{k in [indptr[d], indptr[d+1])} src[cols[k]]`` (divided by ``max(degree, 1)`` when
    ``mean``) for a float32 ``src`` (S, F) and ``out`` (D, F), D = ``len(indptr) - 1``.

    Edges are added in CSR order starting from 0 (the float operations of ``scatter_reduce(sum)`` over zeros,
    then a division); rows are split over threads, so the result does not depend on ``num_threads``.
    ``out`` is allocated when None. ValueError for shapes or a bad ``indptr``, IndexError naming the first
    ``cols[k] >= S``, before anything is written.
    """
    if out is None:
        out = np.empty((max(len(indptr) - 1, 0), src.shape[1]), dtype=np.float32)
    _native.csr_sum(indptr=_int64_array("indptr", indptr), cols=_index_array("cols", cols), src=src, out=out,
                    mean=bool(mean), num_threads=num_threads)
    return out


def csr_sum_backward(indptr, cols, grad_out: np.ndarray, grad_src: np.ndarray, mean: bool = False,
                     num_threads: int = 0) -> np.ndarray:
    """The gradient of :func:`csr_sum` with respect to ``src``, accumulated: ``grad_src[cols[k]] += grad_out[d]``
    (divided by ``max(degree, 1)`` when ``mean``) for every edge ``k`` of row ``d``, in CSR order.

    ``grad_out`` (D, F) and ``grad_src`` (S, F, writable) are float32; feature columns are split over threads
    (each walks every edge), so the result does not depend on ``num_threads``. Checks as :func:`csr_sum`.
    Returns ``grad_src``.
    """
    _native.csr_sum_backward(indptr=_int64_array("indptr", indptr), cols=_index_array("cols", cols),
                             grad_out=grad_out, grad_src=grad_src, mean=bool(mean), num_threads=num_threads)
    return grad_src


def dropout(x: np.ndarray, p: float, seed: int, out: np.ndarray | None = None, mask: np.ndarray | None = None,
            num_threads: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Dropout of the float32 array ``x``: returns ``(out, mask)``, ``mask`` uint8 (1 = kept) and ``out`` =
    ``x / (1 - p)`` where kept, 0 elsewhere (``out`` may be ``x``).

    Element ``i`` (flat order) is kept when ``mix64(mix64(seed + G0) + (i + 1) * G0) >= p * 2**64``
    (``_native/nn/dropout.c``): a pure function of ``seed`` and ``i``, whatever ``num_threads``.
    ``seed`` is an unsigned 64-bit integer; ``p`` in [0, 1] (1 drops everything).
    """
    if out is None:
        out = np.empty_like(x, dtype=np.float32)
    if mask is None:
        mask = np.empty(x.shape, dtype=np.uint8)
    _native.dropout(x=x, out=out, mask=mask, p=float(p), seed=int(seed), num_threads=num_threads)
    return out, mask


def dropout_backward(grad: np.ndarray, mask: np.ndarray, p: float, out: np.ndarray | None = None,
                     num_threads: int = 0) -> np.ndarray:
    """The gradient of :func:`dropout` given its ``mask``: ``out = grad * mask / (1 - p)`` (float32; ``out``
    may be ``grad``). Returns ``out``."""
    if out is None:
        out = np.empty_like(grad, dtype=np.float32)
    _native.dropout_backward(grad=grad, mask=mask, p=float(p), out=out, num_threads=num_threads)
    return out


def gat_attend(z: np.ndarray, score_src: np.ndarray, score_dst: np.ndarray, indptr, cols, dst_pos,
               negative_slope: float = 0.2, p: float = 0.0, seed: int = 0, out: np.ndarray | None = None,
               alpha: np.ndarray | None = None, num_threads: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """GAT's attention aggregation over a block (``_native/nn/attention.c``): returns ``(out, alpha)``.

    Destination ``d`` receives the block's edges ``k`` of its CSR row (sources ``cols[k]``) and its self loop
    from row ``dst_pos[d]``; per head ``h`` the softmax over them of ``LeakyReLU(score_src[j, h] +
    score_dst[d, h])`` (``alpha``, (E + D, H), edge rows first, then the loops), dropped out with probability
    ``p`` (:func:`dropout`'s mask for ``seed`` over ``alpha``'s elements), weights the rows ``z[j, h]``:
    ``out[d, h]`` (D, H, C). ``z`` (S, H, C), ``score_src`` (S, H), ``score_dst`` (D, H) float32.
    Destinations split over threads: the result does not depend on ``num_threads``.
    """
    num_dst = max(len(indptr) - 1, 0)
    if out is None:
        out = np.empty((num_dst, z.shape[1], z.shape[2]), dtype=np.float32)
    if alpha is None:
        alpha = np.empty((len(cols) + num_dst, z.shape[1]), dtype=np.float32)
    _native.gat_attend(z=z, score_src=score_src, score_dst=score_dst, indptr=_int64_array("indptr", indptr),
                       cols=_index_array("cols", cols), dst_pos=_index_array("dst_pos", dst_pos), out=out,
                       alpha=alpha, negative_slope=float(negative_slope), p=float(p), seed=int(seed),
                       num_threads=num_threads)
    return out, alpha


def gat_attend_backward(z: np.ndarray, score_src: np.ndarray, score_dst: np.ndarray, indptr, cols, dst_pos,
                        alpha: np.ndarray, grad_out: np.ndarray, grad_z: np.ndarray, grad_score_src: np.ndarray,
                        grad_score_dst: np.ndarray, negative_slope: float = 0.2, p: float = 0.0, seed: int = 0,
                        num_threads: int = 0) -> None:
    """The gradient of :func:`gat_attend` given its ``alpha`` and the same ``p`` and ``seed`` (the dropout mask
    is recomputed): accumulates into ``grad_z`` (S, H, C) and ``grad_score_src`` (S, H), writes
    ``grad_score_dst`` (D, H). Heads split over threads: the result does not depend on ``num_threads``."""
    _native.gat_attend_backward(z=z, score_src=score_src, score_dst=score_dst, indptr=_int64_array("indptr", indptr),
                                cols=_index_array("cols", cols), dst_pos=_index_array("dst_pos", dst_pos),
                                alpha=alpha, grad_out=grad_out, grad_z=grad_z, grad_score_src=grad_score_src,
                                grad_score_dst=grad_score_dst, negative_slope=float(negative_slope), p=float(p),
                                seed=int(seed), num_threads=num_threads)
