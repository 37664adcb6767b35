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
