/* The 4096-byte blocks a set of rows of a file needs, and where each row lands once they are read back to
 * back (trainer/features: the file tier's and the disk-cache tier's merged reads).
 *
 * blocks_for_rows(rows, base, row_bytes) -> (blocks, at) or None
 *
 * Row r spans file bytes [base + r * row_bytes, + row_bytes). blocks are the distinct blocks holding any of
 * `rows` (ascending); at[k] is where row rows[k] starts in a buffer of those blocks read back to back (a row's
 * blocks are consecutive numbers, so they are consecutive there). Rows may repeat and come in any order.
 * With a dense table over the blocks' span: mark, then number the marked blocks, then look each row up,
 * O(k + span) without the GIL, where NumPy sorted the rows' blocks (np.unique) and searched each row
 * (searchsorted). None when the span exceeds BK_DENSE_ROWS x k + BK_DENSE_MIN blocks (rows far apart: the
 * caller sorts instead). IndexError for a negative row or an offset beyond int64.
 * tests/storage_kernels/test_native_blocks.py checks it against storage_kernels.arrays.blocks_of_rows and
 * trainer.features.base.block_positions. */
#include "common.h"
#include "kernels.h"

#include <string.h>

#define BK_DENSE_ROWS 16      /* span allowed per row looked up */
#define BK_DENSE_MIN (1 << 20) /* and at least this many blocks (9 MiB of tables) */

enum { BK_OK = 0, BK_BAD_ROW = 1, BK_SPARSE = 2, BK_NOMEM = SK_ERR_NOMEM };

PyObject *sk_blocks_for_rows(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"rows", "base", "row_bytes", NULL};
    PyObject *rows_obj;
    long long base, row_bytes;
    Py_buffer rows = {0};
    PyObject *result = NULL;
    const char *fn = "blocks_for_rows";
    int64_t *blocks = NULL, *at = NULL, m = 0;
    sk_status st = {0};

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLL:blocks_for_rows", kwlist, &rows_obj, &base, &row_bytes))
        return NULL;
    if (sk_check_min(fn, "base", base, 0) < 0 || sk_check_min(fn, "row_bytes", row_bytes, 1) < 0) return NULL;
    if (sk_get_buffer(rows_obj, fn, "rows", SK_INT64, 1, 0, &rows) < 0) return NULL;
    const int64_t K = sk_len(&rows), A = SK_DIRECT_ALIGN, rb = (int64_t)row_bytes;
    const int64_t *r = rows.buf;
    if ((at = malloc(sizeof(int64_t) * (size_t)(K > 0 ? K : 1))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }

    Py_BEGIN_ALLOW_THREADS
    int64_t lo = INT64_MAX, hi = -1;
    for (int64_t k = 0; k < K; k++) { /* each row's byte offset (kept in at) and the blocks' span */
        int64_t off, end;
        if (r[k] < 0 || sk_mul_overflow(r[k], rb, &off) || sk_add_overflow(off, (int64_t)base, &off) ||
            sk_add_overflow(off, rb - 1, &end)) {
            sk_status_set(&st, BK_BAD_ROW, 0, 0, k, r[k], 0, 0);
            break;
        }
        at[k] = off;
        if (off / A < lo) lo = off / A;
        if (end / A > hi) hi = end / A;
    }
    const int64_t span = K > 0 ? hi - lo + 1 : 0;
    if (st.code == BK_OK && span > BK_DENSE_ROWS * K + BK_DENSE_MIN) sk_status_set(&st, BK_SPARSE, 0, 0, 0, 0, 0, 0);
    int64_t *index = NULL; /* index[x] = the number of block lo + x among the marked, -1 when unmarked */
    if (st.code == BK_OK && K > 0) {
        index = malloc(sizeof(int64_t) * (size_t)span);
        if (index == NULL) sk_status_set(&st, BK_NOMEM, 0, 0, 0, 0, 0, 0);
    }
    if (st.code == BK_OK && K > 0) {
        for (int64_t x = 0; x < span; x++) index[x] = -1;
        for (int64_t k = 0; k < K; k++)
            for (int64_t b = at[k] / A; b <= (at[k] + rb - 1) / A; b++) index[b - lo] = 0;
        for (int64_t x = 0; x < span; x++)
            if (index[x] == 0) index[x] = m++ + 1; /* numbers from 1 while counting; shifted below */
        blocks = malloc(sizeof(int64_t) * (size_t)(m > 0 ? m : 1));
        if (blocks == NULL) {
            sk_status_set(&st, BK_NOMEM, 0, 0, 0, 0, 0, 0);
        } else {
            for (int64_t x = 0; x < span; x++)
                if (index[x] > 0) blocks[--index[x]] = lo + x;
            for (int64_t k = 0; k < K; k++) at[k] = index[at[k] / A - lo] * A + at[k] % A;
        }
    }
    free(index);
    Py_END_ALLOW_THREADS

    if (st.code == BK_BAD_ROW) {
        PyErr_Format(PyExc_IndexError, "%s: 'rows' expected rows >= 0 whose bytes fit int64 (got rows[%lld]=%lld)",
                     fn, (long long)st.a, (long long)st.b);
    } else if (st.code == BK_NOMEM) {
        PyErr_NoMemory();
    } else if (st.code == BK_SPARSE) {
        result = Py_NewRef(Py_None);
    } else {
        if (K == 0 && (blocks = malloc(sizeof(int64_t))) == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        PyObject *b = sk_int64_array_from_malloc(blocks, m);
        blocks = NULL;
        if (b == NULL) goto done;
        PyObject *a = sk_int64_array_from_malloc(at, K);
        at = NULL;
        if (a == NULL) {
            Py_DECREF(b);
            goto done;
        }
        result = Py_BuildValue("(NN)", b, a);
    }

done:
    free(blocks);
    free(at);
    SK_RELEASE(&rows);
    return result;
}
