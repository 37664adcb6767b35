/* OUTRE's subtree pruning of one sampled batch: remove the (L-1)-deep subtrees of the pulled last-layer
 * sources (their h^{L-1} comes from the historical cache), compacting the layered blocks in order.
 *
 * Layout (storage_kernels.sampleset): hop h's CSR has destinations [0, hop_counts[h]) and sources
 * < hop_counts[h + 1]; hop 0 is the model's last layer. `need` starts as the last layer's sources minus the
 * pulled ones; hop h >= 1 keeps the in-edges of destinations needed at hop h, whose sources (and the
 * destinations themselves) become needed one hop down. Kept nodes: needed at the last hop, or a last-layer
 * source. state[p]: 0 dropped, 1 kept and read, 2 kept but never read (a pulled candidate nobody else needs).
 * The new blocks are written back to back like the input (new_indptr: new_hop_counts[h] + 1 entries per hop,
 * new_cols: edge_counts[h] per hop).
 * Reference: pipelines.policies.outre_trace.prune_batch_numpy. Single-threaded (one batch), without the GIL. */
#include "common.h"
#include "kernels.h"

#include <string.h>

enum { PB_OK = 0, PB_BAD_INDPTR = 1, PB_BAD_COL = 2, PB_BAD_PULLED = 3 };

typedef struct {
    int64_t L, n, top;
    const int64_t *hc, *indptr, *cols, *pulled;
    int64_t num_pulled, indptr_len, cols_len;
    uint8_t *state;
    int64_t *new_indptr, *new_cols, *new_hc, *edge_counts;
} prune_args;

/* Check every hop's indptr (from 0, non-decreasing) and cols (in range); 0 or an error in st. */
static int check_blocks(const prune_args *p, sk_status *st) {
    int64_t ip = 0, cp = 0;
    for (int64_t h = 0; h < p->L; h++) {
        const int64_t *ptr = p->indptr + ip, rows = p->hc[h];
        if (ptr[0] != 0) {
            sk_status_set(st, PB_BAD_INDPTR, 0, 0, h, ip, ptr[0], 0);
            return -1;
        }
        for (int64_t d = 0; d < rows; d++)
            if (ptr[d + 1] < ptr[d]) {
                sk_status_set(st, PB_BAD_INDPTR, 0, 0, h, ip + d + 1, ptr[d + 1], 0);
                return -1;
            }
        const int64_t E = ptr[rows];
        if (E > p->cols_len - cp) {
            sk_status_set(st, PB_BAD_INDPTR, 0, 0, h, ip + rows, E, 0);
            return -1;
        }
        for (int64_t e = 0; e < E; e++)
            if ((uint64_t)p->cols[cp + e] >= (uint64_t)p->hc[h + 1]) {
                sk_status_set(st, PB_BAD_COL, 0, 0, h, cp + e, p->cols[cp + e], p->hc[h + 1]);
                return -1;
            }
        ip += rows + 1;
        cp += E;
    }
    if (cp != p->cols_len) {
        sk_status_set(st, PB_BAD_INDPTR, 0, 0, p->L - 1, ip - 1, cp, 0);
        return -1;
    }
    for (int64_t i = 0; i < p->num_pulled; i++)
        if ((uint64_t)p->pulled[i] >= (uint64_t)p->top) {
            sk_status_set(st, PB_BAD_PULLED, 0, 0, i, p->pulled[i], p->top, 0);
            return -1;
        }
    return 0;
}

/* The pruning itself; 0, or -1 when out of memory. `state` first holds each node's need level: the first hop
 * at which it is needed (1 for the last layer's unpulled sources, h + 1 for a node hop h's kept edges reach),
 * 0 for never; hop h >= 1 keeps the in-edges of destinations with 0 < level <= h. */
