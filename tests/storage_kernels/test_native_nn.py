"""nn/aggregate.c (csr_sum, csr_sum_backward) and nn/dropout.c: the NumPy references bit for bit, torch's
scatter_reduce / index_add forms bit for bit, thread independence, and bad input rejected before any write."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from storage_kernels import kernels
from tests.storage_kernels.reference import csr_sum_backward_ref, csr_sum_ref, dropout_ref


def random_block(num_dst: int, num_src: int, max_degree: int, dim: int, seed: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A block's CSR with empty rows, repeated and self-referencing sources, and float32 source rows."""
    rng = np.random.default_rng(seed)
    degree = rng.integers(0, max_degree + 1, num_dst)
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    cols = rng.integers(0, num_src, int(indptr[-1])).astype(np.int64)
    return indptr, cols, rng.standard_normal((num_src, dim)).astype(np.float32)


@pytest.mark.parametrize("mean", [False, True])
@pytest.mark.parametrize(("num_dst", "num_src", "max_degree", "dim"), [(1, 1, 1, 1), (7, 5, 4, 3), (60, 90, 12, 33)])
def test_csr_sum_and_backward_equal_the_reference(mean: bool, num_dst: int, num_src: int, max_degree: int,
                                                  dim: int) -> None:
    indptr, cols, src = random_block(num_dst, num_src, max_degree, dim, seed=num_dst + dim)
    out = kernels.csr_sum(indptr, cols, src, mean=mean)
    assert np.array_equal(out, csr_sum_ref(indptr, cols, src, mean))
    grad_out = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
    grad_src = kernels.csr_sum_backward(indptr, cols, grad_out, np.zeros_like(src), mean=mean)
    assert np.array_equal(grad_src, csr_sum_backward_ref(indptr, cols, grad_out, num_src, mean))


def test_csr_mean_is_torchs_scatter_form_bit_for_bit() -> None:
    # what trainer.models computed before: gather, scatter_reduce(sum) into zeros, divide by the clamped degree;
    # and its autograd backward (gather of the divided gradient, index_add into the sources)
    indptr, cols, src = random_block(2000, 3000, 15, 128, seed=3)
    degree = torch.from_numpy(np.diff(indptr))
    edge_dst = torch.repeat_interleave(degree)
    h = torch.from_numpy(src).requires_grad_(True)
    msg = h.index_select(0, torch.from_numpy(cols))
    total = torch.zeros(2000, 128).scatter_reduce(0, edge_dst.unsqueeze(1).expand_as(msg), msg, reduce="sum",
                                                  include_self=True)
    want = total / degree.to(torch.float32).clamp(min=1.0).unsqueeze(1)
    grad_out = torch.randn(2000, 128, generator=torch.Generator().manual_seed(0))
    want.backward(grad_out)
    got = kernels.csr_sum(indptr, cols, src, mean=True)
    assert np.array_equal(got, want.detach().numpy())
    grad = kernels.csr_sum_backward(indptr, cols, grad_out.numpy(), np.zeros_like(src), mean=True)
    assert np.array_equal(grad, h.grad.numpy())


def test_results_do_not_depend_on_threads() -> None:
    indptr, cols, src = random_block(5000, 4000, 20, 64, seed=5)
    grad_out = np.random.default_rng(2).standard_normal((5000, 64)).astype(np.float32)
    runs = [(kernels.csr_sum(indptr, cols, src, mean=True, num_threads=t),
             kernels.csr_sum_backward(indptr, cols, grad_out, np.zeros_like(src), mean=True, num_threads=t))
            for t in (1, 2, 3, 8)]
    for out, grad in runs[1:]:
        assert np.array_equal(out, runs[0][0]) and np.array_equal(grad, runs[0][1])


def test_backward_accumulates_into_grad_src() -> None:
    indptr, cols = np.array([0, 2, 3]), np.array([1, 1, 0])
    grad = np.ones((2, 2), dtype=np.float32)
    kernels.csr_sum_backward(indptr, cols, np.array([[1, 2], [3, 4]], dtype=np.float32), grad)
    assert grad.tolist() == [[4, 5], [3, 5]]


