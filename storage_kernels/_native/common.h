/* Shared helpers of storage_kernels._native: buffer acquisition and argument checks with readable errors,
 * status codes, a tiny thread runner, complete positioned I/O, small sorts, and the validation shared by the
 * CSR kernels and by the streamed-chunk partitioning passes. The kernels' entry points are in kernels.h.
 *
 * Every kernel follows one order: parse arguments -> validate (sk_get_buffer and explicit bound checks)
 * -> allocate outputs -> Py_BEGIN_ALLOW_THREADS around pure C -> reacquire -> release buffers on every
 * path -> turn the sk_status filled by the C part into an exception naming the offending index/offset.
 * Helpers that take `func` and `name` raise "func: 'name' expected X (got Y)"; the sk_check_* and sk_get_*
 * ones need the GIL and return 0, or -1 with the exception set. */
#ifndef STRATA_NATIVE_COMMON_H
#define STRATA_NATIVE_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define PY_ARRAY_UNIQUE_SYMBOL strata_native_ARRAY_API
#ifndef STRATA_NATIVE_IMPORT_ARRAY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- alignment ------------------------------------------------------------------------------------------ */

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

/* ---- buffers -------------------------------------------------------------------------------------------- */

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

/* sk_get_buffer for an optional argument: Py_None leaves `view` empty and returns 0. */
int sk_get_optional(PyObject *obj, const char *func, const char *name, sk_kind kind, int ndim, int writable,
                    Py_buffer *view);

/* A 1-D C-contiguous buffer of int64 or int32 entries (an index table held at half width where its values fit):
 * `*wide` is 1 for int64, 0 for int32. ValueError naming the format otherwise. */
int sk_get_int_table(PyObject *obj, const char *func, const char *name, int writable, Py_buffer *view, int *wide);

/* A 1-D C-contiguous buffer of one fixed element type, given by its struct format letter and size ('i', 4:
 * int32; 'd', 8: float64) and named `type_name` with its article in errors ("an int32"). */
int sk_get_typed(PyObject *obj, const char *func, const char *name, char format, Py_ssize_t itemsize,
                 const char *type_name, int writable, Py_buffer *view);

/* An optional 1-D int64 argument: Py_None leaves `view` empty and returns 0; otherwise it must have exactly
 * `expected` entries, each >= `min` (INT64_MIN: no bound), else ValueError (naming the first bad entry), -1. */
int sk_get_optional_int64(PyObject *obj, const char *func, const char *name, int64_t expected, int writable,
                          int64_t min, Py_buffer *view);

/* sk_get_optional_int64 for a required argument: Py_None is a ValueError too. */
int sk_get_int64_n(PyObject *obj, const char *func, const char *name, int64_t expected, int writable, int64_t min,
                   Py_buffer *view);

/* PyBuffer_Release when the view holds something (safe on zero-initialised or already released views). */
static inline void sk_release(Py_buffer *view) {
    if (view->obj != NULL) PyBuffer_Release(view);
}

/* sk_release on every view listed: SK_RELEASE(&a, &b, &c) at the one exit of a kernel. */
#define SK_RELEASE(...)                                                                                           \
    do {                                                                                                         \
        Py_buffer *const views_[] = {__VA_ARGS__};                                                               \
        for (size_t i_ = 0; i_ < sizeof(views_) / sizeof(views_[0]); i_++) sk_release(views_[i_]);              \
    } while (0)

/* Number of elements of a validated buffer. */
static inline int64_t sk_len(const Py_buffer *view) { return (int64_t)(view->len / view->itemsize); }

/* Normalised struct format of a buffer ("<l" -> "l"); used to compare element types. */
const char *sk_format(const Py_buffer *view);

/* ---- argument checks and errors ------------------------------------------------------------------------- */

/* `value` >= `min`, else ValueError "func: 'name' expected >= min (got value)". */
int sk_check_min(const char *func, const char *name, long long value, long long min);

/* A probability `p` in [0, 1] (`allow_one`) or [0, 1), else ValueError "func: 'name' expected a probability in
 * [0, 1] (got p)"; NaN is refused. */
int sk_check_probability(const char *func, const char *name, double p, int allow_one);

/* A file descriptor argument `fd` >= 0. */
int sk_check_fd(const char *func, int fd);

/* len(view) == expected, else ValueError "func: 'name' expected length expected (got len)". */
int sk_check_len(const char *func, const char *name, const Py_buffer *view, int64_t expected);

/* Same element type as `like` (argument `like_name`), else ValueError naming both struct formats. */
int sk_check_same_type(const char *func, const char *name, const Py_buffer *view, const char *like_name,
                       const Py_buffer *like);

/* Raise IndexError "func: 'name' expected <what> in [0, bound) (got name[pos]=value)"; returns -1. */
int sk_raise_index(const char *func, const char *name, const char *what, int64_t bound, int64_t pos, int64_t value);

