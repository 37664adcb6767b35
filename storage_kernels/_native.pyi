"""Type stubs of the C extension storage_kernels._native (import storage_kernels.kernels instead).

One group per kernel family, in the order of storage_kernels/_native/kernels.h. Parameter names, order, kinds
and defaults are those of the C functions (their kwlists and __text_signature__):
tests/storage_kernels/test_native_stubs.py fails when the two drift apart.
"""

from typing import TypeAlias

import numpy as np
import numpy.typing as npt

_Int64: TypeAlias = npt.NDArray[np.int64]
_Int32: TypeAlias = npt.NDArray[np.int32]
_UInt8: TypeAlias = npt.NDArray[np.uint8]

DIRECT_ALIGN: int  # bytes; equal to storage_kernels.arrays.DATA_ALIGN

# ---- io/: storage I/O (dio.c, uring.c, gather.c, pack.c, rows_at.c, gather_into.c, diskcache.c) ----
def open_direct(path: str, write: bool = False) -> tuple[int, bool]: ...
def close_fd(fd: int) -> None: ...
def pread_ranges(
    fd: int, offsets: _Int64, lengths: _Int64, out: _UInt8, out_offsets: _Int64, direct: bool, num_threads: int = 0
) -> int: ...
def aligned_empty(nbytes: int, alignment: int = 4096) -> _UInt8: ...
def uring_read_ranges(
    fd: int, offsets: _Int64, lengths: _Int64, out: _UInt8, out_offsets: _Int64, direct: bool, queue_depth: int = 64,
    merge: bool = True,
) -> tuple[int, int]: ...
def io_uring_available() -> tuple[bool, str]: ...
def gather_rows(src: np.ndarray, idx: _Int64, out: np.ndarray, num_threads: int = 0) -> None: ...
def pack_partition(
    features: npt.NDArray[np.float32], row_start: int, ids: _Int64, batch_ptr: _Int64, cursor: _Int64, fd: int,
    chunk_offsets: _Int64, num_threads: int = 0,
) -> int: ...
def place_rows_at(rows: np.ndarray, offsets: _Int64, out: _UInt8, num_threads: int = 0) -> None: ...
def gather_rows_at(src: _UInt8, offsets: _Int64, out: np.ndarray, num_threads: int = 0) -> None: ...
def gather_rows_into(src: np.ndarray, idx: _Int64, out: np.ndarray, pos: _Int64, num_threads: int = 0) -> None: ...
def gather_rows_at_into(src: _UInt8, offsets: _Int64, out: np.ndarray, pos: _Int64, num_threads: int = 0) -> None: ...
def minhash_signatures(
    items: _Int64, set_ptr: _Int64, out: npt.NDArray[np.uint64], seed: int, num_threads: int = 0
) -> None: ...
def count_blocks(slots: _Int64, set_ptr: _Int64, row_bytes: int, out: _Int64, num_threads: int = 0) -> None: ...

# ---- graph/: CSR construction and neighbour sampling (csr.c, sample.c) ----
def csr_count(src: _Int64, counts: _Int64) -> None: ...
def csr_place(src: _Int64, dst: _Int64, cursor: _Int64, indices: _Int64) -> None: ...
def sample_blocks(
    indptr: _Int64, indices: _Int64, seeds: _Int64, fanouts: _Int64, seed: int, num_threads: int = 0
) -> tuple[_Int64, _Int64, list[_Int64], list[_Int64]]: ...
def sample_dense(
    indptr: _Int64, indices: _Int64, seeds: _Int64, fanouts: _Int64, seed: int, num_threads: int = 0
) -> tuple[_Int64, _Int64, _Int64, _Int64]: ...
def _set_dense_map_limit(num_nodes: int, /) -> int: ...
def prune_blocks(
    hop_counts: _Int64, indptr: _Int64, cols: _Int64, pulled: _Int64, state: _UInt8,
    new_indptr: _Int64, new_cols: _Int64, new_hop_counts: _Int64, edge_counts: _Int64,
) -> None: ...
def filtered_ranks(
    scores: npt.NDArray[np.float32], targets: _Int64, sources: _Int64, indptr: _Int64, indices: _Int64,
    out: npt.NDArray[np.float64], num_threads: int = 0,
) -> None: ...

# ---- reorder/: node reordering (permute.c, community.c, rabbit.c) ----
def relabel_ids(ids: _Int64, inverse: _Int64, out: _Int64, num_threads: int = 0) -> None: ...
def bucket_rows(
    rows: np.ndarray, keys: _Int64, bounds: _Int64, out_rows: np.ndarray, out_keys: _Int64, counts: _Int64,
    num_threads: int = 0,
) -> None: ...
def place_rows(rows: np.ndarray, pos: _Int64, out: np.ndarray, num_threads: int = 0) -> None: ...
def label_propagation(
    indptr: _Int64, indices: _Int64, iterations: int, seed: int, num_threads: int = 0
) -> tuple[_Int64, int]: ...
def rabbit_order(indptr: _Int64, indices: _Int64, skip: _UInt8 | None = None) -> tuple[_Int64, int]: ...

