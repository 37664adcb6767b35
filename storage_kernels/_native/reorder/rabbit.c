/* Rabbit-Order-style community ordering for the `community` reorder strategy (Arai et al., IPDPS 2016):
 * incremental aggregation of vertices into communities (Louvain-style modularity gains), recorded as a
 * dendrogram, then a depth-first walk of the dendrogram so that every community -- and every sub-community
 * inside it -- is one contiguous range of new ids.
 *
 * rabbit_order(indptr, indices, skip=None) -> (perm int64[N], num_communities)
 *
 * The exact rule (tests/storage_kernels/reference.py rabbit_order_ref reimplements it):
 * 1. Vertices are visited once each, by degree ascending (ties: id ascending). Every vertex starts as the
 *    root of its own community; strength[v] = degree(v) (CSR row length); E = len(indices).
 * 2. Visiting u (a root), gather its edges to other communities: each CSR entry (u, x) adds 1 to the weight
 *    of root(x), and each vertex c merged into u before this visit adds its stored list of (target, weight)
 *    pairs, weight to root(target). Entries whose root is u itself are internal and skipped.
 * 3. The best neighbour community r maximises the modularity gain, up to a positive factor,
 *    score(r) = w(u, r) * E - strength[u] * strength[r] (exact 128-bit integers); ties: smallest r.
 * 4. If score > 0, u (with its members) merges into r: root(u) = r, strength[r] += strength[u], u is
 *    appended to r's children, and -- only when r has not been visited yet -- u's gathered list of (root,
 *    weight) pairs is kept for r's visit. Otherwise u stays a root.
 * Nodes with skip[v] != 0 (hubs, say) take no part: never visited, never merged into, their CSR entries
 *    ignored; each stays a root of its own.
 * 5. Order: the remaining roots by strength descending (ties: id ascending); each is walked depth first in
 *    pre-order, children in merge order. num_communities = number of roots.
 * Single-threaded (the order of merges is the algorithm); work is O(E) plus list re-aggregation, memory is
 * ~60 bytes per node plus at most 8 bytes per CSR entry for the pending lists (counts fit in 32 bits, so
 * N and E must be below 2**32). */
#include "common.h"
#include "kernels.h"

#include <stdlib.h>
#include <string.h>

enum { RB_OK = 0, RB_NOMEM = SK_ERR_NOMEM };

typedef struct {
    uint32_t target; /* a vertex id; its current root is looked up when the list is gathered */
    uint32_t weight;
} rb_entry;

typedef struct {
    rb_entry *items;
    uint32_t len;
} rb_list;

/* Root of v with path halving. */
static inline int64_t rb_find(int64_t *dest, int64_t v) {
    while (dest[v] != v) {
        dest[v] = dest[dest[v]];
        v = dest[v];
    }
    return v;
}

typedef struct {
    int64_t *acc;     /* N, zero outside a visit: weight to each root */
    int64_t *touched; /* roots with acc != 0 in this visit */
    int64_t ntouched;
} rb_gather;

static inline void rb_add(rb_gather *g, int64_t r, int64_t w) {
    if (g->acc[r] == 0) g->touched[g->ntouched++] = r;
    g->acc[r] += w;
}

/* The whole algorithm without the GIL, on a validated CSR (sk_check_csr) whose largest degree is max_degree;
 * returns RB_OK or RB_NOMEM (st set). */
