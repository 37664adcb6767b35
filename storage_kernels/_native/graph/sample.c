/* Multi-hop uniform neighbour sampling without replacement, relabelled into layered blocks.
 *
 * Hop h samples the neighbours of every node known so far, nodes[:hop_counts[h]]:
 *   1. count   (parallel over destinations): k_i = deg or min(fanout, deg); validates indptr rows.
 *   2. prefix sum -> the hop's indptr.
 *   3. sample  (parallel over destinations): Floyd's algorithm draws k_i distinct positions of the row from
 *      the destination's own counter-based stream (rng.h); positions are emitted in CSR order.
 *      Output holds global node ids; validated against [0, N).
 *   4. relabel (single thread, first-seen order): an id -> position map (direct-address for graphs up to
 *      2^23 nodes, open addressing beyond); unseen ids are appended to `nodes`, `cols` is rewritten in
 *      place with positions.
 * Everything between argument parsing and result construction runs without the GIL, in malloc'd buffers
 * that the returned numpy arrays then own (no copies).
 *
 * DENSE mode (sample_dense, MariusGNN's Delta Encoding of Neighborhood SamplEs): hop h samples only the nodes
 * first reached by hop h-1 (the seeds at hop 0), nodes[hop_counts[h-1]:hop_counts[h]], with fanouts[h]; a
 * node is sampled once, by the first hop that needs it, and its neighbour list is reused at every later hop.
 * The rows go into ONE CSR over nodes[:hop_counts[L-1]] (indptr absolute, cols appended hop after hop), so
 * hop h's block is its prefix: indptr[:hop_counts[h]+1], cols[:indptr[hop_counts[h]]]. Node v's stream is
 * keyed by (seed, first hop, v), so hop 0 equals sample_blocks' hop 0. */
#include "common.h"
#include "kernels.h"
#include "rng.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { SB_OK = 0, SB_BAD_SEED, SB_DUP_SEED, SB_BAD_INDPTR, SB_BAD_NEIGHBOUR, SB_TOO_MANY, SB_NOMEM = SK_ERR_NOMEM };

#define SB_CHUNK 64            /* destinations claimed per atomic increment */
#define SB_STACK_BITS 4096     /* rows up to this degree: Floyd membership in a stack bitmap */
#define SB_SMALL_K 64          /* longer rows: a sorted scratch up to this many picks, a heap bitmap beyond */
#define SB_MIN_DST_PER_THREAD 512
#define SB_PREFETCH 16         /* relabel: look-ahead distance for map-slot prefetches */
#define SB_PREFETCH_DST 16     /* count/sample: look-ahead distance in destinations */
#define SB_MAX_NODES INT32_MAX /* positions are stored as int32 in the id map */

/* ---- id -> position maps ----
 * Two layouts behind one interface:
 *   dense  (N <= dense limit, 2^23 by default): a direct-address table of N {val, epoch} slots, 8 bytes per
 *          graph node; one cache line per lookup, no probing, a branch-free relabel loop;
 *   hashed (larger graphs): open addressing with linear probing over 16-byte {key, val, epoch} slots, at
 *          most half full, sized by the nodes a hop can reach (memory follows the sample, not the graph).
 * A slot is occupied only when its epoch equals the map's, so a table is emptied in O(1) by bumping the
 * epoch. Tables are touched at random, so they are mmap'd with MADV_HUGEPAGE (TLB reach) and kept in a
 * small pool across calls: a fresh table per call costs more in page faults than the relabel itself. */

typedef struct {
    int32_t val; /* position in `nodes` (< 2^31) */
    uint32_t epoch;
} dslot_t;

typedef struct {
    int64_t key;
    int32_t val;
    uint32_t epoch;
} hslot_t;

typedef struct {
    void *mem;
    size_t bytes;
    int dense;
    uint64_t mask; /* hashed: capacity - 1 */
    int shift;     /* hashed: 64 - log2(capacity) */
    uint32_t epoch;
} idmap;

#define SB_POOL_SIZE 2
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static idmap pool[SB_POOL_SIZE];
static int pool_count = 0;
static int64_t dense_limit = (int64_t)1 << 23; /* graphs up to this many nodes use the dense layout */

/* fork() while another thread holds pool_lock would leave the child's copy locked forever: hold it across
 * fork (the lock is only ever held for a few instructions). */
