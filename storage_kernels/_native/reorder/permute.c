/* External permutation kernels (reorder stage): relabel ids, group rows by destination bucket, place rows.
 *
 * relabel_ids(ids, inverse, out):            out[k] = inverse[ids[k]]
 * bucket_rows(rows, keys, bounds, out_rows, out_keys, counts):
 *     stable counting sort of the rows of a chunk by bucket, where bucket b holds keys in
 *     [bounds[b], bounds[b+1]); counts[b] = rows of bucket b; rows of bucket b are
 *     out_rows[sum(counts[:b]) : sum(counts[:b+1])] in input order (out_keys alongside).
 * place_rows(rows, pos, out):                out[pos[k]] = rows[k]; every pos distinct (ValueError otherwise)
 *
 * Every id/key is validated before the first byte is written; the copies run without the GIL, split into
 * contiguous ranges per thread, so the result never depends on the number of threads. */
#include "common.h"
#include "kernels.h"

#include <stdlib.h>
#include <string.h>

enum { PM_OK = 0, PM_BAD_ID = 1, PM_BAD_KEY = 2, PM_DUP = 3 };

#define PM_MIN_ITEMS_PER_THREAD (1 << 16)

/* ---- relabel_ids --------------------------------------------------------------------------------------- */

typedef struct {
    const int64_t *ids, *inverse;
    int64_t *out;
    int64_t K, N;
    sk_status st[64];
} relabel_ctx;

static void relabel_task(void *p, int tid, int nthreads) {
    relabel_ctx *c = (relabel_ctx *)p;
    const int64_t lo = c->K * tid / nthreads, hi = c->K * (tid + 1) / nthreads;
    for (int64_t k = lo; k < hi; k++) {
        const int64_t v = c->ids[k];
        if ((uint64_t)v >= (uint64_t)c->N) {
            sk_status_set(&c->st[tid], PM_BAD_ID, 0, k, k, v, 0, 0);
            return;
        }
        c->out[k] = c->inverse[v];
    }
}

PyObject *sk_relabel_ids(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"ids", "inverse", "out", "num_threads", NULL};
    PyObject *ids_obj, *inv_obj, *out_obj;
    Py_ssize_t num_threads = 0;
    Py_buffer ids = {0}, inv = {0}, out = {0};
    sk_status st = {0};
    int nthreads;
    relabel_ctx *ctx = NULL;
    PyObject *result = NULL;
    const char *fn = "relabel_ids";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|n:relabel_ids", kwlist, &ids_obj, &inv_obj, &out_obj,
                                     &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (sk_get_buffer(ids_obj, fn, "ids", SK_INT64, 1, 0, &ids) < 0) goto done;
    if (sk_get_buffer(inv_obj, fn, "inverse", SK_INT64, 1, 0, &inv) < 0) goto done;
    if (sk_get_buffer(out_obj, fn, "out", SK_INT64, 1, 1, &out) < 0) goto done;
    if (sk_check_len(fn, "out", &out, sk_len(&ids)) < 0) goto done;
    if (nthreads > 64) nthreads = 64;
    if ((ctx = calloc(1, sizeof(relabel_ctx))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    ctx->ids = ids.buf;
    ctx->inverse = inv.buf;
    ctx->out = out.buf;
    ctx->K = sk_len(&ids);
    ctx->N = sk_len(&inv);

    Py_BEGIN_ALLOW_THREADS
    int nt = sk_cap_threads(nthreads, ctx->K, PM_MIN_ITEMS_PER_THREAD);
    sk_parallel(nt, relabel_task, ctx);
    for (int t = 0; t < nt; t++) sk_status_merge(&st, &ctx->st[t]);
    Py_END_ALLOW_THREADS

    if (st.code == PM_BAD_ID)
        sk_raise_index(fn, "ids", "ids", ctx->N, st.a, st.b);
    else
        result = Py_NewRef(Py_None);

done:
    free(ctx);
    SK_RELEASE(&ids, &inv, &out);
    return result;
}

/* ---- bucket_rows --------------------------------------------------------------------------------------- */

/* Bucket of `key` given ascending bounds[0..nb] (bounds[0] <= key < bounds[nb]): largest b with bounds[b] <= key. */
static inline int64_t bucket_of(const int64_t *bounds, int64_t nb, int64_t key) {
    int64_t lo = 0, hi = nb; /* invariant: bounds[lo] <= key < bounds[hi] */
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (bounds[mid] <= key) lo = mid;
        else hi = mid;
    }
    return lo;
}

typedef struct {
    const char *rows;
    const int64_t *keys, *bounds;
    char *out_rows;
    int64_t *out_keys;
    int64_t R, NB, row_bytes;
    int64_t *bucket;  /* R: bucket of each row */
    int64_t *hist;    /* nthreads x NB: counts, then start cursors */
} bucket_ctx;

