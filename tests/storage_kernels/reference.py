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


def csr_dedupe_ref(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every row's neighbours sorted and without repeats (one lexsort over the block); ``indptr`` may start at
    any offset."""
    indptr = np.asarray(indptr, dtype=np.int64)
    counts = np.diff(indptr)
    rows = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    indices = np.asarray(indices, dtype=np.int64)[: int(indptr[-1] - indptr[0]) if len(indptr) else 0]
    order = np.lexsort((indices, rows))
    rows, cols = rows[order], indices[order]
    keep = np.ones(len(cols), dtype=bool)
    keep[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    out_ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=len(counts)), out=out_ptr[1:])
    return out_ptr, cols[keep]


def symmetrise(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([edges[:, 0], edges[:, 1]]), np.concatenate([edges[:, 1], edges[:, 0]])


def random_graph(n: int, deg: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetrised random multigraph (duplicate entries and self loops occur), rows sorted."""
    rng = np.random.default_rng(seed)
    m = n * deg // 2
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    s, d = np.concatenate([src, dst]), np.concatenate([dst, src])
    order = np.lexsort((d, s))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(s, minlength=n), out=indptr[1:])
    return indptr, d[order].astype(np.int64)


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


def sample_dense_ref(indptr, indices, seeds, fanouts, seed: int):
    """(nodes, hop_counts, indptr, cols) of the DENSE kernel: one CSR; hop h samples only the nodes new after
    hop h - 1 (stream ``(seed, h, v)``), appending their rows."""
    seed &= MASK64
    position: dict[int, int] = {}
    nodes: list[int] = []
    for b, s in enumerate(int(x) for x in seeds):
        if s in position:
            raise ValueError(f"duplicate seed {s} at {b}")
        position[s] = len(nodes)
        nodes.append(s)
    hop_counts = [len(nodes)]
    ptr, col = [0], []
    first = 0
    for h, fanout in enumerate(int(f) for f in fanouts):
        key_h = hop_key(seed, h)
        sampled = []
        for v in nodes[first:]:
            start, degree = int(indptr[v]), int(indptr[v + 1] - indptr[v])
            picks = range(degree) if fanout < 0 or fanout >= degree else floyd_positions(stream_key(key_h, v),
                                                                                         degree, fanout)
            sampled.extend(int(indices[start + p]) for p in picks)
            ptr.append(len(col) + len(sampled))
        first = len(nodes)
        for u in sampled:
            if u not in position:
                position[u] = len(nodes)
                nodes.append(u)
            col.append(position[u])
        hop_counts.append(len(nodes))
    return (np.array(nodes, dtype=np.int64), np.array(hop_counts, dtype=np.int64), np.array(ptr, dtype=np.int64),
            np.array(col, dtype=np.int64))


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


# ---- reordering: permutation and label propagation (twins of permute.c / community.c) --------------------


def relabel_ids_ref(ids: np.ndarray, inverse: np.ndarray) -> np.ndarray:
    return np.asarray(inverse)[np.asarray(ids)]


def bucket_rows_ref(rows: np.ndarray, keys: np.ndarray, bounds: np.ndarray):
    """Stable grouping of rows by bucket (bounds[b] <= key < bounds[b+1]): (out_rows, out_keys, bucket_ptr)."""
    bucket = np.searchsorted(bounds, keys, side="right") - 1
    order = np.argsort(bucket, kind="stable")
    ptr = np.zeros(len(bounds), dtype=np.int64)
    np.cumsum(np.bincount(bucket, minlength=len(bounds) - 1), out=ptr[1:])
    return rows[order], keys[order], ptr


def permute_csr_ref(indptr: np.ndarray, indices: np.ndarray, perm: np.ndarray):
    """The CSR of the graph relabelled so that new node i is old node perm[i] (neighbour order kept)."""
    n = len(indptr) - 1
    inverse = np.empty(n, dtype=np.int64)
    inverse[perm] = np.arange(n)
    rows = [inverse[indices[indptr[v]:indptr[v + 1]]] for v in perm]
    new_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=new_indptr[1:])
    new_indices = np.concatenate(rows).astype(np.int64) if rows else np.empty(0, dtype=np.int64)
    return new_indptr, new_indices