static int rabbit_run(const int64_t *ip, const int64_t *ix, const uint8_t *skip, int64_t N, int64_t E,
                      int64_t max_degree, int64_t *perm, int64_t *num_communities, sk_status *st) {
    int code = RB_OK;
    int64_t *dest = malloc(sizeof(int64_t) * (size_t)(N + 1));
    int64_t *strength = malloc(sizeof(int64_t) * (size_t)(N + 1));
    int64_t *head = malloc(sizeof(int64_t) * (size_t)(N + 1)); /* first child, -1 = none */
    int64_t *tail = malloc(sizeof(int64_t) * (size_t)(N + 1));
    int64_t *next = malloc(sizeof(int64_t) * (size_t)(N + 1)); /* next sibling */
    int64_t *visit = malloc(sizeof(int64_t) * (size_t)(N + 1));
    int64_t *acc = calloc((size_t)(N + 1), sizeof(int64_t));
    int64_t *touched = malloc(sizeof(int64_t) * (size_t)(N + 1));
    uint8_t *visited = calloc((size_t)(N + 1), 1);
    rb_list *lists = calloc((size_t)(N + 1), sizeof(rb_list));
    if (!dest || !strength || !head || !tail || !next || !visit || !acc || !touched || !visited || !lists) {
        code = RB_NOMEM;
        goto done;
    }
    for (int64_t v = 0; v < N; v++) {
        dest[v] = v;
        strength[v] = ip[v + 1] - ip[v];
        head[v] = tail[v] = next[v] = -1;
    }
    { /* visit order: counting sort by degree, stable in id */
        int64_t *count = calloc((size_t)(max_degree + 2), sizeof(int64_t));
        if (count == NULL) {
            code = RB_NOMEM;
            goto done;
        }
        for (int64_t v = 0; v < N; v++) count[ip[v + 1] - ip[v] + 1]++;
        for (int64_t d = 0; d <= max_degree; d++) count[d + 1] += count[d];
        for (int64_t v = 0; v < N; v++) visit[count[ip[v + 1] - ip[v]]++] = v;
        free(count);
    }
    rb_gather g = {acc, touched, 0};
    for (int64_t k = 0; k < N; k++) {
        const int64_t u = visit[k];
        if (skip != NULL && skip[u]) continue;
        g.ntouched = 0;
        for (int64_t i = ip[u]; i < ip[u + 1]; i++) {
            if (skip != NULL && skip[ix[i]]) continue;
            const int64_t r = rb_find(dest, ix[i]);
            if (r != u) rb_add(&g, r, 1);
        }
        for (int64_t c = head[u]; c >= 0; c = next[c]) {
            rb_list *l = &lists[c];
            for (uint32_t t = 0; t < l->len; t++) {
                const int64_t r = rb_find(dest, (int64_t)l->items[t].target);
                if (r != u) rb_add(&g, r, (int64_t)l->items[t].weight);
            }
            free(l->items);
            l->items = NULL;
            l->len = 0;
        }
        visited[u] = 1;
        int64_t best = -1;
        __int128 best_score = 0;
        for (int64_t t = 0; t < g.ntouched; t++) {
            const int64_t r = touched[t];
            const __int128 s = (__int128)acc[r] * E - (__int128)strength[u] * strength[r];
            if (best < 0 || s > best_score || (s == best_score && r < best)) {
                best = r;
                best_score = s;
            }
        }
        if (best >= 0 && best_score > 0) {
            dest[u] = best;
            strength[best] += strength[u];
            if (tail[best] < 0) head[best] = u; else next[tail[best]] = u;
            tail[best] = u;
            if (!visited[best] && g.ntouched > 0) {
                rb_entry *items = malloc(sizeof(rb_entry) * (size_t)g.ntouched);
                if (items == NULL) {
                    code = RB_NOMEM;
                    goto done;
                }
                for (int64_t t = 0; t < g.ntouched; t++) {
                    items[t].target = (uint32_t)touched[t];
                    items[t].weight = (uint32_t)acc[touched[t]];
                }
                lists[u].items = items;
                lists[u].len = (uint32_t)g.ntouched;
            }
        }
        for (int64_t t = 0; t < g.ntouched; t++) acc[touched[t]] = 0;
    }
    /* Roots by strength descending (ties: id ascending): reuse `visit` for the roots, `touched` as a stack. */
    int64_t nroots = 0;
    for (int64_t v = 0; v < N; v++)
        if (dest[v] == v) visit[nroots++] = v;
    { /* stable bottom-up merge sort; `acc` (all zero again after the visits) is the scratch */
        int64_t *tmp = acc;
        for (int64_t width = 1; width < nroots; width *= 2) {
            for (int64_t lo = 0; lo < nroots; lo += 2 * width) {
                const int64_t mid = lo + width < nroots ? lo + width : nroots;
                const int64_t hi = lo + 2 * width < nroots ? lo + 2 * width : nroots;
                int64_t a = lo, b = mid, o = lo;
                while (a < mid && b < hi) { /* stable: take from the left run on ties */
                    const int64_t x = visit[a], y = visit[b];
                    if (strength[y] > strength[x]) tmp[o++] = visit[b++]; else tmp[o++] = visit[a++];
                }
                while (a < mid) tmp[o++] = visit[a++];
                while (b < hi) tmp[o++] = visit[b++];
            }
            memcpy(visit, tmp, sizeof(int64_t) * (size_t)nroots);
        }
    }
    int64_t pos = 0;
    for (int64_t i = 0; i < nroots; i++) {
        int64_t depth = 0;
        perm[pos++] = visit[i];
        touched[depth++] = head[visit[i]];
        while (depth > 0) {
            const int64_t c = touched[depth - 1];
            if (c < 0) {
                depth--;
                continue;
            }
            touched[depth - 1] = next[c];
            perm[pos++] = c;
            touched[depth++] = head[c];
        }
    }
    *num_communities = nroots;
done:
    if (lists != NULL)
        for (int64_t v = 0; v < N; v++) free(lists[v].items);
    free(lists);
    free(dest);
    free(strength);
    free(head);
    free(tail);
    free(next);
    free(visit);
    free(acc);
    free(touched);
    free(visited);
    if (code == RB_NOMEM) sk_status_set(st, RB_NOMEM, 0, 0, 0, 0, 0, 0);
    return code;
}