/* Raise OSError(err, "<message>: <strerror(err)>"), the message formatted as by PyErr_Format; returns NULL. */
PyObject *sk_raise_errno(int err, const char *format, ...);

/* ---- threads -------------------------------------------------------------------------------------------- */

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

/* ---- status (filled without the GIL) -------------------------------------------------------------------- */

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

/* Status codes shared by several kernels (each kernel's own codes are small positive numbers). */
enum {
    SK_ERR_NOMEM = -1000,      /* out of memory without the GIL */
    SK_ERR_CSR_INDPTR = -1001, /* sk_check_rows: a = v + 1, b = indptr[v + 1], c = indptr[v] */
    SK_ERR_CSR_ID = -1002,     /* sk_check_rows: a = position in indices, b = id */
    SK_ERR_CHUNK_PTR = -1003,  /* sk_check_chunk: a = position in indptr, b = value */
    SK_ERR_CHUNK_NODE = -1004, /* sk_check_chunk: a = position in nodes, b = id */
    SK_ERR_CHUNK_COL = -1005,  /* sk_check_chunk: a = position in indices, b = id */
};

/* ---- arrays owning malloc'd memory ---------------------------------------------------------------------- */

/* A 1-D int64 numpy array that owns `data` (allocated with malloc; freed with the array).
 * On failure frees `data` and returns NULL with an exception set. */
PyObject *sk_int64_array_from_malloc(int64_t *data, int64_t n);

/* A 1-D uint8 numpy array that owns `data` (freed with free()). On failure frees `data`, returns NULL. */
PyObject *sk_uint8_array_from_malloc(void *data, int64_t n);

/* Ask for transparent huge pages on the page-aligned interior of a large malloc'd block (as numpy does for
 * its own arrays): fewer page faults when it is first written, fewer TLB misses after. No-op below 4 MiB. */
void sk_hint_hugepages(void *p, size_t bytes);

/* The first position i < n with ids[i] outside [0, bound), or -1 when every id is in range. */
static inline int64_t sk_first_outside(const int64_t *ids, int64_t n, int64_t bound) {
    for (int64_t i = 0; i < n; i++)
        if ((uint64_t)ids[i] >= (uint64_t)bound) return i;
    return -1;
}

/* Checked arithmetic helpers: return 1 on overflow. */
static inline int sk_mul_overflow(int64_t a, int64_t b, int64_t *out) { return __builtin_mul_overflow(a, b, out); }
static inline int sk_add_overflow(int64_t a, int64_t b, int64_t *out) { return __builtin_add_overflow(a, b, out); }

/* ---- row copies (without the GIL) ---------------------------------------------------------------------- */

/* out row d(k) = src row s(k) for k in [0, K), rows of `row_bytes` bytes, where s(k) = src_idx[k] (k when NULL)
 * and d(k) = dst_idx[k] (k when NULL); ids must be validated. Split into contiguous k ranges over at most
 * `nthreads` threads, each copying at least 1 MiB (gather_rows, place_rows). */
void sk_copy_rows(char *out, const int64_t *dst_idx, const char *src, const int64_t *src_idx, int64_t K,
                  int64_t row_bytes, int nthreads);

/* ---- complete positioned I/O (without the GIL) ---------------------------------------------------------- */

/* Transfer `len` bytes at file offset `off`, retrying after EINTR and short transfers. Returns SK_IO_OK,
 * SK_IO_EOF (a read reached end of file first) or SK_IO_ERRNO (*err = errno); *done = bytes transferred. */
enum { SK_IO_OK = 0, SK_IO_ERRNO = 1, SK_IO_EOF = 2 };
int sk_pread_full(int fd, void *buf, int64_t len, int64_t off, int64_t *done, int *err);
int sk_pwrite_full(int fd, const void *buf, int64_t len, int64_t off, int64_t *done, int *err);

/* The arguments of a batched range read (pread_ranges, uring_read_ranges): acquire `offsets`, `lengths`,
 * `out_offsets` (1-D int64) and `out` (writable bytes), and check that the three have one length K and that
 * every range k is non-negative, fits in `out` (out_offsets[k] + lengths[k] <= out.nbytes) and, if `direct`,
 * has its file offset, length and destination address aligned to SK_DIRECT_ALIGN. Returns K, or -1 with
 * ValueError naming the first bad range (views then hold what was acquired: release them). *total = the sum
 * of the lengths. Needs the GIL. */
int64_t sk_get_read_ranges(const char *func, PyObject *offsets_obj, PyObject *lengths_obj, PyObject *out_obj,
                           PyObject *out_offsets_obj, int direct, Py_buffer *offsets, Py_buffer *lengths,
                           Py_buffer *out, Py_buffer *out_offsets, int64_t *total);

/* Turn the status of a failed range read (code SK_IO_ERRNO or SK_IO_EOF; a = range, b = its file offset,
 * c = its length, d = bytes read before the failure) into OSError; returns -1, or 0 for any other code. */
