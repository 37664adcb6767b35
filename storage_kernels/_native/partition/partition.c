/* Streaming graph partitioners: one FENNEL scoring pass (OUTRE's variant) and one GREM bisection pass.
 *
 * Both kernels see one streamed chunk of nodes at a time: `nodes` (strictly ascending global ids), their CSR
 * rows as a local `indptr` (B+1, offsets into `indices`, which holds only this chunk's rows) and the
 * global per-node state (labels int32[N], ...) that the caller keeps in memory. Part k of a call is the
 * global label `label_base + k`; any other label (unassigned, or a part of another group in two-level /
 * recursive runs) does not count as a neighbour in any part.
 *
 * fennel_pass -- determinism with threads: the chunk is cut into blocks of `block_nodes` nodes. Phase 1
 * (parallel over the block's nodes) counts, against the state at the block start, the neighbours of each
 * node per part (sparse (part, count) pairs), leaving out neighbours that are nodes of the same block.
 * Phase 2 (sequential, in order) adds the current labels of those block neighbours (earlier ones were
 * just (re)assigned), scores every part and assigns. `restream=1` re-scores already assigned nodes
 * (ReFENNEL: v leaves its part first, then every neighbour's current label counts). With exact counting this is exactly the sequential greedy FENNEL, for any thread
 * count and block size; with Bloom counting the result depends on block_nodes (a fixed argument) but
 * never on the thread count.
 *
 * grem_pass is sequential (O(degree) per node, no scoring over parts).
 *
 * Weights (both kernels, optional, for coarse graphs of the multilevel scheme): `node_weight` (one per
 * chunk node, >= 1) is what a node adds to its part's size, `edge_weight` (one per entry of `indices`, >= 1)
 * what a neighbour adds to a part's count. fennel_pass also takes `train_weight` (training nodes inside a
 * node, replacing the 0/1 `is_train`). Absent weights are 1 (is_train for training), and the result is then
 * exactly that of the unweighted kernels. */
#include "common.h"
#include "kernels.h"
#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BLOOM_HASHES 3

enum {
    P_OK = 0,
    P_ASSIGNED = 4,    /* a: position, b: node id, c: label */
    P_UNASSIGNED = 5,  /* restream: a node outside the call's parts */
    P_NOMEM = SK_ERR_NOMEM,
};

/* The exception for a status of either pass (chunk errors: sk_check_chunk, nodes strictly ascending);
 * returns -1 when one was raised. */
static int raise_pass_error(const char *func, const sk_status *st, int64_t N, int64_t label_base, int64_t p) {
    if (st->code != P_ASSIGNED && st->code != P_UNASSIGNED) return sk_raise_chunk_error(func, st, N, 1);
    const int restream = st->code == P_UNASSIGNED;
    PyErr_Format(PyExc_ValueError,
                 "%s: 'labels' expected the %s nodes %s (%s [%lld, %lld)) (got labels[%lld]=%lld at nodes[%lld])",
                 func, restream ? "restreamed" : "streamed", restream ? "assigned" : "unassigned",
                 restream ? "in" : "outside", (long long)label_base, (long long)(label_base + p), (long long)st->b,
                 (long long)st->c, (long long)st->a);
    return -1;
}

/* ---- FENNEL ------------------------------------------------------------------------------------------- */

/* key: a part index (< p) or, for a neighbour inside the block, its position in the block (< block_nodes, which
 * the caller may set to any size): int64, as the 16-byte pair has the room anyway. */
typedef struct { int64_t key, count; } pair_t;

typedef struct {
    const int64_t *ptr, *nodes, *cols, *ew;
    const int32_t *labels;
    const uint64_t *bloom; /* p filters of `words` uint64 words, or NULL */
    int64_t words, bits;
    uint64_t bloom_key;
    int32_t base, p;
    int64_t bs, be;        /* current block [bs, be) */
    const int64_t *seg;    /* segment start of block node j - bs in `pairs` */
    pair_t *pairs;
    int64_t *npairs, *ninblock; /* per block node: part pairs (<= p), in-block neighbour entries (<= degree) */
    int64_t **scratch;     /* per thread: cnt[p] then touched[p] */
} fennel_ctx;

