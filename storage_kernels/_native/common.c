/* Shared helpers (see common.h): buffer acquisition and argument checks with readable errors, thread runner,
 * arrays owning malloc'd memory, complete positioned I/O, CSR, sampled-block and streamed-chunk validation. */
#include "common.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *const kind_names[] = {"int64", "float32", "uint8", ""};

/* A short description of what arrived, for "(got ...)": "float64 array of shape (3,)" or a type name. */
static PyObject *describe(PyObject *obj, int contiguous, int readonly) {
    if (PyArray_Check(obj)) {
        PyArrayObject *arr = (PyArrayObject *)obj;
        PyObject *shape = PyObject_GetAttrString(obj, "shape");
        if (shape == NULL) return NULL;
        PyObject *res = PyUnicode_FromFormat("%s%s%S array of shape %R", readonly ? "read-only " : "",
                                             contiguous ? "" : "non-contiguous ", (PyObject *)PyArray_DESCR(arr),
                                             shape);
        Py_DECREF(shape);
        return res;
    }
    return PyUnicode_FromFormat("%s%s%s", readonly ? "read-only " : "", contiguous ? "" : "non-contiguous ",
                                Py_TYPE(obj)->tp_name);
}

static const char *normalise_format(const char *fmt) {
    if (fmt == NULL) return "B";
    while (*fmt == '@' || *fmt == '=' || *fmt == '<') fmt++;
    return fmt;
}

const char *sk_format(const Py_buffer *view) { return normalise_format(view->format); }

static int kind_matches(const Py_buffer *view, sk_kind kind) {
    const char *fmt = normalise_format(view->format);
    switch (kind) {
    case SK_INT64:
        return view->itemsize == 8 && (strcmp(fmt, "l") == 0 || strcmp(fmt, "q") == 0);
    case SK_FLOAT32:
        return view->itemsize == 4 && strcmp(fmt, "f") == 0;
    case SK_UINT8:
        return view->itemsize == 1 && strcmp(fmt, "B") == 0;
    case SK_ANY:
        return view->itemsize > 0;
    }
    return 0;
}

int sk_get_buffer(PyObject *obj, const char *func, const char *name, sk_kind kind, int ndim, int writable,
                  Py_buffer *view) {
    memset(view, 0, sizeof(*view));
    int contiguous = 1, readonly = 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        memset(view, 0, sizeof(*view));
        goto bad;
    }
    contiguous = PyBuffer_IsContiguous(view, 'C');
    readonly = view->readonly;
    if (!kind_matches(view, kind) || (ndim != SK_ANY_NDIM && view->ndim != ndim) || !contiguous ||
        (writable && readonly))
        goto bad;
    return 0;

bad:
    sk_release(view);
    {
        char dims[32] = "";
        if (ndim != SK_ANY_NDIM) snprintf(dims, sizeof(dims), "%d-D ", ndim);
        PyObject *got = describe(obj, contiguous, writable && readonly);
        if (got == NULL) return -1;
        PyErr_Format(PyExc_ValueError, "%s: '%s' expected a %sC-contiguous %s%s%sarray (got %U)", func, name,
                     writable ? "writable " : "", dims, kind_names[kind], kind == SK_ANY ? "" : " ", got);
        Py_DECREF(got);
    }
    return -1;
}

int sk_get_optional(PyObject *obj, const char *func, const char *name, sk_kind kind, int ndim, int writable,
                    Py_buffer *view) {
    if (obj == Py_None) return 0;
    return sk_get_buffer(obj, func, name, kind, ndim, writable, view);
}

int sk_get_int_table(PyObject *obj, const char *func, const char *name, int writable, Py_buffer *view, int *wide) {
    if (sk_get_buffer(obj, func, name, SK_ANY, 1, writable, view) < 0) return -1;
    const char *f = sk_format(view);
    *wide = kind_matches(view, SK_INT64);
    if (!*wide && !(view->itemsize == 4 && (strcmp(f, "i") == 0 || strcmp(f, "l") == 0))) {
        PyErr_Format(PyExc_ValueError, "%s: '%s' expected an int64 or int32 array (got format '%s', %lld bytes an "
                     "entry)", func, name, f, (long long)view->itemsize);
        sk_release(view);
        return -1;
    }
    return 0;
}