static void bucket_count_task(void *p, int tid, int nthreads) {
    bucket_ctx *c = (bucket_ctx *)p;
    const int64_t lo = c->R * tid / nthreads, hi = c->R * (tid + 1) / nthreads;
    int64_t *h = c->hist + (int64_t)tid * c->NB;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t b = bucket_of(c->bounds, c->NB, c->keys[r]);
        c->bucket[r] = b;
        h[b]++;
    }
}

static void bucket_scatter_task(void *p, int tid, int nthreads) {
    bucket_ctx *c = (bucket_ctx *)p;
    const int64_t lo = c->R * tid / nthreads, hi = c->R * (tid + 1) / nthreads;
    int64_t *cur = c->hist + (int64_t)tid * c->NB;
    const size_t rb = (size_t)c->row_bytes;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t dst = cur[c->bucket[r]]++;
        c->out_keys[dst] = c->keys[r];
        if (rb) memcpy(c->out_rows + (size_t)dst * rb, c->rows + (size_t)r * rb, rb);
    }
}

PyObject *sk_bucket_rows(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"rows", "keys", "bounds", "out_rows", "out_keys", "counts", "num_threads", NULL};
    PyObject *rows_obj, *keys_obj, *bounds_obj, *orows_obj, *okeys_obj, *counts_obj;
    Py_ssize_t num_threads = 0;
    Py_buffer rows = {0}, keys = {0}, bounds = {0}, orows = {0}, okeys = {0}, counts = {0};
    int64_t *bucket = NULL, *hist = NULL;
    sk_status st = {0};
    int nthreads;
    PyObject *result = NULL;
    const char *fn = "bucket_rows";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOO|n:bucket_rows", kwlist, &rows_obj, &keys_obj,
                                     &bounds_obj, &orows_obj, &okeys_obj, &counts_obj, &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (sk_get_buffer(rows_obj, fn, "rows", SK_ANY, 2, 0, &rows) < 0) goto done;
    if (sk_get_buffer(keys_obj, fn, "keys", SK_INT64, 1, 0, &keys) < 0) goto done;
    if (sk_get_buffer(bounds_obj, fn, "bounds", SK_INT64, 1, 0, &bounds) < 0) goto done;
    if (sk_get_buffer(orows_obj, fn, "out_rows", SK_ANY, 2, 1, &orows) < 0) goto done;
    if (sk_get_buffer(okeys_obj, fn, "out_keys", SK_INT64, 1, 1, &okeys) < 0) goto done;
    if (sk_get_buffer(counts_obj, fn, "counts", SK_INT64, 1, 1, &counts) < 0) goto done;

    const int64_t R = rows.shape[0], NB = sk_len(&bounds) - 1;
    if (sk_check_len(fn, "keys", &keys, R) < 0) goto done;
    if (orows.shape[0] != R || orows.shape[1] != rows.shape[1]) {
        PyErr_Format(PyExc_ValueError, "bucket_rows: 'out_rows' expected shape (%lld, %lld) (got (%lld, %lld))",
                     (long long)R, (long long)rows.shape[1], (long long)orows.shape[0], (long long)orows.shape[1]);
        goto done;
    }
    if (sk_check_same_type(fn, "out_rows", &orows, "rows", &rows) < 0 || sk_check_len(fn, "out_keys", &okeys, R) < 0)
        goto done;
    if (NB < 1) {
        PyErr_Format(PyExc_ValueError, "bucket_rows: 'bounds' expected at least 2 entries (got %lld)",
                     (long long)(NB + 1));
        goto done;
    }
    if (sk_check_len(fn, "counts", &counts, NB) < 0) goto done;
    const int64_t *bd = bounds.buf;
    for (int64_t b = 0; b < NB; b++) {
        if (bd[b + 1] < bd[b]) {
            PyErr_Format(PyExc_ValueError,
                         "bucket_rows: 'bounds' expected ascending values (got bounds[%lld]=%lld after %lld)",
                         (long long)(b + 1), (long long)bd[b + 1], (long long)bd[b]);
            goto done;
        }
    }
    if (nthreads > 64) nthreads = 64;
    nthreads = sk_cap_threads(nthreads, R, PM_MIN_ITEMS_PER_THREAD);
    int64_t hist_len;
    if (sk_mul_overflow(NB, nthreads, &hist_len)) hist_len = INT64_MAX;
    bucket = malloc((size_t)(R > 0 ? R : 1) * sizeof(int64_t));
    hist = hist_len < INT64_MAX / 8 ? calloc((size_t)hist_len, sizeof(int64_t)) : NULL;
    if (bucket == NULL || hist == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    bucket_ctx ctx = {rows.buf, keys.buf, bd, orows.buf, okeys.buf, R, NB,
                      (int64_t)rows.shape[1] * rows.itemsize, bucket, hist};

    Py_BEGIN_ALLOW_THREADS
    const int64_t *kv = keys.buf;
    for (int64_t r = 0; r < R; r++) {
        if (kv[r] < bd[0] || kv[r] >= bd[NB]) {
            sk_status_set(&st, PM_BAD_KEY, 0, r, r, kv[r], 0, 0);
            break;
        }
    }
    if (st.code == 0) {
        sk_parallel(nthreads, bucket_count_task, &ctx);
        /* Start cursor of (thread t, bucket b) = rows of buckets < b + rows of bucket b in threads < t:
         * rows keep their input order inside a bucket. */
        int64_t *cnt = counts.buf, offset = 0;
        for (int64_t b = 0; b < NB; b++) {
            int64_t total = 0;
            for (int t = 0; t < nthreads; t++) {
                const int64_t h = hist[(int64_t)t * NB + b];
                hist[(int64_t)t * NB + b] = offset + total;
                total += h;
            }
            cnt[b] = total;
            offset += total;
        }
        sk_parallel(nthreads, bucket_scatter_task, &ctx);
    }
    Py_END_ALLOW_THREADS

    if (st.code == PM_BAD_KEY)
        PyErr_Format(PyExc_IndexError, "bucket_rows: 'keys' expected keys in [%lld, %lld) (got keys[%lld]=%lld)",
                     (long long)bd[0], (long long)bd[NB], (long long)st.a, (long long)st.b);
    else
        result = Py_NewRef(Py_None);

done:
    free(bucket);
    free(hist);
    SK_RELEASE(&rows, &keys, &bounds, &orows, &okeys, &counts);
    return result;
}