PyObject *sk_rabbit_order(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"indptr", "indices", "skip", NULL};
    PyObject *indptr_obj, *indices_obj, *skip_obj = Py_None;
    Py_buffer indptr = {0}, indices = {0}, skip = {0};
    int64_t *perm = NULL;
    sk_status st = {0};
    int64_t num_communities = 0;
    PyObject *result = NULL;
    const char *fn = "rabbit_order";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O:rabbit_order", kwlist, &indptr_obj, &indices_obj, &skip_obj))
        return NULL;
    if (sk_get_csr(fn, indptr_obj, indices_obj, 0, &indptr, &indices) < 0) goto done;
    const int64_t N = sk_len(&indptr) - 1, E = sk_len(&indices);
    const int64_t *ip = indptr.buf, *ix = indices.buf;
    if (sk_get_optional(skip_obj, fn, "skip", SK_UINT8, 1, 0, &skip) < 0) goto done;
    if (skip.obj != NULL && sk_len(&skip) != N) {
        PyErr_Format(PyExc_ValueError, "rabbit_order: 'skip' expected %lld entries, one per node (got %lld)",
                     (long long)N, (long long)sk_len(&skip));
        goto done;
    }
    if ((uint64_t)N >= UINT32_MAX || (uint64_t)E >= UINT32_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "rabbit_order: expected fewer than 2**32 nodes and CSR entries (got %lld nodes, %lld entries)",
                     (long long)N, (long long)E);
        goto done;
    }
    perm = malloc(sizeof(int64_t) * (size_t)(N > 0 ? N : 1));
    if (perm == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    const int64_t max_degree = sk_check_csr(ip, N, ix, E, &st);
    if (max_degree >= 0)
        rabbit_run(ip, ix, skip.obj != NULL ? (const uint8_t *)skip.buf : NULL, N, E, max_degree, perm,
                   &num_communities, &st);
    Py_END_ALLOW_THREADS

    if (sk_raise_csr_error(fn, &st, N, E) < 0) goto done;
    if (st.code == RB_NOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *out = sk_int64_array_from_malloc(perm, N); /* frees perm on failure */
    perm = NULL;
    if (out != NULL) result = Py_BuildValue("(NL)", out, (long long)num_communities);

done:
    free(perm);
    SK_RELEASE(&indptr, &indices, &skip);
    return result;
}
