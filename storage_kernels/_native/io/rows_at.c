/* Rows at byte offsets of a flat byte buffer: the block-aligned feature layout (hyperbatch policy).
 *
 * place_rows_at: out[offsets[k] : offsets[k] + row_bytes] = bytes of rows[k]   (writing the layout)
 * gather_rows_at: bytes of out[k] = src[offsets[k] : offsets[k] + row_bytes]   (reading rows of read blocks)
 *
 * A row of a 2-D C-contiguous array of any element type is `shape[1] * itemsize` bytes. Every offset is
 * checked before the first byte is copied (the output is untouched on an error); place_rows_at also needs
 * ascending, non-overlapping destinations, so the result never depends on the thread count. The copies are
 * split into contiguous k ranges, one per thread, each copying at least 1 MiB. */
#include <string.h>

#include "common.h"
#include "kernels.h"

enum { RA_OK = 0, RA_BAD_OFFSET = 1, RA_OVERLAP = 2 };

#define RA_MIN_BYTES_PER_THREAD (1 << 20)

typedef struct {
    char *dst;
    const char *src;
    const int64_t *offsets;
    int64_t K;
    size_t row_bytes;
    int place; /* 1: rows -> offsets of dst; 0: offsets of src -> rows */
} rows_at_ctx;

static void rows_at_task(void *p, int tid, int nthreads) {
    const rows_at_ctx *c = (const rows_at_ctx *)p;
    const int64_t lo = c->K * tid / nthreads, hi = c->K * (tid + 1) / nthreads;
    const size_t rb = c->row_bytes;
    for (int64_t k = lo; k < hi; k++) {
        if (c->place)
            memcpy(c->dst + c->offsets[k], c->src + (size_t)k * rb, rb);
        else
            memcpy(c->dst + (size_t)k * rb, c->src + c->offsets[k], rb);
    }
}

/* Without the GIL: the first k whose row [offsets[k], offsets[k] + row_bytes) leaves [0, nbytes), or (when
 * `ascending`) starts before the previous row ends; sets st and stops there. */
static void check_offsets(const int64_t *off, int64_t K, int64_t row_bytes, int64_t nbytes, int ascending,
                          sk_status *st) {
    const int64_t last = nbytes - row_bytes; /* the largest valid offset (negative: none is) */
    for (int64_t k = 0; k < K; k++) {
        if (off[k] < 0 || off[k] > last) {
            sk_status_set(st, RA_BAD_OFFSET, 0, k, k, off[k], 0, 0);
            return;
        }
        if (ascending && k > 0 && off[k] < off[k - 1] + row_bytes) {
            sk_status_set(st, RA_OVERLAP, 0, k, k, off[k], off[k - 1], 0);
            return;
        }
    }
}

static PyObject *rows_at(PyObject *args, PyObject *kwargs, int place) {
    static char *place_kw[] = {"rows", "offsets", "out", "num_threads", NULL};
    static char *gather_kw[] = {"src", "offsets", "out", "num_threads", NULL};
    const char *fn = place ? "place_rows_at" : "gather_rows_at";
    PyObject *a_obj, *off_obj, *out_obj;
    Py_ssize_t num_threads = 0;
    Py_buffer a = {0}, off = {0}, out = {0};
    sk_status st = {0};
    int nthreads;
    PyObject *result = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, place ? "OOO|n:place_rows_at" : "OOO|n:gather_rows_at",
                                     place ? place_kw : gather_kw, &a_obj, &off_obj, &out_obj, &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    /* place: a = rows (2-D, any type), out = bytes (1-D uint8); gather: a = bytes, out = rows */
    if (place) {
        if (sk_get_buffer(a_obj, fn, "rows", SK_ANY, 2, 0, &a) < 0) goto done;
        if (sk_get_buffer(out_obj, fn, "out", SK_UINT8, 1, 1, &out) < 0) goto done;
    } else {
        if (sk_get_buffer(a_obj, fn, "src", SK_UINT8, 1, 0, &a) < 0) goto done;
        if (sk_get_buffer(out_obj, fn, "out", SK_ANY, 2, 1, &out) < 0) goto done;
    }
    if (sk_get_buffer(off_obj, fn, "offsets", SK_INT64, 1, 0, &off) < 0) goto done;

    const Py_buffer *rows = place ? &a : &out, *bytes = place ? &out : &a;
    const int64_t K = rows->shape[0], row_bytes = (int64_t)rows->shape[1] * rows->itemsize, nbytes = bytes->len;
    if (sk_check_len(fn, "offsets", &off, K) < 0) goto done;
    const int64_t *o = off.buf;

    Py_BEGIN_ALLOW_THREADS
    check_offsets(o, K, row_bytes, nbytes, place, &st);
    if (st.code == 0 && row_bytes > 0 && K > 0) {
        rows_at_ctx ctx = {out.buf, a.buf, o, K, (size_t)row_bytes, place};
        int64_t total = 0;
        if (sk_mul_overflow(K, row_bytes, &total)) total = INT64_MAX;
        sk_parallel(sk_cap_threads(nthreads, total, RA_MIN_BYTES_PER_THREAD), rows_at_task, &ctx);
    }
    Py_END_ALLOW_THREADS

    if (st.code == RA_BAD_OFFSET)
        PyErr_Format(PyExc_IndexError,
                     "%s: 'offsets' expected byte offsets in [0, %lld] (rows of %lld bytes in %lld bytes) "
                     "(got offsets[%lld]=%lld)",
                     fn, (long long)(nbytes - row_bytes), (long long)row_bytes, (long long)nbytes, (long long)st.a,
                     (long long)st.b);
    else if (st.code == RA_OVERLAP)
        PyErr_Format(PyExc_ValueError,
                     "%s: 'offsets' expected ascending rows that do not overlap (%lld bytes each) "
                     "(got offsets[%lld]=%lld after %lld)",
                     fn, (long long)row_bytes, (long long)st.a, (long long)st.b, (long long)st.c);
    else
        result = Py_NewRef(Py_None);

done:
    SK_RELEASE(&a, &off, &out);
    return result;
}

PyObject *sk_place_rows_at(PyObject *self, PyObject *args, PyObject *kwargs) { return rows_at(args, kwargs, 1); }

PyObject *sk_gather_rows_at(PyObject *self, PyObject *args, PyObject *kwargs) { return rows_at(args, kwargs, 0); }
