/* Degree order (reorder stage, strategy `degree`): node ids by degree descending, ties by id ascending.
 *
 * degree_order(indptr, out):   out = the N node ids of the CSR `indptr` (N+1 offsets) sorted by degree
 *                              descending, stably (the order of numpy's argsort(-degrees, kind="stable")).
 *
 * A counting sort in three sequential passes over `indptr` (validate + largest degree, histogram, place), so a
 * memory-mapped `indptr` is streamed and nothing O(N) is allocated besides `out` and the (max degree + 1)
 * counters. Runs without the GIL, single-threaded (the passes are bound by reading `indptr`). */
#include "common.h"
#include "kernels.h"

#include <stdlib.h>

PyObject *sk_degree_order(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"indptr", "out", NULL};
    PyObject *indptr_obj, *out_obj;
    Py_buffer indptr = {0}, out = {0};
    int64_t *start = NULL;
    int64_t bad = -1, max_deg = 0;
    PyObject *result = NULL;
    const char *fn = "degree_order";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO:degree_order", kwlist, &indptr_obj, &out_obj)) return NULL;
    if (sk_get_buffer(indptr_obj, fn, "indptr", SK_INT64, 1, 0, &indptr) < 0) goto done;
    if (sk_get_buffer(out_obj, fn, "out", SK_INT64, 1, 1, &out) < 0) goto done;
    if (sk_len(&indptr) < 1) {
        PyErr_Format(PyExc_ValueError, "degree_order: 'indptr' expected at least 1 entry (got 0)");
        goto done;
    }
    const int64_t n = sk_len(&indptr) - 1;
    if (sk_check_len(fn, "out", &out, n) < 0) goto done;
    const int64_t *ip = indptr.buf;
    int64_t *o = out.buf;

    Py_BEGIN_ALLOW_THREADS
    for (int64_t v = 0; v < n; v++) { /* pass 1: offsets ascending, the largest degree */
        const int64_t d = ip[v + 1] - ip[v];
        if (d < 0) {
            bad = v;
            break;
        }
        if (d > max_deg) max_deg = d;
    }
    if (bad < 0) start = calloc((size_t)max_deg + 1, sizeof(int64_t));
    if (start != NULL) {
        for (int64_t v = 0; v < n; v++) start[ip[v + 1] - ip[v]]++; /* pass 2: histogram */
        int64_t pos = 0; /* first slot of each degree, highest degree first */
        for (int64_t d = max_deg; d >= 0; d--) {
            const int64_t c = start[d];
            start[d] = pos;
            pos += c;
        }
        for (int64_t v = 0; v < n; v++) o[start[ip[v + 1] - ip[v]]++] = v; /* pass 3: ascending ids, stable */
    }
    Py_END_ALLOW_THREADS

    if (bad >= 0)
        PyErr_Format(PyExc_ValueError,
                     "degree_order: 'indptr' expected non-decreasing offsets (got indptr[%lld]=%lld after %lld)",
                     (long long)(bad + 1), (long long)ip[bad + 1], (long long)ip[bad]);
    else if (start == NULL)
        PyErr_NoMemory();
    else
        result = Py_NewRef(Py_None);

done:
    free(start);
    SK_RELEASE(&indptr, &out);
    return result;
}
