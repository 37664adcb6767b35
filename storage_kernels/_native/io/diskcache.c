/* DiskGNN's segmented disk cache: the MinHash order of its rows (Alg. 1) and the page cost of reading it.
 *
 * MinHash signatures of items over the sets that contain them (disk-cache nodes over the mini-batches that
 * read them; sorting nodes by signature puts nodes read by the same batches side by side):
 *
 * minhash_signatures(items, set_ptr, out, seed):
 *     set s is items[set_ptr[s] : set_ptr[s + 1]] (item ids in [0, n), n = out.shape[0]);
 *     out[v, j] = min over the sets s containing v of h_j(s), UINT64_MAX when no set contains v, where
 *
 *         key_j  = mix64(seed + (j + 1) * G0)
 *         h_j(s) = mix64(key_j ^ (s + G2))                 (rng.h's mixer and constants, modulo 2^64)
 *
 *     k = out.shape[1] hash functions. tests/storage_kernels/reference.py reimplements this exactly.
 *
 * Validation first (without the GIL), then one thread per hash function (column j of out): every thread scans
 * all sets, writes only its columns, so the result never depends on the number of threads. */
#include "common.h"
#include "kernels.h"
#include "rng.h"

#include <string.h>

/* set_ptr holds S + 1 offsets into an array of T entries: 0 = set_ptr[0] <= set_ptr[1] <= ... <= set_ptr[S] <= T,
 * else `st` gets `code` with a = the first bad position and b = its value. Without the GIL. */
static void check_set_ptr(const int64_t *sp, int64_t S, int64_t T, int code, sk_status *st) {
    if (sp[0] != 0) sk_status_set(st, code, 0, 0, 0, sp[0], 0, 0);
    for (int64_t s = 0; s < S && st->code == 0; s++)
        if (sp[s + 1] < sp[s] || sp[s + 1] > T) sk_status_set(st, code, 0, s + 1, s + 1, sp[s + 1], 0, 0);
}

/* The ValueError of a status from check_set_ptr; `items` names the array of T entries set_ptr indexes. */
static void raise_bad_set_ptr(const char *fn, const char *items, int64_t T, const sk_status *st) {
    PyErr_Format(PyExc_ValueError,
                 "%s: 'set_ptr' expected 0 = set_ptr[0] <= set_ptr[1] <= ... <= len(%s)=%lld "
                 "(got set_ptr[%lld]=%lld)",
                 fn, items, (long long)T, (long long)st->a, (long long)st->b);
}

enum { MH_OK = 0, MH_BAD_PTR = 1, MH_BAD_ITEM = 2 };

typedef struct {
    const int64_t *items, *set_ptr;
    uint64_t *out;
    int64_t S, n, k;
    uint64_t seed;
} minhash_ctx;

static void minhash_task(void *p, int tid, int nthreads) {
    minhash_ctx *c = (minhash_ctx *)p;
    for (int64_t j = tid; j < c->k; j += nthreads) {
        const uint64_t key = sk_mix64(c->seed + (uint64_t)(j + 1) * SK_RNG_G0);
        uint64_t *col = c->out + j;
        for (int64_t v = 0; v < c->n; v++) col[v * c->k] = UINT64_MAX;
        for (int64_t s = 0; s < c->S; s++) {
            const uint64_t h = sk_mix64(key ^ ((uint64_t)s + SK_RNG_G2));
            for (int64_t p2 = c->set_ptr[s]; p2 < c->set_ptr[s + 1]; p2++) {
                uint64_t *slot = col + c->items[p2] * c->k;
                if (h < *slot) *slot = h;
            }
        }
    }
}