static void pool_lock_before_fork(void) { pthread_mutex_lock(&pool_lock); }
static void pool_unlock_after_fork(void) { pthread_mutex_unlock(&pool_lock); }

int sk_sample_init(void) {
    static int registered = 0; /* a second registration would lock twice in the prepare handler */
    if (registered) return 0;
    if (pthread_atfork(pool_lock_before_fork, pool_unlock_after_fork, pool_unlock_after_fork) != 0) return -1;
    registered = 1;
    return 0;
}

static void map_unmap(idmap *m) {
    if (m->mem != NULL) munmap(m->mem, m->bytes);
    m->mem = NULL;
}

/* Zero-filled (epoch 0 = empty everywhere) memory for a table, or NULL. */
static void *map_memory(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= ((size_t)2 << 20)) madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

/* Take the largest pooled table of this layout holding at least `min_bytes` (or an empty map), and start a
 * new epoch on it. */
static idmap pool_take(int dense, size_t min_bytes) {
    idmap m = {0};
    pthread_mutex_lock(&pool_lock);
    int best = -1;
    for (int i = 0; i < pool_count; i++)
        if (pool[i].dense == dense && pool[i].bytes >= min_bytes && (best < 0 || pool[i].bytes > pool[best].bytes))
            best = i;
    if (best >= 0) {
        m = pool[best];
        pool[best] = pool[--pool_count];
    }
    pthread_mutex_unlock(&pool_lock);
    if (m.mem != NULL && ++m.epoch == 0) { /* wrapped: really clear, once every 2^32 uses */
        memset(m.mem, 0, m.bytes);
        m.epoch = 1;
    }
    return m;
}

