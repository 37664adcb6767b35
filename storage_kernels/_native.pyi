"""Type stubs of the C extension storage_kernels._native (import storage_kernels.kernels instead)."""

import numpy as np
import numpy.typing as npt

DIRECT_ALIGN: int

def csr_count(src: npt.NDArray[np.int64], counts: npt.NDArray[np.int64]) -> None: ...
def csr_place(
    src: npt.NDArray[np.int64],
    dst: npt.NDArray[np.int64],
    cursor: npt.NDArray[np.int64],
    indices: npt.NDArray[np.int64],
) -> None: ...
def sample_blocks(
    indptr: npt.NDArray[np.int64],
    indices: npt.NDArray[np.int64],
    seeds: npt.NDArray[np.int64],
    fanouts: npt.NDArray[np.int64],
    seed: int,
    num_threads: int = 0,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], list[npt.NDArray[np.int64]], list[npt.NDArray[np.int64]]]: ...
def gather_rows(src: np.ndarray, idx: npt.NDArray[np.int64], out: np.ndarray, num_threads: int = 0) -> None: ...
def open_direct(path: str, write: bool = False) -> tuple[int, bool]: ...
def close_fd(fd: int) -> None: ...
def pread_ranges(
    fd: int,
    offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    out: npt.NDArray[np.uint8],
    out_offsets: npt.NDArray[np.int64],
    direct: bool,
    num_threads: int = 0,
) -> int: ...
def aligned_empty(nbytes: int, alignment: int = 4096) -> npt.NDArray[np.uint8]: ...
def pack_partition(
    features: npt.NDArray[np.float32],
    row_start: int,
    ids: npt.NDArray[np.int64],
    batch_ptr: npt.NDArray[np.int64],
    cursor: npt.NDArray[np.int64],
    fd: int,
    chunk_offsets: npt.NDArray[np.int64],
    num_threads: int = 0,
) -> int: ...
def _set_dense_map_limit(num_nodes: int, /) -> int: ...

# ---- reordering (permute.c, community.c) ----
def relabel_ids(
    ids: npt.NDArray[np.int64], inverse: npt.NDArray[np.int64], out: npt.NDArray[np.int64], num_threads: int = 0
) -> None: ...
def bucket_rows(
    rows: np.ndarray,
    keys: npt.NDArray[np.int64],
    bounds: npt.NDArray[np.int64],
    out_rows: np.ndarray,
    out_keys: npt.NDArray[np.int64],
    counts: npt.NDArray[np.int64],
    num_threads: int = 0,
) -> None: ...
def place_rows(rows: np.ndarray, pos: npt.NDArray[np.int64], out: np.ndarray, num_threads: int = 0) -> None: ...
def label_propagation(
    indptr: npt.NDArray[np.int64], indices: npt.NDArray[np.int64], iterations: int, seed: int, num_threads: int = 0
) -> tuple[npt.NDArray[np.int64], int]: ...

# ---- partitioning kernels (partition.c) ----
def fennel_pass(
    indptr: npt.NDArray[np.int64],
    indices: npt.NDArray[np.int64],
    nodes: npt.NDArray[np.int64],
    labels: npt.NDArray[np.int32],
    sizes: npt.NDArray[np.int64],
    train_sizes: npt.NDArray[np.int64],
    is_train: npt.NDArray[np.uint8],
    capacity: npt.NDArray[np.int64],
    weight: npt.NDArray[np.float64],
    label_base: int,
    alpha: float,
    gamma: float,
    train_penalty: float,
    train_norm: float,
    bloom: npt.NDArray[np.uint8] | None = None,
    bloom_seed: int = 0,
    block_nodes: int = 4096,
    restream: bool = False,
    num_threads: int = 0,
) -> None: ...
def grem_pass(
    indptr: npt.NDArray[np.int64],
    indices: npt.NDArray[np.int64],
    nodes: npt.NDArray[np.int64],
    labels: npt.NDArray[np.int32],
    pref: npt.NDArray[np.float32],
    sizes: npt.NDArray[np.int64],
    capacity: npt.NDArray[np.int64],
    label_a: int,
    label_b: int,
) -> int: ...