def label_propagation_ref(indptr: np.ndarray, indices: np.ndarray, iterations: int, seed: int = 0):
    """Synchronous label propagation, exactly the rule of community.c: (labels, rounds_that_changed)."""
    n = len(indptr) - 1
    key = mix64(seed + G0)
    labels = list(range(n))
    rounds = 0
    for _ in range(iterations):
        new = list(labels)
        changed = 0
        for v in range(n):
            nbrs = indices[indptr[v]:indptr[v + 1]]
            if len(nbrs) == 0:
                continue
            counts: dict[int, int] = {}
            for u in nbrs:
                counts[labels[int(u)]] = counts.get(labels[int(u)], 0) + 1
            top = max(counts.values())
            if counts.get(labels[v], 0) == top:
                continue
            new[v] = min((lab for lab, c in counts.items() if c == top), key=lambda lab: mix64(lab ^ key))
            changed += 1
        labels = new
        if changed == 0:
            break
        rounds += 1
    return np.array(labels, dtype=np.int64), rounds


def rabbit_order_ref(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, int]:
    """Rabbit-Order-style aggregation and dendrogram walk, exactly the rule of rabbit.c: (perm, communities)."""
    n, e = len(indptr) - 1, len(indices)
    degree = np.diff(indptr)
    dest = list(range(n))
    strength = [int(d) for d in degree]
    children: list[list[int]] = [[] for _ in range(n)]
    stored: dict[int, list[tuple[int, int]]] = {}
    visited = [False] * n

    def root(v: int) -> int:
        while dest[v] != v:
            v = dest[v]
        return v

    for u in sorted(range(n), key=lambda v: (int(degree[v]), v)):
        acc: dict[int, int] = {}
        pairs = [(int(x), 1) for x in indices[indptr[u]:indptr[u + 1]]]
        for c in children[u]:
            pairs += stored.pop(c, [])
        for target, weight in pairs:
            r = root(target)
            if r != u:
                acc[r] = acc.get(r, 0) + weight
        visited[u] = True
        scored = [(w * e - strength[u] * strength[r], -r) for r, w in acc.items()]
        if scored and max(scored)[0] > 0:
            best = -max(scored)[1]
            dest[u] = best
            strength[best] += strength[u]
            children[best].append(u)
            if not visited[best]:
                stored[u] = list(acc.items())
    roots = sorted((v for v in range(n) if dest[v] == v), key=lambda v: (-strength[v], v))
    perm: list[int] = []

    def walk(v: int) -> None:
        perm.append(v)
        for c in children[v]:
            walk(c)

    for r in roots:
        walk(r)
    return np.array(perm, dtype=np.int64), len(roots)


# ---- partitioning references (partition.c: fennel_pass, grem_pass) ----------------------------------------

BLOOM_HASHES = 3


def bloom_bits_ref(key: int, u: int, bits: int) -> list[int]:
    """Bit positions of node u in a filter of `bits` bits (double hashing, as partition.c)."""
    h1 = mix64(key ^ u)
    h2 = mix64(h1) | 1
    return [((h1 + r * h2) & MASK64) % bits for r in range(BLOOM_HASHES)]


