/* Multilevel partitioning kernels: size-constrained label propagation (coarsening), k-way label-propagation
 * refinement (uncoarsening) and duplicate merging of a contracted CSR (Meyerhenke, Sanders & Schulz,
 * "Partitioning complex networks via size-constrained clustering", 2014; semi-external use as in
 * Akhremtsev, Sanders & Schulz, ALENEX 2015).
 *
 * Like the streaming partitioners (partition.c), the pass kernels see one chunk of nodes at a time: `nodes`
 * (distinct global ids), their rows as a local `indptr` (B+1) into `indices` (this chunk's rows only), and
 * global per-node state owned by the caller. Optional weights: `node_weight` (B, one per chunk node),
 * `edge_weight` (one per entry of `indices`); absent means 1, given ones must be >= 1. `visit` (optional,
 * distinct chunk positions) lists the nodes to visit, in order; the others are read as neighbours only
 * (degree-bucketed passes visit one bucket of every chunk at a time); absent means 0..B-1. Both
 * passes are sequential: each move is seen by the nodes visited after it, so the result depends on the
 * inputs alone.
 *
 * cluster_pass: v joins the neighbouring cluster c != clusters[v] with the largest connection weight among
 *   those with cluster_weight[c] + w(v) <= max_weight, when that weight is strictly larger than v's
 *   connection to its own cluster (ties: smallest c). Self loops are ignored. Cluster ids are node ids.
 * refine_pass: v moves to the part c != parts[v] with the largest connection weight among those with room
 *   (sizes[c] + w(v) <= capacity[c], and, with training weights, train_sizes[c] + t(v) <= train_capacity[c]
 *   when t(v) > 0), when that weight is strictly larger than its connection to its own part -- or, when its
 *   own part is over capacity, whatever the gain (v must have a neighbour in c). Ties: smallest c.
 *   Neighbours whose label is outside [0, k) are ignored.
 * csr_aggregate: sorts every row by column and merges duplicate columns, summing their weights, in place;
 *   returns the new indptr and the number of entries kept (the prefix of indices / weights). */
#include "common.h"
#include "kernels.h"

#include <stdlib.h>
#include <string.h>

enum {
    ML_OK = 0,
    ML_BAD_PTR = 1,    /* csr_aggregate: a: position, b: value */
    ML_BAD_LABEL = 4,  /* a: node id, b: label (cluster or part) */
    ML_BAD_VISIT = 5,  /* a: position, b: value */
    ML_NOMEM = SK_ERR_NOMEM,
};

typedef struct {
    int64_t key, weight;
} ml_pair;

#define ML_PAIR_KEY(pair) ((pair).key)
SK_DEFINE_SORT(sort_pairs, ml_pair, ML_PAIR_KEY)

/* Validate a chunk: sk_check_chunk (nodes in [0, N), any order), then visit: T distinct positions in [0, B)
 * (weights are checked when the arguments are parsed). Without the GIL; fills st. */
static void check_chunk(const int64_t *ptr, int64_t B, int64_t E, const int64_t *nodes, const int64_t *cols,
                        int64_t N, const int64_t *visit, int64_t T, sk_status *st) {
    sk_check_chunk(ptr, B, E, nodes, 0, cols, N, st);
    if (st->code == 0 && visit != NULL) {
        uint8_t *seen = calloc((size_t)(B > 0 ? B : 1), 1);
        if (seen == NULL) { sk_status_set(st, ML_NOMEM, 0, 0, 0, 0, 0, 0); return; }
        for (int64_t j = 0; j < T; j++) {
            if ((uint64_t)visit[j] >= (uint64_t)B || seen[visit[j]]) {
                sk_status_set(st, ML_BAD_VISIT, 0, j, j, visit[j], 0, 0);
                break;
            }
            seen[visit[j]] = 1;
        }
        free(seen);
    }
}