static inline int bloom_test(const uint64_t *filter, uint64_t h1, uint64_t h2, int64_t bits) {
    for (int r = 0; r < BLOOM_HASHES; r++) {
        const uint64_t bit = (h1 + (uint64_t)r * h2) % (uint64_t)bits;
        if (!((filter[bit >> 6] >> (bit & 63)) & 1u)) return 0;
    }
    return 1;
}

static inline void bloom_hashes(uint64_t key, int64_t u, uint64_t *h1, uint64_t *h2) {
    *h1 = sk_mix64(key ^ (uint64_t)u);
    *h2 = sk_mix64(*h1) | 1u;
}

/* Binary search of u in nodes[lo, hi); -1 when absent. */
static inline int64_t find_sorted(const int64_t *nodes, int64_t lo, int64_t hi, int64_t u) {
    if (lo >= hi || u < nodes[lo] || u > nodes[hi - 1]) return -1;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (nodes[mid] < u) lo = mid + 1;
        else hi = mid;
    }
    return nodes[lo] == u ? lo : -1;
}

static void fennel_count_task(void *arg, int tid, int nthreads) {
    fennel_ctx *c = arg;
    const int64_t n = c->be - c->bs;
    const int64_t lo = c->bs + n * tid / nthreads, hi = c->bs + n * (tid + 1) / nthreads;
    int64_t *cnt = c->scratch[tid], *touched = cnt + c->p;
    for (int64_t j = lo; j < hi; j++) {
        const int64_t jj = j - c->bs;
        pair_t *out = c->pairs + c->seg[jj];
        const int64_t cap = c->seg[jj + 1] - c->seg[jj];
        int64_t nt = 0, nin = 0;
        for (int64_t e = c->ptr[j]; e < c->ptr[j + 1]; e++) {
            const int64_t u = c->cols[e], we = c->ew != NULL ? c->ew[e] : 1;
            const int64_t q = find_sorted(c->nodes, c->bs, c->be, u);
            if (q >= 0) { /* a node of this block: its label is read when j is assigned (phase 2) */
                if (q != j) {
                    out[cap - 1 - nin].key = q - c->bs;
                    out[cap - 1 - nin++].count = we;
                }
                continue;
            }
            if (c->bloom == NULL) {
                const int64_t k = (int64_t)c->labels[u] - c->base;
                if (k < 0 || k >= c->p) continue;
                if (cnt[k] == 0) touched[nt++] = k;
                cnt[k] += we; /* weights >= 1: cnt[k] != 0 marks k as touched */
            } else {
                uint64_t h1, h2;
                bloom_hashes(c->bloom_key, u, &h1, &h2);
                for (int32_t k = 0; k < c->p; k++)
                    if (bloom_test(c->bloom + (int64_t)k * c->words, h1, h2, c->bits)) {
                        if (cnt[k] == 0) touched[nt++] = k;
                        cnt[k] += we;
                    }
            }
        }
        for (int64_t t = 0; t < nt; t++) {
            out[t].key = touched[t];
            out[t].count = cnt[touched[t]];
            cnt[touched[t]] = 0;
        }
        c->npairs[jj] = nt;
        c->ninblock[jj] = nin;
    }
}

