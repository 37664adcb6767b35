/* Dropout for training on the CPU (trainer/native_ops.py): torch's CPU dropout draws its Bernoulli mask
 * from one serial Mersenne Twister, which took a quarter of a GraphSAGE training step on 2 cores.
 *
 * dropout(x, out, mask, p, seed, num_threads):
 *     element i (flat C order) is kept when u(i) >= floor(p * 2^32), where u(i) is the low (i even) or high
 *     (i odd) 32 bits of z = mix64(key + (i / 2 + 1) * G0), key = mix64(seed + G0) (splitmix64 output i / 2 of
 *     state `key`, rng.h: one 64-bit draw decides two elements); mask[i] = kept and
 *     out[i] = x[i] * (kept * (float)(1 / (1 - p))), torch's input * mask * scale. A pure function of
 *     (seed, i): the mask does not depend on the number of threads (tests/storage_kernels/reference.py
 *     reimplements it). `out` may be `x`. p = 1 drops everything.
 * dropout_backward(grad, mask, p, out, num_threads):
 *     out[i] = grad[i] * (mask[i] * (float)(1 / (1 - p))) in one pass (torch's grad * mask * scale takes two);
 *     `out` may be `grad`.
 */
#include "common.h"
#include "kernels.h"
#include "rng.h"

#include <math.h>

#define DO_MIN_PER_THREAD (1 << 18) /* elements per thread: small tensors stay on the caller's thread */

typedef struct {
    const float *x;
    float *out;
    uint8_t *mask;
    int64_t n;
    uint64_t key, threshold; /* 32-bit threshold; above every draw (2^32) when p = 1 */
    float scale;
} dropout_ctx;

static inline void dropout_one(const dropout_ctx *c, int64_t i, uint32_t u) {
    const uint8_t keep = (uint64_t)u >= c->threshold;
    c->mask[i] = keep;
    c->out[i] = c->x[i] * ((float)keep * c->scale); /* branchless: half the elements go each way */
}

/* sk_dropout_keep (rng.h) two elements at a time: one draw decides an even element and the odd one after it */
static void dropout_task(void *p, int tid, int nthreads) {
    const dropout_ctx *c = (const dropout_ctx *)p;
    const int64_t lo = c->n * tid / nthreads, hi = c->n * (tid + 1) / nthreads;
    for (int64_t pair = lo / 2; 2 * pair < hi; pair++) {
        const uint64_t z = sk_mix64(c->key + (uint64_t)(pair + 1) * SK_RNG_G0);
        if (2 * pair >= lo) dropout_one(c, 2 * pair, (uint32_t)z);
        if (2 * pair + 1 < hi) dropout_one(c, 2 * pair + 1, (uint32_t)(z >> 32));
    }
}

PyObject *sk_dropout(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"x", "out", "mask", "p", "seed", "num_threads", NULL};
    PyObject *x_o, *out_o, *mask_o;
    double p;
    unsigned long long seed;
    Py_ssize_t num_threads = 0;
    Py_buffer x = {0}, out = {0}, mask = {0};
    PyObject *result = NULL;
    const char *fn = "dropout";
    int nthreads;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOdK|n:dropout", kwlist, &x_o, &out_o, &mask_o, &p, &seed,
                                     &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (sk_check_probability(fn, "p", p, 1) < 0) return NULL;
    if (sk_get_buffer(x_o, fn, "x", SK_FLOAT32, SK_ANY_NDIM, 0, &x) < 0) goto done;
    if (sk_get_buffer(out_o, fn, "out", SK_FLOAT32, SK_ANY_NDIM, 1, &out) < 0) goto done;
    if (sk_get_buffer(mask_o, fn, "mask", SK_UINT8, SK_ANY_NDIM, 1, &mask) < 0) goto done;
    const int64_t n = sk_len(&x);
    if (sk_check_len(fn, "out", &out, n) < 0 || sk_check_len(fn, "mask", &mask, n) < 0) goto done;

    dropout_ctx ctx = {x.buf, out.buf, mask.buf, n, sk_mix64((uint64_t)seed + SK_RNG_G0),
                       (uint64_t)ldexp(p, 32), p >= 1.0 ? 0.0f : (float)(1.0 / (1.0 - p))};
    Py_BEGIN_ALLOW_THREADS
    sk_parallel(sk_cap_threads(nthreads, n, DO_MIN_PER_THREAD), dropout_task, &ctx);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);

done:
    SK_RELEASE(&x, &out, &mask);
    return result;
}

typedef struct {
    const float *grad;
    const uint8_t *mask;
    float *out;
    int64_t n;
    float scale;
} dropout_bwd_ctx;

static void dropout_backward_task(void *p, int tid, int nthreads) {
    const dropout_bwd_ctx *c = (const dropout_bwd_ctx *)p;
    const int64_t lo = c->n * tid / nthreads, hi = c->n * (tid + 1) / nthreads;
    for (int64_t i = lo; i < hi; i++) c->out[i] = c->grad[i] * ((float)(c->mask[i] != 0) * c->scale);
}

PyObject *sk_dropout_backward(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"grad", "mask", "p", "out", "num_threads", NULL};
    PyObject *grad_o, *mask_o, *out_o;
    double p;
    Py_ssize_t num_threads = 0;
    Py_buffer grad = {0}, mask = {0}, out = {0};
    PyObject *result = NULL;
    const char *fn = "dropout_backward";
    int nthreads;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOdO|n:dropout_backward", kwlist, &grad_o, &mask_o, &p, &out_o,
                                     &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (sk_check_probability(fn, "p", p, 1) < 0) return NULL;
    if (sk_get_buffer(grad_o, fn, "grad", SK_FLOAT32, SK_ANY_NDIM, 0, &grad) < 0) goto done;
    if (sk_get_buffer(mask_o, fn, "mask", SK_UINT8, SK_ANY_NDIM, 0, &mask) < 0) goto done;
    if (sk_get_buffer(out_o, fn, "out", SK_FLOAT32, SK_ANY_NDIM, 1, &out) < 0) goto done;
    const int64_t n = sk_len(&grad);
    if (sk_check_len(fn, "mask", &mask, n) < 0 || sk_check_len(fn, "out", &out, n) < 0) goto done;

    dropout_bwd_ctx ctx = {grad.buf, mask.buf, out.buf, n, p >= 1.0 ? 0.0f : (float)(1.0 / (1.0 - p))};
    Py_BEGIN_ALLOW_THREADS
    sk_parallel(sk_cap_threads(nthreads, n, DO_MIN_PER_THREAD), dropout_backward_task, &ctx);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);

done:
    SK_RELEASE(&grad, &mask, &out);
    return result;
}