def test_bad_csr_is_rejected_before_writing() -> None:
    src = np.ones((3, 2), dtype=np.float32)
    out = np.full((2, 2), 7.0, dtype=np.float32)
    with pytest.raises(IndexError, match=r"csr_sum: 'cols' expected source rows in \[0, 3\) \(got cols\[2\]=3\)"):
        kernels.csr_sum(np.array([0, 1, 3]), np.array([0, 2, 3]), src, out)
    with pytest.raises(ValueError, match=r"'indptr' expected non-decreasing values \(got indptr\[1\]=-1"):
        kernels.csr_sum(np.array([0, -1, 0]), np.array([], dtype=np.int64), src, out)
    with pytest.raises(ValueError, match=r"'indptr' expected to start at 0 and end at len\(cols\)=1"):
        kernels.csr_sum(np.array([0, 1, 2]), np.array([0]), src, out)
    with pytest.raises(ValueError, match="'out' expected 2 rows, one per destination"):
        kernels.csr_sum(np.array([0, 1, 2]), np.array([0, 1]), src, np.zeros((3, 2), dtype=np.float32))
    with pytest.raises(ValueError, match="'out' expected 2 columns like 'src'"):
        kernels.csr_sum(np.array([0, 1, 2]), np.array([0, 1]), src, np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="'src'"):
        kernels.csr_sum(np.array([0, 1, 2]), np.array([0, 1]), src.astype(np.float64), out)
    assert (out == 7.0).all()
    grad_src = np.zeros((3, 2), dtype=np.float32)
    with pytest.raises(IndexError, match="csr_sum_backward: 'cols'"):
        kernels.csr_sum_backward(np.array([0, 1, 2]), np.array([0, 5]), np.ones((2, 2), np.float32), grad_src)
    assert (grad_src == 0).all()


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_dropout_equals_the_reference(p: float) -> None:
    x = np.random.default_rng(4).standard_normal((37, 11)).astype(np.float32)
    out, mask = kernels.dropout(x, p, seed=2**63 + 12345)
    want_out, want_mask = dropout_ref(x, p, seed=2**63 + 12345)
    assert np.array_equal(mask, want_mask) and np.array_equal(out, want_out)


def test_dropout_keeps_one_minus_p_and_scales_the_kept() -> None:
    x = np.ones(1 << 20, dtype=np.float32)
    out, mask = kernels.dropout(x, 0.3, seed=7)
    assert abs(mask.mean() - 0.7) < 0.003  # 1M Bernoulli draws: sd 0.00046
    assert np.array_equal(out[mask == 1], np.full(int(mask.sum()), np.float32(1 / 0.7)))
    assert (out[mask == 0] == 0).all()
    again, mask_again = kernels.dropout(x, 0.3, seed=7, num_threads=1)
    other, mask_other = kernels.dropout(x, 0.3, seed=8)
    assert np.array_equal(mask, mask_again) and np.array_equal(out, again)  # a pure function of (seed, i)
    assert not np.array_equal(mask, mask_other)
    assert abs(float(np.corrcoef(mask[:-1], mask[1:])[0, 1])) < 0.01  # neighbours independent


def test_dropout_in_place_and_bad_input() -> None:
    x = np.arange(8, dtype=np.float32)
    out, mask = kernels.dropout(x, 0.5, seed=1, out=x)
    assert out is x and np.array_equal(x[mask == 0], np.zeros(int((mask == 0).sum()), np.float32))
    with pytest.raises(ValueError, match=r"dropout: 'p' expected a probability in \[0, 1\] \(got 1.5\)"):
        kernels.dropout(x, 1.5, seed=1)
    with pytest.raises(ValueError, match="'mask' expected length 8"):
        kernels.dropout(x, 0.5, seed=1, mask=np.zeros(7, dtype=np.uint8))


def test_dropout_backward_is_grad_times_mask_times_scale() -> None:
    rng = np.random.default_rng(6)
    grad = rng.standard_normal((50, 9)).astype(np.float32)
    mask = rng.integers(0, 2, (50, 9)).astype(np.uint8)
    out = kernels.dropout_backward(grad, mask, 0.25)
    assert np.array_equal(out, grad * (mask.astype(np.float32) * np.float32(1 / 0.75)))
    assert kernels.dropout_backward(grad, mask, 0.25, out=grad) is grad and np.array_equal(grad, out)
    with pytest.raises(ValueError, match="dropout_backward: 'mask' expected length 450"):
        kernels.dropout_backward(grad, mask[:-1], 0.25)


