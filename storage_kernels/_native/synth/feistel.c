/* The synthetic generator's keyed bijection of [0, n) (pipelines/methods/sources/synthetic.py, _Feistel): a
 * balanced Feistel network on 2 * half bits whose round function is the SplitMix64 finaliser of (x ^ key),
 * masked to half bits, with cycle walking back into [0, n). Bit-identical to the NumPy version, which stays
 * the reference in the tests; every edge of a generated graph goes through it (75% of generation time).
 *
 * feistel_walk(x, keys, half, n, inverse, out): out[i] = forward(x[i]) (or its inverse); x[i] in [0, n). */
#include "common.h"
#include "kernels.h"

enum { FS_BAD_X = 1 };
#define FS_MIN_ITEMS_PER_THREAD (1 << 15)

static inline uint64_t fs_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= UINT64_C(0xBF58476D1CE4E5B9);
    x ^= x >> 27;
    x *= UINT64_C(0x94D049BB133111EB);
    x ^= x >> 31;
    return x;
}

typedef struct {
    const int64_t *x;
    int64_t *out;
    const uint64_t *keys;
    int64_t count, n;
    int nkeys, half, inverse;
    sk_status st[64];
} feistel_ctx;

static inline uint64_t fs_step(const feistel_ctx *c, uint64_t v) {
    const uint64_t mask = (UINT64_C(1) << c->half) - 1;
    uint64_t left = v >> c->half, right = v & mask;
    if (!c->inverse) {
        for (int k = 0; k < c->nkeys; k++) {
            const uint64_t t = left ^ (fs_mix64(right ^ c->keys[k]) & mask);
            left = right;
            right = t;
        }
    } else {
        for (int k = c->nkeys - 1; k >= 0; k--) {
            const uint64_t t = right ^ (fs_mix64(left ^ c->keys[k]) & mask);
            right = left;
            left = t;
        }
    }
    return (left << c->half) | right;
}

static void feistel_task(void *p, int tid, int nthreads) {
    feistel_ctx *c = p;
    const int64_t lo = c->count * tid / nthreads, hi = c->count * (tid + 1) / nthreads;
    for (int64_t i = lo; i < hi; i++) {
        const int64_t v = c->x[i];
        if ((uint64_t)v >= (uint64_t)c->n) {
            sk_status_set(&c->st[tid], FS_BAD_X, 0, i, i, v, 0, 0);
            return;
        }
        uint64_t y = fs_step(c, (uint64_t)v);
        while (y >= (uint64_t)c->n) y = fs_step(c, y); /* cycle walking: the domain is < 4n */
        c->out[i] = (int64_t)y;
    }
}

PyObject *sk_feistel_walk(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"x", "keys", "half", "n", "inverse", "out", "num_threads", NULL};
    PyObject *x_obj, *keys_obj, *out_obj;
    Py_ssize_t half, n, num_threads = 0;
    int inverse, nthreads;
    Py_buffer x = {0}, keys = {0}, out = {0};
    PyObject *result = NULL;
    const char *fn = "feistel_walk";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOnnpO|n:feistel_walk", kwlist, &x_obj, &keys_obj, &half, &n,
                                     &inverse, &out_obj, &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (sk_get_buffer(x_obj, fn, "x", SK_INT64, 1, 0, &x) < 0) goto done;
    if (sk_get_buffer(keys_obj, fn, "keys", SK_INT64, 1, 0, &keys) < 0) goto done;
    if (sk_get_buffer(out_obj, fn, "out", SK_INT64, 1, 1, &out) < 0) goto done;
    if (sk_check_len(fn, "out", &out, sk_len(&x)) < 0) goto done;
    if (half < 1 || half > 31 || n < 1 || n > ((Py_ssize_t)1 << (2 * half))) {
        PyErr_Format(PyExc_ValueError, "feistel_walk: 'half' expected 1..31 bits with 1 <= n <= 2**(2*half) "
                     "(got half=%zd, n=%zd)", half, n);
        goto done;
    }
    if (sk_len(&keys) > 64) {
        PyErr_Format(PyExc_ValueError, "feistel_walk: 'keys' expected at most 64 rounds (got %lld)",
                     (long long)sk_len(&keys));
        goto done;
    }
    if (nthreads > 64) nthreads = 64;
    nthreads = sk_cap_threads(nthreads, sk_len(&x), FS_MIN_ITEMS_PER_THREAD);
    feistel_ctx *ctx = calloc(1, sizeof(feistel_ctx));
    if (ctx == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    *ctx = (feistel_ctx){x.buf, out.buf, keys.buf, sk_len(&x), (int64_t)n, (int)sk_len(&keys), (int)half,
                         inverse, {{0}}};
    Py_BEGIN_ALLOW_THREADS
    sk_parallel(nthreads, feistel_task, ctx);
    Py_END_ALLOW_THREADS
    sk_status st = {0};
    for (int t = 0; t < nthreads; t++)
        if (ctx->st[t].code) sk_status_set(&st, ctx->st[t].code, 0, ctx->st[t].order, ctx->st[t].a, ctx->st[t].b, 0, 0);
    free(ctx);
    if (st.code == FS_BAD_X)
        sk_raise_index(fn, "x", "positions", (int64_t)n, st.a, st.b);
    else
        result = Py_NewRef(Py_None);

done:
    SK_RELEASE(&x, &keys, &out);
    return result;
}