int sk_get_typed(PyObject *obj, const char *func, const char *name, char format, Py_ssize_t itemsize,
                 const char *type_name, int writable, Py_buffer *view) {
    if (sk_get_buffer(obj, func, name, SK_ANY, 1, writable, view) < 0) return -1;
    const char *f = sk_format(view);
    if (f[0] != format || f[1] != '\0' || view->itemsize != itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: '%s' expected %s array (got format '%s')", func, name, type_name, f);
        sk_release(view);
        return -1;
    }
    return 0;
}

int sk_get_optional_int64(PyObject *obj, const char *func, const char *name, int64_t expected, int writable,
                          int64_t min, Py_buffer *view) {
    if (obj == Py_None) return 0;
    if (sk_get_buffer(obj, func, name, SK_INT64, 1, writable, view) < 0) return -1;
    if (sk_len(view) != expected) {
        PyErr_Format(PyExc_ValueError, "%s: '%s' expected %lld entries (got %lld)", func, name, (long long)expected,
                     (long long)sk_len(view));
        sk_release(view);
        return -1;
    }
    const int64_t *w = view->buf;
    if (min != INT64_MIN)
        for (int64_t i = 0; i < expected; i++)
            if (w[i] < min) {
                PyErr_Format(PyExc_ValueError, "%s: '%s' expected weights >= %lld (got [%lld]=%lld)", func, name,
                             (long long)min, (long long)i, (long long)w[i]);
                sk_release(view);
                return -1;
            }
    return 0;
}

int sk_get_int64_n(PyObject *obj, const char *func, const char *name, int64_t expected, int writable, int64_t min,
                   Py_buffer *view) {
    if (obj == Py_None) {
        PyErr_Format(PyExc_ValueError, "%s: '%s' expected an int64 array (got None)", func, name);
        return -1;
    }
    return sk_get_optional_int64(obj, func, name, expected, writable, min, view);
}

/* ---- argument checks and errors ---- */

int sk_check_min(const char *func, const char *name, long long value, long long min) {
    if (value >= min) return 0;
    PyErr_Format(PyExc_ValueError, "%s: '%s' expected >= %lld (got %lld)", func, name, min, value);
    return -1;
}

int sk_check_probability(const char *func, const char *name, double p, int allow_one) {
    if (p >= 0.0 && (allow_one ? p <= 1.0 : p < 1.0)) return 0;
    char got[32];
    snprintf(got, sizeof got, "%g", p);
    PyErr_Format(PyExc_ValueError, "%s: '%s' expected a probability in [0, 1%c (got %s)", func, name,
                 allow_one ? ']' : ')', got);
    return -1;
}

int sk_check_fd(const char *func, int fd) {
    if (fd >= 0) return 0;
    PyErr_Format(PyExc_ValueError, "%s: 'fd' expected a descriptor >= 0 (got %d)", func, fd);
    return -1;
}

int sk_check_len(const char *func, const char *name, const Py_buffer *view, int64_t expected) {
    if (sk_len(view) == expected) return 0;
    PyErr_Format(PyExc_ValueError, "%s: '%s' expected length %lld (got %lld)", func, name, (long long)expected,
                 (long long)sk_len(view));
    return -1;
}

int sk_check_same_type(const char *func, const char *name, const Py_buffer *view, const char *like_name,
                       const Py_buffer *like) {
    if (view->itemsize == like->itemsize && strcmp(sk_format(view), sk_format(like)) == 0) return 0;
    PyErr_Format(PyExc_ValueError, "%s: '%s' expected the element type of '%s' ('%s') (got '%s')", func, name,
                 like_name, sk_format(like), sk_format(view));
    return -1;
}

int sk_raise_index(const char *func, const char *name, const char *what, int64_t bound, int64_t pos, int64_t value) {
    PyErr_Format(PyExc_IndexError, "%s: '%s' expected %s in [0, %lld) (got %s[%lld]=%lld)", func, name, what,
                 (long long)bound, name, (long long)pos, (long long)value);
    return -1;
}

PyObject *sk_raise_errno(int err, const char *format, ...) {
    va_list vargs;
    va_start(vargs, format);
    PyObject *what = PyUnicode_FromFormatV(format, vargs);
    va_end(vargs);
    if (what == NULL) return NULL;
    PyObject *msg = PyUnicode_FromFormat("%U: %s", what, strerror(err));
    Py_DECREF(what);
    if (msg == NULL) return NULL;
    PyObject *exc_args = Py_BuildValue("(iN)", err, msg);
    if (exc_args != NULL) {
        PyErr_SetObject(PyExc_OSError, exc_args);
        Py_DECREF(exc_args);
    }
    return NULL;
}