int sk_raise_read_error(const char *func, int fd, const sk_status *st);

/* ---- small sorts ---------------------------------------------------------------------------------------- */

/* SK_DEFINE_SORT(name, type, key) defines `static void name(type *v, int64_t n)`, sorting v ascending by the
 * int64 key(element): insertion sort up to SK_INSERTION_SORT_MAX elements (most CSR rows), qsort beyond.
 * `key` is a macro or function of one element: SK_SORT_SELF for integers, say, or a field access. */
#define SK_INSERTION_SORT_MAX 24
#define SK_SORT_SELF(x) (x)
#define SK_DEFINE_SORT(name, type, key)                                                                           \
    static int name##_cmp(const void *a, const void *b) {                                                        \
        const int64_t x = key(*(const type *)a), y = key(*(const type *)b);                                     \
        return (x > y) - (x < y);                                                                                \
    }                                                                                                            \
    static void name(type *v, int64_t n) {                                                                       \
        if (n > SK_INSERTION_SORT_MAX) {                                                                         \
            qsort(v, (size_t)n, sizeof(type), name##_cmp);                                                       \
            return;                                                                                              \
        }                                                                                                        \
        for (int64_t i = 1; i < n; i++) {                                                                        \
            const type x = v[i];                                                                                 \
            int64_t j = i - 1;                                                                                   \
            while (j >= 0 && key(v[j]) > key(x)) {                                                               \
                v[j + 1] = v[j];                                                                                 \
                j--;                                                                                             \
            }                                                                                                    \
            v[j + 1] = x;                                                                                        \
        }                                                                                                        \
    }

/* ---- CSR graphs (indptr[N+1], indices[E]) --------------------------------------------------------------- */

/* Acquire indptr (read-only) and indices (writable when `writable`) as 1-D int64 buffers, and check that
 * indptr has at least 1 entry, starts at 0 and ends at E = len(indices). */
int sk_get_csr(const char *func, PyObject *indptr_obj, PyObject *indices_obj, int writable, Py_buffer *indptr,
               Py_buffer *indices);

/* Without the GIL: the `R` rows of `indptr` non-decreasing with offsets <= max_offset, and each of the E
 * `indices` in [0, num_ids); returns the largest degree, or -1 with st set (SK_ERR_CSR_INDPTR, SK_ERR_CSR_ID). */
int64_t sk_check_rows(const int64_t *indptr, int64_t R, int64_t max_offset, const int64_t *indices, int64_t E,
                      int64_t num_ids, sk_status *st);

/* A graph's CSR, without the GIL: sk_check_rows with rows within [0, E] and every id in [0, N). Raise its error
 * with sk_raise_csr_error. */
int64_t sk_check_csr(const int64_t *indptr, int64_t N, const int64_t *indices, int64_t E, sk_status *st);

/* The exception for an SK_ERR_CSR_* status: returns -1 when one was raised, 0 for any other code. */
int sk_raise_csr_error(const char *func, const sk_status *st, int64_t N, int64_t E);

/* A sampled block's CSR (nn/), without the GIL: sk_check_rows of its `D` destination rows, every col in
 * [0, S), the block's source rows (the caller checked that indptr starts at 0 and ends at E). Raise its error
 * with sk_raise_block_error. */
int64_t sk_check_block(const int64_t *indptr, int64_t D, const int64_t *cols, int64_t E, int64_t S, sk_status *st);

/* The exception for an SK_ERR_CSR_* (a block's wording) or SK_ERR_NOMEM status: -1 when one was raised, else 0. */
int sk_raise_block_error(const char *func, const sk_status *st, int64_t S);

/* ---- streamed chunks of the partitioning passes (partition/) -------------------------------------------- */

/* A chunk is `nodes` (B global ids) with their rows at the local offsets `indptr` (B+1) into `indices`.
 * Acquire the three read-only int64 buffers and check len(indptr) == len(nodes) + 1. */
int sk_get_chunk(const char *func, PyObject *indptr_obj, PyObject *indices_obj, PyObject *nodes_obj,
                 Py_buffer *indptr, Py_buffer *indices, Py_buffer *nodes);

/* Without the GIL: local indptr non-decreasing within [0, E], nodes in [0, N) (and strictly ascending when
 * `ascending`), columns in [0, N). Fills st with an SK_ERR_CHUNK_* code. */
void sk_check_chunk(const int64_t *indptr, int64_t B, int64_t E, const int64_t *nodes, int ascending,
                    const int64_t *indices, int64_t N, sk_status *st);

/* The exception for an SK_ERR_CHUNK_* or SK_ERR_NOMEM status (`ascending` as given to sk_check_chunk):
 * returns -1 when one was raised, 0 for any other code. */
int sk_raise_chunk_error(const char *func, const sk_status *st, int64_t N, int ascending);

#endif /* STRATA_NATIVE_COMMON_H */