def gat_torch(z: torch.Tensor, ss: torch.Tensor, sd: torch.Tensor, indptr: np.ndarray, cols: np.ndarray,
              dst_pos: np.ndarray, keep_scale: torch.Tensor | None, slope: float = 0.2) -> torch.Tensor:
    """The torch form of GATConv's aggregation (trainer/gat.py), attention dropout as a given multiplier."""
    degree = torch.from_numpy(np.diff(indptr))
    edge_dst = torch.repeat_interleave(degree)
    src = torch.cat([torch.from_numpy(cols), torch.from_numpy(dst_pos)])
    dst = torch.cat([edge_dst, torch.arange(len(dst_pos))])
    scores = torch.nn.functional.leaky_relu(ss.index_select(0, src) + sd.index_select(0, dst), slope)
    index = dst.unsqueeze(1).expand_as(scores)
    peak = torch.full_like(sd, float("-inf")).scatter_reduce(0, index, scores.detach(), reduce="amax")
    weight = torch.exp(scores - peak.index_select(0, dst))
    alpha = weight / torch.zeros_like(sd).scatter_reduce(0, index, weight, reduce="sum").index_select(0, dst)
    if keep_scale is not None:
        alpha = alpha * keep_scale
    msg = z.index_select(0, src) * alpha.unsqueeze(-1)
    flat = msg.reshape(msg.shape[0], -1)
    out = torch.zeros(len(dst_pos), flat.shape[1]).scatter_reduce(0, dst.unsqueeze(1).expand_as(flat), flat,
                                                                  reduce="sum")
    return out.reshape(len(dst_pos), *z.shape[1:])


@pytest.mark.parametrize("p", [0.0, 0.4])
@pytest.mark.parametrize(("heads", "channels"), [(1, 3), (4, 8)])
def test_gat_attend_and_backward_equal_the_torch_form(p: float, heads: int, channels: int) -> None:
    indptr, cols, _ = random_block(70, 120, 9, 1, seed=heads + channels)
    dst_pos = np.random.default_rng(8).permutation(120)[:70].astype(np.int64)  # loops from anywhere, no repeats
    g = torch.Generator().manual_seed(heads)
    z = torch.randn(120, heads, channels, generator=g, requires_grad=True)
    ss = torch.randn(120, heads, generator=g, requires_grad=True)
    sd = torch.randn(70, heads, generator=g, requires_grad=True)
    grad_out = torch.randn(70, heads, channels, generator=g)
    out, alpha = kernels.gat_attend(z.detach().numpy(), ss.detach().numpy(), sd.detach().numpy(), indptr, cols,
                                    dst_pos, 0.2, p, seed=99)
    # the kernel's dropout mask is dropout()'s mask for the same seed over alpha's (E + D, H) elements
    _, mask = kernels.dropout(np.ones(alpha.shape, np.float32), p, seed=99)
    keep = torch.from_numpy(mask.astype(np.float32) * np.float32(1 / (1 - p))) if p else None
    want = gat_torch(z, ss, sd, indptr, cols, dst_pos, keep)
    assert np.allclose(out, want.detach().numpy(), rtol=1e-5, atol=1e-6)
    want.backward(grad_out)
    gz, gss, gsd = np.zeros((120, heads, channels), np.float32), np.zeros((120, heads), np.float32), \
        np.zeros((70, heads), np.float32)
    kernels.gat_attend_backward(z.detach().numpy(), ss.detach().numpy(), sd.detach().numpy(), indptr, cols,
                                dst_pos, alpha, grad_out.numpy(), gz, gss, gsd, 0.2, p, seed=99)
    for got, ref in ((gz, z.grad), (gss, ss.grad), (gsd, sd.grad)):
        assert np.allclose(got, ref.numpy(), rtol=1e-4, atol=1e-5)
    # threads split destinations (forward) and heads (backward): the same numbers with one thread
    out1, alpha1 = kernels.gat_attend(z.detach().numpy(), ss.detach().numpy(), sd.detach().numpy(), indptr, cols,
                                      dst_pos, 0.2, p, seed=99, num_threads=1)
    assert np.array_equal(out1, out) and np.array_equal(alpha1, alpha)


def test_gat_attend_rejects_bad_input_before_writing() -> None:
    z, ss, sd = np.ones((3, 2, 4), np.float32), np.ones((3, 2), np.float32), np.ones((2, 2), np.float32)
    out = np.full((2, 2, 4), 7.0, np.float32)
    with pytest.raises(IndexError, match="gat_attend: 'dst_pos' expected source rows in"):
        kernels.gat_attend(z, ss, sd, np.array([0, 1, 2]), np.array([0, 1]), np.array([0, 3]), out=out)
    with pytest.raises(IndexError, match="gat_attend: 'cols' expected source rows in"):
        kernels.gat_attend(z, ss, sd, np.array([0, 1, 2]), np.array([0, 5]), np.array([0, 1]), out=out)
    with pytest.raises(ValueError, match="'score_dst' expected size 2 in dimension 0"):
        kernels.gat_attend(z, ss, ss, np.array([0, 1, 2]), np.array([0, 1]), np.array([0, 1]), out=out)
    with pytest.raises(ValueError, match=r"'p' expected a probability in \[0, 1\) \(got 1\)"):
        kernels.gat_attend(z, ss, sd, np.array([0, 1, 2]), np.array([0, 1]), np.array([0, 1]), p=1.0, out=out)
    assert (out == 7.0).all()
