/* Belady-optimal feature-cache changesets of one superbatch (Ginex, PVLDB 15(11) 2022, the "O(S)" changeset
 * precomputation of its inspector-executor design).
 *
 * belady_changesets(batch_ptr, ids, num_nodes, num_entries)
 *     -> (init_ids, update_ptr, in_ids, out_ids, in_positions, hits)
 *
 * The superbatch is S iterations; iteration i reads the nodes ids[batch_ptr[i]:batch_ptr[i+1]] (a node listed
 * twice in one iteration counts once, at its first position). The cache holds at most K = num_entries nodes:
 * C_0 = init_ids, the first K distinct nodes of the superbatch in trace order (Ginex's initial prefetch: the
 * nodes of the first iterations until the cache is full). Iteration i hits the nodes of its batch that are in
 * C_i (hits[i]); then C_{i+1} = the K candidates of C_i | ids_i with the smallest key (next access after
 * iteration i, new (not in C_i), node id), next access = "never" (infinity) when the node is not read again
 * in the superbatch. Furthest-next-access eviction with bypass is optimal for this cache model (every batch
 * row is read anyway, so inserting it costs no I/O); the key is a total order, so the result is unique, and a
 * candidate that is never read again is only kept while the cache has room (never inserted in place of one).
 *
 * Changeset of iteration i (entries update_ptr[i]:update_ptr[i+1]): in_ids = C_{i+1} - C_i in batch order,
 * in_positions their first positions in the batch, out_ids = C_i - C_{i+1} in cache-slot order (slot s of
 * the simulation holds init_ids[s] until replaced: out_ids[k]'s slot receives in_ids[k]). Because C_0 holds
 * min(K, distinct nodes) nodes and every node of the superbatch fits when it is not full, |in| == |out|.
 *
 * The next access of every node comes from a CSR of (node x iteration) occurrences built in two passes
 * (count per node, exclusive prefix sum, fill), terminated by one dummy "infinity" entry; the first entry of
 * each node's run carries the most significant bit, so that stepping past a node's last occurrence (onto the
 * next node's flagged first entry) reads as infinity. One cursor per node advances as iterations read it.
 * Work per iteration is O(K + batch) (the kept set is a quickselect of the K smallest keys), memory ~9 bytes
 * per node of the id space plus 8 per occurrence. Single-threaded (iterations depend on each other), without
 * the GIL: superbatches are independent and can run on several Python threads.
 * tests/storage_kernels/reference_cache.py belady_changesets_ref reimplements the rule. */
#include "common.h"
#include "kernels.h"

#include <string.h>

enum { BL_OK = 0, BL_BAD_PTR = 1, BL_BAD_ID = 2, BL_NOMEM = SK_ERR_NOMEM };

#define BL_FLAG ((uint64_t)1 << 63) /* marks the first occurrence entry of a node's run */
#define BL_INF (BL_FLAG - 1)        /* next access "never": the dummy entry (unflagged) */

/* per-node state bits */
#define BL_CACHED 1u /* in the current cache C_i */
#define BL_SEEN 2u   /* already met in the current batch (cleared after it) */
#define BL_KEEP 4u   /* a new node kept for C_{i+1} (cleared after the batch) */

typedef struct {
    uint64_t next; /* next access iteration (BL_INF: never) */
    int64_t node;
    int64_t slot; /* its cache slot, or -1 - (first position in the batch) for a new node */
} bl_cand;

/* (next, new, node) ascending; new = slot < 0 */
static inline int bl_less(const bl_cand *a, const bl_cand *b) {
    if (a->next != b->next) return a->next < b->next;
    const int an = a->slot < 0, bn = b->slot < 0;
    if (an != bn) return an < bn;
    return a->node < b->node;
}

static inline void bl_swap(bl_cand *a, bl_cand *b) {
    const bl_cand t = *a;
    *a = *b;
    *b = t;
}

