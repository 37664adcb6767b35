/* storage_kernels._native: method table and module init. The kernels live in one folder per family (io/,
 * graph/, reorder/, partition/, cache/), one .c file per kernel family; their prototypes are in kernels.h. */
#define STRATA_NATIVE_IMPORT_ARRAY
#include "common.h"
#include "kernels.h"

/* One method-table entry: Python `name` -> C sk_<name>, METH_VARARGS | METH_KEYWORDS. The docstring follows
 * CPython's signature convention, "name($module, /, params)\n--\n\n<doc>", which gives the function a
 * __text_signature__ (inspect.signature works; help() shows the parameters). `params` are the kwlist names
 * of sk_<name>, in order, with the defaults of the optional ones; return values are described in `doc`.
 * tests/storage_kernels/test_native_stubs.py compares these signatures with _native.pyi. */
#define SK_METHOD(name, params, doc)                                                                              \
    {#name, (PyCFunction)(void (*)(void))sk_##name, METH_VARARGS | METH_KEYWORDS,                                \
     #name "($module, /, " params ")\n--\n\n" doc}

static PyMethodDef methods[] = {
    /* ---- io/: storage I/O ---- */
    SK_METHOD(open_direct, "path, write=False",
              "Open with O_DIRECT; reopen buffered when the filesystem refuses it. Returns (fd, direct)."),
    SK_METHOD(close_fd, "fd", "Close a descriptor from open_direct."),
    SK_METHOD(pread_ranges, "fd, offsets, lengths, out, out_offsets, direct, num_threads=0",
              "K complete preads into out[out_offsets[k]:]; returns the bytes read."),
    SK_METHOD(aligned_empty, "nbytes, alignment=" SK_STR(SK_DIRECT_ALIGN),
              "Uninitialised uint8 buffer (numpy.ndarray) at an aligned address."),
    SK_METHOD(uring_read_ranges, "fd, offsets, lengths, out, out_offsets, direct, queue_depth=256, merge=True",
              "pread_ranges through an io_uring: up to queue_depth reads in flight, same-page and adjacent ranges\n"
              "merged first (merge=True). Returns (bytes read, reads issued after merging)."),
    SK_METHOD(io_uring_available, "",
              "Whether io_uring works here (a ring is set up and completes a NOP). Returns (ok, reason)."),
    SK_METHOD(gather_rows, "src, idx, out, num_threads=0", "out[k] = src[idx[k]] for 2-D C-contiguous arrays."),
    SK_METHOD(pack_partition, "features, row_start, ids, batch_ptr, cursor, fd, chunk_offsets, num_threads=0",
              "DiskGNN batched packing of one partition of the feature file; returns the bytes written."),
    SK_METHOD(place_rows_at, "rows, offsets, out, num_threads=0",
              "out[offsets[k]:offsets[k] + row bytes] = rows[k] (uint8 out; ascending, non-overlapping rows)."),
    SK_METHOD(gather_rows_at, "src, offsets, out, num_threads=0",
              "out[k] = the row at byte offsets[k] of src (uint8 src; out 2-D C-contiguous)."),
    SK_METHOD(gather_rows_into, "src, idx, out, pos, num_threads=0",
              "out[pos[k]] = src[idx[k]] for 2-D C-contiguous arrays (distinct pos)."),
    SK_METHOD(gather_rows_at_into, "src, offsets, out, pos, num_threads=0",
              "out[pos[k]] = the row at byte offsets[k] of src (uint8 src; distinct pos)."),
    SK_METHOD(blocks_for_rows, "rows, base, row_bytes",
              "The sorted distinct 4096-byte blocks holding rows (file bytes base + row * row_bytes) and where each\n"
              "row starts in them read back to back: (blocks, at); None when the rows are too far apart."),
    SK_METHOD(split_by_code, "codes, slots, num_codes",
              "Nodes grouped by their int8 code (stable counting sort). Returns (order, sorted_slots, ptr, lo, hi):\n"
              "code c's positions order[ptr[c]:ptr[c+1]], their slots, and the smallest and largest slot per code."),
    SK_METHOD(minhash_signatures, "items, set_ptr, out, seed, num_threads=0",
              "MinHash signatures: out[v, j] = min over the sets s containing item v of hash j of s (DiskGNN\n"
              "Alg. 1); UINT64_MAX for items in no set. Independent of num_threads."),
    SK_METHOD(count_blocks, "slots, set_ptr, row_bytes, out, num_threads=0",
              "out[s] = distinct 4096-byte blocks holding rows slots[set_ptr[s]:set_ptr[s+1]] (negative skipped)\n"
              "of a block-aligned region."),

    /* ---- graph/: CSR construction and neighbour sampling ---- */
    SK_METHOD(csr_count, "src, counts", "Pass 1 of CSR construction: counts[src[i]] += 1 for every edge."),
    SK_METHOD(csr_place, "src, dst, cursor, indices",
              "Pass 2 of CSR construction: indices[cursor[s]] = d; cursor[s] += 1 for every edge (s, d) in order."),
    SK_METHOD(feistel_walk, "x, keys, half, n, inverse, out, num_threads=0",
              "The synthetic generator's keyed bijection of [0, n): out[i] = Feistel(x[i]) (or its inverse) with\n"
              "SplitMix64 rounds on 2*half bits and cycle walking."),
    SK_METHOD(csr_dedupe, "indptr, indices, counts, num_threads=0",
              "Sort every row's neighbours and drop repeats, in place: counts[r] = row r's kept entries; the kept\n"
              "entries, row after row, are moved to the front of indices. Returns their total."),
    SK_METHOD(sample_blocks, "indptr, indices, seeds, fanouts, seed, num_threads=0",
              "Multi-hop uniform neighbour sampling without replacement, relabelled into layered blocks.\n"
              "Returns (nodes, hop_counts, indptrs, cols)."),
    SK_METHOD(prefetch_rows, "indptr, indices, rows",
              "Ask the kernel to read rows `rows` of a memory-mapped CSR ahead (madvise WILLNEED on the pages of\n"
              "their offsets, then of their entries), asynchronously. Returns the pages advised."),
    SK_METHOD(sample_dense, "indptr, indices, seeds, fanouts, seed, num_threads=0",
              "MariusGNN's DENSE sampling: every node's neighbours sampled once, by the first hop reaching it, into\n"
              "one CSR whose prefixes are the hops' blocks. Returns (nodes, hop_counts, indptr, cols)."),
    SK_METHOD(prune_blocks, "hop_counts, indptr, cols, pulled, state, new_indptr, new_cols, new_hop_counts, "
              "edge_counts", "OUTRE's pruning of one batch's blocks: fills state (0 dropped, 1 read, 2 kept unread) "
              "and the compacted blocks."),
    SK_METHOD(filtered_ranks, "scores, targets, sources, indptr, indices, out, num_threads=0",
              "Filtered link-prediction ranks: each query's known edges (and its source) set to -inf in scores,\n"
              "then out[q] = 1 + #greater + 0.5 * #tied scores than the target's."),
    {"_set_dense_map_limit", (PyCFunction)sk_set_dense_map_limit, METH_VARARGS,
     "_set_dense_map_limit($module, num_nodes, /)\n--\n\n"
     "Testing hook: sample_blocks uses the direct-address id map for graphs up to num_nodes nodes (2**23 by\n"
     "default) and the hash map above. Results do not depend on it. Returns the previous limit."},

    /* ---- reorder/: node reordering ---- */
    SK_METHOD(relabel_ids, "ids, inverse, out, num_threads=0",
              "out[k] = inverse[ids[k]] (IndexError on bad ids)."),
    SK_METHOD(bucket_rows, "rows, keys, bounds, out_rows, out_keys, counts, num_threads=0",
              "Stable counting sort of rows by bucket (bucket b: bounds[b] <= key < bounds[b+1]);\n"
              "counts[b] = its rows."),
    SK_METHOD(place_rows, "rows, pos, out, num_threads=0", "out[pos[k]] = rows[k] for distinct positions."),
    SK_METHOD(degree_order, "indptr, out",
              "out = node ids by degree descending, ties by id ascending (a stable counting sort of indptr)."),
    SK_METHOD(label_propagation, "indptr, indices, iterations, seed, num_threads=0",
              "Synchronous label propagation with seeded-hash tie-breaking; independent of num_threads.\n"
              "Returns (labels, rounds)."),
    SK_METHOD(rabbit_order, "indptr, indices, skip=None",
              "Rabbit-Order-style incremental aggregation into communities, then a depth-first walk of the\n"
              "dendrogram. Returns (perm, num_communities)."),

    /* ---- partition/: graph partitioning ---- */
    SK_METHOD(fennel_pass,
              "indptr, indices, nodes, labels, sizes, train_sizes, is_train, capacity, weight, label_base, alpha, "
              "gamma, train_penalty, train_norm, bloom=None, bloom_seed=0, "
              "block_nodes=" SK_STR(SK_FENNEL_BLOCK_NODES) ", restream=False, num_threads=0, node_weight=None, "
              "edge_weight=None, train_weight=None",
              "One streaming FENNEL pass (OUTRE variant) over a chunk of nodes; assigns labels in place."),
    SK_METHOD(grem_pass,
              "indptr, indices, nodes, labels, pref, sizes, capacity, label_a, label_b, node_weight=None, "
              "edge_weight=None",
              "One GREM bisection pass over a chunk of nodes (re-evaluates assigned nodes); returns the nodes moved."),
    SK_METHOD(cluster_pass,
              "indptr, indices, nodes, clusters, cluster_weight, max_weight, node_weight=None, edge_weight=None, "
              "visit=None",
              "One size-constrained label-propagation pass over a chunk of nodes; returns the nodes that changed\n"
              "cluster."),
    SK_METHOD(refine_pass,
              "indptr, indices, nodes, parts, sizes, capacity, node_weight=None, edge_weight=None, "
              "train_weight=None, train_sizes=None, train_capacity=None, visit=None",
              "One k-way label-propagation refinement pass over a chunk of nodes; returns the nodes moved."),
    SK_METHOD(csr_aggregate, "indptr, indices, weights",
              "Sort each row by column and merge duplicate columns (weights summed) in place.\n"
              "Returns (indptr, nnz)."),

    /* ---- cache/: feature-cache simulation and maintenance (Ginex) ---- */
    SK_METHOD(belady_changesets, "batch_ptr, ids, num_nodes, num_entries",
              "Belady-optimal cache changesets of one superbatch (iteration i reads ids[batch_ptr[i]:batch_ptr[i+1]]).\n"
              "Returns (init_ids, update_ptr, in_ids, out_ids, in_positions, hits)."),
    SK_METHOD(cache_update, "cache, address_table, batch_rows, in_ids, out_ids, in_positions, num_threads=0",
              "In-place cache update: the slot of out_ids[k] receives batch_rows[in_positions[k]] for in_ids[k]."),
    SK_METHOD(window_schedule, "batch_ptr, rows, num_rows, row_bytes, buffer_rows",
              "The segment window's per-batch block reads and buffer changes (Belady over the rows of one segment\n"
              "disk cache). Returns (read_ptr, read_blocks, in_ptr, in_rows, in_slots, out_ptr, out_rows, hits)."),
    SK_METHOD(window_split, "slots, pos, row_slot",
              "A batch's segment-cache rows split by the window's row -> slot table (-1: not held).\n"
              "Returns (held_slots, held_pos, unheld_rows, unheld_pos)."),
    SK_METHOD(rows_in_blocks, "blocks, rows, base, row_bytes",
              "Where each row (file bytes base + row * row_bytes) starts in a buffer of the sorted blocks read back\n"
              "to back; None when some row has a block that was not read."),
    SK_METHOD(window_update, "row_slot, slot_row, out_rows, in_rows, in_slots",
              "The window's changes after a batch, in place: out rows leave, in_rows[k] takes slot in_slots[k]."),
    SK_METHOD(count_hits, "ids, hot, counts",
              "counts[ids[k]] += 1.0 for every k; returns how many ids[k] are hot (hot[ids[k]] true)."),

    /* ---- nn/: training-time model operations on the CPU ---- */
    SK_METHOD(csr_sum, "indptr, cols, src, out, mean=False, num_threads=0",
              "out[d] = sum of src[cols[k]] over the edges k of row d of the CSR (divided by max(degree, 1) when\n"
              "mean), edges added in CSR order."),
    SK_METHOD(csr_sum_backward, "indptr, cols, grad_out, grad_src, mean=False, num_threads=0",
              "grad_src[cols[k]] += grad_out[d] (divided by max(degree, 1) when mean) for every edge k of row d."),
    SK_METHOD(dropout, "x, out, mask, p, seed, num_threads=0",
              "mask[i] = mix64(mix64(seed + G0) + (i + 1) * G0) >= p * 2^64; out[i] = x[i] / (1 - p) where kept,\n"
              "else 0 (flat float32 arrays; out may be x)."),
    SK_METHOD(dropout_backward, "grad, mask, p, out, num_threads=0",
              "out[i] = grad[i] * mask[i] / (1 - p) (flat float32 grad and out, uint8 mask; out may be grad)."),
    SK_METHOD(gat_attend, "z, score_src, score_dst, indptr, cols, dst_pos, out, alpha, negative_slope, p, seed, "
              "num_threads=0",
              "GAT's attention over a block's CSR and self loops: out[d, h] = sum of softmax(LeakyReLU(score_src[j, h]\n"
              "+ score_dst[d, h])) (dropout p, seed) * z[j, h]; alpha (E + D, H) receives the softmax."),
    SK_METHOD(gat_attend_backward, "z, score_src, score_dst, indptr, cols, dst_pos, alpha, grad_out, grad_z, "
              "grad_score_src, grad_score_dst, negative_slope, p, seed, num_threads=0",
              "The gradient of gat_attend: accumulates into grad_z and grad_score_src, writes grad_score_dst."),
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "storage_kernels._native",
    "Native kernels of Strata: storage I/O (direct reads, gathers, packing), CSR construction and sampling,\n"
    "reordering and partitioning, feature-cache changesets, CPU training operations.\n\n"
    "Import the wrappers in storage_kernels.kernels rather than this module.",
    -1,
    methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    import_array();
    if (sk_sample_init() < 0) {
        PyErr_SetString(PyExc_ImportError, "storage_kernels._native: pthread_atfork failed");
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "DIRECT_ALIGN", SK_DIRECT_ALIGN) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
