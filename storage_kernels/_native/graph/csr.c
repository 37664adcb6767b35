/* CSR construction from edge chunks with bounded memory: pass 1 counts, pass 2 places.
 *
 * Both kernels run over one chunk at a time; the caller keeps counts/cursor (N int64) in memory and may
 * place into a memmap'd `indices`. On an error nothing observable changes: increments already applied
 * to `counts`/`cursor` by this call are rolled back before the exception is raised. */
#include "common.h"
#include "kernels.h"

enum { CSR_OK = 0, CSR_BAD_SRC = 1, CSR_BAD_CURSOR = 2 };

PyObject *sk_csr_count(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"src", "counts", NULL};
    PyObject *src_obj, *counts_obj;
    Py_buffer src = {0}, counts = {0};
    sk_status st = {0};
    PyObject *result = NULL;
    const char *fn = "csr_count";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO:csr_count", kwlist, &src_obj, &counts_obj)) return NULL;
    if (sk_get_buffer(src_obj, fn, "src", SK_INT64, 1, 0, &src) < 0) goto done;
    if (sk_get_buffer(counts_obj, fn, "counts", SK_INT64, 1, 1, &counts) < 0) goto done;

    const int64_t *s = (const int64_t *)src.buf;
    int64_t *cnt = (int64_t *)counts.buf;
    const int64_t E = sk_len(&src), N = sk_len(&counts);

    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < E; i++) {
        const int64_t v = s[i];
        if ((uint64_t)v >= (uint64_t)N) {
            for (int64_t j = i - 1; j >= 0; j--) cnt[s[j]]--;
            sk_status_set(&st, CSR_BAD_SRC, 0, i, i, v, 0, 0);
            break;
        }
        cnt[v]++;
    }
    Py_END_ALLOW_THREADS

    if (st.code == CSR_BAD_SRC)
        sk_raise_index(fn, "src", "node ids", N, st.a, st.b);
    else
        result = Py_NewRef(Py_None);

done:
    SK_RELEASE(&src, &counts);
    return result;
}

PyObject *sk_csr_place(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"src", "dst", "cursor", "indices", NULL};
    PyObject *src_obj, *dst_obj, *cursor_obj, *indices_obj;
    Py_buffer src = {0}, dst = {0}, cursor = {0}, indices = {0};
    sk_status st = {0};
    PyObject *result = NULL;
    const char *fn = "csr_place";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO:csr_place", kwlist, &src_obj, &dst_obj, &cursor_obj,
                                     &indices_obj))
        return NULL;
    if (sk_get_buffer(src_obj, fn, "src", SK_INT64, 1, 0, &src) < 0) goto done;
    if (sk_get_buffer(dst_obj, fn, "dst", SK_INT64, 1, 0, &dst) < 0) goto done;
    if (sk_get_buffer(cursor_obj, fn, "cursor", SK_INT64, 1, 1, &cursor) < 0) goto done;
    if (sk_get_buffer(indices_obj, fn, "indices", SK_INT64, 1, 1, &indices) < 0) goto done;
    if (sk_len(&src) != sk_len(&dst)) {
        PyErr_Format(PyExc_ValueError, "csr_place: 'dst' expected the length of 'src' (%lld) (got %lld)",
                     (long long)sk_len(&src), (long long)sk_len(&dst));
        goto done;
    }

    const int64_t *s = (const int64_t *)src.buf, *d = (const int64_t *)dst.buf;
    int64_t *cur = (int64_t *)cursor.buf, *ind = (int64_t *)indices.buf;
    const int64_t E = sk_len(&src), N = sk_len(&cursor), M = sk_len(&indices);

    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < E; i++) {
        const int64_t v = s[i];
        if ((uint64_t)v >= (uint64_t)N) {
            sk_status_set(&st, CSR_BAD_SRC, 0, i, i, v, 0, 0);
        } else {
            const int64_t c = cur[v];
            if ((uint64_t)c >= (uint64_t)M) {
                sk_status_set(&st, CSR_BAD_CURSOR, 0, i, i, v, c, 0);
            } else {
                ind[c] = d[i];
                cur[v] = c + 1;
                continue;
            }
        }
        for (int64_t j = i - 1; j >= 0; j--) cur[s[j]]--;
        break;
    }
    Py_END_ALLOW_THREADS

    if (st.code == CSR_BAD_SRC)
        sk_raise_index(fn, "src", "node ids", N, st.a, st.b);
    else if (st.code == CSR_BAD_CURSOR)
        PyErr_Format(PyExc_IndexError,
                     "csr_place: 'cursor' expected positions in [0, %lld) (len(indices)) "
                     "(got cursor[%lld]=%lld at edge %lld; more edges than counted for this node?)",
                     (long long)M, (long long)st.b, (long long)st.c, (long long)st.a);
    else
        result = Py_NewRef(Py_None);

