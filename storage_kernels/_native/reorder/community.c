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

enum { LP_OK = 0, LP_BAD_INDPTR = 1, LP_BAD_ID = 2 };

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

static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void sort_i64(int64_t *v, int64_t n) {
    if (n <= 24) {
        for (int64_t i = 1; i < n; i++) {
            const int64_t x = v[i];
            int64_t j = i - 1;
            while (j >= 0 && v[j] > x) {
                v[j + 1] = v[j];
                j--;
            }
            v[j + 1] = x;
        }
    } else {
        qsort(v, (size_t)n, sizeof(int64_t), cmp_i64);
    }
}

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

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOnK|n:label_propagation", kwlist, &indptr_obj, &indices_obj,
                                     &iterations, &seed, &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads("label_propagation", num_threads)) < 0) return NULL;
    if (iterations < 0) {
        PyErr_Format(PyExc_ValueError, "label_propagation: 'iterations' expected >= 0 (got %zd)", iterations);
        return NULL;
    }
    if (sk_get_buffer(indptr_obj, "label_propagation", "indptr", SK_INT64, 1, 0, &indptr) < 0) goto fail;
    if (sk_get_buffer(indices_obj, "label_propagation", "indices", SK_INT64, 1, 0, &indices) < 0) goto fail;
    if (sk_len(&indptr) < 1) {
        PyErr_SetString(PyExc_ValueError, "label_propagation: 'indptr' expected at least 1 entry (got 0)");
        goto fail;
    }
    const int64_t N = sk_len(&indptr) - 1, E = sk_len(&indices);
    const int64_t *ip = indptr.buf, *ix = indices.buf;
    if (ip[0] != 0 || ip[N] != E) {
        PyErr_Format(PyExc_ValueError,
                     "label_propagation: 'indptr' expected to start at 0 and end at len(indices)=%lld "
                     "(got %lld and %lld)", (long long)E, (long long)ip[0], (long long)ip[N]);
        goto fail;
    }
    if (nthreads > 64) nthreads = 64;
    nthreads = sk_cap_threads(nthreads, N, 4 * LP_NODES_PER_CLAIM);
    a = malloc((size_t)(N > 0 ? N : 1) * sizeof(int64_t));
    b = malloc((size_t)(N > 0 ? N : 1) * sizeof(int64_t));
    if (a == NULL || b == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    int64_t max_degree = 0;

    Py_BEGIN_ALLOW_THREADS
    for (int64_t v = 0; v < N; v++) {
        const int64_t d = ip[v + 1] - ip[v];
        if (d < 0 || ip[v + 1] > E) {
            sk_status_set(&st, LP_BAD_INDPTR, 0, v, v + 1, ip[v + 1], ip[v], 0);
            break;
        }
        if (d > max_degree) max_degree = d;
        a[v] = v;
    }
    if (st.code == 0) {
        for (int64_t i = 0; i < E; i++) {
            if ((uint64_t)ix[i] >= (uint64_t)N) {
                sk_status_set(&st, LP_BAD_ID, 0, i, i, ix[i], 0, 0);
                break;
            }
        }
    }
    Py_END_ALLOW_THREADS

    if (st.code == LP_BAD_INDPTR) {
        PyErr_Format(PyExc_ValueError,
                     "label_propagation: 'indptr' expected non-decreasing values <= %lld (got indptr[%lld]=%lld "
                     "after %lld)", (long long)E, (long long)st.a, (long long)st.b, (long long)st.c);
        goto fail;
    }
    if (st.code == LP_BAD_ID) {
        PyErr_Format(PyExc_IndexError, "label_propagation: 'indices' expected ids in [0, %lld) (got indices[%lld]=%lld)",
                     (long long)N, (long long)st.a, (long long)st.b);
        goto fail;
    }
    int64_t per_thread = max_degree > 0 ? max_degree : 1, total_scratch;
    if (sk_mul_overflow(per_thread, nthreads, &total_scratch) || total_scratch > INT64_MAX / 8 ||
        (scratch_all = malloc((size_t)total_scratch * sizeof(int64_t))) == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (int t = 0; t < nthreads; t++) scratch[t] = scratch_all + (int64_t)t * per_thread;

    Py_BEGIN_ALLOW_THREADS
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

    free(b);
    b = NULL;
    free(scratch_all);
    scratch_all = NULL;
    sk_release(&indptr);
    sk_release(&indices);
    PyObject *labels = sk_int64_array_from_malloc(a, N); /* frees a on failure */
    a = NULL;
    if (labels == NULL) return NULL;
    return Py_BuildValue("(Nn)", labels, (Py_ssize_t)rounds);

fail:
    free(a);
    free(b);
    free(scratch_all);
    sk_release(&indptr);
    sk_release(&indices);
    return NULL;
}