static int prune(const prune_args *p) {
    uint8_t *level = p->state;
    memset(level, 0, (size_t)p->n);
    memset(level, 1, (size_t)p->top);
    for (int64_t i = 0; i < p->num_pulled; i++) level[p->pulled[i]] = 0;
    int64_t ip = p->hc[0] + 1, cp = p->indptr[p->hc[0]];
    for (int64_t h = 1; h < p->L; h++) {
        const int64_t *ptr = p->indptr + ip, *col = p->cols + cp;
        for (int64_t d = 0; d < p->hc[h]; d++) {
            if (level[d] == 0 || level[d] > h) continue;
            for (int64_t e = ptr[d]; e < ptr[d + 1]; e++)
                if (level[col[e]] == 0) level[col[e]] = (uint8_t)(h + 1);
        }
        ip += p->hc[h] + 1;
        cp += ptr[p->hc[h]];
    }
    int64_t *new_pos = (int64_t *)malloc((size_t)(p->n > 0 ? p->n : 1) * sizeof(int64_t));
    if (new_pos == NULL) return -1;
    int64_t kept = 0, h_next = 0;
    for (int64_t v = 0; v <= p->n; v++) {
        while (h_next <= p->L && p->hc[h_next] == v) p->new_hc[h_next++] = kept; /* kept nodes in each prefix */
        if (v == p->n) break;
        new_pos[v] = (level[v] != 0 || v < p->top) ? kept++ : -1;
    }
    ip = cp = 0;
    int64_t nip = 0, ncp = 0;
    for (int64_t h = 0; h < p->L; h++) {
        const int64_t *ptr = p->indptr + ip, *col = p->cols + cp;
        int64_t *nptr = p->new_indptr + nip, *ncol = p->new_cols + ncp, out = 0;
        nptr[0] = 0;
        for (int64_t d = 0; d < p->hc[h]; d++) {
            if (h == 0 || (level[d] != 0 && level[d] <= h))
                for (int64_t e = ptr[d]; e < ptr[d + 1]; e++) ncol[out++] = new_pos[col[e]];
            if (new_pos[d] >= 0) nptr[new_pos[d] + 1] = out; /* a dropped destination has no kept edge */
        }
        p->edge_counts[h] = out;
        nip += p->new_hc[h] + 1;
        ncp += out;
        ip += p->hc[h] + 1;
        cp += ptr[p->hc[h]];
    }
    for (int64_t v = 0; v < p->n; v++) p->state[v] = new_pos[v] < 0 ? 0 : (level[v] != 0 ? 1 : 2);
    free(new_pos);
    return 0;
}

