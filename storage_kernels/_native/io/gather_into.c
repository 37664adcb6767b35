/* Row gathers into given rows of the output: a batch's host rows go straight to their node-order position.
 *
 * gather_rows_into(src, idx, out, pos):     out[pos[k]] = src[idx[k]]          (2-D src: a cache, a chunk)
 * gather_rows_at_into(src, offsets, out, pos): out[pos[k]] = the row at byte offsets[k] of src
 *                                                                              (flat uint8 src: read blocks)
 *
 * `out` is 2-D C-contiguous, writable; a row is `out.shape[1] * itemsize` bytes (of the same element type as
 * src in the 2-D form). Every index and offset is checked, and `pos` must name distinct rows, before the first
 * byte is copied (out is untouched on an error), so the result never depends on the thread count. The copy is
 * split into contiguous k ranges, one per thread, each copying at least 1 MiB. */
#include <string.h>

#include "common.h"
#include "kernels.h"

enum { GI_OK = 0, GI_BAD_IDX = 1, GI_BAD_OFFSET = 2, GI_BAD_POS = 3, GI_DUP_POS = 4, GI_NOMEM = 5 };

#define GI_MIN_BYTES_PER_THREAD (1 << 20)

typedef struct {
    char *out;
    const char *src;
    const int64_t *pos, *offsets;
    int64_t K;
    size_t row_bytes;
} at_into_ctx;

static void at_into_task(void *p, int tid, int nthreads) {
    const at_into_ctx *c = (const at_into_ctx *)p;
    const int64_t lo = c->K * tid / nthreads, hi = c->K * (tid + 1) / nthreads;
    const size_t rb = c->row_bytes;
    for (int64_t k = lo; k < hi; k++) {
        if (k + 8 < hi) __builtin_prefetch(c->src + c->offsets[k + 8]);
        memcpy(c->out + (size_t)c->pos[k] * rb, c->src + c->offsets[k], rb);
    }
}

/* Without the GIL: the first k with pos[k] outside [0, M) or naming a row an earlier k named; sets st. */
static void check_pos(const int64_t *pos, int64_t K, int64_t M, sk_status *st) {
    if (K == 0) return;
    unsigned char *seen = calloc((size_t)(M > 0 ? M : 1), 1);
    if (seen == NULL) {
        sk_status_set(st, GI_NOMEM, 0, 0, 0, 0, 0, 0);
        return;
    }
    for (int64_t k = 0; k < K; k++) {
        const int64_t p = pos[k];
        if ((uint64_t)p >= (uint64_t)M) {
            sk_status_set(st, GI_BAD_POS, 0, k, k, p, 0, 0);
            break;
        }
        if (seen[p]) {
            sk_status_set(st, GI_DUP_POS, 0, k, k, p, 0, 0);
            break;
        }
        seen[p] = 1;
    }
    free(seen);
}

/* Without the GIL: the first k whose row [offsets[k], offsets[k] + row_bytes) leaves [0, nbytes); sets st. */
static void check_offsets(const int64_t *off, int64_t K, int64_t row_bytes, int64_t nbytes, sk_status *st) {
    const int64_t last = nbytes - row_bytes; /* the largest valid offset (negative: none is) */
    for (int64_t k = 0; k < K; k++)
        if (off[k] < 0 || off[k] > last) {
            sk_status_set(st, GI_BAD_OFFSET, 0, k, k, off[k], 0, 0);
            return;
        }
}

