"""StagingPool: a block is reused only once its batch is done (its lease released), never while a tensor of it
(view, numpy view, autograd record) is in use by the step; the pool stays within ``max_blocks`` and never waits,
and a CPU source's batches never share memory until they are done."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.features import MemoryTier, TieredSource
from trainer.features.staging import StagingPool


def _block_of(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def test_a_block_is_reused_only_after_its_lease_is_released() -> None:
    pool = StagingPool(max_blocks=2)
    a = pool.take(10, 4)
    assert tuple(a.tensor.shape) == (10, 4) and a.tensor.dtype == torch.float32 and a.tensor.is_contiguous()
    ptr = _block_of(a.tensor)
    b = pool.take(10, 4)  # a is lent: another block
    assert _block_of(b.tensor) != ptr and pool.num_blocks == 2
    a.release()
    c = pool.take(8, 4)  # a's block is free and large enough
    assert _block_of(c.tensor) == ptr and pool.reused == 1 and pool.allocated == 2


@pytest.mark.parametrize("holder", ["view", "numpy", "autograd"])
def test_whatever_still_reads_the_rows_keeps_the_block(holder: str) -> None:
    pool = StagingPool(max_blocks=1)
    lease = pool.take(6, 3)
    x = lease.tensor
    x.fill_(1.0)
    ptr = _block_of(x)
    if holder == "view":
        keep = x[2:]
    elif holder == "numpy":
        keep = x.numpy()[::2]
    else:  # the product's backward needs x: autograd holds it
        keep = (x * torch.ones(3, requires_grad=True)).sum()
    del x
    other = pool.take(6, 3)  # the only block is still lent (its step is not done): a fresh one, not kept
    assert _block_of(other.tensor) != ptr and pool.num_blocks == 1
    other.tensor.fill_(2.0)
    if holder == "autograd":
        keep.backward()
    else:
        assert float(np.asarray(keep).min()) == 1.0  # untouched by the other batch
    del keep
    lease.release()  # the step is done
    other.release()  # not kept: nothing to give back
    assert _block_of(pool.take(6, 3).tensor) == ptr  # now free


def test_the_pool_never_waits_and_stays_within_max_blocks() -> None:
    pool = StagingPool(max_blocks=2)
    held = [pool.take(5, 2) for _ in range(5)]  # all lent: 2 kept, 3 allocated unkept
    assert len({_block_of(t.tensor) for t in held}) == 5 and pool.num_blocks == 2 and pool.allocated == 5
    for lease in held:
        lease.release()
    big = pool.take(100, 2)  # the free blocks are too small: one is replaced by a larger block
    assert pool.num_blocks == 2 and big.tensor.numel() == 200
    ptr = _block_of(big.tensor)
    big.release()
    assert _block_of(pool.take(90, 2).tensor) == ptr  # the larger block serves smaller batches too
    assert tuple(pool.take(0, 2).tensor.shape) == (0, 2)
    with pytest.raises(ValueError, match=r"'max_blocks' expected >= 0 \(got -1\)"):
        StagingPool(-1)


def test_a_kept_block_leaves_the_pool_and_a_lease_settles_once() -> None:
    pool = StagingPool(max_blocks=1)
    a = pool.take(4, 2)
    a.keep()  # the holder keeps it for good: the pool may keep another in its place
    assert pool.num_blocks == 0 and pool.lent == 0
    a.release()  # settled already: nothing happens
    b = pool.take(4, 2)
    assert _block_of(b.tensor) != _block_of(a.tensor) and pool.num_blocks == 1 and pool.lent == 1
    b.release()
    b.release()
    assert pool.num_blocks == 1 and pool.lent == 0


class B:
    def __init__(self, batch: int, nodes: list[int]) -> None:
        self.batch, self.nodes = batch, np.array(nodes, dtype=np.int64)


def test_a_cpu_source_reuses_blocks_of_done_batches_only() -> None:
    rows = np.arange(200 * 8, dtype=np.float32).reshape(200, 8)
    rng = np.random.default_rng(0)
    with TieredSource(MemoryTier(rows)) as source:
        kept = []
        for i in range(12):  # more batches not done than the pool keeps blocks
            nodes = rng.integers(0, 200, 30 + i).tolist()
            read = source.read(B(i, nodes))
            kept.append((nodes, source.assemble(read), read))
        for nodes, x, _ in kept:  # no later batch wrote into an earlier one not done
            assert torch.equal(x, torch.from_numpy(rows[nodes]))
        ptrs = {_block_of(x) for _, x, _ in kept}
        assert len(ptrs) == len(kept)
        assert source.staging_pool.reused == 0
        for _, _, read in kept:  # every batch done
            source.release(read)
        del kept, x
        read = source.read(B(99, [3, 1]))  # a kept block serves it
        x = source.assemble(read)
        assert torch.equal(x, torch.from_numpy(rows[[3, 1]]))
        assert _block_of(x) in ptrs and source.staging_pool.reused == 1


def test_a_loaded_batch_is_the_callers_for_good() -> None:
    """``load`` (no loader, no release) keeps its block out of the pool: a later batch never writes into it."""
    rows = np.arange(50 * 4, dtype=np.float32).reshape(50, 4)
    with TieredSource(MemoryTier(rows)) as source:
        loaded = [source.load(B(i, [i, i + 1])) for i in range(10)]
        for i, x in enumerate(loaded):
            assert torch.equal(x, torch.from_numpy(rows[[i, i + 1]]))
        assert source.staging_pool.reused == 0 and source.staging_pool.lent == 0


def test_the_pool_keeps_no_more_than_max_bytes_of_blocks() -> None:
    pool = StagingPool(max_blocks=8, max_bytes=1000)  # room for two blocks of 80 floats x 1.25 (400 bytes)
    leases = [pool.take(10, 8) for _ in range(3)]
    assert pool.num_blocks == 2 and pool.kept_bytes == 2 * 100 * 4  # the third is the batch's own
    for lease in leases:
        lease.release()
    assert pool.num_blocks == 2 and pool.lent == 0 and pool.kept_bytes <= pool.max_bytes
    wide = pool.take(40, 8)  # wider than every kept block and than the budget: not kept
    wide.release()
    assert pool.num_blocks == 2 and pool.kept_bytes == 2 * 100 * 4
    with pytest.raises(ValueError, match=r"'max_bytes' expected >= 0 \(got -1\)"):
        StagingPool(max_bytes=-1)