static int raise_error(const char *fn, const sk_status *st, int64_t N, int64_t B, int64_t k) {
    switch (st->code) {
    case ML_BAD_LABEL:
        PyErr_Format(PyExc_ValueError, "%s: expected the label of node %lld in [0, %lld) (got %lld)", fn,
                     (long long)st->a, (long long)k, (long long)st->b);
        return -1;
    case ML_BAD_VISIT:
        PyErr_Format(PyExc_ValueError, "%s: 'visit' expected distinct positions in [0, %lld) (got visit[%lld]=%lld)", fn,
                     (long long)B, (long long)st->a, (long long)st->b);
        return -1;
    default:
        return sk_raise_chunk_error(fn, st, N, 0);
    }
}

/* Optional visit list: at most B int64 positions (checked for range and distinctness in check_chunk). */
static int get_visit(PyObject *obj, const char *fn, int64_t B, Py_buffer *view) {
    if (sk_get_optional(obj, fn, "visit", SK_INT64, 1, 0, view) < 0) return -1;
    if (view->obj != NULL && sk_len(view) > B) {
        PyErr_Format(PyExc_ValueError, "%s: 'visit' expected at most %lld positions (got %lld)", fn, (long long)B,
                     (long long)sk_len(view));
        sk_release(view);
        return -1;
    }
    return 0;
}

static int64_t max_row(const int64_t *ptr, int64_t B) {
    int64_t m = 0;
    for (int64_t j = 0; j < B; j++)
        if (ptr[j + 1] - ptr[j] > m) m = ptr[j + 1] - ptr[j];
    return m;
}

/* ---- cluster_pass --------------------------------------------------------------------------------------- */

PyObject *sk_cluster_pass(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"indptr", "indices", "nodes", "clusters", "cluster_weight", "max_weight",
                             "node_weight", "edge_weight", "visit", NULL};
    PyObject *ptr_o, *cols_o, *nodes_o, *cl_o, *cw_o, *nw_o = Py_None, *ew_o = Py_None, *visit_o = Py_None;
    long long max_weight;
    Py_buffer ptr = {0}, cols = {0}, nodes = {0}, cl = {0}, cw = {0}, nw = {0}, ew = {0}, visit = {0};
    sk_status st = {0};
    int64_t moved = 0;
    PyObject *result = NULL;
    const char *fn = "cluster_pass";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOL|OOO:cluster_pass", kwlist, &ptr_o, &cols_o, &nodes_o,
                                     &cl_o, &cw_o, &max_weight, &nw_o, &ew_o, &visit_o))
        return NULL;
    if (sk_get_chunk(fn, ptr_o, cols_o, nodes_o, &ptr, &cols, &nodes) < 0) goto done;
    if (sk_get_buffer(cl_o, fn, "clusters", SK_INT64, 1, 1, &cl) < 0) goto done;
    const int64_t B = sk_len(&nodes), N = sk_len(&cl), E = sk_len(&cols);
    if (sk_get_int64_n(cw_o, fn, "cluster_weight", N, 1, INT64_MIN, &cw) < 0) goto done;
    if (sk_get_optional_int64(nw_o, fn, "node_weight", B, 0, 1, &nw) < 0) goto done;
    if (sk_get_optional_int64(ew_o, fn, "edge_weight", E, 0, 1, &ew) < 0) goto done;
    if (get_visit(visit_o, fn, B, &visit) < 0) goto done;
    if (sk_check_min(fn, "max_weight", max_weight, 1) < 0) goto done;

    const int64_t *P = ptr.buf, *V = nodes.buf, *C = cols.buf, *NW = nw.buf, *EW = ew.buf, *VI = visit.buf;
    int64_t *CL = cl.buf, *CW = cw.buf;
    Py_BEGIN_ALLOW_THREADS
    const int64_t T = VI != NULL ? sk_len(&visit) : B;
    check_chunk(P, B, E, V, C, N, VI, T, &st);
    /* every cluster id the pass can read, checked before anything moves (an error leaves the state intact) */
    for (int64_t j = 0; st.code == 0 && j < B; j++)
        if ((uint64_t)CL[V[j]] >= (uint64_t)N) sk_status_set(&st, ML_BAD_LABEL, 0, 0, V[j], CL[V[j]], 0, 0);
    for (int64_t e = P[0]; st.code == 0 && e < P[B]; e++)
        if ((uint64_t)CL[C[e]] >= (uint64_t)N) sk_status_set(&st, ML_BAD_LABEL, 0, 0, C[e], CL[C[e]], 0, 0);
    ml_pair *buf = NULL;
    if (st.code == 0) {
        const int64_t m = max_row(P, B);
        buf = malloc(sizeof(ml_pair) * (size_t)(m > 0 ? m : 1));
        if (buf == NULL) sk_status_set(&st, ML_NOMEM, 0, 0, 0, 0, 0, 0);
    }
    for (int64_t t = 0; st.code == 0 && t < T; t++) {
        const int64_t j = VI != NULL ? VI[t] : t, v = V[j], wv = NW != NULL ? NW[j] : 1;
        const int64_t cur = CL[v];
        int64_t n = 0;
        for (int64_t e = P[j]; e < P[j + 1]; e++) {
            const int64_t u = C[e];
            if (u == v) continue;
            buf[n].key = CL[u]; /* in range: checked above, and moves only write ids that were read */
            buf[n].weight = EW != NULL ? EW[e] : 1;
            n++;
        }
        sort_pairs(buf, n);
        int64_t own = 0, best = -1, best_w = 0;
        for (int64_t i = 0; i < n;) { /* runs of equal clusters, ascending */
            const int64_t c = buf[i].key;
            int64_t w = 0;
            for (; i < n && buf[i].key == c; i++) w += buf[i].weight;
            if (c == cur) own = w;
            else if (CW[c] + wv <= max_weight && (best < 0 || w > best_w)) {
                best = c;
                best_w = w;
            }
        }
        if (best >= 0 && best_w > own) {
            CW[cur] -= wv;
            CW[best] += wv;
            CL[v] = best;
            moved++;
        }
    }
    free(buf);
    Py_END_ALLOW_THREADS

    if (raise_error(fn, &st, N, B, N) == 0) result = PyLong_FromLongLong((long long)moved);