static PyObject *gather_into(PyObject *args, PyObject *kwargs, int at) {
    static char *rows_kw[] = {"src", "idx", "out", "pos", "num_threads", NULL};
    static char *at_kw[] = {"src", "offsets", "out", "pos", "num_threads", NULL};
    const char *fn = at ? "gather_rows_at_into" : "gather_rows_into";
    const char *iname = at ? "offsets" : "idx";
    PyObject *src_obj, *idx_obj, *out_obj, *pos_obj;
    Py_ssize_t num_threads = 0;
    Py_buffer src = {0}, idx = {0}, out = {0}, pos = {0};
    sk_status st = {0};
    int nthreads;
    PyObject *result = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, at ? "OOOO|n:gather_rows_at_into" : "OOOO|n:gather_rows_into",
                                     at ? at_kw : rows_kw, &src_obj, &idx_obj, &out_obj, &pos_obj, &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (sk_get_buffer(src_obj, fn, "src", at ? SK_UINT8 : SK_ANY, at ? 1 : 2, 0, &src) < 0) goto done;
    if (sk_get_buffer(idx_obj, fn, iname, SK_INT64, 1, 0, &idx) < 0) goto done;
    if (sk_get_buffer(out_obj, fn, "out", SK_ANY, 2, 1, &out) < 0) goto done;
    if (sk_get_buffer(pos_obj, fn, "pos", SK_INT64, 1, 0, &pos) < 0) goto done;

    const int64_t K = sk_len(&idx), M = out.shape[0], row_bytes = (int64_t)out.shape[1] * out.itemsize;
    if (sk_check_len(fn, "pos", &pos, K) < 0) goto done;
    if (!at) {
        if (out.shape[1] != src.shape[1]) {
            PyErr_Format(PyExc_ValueError, "%s: 'out' expected %lld columns like 'src' (got %lld)", fn,
                         (long long)src.shape[1], (long long)out.shape[1]);
            goto done;
        }
        if (sk_check_same_type(fn, "out", &out, "src", &src) < 0) goto done;
    }
    const int64_t *id = idx.buf, *ps = pos.buf, N = at ? src.len : src.shape[0];

    Py_BEGIN_ALLOW_THREADS
    if (at) {
        check_offsets(id, K, row_bytes, N, &st);
    } else {
        const int64_t bad = sk_first_outside(id, K, N);
        if (bad >= 0) sk_status_set(&st, GI_BAD_IDX, 0, bad, bad, id[bad], 0, 0);
    }
    if (st.code == 0) check_pos(ps, K, M, &st);
    if (st.code == 0 && K > 0 && row_bytes > 0) {
        if (at) {
            at_into_ctx ctx = {out.buf, src.buf, ps, id, K, (size_t)row_bytes};
            int64_t total = 0;
            if (sk_mul_overflow(K, row_bytes, &total)) total = INT64_MAX;
            sk_parallel(sk_cap_threads(nthreads, total, GI_MIN_BYTES_PER_THREAD), at_into_task, &ctx);
        } else {
            sk_copy_rows(out.buf, ps, src.buf, id, K, row_bytes, nthreads);
        }
    }
    Py_END_ALLOW_THREADS

    switch (st.code) {
    case GI_BAD_IDX:
        sk_raise_index(fn, "idx", "row ids", N, st.a, st.b);
        break;
    case GI_BAD_OFFSET:
        PyErr_Format(PyExc_IndexError,
                     "%s: 'offsets' expected byte offsets in [0, %lld] (rows of %lld bytes in %lld bytes) "
                     "(got offsets[%lld]=%lld)",
                     fn, (long long)(N - row_bytes), (long long)row_bytes, (long long)N, (long long)st.a,
                     (long long)st.b);
        break;
    case GI_BAD_POS:
        sk_raise_index(fn, "pos", "rows of 'out'", M, st.a, st.b);
        break;
    case GI_DUP_POS:
        PyErr_Format(PyExc_ValueError, "%s: 'pos' expected distinct rows of 'out' (got pos[%lld]=%lld again)", fn,
                     (long long)st.a, (long long)st.b);
        break;
    case GI_NOMEM:
        PyErr_NoMemory();
        break;
    default:
        result = Py_NewRef(Py_None);
    }

done:
    SK_RELEASE(&src, &idx, &out, &pos);
    return result;
}

PyObject *sk_gather_rows_into(PyObject *self, PyObject *args, PyObject *kwargs) {
    return gather_into(args, kwargs, 0);
}

PyObject *sk_gather_rows_at_into(PyObject *self, PyObject *args, PyObject *kwargs) {
    return gather_into(args, kwargs, 1);
}