/* Reorder v[0:m) so that v[0:k) are the k smallest (any order inside); keys are distinct. */
static void bl_select(bl_cand *v, int64_t m, int64_t k) {
    int64_t lo = 0, hi = m - 1;
    while (lo < hi) {
        /* median of three as the pivot, moved to hi */
        const int64_t mid = lo + (hi - lo) / 2;
        if (bl_less(&v[mid], &v[lo])) bl_swap(&v[mid], &v[lo]);
        if (bl_less(&v[hi], &v[lo])) bl_swap(&v[hi], &v[lo]);
        if (bl_less(&v[mid], &v[hi])) bl_swap(&v[mid], &v[hi]);
        const bl_cand pivot = v[hi];
        int64_t store = lo;
        for (int64_t i = lo; i < hi; i++)
            if (bl_less(&v[i], &pivot)) bl_swap(&v[i], &v[store++]);
        bl_swap(&v[store], &v[hi]);
        /* v[store] is in its sorted place */
        if (store == k || store == k - 1) return;
        if (store < k) lo = store + 1;
        else hi = store - 1;
    }
}

typedef struct {
    const int64_t *ptr, *ids;
    int64_t S, N, K;
    /* outputs (malloc'd, owned by the caller afterwards) */
    int64_t *init, n_init;
    int64_t *update_ptr, *in_ids, *out_ids, *in_pos, *hits;
} bl_job;

