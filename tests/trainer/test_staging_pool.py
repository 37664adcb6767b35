"""StagingPool: a block is reused only once nothing holds it (tensor, view, numpy view, autograd record), the
pool stays within ``max_blocks`` and never waits, and a CPU source's batches never share memory while alive."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.features import MemoryTier, TieredSource
from trainer.features.staging import StagingPool


def _block_of(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def test_a_block_is_reused_only_after_its_tensor_is_gone() -> None:
    pool = StagingPool(max_blocks=2)
    a = pool.take(10, 4)
    assert tuple(a.shape) == (10, 4) and a.dtype == torch.float32 and a.is_contiguous()
    ptr = _block_of(a)
    b = pool.take(10, 4)  # a is alive: another block
    assert _block_of(b) != ptr and pool.num_blocks == 2
    del a
    c = pool.take(8, 4)  # a's block is free and large enough
    assert _block_of(c) == ptr and pool.reused == 1 and pool.allocated == 2


@pytest.mark.parametrize("holder", ["view", "numpy", "autograd"])
def test_whatever_still_reads_the_rows_keeps_the_block(holder: str) -> None:
    pool = StagingPool(max_blocks=1)
    x = pool.take(6, 3)
    x.fill_(1.0)
    ptr = _block_of(x)
    if holder == "view":
        keep = x[2:]
    elif holder == "numpy":
        keep = x.numpy()[::2]
    else:  # the product's backward needs x: autograd holds it
        keep = (x * torch.ones(3, requires_grad=True)).sum()
    del x
    other = pool.take(6, 3)  # the only block is still in use: a fresh one, not kept
    assert _block_of(other) != ptr and pool.num_blocks == 1
    other.fill_(2.0)
    if holder == "autograd":
        keep.backward()
    else:
        assert float(np.asarray(keep).min()) == 1.0  # untouched by the other batch
    del keep, other
    assert _block_of(pool.take(6, 3)) == ptr  # now free


def test_the_pool_never_waits_and_stays_within_max_blocks() -> None:
    pool = StagingPool(max_blocks=2)
    held = [pool.take(5, 2) for _ in range(5)]  # all alive: 2 kept, 3 allocated unkept
    assert len({_block_of(t) for t in held}) == 5 and pool.num_blocks == 2 and pool.allocated == 5
    del held
    big = pool.take(100, 2)  # the free blocks are too small: one is replaced by a larger block
    assert pool.num_blocks == 2 and big.numel() == 200
    ptr = _block_of(big)
    del big
    assert _block_of(pool.take(90, 2)) == ptr  # the larger block serves smaller batches too
    assert tuple(pool.take(0, 2).shape) == (0, 2)
    with pytest.raises(ValueError, match=r"'max_blocks' expected >= 0 \(got -1\)"):
        StagingPool(-1)


class B:
    def __init__(self, batch: int, nodes: list[int]) -> None:
        self.batch, self.nodes = batch, np.array(nodes, dtype=np.int64)


def test_a_cpu_source_reuses_blocks_of_dropped_batches_only() -> None:
    rows = np.arange(200 * 8, dtype=np.float32).reshape(200, 8)
    rng = np.random.default_rng(0)
    with TieredSource(MemoryTier(rows)) as source:
        kept = []
        for i in range(12):  # more batches alive than the pool keeps blocks
            nodes = rng.integers(0, 200, 30 + i).tolist()
            kept.append((nodes, source.load(B(i, nodes))))
        for nodes, x in kept:  # no later batch wrote into an earlier, still-held one
            assert torch.equal(x, torch.from_numpy(rows[nodes]))
        ptrs = {_block_of(x) for _, x in kept}
        assert len(ptrs) == len(kept)
        del kept, x
        assert source.staging_pool.reused == 0
        x = source.load(B(99, [3, 1]))  # every batch dropped: a kept block serves it
        assert torch.equal(x, torch.from_numpy(rows[[3, 1]]))
        assert _block_of(x) in ptrs and source.staging_pool.reused == 1