int sk_resolve_threads(const char *func, Py_ssize_t requested) {
    if (requested < 0) {
        PyErr_Format(PyExc_ValueError, "%s: 'num_threads' expected >= 0 (got %zd)", func, requested);
        return -1;
    }
    if (requested > 0) return requested > 256 ? 256 : (int)requested;
    int n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0) n = 1;
    return n > 256 ? 256 : n;
}

int sk_cap_threads(int nthreads, int64_t items, int64_t min_items) {
    if (min_items < 1) min_items = 1;
    int64_t cap = items / min_items;
    if (cap < 1) cap = 1;
    return (int64_t)nthreads < cap ? nthreads : (int)cap;
}

typedef struct {
    sk_task_fn fn;
    void *ctx;
    int tid;
    int nthreads;
} thread_arg;

static void *thread_main(void *p) {
    thread_arg *a = (thread_arg *)p;
    a->fn(a->ctx, a->tid, a->nthreads);
    return NULL;
}

void sk_parallel(int nthreads, sk_task_fn fn, void *ctx) {
    if (nthreads <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_t *threads = malloc(sizeof(pthread_t) * (size_t)nthreads);
    thread_arg *args = malloc(sizeof(thread_arg) * (size_t)nthreads);
    char *started = calloc((size_t)nthreads, 1);
    if (threads == NULL || args == NULL || started == NULL) {
        /* No memory for bookkeeping: run every share on this thread (same result, just slower). */
        free(threads);
        free(args);
        free(started);
        for (int t = 0; t < nthreads; t++) fn(ctx, t, nthreads);
        return;
    }
    for (int t = 1; t < nthreads; t++) {
        args[t] = (thread_arg){fn, ctx, t, nthreads};
        started[t] = pthread_create(&threads[t], NULL, thread_main, &args[t]) == 0;
    }
    fn(ctx, 0, nthreads);
    for (int t = 1; t < nthreads; t++) {
        if (started[t])
            pthread_join(threads[t], NULL);
        else
            fn(ctx, t, nthreads);
    }
    free(threads);
    free(args);
    free(started);
}

#define SK_CAPSULE_NAME "storage_kernels._native.buffer"

static void capsule_free(PyObject *capsule) { free(PyCapsule_GetPointer(capsule, SK_CAPSULE_NAME)); }

static PyObject *array_from_malloc(void *data, int64_t n, int typenum) {
    npy_intp dims[1] = {(npy_intp)n};
    PyObject *arr = PyArray_SimpleNewFromData(1, dims, typenum, data);
    if (arr == NULL) {
        free(data);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(data, SK_CAPSULE_NAME, capsule_free);
    if (capsule == NULL) {
        Py_DECREF(arr);
        free(data);
        return NULL;
    }
    /* Steals the capsule reference even on failure (the capsule then frees data). */
    if (PyArray_SetBaseObject((PyArrayObject *)arr, capsule) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

PyObject *sk_int64_array_from_malloc(int64_t *data, int64_t n) { return array_from_malloc(data, n, NPY_INT64); }

PyObject *sk_uint8_array_from_malloc(void *data, int64_t n) { return array_from_malloc(data, n, NPY_UINT8); }

void sk_hint_hugepages(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    if (p == NULL || bytes < ((size_t)4 << 20)) return;
    const uintptr_t page = 4096; /* the base page size madvise works in (not SK_DIRECT_ALIGN, a file-format unit) */
    const uintptr_t start = ((uintptr_t)p + page - 1) & ~(page - 1);
    const uintptr_t end = ((uintptr_t)p + bytes) & ~(page - 1);
    if (end > start) madvise((void *)start, end - start, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

/* ---- row copies ---- */

#define SK_MIN_COPY_BYTES_PER_THREAD (1 << 20)

typedef struct {
    char *out;
    const char *src;
    const int64_t *dst_idx, *src_idx;
    int64_t K;
    size_t row_bytes;
} copy_ctx;

static void copy_rows_task(void *p, int tid, int nthreads) {
    const copy_ctx *c = (const copy_ctx *)p;
    const int64_t lo = c->K * tid / nthreads, hi = c->K * (tid + 1) / nthreads;
    const size_t rb = c->row_bytes;
    for (int64_t k = lo; k < hi; k++) {
        const int64_t s = c->src_idx != NULL ? c->src_idx[k] : k, d = c->dst_idx != NULL ? c->dst_idx[k] : k;
        if (c->src_idx != NULL && k + 8 < hi) __builtin_prefetch(c->src + (size_t)c->src_idx[k + 8] * rb);
        memcpy(c->out + (size_t)d * rb, c->src + (size_t)s * rb, rb);
    }
}

void sk_copy_rows(char *out, const int64_t *dst_idx, const char *src, const int64_t *src_idx, int64_t K,
                  int64_t row_bytes, int nthreads) {
    if (row_bytes <= 0) return;
    int64_t total = 0;
    if (sk_mul_overflow(K, row_bytes, &total)) total = INT64_MAX;
    copy_ctx ctx = {out, src, dst_idx, src_idx, K, (size_t)row_bytes};
    sk_parallel(sk_cap_threads(nthreads, total, SK_MIN_COPY_BYTES_PER_THREAD), copy_rows_task, &ctx);
}

/* ---- complete positioned I/O ---- */

static int pio_full(int fd, char *buf, int64_t len, int64_t off, int write, int64_t *done, int *err) {
    *done = 0;
    while (*done < len) {
        const ssize_t r = write ? pwrite(fd, buf + *done, (size_t)(len - *done), (off_t)(off + *done))
                                : pread(fd, buf + *done, (size_t)(len - *done), (off_t)(off + *done));
        if (r < 0) {
            if (errno == EINTR) continue;
            *err = errno;
            return SK_IO_ERRNO;
        }
        if (r == 0 && !write) return SK_IO_EOF;
        *done += r;
    }
    return SK_IO_OK;
}

int sk_pread_full(int fd, void *buf, int64_t len, int64_t off, int64_t *done, int *err) {
    return pio_full(fd, buf, len, off, 0, done, err);
}

int sk_pwrite_full(int fd, const void *buf, int64_t len, int64_t off, int64_t *done, int *err) {
    return pio_full(fd, (char *)buf, len, off, 1, done, err);
}

int64_t sk_get_read_ranges(const char *func, PyObject *offsets_obj, PyObject *lengths_obj, PyObject *out_obj,
                           PyObject *out_offsets_obj, int direct, Py_buffer *offsets, Py_buffer *lengths,
                           Py_buffer *out, Py_buffer *out_offsets, int64_t *total) {
    if (sk_get_buffer(offsets_obj, func, "offsets", SK_INT64, 1, 0, offsets) < 0 ||
        sk_get_buffer(lengths_obj, func, "lengths", SK_INT64, 1, 0, lengths) < 0 ||
        sk_get_buffer(out_obj, func, "out", SK_UINT8, SK_ANY_NDIM, 1, out) < 0 ||
        sk_get_buffer(out_offsets_obj, func, "out_offsets", SK_INT64, 1, 0, out_offsets) < 0)
        return -1;

    const int64_t K = sk_len(offsets), nbytes = (int64_t)out->len;
    if (sk_len(lengths) != K || sk_len(out_offsets) != K) {
        PyErr_Format(PyExc_ValueError,
                     "%s: 'lengths' and 'out_offsets' expected the length of 'offsets' (%lld) (got %lld and %lld)",
                     func, (long long)K, (long long)sk_len(lengths), (long long)sk_len(out_offsets));
        return -1;
    }
    const int64_t *off = offsets->buf, *len = lengths->buf, *ooff = out_offsets->buf;
    *total = 0;
    for (int64_t k = 0; k < K; k++) {
        int64_t end;
        if (off[k] < 0 || len[k] < 0 || ooff[k] < 0) {
            PyErr_Format(PyExc_ValueError,
                         "%s: range %lld expected non-negative offset, length and out_offset "
                         "(got offsets[%lld]=%lld, lengths[%lld]=%lld, out_offsets[%lld]=%lld)",
                         func, (long long)k, (long long)k, (long long)off[k], (long long)k, (long long)len[k],
                         (long long)k, (long long)ooff[k]);
            return -1;
        }
        if (sk_add_overflow(ooff[k], len[k], &end) || end > nbytes || sk_add_overflow(off[k], len[k], &end) ||
            sk_add_overflow(*total, len[k], total)) {
            PyErr_Format(PyExc_ValueError,
                         "%s: range %lld expected out_offsets[k] + lengths[k] <= out.nbytes=%lld (got %lld + %lld)",
                         func, (long long)k, (long long)nbytes, (long long)ooff[k], (long long)len[k]);
            return -1;
        }
        if (direct) { /* O_DIRECT: the kernel DMA's straight into the destination */
            const uintptr_t addr = (uintptr_t)out->buf + (uintptr_t)ooff[k];
            if (!sk_is_aligned((uint64_t)off[k], SK_DIRECT_ALIGN) ||
                !sk_is_aligned((uint64_t)len[k], SK_DIRECT_ALIGN) || !sk_is_aligned(addr, SK_DIRECT_ALIGN)) {
                PyErr_Format(PyExc_ValueError,
                             "%s: direct range %lld expected offset, length and destination address aligned to "
                             "%d bytes (got offsets[%lld]=%lld, lengths[%lld]=%lld, destination address %% %d = "
                             "%lld)",
                             func, (long long)k, SK_DIRECT_ALIGN, (long long)k, (long long)off[k], (long long)k,
                             (long long)len[k], SK_DIRECT_ALIGN, (long long)(addr % SK_DIRECT_ALIGN));
                return -1;
            }
        }
    }
    return K;
}

int sk_raise_read_error(const char *func, int fd, const sk_status *st) {
    if (st->code == SK_IO_ERRNO) {
        sk_raise_errno(st->err_no, "%s: reading fd %d at offset %lld (range %lld, length %lld)", func, fd,
                       (long long)(st->b + st->d), (long long)st->a, (long long)st->c);
        return -1;
    }
    if (st->code == SK_IO_EOF) {
        PyErr_Format(PyExc_OSError,
                     "%s: fd %d expected %lld bytes at offset %lld (range %lld) (got %lld before end of file)", func,
                     fd, (long long)st->c, (long long)st->b, (long long)st->a, (long long)st->d);
        return -1;
    }
    return 0;
}

/* ---- CSR graphs ---- */

int sk_get_csr(const char *func, PyObject *indptr_obj, PyObject *indices_obj, int writable, Py_buffer *indptr,
               Py_buffer *indices) {
    if (sk_get_buffer(indptr_obj, func, "indptr", SK_INT64, 1, 0, indptr) < 0) return -1;
    if (sk_get_buffer(indices_obj, func, "indices", SK_INT64, 1, writable, indices) < 0) goto fail;
    const int64_t N = sk_len(indptr) - 1, E = sk_len(indices), *ip = indptr->buf;
    if (N < 0) {
        PyErr_Format(PyExc_ValueError, "%s: 'indptr' expected at least 1 entry (got 0)", func);
        goto fail;
    }
    if (ip[0] != 0 || ip[N] != E) {
        PyErr_Format(PyExc_ValueError,
                     "%s: 'indptr' expected to start at 0 and end at len(indices)=%lld (got %lld and %lld)", func,
                     (long long)E, (long long)ip[0], (long long)ip[N]);
        goto fail;
    }
    return 0;

fail:
    sk_release(indptr);
    sk_release(indices);
    return -1;
}

int64_t sk_check_rows(const int64_t *indptr, int64_t R, int64_t max_offset, const int64_t *indices, int64_t E,
                      int64_t num_ids, sk_status *st) {
    int64_t max_degree = 0;
    for (int64_t v = 0; v < R; v++) {
        const int64_t d = indptr[v + 1] - indptr[v];
        if (d < 0 || indptr[v + 1] > max_offset) {
            sk_status_set(st, SK_ERR_CSR_INDPTR, 0, v, v + 1, indptr[v + 1], indptr[v], 0);
            return -1;
        }
        if (d > max_degree) max_degree = d;
    }
    const int64_t bad = sk_first_outside(indices, E, num_ids);
    if (bad >= 0) {
        sk_status_set(st, SK_ERR_CSR_ID, 0, bad, bad, indices[bad], 0, 0);
        return -1;
    }
    return max_degree;
}

int64_t sk_check_csr(const int64_t *indptr, int64_t N, const int64_t *indices, int64_t E, sk_status *st) {
    return sk_check_rows(indptr, N, E, indices, E, N, st);
}

int sk_raise_csr_error(const char *func, const sk_status *st, int64_t N, int64_t E) {
    switch (st->code) {
    case SK_ERR_CSR_INDPTR:
        PyErr_Format(PyExc_ValueError,
                     "%s: 'indptr' expected non-decreasing values <= %lld (got indptr[%lld]=%lld after %lld)", func,
                     (long long)E, (long long)st->a, (long long)st->b, (long long)st->c);
        return -1;
    case SK_ERR_CSR_ID:
        return sk_raise_index(func, "indices", "ids", N, st->a, st->b);
    default:
        return 0;
    }
}

int64_t sk_check_block(const int64_t *indptr, int64_t D, const int64_t *cols, int64_t E, int64_t S, sk_status *st) {
    return sk_check_rows(indptr, D, INT64_MAX, cols, E, S, st); /* the caller checked indptr[0] and indptr[D] */
}

int sk_raise_block_error(const char *func, const sk_status *st, int64_t S) {
    switch (st->code) {
    case SK_ERR_CSR_INDPTR:
        PyErr_Format(PyExc_ValueError, "%s: 'indptr' expected non-decreasing values (got indptr[%lld]=%lld after %lld)",
                     func, (long long)st->a, (long long)st->b, (long long)st->c);
        return -1;
    case SK_ERR_CSR_ID:
        return sk_raise_index(func, "cols", "source rows", S, st->a, st->b);
    case SK_ERR_NOMEM:
        PyErr_NoMemory();
        return -1;
    default:
        return 0;
    }
}

/* ---- streamed chunks of the partitioning passes ---- */

int sk_get_chunk(const char *func, PyObject *indptr_obj, PyObject *indices_obj, PyObject *nodes_obj,
                 Py_buffer *indptr, Py_buffer *indices, Py_buffer *nodes) {
    if (sk_get_buffer(indptr_obj, func, "indptr", SK_INT64, 1, 0, indptr) < 0) return -1;
    if (sk_get_buffer(indices_obj, func, "indices", SK_INT64, 1, 0, indices) < 0) goto fail;
    if (sk_get_buffer(nodes_obj, func, "nodes", SK_INT64, 1, 0, nodes) < 0) goto fail;
    if (sk_len(indptr) != sk_len(nodes) + 1) {
        PyErr_Format(PyExc_ValueError, "%s: 'indptr' expected len(nodes)+1 = %lld entries (got %lld)", func,
                     (long long)(sk_len(nodes) + 1), (long long)sk_len(indptr));
        goto fail;
    }
    return 0;

fail:
    sk_release(indptr);
    sk_release(indices);
    sk_release(nodes);
    return -1;
}

void sk_check_chunk(const int64_t *ptr, int64_t B, int64_t E, const int64_t *nodes, int ascending,
                    const int64_t *cols, int64_t N, sk_status *st) {
    if (ptr[0] < 0 || ptr[0] > E) {
        sk_status_set(st, SK_ERR_CHUNK_PTR, 0, 0, 0, ptr[0], 0, 0);
        return;
    }
    for (int64_t j = 0; j < B; j++) {
        if (ptr[j + 1] < ptr[j] || ptr[j + 1] > E) {
            sk_status_set(st, SK_ERR_CHUNK_PTR, 0, j + 1, j + 1, ptr[j + 1], 0, 0);
            return;
        }
        if ((uint64_t)nodes[j] >= (uint64_t)N || (ascending && j > 0 && nodes[j] <= nodes[j - 1])) {
            sk_status_set(st, SK_ERR_CHUNK_NODE, 0, j, j, nodes[j], 0, 0);
            return;
        }
    }
    const int64_t bad = sk_first_outside(cols + ptr[0], ptr[B] - ptr[0], N);
    if (bad >= 0) sk_status_set(st, SK_ERR_CHUNK_COL, 0, ptr[0] + bad, ptr[0] + bad, cols[ptr[0] + bad], 0, 0);
}

int sk_raise_chunk_error(const char *func, const sk_status *st, int64_t N, int ascending) {
    switch (st->code) {
    case SK_ERR_CHUNK_PTR:
        PyErr_Format(PyExc_ValueError,
                     "%s: 'indptr' expected non-decreasing offsets within len(indices) (got indptr[%lld]=%lld)", func,
                     (long long)st->a, (long long)st->b);
        return -1;
    case SK_ERR_CHUNK_NODE:
        return sk_raise_index(func, "nodes", ascending ? "strictly ascending ids" : "ids", N, st->a, st->b);
    case SK_ERR_CHUNK_COL:
        return sk_raise_index(func, "indices", "node ids", N, st->a, st->b);
    case SK_ERR_NOMEM:
        PyErr_NoMemory();
        return -1;
    default:
        return 0;
    }
}
