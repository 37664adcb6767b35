/* GAT's attention aggregation over a block's CSR, forward and backward (trainer/native_ops.py), fused: no
 * (edges x heads x channels) message tensor and none of the edge-sized intermediates of the torch form.
 *
 * A destination d has the block's edges k in [indptr[d], indptr[d+1]) from source rows cols[k], then its self
 * loop from row dst_pos[d]; edge row r is k for a block edge and E + d for d's loop (the row order of
 * torch.cat([edges, loops])). Per head h:
 *     e_r     = LeakyReLU_slope(score_src[j, h] + score_dst[d, h])
 *     alpha_r = exp(e_r - max_r' e_r') / sum_r' exp(e_r' - max)        (sum in row order from 0, then divide)
 *     a_r     = alpha_r * (keep(r * H + h) * (float)(1 / (1 - p)))     (attention dropout, dropout.c's mask for
 *                                                                      `seed`; p = 0: a_r = alpha_r)
 *     out[d, h, :] = sum_r a_r * z[j, h, :]                            (products added in row order from 0)
 * gat_attend writes `out` and `alpha` (E + D, H; the softmax before dropout, kept for the backward).
 * gat_attend_backward, given grad_out, accumulates into grad_z (S, H, C) and grad_score_src (S, H) and writes
 * grad_score_dst (D, H), recomputing the dropout mask from `seed`.
 *
 * Threads: the forward splits destinations, the backward splits heads (every source row of a head is then
 * written by one thread, in destination order): results do not depend on the number of threads. Everything
 * is validated before anything is written. */
#include "common.h"
#include "kernels.h"
#include "rng.h"

#include <math.h>

#define AT_ROWS_PER_CLAIM 32

enum { AT_BAD_LOOP = 1 }; /* beside the SK_ERR_CSR_* codes of sk_check_block */

typedef struct {
    const float *z, *ss, *sd; /* z (S, H, C), score_src (S, H), score_dst (D, H) */
    const int64_t *indptr, *cols, *loop;
    float *out, *alpha;          /* forward: out (D, H, C), alpha (E + D, H) */
    const float *grad_out;       /* backward */
    float *gz, *gss, *gsd;       /* backward: grad_z (S, H, C), grad_score_src (S, H), grad_score_dst (D, H) */
    int64_t D, E, H, C, max_degree;
    float slope, scale;          /* LeakyReLU slope; 1 / (1 - p) */
    uint64_t key, threshold;     /* dropout: key = mix64(seed + G0), 32-bit threshold (0 = keep all) */
    int drop;                    /* whether the attention dropout is on */
    atomic_llong next;
    atomic_int failed;
} att_ctx;

/* dropout.c's multiplier of element i of alpha: its mask times 1 / (1 - p) */
static inline float keep_scale(const att_ctx *c, int64_t i) {
    return c->drop ? (float)sk_dropout_keep(c->key, c->threshold, i) * c->scale : 1.0f;
}

static inline float leaky(float x, float slope) { return x > 0.0f ? x : x * slope; }

/* The source row and edge row of the n-th incoming edge of d (n = degree: the self loop). */
static inline void edge_of(const att_ctx *c, int64_t d, int64_t n, int64_t *src, int64_t *row) {
    const int64_t k0 = c->indptr[d], deg = c->indptr[d + 1] - k0;
    if (n < deg) {
        *src = c->cols[k0 + n];
        *row = k0 + n;
    } else {
        *src = c->loop[d];
        *row = c->E + d;
    }
}

/* Each destination in three passes over its edges, every pass edge by edge with its heads inside, so a source
 * row is read whole and in one go: scores and their per-head peak, exp weights and their per-head totals (in
 * edge order), then the weighted sums. Per head the operations and their order are those of the torch form. */