done:
    SK_RELEASE(&ptr, &cols, &nodes, &cl, &cw, &nw, &ew, &visit);
    return result;
}

/* ---- refine_pass ---------------------------------------------------------------------------------------- */

PyObject *sk_refine_pass(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"indptr", "indices", "nodes", "parts", "sizes", "capacity", "node_weight",
                             "edge_weight", "train_weight", "train_sizes", "train_capacity", "visit", NULL};
    PyObject *ptr_o, *cols_o, *nodes_o, *parts_o, *sizes_o, *cap_o;
    PyObject *nw_o = Py_None, *ew_o = Py_None, *tw_o = Py_None, *ts_o = Py_None, *tc_o = Py_None, *visit_o = Py_None;
    Py_buffer ptr = {0}, cols = {0}, nodes = {0}, parts = {0}, sizes = {0}, cap = {0}, nw = {0}, ew = {0}, tw = {0},
              ts = {0}, tc = {0}, visit = {0};
    sk_status st = {0};
    int64_t moved = 0, k = 0;
    PyObject *result = NULL;
    const char *fn = "refine_pass";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOO|OOOOOO:refine_pass", kwlist, &ptr_o, &cols_o, &nodes_o,
                                     &parts_o, &sizes_o, &cap_o, &nw_o, &ew_o, &tw_o, &ts_o, &tc_o, &visit_o))
        return NULL;
    if (sk_get_chunk(fn, ptr_o, cols_o, nodes_o, &ptr, &cols, &nodes) < 0) goto done;
    if (sk_get_typed(parts_o, fn, "parts", 'i', 4, "an int32", 1, &parts) < 0) goto done;
    if (sk_get_buffer(sizes_o, fn, "sizes", SK_INT64, 1, 1, &sizes) < 0) goto done;
    const int64_t B = sk_len(&nodes), N = sk_len(&parts), E = sk_len(&cols);
    k = sk_len(&sizes);
    if (k < 1 || k > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: 'sizes' expected between 1 and %d parts (got %lld)", fn, INT32_MAX, (long long)k);
        goto done;
    }
    if (sk_get_int64_n(cap_o, fn, "capacity", k, 0, INT64_MIN, &cap) < 0) goto done;
    if (sk_get_optional_int64(nw_o, fn, "node_weight", B, 0, 1, &nw) < 0) goto done;
    if (sk_get_optional_int64(ew_o, fn, "edge_weight", E, 0, 1, &ew) < 0) goto done;
    if (sk_get_optional_int64(tw_o, fn, "train_weight", B, 0, 0, &tw) < 0) goto done;
    if (sk_get_optional_int64(ts_o, fn, "train_sizes", k, 1, INT64_MIN, &ts) < 0) goto done;
    if (sk_get_optional_int64(tc_o, fn, "train_capacity", k, 0, INT64_MIN, &tc) < 0) goto done;
    if ((tw.obj == NULL) != (ts.obj == NULL) || (tw.obj == NULL) != (tc.obj == NULL)) {
        PyErr_Format(PyExc_ValueError, "%s: 'train_weight', 'train_sizes' and 'train_capacity' expected all or none", fn);
        goto done;
    }
    if (get_visit(visit_o, fn, B, &visit) < 0) goto done;

    const int64_t *P = ptr.buf, *V = nodes.buf, *C = cols.buf, *NW = nw.buf, *EW = ew.buf, *TW = tw.buf;
    const int64_t *CAP = cap.buf, *TC = tc.buf, *VI = visit.buf;
    int64_t *S = sizes.buf, *TS = ts.buf;
    int32_t *L = parts.buf;
    Py_BEGIN_ALLOW_THREADS
    const int64_t T = VI != NULL ? sk_len(&visit) : B;
    check_chunk(P, B, E, V, C, N, VI, T, &st);
    /* streamed nodes must have a part: checked before anything moves (an error leaves the state intact) */
    for (int64_t j = 0; st.code == 0 && j < B; j++)
        if (L[V[j]] < 0 || L[V[j]] >= k) sk_status_set(&st, ML_BAD_LABEL, 0, 0, V[j], L[V[j]], 0, 0);
    int64_t *conn = NULL, *touched = NULL;
    if (st.code == 0) {
        conn = calloc((size_t)k, sizeof(int64_t));
        touched = malloc(sizeof(int64_t) * (size_t)k);
        if (conn == NULL || touched == NULL) sk_status_set(&st, ML_NOMEM, 0, 0, 0, 0, 0, 0);
    }
    for (int64_t t = 0; st.code == 0 && t < T; t++) {
        const int64_t j = VI != NULL ? VI[t] : t, v = V[j], wv = NW != NULL ? NW[j] : 1, tv = TW != NULL ? TW[j] : 0;
        const int64_t cur = L[v];
        int64_t nt = 0;
        for (int64_t e = P[j]; e < P[j + 1]; e++) {
            const int64_t u = C[e];
            if (u == v) continue;
            const int64_t c = L[u];
            if (c < 0 || c >= k) continue;
            if (conn[c] == 0) touched[nt++] = c;
            conn[c] += EW != NULL ? EW[e] : 1; /* weights >= 1, so conn[c] != 0 marks c as touched */
        }
        int64_t best = -1;
        for (int64_t i = 0; i < nt; i++) {
            const int64_t c = touched[i];
            if (c == cur || S[c] + wv > CAP[c]) continue;
            if (TW != NULL && tv > 0 && TS[c] + tv > TC[c]) continue;
            if (best < 0 || conn[c] > conn[best] || (conn[c] == conn[best] && c < best)) best = c;
        }
        if (best >= 0 && (conn[best] > conn[cur] || S[cur] > CAP[cur])) {
            S[cur] -= wv;
            S[best] += wv;
            if (TW != NULL) {
                TS[cur] -= tv;
                TS[best] += tv;
            }
            L[v] = (int32_t)best;
            moved++;
        }
        for (int64_t i = 0; i < nt; i++) conn[touched[i]] = 0;
    }
    free(conn);
    free(touched);
    Py_END_ALLOW_THREADS

    if (raise_error(fn, &st, N, B, k) == 0) result = PyLong_FromLongLong((long long)moved);

