/* The segment window's per-batch bookkeeping at training time (trainer/features/window.py): which of a batch's
 * disk-cache rows the buffer holds, where the others sit in the blocks just read, and the buffer's changes.
 * Each was a handful of NumPy passes over the batch's rows (fancy indexing, masks, two binary searches); one
 * C pass each, without the GIL, so the load stage leaves the interpreter to the training loop.
 *
 * window_split(slots, pos, row_slot) -> (held_slots, held_pos, unheld_rows, unheld_pos)
 *     For every k: row r = slots[k] (a row of the segment cache, in [0, len(row_slot))) is held when
 *     row_slot[r] >= 0 (its buffer slot). Held entries give (row_slot[r], pos[k]), the others (r, pos[k]), each
 *     list in k order.
 *
 * rows_in_blocks(blocks, rows, base, row_bytes) -> at (int64) or None
 *     `blocks` (sorted, distinct 4096-byte block numbers) were read back to back into a buffer. Row r occupies
 *     file bytes [base + r * row_bytes, + row_bytes); at[k] is where row rows[k] starts in that buffer, or the
 *     result is None when some row has a block that was not read (blocks of a row are consecutive numbers,
 *     so they are consecutive entries of `blocks` when all are present: the first and the last checked).
 *     Each lookup is a binary search, or, when the blocks span at most WL_DENSE_SPAN x (rows + blocks) block
 *     numbers, an entry of a dense block -> index table built first (the window's case: a batch's blocks lie in
 *     its segment's cache, and a search per row cost more than the rest of the bookkeeping).
 *
 * window_update(row_slot, slot_row, out_rows, in_rows, in_slots)
 *     In place: every out row leaves the buffer (its slot is freed), then for every k in order in_rows[k]
 *     takes slot in_slots[k], whose previous row (if any) leaves, and any other slot the row held is freed
 *     (off schedule a row may enter again while still held). Every index is checked before anything changes.
 *
 * tests/storage_kernels/reference_window.py has the NumPy references (window_split_ref, rows_in_blocks_ref,
 * window_update_ref). */
#include "common.h"
#include "kernels.h"

enum { WL_OK = 0, WL_BAD_ROW = 1, WL_UNSORTED = 2, WL_BAD_SLOT = 3, WL_NOMEM = SK_ERR_NOMEM };

PyObject *sk_window_split(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"slots", "pos", "row_slot", NULL};
    PyObject *slots_obj, *pos_obj, *table_obj;
    Py_buffer slots = {0}, pos = {0}, table = {0};
    PyObject *result = NULL;
    const char *fn = "window_split";
    int64_t *out[4] = {NULL, NULL, NULL, NULL}, bad = -1, held = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:window_split", kwlist, &slots_obj, &pos_obj, &table_obj))
        return NULL;
    if (sk_get_buffer(slots_obj, fn, "slots", SK_INT64, 1, 0, &slots) < 0) goto done;
    if (sk_get_buffer(pos_obj, fn, "pos", SK_INT64, 1, 0, &pos) < 0) goto done;
    if (sk_get_buffer(table_obj, fn, "row_slot", SK_INT64, 1, 0, &table) < 0) goto done;
    const int64_t K = sk_len(&slots), R = sk_len(&table);
    if (sk_check_len(fn, "pos", &pos, K) < 0) goto done;
    for (int i = 0; i < 4; i++)
        if ((out[i] = malloc(sizeof(int64_t) * (size_t)(K > 0 ? K : 1))) == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    const int64_t *s = slots.buf, *p = pos.buf, *t = table.buf;

    Py_BEGIN_ALLOW_THREADS
    bad = sk_first_outside(s, K, R);
    if (bad < 0) {
        int64_t h = 0, u = 0;
        for (int64_t k = 0; k < K; k++) {
            const int64_t slot = t[s[k]];
            if (slot >= 0) {
                out[0][h] = slot;
                out[1][h++] = p[k];
            } else {
                out[2][u] = s[k];
                out[3][u++] = p[k];
            }
        }
        held = h;
    }
    Py_END_ALLOW_THREADS

    if (bad >= 0) {
        sk_raise_index(fn, "slots", "rows of the segment cache", R, bad, s[bad]);
        goto done;
    }
    PyObject *arrays[4];
    const int64_t lens[4] = {held, held, K - held, K - held};
    for (int i = 0; i < 4; i++) {
        arrays[i] = sk_int64_array_from_malloc(out[i], lens[i]);
        out[i] = NULL; /* owned by the array now (or freed on failure) */
        if (arrays[i] == NULL) {
            for (int j = 0; j < i; j++) Py_DECREF(arrays[j]);
            goto done;
        }
    }
    result = Py_BuildValue("(NNNN)", arrays[0], arrays[1], arrays[2], arrays[3]);

done:
    for (int i = 0; i < 4; i++) free(out[i]);
    SK_RELEASE(&slots, &pos, &table);
    return result;
}