# ---- partition/: graph partitioning (partition.c, multilevel.c) ----
def fennel_pass(
    indptr: _Int64, indices: _Int64, nodes: _Int64, labels: _Int32, sizes: _Int64, train_sizes: _Int64,
    is_train: _UInt8, capacity: _Int64, weight: npt.NDArray[np.float64], label_base: int, alpha: float,
    gamma: float, train_penalty: float, train_norm: float, bloom: _UInt8 | None = None, bloom_seed: int = 0,
    block_nodes: int = 4096, restream: bool = False, num_threads: int = 0, node_weight: _Int64 | None = None,
    edge_weight: _Int64 | None = None, train_weight: _Int64 | None = None,
) -> None: ...
def grem_pass(
    indptr: _Int64, indices: _Int64, nodes: _Int64, labels: _Int32, pref: npt.NDArray[np.float32], sizes: _Int64,
    capacity: _Int64, label_a: int, label_b: int, node_weight: _Int64 | None = None,
    edge_weight: _Int64 | None = None,
) -> int: ...
def cluster_pass(
    indptr: _Int64, indices: _Int64, nodes: _Int64, clusters: _Int64, cluster_weight: _Int64, max_weight: int,
    node_weight: _Int64 | None = None, edge_weight: _Int64 | None = None, visit: _Int64 | None = None,
) -> int: ...
def refine_pass(
    indptr: _Int64, indices: _Int64, nodes: _Int64, parts: _Int32, sizes: _Int64, capacity: _Int64,
    node_weight: _Int64 | None = None, edge_weight: _Int64 | None = None, train_weight: _Int64 | None = None,
    train_sizes: _Int64 | None = None, train_capacity: _Int64 | None = None, visit: _Int64 | None = None,
) -> int: ...
def csr_aggregate(indptr: _Int64, indices: _Int64, weights: _Int64) -> tuple[_Int64, int]: ...

# ---- cache/: feature-cache simulation and maintenance, Ginex (belady.c, update.c), segment window (window.c) ----
def belady_changesets(
    batch_ptr: _Int64, ids: _Int64, num_nodes: int, num_entries: int
) -> tuple[_Int64, _Int64, _Int64, _Int64, _Int64, _Int64]: ...
def cache_update(
    cache: np.ndarray, address_table: _Int64, batch_rows: np.ndarray, in_ids: _Int64, out_ids: _Int64,
    in_positions: _Int64, num_threads: int = 0,
) -> None: ...
def window_schedule(
    batch_ptr: _Int64, rows: _Int64, num_rows: int, row_bytes: int, buffer_rows: int
) -> tuple[_Int64, _Int64, _Int64, _Int64, _Int64, _Int64, _Int64, _Int64]: ...

# ---- nn/: training-time model operations on the CPU (aggregate.c, dropout.c) ----
def csr_sum(
    indptr: _Int64, cols: _Int64, src: npt.NDArray[np.float32], out: npt.NDArray[np.float32], mean: bool = False,
    num_threads: int = 0,
) -> None: ...
def csr_sum_backward(
    indptr: _Int64, cols: _Int64, grad_out: npt.NDArray[np.float32], grad_src: npt.NDArray[np.float32],
    mean: bool = False, num_threads: int = 0,
) -> None: ...
def dropout(
    x: npt.NDArray[np.float32], out: npt.NDArray[np.float32], mask: npt.NDArray[np.uint8], p: float, seed: int,
    num_threads: int = 0,
) -> None: ...
def dropout_backward(
    grad: npt.NDArray[np.float32], mask: npt.NDArray[np.uint8], p: float, out: npt.NDArray[np.float32],
    num_threads: int = 0,
) -> None: ...
def gat_attend(
    z: npt.NDArray[np.float32], score_src: npt.NDArray[np.float32], score_dst: npt.NDArray[np.float32],
    indptr: _Int64, cols: _Int64, dst_pos: _Int64, out: npt.NDArray[np.float32], alpha: npt.NDArray[np.float32],
    negative_slope: float, p: float, seed: int, num_threads: int = 0,
) -> None: ...
def gat_attend_backward(
    z: npt.NDArray[np.float32], score_src: npt.NDArray[np.float32], score_dst: npt.NDArray[np.float32],
    indptr: _Int64, cols: _Int64, dst_pos: _Int64, alpha: npt.NDArray[np.float32],
    grad_out: npt.NDArray[np.float32], grad_z: npt.NDArray[np.float32], grad_score_src: npt.NDArray[np.float32],
    grad_score_dst: npt.NDArray[np.float32], negative_slope: float, p: float, seed: int, num_threads: int = 0,
) -> None: ...
