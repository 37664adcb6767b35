/* Filtered ranking for link prediction (trainer/link/metrics.py).
 *
 * filtered_ranks(scores, targets, sources, indptr, indices, out):
 *     for every query q (row q of the (Q, N) float32 `scores`: the score of edge (sources[q], j) for every
 *     node j), the candidates sources[q] itself and its neighbours in the CSR (the known true edges) other
 *     than targets[q] are filtered out (their scores set to -inf in place), then
 *     out[q] = 1 + #{j : scores[q, j] > scores[q, t]} + 0.5 * #{j != t : scores[q, j] == scores[q, t]}
 *     with t = targets[q] (ties count half: a constant scorer gets the middle rank, not the best one).
 *
 * Validation (ids in range, a well-formed CSR over the N nodes) happens before anything is written; queries
 * are split into contiguous ranges per thread, so the result does not depend on the number of threads. */
#include "common.h"
#include "kernels.h"

#include <math.h>
#include <stdlib.h>

#define RK_MIN_CELLS_PER_THREAD (1 << 18) /* score cells per thread: small calls stay on one thread */

typedef struct {
    float *scores;
    const int64_t *targets, *sources, *indptr, *indices;
    double *out;
    int64_t Q, N;
} rank_ctx;

static void rank_task(void *p, int tid, int nthreads) {
    rank_ctx *c = (rank_ctx *)p;
    const int64_t lo = c->Q * tid / nthreads, hi = c->Q * (tid + 1) / nthreads;
    for (int64_t q = lo; q < hi; q++) {
        float *row = c->scores + q * c->N;
        const int64_t t = c->targets[q], s = c->sources[q];
        for (int64_t k = c->indptr[s]; k < c->indptr[s + 1]; k++) {
            const int64_t j = c->indices[k];
            if (j != t) row[j] = -INFINITY;
        }
        if (s != t) row[s] = -INFINITY;
        const float pos = row[t];
        int64_t greater = 0, equal = 0;
        for (int64_t j = 0; j < c->N; j++) {
            greater += row[j] > pos;
            equal += row[j] == pos;
        }
        c->out[q] = 1.0 + (double)greater + 0.5 * (double)(equal - 1); /* equal counts t itself */
    }
}

PyObject *sk_filtered_ranks(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"scores", "targets", "sources", "indptr", "indices", "out", "num_threads", NULL};
    PyObject *scores_o, *targets_o, *sources_o, *indptr_o, *indices_o, *out_o;
    Py_ssize_t num_threads = 0;
    Py_buffer scores = {0}, targets = {0}, sources = {0}, indptr = {0}, indices = {0}, out = {0};
    sk_status st = {0};
    PyObject *result = NULL;
    const char *fn = "filtered_ranks";
    int nthreads;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOO|n:filtered_ranks", kwlist, &scores_o, &targets_o,
                                     &sources_o, &indptr_o, &indices_o, &out_o, &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (sk_get_buffer(scores_o, fn, "scores", SK_FLOAT32, 2, 1, &scores) < 0) goto done;
    const int64_t Q = (int64_t)scores.shape[0], N = (int64_t)scores.shape[1];
    if (sk_get_buffer(targets_o, fn, "targets", SK_INT64, 1, 0, &targets) < 0) goto done;
    if (sk_get_buffer(sources_o, fn, "sources", SK_INT64, 1, 0, &sources) < 0) goto done;
    if (sk_get_buffer(indptr_o, fn, "indptr", SK_INT64, 1, 0, &indptr) < 0) goto done;
    if (sk_get_buffer(indices_o, fn, "indices", SK_INT64, 1, 0, &indices) < 0) goto done;
    if (sk_get_typed(out_o, fn, "out", 'd', 8, "a float64", 1, &out) < 0) goto done;
    if (sk_check_len(fn, "targets", &targets, Q) < 0 || sk_check_len(fn, "sources", &sources, Q) < 0 ||
        sk_check_len(fn, "out", &out, Q) < 0 || sk_check_len(fn, "indptr", &indptr, N + 1) < 0)
        goto done;
    const int64_t *tg = targets.buf, *sr = sources.buf, *ip = indptr.buf, *ix = indices.buf;
    const int64_t E = sk_len(&indices);
    int64_t bad_t, bad_s;

    Py_BEGIN_ALLOW_THREADS
    bad_t = sk_first_outside(tg, Q, N);
    bad_s = sk_first_outside(sr, Q, N);
    if (bad_t < 0 && bad_s < 0) sk_check_csr(ip, N, ix, E, &st);
    Py_END_ALLOW_THREADS

    if (bad_t >= 0) {
        sk_raise_index(fn, "targets", "node ids", N, bad_t, tg[bad_t]);
        goto done;
    }
    if (bad_s >= 0) {
        sk_raise_index(fn, "sources", "node ids", N, bad_s, sr[bad_s]);
        goto done;
    }
    if (sk_raise_csr_error(fn, &st, N, E) < 0) goto done;

    rank_ctx ctx = {scores.buf, tg, sr, ip, ix, out.buf, Q, N};
    Py_BEGIN_ALLOW_THREADS
    int64_t cells = Q * (N > 0 ? N : 1);
    int nt = sk_cap_threads(nthreads, cells, RK_MIN_CELLS_PER_THREAD);
    if (nt > Q) nt = Q > 0 ? (int)Q : 1;
    sk_parallel(nt, rank_task, &ctx);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);

done:
    SK_RELEASE(&scores, &targets, &sources, &indptr, &indices, &out);
    return result;
}
