/* Direct I/O: open with O_DIRECT (buffered fallback), batched aligned preads, aligned buffers.
 *
 * With O_DIRECT the kernel DMA's straight into the destination, so file offset, length and destination
 * address must all be multiples of the logical block size; we require SK_DIRECT_ALIGN (the module's
 * DIRECT_ALIGN) and check every range before the first read. Reads are retried until complete (EINTR, short
 * reads); reaching EOF before a range is complete is an error. */
#include "common.h"
#include "kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { DIO_OK = 0, DIO_ERRNO = 1, DIO_EOF = 2 };

PyObject *sk_open_direct(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"path", "write", NULL};
    PyObject *path_obj, *path_bytes = NULL;
    int write = 0, fd, direct = 1, err = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|p:open_direct", kwlist, &path_obj, &write)) return NULL;
    if (!PyUnicode_FSConverter(path_obj, &path_bytes)) return NULL;
    const char *path = PyBytes_AS_STRING(path_bytes);
    const int flags = (write ? O_RDWR | O_CREAT : O_RDONLY) | O_CLOEXEC;

    Py_BEGIN_ALLOW_THREADS
    fd = open(path, flags | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) { /* the filesystem does not do O_DIRECT (e.g. tmpfs on older kernels) */
        direct = 0;
        fd = open(path, flags, 0644);
    }
    err = errno;
    Py_END_ALLOW_THREADS

    Py_DECREF(path_bytes);
    if (fd < 0) {
        errno = err;
        return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_obj);
    }
    return Py_BuildValue("(iO)", fd, direct ? Py_True : Py_False);
}

PyObject *sk_close_fd(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"fd", NULL};
    int fd, rc, err = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "i:close_fd", kwlist, &fd)) return NULL;
    if (fd < 0) {
        PyErr_Format(PyExc_ValueError, "close_fd: 'fd' expected a descriptor >= 0 (got %d)", fd);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = close(fd);
    err = errno;
    Py_END_ALLOW_THREADS
    if (rc < 0 && err != EINTR) { /* after EINTR the descriptor is released on Linux: do not retry */
        PyObject *msg = PyUnicode_FromFormat("close_fd: closing fd %d: %s", fd, strerror(err));
        if (msg != NULL) {
            PyObject *exc_args = Py_BuildValue("(iN)", err, msg);
            if (exc_args != NULL) {
                PyErr_SetObject(PyExc_OSError, exc_args);
                Py_DECREF(exc_args);
            }
        }
        return NULL;
    }
    Py_RETURN_NONE;
}

typedef struct {
    int fd;
    const int64_t *offsets, *lengths, *out_offsets;
    char *out;
    int64_t K;
    atomic_llong next;
    sk_status *status;
} pread_ctx;

static void pread_task(void *p, int tid, int nthreads) {
    pread_ctx *c = (pread_ctx *)p;
    sk_status *st = &c->status[tid];
    int64_t lo, hi;
    while (sk_claim(&c->next, c->K, 1, &lo, &hi)) {
        for (int64_t k = lo; k < hi; k++) {
            char *dst = c->out + c->out_offsets[k];
            const int64_t off = c->offsets[k], len = c->lengths[k];
            int64_t done = 0;
            while (done < len) {
                const ssize_t r = pread(c->fd, dst + done, (size_t)(len - done), (off_t)(off + done));
                if (r < 0) {
                    if (errno == EINTR) continue;
                    sk_status_set(st, DIO_ERRNO, errno, k, k, off, len, done);
                    break;
                }
                if (r == 0) {
                    sk_status_set(st, DIO_EOF, 0, k, k, off, len, done);
                    break;
                }
                done += r;
            }
        }
    }
}