PyObject *sk_prune_blocks(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"hop_counts", "indptr", "cols", "pulled", "state", "new_indptr", "new_cols",
                             "new_hop_counts", "edge_counts", NULL};
    PyObject *objs[9];
    Py_buffer hc = {0}, indptr = {0}, cols = {0}, pulled = {0}, state = {0}, new_indptr = {0}, new_cols = {0},
              new_hc = {0}, edge_counts = {0};
    sk_status st = {0};
    PyObject *result = NULL;
    const char *fn = "prune_blocks";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOO:prune_blocks", kwlist, &objs[0], &objs[1], &objs[2],
                                     &objs[3], &objs[4], &objs[5], &objs[6], &objs[7], &objs[8]))
        return NULL;
    if (sk_get_buffer(objs[0], fn, "hop_counts", SK_INT64, 1, 0, &hc) < 0) goto done;
    if (sk_get_buffer(objs[1], fn, "indptr", SK_INT64, 1, 0, &indptr) < 0) goto done;
    if (sk_get_buffer(objs[2], fn, "cols", SK_INT64, 1, 0, &cols) < 0) goto done;
    if (sk_get_buffer(objs[3], fn, "pulled", SK_INT64, 1, 0, &pulled) < 0) goto done;
    if (sk_get_buffer(objs[4], fn, "state", SK_UINT8, 1, 1, &state) < 0) goto done;
    if (sk_get_buffer(objs[5], fn, "new_indptr", SK_INT64, 1, 1, &new_indptr) < 0) goto done;
    if (sk_get_buffer(objs[6], fn, "new_cols", SK_INT64, 1, 1, &new_cols) < 0) goto done;
    if (sk_get_buffer(objs[7], fn, "new_hop_counts", SK_INT64, 1, 1, &new_hc) < 0) goto done;
    if (sk_get_buffer(objs[8], fn, "edge_counts", SK_INT64, 1, 1, &edge_counts) < 0) goto done;

    prune_args p = {0};
    p.hc = hc.buf;
    p.L = sk_len(&hc) - 1;
    if (p.L < 1) {
        PyErr_Format(PyExc_ValueError, "%s: 'hop_counts' expected at least 2 entries (got %lld)", fn,
                     (long long)sk_len(&hc));
        goto done;
    }
    int64_t indptr_len = 0;
    for (int64_t h = 0; h <= p.L; h++) {
        if (p.hc[h] < (h ? p.hc[h - 1] : 0)) {
            PyErr_Format(PyExc_ValueError, "%s: 'hop_counts' expected non-decreasing counts >= 0 (got %lld at %lld)",
                         fn, (long long)p.hc[h], (long long)h);
            goto done;
        }
        if (h < p.L) indptr_len += p.hc[h] + 1;
    }
    if (p.L > 254) { /* need levels are bytes */
        PyErr_Format(PyExc_ValueError, "%s: 'hop_counts' expected at most 255 entries (got %lld)", fn,
                     (long long)(p.L + 1));
        goto done;
    }
    p.n = p.hc[p.L];
    p.top = p.hc[1];
    if (sk_check_len(fn, "indptr", &indptr, indptr_len) < 0 || sk_check_len(fn, "state", &state, p.n) < 0 ||
        sk_check_len(fn, "new_indptr", &new_indptr, indptr_len) < 0 ||
        sk_check_len(fn, "new_cols", &new_cols, sk_len(&cols)) < 0 ||
        sk_check_len(fn, "new_hop_counts", &new_hc, p.L + 1) < 0 ||
        sk_check_len(fn, "edge_counts", &edge_counts, p.L) < 0)
        goto done;
    p.indptr = indptr.buf;
    p.cols = cols.buf;
    p.pulled = pulled.buf;
    p.num_pulled = sk_len(&pulled);
    p.indptr_len = indptr_len;
    p.cols_len = sk_len(&cols);
    p.state = state.buf;
    p.new_indptr = new_indptr.buf;
    p.new_cols = new_cols.buf;
    p.new_hc = new_hc.buf;
    p.edge_counts = edge_counts.buf;

    Py_BEGIN_ALLOW_THREADS
    if (check_blocks(&p, &st) == 0 && prune(&p) < 0) sk_status_set(&st, SK_ERR_NOMEM, 0, 0, 0, 0, 0, 0);
    Py_END_ALLOW_THREADS

    switch (st.code) {
    case PB_OK:
        result = Py_NewRef(Py_None);
        break;
    case PB_BAD_INDPTR:
        PyErr_Format(PyExc_ValueError, "%s: 'indptr' of hop %lld expected to start at 0, not decrease and end "
                     "within cols (got indptr[%lld]=%lld)", fn, (long long)st.a, (long long)st.b, (long long)st.c);
        break;
    case PB_BAD_COL:
        PyErr_Format(PyExc_IndexError, "%s: 'cols' of hop %lld expected positions in [0, %lld) (got cols[%lld]=%lld)",
                     fn, (long long)st.a, (long long)st.d, (long long)st.b, (long long)st.c);
        break;
    case PB_BAD_PULLED:
        sk_raise_index(fn, "pulled", "last-layer source positions", st.c, st.a, st.b);
        break;
    default:
        PyErr_NoMemory();
    }

done:
    SK_RELEASE(&hc, &indptr, &cols, &pulled, &state, &new_indptr, &new_cols, &new_hc, &edge_counts);
    return result;
}