/* The whole simulation without the GIL on validated inputs; returns BL_OK or BL_NOMEM. */
static int bl_run(bl_job *j) {
    const int64_t S = j->S, N = j->N, T = j->ptr[S];
    const int64_t *ids = j->ids, *ptr = j->ptr;
    int code = BL_OK;
    uint8_t *state = calloc((size_t)(N > 0 ? N : 1), 1);
    int64_t *cursor = calloc((size_t)N + 1, sizeof(int64_t));
    uint64_t *iters = NULL;
    int64_t *slot_node = NULL;
    uint8_t *evict = NULL;
    bl_cand *cands = NULL;
    if (!state || !cursor) goto nomem;

    /* pass 1: distinct occurrences per node (cursor[v + 1]), then the exclusive prefix sum: run starts */
    int64_t D = 0; /* occurrences, duplicates within a batch dropped */
    for (int64_t i = 0; i < S; i++) {
        for (int64_t p = ptr[i]; p < ptr[i + 1]; p++) {
            const int64_t v = ids[p];
            if (state[v] & BL_SEEN) continue;
            state[v] |= BL_SEEN;
            cursor[v + 1]++;
            D++;
        }
        for (int64_t p = ptr[i]; p < ptr[i + 1]; p++) state[ids[p]] &= (uint8_t)~BL_SEEN;
    }
    for (int64_t v = 0; v < N; v++) cursor[v + 1] += cursor[v];
    /* a cache of D >= distinct nodes never fills: no larger one is needed */
    const int64_t K = j->K < D ? j->K : D;
    int64_t max_batch = 0;
    for (int64_t i = 0; i < S; i++)
        if (ptr[i + 1] - ptr[i] > max_batch) max_batch = ptr[i + 1] - ptr[i];
    slot_node = malloc(sizeof(int64_t) * (size_t)(K > 0 ? K : 1));
    evict = calloc((size_t)(K > 0 ? K : 1), 1);
    cands = malloc(sizeof(bl_cand) * (size_t)(K + max_batch + 1));
    if (!slot_node || !evict || !cands) goto nomem;
    /* pass 2: fill each node's run with its iterations, ascending; cursor[v] ends at the start of v + 1's run */
    iters = malloc(sizeof(uint64_t) * (size_t)(D + 1));
    if (!iters) goto nomem;
    for (int64_t i = 0; i < S; i++) {
        for (int64_t p = ptr[i]; p < ptr[i + 1]; p++) {
            const int64_t v = ids[p];
            if (state[v] & BL_SEEN) continue;
            state[v] |= BL_SEEN;
            iters[cursor[v]++] = (uint64_t)i;
        }
        for (int64_t p = ptr[i]; p < ptr[i + 1]; p++) state[ids[p]] &= (uint8_t)~BL_SEEN;
    }
    iters[D] = BL_INF; /* the dummy that ends the last run */
    for (int64_t v = N; v > 0; v--) cursor[v] = cursor[v - 1]; /* back to run starts */
    cursor[0] = 0;
    for (int64_t v = 0; v < N; v++)
        if (cursor[v] < cursor[v + 1]) iters[cursor[v]] |= BL_FLAG; /* the first entry of a non-empty run */

    /* outputs: at most one change per occurrence */
    j->init = malloc(sizeof(int64_t) * (size_t)(K > 0 ? K : 1));
    j->update_ptr = malloc(sizeof(int64_t) * (size_t)(S + 1));
    j->in_ids = malloc(sizeof(int64_t) * (size_t)(D > 0 ? D : 1));
    j->out_ids = malloc(sizeof(int64_t) * (size_t)(D > 0 ? D : 1));
    j->in_pos = malloc(sizeof(int64_t) * (size_t)(D > 0 ? D : 1));
    j->hits = malloc(sizeof(int64_t) * (size_t)(S > 0 ? S : 1));
    if (!j->init || !j->update_ptr || !j->in_ids || !j->out_ids || !j->in_pos || !j->hits) goto nomem;

    /* initial prefetch: the first K distinct nodes in trace order */
    int64_t used = 0;
    for (int64_t p = 0; p < T && used < K; p++) {
        const int64_t v = ids[p];
        if (state[v] & BL_CACHED) continue;
        state[v] |= BL_CACHED;
        slot_node[used] = v;
        j->init[used++] = v;
    }
    j->n_init = used;

    /* pass 3: the iterations */
    int64_t nchg = 0;
    j->update_ptr[0] = 0;
    for (int64_t i = 0; i < S; i++) {
        int64_t hits = 0, m = 0;
        /* hits, cursor advance past iteration i, and the new candidates (never-again ones cannot be kept
         * in place of a cached node: dropped unless the cache has room, which it then has for every node) */
        for (int64_t p = ptr[i]; p < ptr[i + 1]; p++) {
            const int64_t v = ids[p];
            if (state[v] & BL_SEEN) continue;
            state[v] |= BL_SEEN;
            int64_t c = cursor[v] + 1;
            if (iters[c] & BL_FLAG) c = D; /* past v's last occurrence */
            cursor[v] = c;
            if (state[v] & BL_CACHED) {
                hits++;
            } else if (iters[c] != BL_INF) {
                cands[K + m] = (bl_cand){iters[c], v, -1 - (p - ptr[i])};
                m++;
            }
        }
        j->hits[i] = hits;
        if (m > 0 && K > 0) {
            /* used == K here: a node outside a non-full cache would have been prefetched */
            for (int64_t s = 0; s < K; s++) {
                const int64_t v = slot_node[s];
                cands[s] = (bl_cand){iters[cursor[v]] & ~BL_FLAG, v, s};
            }
            bl_select(cands, K + m, K);
            int64_t nin = 0;
            for (int64_t c = 0; c < K; c++)
                if (cands[c].slot < 0) {
                    state[cands[c].node] |= BL_KEEP;
                    nin++;
                }
            if (nin > 0) {
                for (int64_t c = K; c < K + m; c++)
                    if (cands[c].slot >= 0) evict[cands[c].slot] = 1;
                /* in_ids in batch order, paired with out slots in ascending order */
                int64_t s = 0;
                for (int64_t p = ptr[i]; p < ptr[i + 1]; p++) {
                    const int64_t v = ids[p];
                    if (!(state[v] & BL_KEEP)) continue;
                    state[v] &= (uint8_t)~BL_KEEP;
                    while (!evict[s]) s++;
                    evict[s] = 0;
                    const int64_t out = slot_node[s];
                    state[out] &= (uint8_t)~BL_CACHED;
                    state[v] |= BL_CACHED;
                    slot_node[s] = v;
                    j->in_ids[nchg] = v;
                    j->out_ids[nchg] = out;
                    j->in_pos[nchg] = p - ptr[i];
                    nchg++;
                }
            }
        }
        for (int64_t p = ptr[i]; p < ptr[i + 1]; p++) state[ids[p]] &= (uint8_t)~BL_SEEN;
        j->update_ptr[i + 1] = nchg;
    }
    goto done;

nomem:
    code = BL_NOMEM;
done:
    free(state);
    free(cursor);
    free(iters);
    free(slot_node);
    free(evict);
    free(cands);
    return code;
}

static void bl_free_outputs(bl_job *j) {
    free(j->init);
    free(j->update_ptr);
    free(j->in_ids);
    free(j->out_ids);
    free(j->in_pos);
    free(j->hits);
    j->init = j->update_ptr = j->in_ids = j->out_ids = j->in_pos = j->hits = NULL;
}

