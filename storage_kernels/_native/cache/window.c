/* The segment window: a bounded in-memory buffer of one DiskGNN segment disk cache's rows, scheduled offline
 * from the segment's known access trace (every block read at most once while it stays useful).
 *
 * window_schedule(batch_ptr, rows, num_rows, row_bytes, buffer_rows)
 *     -> (read_ptr, read_blocks, in_ptr, in_rows, in_slots, out_ptr, out_rows, hits)
 *
 * The segment cache is num_rows rows of row_bytes bytes in a block-aligned region (row r at bytes
 * [r * row_bytes, (r + 1) * row_bytes), so in blocks r * row_bytes / 4096 .. ((r + 1) * row_bytes - 1) / 4096).
 * Iteration i (a batch) needs rows[batch_ptr[i]:batch_ptr[i + 1]] (a row listed twice counts once). The buffer
 * C holds at most K = buffer_rows rows and is empty before iteration 0. Iteration i:
 *
 *   hits[i]      = its distinct rows in C_i (served from the buffer);
 *   read blocks  = the sorted distinct blocks holding its rows not in C_i
 *                  (read_blocks[read_ptr[i]:read_ptr[i + 1]]: what the reader fetches, merged into runs);
 *   arrivals     = the rows not in C_i every block of which is read: its missing rows and their block
 *                  neighbours, which come with the same reads (a free prefetch);
 *   C_{i+1}      = the at most K rows of C_i | arrivals with the smallest key (next use after i, new, row):
 *                  Belady's furthest-next-use eviction; rows never used again in the segment are dropped
 *                  (so the buffer is empty after the segment's last batch), ties keep what is cached.
 *
 * Changes after iteration i: out_rows[out_ptr[i]:out_ptr[i + 1]] = C_i - C_{i+1} in ascending slot order (their
 * slots are freed first); in_rows[in_ptr[i]:in_ptr[i + 1]] = C_{i+1} - C_i in ascending row order, in_slots the
 * buffer slots they take: the smallest free ones, ascending. Every in-row was read by iteration i.
 *
 * The next use of every row comes from a CSR of (row x iteration) occurrences (count, prefix sum, fill) and one
 * cursor per row, advanced as iterations read it (a row not read at i still points past i). Work per iteration
 * O(K + batch + arrivals) (the kept set is a quickselect), memory ~17 bytes per row + 8 per occurrence + 8 per
 * block. Single-threaded (iterations depend on each other), without the GIL: segments are independent and can
 * run on several Python threads. tests/storage_kernels/reference_window.py reimplements the rule. */
#include "common.h"
#include "kernels.h"

#include <string.h>

enum { WS_OK = 0, WS_BAD_PTR = 1, WS_BAD_ROW = 2, WS_TOO_BIG = 3, WS_NOMEM = SK_ERR_NOMEM };

#define WS_INF INT64_MAX

/* per-row state bits */
#define WS_CACHED 1u /* in the buffer C_i */
#define WS_SEEN 2u   /* met in the current batch */
#define WS_KEEP 4u   /* chosen for C_{i+1} */

typedef struct {
    int64_t *data, n, cap;
} ws_vec;

static int ws_push(ws_vec *v, int64_t x) {
    if (v->n == v->cap) {
        const int64_t cap = v->cap ? 2 * v->cap : 1024;
        int64_t *d = realloc(v->data, sizeof(int64_t) * (size_t)cap);
        if (d == NULL) return -1;
        v->data = d;
        v->cap = cap;
    }
    v->data[v->n++] = x;
    return 0;
}

typedef struct {
    int64_t key, row, cached; /* cached: 0 (ties keep cached rows first) or 1 (new) */
} ws_cand;

static inline int ws_less(const ws_cand *a, const ws_cand *b) {
    if (a->key != b->key) return a->key < b->key;
    if (a->cached != b->cached) return a->cached < b->cached;
    return a->row < b->row;
}

