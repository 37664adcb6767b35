/* Neighbour aggregation over a sampled block's CSR, forward and backward (trainer/native_ops.py): the
 * training-time form of GraphSAGE's mean aggregation without the (edges x features) message tensor that
 * index_select + scatter_reduce materialise.
 *
 * csr_sum(indptr, cols, src, out, mean, num_threads):
 *     out[d] = sum_{k in [indptr[d], indptr[d+1])} src[cols[k]], divided by max(degree, 1) when `mean`
 *     (rows of D destinations; cols index the S rows of src). Edges are added in CSR order from 0.0f and the
 *     sum is divided, not multiplied by a reciprocal: the same float operations in the same order as
 *     scatter_reduce(sum, include_self) over zeros followed by a division by the clamped degree.
 * csr_sum_backward(indptr, cols, grad_out, grad_src, mean, num_threads):
 *     grad_src[cols[k]] += grad_out[d] (divided by max(degree, 1) when `mean`) for every edge k of row d,
 *     edges in CSR order: what index_add of the gathered, divided gradients does.
 *
 * Threads: the forward splits destination rows (claimed in chunks), the backward splits feature columns
 * (each thread walks every edge for its columns), so no two threads write one float and every float sees its
 * additions in edge order: results do not depend on the number of threads. Everything is validated (shapes,
 * a well-formed indptr, every col < S) before anything is written. */
#include "common.h"
#include "kernels.h"

#include <string.h>

#define AG_ROWS_PER_CLAIM 64                  /* destination rows a forward thread claims at a time */
#define AG_MIN_CELLS_PER_THREAD (1 << 16)     /* edge x feature additions per thread: small calls stay serial */
#define AG_MIN_COLS_PER_THREAD 16             /* backward: a thread's column slice is at least one cache line */

#define AG_PREFETCH 4 /* edges ahead whose source row is prefetched: the rows are random, each a cache miss */

/* Ask for the cache lines of a row of `n` floats (a random row of a gather: its first line misses). */
static inline void prefetch_row(const float *row, int64_t n) {
    for (int64_t f = 0; f < n; f += 16) __builtin_prefetch(row + f);
}

typedef struct {
    const int64_t *indptr, *cols;
    const float *src; /* forward: src (S, F); backward: grad_out (D, F) */
    float *out;       /* forward: out (D, F); backward: grad_src (S, F) */
    int64_t D, F, E;
    int mean;
    atomic_llong next; /* forward: next unclaimed destination row */
} agg_ctx;

static void sum_task(void *p, int tid, int nthreads) {
    (void)tid;
    (void)nthreads;
    agg_ctx *c = (agg_ctx *)p;
    const int64_t F = c->F;
    int64_t lo, hi;
    while (sk_claim(&c->next, c->D, AG_ROWS_PER_CLAIM, &lo, &hi)) {
        for (int64_t d = lo; d < hi; d++) {
            float *restrict acc = c->out + d * F;
            for (int64_t f = 0; f < F; f++) acc[f] = 0.0f;
            const int64_t k0 = c->indptr[d], k1 = c->indptr[d + 1];
            for (int64_t k = k0; k < k1; k++) {
                if (k + AG_PREFETCH < c->E) prefetch_row(c->src + c->cols[k + AG_PREFETCH] * F, F);
                const float *restrict row = c->src + c->cols[k] * F;
                for (int64_t f = 0; f < F; f++) acc[f] += row[f];
            }
            if (c->mean) {
                const float degree = k1 - k0 > 1 ? (float)(k1 - k0) : 1.0f;
                for (int64_t f = 0; f < F; f++) acc[f] /= degree;
            }
        }
    }
}

static void backward_task(void *p, int tid, int nthreads) {
    agg_ctx *c = (agg_ctx *)p;
    const int64_t F = c->F, f0 = F * tid / nthreads, f1 = F * (tid + 1) / nthreads, W = f1 - f0;
    /* this thread's columns of one destination's divided gradient: divided once per destination, not per
     * edge (without the scratch, per edge: the same quotients, more divisions) */
    float *scaled = c->mean && W > 0 ? malloc(sizeof(float) * (size_t)W) : NULL;
    for (int64_t d = 0; d < c->D; d++) {
        const int64_t k0 = c->indptr[d], k1 = c->indptr[d + 1];
        if (k0 == k1) continue;
        const float *restrict g = c->src + d * F + f0;
        const float degree = c->mean && k1 - k0 > 1 ? (float)(k1 - k0) : 1.0f;
        if (scaled != NULL) {
            for (int64_t f = 0; f < W; f++) scaled[f] = g[f] / degree;
            g = scaled;
        }
        for (int64_t k = k0; k < k1; k++) {
            if (k + AG_PREFETCH < c->E) prefetch_row(c->out + c->cols[k + AG_PREFETCH] * F + f0, W);
            float *restrict row = c->out + c->cols[k] * F + f0;
            if (scaled != NULL || !c->mean)
                for (int64_t f = 0; f < W; f++) row[f] += g[f];
            else
                for (int64_t f = 0; f < W; f++) row[f] += g[f] / degree;
        }
    }
    free(scaled);
}