static void forward_task(void *p, int tid, int nthreads) {
    (void)tid;
    (void)nthreads;
    att_ctx *c = (att_ctx *)p;
    const int64_t H = c->H, C = c->C;
    /* one destination's weights (edges x heads), peaks and totals (heads) */
    float *w = malloc(sizeof(float) * (size_t)((c->max_degree + 1) * H + 2 * H));
    if (w == NULL) {
        atomic_store(&c->failed, 1);
        return;
    }
    float *peak = w + (c->max_degree + 1) * H, *total = peak + H;
    int64_t lo, hi;
    while (sk_claim(&c->next, c->D, AT_ROWS_PER_CLAIM, &lo, &hi)) {
        for (int64_t d = lo; d < hi; d++) {
            const int64_t n = c->indptr[d + 1] - c->indptr[d] + 1; /* edges + the loop */
            const float *sd = c->sd + d * H;
            for (int64_t h = 0; h < H; h++) peak[h] = -INFINITY, total[h] = 0.0f;
            for (int64_t i = 0; i < n; i++) {
                int64_t j, r;
                edge_of(c, d, i, &j, &r);
                for (int64_t h = 0; h < H; h++) {
                    const float e = leaky(c->ss[j * H + h] + sd[h], c->slope);
                    w[i * H + h] = e;
                    if (e > peak[h]) peak[h] = e;
                }
            }
            for (int64_t i = 0; i < n; i++)
                for (int64_t h = 0; h < H; h++) {
                    w[i * H + h] = expf(w[i * H + h] - peak[h]);
                    total[h] += w[i * H + h];
                }
            float *restrict acc = c->out + d * H * C;
            for (int64_t f = 0; f < H * C; f++) acc[f] = 0.0f;
            for (int64_t i = 0; i < n; i++) {
                int64_t j, r;
                edge_of(c, d, i, &j, &r);
                const float *restrict zj = c->z + j * H * C;
                for (int64_t h = 0; h < H; h++) {
                    const float alpha = w[i * H + h] / total[h];
                    c->alpha[r * H + h] = alpha;
                    const float a = alpha * keep_scale(c, r * H + h);
                    for (int64_t f = 0; f < C; f++) acc[h * C + f] += zj[h * C + f] * a;
                }
            }
        }
    }
    free(w);
}

/* Heads [h0, h1) of every destination, in two passes over its edges (heads inside): the rows' gradients and
 * d(loss)/d(alpha), then the softmax's and the LeakyReLU's backward into the score gradients. */
static void backward_task(void *p, int tid, int nthreads) {
    att_ctx *c = (att_ctx *)p;
    const int64_t H = c->H, C = c->C, h0 = H * tid / nthreads, h1 = H * (tid + 1) / nthreads, W = h1 - h0;
    /* d(loss)/d(alpha) of one destination (edges x this thread's heads), and the softmax's dot per head */
    float *ga = malloc(sizeof(float) * (size_t)((c->max_degree + 1) * W + W));
    if (ga == NULL) {
        atomic_store(&c->failed, 1);
        return;
    }
    float *dot = ga + (c->max_degree + 1) * W;
    for (int64_t d = 0; d < c->D; d++) {
        const int64_t n = c->indptr[d + 1] - c->indptr[d] + 1;
        const float *restrict g = c->grad_out + d * H * C;
        for (int64_t h = 0; h < W; h++) dot[h] = 0.0f;
        for (int64_t i = 0; i < n; i++) {
            int64_t j, r;
            edge_of(c, d, i, &j, &r);
            for (int64_t h = h0; h < h1; h++) {
                const float alpha = c->alpha[r * H + h], ks = keep_scale(c, r * H + h), a = alpha * ks;
                const float *restrict zj = c->z + (j * H + h) * C, *restrict gh = g + h * C;
                float *restrict gzj = c->gz + (j * H + h) * C;
                float gdrop = 0.0f; /* d(loss)/d(a_r) */
                for (int64_t f = 0; f < C; f++) {
                    gdrop += gh[f] * zj[f];
                    gzj[f] += a * gh[f];
                }
                ga[i * W + h - h0] = gdrop * ks;
                dot[h - h0] += alpha * ga[i * W + h - h0];
            }
        }
        float *gsd = c->gsd + d * H;
        for (int64_t h = h0; h < h1; h++) gsd[h] = 0.0f;
        for (int64_t i = 0; i < n; i++) {
            int64_t j, r;
            edge_of(c, d, i, &j, &r);
            for (int64_t h = h0; h < h1; h++) {
                const float ge = c->alpha[r * H + h] * (ga[i * W + h - h0] - dot[h - h0]);
                const float pre = c->ss[j * H + h] + c->sd[d * H + h];
                const float gpre = pre > 0.0f ? ge : ge * c->slope;
                c->gss[j * H + h] += gpre;
                gsd[h] += gpre;
            }
        }
    }
    free(ga);
}

