/* Shared helpers: buffer validation with readable errors, thread runner, arrays owning malloc'd memory. */
#include "common.h"

#include <pthread.h>
#include <sched.h>
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
    const uintptr_t page = 4096, start = ((uintptr_t)p + page - 1) & ~(page - 1);
    const uintptr_t end = ((uintptr_t)p + bytes) & ~(page - 1);
    if (end > start) madvise((void *)start, end - start, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}
