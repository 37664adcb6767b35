/* The Python entry points of storage_kernels._native: one group per kernel family, each with the file it
 * lives in. module.c builds the method table from these prototypes; their Python signatures are in
 * storage_kernels/_native.pyi, and tests/storage_kernels/test_native_stubs.py keeps the two in step.
 *
 * Every entry point takes (self, args, kwargs) (METH_VARARGS | METH_KEYWORDS), with a kwlist naming the
 * parameters as the stub does, except the testing hook sk_set_dense_map_limit (METH_VARARGS). Shared helpers
 * are in common.h. */
#ifndef STRATA_NATIVE_KERNELS_H
#define STRATA_NATIVE_KERNELS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* ---- io/: storage I/O ------------------------------------------------------------------------------------ */

/* io/dio.c: direct I/O (O_DIRECT with a buffered fallback, batched aligned preads, aligned buffers) */
PyObject *sk_open_direct(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_close_fd(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_pread_ranges(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_aligned_empty(PyObject *self, PyObject *args, PyObject *kwargs);

/* io/uring.c: the same reads through io_uring (raw syscalls, queue depth, same/adjacent-page merging) */
PyObject *sk_uring_read_ranges(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_io_uring_available(PyObject *self, PyObject *args, PyObject *kwargs);

/* io/gather.c: row gather from a (memmap'd) 2-D array */
PyObject *sk_gather_rows(PyObject *self, PyObject *args, PyObject *kwargs);

/* io/pack.c: DiskGNN batched packing, one partition of the feature file at a time */
PyObject *sk_pack_partition(PyObject *self, PyObject *args, PyObject *kwargs);

/* io/rows_at.c: rows at byte offsets of a flat buffer (the block-aligned feature layout) */
PyObject *sk_place_rows_at(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_gather_rows_at(PyObject *self, PyObject *args, PyObject *kwargs);

/* io/gather_into.c: gathers into given rows of the output (a batch's host rows in node order) */
PyObject *sk_gather_rows_into(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_gather_rows_at_into(PyObject *self, PyObject *args, PyObject *kwargs);

/* io/split.c: a batch's address table grouped by tier code (the source's read stage) */
PyObject *sk_split_by_code(PyObject *self, PyObject *args, PyObject *kwargs);

/* io/blocks.c: the blocks a set of rows needs and where each row lands in them (merged reads) */
PyObject *sk_blocks_for_rows(PyObject *self, PyObject *args, PyObject *kwargs);

/* io/diskcache.c: DiskGNN's segment disk caches: MinHash signatures (Alg. 1), distinct blocks per read */
PyObject *sk_minhash_signatures(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_count_blocks(PyObject *self, PyObject *args, PyObject *kwargs);

/* ---- graph/: CSR construction and neighbour sampling ----------------------------------------------------- */

/* graph/csr.c: two-pass CSR construction from edge chunks */
PyObject *sk_csr_count(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_csr_place(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_csr_dedupe(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_feistel_walk(PyObject *self, PyObject *args, PyObject *kwargs);

/* graph/sample.c: multi-hop neighbour sampling into layered blocks */
PyObject *sk_sample_blocks(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_sample_dense(PyObject *self, PyObject *args, PyObject *kwargs); /* DENSE: one-hop samples reused */
PyObject *sk_set_dense_map_limit(PyObject *self, PyObject *args); /* testing hook: force the hashed id map */
int sk_sample_init(void); /* not a Python function: once from module init (fork safety of the id-map pool) */

/* graph/prefetch.c: asynchronous read-ahead of CSR rows of a memory-mapped CSR (madvise WILLNEED) */
PyObject *sk_prefetch_rows(PyObject *self, PyObject *args, PyObject *kwargs);

/* graph/prune.c: OUTRE's subtree pruning of one sampled batch */
PyObject *sk_prune_blocks(PyObject *self, PyObject *args, PyObject *kwargs);

/* graph/rank.c: filtered ranking of link prediction (known edges filtered out of each query's scores) */
PyObject *sk_filtered_ranks(PyObject *self, PyObject *args, PyObject *kwargs);

/* ---- reorder/: node reordering --------------------------------------------------------------------------- */

/* reorder/permute.c: external permutation (relabel ids, bucket rows, place rows) */
PyObject *sk_relabel_ids(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_bucket_rows(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_place_rows(PyObject *self, PyObject *args, PyObject *kwargs);

/* reorder/degree.c: node ids by degree descending (counting sort, stable) */
PyObject *sk_degree_order(PyObject *self, PyObject *args, PyObject *kwargs);

/* reorder/community.c: synchronous label propagation */
PyObject *sk_label_propagation(PyObject *self, PyObject *args, PyObject *kwargs);

/* reorder/rabbit.c: Rabbit-Order-style community ordering */
PyObject *sk_rabbit_order(PyObject *self, PyObject *args, PyObject *kwargs);

/* ---- partition/: graph partitioning ---------------------------------------------------------------------- */

/* partition/partition.c: streaming partitioners (FENNEL, GREM) */
#define SK_FENNEL_BLOCK_NODES 4096 /* fennel_pass's default block_nodes (nodes counted in parallel per block) */
PyObject *sk_fennel_pass(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_grem_pass(PyObject *self, PyObject *args, PyObject *kwargs);

/* partition/multilevel.c: multilevel coarsening, refinement and contracted-CSR merging */
PyObject *sk_cluster_pass(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_refine_pass(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_csr_aggregate(PyObject *self, PyObject *args, PyObject *kwargs);

/* ---- cache/: feature-cache simulation and maintenance (Ginex) ------------------------------------------- */

/* cache/belady.c: Belady-optimal changesets of one superbatch (two-pass occurrence CSR, O(K + batch) per step) */
PyObject *sk_belady_changesets(PyObject *self, PyObject *args, PyObject *kwargs);
/* cache/window.c: the segment window's schedule (Belady over a segment disk cache's rows, block reads) */
PyObject *sk_window_schedule(PyObject *self, PyObject *args, PyObject *kwargs);
/* cache/window_lookup.c: the segment window's per-batch bookkeeping at training time */
PyObject *sk_window_split(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_rows_in_blocks(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_window_update(PyObject *self, PyObject *args, PyObject *kwargs);

/* cache/update.c: in-place cache update from a batch's rows through the address table */
PyObject *sk_cache_update(PyObject *self, PyObject *args, PyObject *kwargs);
/* cache/hotset.c: the hyperbatch hotset's hits and access counts over a chunk of a trace (plan simulation) */
PyObject *sk_count_hits(PyObject *self, PyObject *args, PyObject *kwargs);

/* ---- nn/: training-time model operations on the CPU (trainer/native_ops.py) ---------------------------- */

/* nn/aggregate.c: sum / mean of source rows over a block's CSR, and its backward (no edge x feature tensor) */
PyObject *sk_csr_sum(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_csr_sum_backward(PyObject *self, PyObject *args, PyObject *kwargs);
/* nn/dropout.c: dropout with a counter-based mask (parallel, deterministic for a seed) */
PyObject *sk_dropout(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_dropout_backward(PyObject *self, PyObject *args, PyObject *kwargs);
/* nn/attention.c: GAT's attention aggregation (scores, edge softmax, attention dropout, weighted sum), fused */
PyObject *sk_gat_attend(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *sk_gat_attend_backward(PyObject *self, PyObject *args, PyObject *kwargs);

#endif /* STRATA_NATIVE_KERNELS_H */
