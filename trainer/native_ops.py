"""Training-time model operations on the CPU backed by the C extension, as autograd functions: a block's
sum or mean over its CSR (GraphSAGE, GCN), GAT's attention aggregation, and dropout.

On 2 cores, a GraphSAGE step on ``demo`` spent more than half its time in two places: torch's CPU dropout
(its Bernoulli mask comes from one serial Mersenne Twister) and the aggregation's (edges x features) message
tensor (``index_select``, ``scatter_reduce`` and their backward). :func:`csr_mean` / :func:`csr_sum` walk the
block's CSR instead (``storage_kernels.kernels.csr_sum``): the same float operations in the same order as the
scatter form, so they give the same numbers bit for bit. :func:`gat_attend` fuses GAT's scores, edge
softmax, attention dropout and weighted sum (``kernels.gat_attend``), equal to the torch form up to the last
bit of ``exp``. :func:`dropout` draws its mask from a counter-based generator in parallel
(``kernels.dropout``), seeded from torch's default generator, so a run stays reproducible from
``torch.manual_seed`` and a checkpoint's RNG state, but its masks differ from ``F.dropout``'s; GAT's fused
attention draws the same seed and mask as ``dropout`` would on its attention weights.

Both fall back to the torch forms where the C kernels do not apply: a tensor off the CPU or not float32
(CUDA, bf16 autocast), and while tracing or exporting to ONNX (the exported graph must hold standard ops).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from storage_kernels import kernels

__all__ = ["csr_mean", "csr_sum", "dropout", "gat_attend", "native_applies", "torch_forms"]

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


def _draw_seed() -> int:
    """A mask's seed from torch's default generator (manual_seed and checkpointed RNG states reproduce it)."""
    return int(torch.randint(0, _SEED_BOUND, (1,), dtype=torch.int64).item())


class _GATAttend(torch.autograd.Function):
    """GAT's attention aggregation, fused (``kernels.gat_attend``); the backward recomputes the dropout mask."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, score_src: torch.Tensor, score_dst: torch.Tensor,  # noqa: ANN001
                indptr: torch.Tensor, cols: torch.Tensor, dst_pos: torch.Tensor, p: float,
                negative_slope: float) -> torch.Tensor:
        seed = _draw_seed() if p > 0.0 else 0  # the draw dropout() would make for the attention weights
        z_, ss, sd = (t.detach().contiguous() for t in (z, score_src, score_dst))
        out = torch.empty((indptr.shape[0] - 1, z_.shape[1], z_.shape[2]), dtype=torch.float32)
        alpha = torch.empty((cols.shape[0] + indptr.shape[0] - 1, z_.shape[1]), dtype=torch.float32)
        kernels.gat_attend(z_.numpy(), ss.numpy(), sd.numpy(), indptr.numpy(), cols.numpy(), dst_pos.numpy(),
                           negative_slope, p, seed, out=out.numpy(), alpha=alpha.numpy(), num_threads=_threads())
        ctx.save_for_backward(z_, ss, sd, indptr, cols, dst_pos, alpha)
        ctx.p, ctx.seed, ctx.negative_slope = p, seed, negative_slope
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # noqa: ANN001
        z, ss, sd, indptr, cols, dst_pos, alpha = ctx.saved_tensors
        grad_z, grad_ss, grad_sd = torch.zeros_like(z), torch.zeros_like(ss), torch.empty_like(sd)
        kernels.gat_attend_backward(z.numpy(), ss.numpy(), sd.numpy(), indptr.numpy(), cols.numpy(), dst_pos.numpy(),
                                    alpha.numpy(), grad_out.contiguous().numpy(), grad_z.numpy(), grad_ss.numpy(),
                                    grad_sd.numpy(), ctx.negative_slope, ctx.p, ctx.seed, num_threads=_threads())
        return grad_z, grad_ss, grad_sd, None, None, None, None, None


def gat_attend(z: torch.Tensor, score_src: torch.Tensor, score_dst: torch.Tensor, indptr: torch.Tensor,
               cols: torch.Tensor, dst_pos: torch.Tensor, p: float, negative_slope: float) -> torch.Tensor:
    """GAT's attention-weighted sum over a block's CSR (``indptr``, ``cols``) and self loops (``dst_pos``):
    ``z`` (S, H, C), ``score_src`` (S, H), ``score_dst`` (D, H) -> (D, H, C); attention dropout ``p`` (0 in
    evaluation, < 1) with the mask :func:`dropout` would draw for the (E + D, H) attention weights. Call
    only where :func:`native_applies`."""
    return _GATAttend.apply(z, score_src, score_dst, indptr, cols, dst_pos, p, negative_slope)


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h: torch.Tensor, p: float) -> torch.Tensor:  # noqa: ANN001
        seed = _draw_seed()
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
