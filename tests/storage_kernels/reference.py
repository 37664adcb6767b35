"""Pure NumPy/Python twins of the native kernels, and the tiny hand-drawn graph their tests share.

The sampler twin reimplements the kernel's counter-based RNG (storage_kernels/_native/rng.h) and its
selection algorithm (Floyd, picks emitted in CSR order), so sampled blocks compare exactly.

Tiny graph (undirected, stored symmetrised; row v lists v's neighbours in ascending order)::

    0 --- 1
     \\   /
       2 --- 3
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

TINY_INDPTR = np.array([0, 2, 4, 7, 8], dtype=np.int64)
TINY_INDICES = np.array([1, 2, 0, 2, 0, 1, 3, 2], dtype=np.int64)
TINY_EDGES = np.array([[0, 1], [0, 2], [1, 2], [2, 3]], dtype=np.int64)  # each undirected edge once

# ---- counter-based RNG (mirror of rng.h) -----------------------------------------------------------------

MASK64 = (1 << 64) - 1
G0, G1, G2 = 0x9E3779B97F4A7C15, 0xD1B54A32D192ED03, 0x8CB92BA72F3D8DD7


def mix64(z: int) -> int:
    z &= MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def hop_key(seed: int, hop: int) -> int:
    return mix64(mix64(seed + G0) ^ ((hop + G1) & MASK64))


def stream_key(key_of_hop: int, node: int) -> int:
    return mix64(key_of_hop ^ ((node + G2) & MASK64))


def draw(key: int, r: int) -> int:
    return mix64(key + (r + 1) * G0)


def below(x: int, n: int) -> int:
    return (x * n) >> 64


def floyd_positions(key: int, degree: int, k: int) -> list[int]:
    """k distinct positions of [0, degree) by Floyd's algorithm on stream `key`, ascending."""
    chosen: set[int] = set()
    for r, j in enumerate(range(degree - k, degree)):
        t = below(draw(key, r), j + 1)
        chosen.add(j if t in chosen else t)
    return sorted(chosen)


# ---- CSR -------------------------------------------------------------------------------------------------


def csr_count_ref(src: np.ndarray, num_nodes: int) -> np.ndarray:
    return np.bincount(src, minlength=num_nodes).astype(np.int64)


def build_csr_ref(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows in input order within each source node (a stable sort by source)."""
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(csr_count_ref(src, num_nodes), out=indptr[1:])
    return indptr, dst[np.argsort(src, kind="stable")].astype(np.int64)


def symmetrise(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([edges[:, 0], edges[:, 1]]), np.concatenate([edges[:, 1], edges[:, 0]])


def random_csr(num_nodes: int, num_edges: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random directed multigraph-free CSR with sorted rows (self loops allowed)."""
    src = rng.integers(0, num_nodes, num_edges)
    dst = rng.integers(0, num_nodes, num_edges)
    key = np.unique(src * num_nodes + dst)
    src, dst = key // num_nodes, key % num_nodes
    return build_csr_ref(src, dst, num_nodes)


# ---- sampling --------------------------------------------------------------------------------------------


def sample_blocks_ref(indptr, indices, seeds, fanouts, seed: int):
    """(nodes, hop_counts, indptrs, cols) exactly as the kernel produces them."""
    seed &= MASK64
    position: dict[int, int] = {}
    nodes: list[int] = []
    for b, s in enumerate(int(x) for x in seeds):
        if s in position:
            raise ValueError(f"duplicate seed {s} at {b}")
        position[s] = len(nodes)
        nodes.append(s)
    hop_counts = [len(nodes)]
    indptrs, cols = [], []
    for h, fanout in enumerate(int(f) for f in fanouts):
        key_h = hop_key(seed, h)
        num_dst = len(nodes)
        ptr, col = [0], []
        sampled = []
        for v in nodes[:num_dst]:
            start, degree = int(indptr[v]), int(indptr[v + 1] - indptr[v])
            if fanout < 0 or fanout >= degree:
                picks = range(degree)
            else:
                picks = floyd_positions(stream_key(key_h, v), degree, fanout)
            sampled.extend(int(indices[start + p]) for p in picks)
            ptr.append(len(sampled))
        for u in sampled:  # relabel after the hop, in first-seen order
            if u not in position:
                position[u] = len(nodes)
                nodes.append(u)
            col.append(position[u])
        hop_counts.append(len(nodes))
        indptrs.append(np.array(ptr, dtype=np.int64))
        cols.append(np.array(col, dtype=np.int64))
    return np.array(nodes, dtype=np.int64), np.array(hop_counts, dtype=np.int64), indptrs, cols


# ---- gathers and reads -----------------------------------------------------------------------------------


def gather_rows_ref(src: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return src[idx]


def pread_ranges_ref(path: Path, offsets, lengths) -> list[bytes]:
    data = Path(path).read_bytes()
    return [data[o : o + n] for o, n in zip(offsets, lengths, strict=True)]


# ---- packing ---------------------------------------------------------------------------------------------


def pack_batches_ref(features: np.ndarray, batch_ids, chunk_align: int = 4096):
    """(file bytes, chunk_offsets, chunk_rows) of the packed file."""
    row_bytes = features.shape[1] * 4
    rows = np.array([len(ids) for ids in batch_ids], dtype=np.int64)
    offsets, pos = [], 0
    for n in rows:
        offsets.append(pos)
        pos += -(-int(n) * row_bytes // chunk_align) * chunk_align
    data = bytearray(pos)
    for off, ids in zip(offsets, batch_ids, strict=True):
        chunk = np.ascontiguousarray(features[np.asarray(ids, dtype=np.int64)], dtype=np.float32).tobytes()
        data[off : off + len(chunk)] = chunk
    return bytes(data), np.array(offsets, dtype=np.int64), rows