PyObject *sk_minhash_signatures(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"items", "set_ptr", "out", "seed", "num_threads", NULL};
    PyObject *items_obj, *ptr_obj, *out_obj;
    unsigned long long seed;
    Py_ssize_t num_threads = 0;
    Py_buffer items = {0}, ptr = {0}, out = {0};
    sk_status st = {0};
    int nthreads;
    PyObject *result = NULL;
    const char *fn = "minhash_signatures";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOK|n:minhash_signatures", kwlist, &items_obj, &ptr_obj,
                                     &out_obj, &seed, &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (sk_get_buffer(items_obj, fn, "items", SK_INT64, 1, 0, &items) < 0) goto done;
    if (sk_get_buffer(ptr_obj, fn, "set_ptr", SK_INT64, 1, 0, &ptr) < 0) goto done;
    if (sk_get_buffer(out_obj, fn, "out", SK_ANY, 2, 1, &out) < 0) goto done;
    const char *f = sk_format(&out);
    if (out.itemsize != 8 || (strcmp(f, "L") != 0 && strcmp(f, "Q") != 0)) {
        PyErr_Format(PyExc_ValueError, "%s: 'out' expected a 2-D uint64 array (got format '%s')", fn, f);
        goto done;
    }
    if (sk_len(&ptr) < 1) {
        PyErr_Format(PyExc_ValueError, "%s: 'set_ptr' expected num_sets + 1 >= 1 entries (got 0)", fn);
        goto done;
    }
    minhash_ctx ctx = {.items = items.buf, .set_ptr = ptr.buf, .out = out.buf, .S = sk_len(&ptr) - 1,
                       .n = out.shape[0], .k = out.shape[1], .seed = (uint64_t)seed};
    const int64_t T = sk_len(&items);

    Py_BEGIN_ALLOW_THREADS
    const int64_t *sp = ctx.set_ptr;
    check_set_ptr(sp, ctx.S, T, MH_BAD_PTR, &st);
    if (st.code == 0) {
        const int64_t bad = sk_first_outside(ctx.items, sp[ctx.S], ctx.n);
        if (bad >= 0) sk_status_set(&st, MH_BAD_ITEM, 0, bad, bad, ctx.items[bad], 0, 0);
    }
    if (st.code == 0 && ctx.k > 0) {
        int nt = nthreads < ctx.k ? nthreads : (int)ctx.k;
        sk_parallel(nt, minhash_task, &ctx);
    }
    Py_END_ALLOW_THREADS

    switch (st.code) {
    case MH_OK:
        Py_INCREF(Py_None);
        result = Py_None;
        break;
    case MH_BAD_PTR:
        raise_bad_set_ptr(fn, "items", T, &st);
        break;
    default:
        sk_raise_index(fn, "items", "item ids", ctx.n, st.a, st.b);
    }

done:
    SK_RELEASE(&items, &ptr, &out);
    return result;
}

/* ---- count_blocks ----------------------------------------------------------------------------------------
 *
 * count_blocks(slots, set_ptr, row_bytes, out):
 *     out[s] = distinct 4096-byte blocks holding the rows slots[set_ptr[s] : set_ptr[s + 1]] of a block-aligned
 *     region (row r at bytes [r * row_bytes, (r + 1) * row_bytes)); negative slots are skipped (rows served
 *     elsewhere). What one set's page-merged read of the region fetches (DiskGNN's disk-cache read cost).
 *
 * Parallel over sets; each thread stamps the blocks it has seen with the set's index (a stamp array as large as
 * the highest block), so a set costs its own rows only. */

enum { CB_OK = 0, CB_BAD_PTR = 1, CB_NOMEM = SK_ERR_NOMEM };

typedef struct {
    const int64_t *slots, *set_ptr;
    int64_t *out;
    int64_t S, row_bytes, num_blocks;
    atomic_llong next;
    sk_status *status;
} blocks_ctx;