PyObject *sk_pread_ranges(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"fd", "offsets", "lengths", "out", "out_offsets", "direct", "num_threads", NULL};
    PyObject *offsets_obj, *lengths_obj, *out_obj, *out_offsets_obj;
    int fd, direct;
    Py_ssize_t num_threads = 0;
    Py_buffer offsets = {0}, lengths = {0}, out = {0}, out_offsets = {0};
    sk_status st = {0}, *ts = NULL;
    int nthreads;
    int64_t total = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOOOOp|n:pread_ranges", kwlist, &fd, &offsets_obj, &lengths_obj,
                                     &out_obj, &out_offsets_obj, &direct, &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads("pread_ranges", num_threads)) < 0) return NULL;
    if (fd < 0) {
        PyErr_Format(PyExc_ValueError, "pread_ranges: 'fd' expected a descriptor >= 0 (got %d)", fd);
        return NULL;
    }
    if (sk_get_buffer(offsets_obj, "pread_ranges", "offsets", SK_INT64, 1, 0, &offsets) < 0) goto fail;
    if (sk_get_buffer(lengths_obj, "pread_ranges", "lengths", SK_INT64, 1, 0, &lengths) < 0) goto fail;
    if (sk_get_buffer(out_obj, "pread_ranges", "out", SK_UINT8, SK_ANY_NDIM, 1, &out) < 0) goto fail;
    if (sk_get_buffer(out_offsets_obj, "pread_ranges", "out_offsets", SK_INT64, 1, 0, &out_offsets) < 0) goto fail;

    const int64_t K = sk_len(&offsets), nbytes = (int64_t)out.len;
    if (sk_len(&lengths) != K || sk_len(&out_offsets) != K) {
        PyErr_Format(PyExc_ValueError,
                     "pread_ranges: 'lengths' and 'out_offsets' expected the length of 'offsets' (%lld) "
                     "(got %lld and %lld)",
                     (long long)K, (long long)sk_len(&lengths), (long long)sk_len(&out_offsets));
        goto fail;
    }
    const int64_t *off = offsets.buf, *len = lengths.buf, *ooff = out_offsets.buf;
    for (int64_t k = 0; k < K; k++) {
        int64_t end;
        if (off[k] < 0 || len[k] < 0 || ooff[k] < 0) {
            PyErr_Format(PyExc_ValueError,
                         "pread_ranges: range %lld expected non-negative offset, length and out_offset "
                         "(got offsets[%lld]=%lld, lengths[%lld]=%lld, out_offsets[%lld]=%lld)",
                         (long long)k, (long long)k, (long long)off[k], (long long)k, (long long)len[k],
                         (long long)k, (long long)ooff[k]);
            goto fail;
        }
        if (sk_add_overflow(ooff[k], len[k], &end) || end > nbytes || sk_add_overflow(off[k], len[k], &end) ||
            sk_add_overflow(total, len[k], &total)) {
            PyErr_Format(PyExc_ValueError,
                         "pread_ranges: range %lld expected out_offsets[k] + lengths[k] <= out.nbytes=%lld "
                         "(got %lld + %lld)",
                         (long long)k, (long long)nbytes, (long long)ooff[k], (long long)len[k]);
            goto fail;
        }
        if (direct) {
            const uintptr_t addr = (uintptr_t)out.buf + (uintptr_t)ooff[k];
            if (!sk_is_aligned((uint64_t)off[k], SK_DIRECT_ALIGN) || !sk_is_aligned((uint64_t)len[k], SK_DIRECT_ALIGN) ||
                !sk_is_aligned(addr, SK_DIRECT_ALIGN)) {
                PyErr_Format(PyExc_ValueError,
                             "pread_ranges: direct range %lld expected offset, length and destination address "
                             "aligned to %d bytes (got offsets[%lld]=%lld, lengths[%lld]=%lld, destination "
                             "address %% %d = %lld)",
                             (long long)k, SK_DIRECT_ALIGN, (long long)k, (long long)off[k], (long long)k,
                             (long long)len[k], SK_DIRECT_ALIGN, (long long)(addr % SK_DIRECT_ALIGN));
                goto fail;
            }
        }
    }
    nthreads = sk_cap_threads(nthreads, K, 1);
    if ((ts = calloc((size_t)nthreads, sizeof(sk_status))) == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    pread_ctx ctx = {.fd = fd, .offsets = off, .lengths = len, .out_offsets = ooff, .out = out.buf, .K = K,
                     .status = ts};
    atomic_init(&ctx.next, 0);

    Py_BEGIN_ALLOW_THREADS
    sk_parallel(nthreads, pread_task, &ctx);
    Py_END_ALLOW_THREADS

    for (int t = 0; t < nthreads; t++) sk_status_merge(&st, &ts[t]);
    if (st.code == DIO_ERRNO) {
        PyObject *msg = PyUnicode_FromFormat("pread_ranges: reading fd %d at offset %lld (range %lld, length %lld): %s",
                                             fd, (long long)(st.b + st.d), (long long)st.a, (long long)st.c,
                                             strerror(st.err_no));
        if (msg != NULL) {
            PyObject *exc_args = Py_BuildValue("(iN)", st.err_no, msg);
            if (exc_args != NULL) {
                PyErr_SetObject(PyExc_OSError, exc_args);
                Py_DECREF(exc_args);
            }
        }
        goto fail;
    }
    if (st.code == DIO_EOF) {
        PyErr_Format(PyExc_OSError,
                     "pread_ranges: fd %d expected %lld bytes at offset %lld (range %lld) (got %lld before end of "
                     "file)",
                     fd, (long long)st.c, (long long)st.b, (long long)st.a, (long long)st.d);
        goto fail;
    }
    free(ts);
    sk_release(&offsets);
    sk_release(&lengths);
    sk_release(&out);
    sk_release(&out_offsets);
    return PyLong_FromLongLong((long long)total);

fail:
    free(ts);
    sk_release(&offsets);
    sk_release(&lengths);
    sk_release(&out);
    sk_release(&out_offsets);
    return NULL;
}

PyObject *sk_aligned_empty(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"nbytes", "alignment", NULL};
    Py_ssize_t nbytes, alignment = SK_DIRECT_ALIGN;
    void *data = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n|n:aligned_empty", kwlist, &nbytes, &alignment)) return NULL;
    if (nbytes < 0) {
        PyErr_Format(PyExc_ValueError, "aligned_empty: 'nbytes' expected >= 0 (got %zd)", nbytes);
        return NULL;
    }
    if (!sk_is_pow2(alignment)) {
        PyErr_Format(PyExc_ValueError, "aligned_empty: 'alignment' expected a power of two (got %zd)", alignment);
        return NULL;
    }
    const size_t align = (size_t)alignment < sizeof(void *) ? sizeof(void *) : (size_t)alignment;
    if (posix_memalign(&data, align, nbytes > 0 ? (size_t)nbytes : 1) != 0) return PyErr_NoMemory();
    return sk_uint8_array_from_malloc(data, nbytes);
}