/* ---- place_rows ---------------------------------------------------------------------------------------- */

PyObject *sk_place_rows(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"rows", "pos", "out", "num_threads", NULL};
    PyObject *rows_obj, *pos_obj, *out_obj;
    Py_ssize_t num_threads = 0;
    Py_buffer rows = {0}, pos = {0}, out = {0};
    unsigned char *seen = NULL;
    sk_status st = {0};
    int nthreads;
    PyObject *result = NULL;
    const char *fn = "place_rows";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|n:place_rows", kwlist, &rows_obj, &pos_obj, &out_obj,
                                     &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (sk_get_buffer(rows_obj, fn, "rows", SK_ANY, 2, 0, &rows) < 0) goto done;
    if (sk_get_buffer(pos_obj, fn, "pos", SK_INT64, 1, 0, &pos) < 0) goto done;
    if (sk_get_buffer(out_obj, fn, "out", SK_ANY, 2, 1, &out) < 0) goto done;

    const int64_t K = rows.shape[0], M = out.shape[0];
    if (sk_check_len(fn, "pos", &pos, K) < 0) goto done;
    if (out.shape[1] != rows.shape[1] || out.itemsize != rows.itemsize ||
        strcmp(sk_format(&out), sk_format(&rows)) != 0) {
        PyErr_Format(PyExc_ValueError,
                     "place_rows: 'out' expected %lld columns of '%s' like 'rows' (got %lld columns of '%s')",
                     (long long)rows.shape[1], sk_format(&rows), (long long)out.shape[1], sk_format(&out));
        goto done;
    }
    seen = calloc((size_t)(M > 0 ? M : 1), 1);
    if (seen == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *ps = pos.buf;

    Py_BEGIN_ALLOW_THREADS
    for (int64_t k = 0; k < K; k++) {
        const int64_t p = ps[k];
        if ((uint64_t)p >= (uint64_t)M) {
            sk_status_set(&st, PM_BAD_ID, 0, k, k, p, 0, 0);
            break;
        }
        if (seen[p]) {
            sk_status_set(&st, PM_DUP, 0, k, k, p, 0, 0);
            break;
        }
        seen[p] = 1;
    }
    if (st.code == 0) sk_copy_rows(out.buf, ps, rows.buf, NULL, K, (int64_t)rows.shape[1] * rows.itemsize, nthreads);
    Py_END_ALLOW_THREADS

    if (st.code == PM_BAD_ID)
        sk_raise_index(fn, "pos", "positions", M, st.a, st.b);
    else if (st.code == PM_DUP)
        PyErr_Format(PyExc_ValueError, "place_rows: 'pos' expected distinct positions (got pos[%lld]=%lld twice)",
                     (long long)st.a, (long long)st.b);
    else
        result = Py_NewRef(Py_None);

done:
    free(seen);
    SK_RELEASE(&rows, &pos, &out);
    return result;
}
