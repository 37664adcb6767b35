/* storage_kernels._native: method table and module init. The kernels live in one folder per family (io/,
 * graph/, reorder/, partition/), one .c file per kernel family; their prototypes are in kernels.h. */
#define STRATA_NATIVE_IMPORT_ARRAY
#include "common.h"
#include "kernels.h"

#define SK_KW (METH_VARARGS | METH_KEYWORDS)
#define SK_FN(f) ((PyCFunction)(void (*)(void))(f))

static PyMethodDef methods[] = {
    {"csr_count", SK_FN(sk_csr_count), SK_KW,
     "csr_count(src, counts) -> None\n\nPass 1 of CSR construction: counts[src[i]] += 1 for every edge."},
    {"csr_place", SK_FN(sk_csr_place), SK_KW,
     "csr_place(src, dst, cursor, indices) -> None\n\n"
     "Pass 2 of CSR construction: indices[cursor[s]] = d; cursor[s] += 1 for every edge (s, d) in order."},
    {"sample_blocks", SK_FN(sk_sample_blocks), SK_KW,
     "sample_blocks(indptr, indices, seeds, fanouts, seed, num_threads=0) -> (nodes, hop_counts, indptrs, cols)\n\n"
     "Multi-hop uniform neighbour sampling without replacement, relabelled into layered blocks."},
    {"gather_rows", SK_FN(sk_gather_rows), SK_KW,
     "gather_rows(src, idx, out, num_threads=0) -> None\n\nout[k] = src[idx[k]] for 2-D C-contiguous arrays."},
    {"open_direct", SK_FN(sk_open_direct), SK_KW,
     "open_direct(path, write=False) -> (fd, direct)\n\n"
     "Open with O_DIRECT; reopen buffered (direct=False) when the filesystem refuses it."},
    {"close_fd", SK_FN(sk_close_fd), SK_KW, "close_fd(fd) -> None\n\nClose a descriptor from open_direct."},
    {"pread_ranges", SK_FN(sk_pread_ranges), SK_KW,
     "pread_ranges(fd, offsets, lengths, out, out_offsets, direct, num_threads=0) -> int\n\n"
     "K complete preads into out[out_offsets[k]:]; returns the bytes read."},
    {"aligned_empty", SK_FN(sk_aligned_empty), SK_KW,
     "aligned_empty(nbytes, alignment=" SK_STR(SK_DIRECT_ALIGN) ") -> numpy.ndarray\n\nUninitialised uint8 buffer at an aligned address."},
    {"pack_partition", SK_FN(sk_pack_partition), SK_KW,
     "pack_partition(features, row_start, ids, batch_ptr, cursor, fd, chunk_offsets, num_threads=0) -> int\n\n"
     "DiskGNN batched packing of one partition of the feature file; returns the bytes written."},
    /* ---- reorder kernels (permute.c, community.c) ---- */
    {"relabel_ids", SK_FN(sk_relabel_ids), SK_KW,
     "relabel_ids(ids, inverse, out, num_threads=0) -> None\n\nout[k] = inverse[ids[k]] (IndexError on bad ids)."},
    {"bucket_rows", SK_FN(sk_bucket_rows), SK_KW,
     "bucket_rows(rows, keys, bounds, out_rows, out_keys, counts, num_threads=0) -> None\n\n"
     "Stable counting sort of rows by bucket (bucket b: bounds[b] <= key < bounds[b+1]); counts[b] = its rows."},
    {"place_rows", SK_FN(sk_place_rows), SK_KW,
     "place_rows(rows, pos, out, num_threads=0) -> None\n\nout[pos[k]] = rows[k] for distinct positions."},
    {"label_propagation", SK_FN(sk_label_propagation), SK_KW,
     "label_propagation(indptr, indices, iterations, seed, num_threads=0) -> (labels, rounds)\n\n"
     "Synchronous label propagation with seeded-hash tie-breaking; independent of num_threads."},
    {"rabbit_order", SK_FN(sk_rabbit_order), SK_KW,
     "rabbit_order(indptr, indices) -> (perm, num_communities)\n\n"
     "Rabbit-Order-style incremental aggregation into communities, then a depth-first walk of the dendrogram."},
    /* ---- end reorder kernels ---- */
    /* ---- partitioning kernels (partition.c) ---- */
    {"fennel_pass", SK_FN(sk_fennel_pass), SK_KW,
     "fennel_pass(indptr, indices, nodes, labels, sizes, train_sizes, is_train, capacity, weight, label_base,\n"
     "            alpha, gamma, train_penalty, train_norm, bloom=None, bloom_seed=0, block_nodes=4096,\n"
     "            restream=False, num_threads=0) -> None\n\n"
     "One streaming FENNEL pass (OUTRE variant) over a chunk of nodes; assigns labels in place."},
    {"grem_pass", SK_FN(sk_grem_pass), SK_KW,
     "grem_pass(indptr, indices, nodes, labels, pref, sizes, capacity, label_a, label_b) -> int\n\n"
     "One GREM bisection pass over a chunk of nodes (re-evaluates assigned nodes); returns the nodes moved."},
    {"cluster_pass", SK_FN(sk_cluster_pass), SK_KW,
     "cluster_pass(indptr, indices, nodes, clusters, cluster_weight, max_weight, node_weight=None,\n"
     "             edge_weight=None, visit=None) -> int\n\n"
     "One size-constrained label-propagation pass over a chunk of nodes; returns the nodes that changed cluster."},
    {"refine_pass", SK_FN(sk_refine_pass), SK_KW,
     "refine_pass(indptr, indices, nodes, parts, sizes, capacity, node_weight=None, edge_weight=None,\n"
     "            train_weight=None, train_sizes=None, train_capacity=None, visit=None) -> int\n\n"
     "One k-way label-propagation refinement pass over a chunk of nodes; returns the nodes moved."},
    {"csr_aggregate", SK_FN(sk_csr_aggregate), SK_KW,
     "csr_aggregate(indptr, indices, weights) -> (indptr, nnz)\n\n"
     "Sort each row by column and merge duplicate columns (weights summed) in place."},
    /* ---- end partitioning kernels ---- */
    {"_set_dense_map_limit", (PyCFunction)sk_set_dense_map_limit, METH_VARARGS,
     "_set_dense_map_limit(num_nodes) -> previous\n\n"
     "Testing hook: sample_blocks uses the direct-address id map for graphs up to num_nodes nodes (2**23 by\n"
     "default) and the hash map above. Results do not depend on it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "storage_kernels._native",
    "Native storage kernels of Strata (CSR build, sampling, gathers, direct I/O, packing).\n\n"
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
