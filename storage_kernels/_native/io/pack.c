/* DiskGNN batched packing, one partition of the feature file at a time.
 *
 * The driver (kernels.pack_batches) streams the feature file sequentially in partitions of rows
 * [row_start, row_start + R). Each batch's packed ids are sorted, so the ids that fall in this partition
 * form one contiguous run right after the `cursor[b]` already written: gather those rows into a staging
 * buffer and write them with one pwrite at chunk_offsets[b] + cursor[b] * row_bytes.
 *
 * Phase 1 (no GIL, one thread) finds every batch's run and validates it; phase 2 (parallel over batches)
 * gathers and writes; cursors advance only when every write succeeded. */
#include "common.h"
#include "kernels.h"

#include <stdlib.h>
#include <string.h>

enum { PK_OK = 0, PK_NEG_ID, PK_UNSORTED, PK_BEHIND, PK_OVERFLOW, PK_ERRNO, PK_NOMEM = SK_ERR_NOMEM };

typedef struct {
    const float *features;
    int64_t row_start, R, F;
    const int64_t *ids, *batch_ptr, *cursor, *chunk_offsets;
    const int64_t *run;
    int64_t NB;
    int fd;
    atomic_llong next;
    sk_status *status;
} pack_ctx;

static void write_task(void *p, int tid, int nthreads) {
    pack_ctx *c = (pack_ctx *)p;
    sk_status *st = &c->status[tid];
    const size_t row_bytes = (size_t)c->F * sizeof(float);
    char *stage = NULL;
    size_t stage_bytes = 0;
    int64_t lo, hi;
    while (sk_claim(&c->next, c->NB, 1, &lo, &hi)) {
        const int64_t b = lo, n = c->run[b];
        if (n == 0 || row_bytes == 0) continue;
        const size_t need = (size_t)n * row_bytes;
        if (need > stage_bytes) {
            free(stage);
            stage = malloc(need);
            stage_bytes = stage == NULL ? 0 : need;
            if (stage == NULL) {
                sk_status_set(st, PK_NOMEM, 0, b, b, 0, 0, 0);
                continue;
            }
        }
        const int64_t *ids = c->ids + c->batch_ptr[b] + c->cursor[b];
        for (int64_t m = 0; m < n; m++)
            memcpy(stage + (size_t)m * row_bytes, (const char *)c->features + (size_t)(ids[m] - c->row_start) * row_bytes,
                   row_bytes);
        const int64_t off = c->chunk_offsets[b] + c->cursor[b] * (int64_t)row_bytes;
        int64_t done;
        int err = 0;
        if (sk_pwrite_full(c->fd, stage, (int64_t)need, off, &done, &err) != SK_IO_OK)
            sk_status_set(st, PK_ERRNO, err, b, b, off, (int64_t)need, done);
    }
    free(stage);
}