#define WL_DENSE_SPAN 4 /* a dense table at most this many entries per row and block looked up */

/* The first k with blocks[k] >= x in blocks[0..m) (m when none). */
static inline int64_t wl_lower_bound(const int64_t *blocks, int64_t m, int64_t x) {
    int64_t lo = 0, hi = m;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (blocks[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

PyObject *sk_rows_in_blocks(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"blocks", "rows", "base", "row_bytes", NULL};
    PyObject *blocks_obj, *rows_obj;
    long long base, row_bytes;
    Py_buffer blocks = {0}, rows = {0};
    PyObject *result = NULL;
    const char *fn = "rows_in_blocks";
    int64_t *at = NULL;
    sk_status st = {0};
    int missing = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOLL:rows_in_blocks", kwlist, &blocks_obj, &rows_obj, &base,
                                     &row_bytes))
        return NULL;
    if (sk_check_min(fn, "base", base, 0) < 0 || sk_check_min(fn, "row_bytes", row_bytes, 1) < 0) return NULL;
    if (sk_get_buffer(blocks_obj, fn, "blocks", SK_INT64, 1, 0, &blocks) < 0) goto done;
    if (sk_get_buffer(rows_obj, fn, "rows", SK_INT64, 1, 0, &rows) < 0) goto done;
    const int64_t m = sk_len(&blocks), K = sk_len(&rows);
    if ((at = malloc(sizeof(int64_t) * (size_t)(K > 0 ? K : 1))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *b = blocks.buf, *r = rows.buf;
    const int64_t A = SK_DIRECT_ALIGN;
    const int64_t b0 = m > 0 ? b[0] : 0, span = m > 0 ? b[m - 1] - b[0] + 1 : 0;
    int64_t *dense = NULL; /* dense[x - b0] = index of block x in blocks, -1 when not read */

    Py_BEGIN_ALLOW_THREADS
    for (int64_t k = 1; k < m; k++)
        if (b[k] <= b[k - 1]) {
            sk_status_set(&st, WL_UNSORTED, 0, 0, k, b[k - 1], b[k], 0);
            break;
        }
    if (st.code == WL_OK && K > 0 && span <= WL_DENSE_SPAN * (K + m) &&
        (dense = malloc(sizeof(int64_t) * (size_t)span)) != NULL) {
        for (int64_t x = 0; x < span; x++) dense[x] = -1;
        for (int64_t k = 0; k < m; k++) dense[b[k] - b0] = k;
    }
    for (int64_t k = 0; st.code == WL_OK && k < K; k++) {
        int64_t off, last_byte;
        if (r[k] < 0 || sk_mul_overflow(r[k], (int64_t)row_bytes, &off) || sk_add_overflow(off, base, &off) ||
            sk_add_overflow(off, (int64_t)row_bytes - 1, &last_byte)) {
            sk_status_set(&st, WL_BAD_ROW, 0, 0, k, r[k], 0, 0);
            break;
        }
        const int64_t first = off / A, last = last_byte / A;
        int64_t idx;
        if (dense != NULL) {
            idx = first >= b0 && first - b0 < span ? dense[first - b0] : -1;
            if (idx < 0) idx = m; /* not read */
        } else {
            idx = wl_lower_bound(b, m, first);
        }
        const int64_t end = idx + (last - first);
        if (end >= m || b[idx] != first || b[end] != last) {
            missing = 1;
            break;
        }
        at[k] = idx * A + off % A;
    }
    free(dense);
    Py_END_ALLOW_THREADS

    if (st.code == WL_UNSORTED)
        PyErr_Format(PyExc_ValueError,
                     "%s: 'blocks' expected ascending distinct block numbers (got blocks[%lld]=%lld after %lld)", fn,
                     (long long)st.a, (long long)st.c, (long long)st.b);
    else if (st.code == WL_BAD_ROW)
        PyErr_Format(PyExc_IndexError, "%s: 'rows' expected rows >= 0 whose bytes fit int64 (got rows[%lld]=%lld)",
                     fn, (long long)st.a, (long long)st.b);
    else if (missing)
        result = Py_NewRef(Py_None);
    else {
        result = sk_int64_array_from_malloc(at, K);
        at = NULL;
    }

done:
    free(at);
    SK_RELEASE(&blocks, &rows);
    return result;
}

PyObject *sk_window_update(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"row_slot", "slot_row", "out_rows", "in_rows", "in_slots", NULL};
    PyObject *rs_obj, *sr_obj, *out_obj, *in_obj, *slot_obj;
    Py_buffer rs = {0}, sr = {0}, out = {0}, in = {0}, slots = {0};
    PyObject *result = NULL;
    const char *fn = "window_update";
    sk_status st = {0};

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOO:window_update", kwlist, &rs_obj, &sr_obj, &out_obj,
                                     &in_obj, &slot_obj))
        return NULL;
    if (sk_get_buffer(rs_obj, fn, "row_slot", SK_INT64, 1, 1, &rs) < 0) goto done;
    if (sk_get_buffer(sr_obj, fn, "slot_row", SK_INT64, 1, 1, &sr) < 0) goto done;
    if (sk_get_buffer(out_obj, fn, "out_rows", SK_INT64, 1, 0, &out) < 0) goto done;
    if (sk_get_buffer(in_obj, fn, "in_rows", SK_INT64, 1, 0, &in) < 0) goto done;
    if (sk_get_buffer(slot_obj, fn, "in_slots", SK_INT64, 1, 0, &slots) < 0) goto done;
    const int64_t R = sk_len(&rs), S = sk_len(&sr), n_out = sk_len(&out), n_in = sk_len(&in);
    if (sk_check_len(fn, "in_slots", &slots, n_in) < 0) goto done;
    int64_t *row_slot = rs.buf, *slot_row = sr.buf;
    const int64_t *o = out.buf, *ir = in.buf, *is = slots.buf;

    Py_BEGIN_ALLOW_THREADS
    int64_t bad;
    if ((bad = sk_first_outside(o, n_out, R)) >= 0) sk_status_set(&st, WL_BAD_ROW, 0, 0, bad, o[bad], 0, 0);
    else if ((bad = sk_first_outside(ir, n_in, R)) >= 0) sk_status_set(&st, WL_BAD_ROW, 0, 1, bad, ir[bad], 0, 0);
    else if ((bad = sk_first_outside(is, n_in, S)) >= 0) sk_status_set(&st, WL_BAD_SLOT, 0, 0, bad, is[bad], 0, 0);
    if (st.code == WL_OK) {
        for (int64_t k = 0; k < n_out; k++) {
            const int64_t slot = row_slot[o[k]];
            if (slot >= 0 && slot < S) slot_row[slot] = -1;
            row_slot[o[k]] = -1;
        }
        for (int64_t k = 0; k < n_in; k++) {
            const int64_t row = ir[k], slot = is[k];
            const int64_t previous = slot_row[slot], held = row_slot[row];
            if (previous >= 0 && previous < R) row_slot[previous] = -1;
            if (held >= 0 && held < S) slot_row[held] = -1;
            slot_row[slot] = row;
            row_slot[row] = slot;
        }
    }
    Py_END_ALLOW_THREADS

    if (st.code == WL_BAD_ROW)
        sk_raise_index(fn, st.order ? "in_rows" : "out_rows", "rows of the segment cache", R, st.a, st.b);
    else if (st.code == WL_BAD_SLOT)
        sk_raise_index(fn, "in_slots", "buffer slots", S, st.a, st.b);
    else
        result = Py_NewRef(Py_None);

done:
    SK_RELEASE(&rs, &sr, &out, &in, &slots);
    return result;
}
