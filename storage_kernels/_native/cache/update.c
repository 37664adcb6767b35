/* Ginex's in-place feature-cache update: new cache rows come straight from the batch's rows (no I/O, no
 * gather-then-scatter double copy).
 *
 * cache_update(cache, address_table, batch_rows, in_ids, out_ids, in_positions, num_threads=0)
 *
 * cache (K, F) and batch_rows (n, F) are rows of one element type; address_table (N,) int64 or int32 (half the
 * bytes a node: 400 MB at 100M nodes; then K < 2^31) holds each node's cache slot, -1 when it is not cached.
 * For every k: the slot s of out_ids[k] receives batch_rows[in_positions[k]], address_table[in_ids[k]] = s and
 * address_table[out_ids[k]] = -1.
 *
 * Everything is checked before anything changes (cache and table untouched on error): ids in [0, N),
 * positions in [0, n), every out_id cached in a slot in [0, K), every in_id uncached, no id listed twice.
 * The copies run on up to num_threads threads (sk_copy_rows), without the GIL.
 * tests/storage_kernels/reference_cache.py cache_update_ref is the reference. */
#include "common.h"
#include "kernels.h"

/* The address table, int64 or int32 entries. */
typedef struct {
    void *p;
    int wide;
} cu_table;

static inline int64_t tget(cu_table t, int64_t i) {
    return t.wide ? ((const int64_t *)t.p)[i] : (int64_t)((const int32_t *)t.p)[i];
}

static inline void tset(cu_table t, int64_t i, int64_t v) {
    if (t.wide)
        ((int64_t *)t.p)[i] = v;
    else
        ((int32_t *)t.p)[i] = (int32_t)v;
}

enum { CU_OK = 0, CU_BAD_IN = 1, CU_BAD_OUT = 2, CU_BAD_POS = 3, CU_NOT_CACHED = 4, CU_CACHED = 5,
       CU_DUP_OUT = 6, CU_DUP_IN = 7, CU_NOMEM = SK_ERR_NOMEM };

