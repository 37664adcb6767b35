/* prefetch_rows(indptr, indices, rows): ask the kernel to read the CSR rows `rows` of a memory-mapped CSR ahead,
 * asynchronously (madvise(MADV_WILLNEED) on their pages), so that a sampler which then reads them finds them
 * in the page cache instead of taking one synchronous 4 KiB page fault per row.
 *
 * A CSR larger than memory is sampled at a few entries per row, rows far apart: each miss is a fault that
 * waits for its read, one at a time per thread (two threads on a 2-core machine: queue depth 2). WILLNEED
 * submits the reads of every page asked for at once and returns, so the device works at the depth of the
 * whole frontier. Two rounds: the pages of `indptr` holding rows' offsets, then (reading those offsets: the
 * first round is in flight or done) the pages of `indices` holding the rows. Pages are sorted and runs of
 * consecutive pages merged into one call each.
 *
 * Nothing is read or written through the arrays except indptr[rows] and indptr[rows + 1]; an array that is
 * not a file mapping (anonymous memory) makes madvise a no-op. Returns the number of pages advised. */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"
#include "kernels.h"

enum { PF_OK = 0, PF_BAD_ROW = 1, PF_BAD_INDPTR = 2 };

static int cmp_uptr(const void *a, const void *b) {
    const uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

/* Sort `pages` (page-aligned addresses), then madvise each run of consecutive pages once. Returns pages
 * advised. */
static int64_t advise_pages(uintptr_t *pages, int64_t n, uintptr_t page) {
    if (n == 0) return 0;
    qsort(pages, (size_t)n, sizeof(uintptr_t), cmp_uptr);
    int64_t advised = 0;
    uintptr_t start = pages[0], end = pages[0] + page;
    for (int64_t i = 1; i <= n; i++) {
        if (i < n && pages[i] <= end) { /* the same page again, or the next one: extend the run */
            if (pages[i] == end) end += page;
            continue;
        }
        (void)madvise((void *)start, end - start, MADV_WILLNEED); /* advice: a failure only loses the hint */
        advised += (int64_t)((end - start) / page);
        if (i < n) start = pages[i], end = pages[i] + page;
    }
    return advised;
}

PyObject *sk_prefetch_rows(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"indptr", "indices", "rows", NULL};
    const char *fn = "prefetch_rows";
    PyObject *indptr_obj, *indices_obj, *rows_obj;
    Py_buffer indptr = {0}, indices = {0}, rows = {0};
    PyObject *result = NULL;
    sk_status st = {0};
    int64_t advised = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:prefetch_rows", kwlist, &indptr_obj, &indices_obj,
                                     &rows_obj))
        return NULL;
    if (sk_get_buffer(indptr_obj, fn, "indptr", SK_INT64, 1, 0, &indptr) < 0) goto done;
    if (sk_get_buffer(indices_obj, fn, "indices", SK_ANY, 1, 0, &indices) < 0) goto done;
    if (sk_get_buffer(rows_obj, fn, "rows", SK_INT64, 1, 0, &rows) < 0) goto done;

    const int64_t N = sk_len(&indptr) - 1, R = sk_len(&rows), E = sk_len(&indices);
    const int64_t *ip = indptr.buf, *r = rows.buf;
    const size_t item = (size_t)indices.itemsize;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    /* one page per row end of indptr (2 per row), then the pages of every row of indices (counted first) */
    uintptr_t *pages = NULL;

    Py_BEGIN_ALLOW_THREADS
    for (int64_t k = 0; k < R; k++)
        if (r[k] < 0 || r[k] >= N) {
            sk_status_set(&st, PF_BAD_ROW, 0, k, k, r[k], 0, 0);
            break;
        }
    if (st.code == 0 && R > 0 && (pages = malloc((size_t)R * 2 * sizeof(uintptr_t))) == NULL)
        st.code = SK_ERR_NOMEM;
    if (st.code == 0 && R > 0) {
        const uintptr_t base = (uintptr_t)ip;
        for (int64_t k = 0; k < R; k++) {
            pages[2 * k] = (base + (uintptr_t)r[k] * 8) & ~(page - 1);
            pages[2 * k + 1] = (base + (uintptr_t)(r[k] + 1) * 8) & ~(page - 1);
        }
        advised += advise_pages(pages, 2 * R, page);
        /* the rows' pages: a row of d entries spans ceil((d * item + misalignment) / page) pages */
        int64_t need = 0;
        for (int64_t k = 0; k < R && st.code == 0; k++) {
            const int64_t a = ip[r[k]], b = ip[r[k] + 1];
            if (a < 0 || b < a || b > E) {
                sk_status_set(&st, PF_BAD_INDPTR, 0, k, r[k], a, b, 0);
                break;
            }
            if (b > a) {
                const uintptr_t lo = ((uintptr_t)indices.buf + (uintptr_t)a * item) & ~(page - 1);
                const uintptr_t hi = (uintptr_t)indices.buf + (uintptr_t)b * item;
                need += (int64_t)((hi - lo + page - 1) / page);
            }
        }
        if (st.code == 0 && need > 2 * R) {
            uintptr_t *more = realloc(pages, (size_t)need * sizeof(uintptr_t));
            if (more == NULL) st.code = SK_ERR_NOMEM;
            else pages = more;
        }
        int64_t n = 0;
        for (int64_t k = 0; k < R && st.code == 0; k++) {
            const int64_t a = ip[r[k]], b = ip[r[k] + 1];
            if (b == a) continue;
            const uintptr_t hi = (uintptr_t)indices.buf + (uintptr_t)b * item;
            for (uintptr_t p = ((uintptr_t)indices.buf + (uintptr_t)a * item) & ~(page - 1); p < hi; p += page)
                pages[n++] = p;
        }
        if (st.code == 0) advised += advise_pages(pages, n, page);
    }
    free(pages);
    Py_END_ALLOW_THREADS

    if (st.code == SK_ERR_NOMEM)
        PyErr_NoMemory();
    else if (st.code == PF_BAD_ROW)
        PyErr_Format(PyExc_IndexError, "%s: 'rows' expected row ids in [0, %lld) (got rows[%lld]=%lld)", fn,
                     (long long)N, (long long)st.a, (long long)st.b);
    else if (st.code == PF_BAD_INDPTR)
        PyErr_Format(PyExc_ValueError,
                     "%s: 'indptr' expected ascending offsets within len(indices)=%lld (got row %lld: [%lld, %lld))",
                     fn, (long long)E, (long long)st.a, (long long)st.b, (long long)st.c);
    else
        result = PyLong_FromLongLong((long long)advised);

done:
    SK_RELEASE(&indptr, &indices, &rows);
    return result;
}