PyObject *sk_pack_partition(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"features", "row_start", "ids",           "batch_ptr", "cursor",
                             "fd",       "chunk_offsets", "num_threads", NULL};
    PyObject *features_obj, *ids_obj, *batch_ptr_obj, *cursor_obj, *chunk_offsets_obj;
    long long row_start;
    int fd;
    Py_ssize_t num_threads = 0;
    Py_buffer features = {0}, ids = {0}, batch_ptr = {0}, cursor = {0}, chunk_offsets = {0};
    sk_status st = {0}, *ts = NULL;
    int64_t *run = NULL, total = 0;
    int nthreads;
    PyObject *result = NULL;
    const char *fn = "pack_partition";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLOOOiO|n:pack_partition", kwlist, &features_obj, &row_start,
                                     &ids_obj, &batch_ptr_obj, &cursor_obj, &fd, &chunk_offsets_obj, &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0 || sk_check_min(fn, "row_start", row_start, 0) < 0 ||
        sk_check_fd(fn, fd) < 0)
        return NULL;
    if (sk_get_buffer(features_obj, fn, "features", SK_FLOAT32, 2, 0, &features) < 0) goto done;
    if (sk_get_buffer(ids_obj, fn, "ids", SK_INT64, 1, 0, &ids) < 0) goto done;
    if (sk_get_buffer(batch_ptr_obj, fn, "batch_ptr", SK_INT64, 1, 0, &batch_ptr) < 0) goto done;
    if (sk_get_buffer(cursor_obj, fn, "cursor", SK_INT64, 1, 1, &cursor) < 0) goto done;
    if (sk_get_buffer(chunk_offsets_obj, fn, "chunk_offsets", SK_INT64, 1, 0, &chunk_offsets) < 0) goto done;

    const int64_t R = features.shape[0], F = features.shape[1], T = sk_len(&ids);
    const int64_t NB = sk_len(&batch_ptr) - 1;
    const int64_t *bp = batch_ptr.buf, *id = ids.buf, *off = chunk_offsets.buf;
    int64_t *cur = cursor.buf;
    if (NB < 0) {
        PyErr_SetString(PyExc_ValueError, "pack_partition: 'batch_ptr' expected num_batches + 1 >= 1 entries (got 0)");
        goto done;
    }
    if (sk_len(&cursor) != NB || sk_len(&chunk_offsets) != NB) {
        PyErr_Format(PyExc_ValueError,
                     "pack_partition: 'cursor' and 'chunk_offsets' expected len(batch_ptr) - 1 = %lld entries "
                     "(got %lld and %lld)",
                     (long long)NB, (long long)sk_len(&cursor), (long long)sk_len(&chunk_offsets));
        goto done;
    }
    for (int64_t b = 0; b < NB; b++) {
        if (bp[b] < 0 || bp[b + 1] < bp[b] || bp[b + 1] > T) {
            PyErr_Format(PyExc_ValueError,
                         "pack_partition: 'batch_ptr' expected 0 <= batch_ptr[b] <= batch_ptr[b+1] <= len(ids)=%lld "
                         "(got batch_ptr[%lld]=%lld, batch_ptr[%lld]=%lld)",
                         (long long)T, (long long)b, (long long)bp[b], (long long)b + 1, (long long)bp[b + 1]);
            goto done;
        }
        if (cur[b] < 0 || cur[b] > bp[b + 1] - bp[b]) {
            PyErr_Format(PyExc_ValueError, "pack_partition: 'cursor' expected values in [0, %lld] for batch %lld "
                                           "(got cursor[%lld]=%lld)",
                         (long long)(bp[b + 1] - bp[b]), (long long)b, (long long)b, (long long)cur[b]);
            goto done;
        }
        if (off[b] < 0) {
            PyErr_Format(PyExc_ValueError, "pack_partition: 'chunk_offsets' expected values >= 0 (got "
                                           "chunk_offsets[%lld]=%lld)",
                         (long long)b, (long long)off[b]);
            goto done;
        }
    }
    nthreads = sk_cap_threads(nthreads, NB, 1);
    run = malloc((size_t)(NB > 0 ? NB : 1) * sizeof(int64_t));
    ts = calloc((size_t)nthreads, sizeof(sk_status));
    if (run == NULL || ts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    pack_ctx ctx = {.features = features.buf, .row_start = row_start, .R = R, .F = F, .ids = id, .batch_ptr = bp,
                    .cursor = cur, .chunk_offsets = off, .run = run, .NB = NB, .fd = fd, .status = ts};
    atomic_init(&ctx.next, 0);
    const int64_t row_end = row_start + R;

    Py_BEGIN_ALLOW_THREADS
    /* phase 1: each batch's run of ids inside [row_start, row_end) */
    for (int64_t b = 0; b < NB && st.code == 0; b++) {
        const int64_t first = bp[b] + cur[b], end = bp[b + 1];
        int64_t prev = cur[b] > 0 ? id[first - 1] : -1, p = first;
        for (; p < end; p++) {
            const int64_t v = id[p];
            if (v < 0) {
                sk_status_set(&st, PK_NEG_ID, 0, b, b, p, v, 0);
                break;
            }
            if (v <= prev) {
                sk_status_set(&st, PK_UNSORTED, 0, b, b, p, v, prev);
                break;
            }
            if (v < row_start) {
                sk_status_set(&st, PK_BEHIND, 0, b, b, p, v, 0);
                break;
            }
            if (v >= row_end) break;
            prev = v;
        }
        run[b] = p - first;
        int64_t last;
        if (st.code == 0 && (sk_mul_overflow(cur[b] + run[b], F * (int64_t)sizeof(float), &last) ||
                             sk_add_overflow(last, off[b], &last) || sk_add_overflow(total, run[b] * F * 4, &total)))
            sk_status_set(&st, PK_OVERFLOW, 0, b, b, off[b], 0, 0);
    }
    /* phase 2: gather + one pwrite per batch */
    if (st.code == 0) {
        sk_parallel(nthreads, write_task, &ctx);
        for (int t = 0; t < nthreads; t++) sk_status_merge(&st, &ts[t]);
    }
    if (st.code == 0)
        for (int64_t b = 0; b < NB; b++) cur[b] += run[b];
    Py_END_ALLOW_THREADS

    switch (st.code) {
    case PK_OK:
        result = PyLong_FromLongLong((long long)total);
        break;
    case PK_NEG_ID:
        PyErr_Format(PyExc_IndexError, "pack_partition: 'ids' of batch %lld expected node ids >= 0 (got ids[%lld]=%lld)",
                     (long long)st.a, (long long)st.b, (long long)st.c);
        break;
    case PK_UNSORTED:
        PyErr_Format(PyExc_ValueError,
                     "pack_partition: 'ids' of batch %lld expected strictly ascending ids (got ids[%lld]=%lld after %lld)",
                     (long long)st.a, (long long)st.b, (long long)st.c, (long long)st.d);
        break;
    case PK_BEHIND:
        PyErr_Format(PyExc_ValueError,
                     "pack_partition: 'ids' of batch %lld expected ids >= row_start=%lld, partitions packed in "
                     "ascending row order (got ids[%lld]=%lld still unwritten)",
                     (long long)st.a, row_start, (long long)st.b, (long long)st.c);
        break;
    case PK_OVERFLOW:
        PyErr_Format(PyExc_ValueError, "pack_partition: batch %lld expected a byte offset below 2**63 (got chunk_offsets[%lld]=%lld)",
                     (long long)st.a, (long long)st.a, (long long)st.b);
        break;
    case PK_ERRNO:
        sk_raise_errno(st.err_no, "pack_partition: writing batch %lld to fd %d at offset %lld", (long long)st.a, fd,
                       (long long)(st.b + st.d));
        break;
    default:
        PyErr_NoMemory();
    }

done:
    free(run);
    free(ts);
    SK_RELEASE(&features, &ids, &batch_ptr, &cursor, &chunk_offsets);
    return result;
}