done:
    SK_RELEASE(&ptr, &cols, &nodes, &parts, &sizes, &cap, &nw, &ew, &tw, &ts, &tc, &visit);
    return result;
}

/* ---- csr_aggregate -------------------------------------------------------------------------------------- */

PyObject *sk_csr_aggregate(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"indptr", "indices", "weights", NULL};
    PyObject *ptr_o, *cols_o, *w_o;
    Py_buffer ptr = {0}, cols = {0}, w = {0};
    sk_status st = {0};
    int64_t *out_ptr = NULL;
    PyObject *result = NULL;
    const char *fn = "csr_aggregate";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:csr_aggregate", kwlist, &ptr_o, &cols_o, &w_o)) return NULL;
    if (sk_get_csr(fn, ptr_o, cols_o, 1, &ptr, &cols) < 0) goto done;
    if (sk_get_buffer(w_o, fn, "weights", SK_INT64, 1, 1, &w) < 0) goto done;
    const int64_t n = sk_len(&ptr) - 1, E = sk_len(&cols);
    if (sk_len(&w) != E) {
        PyErr_Format(PyExc_ValueError, "%s: 'weights' expected %lld entries like 'indices' (got %lld)", fn,
                     (long long)E, (long long)sk_len(&w));
        goto done;
    }
    const int64_t *P = ptr.buf;
    out_ptr = malloc(sizeof(int64_t) * (size_t)(n + 1));
    if (out_ptr == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *C = cols.buf, *W = w.buf;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < n; i++)
        if (P[i + 1] < P[i]) { sk_status_set(&st, ML_BAD_PTR, 0, i + 1, i + 1, P[i + 1], 0, 0); break; }
    ml_pair *buf = NULL;
    if (st.code == 0) {
        const int64_t m = max_row(P, n);
        buf = malloc(sizeof(ml_pair) * (size_t)(m > 0 ? m : 1));
        if (buf == NULL) sk_status_set(&st, ML_NOMEM, 0, 0, 0, 0, 0, 0);
    }
    if (st.code == 0) {
        int64_t out = 0; /* write cursor; never passes the read position P[i] */
        out_ptr[0] = 0;
        for (int64_t i = 0; i < n; i++) {
            const int64_t len = P[i + 1] - P[i];
            for (int64_t t = 0; t < len; t++) {
                buf[t].key = C[P[i] + t];
                buf[t].weight = W[P[i] + t];
            }
            sort_pairs(buf, len);
            for (int64_t t = 0; t < len;) {
                const int64_t c = buf[t].key;
                int64_t s = 0;
                for (; t < len && buf[t].key == c; t++) s += buf[t].weight;
                C[out] = c;
                W[out] = s;
                out++;
            }
            out_ptr[i + 1] = out;
        }
    }
    free(buf);
    Py_END_ALLOW_THREADS

    if (st.code == ML_BAD_PTR) {
        PyErr_Format(PyExc_ValueError, "%s: 'indptr' expected non-decreasing offsets (got indptr[%lld]=%lld)", fn,
                     (long long)st.a, (long long)st.b);
    } else if (st.code == ML_NOMEM) {
        PyErr_NoMemory();
    } else {
        const long long nnz = (long long)out_ptr[n];
        PyObject *arr = sk_int64_array_from_malloc(out_ptr, n + 1); /* frees out_ptr on failure */
        out_ptr = NULL;
        if (arr != NULL) result = Py_BuildValue("(NL)", arr, nnz);
    }

done:
    free(out_ptr);
    SK_RELEASE(&ptr, &cols, &w);
    return result;
}