def fennel_pass_ref(indptr, indices, nodes, labels, sizes, train_sizes, is_train, capacity, weight, label_base,
                    alpha, gamma, train_penalty, train_norm, bloom=None, bloom_seed=0, block_nodes=4096,
                    restream=False, node_weight=None, edge_weight=None, train_weight=None):
    """Plain-Python FENNEL pass with the kernel's rule; updates labels/sizes/train_sizes (and `bloom`, a bool
    array (p, bits)) in place. Block semantics: Bloom probes see the filters as of the block start; the
    other nodes of the block are counted from their current labels. `restream`: v leaves its part first.

    Weights (None = unweighted): node j adds w = node_weight[j] to its part (room: sizes[k] + w <= capacity[k],
    balance term times w), entry e adds edge_weight[e] to c_k (exact or Bloom), and t = train_weight[j]
    (default is_train[j]) replaces the 0/1 training flag (penalty times t, train_sizes += t)."""
    import math

    p = len(sizes)
    key = mix64(bloom_seed + G1)
    nodes = [int(v) for v in nodes]
    ag, g1 = alpha * gamma, gamma - 1.0
    for bs in range(0, len(nodes), block_nodes):
        be = min(bs + block_nodes, len(nodes))
        pos = {v: j for j, v in enumerate(nodes[bs:be], start=bs)}
        snap = None if bloom is None else bloom.copy()
        for j in range(bs, be):
            w = 1 if node_weight is None else int(node_weight[j])
            t = int(is_train[j]) if train_weight is None else int(train_weight[j])
            cnt = [0.0] * p
            for e in range(int(indptr[j]), int(indptr[j + 1])):
                u = int(indices[e])
                we = 1.0 if edge_weight is None else float(edge_weight[e])
                if u in pos:
                    k = int(labels[u]) - label_base
                    if pos[u] != j and 0 <= k < p:
                        cnt[k] += we
                    continue
                if snap is None:
                    k = int(labels[u]) - label_base
                    if 0 <= k < p:
                        cnt[k] += we
                else:
                    bits = bloom_bits_ref(key, u, snap.shape[1])
                    for k in range(p):
                        if all(snap[k, b] for b in bits):
                            cnt[k] += we
            if restream:
                k0 = int(labels[nodes[j]]) - label_base
                sizes[k0] -= w
                train_sizes[k0] -= t
            best, best_score = -1, 0.0
            for k in range(p):
                if sizes[k] + w > capacity[k]:
                    continue
                s = cnt[k] - w * ag * math.pow(float(weight[k]) * float(sizes[k]), g1)
                if t > 0:
                    s -= t * train_penalty * (float(weight[k]) * float(train_sizes[k])) / train_norm
                if best < 0 or s > best_score:
                    best, best_score = k, s
            if best < 0:
                best = int(np.argmin(sizes))
            labels[nodes[j]] = label_base + best
            sizes[best] += w
            train_sizes[best] += t
            if bloom is not None:
                for b in bloom_bits_ref(key, nodes[j], bloom.shape[1]):
                    bloom[best, b] = True


def grem_pass_ref(indptr, indices, nodes, labels, pref, sizes, capacity, label_a, label_b, node_weight=None,
                  edge_weight=None) -> int:
    """Plain-Python GREM pass with the kernel's rule (float32 estimates); returns nodes moved. With weights,
    n_a / n_b sum the entries' edge weights and node j adds node_weight[j] to its side (full: sizes + w >
    capacity)."""
    moved = 0
    half = np.float32(0.5)
    for j, v in enumerate(int(x) for x in nodes):
        lo, hi = int(indptr[j]), int(indptr[j + 1])
        nbr = labels[indices[lo:hi]]
        ew = np.ones(hi - lo, dtype=np.int64) if edge_weight is None else np.asarray(edge_weight[lo:hi])
        na, nb = int(ew[nbr == label_a].sum()), int(ew[nbr == label_b].sum())
        w = 1 if node_weight is None else int(node_weight[j])
        cur = np.float32(nb * (1.0 - int(sizes[1]) / int(capacity[1])) - na * (1.0 - int(sizes[0]) / int(capacity[0])))
        assigned = labels[v] in (label_a, label_b)
        side0 = int(labels[v] == label_b) if assigned else -1
        est = half * (np.float32(pref[v]) + cur) if assigned else cur
        if est > 0:
            want = 1
        elif est < 0:
            want = 0
        elif assigned:
            want = side0
        else:
            want = 0 if capacity[0] - sizes[0] >= capacity[1] - sizes[1] else 1
        if want != side0 and sizes[want] + w > capacity[want]:
            want = side0 if assigned else 1 - want
        if assigned and want != side0:
            sizes[side0] -= w
            moved += 1
        if not assigned or want != side0:
            sizes[want] += w
        labels[v] = label_b if want else label_a
        pref[v] = est
    return moved


# ---- multilevel references (multilevel.c: cluster_pass, refine_pass, csr_aggregate) ----------------------


def _visit_order(num: int, visit) -> list[int]:
    return list(range(num)) if visit is None else [int(j) for j in visit]


def _weight(values, i: int) -> int:
    return 1 if values is None else int(values[i])


