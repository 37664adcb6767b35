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

enum { DIO_OK = SK_IO_OK, DIO_ERRNO = SK_IO_ERRNO, DIO_EOF = SK_IO_EOF }; /* codes of sk_pread_full */

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
    if (sk_check_fd("close_fd", fd) < 0) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = close(fd);
    err = errno;
    Py_END_ALLOW_THREADS
    if (rc < 0 && err != EINTR) /* after EINTR the descriptor is released on Linux: do not retry */
        return sk_raise_errno(err, "close_fd: closing fd %d", fd);
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
            const int64_t off = c->offsets[k], len = c->lengths[k];
            int64_t done;
            int err = 0;
            const int rc = sk_pread_full(c->fd, c->out + c->out_offsets[k], len, off, &done, &err);
            if (rc != DIO_OK) sk_status_set(st, rc, err, k, k, off, len, done);
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
    PyObject *result = NULL;
    const char *fn = "pread_ranges";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOOOOp|n:pread_ranges", kwlist, &fd, &offsets_obj, &lengths_obj,
                                     &out_obj, &out_offsets_obj, &direct, &num_threads))
        return NULL;
    if ((nthreads = sk_resolve_threads(fn, num_threads)) < 0 || sk_check_fd(fn, fd) < 0) return NULL;
    const int64_t K = sk_get_read_ranges(fn, offsets_obj, lengths_obj, out_obj, out_offsets_obj, direct, &offsets,
                                         &lengths, &out, &out_offsets, &total);
    if (K < 0) goto done;
    const int64_t *off = offsets.buf, *len = lengths.buf, *ooff = out_offsets.buf;
    nthreads = sk_cap_threads(nthreads, K, 1);
    if ((ts = calloc((size_t)nthreads, sizeof(sk_status))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    pread_ctx ctx = {.fd = fd, .offsets = off, .lengths = len, .out_offsets = ooff, .out = out.buf, .K = K,
                     .status = ts};
    atomic_init(&ctx.next, 0);

    Py_BEGIN_ALLOW_THREADS
    sk_parallel(nthreads, pread_task, &ctx);
    Py_END_ALLOW_THREADS

    for (int t = 0; t < nthreads; t++) sk_status_merge(&st, &ts[t]);
    if (sk_raise_read_error(fn, fd, &st) == 0)
        result = PyLong_FromLongLong((long long)total);

done:
    free(ts);
    SK_RELEASE(&offsets, &lengths, &out, &out_offsets);
    return result;
}

PyObject *sk_aligned_empty(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"nbytes", "alignment", NULL};
    Py_ssize_t nbytes, alignment = SK_DIRECT_ALIGN;
    void *data = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n|n:aligned_empty", kwlist, &nbytes, &alignment)) return NULL;
    if (sk_check_min("aligned_empty", "nbytes", nbytes, 0) < 0) return NULL;
    if (!sk_is_pow2(alignment)) {
        PyErr_Format(PyExc_ValueError, "aligned_empty: 'alignment' expected a power of two (got %zd)", alignment);
        return NULL;
    }
    const size_t align = (size_t)alignment < sizeof(void *) ? sizeof(void *) : (size_t)alignment;
    if (posix_memalign(&data, align, nbytes > 0 ? (size_t)nbytes : 1) != 0) return PyErr_NoMemory();
    return sk_uint8_array_from_malloc(data, nbytes);
}