/* Validate the block's CSR and its self loops without the GIL; returns the largest degree, or -1 with st set. */
static int64_t att_check(const int64_t *ip, int64_t D, const int64_t *cols, int64_t E, const int64_t *loop,
                         int64_t S, sk_status *st) {
    const int64_t max_degree = sk_check_block(ip, D, cols, E, S, st);
    if (max_degree < 0) return -1;
    const int64_t bad = sk_first_outside(loop, D, S);
    if (bad >= 0) {
        sk_status_set(st, AT_BAD_LOOP, 0, bad, bad, loop[bad], 0, 0);
        return -1;
    }
    return max_degree;
}

static int att_raise(const char *fn, const sk_status *st, int64_t S) {
    if (st->code == AT_BAD_LOOP) return sk_raise_index(fn, "dst_pos", "source rows", S, st->a, st->b);
    return sk_raise_block_error(fn, st, S);
}

/* A float32 buffer of exactly `ndim` dims with the given sizes (-1: any), writable or not. */
static int get_shaped(const char *fn, const char *name, PyObject *obj, int ndim, const int64_t *dims, int writable,
                      Py_buffer *view) {
    if (sk_get_buffer(obj, fn, name, SK_FLOAT32, ndim, writable, view) < 0) return -1;
    for (int i = 0; i < ndim; i++)
        if (dims[i] >= 0 && (int64_t)view->shape[i] != dims[i]) {
            PyErr_Format(PyExc_ValueError, "%s: '%s' expected size %lld in dimension %d (got %lld)", fn, name,
                         (long long)dims[i], i, (long long)view->shape[i]);
            return -1;
        }
    return 0;
}