/* A 1-D int64 array owning data[0:n] (shrunk to n), or NULL with an exception; data is consumed either way. */
static PyObject *bl_array(int64_t **data, int64_t n) {
    int64_t *p = *data;
    *data = NULL;
    if (n > 0) {
        int64_t *q = realloc(p, sizeof(int64_t) * (size_t)n);
        if (q != NULL) p = q;
    }
    return sk_int64_array_from_malloc(p, n);
}

PyObject *sk_belady_changesets(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"batch_ptr", "ids", "num_nodes", "num_entries", NULL};
    PyObject *ptr_obj, *ids_obj;
    long long num_nodes, num_entries;
    Py_buffer ptr = {0}, ids = {0};
    sk_status st = {0};
    bl_job job = {0};
    PyObject *result = NULL;
    const char *fn = "belady_changesets";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOLL:belady_changesets", kwlist, &ptr_obj, &ids_obj, &num_nodes,
                                     &num_entries))
        return NULL;
    if (sk_check_min(fn, "num_nodes", num_nodes, 0) < 0 || sk_check_min(fn, "num_entries", num_entries, 0) < 0)
        return NULL;
    if (sk_get_buffer(ptr_obj, fn, "batch_ptr", SK_INT64, 1, 0, &ptr) < 0) goto done;
    if (sk_get_buffer(ids_obj, fn, "ids", SK_INT64, 1, 0, &ids) < 0) goto done;
    if (sk_len(&ptr) < 1) {
        PyErr_SetString(PyExc_ValueError, "belady_changesets: 'batch_ptr' expected at least 1 entry (got 0)");
        goto done;
    }
    job.ptr = ptr.buf;
    job.ids = ids.buf;
    job.S = sk_len(&ptr) - 1;
    job.N = num_nodes;
    job.K = num_entries;
    const int64_t T = sk_len(&ids);

    Py_BEGIN_ALLOW_THREADS
    if (job.ptr[0] != 0) sk_status_set(&st, BL_BAD_PTR, 0, 0, 0, job.ptr[0], 0, 0);
    for (int64_t i = 0; st.code == 0 && i < job.S; i++)
        if (job.ptr[i + 1] < job.ptr[i] || job.ptr[i + 1] > T)
            sk_status_set(&st, BL_BAD_PTR, 0, i + 1, i + 1, job.ptr[i + 1], 0, 0);
    if (st.code == 0 && job.ptr[job.S] != T) sk_status_set(&st, BL_BAD_PTR, 0, job.S, job.S, job.ptr[job.S], 0, 0);
    if (st.code == 0) {
        const int64_t bad = sk_first_outside(job.ids, T, job.N);
        if (bad >= 0) sk_status_set(&st, BL_BAD_ID, 0, bad, bad, job.ids[bad], 0, 0);
    }
    if (st.code == 0 && bl_run(&job) == BL_NOMEM) sk_status_set(&st, BL_NOMEM, 0, 0, 0, 0, 0, 0);
    Py_END_ALLOW_THREADS

    if (st.code == BL_BAD_PTR) {
        PyErr_Format(PyExc_ValueError,
                     "belady_changesets: 'batch_ptr' expected non-decreasing offsets from 0 to len(ids) = %lld "
                     "(got batch_ptr[%lld]=%lld)",
                     (long long)T, (long long)st.a, (long long)st.b);
        goto done;
    }
    if (st.code == BL_BAD_ID) {
        sk_raise_index(fn, "ids", "node ids", job.N, st.a, st.b);
        goto done;
    }
    if (st.code == BL_NOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t nchg = job.update_ptr[job.S];
    PyObject *init = bl_array(&job.init, job.n_init);
    PyObject *uptr = bl_array(&job.update_ptr, job.S + 1);
    PyObject *in_ids = bl_array(&job.in_ids, nchg);
    PyObject *out_ids = bl_array(&job.out_ids, nchg);
    PyObject *in_pos = bl_array(&job.in_pos, nchg);
    PyObject *hits = bl_array(&job.hits, job.S);
    if (init && uptr && in_ids && out_ids && in_pos && hits)
        result = Py_BuildValue("(NNNNNN)", init, uptr, in_ids, out_ids, in_pos, hits);
    else {
        Py_XDECREF(init);
        Py_XDECREF(uptr);
        Py_XDECREF(in_ids);
        Py_XDECREF(out_ids);
        Py_XDECREF(in_pos);
        Py_XDECREF(hits);
    }

done:
    bl_free_outputs(&job);
    SK_RELEASE(&ptr, &ids);
    return result;
}