PyObject *sk_fennel_pass(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"indptr", "indices", "nodes", "labels", "sizes", "train_sizes", "is_train",
                             "capacity", "weight", "label_base", "alpha", "gamma", "train_penalty", "train_norm",
                             "bloom", "bloom_seed", "block_nodes", "restream", "num_threads", "node_weight",
                             "edge_weight", "train_weight", NULL};
    PyObject *ptr_o, *cols_o, *nodes_o, *labels_o, *sizes_o, *tsizes_o, *train_o, *cap_o, *w_o, *bloom_o = Py_None;
    PyObject *nw_o = Py_None, *ew_o = Py_None, *tw_o = Py_None;
    long long label_base, bloom_seed = 0;
    double alpha, gamma, train_penalty, train_norm;
    Py_ssize_t block_nodes = SK_FENNEL_BLOCK_NODES, nthreads_req = 0;
    int restream = 0;
    Py_buffer ptr = {0}, cols = {0}, nodes = {0}, labels = {0}, sizes = {0}, tsizes = {0}, train = {0}, cap = {0},
              w = {0}, bloom = {0}, nw = {0}, ew = {0}, tw = {0};
    sk_status st = {0};
    PyObject *result = NULL;
    const char *fn = "fennel_pass";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOLdddd|OLnpnOOO:fennel_pass", kwlist, &ptr_o, &cols_o,
                                     &nodes_o, &labels_o, &sizes_o, &tsizes_o, &train_o, &cap_o, &w_o, &label_base,
                                     &alpha, &gamma, &train_penalty, &train_norm, &bloom_o, &bloom_seed,
                                     &block_nodes, &restream, &nthreads_req, &nw_o, &ew_o, &tw_o))
        return NULL;
    int nthreads = sk_resolve_threads(fn, nthreads_req);
    if (nthreads < 0) return NULL;
    if (sk_get_chunk(fn, ptr_o, cols_o, nodes_o, &ptr, &cols, &nodes) < 0) goto done;
    if (sk_get_typed(labels_o, fn, "labels", 'i', 4, "a int32", 1, &labels) < 0) goto done;
    if (sk_get_buffer(sizes_o, fn, "sizes", SK_INT64, 1, 1, &sizes) < 0) goto done;
    if (sk_get_buffer(tsizes_o, fn, "train_sizes", SK_INT64, 1, 1, &tsizes) < 0) goto done;
    if (sk_get_buffer(train_o, fn, "is_train", SK_UINT8, 1, 0, &train) < 0) goto done;
    if (sk_get_buffer(cap_o, fn, "capacity", SK_INT64, 1, 0, &cap) < 0) goto done;
    if (sk_get_typed(w_o, fn, "weight", 'd', 8, "a float64", 0, &w) < 0) goto done;
    if (sk_get_optional(bloom_o, fn, "bloom", SK_UINT8, 1, 1, &bloom) < 0) goto done;

    const int64_t B = sk_len(&nodes), N = sk_len(&labels), p = sk_len(&sizes), E = sk_len(&cols);
    if (sk_get_optional_int64(nw_o, fn, "node_weight", B, 0, 1, &nw) < 0) goto done;
    if (sk_get_optional_int64(ew_o, fn, "edge_weight", E, 0, 1, &ew) < 0) goto done;
    if (sk_get_optional_int64(tw_o, fn, "train_weight", B, 0, 0, &tw) < 0) goto done;
    if (p < 1 || p > INT32_MAX / 2) {
        PyErr_Format(PyExc_ValueError, "%s: 'sizes' expected between 1 and %d parts (got %lld)", fn, INT32_MAX / 2,
                     (long long)p);
        goto done;
    }
    if (sk_len(&tsizes) != p || sk_len(&cap) != p || sk_len(&w) != p) {
        PyErr_Format(PyExc_ValueError,
                     "%s: 'train_sizes', 'capacity' and 'weight' expected %lld entries like 'sizes' (got %lld, %lld, %lld)",
                     fn, (long long)p, (long long)sk_len(&tsizes), (long long)sk_len(&cap), (long long)sk_len(&w));
        goto done;
    }
    if (sk_len(&train) != B) {
        PyErr_Format(PyExc_ValueError, "%s: 'is_train' expected %lld entries like 'nodes' (got %lld)", fn, (long long)B,
                     (long long)sk_len(&train));
        goto done;
    }
    if (label_base < 0 || label_base + p > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: 'label_base' expected labels in int32 range (got %lld + %lld parts)", fn,
                     label_base, (long long)p);
        goto done;
    }
    if (!(train_norm > 0) || !(gamma >= 1) || !(alpha >= 0) || !(train_penalty >= 0)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected alpha >= 0, gamma >= 1, train_penalty >= 0, train_norm > 0 (got %g, %g, %g, %g)", fn,
                     alpha, gamma, train_penalty, train_norm);
        goto done;
    }
    if (sk_check_min(fn, "block_nodes", block_nodes, 1) < 0) goto done;
    int64_t words = 0;
    if (restream && bloom.obj != NULL) {
        PyErr_Format(PyExc_ValueError, "%s: 'restream' expected exact counting (bloom=None) (got a Bloom filter)", fn);
        goto done;
    }
    if (bloom.obj != NULL) {
        const int64_t bytes = sk_len(&bloom);
        if (bytes == 0 || bytes % (8 * p) != 0 || ((uintptr_t)bloom.buf % 8) != 0) {
            PyErr_Format(PyExc_ValueError,
                         "%s: 'bloom' expected p * words * 8 bytes, 8-byte aligned (p=%lld) (got %lld bytes)", fn,
                         (long long)p, (long long)bytes);
            goto done;
        }
        words = bytes / 8 / p;
    }

    const int64_t *P = ptr.buf, *V = nodes.buf, *C = cols.buf;
    int32_t *L = labels.buf;
    int64_t *S = sizes.buf, *T = tsizes.buf;
    const int64_t *CAP = cap.buf;
    const double *W = w.buf;
    const uint8_t *TR = train.buf;
    const int64_t *NW = nw.buf, *TW = tw.buf;
    uint64_t *BL = bloom.buf;
    const int64_t bits = words * 64;
    const uint64_t bkey = sk_mix64((uint64_t)bloom_seed + SK_RNG_G1);
    const int64_t blk = block_nodes < B ? block_nodes : (B > 0 ? B : 1);
    nthreads = sk_cap_threads(nthreads, blk, 64);

    Py_BEGIN_ALLOW_THREADS
    int64_t *seg = NULL;
    pair_t *pairs = NULL;
    int64_t *npairs = NULL, *ninblock = NULL;
    int64_t **scratch = NULL;
    double *cntd = NULL;
    sk_check_chunk(P, B, E, V, 1, C, N, &st);
    for (int64_t j = 0; st.code == 0 && j < B; j++) {
        const int64_t k = (int64_t)L[V[j]] - label_base;
        const int in_range = k >= 0 && k < p;
        if (in_range != restream) sk_status_set(&st, restream ? P_UNASSIGNED : P_ASSIGNED, 0, j, j, V[j], L[V[j]], 0);
    }
    if (st.code == 0 && B > 0) {
        /* Largest block segment total: edges of the block (+ p per node with neighbours when Bloom). */
        int64_t maxseg = 0;
        for (int64_t bs = 0; bs < B; bs += blk) {
            const int64_t be = bs + blk < B ? bs + blk : B;
            int64_t tot = P[be] - P[bs];
            if (BL != NULL)
                for (int64_t j = bs; j < be; j++) tot += P[j + 1] > P[j] ? p : 0;
            if (tot > maxseg) maxseg = tot;
        }
        seg = malloc(sizeof(int64_t) * (size_t)(blk + 1));
        pairs = malloc(sizeof(pair_t) * (size_t)(maxseg > 0 ? maxseg : 1));
        npairs = malloc(sizeof(int64_t) * (size_t)blk);
        ninblock = malloc(sizeof(int64_t) * (size_t)blk);
        scratch = calloc((size_t)nthreads, sizeof(int64_t *));
        cntd = calloc((size_t)p, sizeof(double));
        int ok = seg && pairs && npairs && ninblock && scratch && cntd;
        for (int t = 0; ok && t < nthreads; t++) ok = (scratch[t] = calloc((size_t)(2 * p), sizeof(int64_t))) != NULL;
        if (!ok) sk_status_set(&st, P_NOMEM, 0, 0, 0, 0, 0, 0);
    }
    if (st.code == 0) {
        fennel_ctx ctx = {P, V, C, ew.buf, L, BL, words, bits, bkey, (int32_t)label_base, (int32_t)p, 0, 0, seg,
                          pairs, npairs, ninblock, scratch};
        const double g1 = gamma - 1.0, ag = alpha * gamma;
        for (int64_t bs = 0; bs < B; bs += blk) {
            const int64_t be = bs + blk < B ? bs + blk : B;
            seg[0] = 0;
            for (int64_t j = bs; j < be; j++)
                seg[j - bs + 1] = seg[j - bs] + (P[j + 1] - P[j]) + (BL != NULL && P[j + 1] > P[j] ? p : 0);
            ctx.bs = bs;
            ctx.be = be;
            sk_parallel(sk_cap_threads(nthreads, be - bs, 64), fennel_count_task, &ctx);
            for (int64_t j = bs; j < be; j++) { /* phase 2: sequential assignment in id order */
                const int64_t jj = j - bs, wv = NW != NULL ? NW[j] : 1, tv = TW != NULL ? TW[j] : (TR[j] != 0);
                const pair_t *seg_p = pairs + seg[jj];
                const int64_t segcap = seg[jj + 1] - seg[jj];
                for (int64_t t = 0; t < npairs[jj]; t++) cntd[seg_p[t].key] += (double)seg_p[t].count;
                for (int64_t t = 0; t < ninblock[jj]; t++) {
                    const int64_t k = (int64_t)L[V[bs + seg_p[segcap - 1 - t].key]] - label_base;
                    if (k >= 0 && k < p) cntd[k] += (double)seg_p[segcap - 1 - t].count;
                }
                if (restream) { /* take v out of its part before re-scoring it */
                    const int64_t k0 = (int64_t)L[V[j]] - label_base;
                    S[k0] -= wv;
                    T[k0] -= tv;
                }
                int64_t best = -1;
                double best_score = 0.0;
                for (int64_t k = 0; k < p; k++) {
                    if (S[k] + wv > CAP[k]) continue;
                    double s = cntd[k] - (double)wv * ag * pow(W[k] * (double)S[k], g1);
                    if (tv) s -= (double)tv * train_penalty * (W[k] * (double)T[k]) / train_norm;
                    if (best < 0 || s > best_score) { best = k; best_score = s; }
                }
                if (best < 0) { /* every part full (capacities below the node count): smallest part */
                    best = 0;
                    for (int64_t k = 1; k < p; k++) if (S[k] < S[best]) best = k;
                }
                for (int64_t t = 0; t < npairs[jj]; t++) cntd[seg_p[t].key] = 0.0;
                for (int64_t t = 0; t < ninblock[jj]; t++) {
                    const int64_t k = (int64_t)L[V[bs + seg_p[segcap - 1 - t].key]] - label_base;
                    if (k >= 0 && k < p) cntd[k] = 0.0;
                }
                L[V[j]] = (int32_t)(label_base + best);
                S[best] += wv;
                T[best] += tv;
                if (BL != NULL) {
                    uint64_t h1, h2;
                    bloom_hashes(bkey, V[j], &h1, &h2);
                    uint64_t *f = BL + best * words;
                    for (int r = 0; r < BLOOM_HASHES; r++) {
                        const uint64_t bit = (h1 + (uint64_t)r * h2) % (uint64_t)bits;
                        f[bit >> 6] |= (uint64_t)1 << (bit & 63);
                    }
                }
            }
        }
    }
    if (scratch != NULL)
        for (int t = 0; t < nthreads; t++) free(scratch[t]);
    free(scratch);
    free(seg);
    free(pairs);
    free(npairs);
    free(ninblock);
    free(cntd);
    Py_END_ALLOW_THREADS

    if (raise_pass_error(fn, &st, N, label_base, p) == 0) result = Py_NewRef(Py_None);