def cluster_pass_ref(indptr, indices, nodes, clusters, cluster_weight, max_weight, node_weight=None,
                     edge_weight=None, visit=None) -> int:
    """Size-constrained label propagation over one chunk, sequential in `visit` order; updates clusters and
    cluster_weight in place, returns the moves. v joins the neighbouring cluster c != clusters[v] of largest
    connection weight (self loops ignored) with cluster_weight[c] + w <= max_weight (ties: smallest c) when
    that weight is strictly above its connection to its own cluster."""
    moved = 0
    for j in _visit_order(len(nodes), visit):
        v, w = int(nodes[j]), _weight(node_weight, j)
        cur = int(clusters[v])
        conn: dict[int, int] = {}
        for e in range(int(indptr[j]), int(indptr[j + 1])):
            u = int(indices[e])
            if u != v:
                c = int(clusters[u])
                conn[c] = conn.get(c, 0) + _weight(edge_weight, e)
        own = conn.get(cur, 0)
        fits = [c for c in conn if c != cur and cluster_weight[c] + w <= max_weight]
        if not fits:
            continue
        best = min(fits, key=lambda c: (-conn[c], c))
        if conn[best] > own:
            cluster_weight[cur] -= w
            cluster_weight[best] += w
            clusters[v] = best
            moved += 1
    return moved


def refine_pass_ref(indptr, indices, nodes, parts, sizes, capacity, node_weight=None, edge_weight=None,
                    train_weight=None, train_sizes=None, train_capacity=None, visit=None) -> int:
    """k-way label-propagation refinement over one chunk, sequential in `visit` order; updates parts, sizes
    (and train_sizes) in place, returns the moves. Candidates: parts c != parts[v] that v has a neighbour in
    (labels outside [0, k) and self loops ignored), with sizes[c] + w <= capacity[c] and, when t > 0,
    train_sizes[c] + t <= train_capacity[c]; best = largest connection, ties smallest c; v moves when that
    connection beats its own strictly or its own part is over capacity."""
    k = len(sizes)
    moved = 0
    for j in _visit_order(len(nodes), visit):
        v, w = int(nodes[j]), _weight(node_weight, j)
        t = 0 if train_weight is None else int(train_weight[j])
        cur = int(parts[v])
        if not 0 <= cur < k:
            raise ValueError(f"expected the label of node {v} in [0, {k}) (got {cur})")
        conn = [0] * k
        for e in range(int(indptr[j]), int(indptr[j + 1])):
            u = int(indices[e])
            if u != v and 0 <= int(parts[u]) < k:
                conn[int(parts[u])] += _weight(edge_weight, e)
        fits = [c for c in range(k) if c != cur and conn[c] > 0 and sizes[c] + w <= capacity[c]
                and (train_weight is None or t == 0 or train_sizes[c] + t <= train_capacity[c])]
        if not fits:
            continue
        best = min(fits, key=lambda c: (-conn[c], c))
        if conn[best] > conn[cur] or sizes[cur] > capacity[cur]:
            sizes[cur] -= w
            sizes[best] += w
            if train_weight is not None:
                train_sizes[cur] -= t
                train_sizes[best] += t
            parts[v] = best
            moved += 1
    return moved


