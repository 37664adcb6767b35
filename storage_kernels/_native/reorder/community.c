/* Community detection for the `community` reorder strategy: synchronous (Jacobi) label propagation.
 *
 * label_propagation(indptr, indices, iterations, seed, num_threads=0) -> (labels int64[N], rounds)
 *
 * Round 0 labels: label[v] = v. In every round each node v with neighbours takes, from the previous round's
 * labels, the label that occurs most often among its neighbours (CSR row v, duplicates counted). Ties: v keeps
 * its current label when it is among the most frequent; otherwise the tied label with the smallest
 * mix64(label ^ mix64(seed + G0)) wins (a seeded hash, so small ids are not favoured). Nodes without
 * neighbours keep their label. Rounds stop after `iterations` or at the first round that changes nothing (a
 * fixed point stays fixed, so this does not change the result). `rounds` = rounds that changed something.
 * Each node's new label is a pure function of the previous labels: the result never depends on threads.
 * tests/storage_kernels/reference.py (label_propagation_ref) reimplements exactly this rule. */
#include "common.h"
#include "kernels.h"
#include "rng.h"

#include <stdlib.h>
#include <string.h>

#define LP_NODES_PER_CLAIM 1024

typedef struct {
    const int64_t *indptr, *indices;
    const int64_t *cur;
    int64_t *next;
    int64_t N;
    uint64_t key;
    atomic_llong claim;
    int64_t **scratch; /* per thread, max_degree entries */
    int64_t changed[64];
} lp_ctx;

SK_DEFINE_SORT(sort_i64, int64_t, SK_SORT_SELF)

static void lp_task(void *p, int tid, int nthreads) {
    (void)nthreads;
    lp_ctx *c = (lp_ctx *)p;
    int64_t *buf = c->scratch[tid];
    int64_t start, stop, changed = 0;
    while (sk_claim(&c->claim, c->N, LP_NODES_PER_CLAIM, &start, &stop)) {
        for (int64_t v = start; v < stop; v++) {
            const int64_t b = c->indptr[v], e = c->indptr[v + 1], d = e - b;
            const int64_t own = c->cur[v];
            if (d == 0) {
                c->next[v] = own;
                continue;
            }
            for (int64_t i = 0; i < d; i++) buf[i] = c->cur[c->indices[b + i]];
            sort_i64(buf, d);
            int64_t best = -1, best_count = 0, own_count = 0;
            uint64_t best_hash = 0;
            for (int64_t i = 0; i < d;) {
                int64_t j = i + 1;
                while (j < d && buf[j] == buf[i]) j++;
                const int64_t lab = buf[i], cnt = j - i;
                const uint64_t h = sk_mix64((uint64_t)lab ^ c->key);
                if (lab == own) own_count = cnt;
                if (cnt > best_count || (cnt == best_count && h < best_hash)) {
                    best = lab;
                    best_count = cnt;
                    best_hash = h;
                }
                i = j;
            }
            const int64_t chosen = own_count == best_count ? own : best;
            c->next[v] = chosen;
            changed += chosen != own;
        }
    }
    c->changed[tid] = changed;
}

PyObject *sk_label_propagation(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"indptr", "indices", "iterations", "seed", "num_threads", NULL};
    PyObject *indptr_obj, *indices_obj;
    Py_ssize_t iterations, num_threads = 0;
    unsigned long long seed;
    Py_buffer indptr = {0}, indices = {0};
    int64_t *a = NULL, *b = NULL, *scratch_all = NULL, *scratch[64];
    sk_status st = {0};
    int nthreads;
    int64_t rounds = 0;
    PyObject *result = NULL;
    const char *fn = "label_propagation";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOnK|n:label_propagation", kwlist, &indptr_obj, &indices_obj,
                                     &iterations, &seed, &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0 || sk_check_min(fn, "iterations", iterations, 0) < 0)
        return NULL;
    if (sk_get_csr(fn, indptr_obj, indices_obj, 0, &indptr, &indices) < 0) goto done;
    const int64_t N = sk_len(&indptr) - 1, E = sk_len(&indices);
    const int64_t *ip = indptr.buf, *ix = indices.buf;
    if (nthreads > 64) nthreads = 64;
    nthreads = sk_cap_threads(nthreads, N, 4 * LP_NODES_PER_CLAIM);
    a = malloc((size_t)(N > 0 ? N : 1) * sizeof(int64_t));
    b = malloc((size_t)(N > 0 ? N : 1) * sizeof(int64_t));
    if (a == NULL || b == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t max_degree;

    Py_BEGIN_ALLOW_THREADS
    max_degree = sk_check_csr(ip, N, ix, E, &st);
    Py_END_ALLOW_THREADS

    if (sk_raise_csr_error(fn, &st, N, E) < 0) goto done;
    int64_t per_thread = max_degree > 0 ? max_degree : 1, total_scratch;
    if (sk_mul_overflow(per_thread, nthreads, &total_scratch) || total_scratch > INT64_MAX / 8 ||
        (scratch_all = malloc((size_t)total_scratch * sizeof(int64_t))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int t = 0; t < nthreads; t++) scratch[t] = scratch_all + (int64_t)t * per_thread;

    Py_BEGIN_ALLOW_THREADS
    for (int64_t v = 0; v < N; v++) a[v] = v; /* round 0: every node its own label */
    lp_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.indptr = ip;
    ctx.indices = ix;
    ctx.N = N;
    ctx.key = sk_mix64((uint64_t)seed + SK_RNG_G0);
    ctx.scratch = scratch;
    for (Py_ssize_t it = 0; it < iterations; it++) {
        ctx.cur = a;
        ctx.next = b;
        atomic_store(&ctx.claim, 0);
        memset(ctx.changed, 0, sizeof(ctx.changed));
        sk_parallel(nthreads, lp_task, &ctx);
        int64_t changed = 0;
        for (int t = 0; t < nthreads; t++) changed += ctx.changed[t];
        int64_t *tmp = a;
        a = b;
        b = tmp;
        if (changed == 0) break;
        rounds++;
    }
    Py_END_ALLOW_THREADS

    PyObject *labels = sk_int64_array_from_malloc(a, N); /* frees a on failure */
    a = NULL;
    if (labels != NULL) result = Py_BuildValue("(Nn)", labels, (Py_ssize_t)rounds);

done:
    free(a);
    free(b);
    free(scratch_all);
    SK_RELEASE(&indptr, &indices);
    return result;
}