done:
    SK_RELEASE(&ptr, &cols, &nodes, &labels, &sizes, &tsizes, &train, &cap, &w, &bloom, &nw, &ew, &tw);
    return result;
}

/* ---- GREM --------------------------------------------------------------------------------------------- */

PyObject *sk_grem_pass(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"indptr", "indices", "nodes", "labels", "pref", "sizes", "capacity", "label_a",
                             "label_b", "node_weight", "edge_weight", NULL};
    PyObject *ptr_o, *cols_o, *nodes_o, *labels_o, *pref_o, *sizes_o, *cap_o, *nw_o = Py_None, *ew_o = Py_None;
    long long la, lb;
    Py_buffer ptr = {0}, cols = {0}, nodes = {0}, labels = {0}, pref = {0}, sizes = {0}, cap = {0}, nw = {0}, ew = {0};
    sk_status st = {0};
    int64_t moved = 0;
    PyObject *result = NULL;
    const char *fn = "grem_pass";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOLL|OO:grem_pass", kwlist, &ptr_o, &cols_o, &nodes_o,
                                     &labels_o, &pref_o, &sizes_o, &cap_o, &la, &lb, &nw_o, &ew_o))
        return NULL;
    if (sk_get_chunk(fn, ptr_o, cols_o, nodes_o, &ptr, &cols, &nodes) < 0) goto done;
    if (sk_get_typed(labels_o, fn, "labels", 'i', 4, "a int32", 1, &labels) < 0) goto done;
    if (sk_get_buffer(pref_o, fn, "pref", SK_FLOAT32, 1, 1, &pref) < 0) goto done;
    if (sk_get_buffer(sizes_o, fn, "sizes", SK_INT64, 1, 1, &sizes) < 0) goto done;
    if (sk_get_buffer(cap_o, fn, "capacity", SK_INT64, 1, 0, &cap) < 0) goto done;

    const int64_t B = sk_len(&nodes), N = sk_len(&labels), E = sk_len(&cols);
    if (sk_get_optional_int64(nw_o, fn, "node_weight", B, 0, 1, &nw) < 0) goto done;
    if (sk_get_optional_int64(ew_o, fn, "edge_weight", E, 0, 1, &ew) < 0) goto done;
    if (sk_len(&pref) != N) {
        PyErr_Format(PyExc_ValueError, "%s: 'pref' expected %lld entries like 'labels' (got %lld)", fn, (long long)N,
                     (long long)sk_len(&pref));
        goto done;
    }
    if (sk_len(&sizes) != 2 || sk_len(&cap) != 2) {
        PyErr_Format(PyExc_ValueError, "%s: 'sizes' and 'capacity' expected 2 entries (got %lld, %lld)", fn,
                     (long long)sk_len(&sizes), (long long)sk_len(&cap));
        goto done;
    }
    if (la == lb || la < INT32_MIN || la > INT32_MAX || lb < INT32_MIN || lb > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: 'label_a', 'label_b' expected two distinct int32 labels (got %lld, %lld)",
                     fn, la, lb);
        goto done;
    }

    const int64_t *P = ptr.buf, *V = nodes.buf, *C = cols.buf, *CAP = cap.buf, *NW = nw.buf, *EW = ew.buf;
    int32_t *L = labels.buf;
    float *PR = pref.buf;
    int64_t *S = sizes.buf;
    const int32_t A = (int32_t)la, Bl = (int32_t)lb;

    Py_BEGIN_ALLOW_THREADS
    sk_check_chunk(P, B, E, V, 1, C, N, &st);
    for (int64_t j = 0; st.code == 0 && j < B; j++) {
        const int64_t v = V[j], wv = NW != NULL ? NW[j] : 1;
        int64_t na = 0, nb = 0;
        for (int64_t e = P[j]; e < P[j + 1]; e++) {
            const int32_t l = L[C[e]];
            const int64_t we = EW != NULL ? EW[e] : 1;
            na += l == A ? we : 0;
            nb += l == Bl ? we : 0;
        }
        /* LDG-style weighting: a neighbour counts less on a side that is filling up */
        const float cur = (float)((double)nb * (1.0 - (double)S[1] / (double)CAP[1]) -
                                  (double)na * (1.0 - (double)S[0] / (double)CAP[0]));
        const int assigned = L[v] == A || L[v] == Bl;
        const int side0 = assigned ? (L[v] == Bl) : -1;
        const float est = assigned ? 0.5f * (PR[v] + cur) : cur;
        int want;
        if (est > 0.0f) want = 1;
        else if (est < 0.0f) want = 0;
        else if (assigned) want = side0;
        else want = (CAP[0] - S[0]) >= (CAP[1] - S[1]) ? 0 : 1;
        if (want != side0 && S[want] + wv > CAP[want]) want = assigned ? side0 : 1 - want;
        if (assigned && want != side0) {
            S[side0] -= wv;
            moved++;
        }
        if (!assigned || want != side0) S[want] += wv;
        L[v] = want ? Bl : A;
        PR[v] = est;
    }
    Py_END_ALLOW_THREADS

    if (raise_pass_error(fn, &st, N, 0, 0) == 0) result = PyLong_FromLongLong((long long)moved);

done:
    SK_RELEASE(&ptr, &cols, &nodes, &labels, &pref, &sizes, &cap, &nw, &ew);
    return result;
}