static PyObject *attend(PyObject *args, PyObject *kwargs, int backward) {
    static char *kw_fwd[] = {"z", "score_src", "score_dst", "indptr", "cols", "dst_pos", "out", "alpha",
                             "negative_slope", "p", "seed", "num_threads", NULL};
    static char *kw_bwd[] = {"z", "score_src", "score_dst", "indptr", "cols", "dst_pos", "alpha", "grad_out",
                             "grad_z", "grad_score_src", "grad_score_dst", "negative_slope", "p", "seed",
                             "num_threads", NULL};
    const char *fn = backward ? "gat_attend_backward" : "gat_attend";
    PyObject *z_o, *ss_o, *sd_o, *ip_o, *cols_o, *loop_o, *a_o, *b_o = NULL, *c_o = NULL, *d_o = NULL, *e_o = NULL;
    double slope, p;
    unsigned long long seed;
    Py_ssize_t num_threads = 0;
    Py_buffer z = {0}, ss = {0}, sd = {0}, ip = {0}, cols = {0}, loop = {0}, out = {0}, alpha = {0}, gout = {0},
              gz = {0}, gss = {0}, gsd = {0};
    sk_status st = {0};
    PyObject *result = NULL;
    int nthreads, ok;

    if (backward)
        ok = PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOOOddK|n:gat_attend_backward", kw_bwd, &z_o, &ss_o,
                                         &sd_o, &ip_o, &cols_o, &loop_o, &a_o, &b_o, &c_o, &d_o, &e_o, &slope, &p,
                                         &seed, &num_threads);
    else
        ok = PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOddK|n:gat_attend", kw_fwd, &z_o, &ss_o, &sd_o,
                                         &ip_o, &cols_o, &loop_o, &a_o, &b_o, &slope, &p, &seed, &num_threads);
    if (!ok) return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (sk_check_probability(fn, "p", p, 0) < 0) return NULL;
    if (sk_get_buffer(z_o, fn, "z", SK_FLOAT32, 3, 0, &z) < 0) goto done;
    const int64_t S = (int64_t)z.shape[0], H = (int64_t)z.shape[1], C = (int64_t)z.shape[2];
    if (sk_get_buffer(ip_o, fn, "indptr", SK_INT64, 1, 0, &ip) < 0) goto done;
    if (sk_get_buffer(cols_o, fn, "cols", SK_INT64, 1, 0, &cols) < 0) goto done;
    const int64_t D = sk_len(&ip) - 1, E = sk_len(&cols);
    if (D < 0) {
        PyErr_Format(PyExc_ValueError, "%s: 'indptr' expected at least 1 entry (got 0)", fn);
        goto done;
    }
    const int64_t *ipv = ip.buf;
    if (ipv[0] != 0 || ipv[D] != E) {
        PyErr_Format(PyExc_ValueError, "%s: 'indptr' expected to start at 0 and end at len(cols)=%lld (got %lld and %lld)",
                     fn, (long long)E, (long long)ipv[0], (long long)ipv[D]);
        goto done;
    }
    if (sk_get_int64_n(loop_o, fn, "dst_pos", D, 0, INT64_MIN, &loop) < 0) goto done;
    const int64_t sh_ss[] = {S, H}, sh_sd[] = {D, H}, sh_alpha[] = {E + D, H}, sh_out[] = {D, H, C},
                  sh_z[] = {S, H, C};
    if (get_shaped(fn, "score_src", ss_o, 2, sh_ss, 0, &ss) < 0 || get_shaped(fn, "score_dst", sd_o, 2, sh_sd, 0, &sd) < 0)
        goto done;
    if (backward) {
        if (get_shaped(fn, "alpha", a_o, 2, sh_alpha, 0, &alpha) < 0 ||
            get_shaped(fn, "grad_out", b_o, 3, sh_out, 0, &gout) < 0 ||
            get_shaped(fn, "grad_z", c_o, 3, sh_z, 1, &gz) < 0 ||
            get_shaped(fn, "grad_score_src", d_o, 2, sh_ss, 1, &gss) < 0 ||
            get_shaped(fn, "grad_score_dst", e_o, 2, sh_sd, 1, &gsd) < 0)
            goto done;
    } else if (get_shaped(fn, "out", a_o, 3, sh_out, 1, &out) < 0 || get_shaped(fn, "alpha", b_o, 2, sh_alpha, 1, &alpha) < 0) {
        goto done;
    }

    att_ctx ctx = {z.buf, ss.buf, sd.buf, ipv, cols.buf, loop.buf, out.buf, alpha.buf, gout.buf, gz.buf, gss.buf,
                   gsd.buf, D, E, H, C, 0, (float)slope, p > 0.0 ? (float)(1.0 / (1.0 - p)) : 1.0f,
                   sk_mix64((uint64_t)seed + SK_RNG_G0), (uint64_t)ldexp(p, 32), p > 0.0, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    ctx.max_degree = att_check(ipv, D, ctx.cols, E, ctx.loop, S, &st);
    if (st.code == 0 && H > 0) {
        if (backward) {
            int nt = sk_cap_threads(nthreads, (E + D) * H * C, 1 << 16);
            sk_parallel(nt > H ? (int)H : nt, backward_task, &ctx);
        } else {
            sk_parallel(sk_cap_threads(nthreads, (E + D) * H * C, 1 << 16), forward_task, &ctx);
        }
        if (atomic_load(&ctx.failed)) st.code = SK_ERR_NOMEM;
    }
    Py_END_ALLOW_THREADS

    if (att_raise(fn, &st, S) == 0) result = Py_NewRef(Py_None);

done:
    SK_RELEASE(&z, &ss, &sd, &ip, &cols, &loop, &out, &alpha, &gout, &gz, &gss, &gsd);
    return result;
}

PyObject *sk_gat_attend(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    return attend(args, kwargs, 0);
}

PyObject *sk_gat_attend_backward(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    return attend(args, kwargs, 1);
}
