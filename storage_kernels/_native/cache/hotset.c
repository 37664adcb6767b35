/* The hyperbatch hotset's access bookkeeping over one chunk of an access trace (the plan's simulation of
 * trainer.features.hotset.Hotset).
 *
 * count_hits(ids, hot, counts) -> int
 *
 * For every k: counts[ids[k]] += 1.0, and the result counts the k with hot[ids[k]]. hot (N,) bool, counts (N,)
 * float64 (written). Every id is checked against [0, N) before anything changes (IndexError naming the first
 * bad one; counts untouched). Single-threaded without the GIL (a scatter of += 1: threads would race).
 * tests/storage_kernels/test_native_hotset.py count_hits_ref is the reference. */
#include "common.h"
#include "kernels.h"

PyObject *sk_count_hits(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"ids", "hot", "counts", NULL};
    PyObject *ids_obj, *hot_obj, *counts_obj;
    Py_buffer ids = {0}, hot = {0}, counts = {0};
    PyObject *result = NULL;
    const char *fn = "count_hits";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:count_hits", kwlist, &ids_obj, &hot_obj, &counts_obj))
        return NULL;
    if (sk_get_buffer(ids_obj, fn, "ids", SK_INT64, 1, 0, &ids) < 0) goto done;
    if (sk_get_typed(hot_obj, fn, "hot", '?', 1, "a bool", 0, &hot) < 0) goto done;
    if (sk_get_typed(counts_obj, fn, "counts", 'd', 8, "a float64", 1, &counts) < 0) goto done;
    const int64_t n = sk_len(&ids), N = sk_len(&hot);
    if (sk_check_len(fn, "counts", &counts, N) < 0) goto done;
    const int64_t *id = ids.buf;
    const unsigned char *h = hot.buf;
    double *c = counts.buf;
    int64_t hits = 0, bad;

    Py_BEGIN_ALLOW_THREADS
    bad = sk_first_outside(id, n, N);
    if (bad < 0) {
        for (int64_t k = 0; k < n; k++) {
            const int64_t v = id[k];
            hits += h[v] != 0;
            c[v] += 1.0;
        }
    }
    Py_END_ALLOW_THREADS

    if (bad >= 0)
        sk_raise_index(fn, "ids", "node ids", N, bad, id[bad]);
    else
        result = PyLong_FromLongLong((long long)hits);

done:
    SK_RELEASE(&ids, &hot, &counts);
    return result;
}