/* Shared argument handling: indptr (D+1) and cols (E) int64, `dense` (rows_dense, F) float32 read-only and
 * `target` (rows_target, F) float32 writable, where the CSR's destinations index the `per_dst` one of the two
 * and its cols the other. Returns 0 with everything acquired and validated, or -1 with an exception set. */
static int agg_args(const char *fn, PyObject *indptr_o, PyObject *cols_o, PyObject *dense_o, const char *dense_name,
                    PyObject *target_o, const char *target_name, int dense_is_src, Py_buffer *indptr,
                    Py_buffer *cols, Py_buffer *dense, Py_buffer *target, int64_t *D, int64_t *F) {
    if (sk_get_buffer(indptr_o, fn, "indptr", SK_INT64, 1, 0, indptr) < 0) return -1;
    if (sk_get_buffer(cols_o, fn, "cols", SK_INT64, 1, 0, cols) < 0) return -1;
    if (sk_get_buffer(dense_o, fn, dense_name, SK_FLOAT32, 2, 0, dense) < 0) return -1;
    if (sk_get_buffer(target_o, fn, target_name, SK_FLOAT32, 2, 1, target) < 0) return -1;
    *D = sk_len(indptr) - 1;
    *F = (int64_t)dense->shape[1];
    if (*D < 0) {
        PyErr_Format(PyExc_ValueError, "%s: 'indptr' expected at least 1 entry (got 0)", fn);
        return -1;
    }
    if ((int64_t)target->shape[1] != *F) {
        PyErr_Format(PyExc_ValueError, "%s: '%s' expected %lld columns like '%s' (got %lld)", fn, target_name,
                     (long long)*F, dense_name, (long long)target->shape[1]);
        return -1;
    }
    const Py_buffer *per_dst = dense_is_src ? target : dense;
    if ((int64_t)per_dst->shape[0] != *D) {
        PyErr_Format(PyExc_ValueError, "%s: '%s' expected %lld rows, one per destination (got %lld)", fn,
                     dense_is_src ? target_name : dense_name, (long long)*D, (long long)per_dst->shape[0]);
        return -1;
    }
    const int64_t *ip = indptr->buf, E = sk_len(cols);
    if (ip[0] != 0 || ip[*D] != E) {
        PyErr_Format(PyExc_ValueError, "%s: 'indptr' expected to start at 0 and end at len(cols)=%lld (got %lld and %lld)",
                     fn, (long long)E, (long long)ip[0], (long long)ip[*D]);
        return -1;
    }
    return 0;
}

static PyObject *aggregate(PyObject *args, PyObject *kwargs, int backward) {
    static char *kwlist_fwd[] = {"indptr", "cols", "src", "out", "mean", "num_threads", NULL};
    static char *kwlist_bwd[] = {"indptr", "cols", "grad_out", "grad_src", "mean", "num_threads", NULL};
    const char *fn = backward ? "csr_sum_backward" : "csr_sum";
    PyObject *indptr_o, *cols_o, *dense_o, *target_o;
    int mean = 0;
    Py_ssize_t num_threads = 0;
    Py_buffer indptr = {0}, cols = {0}, dense = {0}, target = {0};
    sk_status st = {0};
    PyObject *result = NULL;
    int nthreads;
    int64_t D = 0, F = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, backward ? "OOOO|pn:csr_sum_backward" : "OOOO|pn:csr_sum",
                                     backward ? kwlist_bwd : kwlist_fwd, &indptr_o, &cols_o, &dense_o, &target_o,
                                     &mean, &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (agg_args(fn, indptr_o, cols_o, dense_o, backward ? "grad_out" : "src", target_o,
                 backward ? "grad_src" : "out", !backward, &indptr, &cols, &dense, &target, &D, &F) < 0)
        goto done;
    if (!backward && dense.buf == target.buf && D > 0 && F > 0) {
        PyErr_Format(PyExc_ValueError, "%s: 'out' expected a buffer apart from 'src' (got the same memory)", fn);
        goto done;
    }
    const int64_t S = (int64_t)(backward ? target.shape[0] : dense.shape[0]), E = sk_len(&cols);
    agg_ctx ctx = {indptr.buf, cols.buf, dense.buf, target.buf, D, F, E, mean, 0};

    Py_BEGIN_ALLOW_THREADS
    sk_check_block(ctx.indptr, D, ctx.cols, E, S, &st);
    if (st.code == 0 && F > 0) {
        int nt = sk_cap_threads(nthreads, (E + D) * F, AG_MIN_CELLS_PER_THREAD);
        if (backward) {
            if (nt > F / AG_MIN_COLS_PER_THREAD) nt = F / AG_MIN_COLS_PER_THREAD > 0 ? (int)(F / AG_MIN_COLS_PER_THREAD) : 1;
            sk_parallel(nt, backward_task, &ctx);
        } else {
            sk_parallel(nt, sum_task, &ctx);
        }
    }
    Py_END_ALLOW_THREADS

    if (sk_raise_block_error(fn, &st, S) == 0) result = Py_NewRef(Py_None);

done:
    SK_RELEASE(&indptr, &cols, &dense, &target);
    return result;
}

PyObject *sk_csr_sum(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    return aggregate(args, kwargs, 0);
}

PyObject *sk_csr_sum_backward(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    return aggregate(args, kwargs, 1);
}