static inline void ws_swap(ws_cand *a, ws_cand *b) {
    const ws_cand t = *a;
    *a = *b;
    *b = t;
}

/* Reorder v[0:m) so that v[0:k) are the k smallest (keys are distinct: rows differ). */
static void ws_select(ws_cand *v, int64_t m, int64_t k) {
    int64_t lo = 0, hi = m - 1;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (ws_less(&v[mid], &v[lo])) ws_swap(&v[mid], &v[lo]);
        if (ws_less(&v[hi], &v[lo])) ws_swap(&v[hi], &v[lo]);
        if (ws_less(&v[mid], &v[hi])) ws_swap(&v[mid], &v[hi]);
        const ws_cand pivot = v[hi];
        int64_t store = lo;
        for (int64_t i = lo; i < hi; i++)
            if (ws_less(&v[i], &pivot)) ws_swap(&v[i], &v[store++]);
        ws_swap(&v[store], &v[hi]);
        if (store == k || store == k - 1) return;
        if (store < k) lo = store + 1;
        else hi = store - 1;
    }
}

static int ws_cmp_int64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

typedef struct {
    const int64_t *ptr, *rows;
    int64_t S, N, K, row_bytes;
    ws_vec read_blocks, in_rows, in_slots, out_rows;
    int64_t *read_ptr, *in_ptr, *out_ptr, *hits; /* (S + 1,), hits (S,) */
} ws_job;