static void blocks_task(void *p, int tid, int nthreads) {
    (void)nthreads;
    blocks_ctx *c = (blocks_ctx *)p;
    int64_t *stamp = malloc((size_t)(c->num_blocks > 0 ? c->num_blocks : 1) * sizeof(int64_t));
    if (stamp == NULL) {
        sk_status_set(&c->status[tid], CB_NOMEM, 0, 0, 0, 0, 0, 0);
        return;
    }
    for (int64_t b = 0; b < c->num_blocks; b++) stamp[b] = -1;
    int64_t lo, hi;
    while (sk_claim(&c->next, c->S, 16, &lo, &hi)) {
        for (int64_t s = lo; s < hi; s++) {
            int64_t count = 0;
            for (int64_t i = c->set_ptr[s]; i < c->set_ptr[s + 1]; i++) {
                const int64_t r = c->slots[i];
                if (r < 0) continue;
                const int64_t first = r * c->row_bytes / SK_DIRECT_ALIGN;
                const int64_t last = ((r + 1) * c->row_bytes - 1) / SK_DIRECT_ALIGN;
                for (int64_t b = first; b <= last; b++)
                    if (stamp[b] != s) {
                        stamp[b] = s;
                        count++;
                    }
            }
            c->out[s] = count;
        }
    }
    free(stamp);
}

PyObject *sk_count_blocks(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"slots", "set_ptr", "row_bytes", "out", "num_threads", NULL};
    PyObject *slots_obj, *ptr_obj, *out_obj;
    long long row_bytes;
    Py_ssize_t num_threads = 0;
    Py_buffer slots = {0}, ptr = {0}, out = {0};
    sk_status st = {0}, *ts = NULL;
    int nthreads;
    PyObject *result = NULL;
    const char *fn = "count_blocks";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOLO|n:count_blocks", kwlist, &slots_obj, &ptr_obj, &row_bytes,
                                     &out_obj, &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0 || sk_check_min(fn, "row_bytes", row_bytes, 1) < 0)
        return NULL;
    if (sk_get_buffer(slots_obj, fn, "slots", SK_INT64, 1, 0, &slots) < 0) goto done;
    if (sk_get_buffer(ptr_obj, fn, "set_ptr", SK_INT64, 1, 0, &ptr) < 0) goto done;
    if (sk_get_buffer(out_obj, fn, "out", SK_INT64, 1, 1, &out) < 0) goto done;
    if (sk_len(&ptr) < 1) {
        PyErr_Format(PyExc_ValueError, "%s: 'set_ptr' expected num_sets + 1 >= 1 entries (got 0)", fn);
        goto done;
    }
    if (sk_check_len(fn, "out", &out, sk_len(&ptr) - 1) < 0) goto done;
    blocks_ctx ctx = {.slots = slots.buf, .set_ptr = ptr.buf, .out = out.buf, .S = sk_len(&ptr) - 1,
                      .row_bytes = row_bytes};
    atomic_init(&ctx.next, 0);
    const int64_t T = sk_len(&slots);
    nthreads = sk_cap_threads(nthreads, ctx.S, 16);
    if ((ts = calloc((size_t)nthreads, sizeof(sk_status))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    ctx.status = ts;

    Py_BEGIN_ALLOW_THREADS
    const int64_t *sp = ctx.set_ptr;
    check_set_ptr(sp, ctx.S, T, CB_BAD_PTR, &st);
    int64_t max_slot = -1;
    for (int64_t i = 0; st.code == 0 && i < sp[ctx.S]; i++)
        if (ctx.slots[i] > max_slot) max_slot = ctx.slots[i];
    int64_t end_byte;
    if (st.code == 0 && sk_mul_overflow(max_slot + 1, row_bytes, &end_byte)) sk_status_set(&st, CB_NOMEM, 0, 0, 0, 0, 0, 0);
    if (st.code == 0) {
        ctx.num_blocks = (end_byte + SK_DIRECT_ALIGN - 1) / SK_DIRECT_ALIGN;
        sk_parallel(nthreads, blocks_task, &ctx);
        for (int t = 0; t < nthreads; t++) sk_status_merge(&st, &ts[t]);
    }
    Py_END_ALLOW_THREADS

    switch (st.code) {
    case CB_OK:
        Py_INCREF(Py_None);
        result = Py_None;
        break;
    case CB_BAD_PTR:
        raise_bad_set_ptr(fn, "slots", T, &st);
        break;
    default:
        PyErr_NoMemory();
    }

done:
    free(ts);
    SK_RELEASE(&slots, &ptr, &out);
    return result;
}
