/* Row gather: out[k] = src[idx[k]] for 2-D C-contiguous arrays of any element type.
 *
 * Every id is checked before the first byte is copied (out is untouched on IndexError); the copy is split
 * into contiguous k ranges, one per thread. */
#include "common.h"
#include "kernels.h"

#include <string.h>

enum { GR_OK = 0, GR_BAD_ID = 1 };

#define GR_MIN_BYTES_PER_THREAD (1 << 20)

typedef struct {
    const char *src;
    const int64_t *idx;
    char *out;
    int64_t K, N, row_bytes;
} gather_ctx;

static void gather_task(void *p, int tid, int nthreads) {
    gather_ctx *c = (gather_ctx *)p;
    const int64_t lo = c->K * tid / nthreads, hi = c->K * (tid + 1) / nthreads;
    const size_t rb = (size_t)c->row_bytes;
    for (int64_t k = lo; k < hi; k++) {
        if (k + 8 < hi) __builtin_prefetch(c->src + (size_t)c->idx[k + 8] * rb);
        memcpy(c->out + (size_t)k * rb, c->src + (size_t)c->idx[k] * rb, rb);
    }
}

PyObject *sk_gather_rows(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"src", "idx", "out", "num_threads", NULL};
    PyObject *src_obj, *idx_obj, *out_obj;
    Py_ssize_t num_threads = 0;
    Py_buffer src = {0}, idx = {0}, out = {0};
    sk_status st = {0};
    int nthreads;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|n:gather_rows", kwlist, &src_obj, &idx_obj, &out_obj,
                                     &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads("gather_rows", num_threads)) < 0) return NULL;
    if (sk_get_buffer(src_obj, "gather_rows", "src", SK_ANY, 2, 0, &src) < 0) goto fail;
    if (sk_get_buffer(idx_obj, "gather_rows", "idx", SK_INT64, 1, 0, &idx) < 0) goto fail;
    if (sk_get_buffer(out_obj, "gather_rows", "out", SK_ANY, 2, 1, &out) < 0) goto fail;

    const int64_t K = sk_len(&idx), N = src.shape[0];
    if (out.shape[0] != K || out.shape[1] != src.shape[1]) {
        PyErr_Format(PyExc_ValueError, "gather_rows: 'out' expected shape (%lld, %lld) (got (%lld, %lld))",
                     (long long)K, (long long)src.shape[1], (long long)out.shape[0], (long long)out.shape[1]);
        goto fail;
    }
    if (out.itemsize != src.itemsize || strcmp(sk_format(&out), sk_format(&src)) != 0) {
        PyErr_Format(PyExc_ValueError, "gather_rows: 'out' expected the element type of 'src' ('%s') (got '%s')",
                     sk_format(&src), sk_format(&out));
        goto fail;
    }
    gather_ctx ctx = {src.buf, idx.buf, out.buf, K, N, (int64_t)src.shape[1] * src.itemsize};

    Py_BEGIN_ALLOW_THREADS
    for (int64_t k = 0; k < K; k++) {
        if ((uint64_t)ctx.idx[k] >= (uint64_t)N) {
            sk_status_set(&st, GR_BAD_ID, 0, k, k, ctx.idx[k], 0, 0);
            break;
        }
    }
    if (st.code == 0 && ctx.row_bytes > 0) {
        int64_t total = 0;
        if (sk_mul_overflow(K, ctx.row_bytes, &total)) total = INT64_MAX;
        sk_parallel(sk_cap_threads(nthreads, total, GR_MIN_BYTES_PER_THREAD), gather_task, &ctx);
    }
    Py_END_ALLOW_THREADS

    if (st.code == GR_BAD_ID) {
        PyErr_Format(PyExc_IndexError, "gather_rows: 'idx' expected row ids in [0, %lld) (got idx[%lld]=%lld)",
                     (long long)N, (long long)st.a, (long long)st.b);
        goto fail;
    }
    sk_release(&src);
    sk_release(&idx);
    sk_release(&out);
    Py_RETURN_NONE;

fail:
    sk_release(&src);
    sk_release(&idx);
    sk_release(&out);
    return NULL;
}
