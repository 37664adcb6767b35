"""The one boundary between Python and the native storage kernels (``storage_kernels._native``).

Each wrapper has the name and argument order of its C kernel (see docs/CONTRACTS.md), calls it with keyword
arguments (the parameter names of ``_native.pyi``), normalises what it safely can (small index arrays to
contiguous int64, ``num_threads=0`` = all cores) and leaves the checks that need the data (ranges, alignment,
sortedness) to the kernel, which raises ``ValueError`` / ``IndexError`` / ``OSError`` naming the offending
position. Output arrays are never converted: they must
already be writable, C-contiguous and of the right dtype, or the kernel refuses them.

Two drivers are built on the kernels: :func:`build_csr` (two-pass CSR construction with bounded memory)
and :func:`pack_batches` (DiskGNN batched packing of a feature file into per-batch aligned chunks).
The rest of Strata imports from here, never from ``_native`` nor from the submodules.

The wrappers live in one module per kernel family, mirroring the C folders of ``storage_kernels/_native/``
(``_native/kernels.h`` lists them): :mod:`.io`, :mod:`.graph`, :mod:`.reorder`, :mod:`.partition`,
:mod:`.cache`, :mod:`.nn`; ``_common`` holds the ``_native`` import and the argument normalisation they share.
This package re-exports every public name, so ``kernels.f(...)`` and ``from storage_kernels.kernels import f``
work as before. (A test that monkeypatches ``kernels.f`` reaches callers that look ``f`` up through this
package at call time; a wrapper calling another wrapper imports it from the defining submodule.)
"""

from __future__ import annotations

from storage_kernels.kernels._common import DIRECT_ALIGN
from storage_kernels.kernels.cache import (
    Changesets,
    WindowSchedule,
    belady_changesets,
    cache_update,
    count_hits,
    rows_in_blocks,
    window_schedule,
    window_split,
    window_update,
)
from storage_kernels.kernels.graph import EdgeChunks as EdgeChunks  # public but outside __all__, as before
from storage_kernels.kernels.graph import (
    PrunedBlocks,
    SampledBlocks,
    build_csr,
    csr_count,
    csr_dedupe,
    csr_place,
    feistel_walk,
    filtered_ranks,
    prefetch_rows,
    prune_blocks,
    sample_blocks,
    sample_dense,
)
from storage_kernels.kernels.io import DISABLE_IO_URING_ENV as DISABLE_IO_URING_ENV  # public, outside __all__
from storage_kernels.kernels.io import (
    URING_QUEUE_DEPTH,
    TierGroups,
    aligned_empty,
    blocks_for_rows,
    close_fd,
    count_blocks,
    gather_rows,
    gather_rows_at,
    gather_rows_at_into,
    gather_rows_into,
    io_uring_available,
    minhash_signatures,
    open_direct,
    pack_batches,
    pack_partition,
    place_rows_at,
    pread_ranges,
    split_by_code,
    uring_read_ranges,
)
from storage_kernels.kernels.nn import (
    csr_sum,
    csr_sum_backward,
    dropout,
    dropout_backward,
    gat_attend,
    gat_attend_backward,
)
from storage_kernels.kernels.partition import cluster_pass, csr_aggregate, fennel_pass, grem_pass, refine_pass
from storage_kernels.kernels.reorder import (
    bucket_rows,
    degree_order,
    label_propagation,
    place_rows,
    rabbit_order,
    relabel_ids,
)

__all__ = [
    "DIRECT_ALIGN",
    "Changesets",
    "PrunedBlocks",
    "SampledBlocks",
    "aligned_empty",
    "belady_changesets",
    "window_schedule",
    "WindowSchedule",
    "rows_in_blocks",
    "window_split",
    "window_update",
    "bucket_rows",
    "degree_order",
    "build_csr",
    "cache_update",
    "close_fd",
    "count_hits",
    "count_blocks",
    "cluster_pass",
    "csr_aggregate",
    "csr_count",
    "csr_dedupe",
    "csr_place",
    "feistel_walk",
    "csr_sum",
    "csr_sum_backward",
    "dropout",
    "dropout_backward",
    "fennel_pass",
    "filtered_ranks",
    "gat_attend",
    "gat_attend_backward",
    "gather_rows",
    "gather_rows_at",
    "gather_rows_at_into",
    "gather_rows_into",
    "grem_pass",
    "io_uring_available",
    "label_propagation",
    "minhash_signatures",
    "open_direct",
    "pack_batches",
    "pack_partition",
    "place_rows",
    "place_rows_at",
    "pread_ranges",
    "prune_blocks",
    "rabbit_order",
    "refine_pass",
    "relabel_ids",
    "prefetch_rows",
    "sample_blocks",
    "sample_dense",
    "split_by_code",
    "blocks_for_rows",
    "TierGroups",
    "URING_QUEUE_DEPTH",
    "uring_read_ranges",
]