def csr_aggregate_ref(indptr, indices, weights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(new_indptr, indices, weights) of the CSR with each row sorted by column and duplicate columns merged
    (weights summed); computed globally with NumPy (lexsort + reduceat), not row by row like the kernel."""
    n = len(indptr) - 1
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    order = np.lexsort((indices, rows))
    rows, cols, w = rows[order], np.asarray(indices)[order], np.asarray(weights)[order]
    if len(cols) == 0:
        return np.zeros(n + 1, dtype=np.int64), cols.astype(np.int64), w.astype(np.int64)
    first = np.ones(len(cols), dtype=bool)
    first[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    starts = np.flatnonzero(first)
    new_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[starts], minlength=n), out=new_indptr[1:])
    return new_indptr, cols[starts].astype(np.int64), np.add.reduceat(w, starts).astype(np.int64)


def place_rows_at_ref(rows: np.ndarray, offsets, out: np.ndarray) -> np.ndarray:
    """``out[offsets[k]:offsets[k] + row_bytes] = rows[k]`` as bytes, one row at a time (the kernel's twin)."""
    raw = np.ascontiguousarray(rows).view(np.uint8).reshape(len(rows), rows.shape[1] * rows.dtype.itemsize)
    for k, off in enumerate(np.asarray(offsets, dtype=np.int64)):
        out[off : off + raw.shape[1]] = raw[k]
    return out


def gather_rows_at_ref(src: np.ndarray, offsets, dtype, dim: int) -> np.ndarray:
    """``(K, dim)`` rows of ``dtype`` read at byte ``offsets[k]`` of the flat uint8 ``src``."""
    row_bytes = np.dtype(dtype).itemsize * dim
    out = np.empty((len(offsets), row_bytes), dtype=np.uint8)
    for k, off in enumerate(np.asarray(offsets, dtype=np.int64)):
        out[k] = src[off : off + row_bytes]
    return out.view(dtype).reshape(len(offsets), dim)


# ---- segment disk caches (diskcache.c) --------------------------------------------------------------------


def minhash_signatures_ref(items: np.ndarray, set_ptr: np.ndarray, num_items: int, k: int, seed: int) -> np.ndarray:
    """out[v, j] = min over sets s containing v of mix64(mix64(seed + (j+1) G0) ^ (s + G2)); 2**64-1 if none."""
    out = np.full((num_items, k), MASK64, dtype=np.uint64)
    for j in range(k):
        key = mix64((seed + (j + 1) * G0) & MASK64)
        for s in range(len(set_ptr) - 1):
            h = np.uint64(mix64(key ^ ((s + G2) & MASK64)))
            members = np.asarray(items[set_ptr[s] : set_ptr[s + 1]], dtype=np.int64)
            out[members, j] = np.minimum(out[members, j], h)
    return out


def count_blocks_ref(slots: np.ndarray, set_ptr: np.ndarray, row_bytes: int, block: int = 4096) -> np.ndarray:
    """Per set: distinct ``block``-byte blocks holding its rows (row r at [r*row_bytes, (r+1)*row_bytes)),
    negative slots skipped."""
    out = np.zeros(len(set_ptr) - 1, dtype=np.int64)
    for s in range(len(set_ptr) - 1):
        blocks: set[int] = set()
        for r in slots[set_ptr[s] : set_ptr[s + 1]]:
            if r >= 0:
                blocks.update(range(r * row_bytes // block, ((r + 1) * row_bytes - 1) // block + 1))
        out[s] = len(blocks)
    return out


# ---- nn/: training-time model operations ----------------------------------------------------------------


def csr_sum_ref(indptr: np.ndarray, cols: np.ndarray, src: np.ndarray, mean: bool) -> np.ndarray:
    """Row d: float32 sum of src[cols[k]] over its edges in CSR order from 0 (divided by max(degree, 1))."""
    out = np.zeros((len(indptr) - 1, src.shape[1]), dtype=np.float32)
    for d in range(len(indptr) - 1):
        for k in range(indptr[d], indptr[d + 1]):
            out[d] += src[cols[k]]
        if mean:
            out[d] /= np.float32(max(indptr[d + 1] - indptr[d], 1))
    return out


def csr_sum_backward_ref(indptr: np.ndarray, cols: np.ndarray, grad_out: np.ndarray, num_src: int,
                         mean: bool) -> np.ndarray:
    """grad_src[cols[k]] += grad_out[d] (/ max(degree, 1)) for every edge in CSR order, from zeros."""
    grad_src = np.zeros((num_src, grad_out.shape[1]), dtype=np.float32)
    for d in range(len(indptr) - 1):
        g = grad_out[d] / np.float32(max(indptr[d + 1] - indptr[d], 1)) if mean else grad_out[d]
        for k in range(indptr[d], indptr[d + 1]):
            grad_src[cols[k]] += g
    return grad_src


def dropout_ref(x: np.ndarray, p: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Element i kept when the low (i even) or high (i odd) 32 bits of draw(mix64(seed + G0), i // 2) are
    >= floor(p * 2^32); out = x * (kept * scale), torch's input * mask * scale."""
    key = mix64(seed + G0)
    threshold = int(p * 2.0**32)
    flat = x.reshape(-1)
    bits = [draw(key, i // 2) >> (32 * (i % 2)) & 0xFFFFFFFF for i in range(flat.size)]
    mask = np.array([b >= threshold for b in bits], dtype=np.uint8)
    scale = np.float32(1.0 / (1.0 - p)) if p < 1 else np.float32(0)
    out = (flat * (mask.astype(np.float32) * scale)).astype(np.float32)
    return out.reshape(x.shape), mask.reshape(x.shape)