/* The whole schedule without the GIL on validated inputs; returns WS_OK or WS_NOMEM. */
static int ws_run(ws_job *j) {
    const int64_t S = j->S, N = j->N, rb = j->row_bytes, A = SK_DIRECT_ALIGN;
    const int64_t *ptr = j->ptr, *rows = j->rows;
    const int64_t NB = (N * rb + A - 1) / A; /* blocks of the region */
    const int64_t K = j->K < N ? j->K : N;   /* more slots than rows are never used */
    int code = WS_OK;
    uint8_t *state = calloc((size_t)(N > 0 ? N : 1), 1);
    int64_t *occ_ptr = calloc((size_t)N + 1, sizeof(int64_t)), *cur = NULL, *occ = NULL, *stamp = NULL;
    int64_t *slot_row = NULL;
    ws_cand *cands = NULL;
    ws_vec blocks = {0}, arrived = {0};
    int64_t cap_cands = 0;
    if (!state || !occ_ptr) goto nomem;

    /* occurrences: distinct rows per iteration (count, prefix sum, fill) */
    for (int64_t i = 0; i < S; i++) {
        for (int64_t p = ptr[i]; p < ptr[i + 1]; p++) {
            const int64_t r = rows[p];
            if (state[r] & WS_SEEN) continue;
            state[r] |= WS_SEEN;
            occ_ptr[r + 1]++;
        }
        for (int64_t p = ptr[i]; p < ptr[i + 1]; p++) state[rows[p]] &= (uint8_t)~WS_SEEN;
    }
    for (int64_t r = 0; r < N; r++) occ_ptr[r + 1] += occ_ptr[r];
    cur = malloc(sizeof(int64_t) * (size_t)(N > 0 ? N : 1));
    occ = malloc(sizeof(int64_t) * (size_t)(occ_ptr[N] > 0 ? occ_ptr[N] : 1));
    stamp = malloc(sizeof(int64_t) * (size_t)(NB > 0 ? NB : 1));
    slot_row = malloc(sizeof(int64_t) * (size_t)(K > 0 ? K : 1));
    if (!cur || !occ || !stamp || !slot_row) goto nomem;
    memcpy(cur, occ_ptr, sizeof(int64_t) * (size_t)N);
    for (int64_t i = 0; i < S; i++) {
        for (int64_t p = ptr[i]; p < ptr[i + 1]; p++) {
            const int64_t r = rows[p];
            if (state[r] & WS_SEEN) continue;
            state[r] |= WS_SEEN;
            occ[cur[r]++] = i;
        }
        for (int64_t p = ptr[i]; p < ptr[i + 1]; p++) state[rows[p]] &= (uint8_t)~WS_SEEN;
    }
    memcpy(cur, occ_ptr, sizeof(int64_t) * (size_t)N); /* back to each row's first occurrence */
    for (int64_t b = 0; b < NB; b++) stamp[b] = -1;
    for (int64_t s = 0; s < K; s++) slot_row[s] = -1;

    j->read_ptr[0] = j->in_ptr[0] = j->out_ptr[0] = 0;
    for (int64_t i = 0; i < S; i++) {
        /* hits, and the blocks of the missing rows */
        int64_t hits = 0;
        blocks.n = 0;
        for (int64_t p = ptr[i]; p < ptr[i + 1]; p++) {
            const int64_t r = rows[p];
            if (state[r] & WS_SEEN) continue;
            state[r] |= WS_SEEN;
            if (state[r] & WS_CACHED) {
                hits++;
                continue;
            }
            for (int64_t b = r * rb / A; b <= ((r + 1) * rb - 1) / A; b++)
                if (stamp[b] != i) {
                    stamp[b] = i;
                    if (ws_push(&blocks, b) < 0) goto nomem;
                }
        }
        j->hits[i] = hits;
        qsort(blocks.data, (size_t)blocks.n, sizeof(int64_t), ws_cmp_int64);
        for (int64_t k = 0; k < blocks.n; k++)
            if (ws_push(&j->read_blocks, blocks.data[k]) < 0) goto nomem;
        j->read_ptr[i + 1] = j->read_blocks.n;
        /* past iteration i: advance the cursors of its rows */
        for (int64_t p = ptr[i]; p < ptr[i + 1]; p++) {
            const int64_t r = rows[p];
            if (!(state[r] & WS_SEEN)) continue;
            state[r] &= (uint8_t)~WS_SEEN;
            cur[r]++;
        }
        /* arrivals: uncached rows whose blocks were all read, ascending */
        arrived.n = 0;
        int64_t last = -1;
        for (int64_t k = 0; k < blocks.n; k++) {
            const int64_t b = blocks.data[k];
            const int64_t lo = b * A / rb, hi0 = ((b + 1) * A - 1) / rb, hi = hi0 < N - 1 ? hi0 : N - 1;
            for (int64_t r = lo > last + 1 ? lo : last + 1; r <= hi; r++) {
                last = r;
                if (state[r] & WS_CACHED) continue;
                int whole = 1;
                for (int64_t c = r * rb / A; c <= ((r + 1) * rb - 1) / A && whole; c++) whole = stamp[c] == i;
                if (whole && ws_push(&arrived, r) < 0) goto nomem;
            }
        }
        /* candidates with a next use: the buffer's rows, then the arrivals */
        if (K + arrived.n > cap_cands) {
            cap_cands = K + arrived.n;
            ws_cand *c = realloc(cands, sizeof(ws_cand) * (size_t)(cap_cands > 0 ? cap_cands : 1));
            if (c == NULL) goto nomem;
            cands = c;
        }
        int64_t m = 0;
        for (int64_t s = 0; s < K; s++) {
            const int64_t r = slot_row[s];
            if (r < 0 || cur[r] == occ_ptr[r + 1]) continue;
            cands[m++] = (ws_cand){occ[cur[r]], r, 0};
        }
        for (int64_t k = 0; k < arrived.n; k++) {
            const int64_t r = arrived.data[k];
            if (cur[r] == occ_ptr[r + 1]) continue;
            cands[m++] = (ws_cand){occ[cur[r]], r, 1};
        }
        if (m > K) {
            ws_select(cands, m, K);
            m = K;
        }
        for (int64_t c = 0; c < m; c++) state[cands[c].row] |= WS_KEEP;
        /* outs in slot order, then ins in row order into the smallest free slots */
        for (int64_t s = 0; s < K; s++) {
            const int64_t r = slot_row[s];
            if (r < 0 || (state[r] & WS_KEEP)) continue;
            if (ws_push(&j->out_rows, r) < 0) goto nomem;
            state[r] &= (uint8_t)~WS_CACHED;
            slot_row[s] = -1;
        }
        int64_t free_slot = 0;
        for (int64_t k = 0; k < arrived.n; k++) {
            const int64_t r = arrived.data[k];
            if (!(state[r] & WS_KEEP)) continue;
            while (slot_row[free_slot] >= 0) free_slot++; /* |C_{i+1}| <= K: a free slot exists */
            if (ws_push(&j->in_rows, r) < 0 || ws_push(&j->in_slots, free_slot) < 0) goto nomem;
            slot_row[free_slot] = r;
            state[r] |= WS_CACHED;
        }
        for (int64_t c = 0; c < m; c++) state[cands[c].row] &= (uint8_t)~WS_KEEP;
        j->in_ptr[i + 1] = j->in_rows.n;
        j->out_ptr[i + 1] = j->out_rows.n;
    }
    goto done;

nomem:
    code = WS_NOMEM;
done:
    free(state);
    free(occ_ptr);
    free(cur);
    free(occ);
    free(stamp);
    free(slot_row);
    free(cands);
    free(blocks.data);
    free(arrived.data);
    return code;
}