/* Return a table to the pool (which keeps the largest ones) or unmap it. */
static void pool_give(idmap *m) {
    if (m->mem == NULL) return;
    pthread_mutex_lock(&pool_lock);
    if (pool_count < SB_POOL_SIZE) {
        pool[pool_count++] = *m;
        m->mem = NULL;
    } else {
        int smallest = 0;
        for (int i = 1; i < pool_count; i++)
            if (pool[i].bytes < pool[smallest].bytes) smallest = i;
        if (pool[smallest].bytes < m->bytes) {
            idmap evicted = pool[smallest];
            pool[smallest] = *m;
            *m = evicted;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    map_unmap(m);
}

static inline uint64_t hash_home(const idmap *m, int64_t key) { return ((uint64_t)key * SK_RNG_G0) >> m->shift; }

/* A map for ids in [0, N). Returns -1 when out of memory. */
static int idmap_open(idmap *m, int64_t N, int64_t limit) {
    if (N <= limit) {
        const size_t bytes = (size_t)(N > 0 ? N : 1) * sizeof(dslot_t);
        *m = pool_take(1, bytes);
        if (m->mem != NULL) return 0;
        *m = (idmap){.mem = map_memory(bytes), .bytes = bytes, .dense = 1, .epoch = 1};
        return m->mem == NULL ? -1 : 0;
    }
    *m = pool_take(0, 0);
    return 0; /* hashed tables are sized by idmap_reserve */
}

/* Make room for `n` entries (hashed: load <= 1/2), moving entries to a bigger table if needed.
 * Returns -1 when out of memory (the map is unchanged). */
static int idmap_reserve(idmap *m, int64_t n) {
    if (m->dense) return 0;
    int bits = 4;
    while (((uint64_t)1 << bits) < (uint64_t)n * 2) bits++;
    const uint64_t cap = (uint64_t)1 << bits;
    if (m->mem != NULL && cap <= m->mask + 1) return 0;
    idmap grown = {.mem = map_memory(cap * sizeof(hslot_t)), .bytes = cap * sizeof(hslot_t), .dense = 0,
                   .mask = cap - 1, .shift = 64 - bits, .epoch = 1};
    if (grown.mem == NULL) return -1;
    if (m->mem != NULL) {
        const hslot_t *old = m->mem;
        hslot_t *slots = grown.mem;
        for (uint64_t i = 0; i <= m->mask; i++) {
            if (old[i].epoch != m->epoch) continue;
            uint64_t h = hash_home(&grown, old[i].key);
            while (slots[h].epoch == grown.epoch) h = (h + 1) & grown.mask;
            slots[h] = (hslot_t){old[i].key, old[i].val, grown.epoch};
        }
    }
    idmap old = *m;
    *m = grown;
    pool_give(&old);
    return 0;
}

/* Position of `key`, inserting it with `val` when absent (*added = 1). The map must have room. */
static inline int64_t idmap_get_or_add(idmap *m, int64_t key, int64_t val, int *added) {
    const uint32_t epoch = m->epoch;
    if (m->dense) {
        dslot_t *s = (dslot_t *)m->mem + key;
        *added = s->epoch != epoch;
        if (*added) *s = (dslot_t){(int32_t)val, epoch};
        return s->val;
    }
    hslot_t *slots = m->mem;
    uint64_t h = hash_home(m, key);
    for (;;) {
        hslot_t *s = &slots[h];
        if (s->epoch != epoch) {
            *s = (hslot_t){key, (int32_t)val, epoch};
            *added = 1;
            return val;
        }
        if (s->key == key) {
            *added = 0;
            return s->val;
        }
        h = (h + 1) & m->mask;
    }
}

/* Rewrite out[0..n) (global ids) as positions, appending unseen ids to nodes[count..]; returns the new count. */
static int64_t relabel(idmap *m, int64_t *out, int64_t n, int64_t *nodes, int64_t count) {
    const uint32_t epoch = m->epoch;
    if (m->dense) { /* branch-free: new and known ids take the same path */
        dslot_t *slots = m->mem;
        for (int64_t e = 0; e < n; e++) {
            if (e + SB_PREFETCH < n) __builtin_prefetch(&slots[out[e + SB_PREFETCH]]);
            const int64_t u = out[e];
            const dslot_t s = slots[u];
            const int fresh = s.epoch != epoch;
            const int32_t pos = fresh ? (int32_t)count : s.val;
            slots[u] = (dslot_t){pos, epoch};
            nodes[count] = u; /* overwritten by the next new id unless this one is new */
            count += fresh;
            out[e] = pos;
        }
        return count;
    }
    hslot_t *slots = m->mem;
    for (int64_t e = 0; e < n; e++) {
        if (e + SB_PREFETCH < n) __builtin_prefetch(&slots[hash_home(m, out[e + SB_PREFETCH])]);
        const int64_t u = out[e];
        int added;
        const int64_t pos = idmap_get_or_add(m, u, count, &added);
        if (added) nodes[count++] = u;
        out[e] = pos;
    }
    return count;
}

PyObject *sk_set_dense_map_limit(PyObject *self, PyObject *args) {
    long long limit;
    if (!PyArg_ParseTuple(args, "L:_set_dense_map_limit", &limit)) return NULL;
    const long long previous = dense_limit;
    dense_limit = limit;
    return PyLong_FromLongLong(previous);
}

/* ---- one hop ---- */

typedef struct {
    const int64_t *indptr, *indices;
    int64_t N, E;
    const int64_t *dst; /* nodes[:ndst] */
    int64_t ndst;
    int64_t fanout;
    uint64_t hop_key;
    int64_t *ptr;  /* ndst + 1 */
    int64_t *rows; /* 2 * ndst: (indptr[v], degree) per destination, so pass 2 reads them sequentially */
    int64_t *out;  /* ptr[ndst] sampled global ids */
    atomic_llong next;
    sk_status *status; /* one per thread */
} hop_ctx;

static void count_task(void *p, int tid, int nthreads) {
    hop_ctx *c = (hop_ctx *)p;
    sk_status *st = &c->status[tid];
    int64_t lo, hi;
    while (sk_claim(&c->next, c->ndst, SB_CHUNK, &lo, &hi)) {
        for (int64_t i = lo; i < hi; i++) {
            if (i + SB_PREFETCH_DST < c->ndst) __builtin_prefetch(&c->indptr[c->dst[i + SB_PREFETCH_DST]]);
            const int64_t v = c->dst[i];
            const int64_t a = c->indptr[v], b = c->indptr[v + 1];
            if (a < 0 || b < a || b > c->E) {
                sk_status_set(st, SB_BAD_INDPTR, 0, i, v, a, b, 0);
                c->ptr[i + 1] = 0;
                continue;
            }
            const int64_t deg = b - a;
            c->rows[2 * i] = a;
            c->rows[2 * i + 1] = deg;
            c->ptr[i + 1] = (c->fanout < 0 || c->fanout >= deg) ? deg : c->fanout;
        }
    }
}

static void sample_task(void *p, int tid, int nthreads) {
    hop_ctx *c = (hop_ctx *)p;
    sk_status *st = &c->status[tid];
    uint64_t *bits = NULL; /* heap bitmap for rows longer than SB_STACK_BITS; all zero between uses */
    int64_t bits_words = 0;
    int64_t sel[SB_SMALL_K];
    uint64_t sbits[SB_STACK_BITS / 64] = {0}; /* stack bitmap; all zero between uses */
    int64_t lo, hi;
    const uint64_t N = (uint64_t)c->N;

    while (sk_claim(&c->next, c->ndst, SB_CHUNK, &lo, &hi)) {
        for (int64_t i = lo; i < hi; i++) {
            if (i + SB_PREFETCH_DST < c->ndst) { /* the next rows: at most 8 cache lines each */
                const int64_t start = c->rows[2 * (i + SB_PREFETCH_DST)];
                const int64_t len = c->rows[2 * (i + SB_PREFETCH_DST) + 1];
                const char *line = (const char *)&c->indices[start];
                const char *end = (const char *)&c->indices[start + (len < 64 ? len : 64)];
                for (; line < end; line += 64) __builtin_prefetch(line);
            }
            const int64_t o = c->ptr[i], k = c->ptr[i + 1] - o;
            if (k == 0) continue;
            const int64_t v = c->dst[i];
            const int64_t a = c->rows[2 * i], deg = c->rows[2 * i + 1];
            const int64_t *row = c->indices + a;
            int64_t *out = c->out + o;

            if (k == deg) { /* every neighbour, in CSR order */
                for (int64_t m = 0; m < k; m++) {
                    const int64_t u = row[m];
                    if ((uint64_t)u >= N) sk_status_set(st, SB_BAD_NEIGHBOUR, 0, o + m, a + m, u, 0, 0);
                    out[m] = u;
                }
                continue;
            }

            const uint64_t key = sk_rng_stream_key(c->hop_key, (uint64_t)v);
            uint64_t r = 0;
            if (deg > SB_STACK_BITS && k <= SB_SMALL_K) {
                /* Floyd: for j in [deg-k, deg): t = U[0, j]; take t unless taken, else j. sel stays sorted. */
                int64_t n = 0;
                for (int64_t j = deg - k; j < deg; j++) {
                    int64_t t = (int64_t)sk_rng_below(sk_rng_draw(key, r++), (uint64_t)j + 1);
                    int64_t m = n;
                    while (m > 0 && sel[m - 1] > t) m--;
                    if (m > 0 && sel[m - 1] == t) {
                        t = j; /* j exceeds every earlier pick: append */
                        m = n;
                    } else {
                        for (int64_t q = n; q > m; q--) sel[q] = sel[q - 1];
                    }
                    sel[m] = t;
                    n++;
                }
                for (int64_t m = 0; m < k; m++) {
                    const int64_t u = row[sel[m]];
                    if ((uint64_t)u >= N) sk_status_set(st, SB_BAD_NEIGHBOUR, 0, o + m, a + sel[m], u, 0, 0);
                    out[m] = u;
                }
                continue;
            }
            /* Floyd with membership in a bitmap over the row: on the stack up to SB_STACK_BITS positions (one
             * word when deg <= 64), on the heap beyond; picks are emitted in row order as the map is cleared. */
            const int64_t words = (deg + 63) >> 6;
            uint64_t *map = sbits;
            if (deg > SB_STACK_BITS) {
                if (words > bits_words) {
                    free(bits);
                    bits = calloc((size_t)words, sizeof(uint64_t));
                    bits_words = bits == NULL ? 0 : words;
                    if (bits == NULL) {
                        sk_status_set(st, SB_NOMEM, 0, o, 0, 0, 0, 0);
                        continue;
                    }
                }
                map = bits;
            }
            for (int64_t j = deg - k; j < deg; j++) {
                uint64_t t = sk_rng_below(sk_rng_draw(key, r++), (uint64_t)j + 1);
                if (map[t >> 6] & (1ULL << (t & 63))) t = (uint64_t)j;
                map[t >> 6] |= 1ULL << (t & 63);
            }
            int64_t m = 0;
            for (int64_t w = 0; w < words; w++) {
                uint64_t word = map[w];
                map[w] = 0;
                while (word) {
                    const int64_t pos = w * 64 + __builtin_ctzll(word);
                    word &= word - 1;
                    const int64_t u = row[pos];
                    if ((uint64_t)u >= N) sk_status_set(st, SB_BAD_NEIGHBOUR, 0, o + m, a + pos, u, 0, 0);
                    out[m++] = u;
                }
            }
        }
    }
    free(bits);
}

/* ---- the whole job (no Python objects touched) ---- */

typedef struct {
    const char *fn; /* Python-level name, for errors */
    const int64_t *indptr, *indices, *seeds, *fanouts;
    int64_t N, E, B, L;
    uint64_t seed;
    int nthreads;
    int64_t dense_limit;
    int delta; /* DENSE mode: one CSR, each node sampled once (see the top of the file) */
    /* outputs, malloc'd; on success ownership moves to numpy arrays */
    int64_t *nodes, nodes_cap, count;
    int64_t *hop_counts;
    int64_t **ptrs, **cols, *ncols;   /* per-layer mode: one CSR per hop */
    int64_t *dptr, *dcols, dcols_cap; /* DENSE mode: the single CSR (dptr has nodes_cap + 1 slots) */
    sk_status st;
} sb_job;

static int grow_nodes(sb_job *j, int64_t cap) {
    if (cap <= j->nodes_cap) return 0;
    int64_t *nodes = realloc(j->nodes, (size_t)cap * sizeof(int64_t));
    if (nodes == NULL) return -1;
    sk_hint_hugepages(nodes, (size_t)cap * sizeof(int64_t));
    j->nodes = nodes;
    if (j->delta) { /* the DENSE indptr has a row per known node */
        int64_t *dptr = realloc(j->dptr, (size_t)(cap + 1) * sizeof(int64_t));
        if (dptr == NULL) return -1;
        j->dptr = dptr;
    }
    j->nodes_cap = cap;
    return 0;
}

/* DENSE mode: room for `cap` sampled edges in the single cols array. */
static int grow_dcols(sb_job *j, int64_t cap) {
    if (cap <= j->dcols_cap) return 0;
    int64_t want = j->dcols_cap * 2 > cap ? j->dcols_cap * 2 : cap;
    int64_t *cols = realloc(j->dcols, (size_t)want * sizeof(int64_t));
    if (cols == NULL) return -1;
    sk_hint_hugepages(cols, (size_t)want * sizeof(int64_t));
    j->dcols = cols;
    j->dcols_cap = want;
    return 0;
}

static int run_pass(sb_job *j, hop_ctx *ctx, sk_status *ts, int nthreads, sk_task_fn fn) {
    memset(ts, 0, sizeof(sk_status) * (size_t)j->nthreads);
    atomic_store(&ctx->next, 0);
    sk_parallel(nthreads, fn, ctx);
    for (int t = 0; t < nthreads; t++) sk_status_merge(&j->st, &ts[t]);
    return j->st.code == 0 ? 0 : -1;
}

static void sb_run(sb_job *j) {
    idmap map = {0};
    sk_status *ts = calloc((size_t)j->nthreads, sizeof(sk_status));
    if (ts == NULL || grow_nodes(j, j->B > 0 ? j->B : 1) < 0 || idmap_open(&map, j->N, j->dense_limit) < 0 ||
        idmap_reserve(&map, j->B) < 0)
        goto nomem;

    /* seeds: in range, unique; they open `nodes` in the given order */
    for (int64_t b = 0; b < j->B; b++) {
        const int64_t s = j->seeds[b];
        int added;
        if ((uint64_t)s >= (uint64_t)j->N) {
            sk_status_set(&j->st, SB_BAD_SEED, 0, b, b, s, 0, 0);
            goto done;
        }
        const int64_t pos = idmap_get_or_add(&map, s, b, &added);
        if (!added) {
            sk_status_set(&j->st, SB_DUP_SEED, 0, b, b, s, pos, 0);
            goto done;
        }
        j->nodes[b] = s;
    }
    j->count = j->B;
    j->hop_counts[0] = j->B;
    if (j->delta) j->dptr[0] = 0;

    for (int64_t h = 0; h < j->L; h++) {
        /* per-layer: every known node; DENSE: only those the previous hop reached first */
        const int64_t first = j->delta && h > 0 ? j->hop_counts[h - 1] : 0;
        const int64_t ndst = j->count - first;
        hop_ctx ctx = {.indptr = j->indptr,
                       .indices = j->indices,
                       .N = j->N,
                       .E = j->E,
                       .dst = j->nodes + first,
                       .ndst = ndst,
                       .fanout = j->fanouts[h],
                       .hop_key = sk_rng_hop_key(j->seed, (uint64_t)h),
                       .status = ts};
        if (j->delta) {
            ctx.ptr = j->dptr + first; /* ptr[0] already holds the edges sampled so far: offsets are absolute */
        } else {
            ctx.ptr = j->ptrs[h] = malloc((size_t)(ndst + 1) * sizeof(int64_t));
            if (ctx.ptr == NULL) goto nomem;
            ctx.ptr[0] = 0;
        }
        ctx.rows = malloc((size_t)(ndst > 0 ? ndst : 1) * 2 * sizeof(int64_t));
        if (ctx.rows == NULL) goto nomem;
        const int nt = sk_cap_threads(j->nthreads, ndst, SB_MIN_DST_PER_THREAD);

        if (run_pass(j, &ctx, ts, nt, count_task) < 0) {
            free(ctx.rows);
            goto done;
        }
        for (int64_t i = 0; i < ndst; i++) ctx.ptr[i + 1] += ctx.ptr[i];
        const int64_t base = ctx.ptr[0], ne = ctx.ptr[ndst] - base;

        if (j->delta) {
            ctx.out = grow_dcols(j, base + ne > 0 ? base + ne : 1) < 0 ? NULL : j->dcols;
        } else {
            ctx.out = j->cols[h] = malloc((size_t)(ne > 0 ? ne : 1) * sizeof(int64_t));
            sk_hint_hugepages(ctx.out, (size_t)ne * sizeof(int64_t));
            j->ncols[h] = ne;
        }
        const int sampled = ctx.out == NULL ? -2 : run_pass(j, &ctx, ts, nt, sample_task);
        free(ctx.rows);
        if (sampled == -2) goto nomem;
        if (sampled < 0) goto done;

        /* relabel in first-seen order; at most min(N, known + ne) nodes after this hop */
        const int64_t bound = j->N < j->count + ne ? j->N : j->count + ne;
        if (bound > SB_MAX_NODES) {
            sk_status_set(&j->st, SB_TOO_MANY, 0, h, h, bound, 0, 0);
            goto done;
        }
        /* one spare slot: the dense relabel stores each id at nodes[count] before deciding to count it */
        if (grow_nodes(j, bound + 1) < 0 || idmap_reserve(&map, bound) < 0) goto nomem;
        const int64_t count = relabel(&map, ctx.out + base, ne, j->nodes, j->count);
        j->count = count;
        j->hop_counts[h + 1] = count;
    }
    goto done;

nomem:
    sk_status_set(&j->st, SB_NOMEM, 0, INT64_MIN, 0, 0, 0, 0);
done:
    pool_give(&map);
    free(ts);
}

static void sb_free(sb_job *j) {
    free(j->nodes);
    free(j->hop_counts);
    for (int64_t h = 0; h < j->L; h++) {
        if (j->ptrs != NULL) free(j->ptrs[h]);
        if (j->cols != NULL) free(j->cols[h]);
    }
    free(j->ptrs);
    free(j->cols);
    free(j->ncols);
    free(j->dptr);
    free(j->dcols);
    j->dptr = j->dcols = NULL;
    j->nodes = j->hop_counts = NULL;
    j->ptrs = j->cols = NULL;
    j->ncols = NULL;
}

static void sb_raise(const sb_job *j) {
    const sk_status *st = &j->st;
    switch (st->code) {
    case SB_BAD_SEED:
        sk_raise_index(j->fn, "seeds", "node ids", j->N, st->a, st->b);
        break;
    case SB_DUP_SEED:
        PyErr_Format(PyExc_ValueError,
                     "%s: 'seeds' expected unique ids (got seeds[%lld]=%lld, already at seeds[%lld])", j->fn,
                     (long long)st->a, (long long)st->b, (long long)st->c);
        break;
    case SB_BAD_INDPTR:
        PyErr_Format(PyExc_ValueError,
                     "%s: 'indptr' expected 0 <= indptr[v] <= indptr[v+1] <= len(indices)=%lld "
                     "(got indptr[%lld]=%lld, indptr[%lld]=%lld)",
                     j->fn, (long long)j->E, (long long)st->a, (long long)st->b, (long long)st->a + 1, (long long)st->c);
        break;
    case SB_BAD_NEIGHBOUR:
        sk_raise_index(j->fn, "indices", "node ids", j->N, st->a, st->b);
        break;
    case SB_TOO_MANY:
        PyErr_Format(PyExc_ValueError,
                     "%s: hop %lld expected at most 2**31 - 1 sampled nodes (got up to %lld possible)", j->fn,
                     (long long)st->a, (long long)st->b);
        break;
    default:
        PyErr_NoMemory();
    }
}

/* Shared entry of sample_blocks (delta = 0) and sample_dense (delta = 1): the same arguments and checks. */
static PyObject *sample_entry(PyObject *args, PyObject *kwargs, int delta) {
    static char *kwlist[] = {"indptr", "indices", "seeds", "fanouts", "seed", "num_threads", NULL};
    PyObject *indptr_obj, *indices_obj, *seeds_obj, *fanouts_obj, *seed_obj;
    Py_ssize_t num_threads = 0;
    Py_buffer indptr = {0}, indices = {0}, seeds = {0}, fanouts = {0};
    sb_job job = {0};
    PyObject *nodes_arr = NULL, *hop_arr = NULL, *ptr_out = NULL, *col_out = NULL;
    const char *fn = delta ? "sample_dense" : "sample_blocks";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, delta ? "OOOOO|n:sample_dense" : "OOOOO|n:sample_blocks", kwlist,
                                     &indptr_obj, &indices_obj, &seeds_obj, &fanouts_obj, &seed_obj, &num_threads))
        return NULL;
    if (!PyLong_Check(seed_obj)) {
        PyErr_Format(PyExc_TypeError, "%s: 'seed' expected an int (got %s)", fn, Py_TYPE(seed_obj)->tp_name);
        return NULL;
    }
    job.fn = fn;
    job.delta = delta;
    job.seed = (uint64_t)PyLong_AsUnsignedLongLongMask(seed_obj);
    job.dense_limit = dense_limit;
    if (PyErr_Occurred()) return NULL;
    if ((job.nthreads = sk_resolve_threads(fn, num_threads)) < 0) return NULL;
    if (sk_get_buffer(indptr_obj, fn, "indptr", SK_INT64, 1, 0, &indptr) < 0) goto fail;
    if (sk_get_buffer(indices_obj, fn, "indices", SK_INT64, 1, 0, &indices) < 0) goto fail;
    if (sk_get_buffer(seeds_obj, fn, "seeds", SK_INT64, 1, 0, &seeds) < 0) goto fail;
    if (sk_get_buffer(fanouts_obj, fn, "fanouts", SK_INT64, 1, 0, &fanouts) < 0) goto fail;
    if (sk_len(&indptr) < 1) {
        PyErr_Format(PyExc_ValueError, "%s: 'indptr' expected num_nodes + 1 >= 1 entries (got 0)", fn);
        goto fail;
    }
    job.indptr = indptr.buf;
    job.indices = indices.buf;
    job.seeds = seeds.buf;
    job.fanouts = fanouts.buf;
    job.N = sk_len(&indptr) - 1;
    job.E = sk_len(&indices);
    job.B = sk_len(&seeds);
    job.L = sk_len(&fanouts);
    if (job.B > SB_MAX_NODES) { /* seeds take the first positions; a hop checks the rest before it relabels */
        PyErr_Format(PyExc_ValueError, "%s: 'seeds' expected at most 2**31 - 1 ids (got %lld)", fn, (long long)job.B);
        goto fail;
    }
    for (int64_t h = 0; h < job.L; h++) {
        if (job.fanouts[h] < -1) {
            PyErr_Format(PyExc_ValueError, "%s: 'fanouts' expected values >= -1 (got fanouts[%lld]=%lld)", fn,
                         (long long)h, (long long)job.fanouts[h]);
            goto fail;
        }
    }

    job.hop_counts = malloc((size_t)(job.L + 1) * sizeof(int64_t));
    job.ptrs = calloc((size_t)job.L + 1, sizeof(int64_t *));
    job.cols = calloc((size_t)job.L + 1, sizeof(int64_t *));
    job.ncols = calloc((size_t)job.L + 1, sizeof(int64_t));
    if (job.hop_counts == NULL || job.ptrs == NULL || job.cols == NULL || job.ncols == NULL ||
        (delta && grow_dcols(&job, 1) < 0)) { /* never empty: an array must own a non-NULL buffer */
        PyErr_NoMemory();
        goto fail;
    }

    Py_BEGIN_ALLOW_THREADS
    sb_run(&job);
    Py_END_ALLOW_THREADS

    SK_RELEASE(&indptr, &indices, &seeds, &fanouts);
    if (job.st.code != 0) {
        sb_raise(&job);
        goto fail;
    }

    /* Hand the buffers to numpy arrays; each pointer is cleared once an array owns (or freed) it. */
    int64_t *nodes = realloc(job.nodes, (size_t)(job.count > 0 ? job.count : 1) * sizeof(int64_t));
    if (nodes != NULL) job.nodes = nodes;
    nodes_arr = sk_int64_array_from_malloc(job.nodes, job.count);
    job.nodes = NULL;
    if (nodes_arr == NULL) goto fail;
    /* hop_counts is owned by hop_arr after this; read it back from the array. */
    hop_arr = sk_int64_array_from_malloc(job.hop_counts, job.L + 1);
    job.hop_counts = NULL;
    if (hop_arr == NULL) goto fail;
    const int64_t *hc = (const int64_t *)PyArray_DATA((PyArrayObject *)hop_arr);
    if (delta) { /* one CSR over the nodes sampled by some hop: nodes[:hop_counts[L-1]] */
        const int64_t rows = job.L > 0 ? hc[job.L - 1] : 0;
        ptr_out = sk_int64_array_from_malloc(job.dptr, rows + 1);
        job.dptr = NULL;
        if (ptr_out == NULL) goto fail;
        const int64_t ne = ((const int64_t *)PyArray_DATA((PyArrayObject *)ptr_out))[rows];
        int64_t *dcols = realloc(job.dcols, (size_t)(ne > 0 ? ne : 1) * sizeof(int64_t));
        if (dcols != NULL) job.dcols = dcols;
        col_out = sk_int64_array_from_malloc(job.dcols, ne);
        job.dcols = NULL;
        if (col_out == NULL) goto fail;
    } else {
        if ((ptr_out = PyList_New((Py_ssize_t)job.L)) == NULL || (col_out = PyList_New((Py_ssize_t)job.L)) == NULL)
            goto fail;
        for (int64_t h = 0; h < job.L; h++) {
            PyObject *p = sk_int64_array_from_malloc(job.ptrs[h], hc[h] + 1);
            job.ptrs[h] = NULL;
            if (p == NULL) goto fail;
            PyList_SET_ITEM(ptr_out, h, p);
            PyObject *c = sk_int64_array_from_malloc(job.cols[h], job.ncols[h]);
            job.cols[h] = NULL;
            if (c == NULL) goto fail;
            PyList_SET_ITEM(col_out, h, c);
        }
    }
    sb_free(&job);
    PyObject *result = PyTuple_New(4);
    if (result == NULL) goto fail;
    PyTuple_SET_ITEM(result, 0, nodes_arr);
    PyTuple_SET_ITEM(result, 1, hop_arr);
    PyTuple_SET_ITEM(result, 2, ptr_out);
    PyTuple_SET_ITEM(result, 3, col_out);
    return result;

fail:
    SK_RELEASE(&indptr, &indices, &seeds, &fanouts);
    sb_free(&job);
    Py_XDECREF(nodes_arr);
    Py_XDECREF(hop_arr);
    Py_XDECREF(ptr_out);
    Py_XDECREF(col_out);
    return NULL;
}

PyObject *sk_sample_blocks(PyObject *self, PyObject *args, PyObject *kwargs) { return sample_entry(args, kwargs, 0); }

PyObject *sk_sample_dense(PyObject *self, PyObject *args, PyObject *kwargs) { return sample_entry(args, kwargs, 1); }
