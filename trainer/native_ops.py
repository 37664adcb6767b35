"""Training-time model operations on the CPU backed by the C extension: a block's mean aggregation and
dropout, as autograd functions.

On 2 cores, a GraphSAGE step on ``demo`` spent more than half its time in two places: torch's CPU dropout
(its Bernoulli mask comes from one serial Mersenne Twister) and the aggregation's (edges x features) message
tensor (``index_select``, ``scatter_reduce`` and their backward). :func:`csr_mean` walks the block's CSR
instead (``storage_kernels.kernels.csr_sum``): the same float operations in the same order as the
scatter form, so it gives the same numbers bit for bit; :func:`dropout` draws its mask from a counter-based
generator in parallel (``kernels.dropout``), seeded from torch's default generator, so a run stays
reproducible from ``torch.manual_seed`` and a checkpoint's RNG state, but its masks differ from
``F.dropout``'s.

Both fall back to the torch forms where the C kernels do not apply: a tensor off the CPU or not float32
(CUDA, bf16 autocast), and while tracing or exporting to ONNX (the exported graph must hold standard ops).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from storage_kernels import kernels

__all__ = ["csr_mean", "csr_sum", "dropout", "native_applies", "torch_forms"]

_HALF = (torch.bfloat16, torch.float16)
_SEED_BOUND = (1 << 63) - 1  # torch.randint's exclusive upper bound must fit an int64


_enabled = [True]


@contextlib.contextmanager
def torch_forms() -> Iterator[None]:
    """Within the block, every operation takes its torch form (``benchmarks/train_step.py`` compares the two in
    one process)."""
    before = _enabled[0]
    _enabled[0] = False
    try:
        yield
    finally:
        _enabled[0] = before


def _untraced_cpu(*tensors: torch.Tensor) -> bool:
    if not _enabled[0] or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export():
        return False
    return all(t.device.type == "cpu" for t in tensors)


def native_applies(*tensors: torch.Tensor) -> bool:
    """Whether the C kernels can take ``tensors``: float32 on the CPU, and no ONNX export or trace running."""
    return _untraced_cpu(*tensors) and all(t.dtype == torch.float32 for t in tensors)


def _threads() -> int:
    return max(torch.get_num_threads(), 1)  # the compute stage's share of the cores, as torch's own ops use


class _CSRAggregate(torch.autograd.Function):
    """``out[d] = sum (or mean) over the edges k of row d of h_src[cols[k]]``; backward scatters the gradient."""

    @staticmethod
    def forward(ctx, h_src: torch.Tensor, indptr: torch.Tensor, cols: torch.Tensor,  # noqa: ANN001
                mean: bool) -> torch.Tensor:
        src = h_src.detach().contiguous()
        out = torch.empty((indptr.shape[0] - 1, src.shape[1]), dtype=torch.float32)
        kernels.csr_sum(indptr.numpy(), cols.numpy(), src.numpy(), out.numpy(), mean=mean, num_threads=_threads())
        ctx.save_for_backward(indptr, cols)
        ctx.num_src, ctx.mean = src.shape[0], mean
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, None, None, None]:  # noqa: ANN001
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        indptr, cols = ctx.saved_tensors
        grad = grad_out.contiguous()
        grad_src = torch.zeros((ctx.num_src, grad.shape[1]), dtype=torch.float32)
        kernels.csr_sum_backward(indptr.numpy(), cols.numpy(), grad.numpy(), grad_src.numpy(), mean=ctx.mean,
                                 num_threads=_threads())
        return grad_src, None, None, None


def csr_mean(h_src: torch.Tensor, indptr: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Mean of ``h_src`` (S, F) float32 over the in-edges of each destination of the CSR ``indptr`` (D + 1)
    / ``cols`` (E, positions < S), int64 CPU tensors: (D, F), 0 for a destination without edges. Call only
    where :func:`native_applies`."""
    return _CSRAggregate.apply(h_src, indptr, cols, True)


def csr_sum(h_src: torch.Tensor, indptr: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """:func:`csr_mean` without the division: the sum over each destination's in-edges (0 without any)."""
    return _CSRAggregate.apply(h_src, indptr, cols, False)


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h: torch.Tensor, p: float) -> torch.Tensor:  # noqa: ANN001
        seed = int(torch.randint(0, _SEED_BOUND, (1,), dtype=torch.int64).item())  # torch's default generator
        x = h.detach().contiguous()
        out = torch.empty_like(x)
        mask = torch.empty(x.shape, dtype=torch.uint8)
        kernels.dropout(x.numpy(), p, seed, out=out.numpy(), mask=mask.numpy(), num_threads=_threads())
        ctx.save_for_backward(mask)
        ctx.p = p
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: ANN001
        (mask,) = ctx.saved_tensors
        grad = grad_out.contiguous()
        out = torch.empty_like(grad)
        kernels.dropout_backward(grad.numpy(), mask.numpy(), ctx.p, out=out.numpy(), num_threads=_threads())
        return out, None


def dropout(h: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout(h, p, training)`` with the mask drawn by the C kernel for a CPU tensor (``0 < p < 1``,
    no ONNX export or trace running); otherwise ``F.dropout`` itself.

    A bfloat16 / float16 CPU tensor (``train.autocast=bf16``) goes through float32, so its masks are the ones a
    float32 run draws from the same generator state.
    """
    if not training or p == 0.0:
        return h
    if not 0.0 < p < 1.0 or not _untraced_cpu(h) or h.dtype not in (torch.float32, *_HALF):
        return F.dropout(h, p=p, training=training)
    if h.dtype in _HALF:
        return _Dropout.apply(h.float(), p).to(h.dtype)
    return _Dropout.apply(h, p)