done:
    SK_RELEASE(&src, &dst, &cursor, &indices);
    return result;
}

/* ---- csr_dedupe: sort every row and drop repeated neighbours, in place ------------------------------------ */

enum { DD_BAD_PTR = 1 };
#define DD_ROWS_PER_CLAIM 4096
#define DD_SMALL_ROW 24 /* insertion sort up to this many entries, qsort beyond */

typedef struct {
    const int64_t *ptr; /* R + 1 offsets into ind, from ptr[0] */
    int64_t *ind;
    int64_t *counts; /* out: kept entries of each row */
    int64_t R;
    atomic_llong next;
} dedupe_ctx;

static int dd_cmp(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sort v[0..n) and keep each value once at the front; returns how many were kept. */
static int64_t dd_row(int64_t *v, int64_t n) {
    if (n < 2) return n;
    if (n <= DD_SMALL_ROW) {
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
        qsort(v, (size_t)n, sizeof(int64_t), dd_cmp);
    }
    int64_t k = 1;
    for (int64_t i = 1; i < n; i++)
        if (v[i] != v[k - 1]) v[k++] = v[i];
    return k;
}

static void dedupe_task(void *arg, int tid, int nthreads) {
    dedupe_ctx *c = arg;
    const int64_t base = c->ptr[0];
    int64_t lo, hi;
    (void)tid;
    (void)nthreads;
    while (sk_claim(&c->next, c->R, DD_ROWS_PER_CLAIM, &lo, &hi))
        for (int64_t r = lo; r < hi; r++)
            c->counts[r] = dd_row(c->ind + (c->ptr[r] - base), c->ptr[r + 1] - c->ptr[r]);
}

PyObject *sk_csr_dedupe(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"indptr", "indices", "counts", "num_threads", NULL};
    PyObject *ptr_obj, *ind_obj, *counts_obj;
    Py_ssize_t num_threads = 0;
    Py_buffer ptr = {0}, ind = {0}, counts = {0};
    int nthreads;
    PyObject *result = NULL;
    const char *fn = "csr_dedupe";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|n:csr_dedupe", kwlist, &ptr_obj, &ind_obj, &counts_obj,
                                     &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (sk_get_buffer(ptr_obj, fn, "indptr", SK_INT64, 1, 0, &ptr) < 0) goto done;
    if (sk_get_buffer(ind_obj, fn, "indices", SK_INT64, 1, 1, &ind) < 0) goto done;
    if (sk_get_buffer(counts_obj, fn, "counts", SK_INT64, 1, 1, &counts) < 0) goto done;
    const int64_t R = sk_len(&ptr) - 1, M = sk_len(&ind);
    const int64_t *p = ptr.buf;
    if (R < 0) {
        PyErr_SetString(PyExc_ValueError, "csr_dedupe: 'indptr' expected at least 1 entry (got 0)");
        goto done;
    }
    if (sk_check_len(fn, "counts", &counts, R) < 0) goto done;
    for (int64_t r = 0; r < R; r++) {
        if (p[r + 1] < p[r] || p[r + 1] - p[0] > M) {
            PyErr_Format(PyExc_ValueError,
                         "csr_dedupe: 'indptr' expected ascending offsets within len(indices)=%lld from indptr[0] "
                         "(got indptr[%lld]=%lld after %lld)",
                         (long long)M, (long long)(r + 1), (long long)p[r + 1], (long long)p[r]);
            goto done;
        }
    }
    nthreads = sk_cap_threads(nthreads, R, DD_ROWS_PER_CLAIM);
    dedupe_ctx ctx = {p, ind.buf, counts.buf, R, 0};
    int64_t kept = 0;

    Py_BEGIN_ALLOW_THREADS
    sk_parallel(nthreads, dedupe_task, &ctx);
    /* compact the kept prefix of every row to the front, in row order (destinations never pass sources) */
    int64_t *v = ind.buf;
    const int64_t *cnt = counts.buf;
    for (int64_t r = 0; r < R; r++) {
        const int64_t from = p[r] - p[0];
        if (from != kept && cnt[r]) memmove(v + kept, v + from, (size_t)cnt[r] * sizeof(int64_t));
        kept += cnt[r];
    }
    Py_END_ALLOW_THREADS

    result = PyLong_FromLongLong((long long)kept);

done:
    SK_RELEASE(&ptr, &ind, &counts);
    return result;
}