PyObject *sk_cache_update(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"cache", "address_table", "batch_rows", "in_ids", "out_ids", "in_positions",
                             "num_threads", NULL};
    PyObject *cache_obj, *addr_obj, *rows_obj, *in_obj, *out_obj, *pos_obj;
    Py_ssize_t num_threads = 0;
    Py_buffer cache = {0}, addr = {0}, rows = {0}, in = {0}, out = {0}, pos = {0};
    sk_status st = {0};
    int nthreads;
    PyObject *result = NULL;
    const char *fn = "cache_update";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOO|n:cache_update", kwlist, &cache_obj, &addr_obj, &rows_obj,
                                     &in_obj, &out_obj, &pos_obj, &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (sk_get_buffer(cache_obj, fn, "cache", SK_ANY, 2, 1, &cache) < 0) goto done;
    int wide;
    if (sk_get_int_table(addr_obj, fn, "address_table", 1, &addr, &wide) < 0) goto done;
    if (sk_get_buffer(rows_obj, fn, "batch_rows", SK_ANY, 2, 0, &rows) < 0) goto done;
    if (sk_get_buffer(in_obj, fn, "in_ids", SK_INT64, 1, 0, &in) < 0) goto done;
    if (sk_get_buffer(out_obj, fn, "out_ids", SK_INT64, 1, 0, &out) < 0) goto done;
    if (sk_get_buffer(pos_obj, fn, "in_positions", SK_INT64, 1, 0, &pos) < 0) goto done;
    if (sk_check_same_type(fn, "batch_rows", &rows, "cache", &cache) < 0) goto done;
    if (rows.shape[1] != cache.shape[1]) {
        PyErr_Format(PyExc_ValueError, "cache_update: 'batch_rows' expected %lld columns like cache (got %lld)",
                     (long long)cache.shape[1], (long long)rows.shape[1]);
        goto done;
    }
    const int64_t C = sk_len(&in);
    if (sk_check_len(fn, "out_ids", &out, C) < 0 || sk_check_len(fn, "in_positions", &pos, C) < 0) goto done;
    const int64_t K = cache.shape[0], N = sk_len(&addr), n = rows.shape[0];
    const int64_t *ii = in.buf, *oi = out.buf, *pi = pos.buf;
    const cu_table table = {addr.buf, wide};
    if (!wide && K > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "cache_update: 'address_table' expected int64 entries for a cache of %lld "
                     "rows (got int32: slots up to 2^31 - 1)", (long long)K);
        goto done;
    }
    int64_t *slots = malloc(sizeof(int64_t) * (size_t)(C > 0 ? C : 1));
    if (slots == NULL) {
        PyErr_NoMemory();
        goto done;
    }

    Py_BEGIN_ALLOW_THREADS
    int64_t bad;
    if ((bad = sk_first_outside(ii, C, N)) >= 0) sk_status_set(&st, CU_BAD_IN, 0, 0, bad, ii[bad], 0, 0);
    else if ((bad = sk_first_outside(oi, C, N)) >= 0) sk_status_set(&st, CU_BAD_OUT, 0, 0, bad, oi[bad], 0, 0);
    else if ((bad = sk_first_outside(pi, C, n)) >= 0) sk_status_set(&st, CU_BAD_POS, 0, 0, bad, pi[bad], 0, 0);
    for (int64_t k = 0; st.code == 0 && k < C; k++) {
        const int64_t s = tget(table, oi[k]);
        if (s < 0 || s >= K) sk_status_set(&st, CU_NOT_CACHED, 0, 0, k, oi[k], s, 0);
        else if (tget(table, ii[k]) != -1) sk_status_set(&st, CU_CACHED, 0, 0, k, ii[k], tget(table, ii[k]), 0);
    }
    /* free the out slots; a slot already freed is an out_id listed twice (then restore and stop) */
    int64_t freed = 0;
    for (; st.code == 0 && freed < C; freed++) {
        const int64_t s = tget(table, oi[freed]);
        if (s < 0) {
            sk_status_set(&st, CU_DUP_OUT, 0, 0, freed, oi[freed], 0, 0);
            break;
        }
        slots[freed] = s;
        tset(table, oi[freed], -1);
    }
    /* claim them for the in ids; an in id already claimed is listed twice */
    int64_t placed = 0;
    for (; st.code == 0 && placed < C; placed++) {
        if (tget(table, ii[placed]) != -1) {
            sk_status_set(&st, CU_DUP_IN, 0, 0, placed, ii[placed], 0, 0);
            break;
        }
        tset(table, ii[placed], slots[placed]);
    }
    if (st.code != 0) { /* undo, newest first */
        for (int64_t k = placed - 1; k >= 0; k--) tset(table, ii[k], -1);
        for (int64_t k = freed - 1; k >= 0; k--) tset(table, oi[k], slots[k]);
    } else {
        sk_copy_rows(cache.buf, slots, rows.buf, pi, C, (int64_t)cache.shape[1] * cache.itemsize, nthreads);
    }
    Py_END_ALLOW_THREADS
    free(slots);

    switch (st.code) {
    case CU_BAD_IN: sk_raise_index(fn, "in_ids", "node ids", N, st.a, st.b); break;
    case CU_BAD_OUT: sk_raise_index(fn, "out_ids", "node ids", N, st.a, st.b); break;
    case CU_BAD_POS: sk_raise_index(fn, "in_positions", "batch rows", n, st.a, st.b); break;
    case CU_NOT_CACHED:
        PyErr_Format(PyExc_ValueError,
                     "cache_update: 'out_ids[%lld]' expected a cached node (a slot in [0, %lld)) (got node %lld at "
                     "slot %lld)", (long long)st.a, (long long)K, (long long)st.b, (long long)st.c);
        break;
    case CU_CACHED:
        PyErr_Format(PyExc_ValueError,
                     "cache_update: 'in_ids[%lld]' expected an uncached node (got node %lld, cached at slot %lld)",
                     (long long)st.a, (long long)st.b, (long long)st.c);
        break;
    case CU_DUP_OUT:
    case CU_DUP_IN:
        PyErr_Format(PyExc_ValueError, "cache_update: '%s[%lld]' expected distinct ids (got node %lld twice)",
                     st.code == CU_DUP_OUT ? "out_ids" : "in_ids", (long long)st.a, (long long)st.b);
        break;
    default: result = Py_NewRef(Py_None);
    }

done:
    SK_RELEASE(&cache, &addr, &rows, &in, &out, &pos);
    return result;
}
