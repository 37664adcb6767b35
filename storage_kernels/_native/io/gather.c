/* Row gather: out[k] = src[idx[k]] for 2-D C-contiguous arrays of any element type.
 *
 * Every id is checked before the first byte is copied (out is untouched on IndexError); the copy
 * (sk_copy_rows) is split into contiguous k ranges, one per thread. */
#include "common.h"
#include "kernels.h"

enum { GR_OK = 0, GR_BAD_ID = 1 };

PyObject *sk_gather_rows(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"src", "idx", "out", "num_threads", NULL};
    PyObject *src_obj, *idx_obj, *out_obj;
    Py_ssize_t num_threads = 0;
    Py_buffer src = {0}, idx = {0}, out = {0};
    sk_status st = {0};
    int nthreads;
    PyObject *result = NULL;
    const char *fn = "gather_rows";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|n:gather_rows", kwlist, &src_obj, &idx_obj, &out_obj,
                                     &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (sk_get_buffer(src_obj, fn, "src", SK_ANY, 2, 0, &src) < 0) goto done;
    if (sk_get_buffer(idx_obj, fn, "idx", SK_INT64, 1, 0, &idx) < 0) goto done;
    if (sk_get_buffer(out_obj, fn, "out", SK_ANY, 2, 1, &out) < 0) goto done;

    const int64_t K = sk_len(&idx), N = src.shape[0];
    if (out.shape[0] != K || out.shape[1] != src.shape[1]) {
        PyErr_Format(PyExc_ValueError, "gather_rows: 'out' expected shape (%lld, %lld) (got (%lld, %lld))",
                     (long long)K, (long long)src.shape[1], (long long)out.shape[0], (long long)out.shape[1]);
        goto done;
    }
    if (sk_check_same_type(fn, "out", &out, "src", &src) < 0) goto done;
    const int64_t *id = idx.buf;

    Py_BEGIN_ALLOW_THREADS
    const int64_t bad = sk_first_outside(id, K, N);
    if (bad >= 0) sk_status_set(&st, GR_BAD_ID, 0, bad, bad, id[bad], 0, 0);
    if (st.code == 0) sk_copy_rows(out.buf, NULL, src.buf, id, K, (int64_t)src.shape[1] * src.itemsize, nthreads);
    Py_END_ALLOW_THREADS

    if (st.code == GR_BAD_ID)
        sk_raise_index(fn, "idx", "row ids", N, st.a, st.b);
    else
        result = Py_NewRef(Py_None);

done:
    SK_RELEASE(&src, &idx, &out);
    return result;
}