/* A 1-D int64 array owning v's data (consumed). */
static PyObject *ws_array_vec(ws_vec *v) {
    int64_t *p = v->data;
    const int64_t n = v->n;
    v->data = NULL;
    v->n = v->cap = 0;
    if (p == NULL) p = malloc(sizeof(int64_t));
    if (p == NULL) return PyErr_NoMemory();
    return sk_int64_array_from_malloc(p, n);
}

static PyObject *ws_array_raw(int64_t **data, int64_t n) {
    int64_t *p = *data;
    *data = NULL;
    return sk_int64_array_from_malloc(p, n);
}

PyObject *sk_window_schedule(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"batch_ptr", "rows", "num_rows", "row_bytes", "buffer_rows", NULL};
    PyObject *ptr_obj, *rows_obj;
    long long num_rows, row_bytes, buffer_rows;
    Py_buffer ptr = {0}, rows = {0};
    sk_status st = {0};
    ws_job job = {0};
    PyObject *result = NULL;
    const char *fn = "window_schedule";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOLLL:window_schedule", kwlist, &ptr_obj, &rows_obj, &num_rows,
                                     &row_bytes, &buffer_rows))
        return NULL;
    if (sk_check_min(fn, "num_rows", num_rows, 0) < 0 || sk_check_min(fn, "row_bytes", row_bytes, 1) < 0 ||
        sk_check_min(fn, "buffer_rows", buffer_rows, 0) < 0)
        return NULL;
    int64_t region;
    if (sk_mul_overflow(num_rows, row_bytes, &region) || region > INT64_MAX - SK_DIRECT_ALIGN) {
        PyErr_Format(PyExc_ValueError, "%s: 'num_rows' x 'row_bytes' expected to fit in int64 (got %lld x %lld)", fn,
                     num_rows, row_bytes);
        return NULL;
    }
    if (sk_get_buffer(ptr_obj, fn, "batch_ptr", SK_INT64, 1, 0, &ptr) < 0) goto done;
    if (sk_get_buffer(rows_obj, fn, "rows", SK_INT64, 1, 0, &rows) < 0) goto done;
    if (sk_len(&ptr) < 1) {
        PyErr_Format(PyExc_ValueError, "%s: 'batch_ptr' expected at least 1 entry (got 0)", fn);
        goto done;
    }
    job.ptr = ptr.buf;
    job.rows = rows.buf;
    job.S = sk_len(&ptr) - 1;
    job.N = num_rows;
    job.K = buffer_rows;
    job.row_bytes = row_bytes;
    const int64_t T = sk_len(&rows);
    job.read_ptr = malloc(sizeof(int64_t) * (size_t)(job.S + 1));
    job.in_ptr = malloc(sizeof(int64_t) * (size_t)(job.S + 1));
    job.out_ptr = malloc(sizeof(int64_t) * (size_t)(job.S + 1));
    job.hits = malloc(sizeof(int64_t) * (size_t)(job.S > 0 ? job.S : 1));
    if (!job.read_ptr || !job.in_ptr || !job.out_ptr || !job.hits) {
        PyErr_NoMemory();
        goto done;
    }

    Py_BEGIN_ALLOW_THREADS
    if (job.ptr[0] != 0) sk_status_set(&st, WS_BAD_PTR, 0, 0, 0, job.ptr[0], 0, 0);
    for (int64_t i = 0; st.code == 0 && i < job.S; i++)
        if (job.ptr[i + 1] < job.ptr[i] || job.ptr[i + 1] > T)
            sk_status_set(&st, WS_BAD_PTR, 0, i + 1, i + 1, job.ptr[i + 1], 0, 0);
    if (st.code == 0 && job.ptr[job.S] != T) sk_status_set(&st, WS_BAD_PTR, 0, job.S, job.S, job.ptr[job.S], 0, 0);
    if (st.code == 0) {
        const int64_t bad = sk_first_outside(job.rows, T, job.N);
        if (bad >= 0) sk_status_set(&st, WS_BAD_ROW, 0, bad, bad, job.rows[bad], 0, 0);
    }
    if (st.code == 0 && ws_run(&job) == WS_NOMEM) sk_status_set(&st, WS_NOMEM, 0, 0, 0, 0, 0, 0);
    Py_END_ALLOW_THREADS

    if (st.code == WS_BAD_PTR) {
        PyErr_Format(PyExc_ValueError,
                     "%s: 'batch_ptr' expected non-decreasing offsets from 0 to len(rows) = %lld "
                     "(got batch_ptr[%lld]=%lld)",
                     fn, (long long)T, (long long)st.a, (long long)st.b);
        goto done;
    }
    if (st.code == WS_BAD_ROW) {
        sk_raise_index(fn, "rows", "segment rows", job.N, st.a, st.b);
        goto done;
    }
    if (st.code == WS_NOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *read_ptr = ws_array_raw(&job.read_ptr, job.S + 1);
    PyObject *read_blocks = ws_array_vec(&job.read_blocks);
    PyObject *in_ptr = ws_array_raw(&job.in_ptr, job.S + 1);
    PyObject *in_rows = ws_array_vec(&job.in_rows);
    PyObject *in_slots = ws_array_vec(&job.in_slots);
    PyObject *out_ptr = ws_array_raw(&job.out_ptr, job.S + 1);
    PyObject *out_rows = ws_array_vec(&job.out_rows);
    PyObject *hits = ws_array_raw(&job.hits, job.S);
    if (read_ptr && read_blocks && in_ptr && in_rows && in_slots && out_ptr && out_rows && hits)
        result = Py_BuildValue("(NNNNNNNN)", read_ptr, read_blocks, in_ptr, in_rows, in_slots, out_ptr, out_rows,
                               hits);
    else {
        Py_XDECREF(read_ptr);
        Py_XDECREF(read_blocks);
        Py_XDECREF(in_ptr);
        Py_XDECREF(in_rows);
        Py_XDECREF(in_slots);
        Py_XDECREF(out_ptr);
        Py_XDECREF(out_rows);
        Py_XDECREF(hits);
    }

done:
    free(job.read_ptr);
    free(job.in_ptr);
    free(job.out_ptr);
    free(job.hits);
    free(job.read_blocks.data);
    free(job.in_rows.data);
    free(job.in_slots.data);
    free(job.out_rows.data);
    SK_RELEASE(&ptr, &rows);
    return result;
}
