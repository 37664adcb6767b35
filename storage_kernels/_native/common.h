/* Shared helpers of storage_kernels._native: buffer validation, status codes, a tiny thread runner.
 *
 * Every kernel follows one order: parse arguments -> validate (sk_get_buffer and explicit bound checks)
 * -> allocate outputs -> Py_BEGIN_ALLOW_THREADS around pure C -> reacquire -> release buffers on every
 * path -> turn the sk_status filled by the C part into an exception naming the offending index/offset. */
#ifndef STRATA_NATIVE_COMMON_H
#define STRATA_NATIVE_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define PY_ARRAY_UNIQUE_SYMBOL strata_native_ARRAY_API
#ifndef STRATA_NATIVE_IMPORT_ARRAY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include <stdint.h>
#include <stdatomic.h>

/* The alignment of the storage format, in bytes: O_DIRECT file offsets, lengths and buffer addresses are
 * multiples of it (pread_ranges checks them), and aligned_empty aligns to it by default. Defined here only;
 * exported as the module constant DIRECT_ALIGN, which must equal the Python definition of the file format,
 * storage_kernels.arrays.DATA_ALIGN (tests/storage_kernels/test_native_dio.py checks it). */
#define SK_DIRECT_ALIGN 4096

/* A macro's value as a string literal (for docstrings: "alignment=" SK_STR(SK_DIRECT_ALIGN)). */
#define SK_STR_(x) #x
#define SK_STR(x) SK_STR_(x)

/* 1 when `value` is a multiple of `align` (> 0). */
static inline int sk_is_aligned(uint64_t value, uint64_t align) { return value % align == 0; }

/* 1 when `value` is a power of two (and so positive). */
static inline int sk_is_pow2(int64_t value) { return value > 0 && (value & (value - 1)) == 0; }

/* Element kinds accepted by sk_get_buffer. */
typedef enum {
    SK_INT64 = 0,   /* signed 8-byte integer ('l' or 'q') */
    SK_FLOAT32,     /* 'f' */
    SK_UINT8,       /* 'B' */
    SK_ANY,         /* any element type (gather_rows) */
} sk_kind;

#define SK_ANY_NDIM (-1)

/* Acquire a C-contiguous buffer of `obj` (argument `name` of function `func`), checking the element kind,
 * the number of dimensions (SK_ANY_NDIM: any) and, if `writable`, that it can be written.
 * Returns 0 (view filled, release with sk_release) or -1 with ValueError set; `view` is then empty. */
int sk_get_buffer(PyObject *obj, const char *func, const char *name, sk_kind kind, int ndim, int writable,
                  Py_buffer *view);

/* An optional 1-D int64 argument: Py_None leaves `view` empty and returns 0; otherwise it must have exactly
 * `expected` entries, each >= `min` (INT64_MIN: no bound), else ValueError (naming the first bad entry), -1. */
int sk_get_optional_int64(PyObject *obj, const char *func, const char *name, int64_t expected, int writable,
                          int64_t min, Py_buffer *view);

/* PyBuffer_Release when the view holds something (safe on zero-initialised or already released views). */
static inline void sk_release(Py_buffer *view) {
    if (view->obj != NULL) PyBuffer_Release(view);
}

/* Number of elements of a validated buffer. */
static inline int64_t sk_len(const Py_buffer *view) { return (int64_t)(view->len / view->itemsize); }

/* Normalised struct format of a buffer ("<l" -> "l"); used to compare element types. */
const char *sk_format(const Py_buffer *view);

/* Threads: 0 -> all usable cores; negative -> ValueError (returns -1). */
int sk_resolve_threads(const char *func, Py_ssize_t requested);

/* Cap a thread count so that each thread gets at least `min_items` items of work (at least 1 thread). */
int sk_cap_threads(int nthreads, int64_t items, int64_t min_items);

/* Run fn(ctx, tid, nthreads) for tid in [0, nthreads) on nthreads threads (the caller is tid 0).
 * Must be called without the GIL. If a thread cannot be started its share runs on the caller, so the
 * result never depends on how many threads actually ran. */
typedef void (*sk_task_fn)(void *ctx, int tid, int nthreads);
void sk_parallel(int nthreads, sk_task_fn fn, void *ctx);

/* Dynamic work claiming: hand out [start, start+chunk) ranges of [0, total). Returns 0 when exhausted. */
static inline int sk_claim(atomic_llong *next, int64_t total, int64_t chunk, int64_t *start, int64_t *stop) {
    int64_t s = (int64_t)atomic_fetch_add_explicit(next, chunk, memory_order_relaxed);
    if (s >= total) return 0;
    *start = s;
    *stop = s + chunk < total ? s + chunk : total;
    return 1;
}

/* Status filled without the GIL and turned into an exception afterwards. code 0 = ok. When several
 * threads fail, the one with the smallest `order` wins, so the reported error is deterministic. */
typedef struct {
    int code;
    int err_no;
    int64_t order;
    int64_t a, b, c, d;
} sk_status;

static inline void sk_status_set(sk_status *st, int code, int err_no, int64_t order, int64_t a, int64_t b,
                                 int64_t c, int64_t d) {
    if (st->code != 0 && st->order <= order) return;
    st->code = code;
    st->err_no = err_no;
    st->order = order;
    st->a = a;
    st->b = b;
    st->c = c;
    st->d = d;
}

/* Keep the earliest of per-thread statuses in `into`. */
static inline void sk_status_merge(sk_status *into, const sk_status *from) {
    if (from->code != 0) sk_status_set(into, from->code, from->err_no, from->order, from->a, from->b, from->c, from->d);
}

#define SK_ERR_NOMEM (-1000)

/* A 1-D int64 numpy array that owns `data` (allocated with malloc; freed with the array).
 * On failure frees `data` and returns NULL with an exception set. */
PyObject *sk_int64_array_from_malloc(int64_t *data, int64_t n);

/* A 1-D uint8 numpy array that owns `data` (freed with free()). On failure frees `data`, returns NULL. */
PyObject *sk_uint8_array_from_malloc(void *data, int64_t n);

/* Ask for transparent huge pages on the page-aligned interior of a large malloc'd block (as numpy does for
 * its own arrays): fewer page faults when it is first written, fewer TLB misses after. No-op below 4 MiB. */
void sk_hint_hugepages(void *p, size_t bytes);

/* Checked arithmetic helpers: return 1 on overflow. */
static inline int sk_mul_overflow(int64_t a, int64_t b, int64_t *out) { return __builtin_mul_overflow(a, b, out); }
static inline int sk_add_overflow(int64_t a, int64_t b, int64_t *out) { return __builtin_add_overflow(a, b, out); }

#endif /* STRATA_NATIVE_COMMON_H */
