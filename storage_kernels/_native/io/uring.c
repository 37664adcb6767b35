/* io_uring reads: uring_read_ranges (the contract of pread_ranges, through one io_uring per call) and
 * io_uring_available.
 *
 * The kernel interface is used directly (no liburing): io_uring_setup / io_uring_enter through syscall(), the
 * SQ and CQ rings and the SQE array mmapped from the ring fd, head/tail published with acquire/release atomics.
 * Each call sets up its own ring (tens of microseconds: no state shared between threads or across fork), keeps
 * up to `queue_depth` READV requests in flight, reaps completions, and tears the ring down after every request
 * has completed (the buffers are never left to the kernel). The GIL is released from setup to teardown.
 *
 * Merge rule (merge=True). Ranges are visited in file order (offset ascending, then longest first, then index);
 * zero-length ranges read nothing.
 *   1. Same pages: a range lying wholly inside the previous range kept for I/O (a 4096-byte block asked for
 *      twice, or for two rows it holds) is not read again; it is copied from that range's destination after
 *      every read has completed.
 *   2. Adjacent pages: a range that starts exactly where the current request ends joins it as one more iovec
 *      of the same READV (one request for a contiguous span of the file, scattered into the destinations); when
 *      its destination also follows the previous iovec's, that iovec grows instead.
 *   Anything else (a gap, a partial overlap) starts a new request. merge=False issues every range as is, in
 *   the given order. Either way a request holds at most SK_URING_MAX_IOV iovecs and SK_URING_MAX_REQUEST
 *   bytes: a longer range is split, so that the pieces of a large (packed-chunk) read are in flight together.
 *
 * Destinations must not overlap (as for pread_ranges). Short reads are resubmitted for the rest; a read that
 * returns 0 bytes, or (O_DIRECT) stops short at an unaligned position, is the end of the file: an error naming
 * the range. -EAGAIN / -EINTR completions are resubmitted (at most SK_URING_MAX_RETRIES times each). */
#include "common.h"
#include "kernels.h"

#include <errno.h>
#include <linux/io_uring.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define SK_URING_MAX_IOV 1024              /* iovecs per READV (UIO_MAXIOV) */
#define SK_URING_MAX_REQUEST (4LL << 20)   /* bytes per request */
#define SK_URING_MAX_QUEUE_DEPTH 4096      /* io_uring_setup accepts up to 32768 SQ entries */
#define SK_URING_MAX_RETRIES 1000          /* resubmissions of one request after -EAGAIN / -EINTR */
#define SK_URING_DISABLED_PATH "/proc/sys/kernel/io_uring_disabled"

enum { URING_OK = SK_IO_OK, URING_ERRNO = SK_IO_ERRNO, URING_EOF = SK_IO_EOF, URING_SETUP = 3, URING_ENTER = 4 };

/* ---- the ring -------------------------------------------------------------------------------------------- */

typedef struct {
    int fd;
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array, sq_entries;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    void *sq_map, *cq_map;
    size_t sq_map_bytes, cq_map_bytes, sqes_bytes;
} ring_t;

static int sys_setup(unsigned entries, struct io_uring_params *p) {
    return (int)syscall(__NR_io_uring_setup, entries, p);
}

static int sys_enter(int fd, unsigned to_submit, unsigned min_complete, unsigned flags) {
    return (int)syscall(__NR_io_uring_enter, fd, to_submit, min_complete, flags, NULL, 0);
}

static void ring_close(ring_t *r) {
    if (r->sqes != NULL && r->sqes != MAP_FAILED) munmap(r->sqes, r->sqes_bytes);
    if (r->cq_map != NULL && r->cq_map != MAP_FAILED && r->cq_map != r->sq_map) munmap(r->cq_map, r->cq_map_bytes);
    if (r->sq_map != NULL && r->sq_map != MAP_FAILED) munmap(r->sq_map, r->sq_map_bytes);
    if (r->fd >= 0) close(r->fd);
    memset(r, 0, sizeof(*r));
    r->fd = -1;
}

/* Set up a ring of at least `entries` SQ entries (the CQ has twice as many). 0, or -1 with *err = errno. */
static int ring_open(ring_t *r, unsigned entries, int *err) {
    struct io_uring_params p;
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    memset(&p, 0, sizeof(p));
#if defined(IORING_SETUP_SINGLE_ISSUER) && defined(IORING_SETUP_DEFER_TASKRUN)
    /* one thread submits and reaps: completions run when it waits (6.1+; older kernels say EINVAL) */
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
#endif
    r->fd = sys_setup(entries, &p);
    if (r->fd < 0 && errno == EINVAL && p.flags != 0) {
        memset(&p, 0, sizeof(p));
        r->fd = sys_setup(entries, &p);
    }
    if (r->fd < 0) {
        *err = errno;
        return -1;
    }
    r->sq_map_bytes = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    r->cq_map_bytes = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    const int single = (p.features & IORING_FEAT_SINGLE_MMAP) != 0;
    if (single) {
        if (r->cq_map_bytes > r->sq_map_bytes) r->sq_map_bytes = r->cq_map_bytes;
        r->cq_map_bytes = r->sq_map_bytes;
    }
    r->sq_map = mmap(NULL, r->sq_map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                     IORING_OFF_SQ_RING);
    if (r->sq_map == MAP_FAILED) goto fail;
    r->cq_map = single ? r->sq_map
                       : mmap(NULL, r->cq_map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                              IORING_OFF_CQ_RING);
    if (r->cq_map == MAP_FAILED) goto fail;
    r->sqes_bytes = p.sq_entries * sizeof(struct io_uring_sqe);
    r->sqes = mmap(NULL, r->sqes_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
    if (r->sqes == MAP_FAILED) goto fail;

    char *sq = r->sq_map, *cq = r->cq_map;
    r->sq_head = (unsigned *)(sq + p.sq_off.head);
    r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    r->sq_array = (unsigned *)(sq + p.sq_off.array);
    r->sq_entries = p.sq_entries;
    r->cq_head = (unsigned *)(cq + p.cq_off.head);
    r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    r->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    for (unsigned i = 0; i < p.sq_entries; i++) r->sq_array[i] = i; /* SQ slot i holds SQE i */
    return 0;

fail:
    *err = errno;
    ring_close(r);
    return -1;
}

/* The next free SQE (zeroed); the caller publishes the tail with ring_publish. */
static struct io_uring_sqe *ring_sqe(ring_t *r, unsigned *tail) {
    struct io_uring_sqe *sqe = &r->sqes[*tail & *r->sq_mask];
    memset(sqe, 0, sizeof(*sqe));
    (*tail)++;
    return sqe;
}

static void ring_publish(ring_t *r, unsigned tail) { __atomic_store_n(r->sq_tail, tail, __ATOMIC_RELEASE); }

/* SQEs published but not yet consumed by the kernel. */
static unsigned ring_unsubmitted(const ring_t *r) {
    return *r->sq_tail - __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE);
}

/* Submit what is published and wait for at least `wait` completions; transient failures (EINTR, EAGAIN,
 * EBUSY) are retried. 0, or -1 with *err = errno. */
static int ring_submit_wait(ring_t *r, unsigned wait, int *err) {
    for (int tries = 0;; tries++) {
        const unsigned pending = ring_unsubmitted(r);
        const unsigned ready = __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE) - *r->cq_head;
        if (pending == 0 && ready >= wait) return 0;
        const int rc = sys_enter(r->fd, pending, ready >= wait ? 0 : wait, IORING_ENTER_GETEVENTS);
        if (rc >= 0) {
            if (ring_unsubmitted(r) == 0) return 0;
            continue; /* the kernel took part of the batch: submit the rest */
        }
        if ((errno == EINTR || errno == EAGAIN || errno == EBUSY) && tries < SK_URING_MAX_RETRIES) {
            if (errno != EINTR) sched_yield();
            continue;
        }
        *err = errno;
        return -1;
    }
}

/* ---- availability ---------------------------------------------------------------------------------------- */

/* 1 when a ring can be set up here and completes a NOP, else 0 with `reason` filled. */
static int uring_probe(char *reason, size_t size) {
    FILE *f = fopen(SK_URING_DISABLED_PATH, "r");
    int disabled = 0;
    if (f != NULL) {
        if (fscanf(f, "%d", &disabled) != 1) disabled = 0;
        fclose(f);
    }
    if (disabled == 2) {
        snprintf(reason, size, "io_uring is disabled for every process (%s = 2)", SK_URING_DISABLED_PATH);
        return 0;
    }
    ring_t r;
    int err = 0;
    if (ring_open(&r, 1, &err) < 0) {
        if (err == ENOSYS)
            snprintf(reason, size, "the kernel has no io_uring (io_uring_setup: ENOSYS)");
        else if (err == EPERM && disabled == 1)
            snprintf(reason, size, "io_uring is restricted to the io_uring_group (%s = 1; io_uring_setup: EPERM)",
                     SK_URING_DISABLED_PATH);
        else if (err == EPERM)
            snprintf(reason, size, "io_uring_setup refused (EPERM: a seccomp filter or policy forbids it)");
        else
            snprintf(reason, size, "io_uring_setup failed: %s", strerror(err));
        return 0;
    }
    unsigned tail = *r.sq_tail;
    struct io_uring_sqe *sqe = ring_sqe(&r, &tail);
    sqe->opcode = IORING_OP_NOP;
    sqe->user_data = 42;
    ring_publish(&r, tail);
    int ok = ring_submit_wait(&r, 1, &err) == 0;
    if (ok) {
        const struct io_uring_cqe *cqe = &r.cqes[*r.cq_head & *r.cq_mask];
        ok = cqe->user_data == 42 && cqe->res == 0;
        __atomic_store_n(r.cq_head, *r.cq_head + 1, __ATOMIC_RELEASE);
        if (!ok) snprintf(reason, size, "an io_uring NOP completed with %d", cqe->res);
    } else {
        snprintf(reason, size, "io_uring_enter failed: %s", strerror(err));
    }
    ring_close(&r);
    return ok;
}

PyObject *sk_io_uring_available(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {NULL};
    static int probed = 0, available = 0; /* the answer does not change while the process runs */
    static char reason[256];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, ":io_uring_available", kwlist)) return NULL;
    if (!probed) {
        int ok;
        Py_BEGIN_ALLOW_THREADS
        ok = uring_probe(reason, sizeof(reason));
        Py_END_ALLOW_THREADS
        available = ok;
        probed = 1;
    }
    return Py_BuildValue("(Os)", available ? Py_True : Py_False, available ? "" : reason);
}

/* ---- planning: ranges -> requests ------------------------------------------------------------------------ */

typedef struct {
    int64_t off, len, dst, k;
    int kept; /* 1: read into dst; 0: copied from a kept range (rule 1) */
} span_t;

typedef struct {
    int64_t off, len, done;  /* file span and bytes completed */
    int64_t first, last;     /* spans [first, last] it covers (for error messages) */
    int64_t iov;             /* its first iovec in the plan (advanced in place after a short read) */
    int32_t niov;            /* and their count (<= SK_URING_MAX_IOV) */
    int32_t retries;
} request_t;

typedef struct {
    int64_t dst, src, len;
} copy_t;

static int span_cmp(const void *a, const void *b) {
    const span_t *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1; /* longest first: shorter ones fall inside it */
    return (x->k > y->k) - (x->k < y->k);
}

typedef struct {
    span_t *spans;
    int64_t nspans;
    request_t *reqs;
    int64_t nreqs, reads;
    struct iovec *iov;
    int64_t niov;
    copy_t *copies;
    int64_t ncopies;
} plan_t;

/* Requests for the non-empty spans (see the merge rule at the top). The arrays are sized by the caller. */
static void plan_requests(plan_t *p, char *out, int merge) {
    request_t *cur = NULL;
    const span_t *last = NULL; /* the previous kept span */
    for (int64_t i = 0; i < p->nspans; i++) {
        span_t *s = &p->spans[i];
        if (merge && last != NULL && s->off + s->len <= last->off + last->len) { /* inside `last` (sorted) */
            s->kept = 0;
            const int64_t src = last->dst + (s->off - last->off);
            if (src != s->dst) p->copies[p->ncopies++] = (copy_t){s->dst, src, s->len};
            continue;
        }
        s->kept = 1;
        const int joins = merge && last != NULL && s->off == last->off + last->len;
        p->reads += !joins;
        last = s;
        for (int64_t pos = 0; pos < s->len;) {
            if (!(joins || pos > 0) || cur == NULL || cur->off + cur->len != s->off + pos ||
                cur->niov >= SK_URING_MAX_IOV || cur->len >= SK_URING_MAX_REQUEST) {
                cur = &p->reqs[p->nreqs++];
                *cur = (request_t){.off = s->off + pos, .first = i, .iov = p->niov};
            }
            int64_t take = s->len - pos;
            if (take > SK_URING_MAX_REQUEST - cur->len) take = SK_URING_MAX_REQUEST - cur->len;
            char *dst = out + s->dst + pos;
            struct iovec *prev = cur->niov > 0 ? &p->iov[p->niov - 1] : NULL;
            if (prev != NULL && (char *)prev->iov_base + prev->iov_len == dst) {
                prev->iov_len += (size_t)take;
            } else {
                p->iov[p->niov++] = (struct iovec){dst, (size_t)take};
                cur->niov++;
            }
            cur->len += take;
            cur->last = i;
            pos += take;
        }
    }
}

/* ---- execution ------------------------------------------------------------------------------------------- */

/* The span of request q holding file position `pos` (its first kept span when none does). */
static const span_t *span_at(const plan_t *p, const request_t *q, int64_t pos) {
    for (int64_t i = q->first; i <= q->last; i++) {
        const span_t *s = &p->spans[i];
        if (s->kept && s->off <= pos && pos < s->off + s->len) return s;
    }
    return &p->spans[q->first];
}

static void fail_request(const plan_t *p, const request_t *q, int code, int err, sk_status *st) {
    const int64_t pos = q->off + q->done;
    const span_t *s = span_at(p, q, pos);
    sk_status_set(st, code, err, s->k, s->k, s->off, s->len, pos - s->off);
}

/* Move the iovecs of q past `n` bytes just read. */
static void advance_iov(plan_t *p, request_t *q, int64_t n) {
    while (n > 0) {
        struct iovec *v = &p->iov[q->iov];
        if ((int64_t)v->iov_len <= n) {
            n -= (int64_t)v->iov_len;
            q->iov++;
            q->niov--;
        } else {
            v->iov_base = (char *)v->iov_base + n;
            v->iov_len -= (size_t)n;
            n = 0;
        }
    }
}

static void prep_read(ring_t *r, unsigned *tail, int fd, const plan_t *p, int64_t q) {
    const request_t *req = &p->reqs[q];
    struct io_uring_sqe *sqe = ring_sqe(r, tail);
    sqe->fd = fd;
    sqe->off = (uint64_t)(req->off + req->done);
    if (req->niov == 1) { /* one buffer: a plain read, without the kernel copying in an iovec */
        sqe->opcode = IORING_OP_READ;
        sqe->addr = (uint64_t)(uintptr_t)p->iov[req->iov].iov_base;
        sqe->len = (unsigned)p->iov[req->iov].iov_len;
    } else {
        sqe->opcode = IORING_OP_READV;
        sqe->addr = (uint64_t)(uintptr_t)&p->iov[req->iov];
        sqe->len = (unsigned)req->niov;
    }
    sqe->user_data = (uint64_t)q;
}

/* Run every request with at most `depth` in flight; errors go to `st` (the one of the smallest range wins).
 * After the first error nothing new is submitted, but every request in flight is waited for. */
static void run_requests(plan_t *p, int fd, int direct, unsigned depth, sk_status *st) {
    ring_t r;
    int err = 0;
    if (p->nreqs == 0) return;
    if (depth > (uint64_t)p->nreqs) depth = (unsigned)p->nreqs;
    if (ring_open(&r, depth, &err) < 0) {
        sk_status_set(st, URING_SETUP, err, -1, 0, 0, 0, 0);
        return;
    }
    if (r.fd == fd) { /* the ring took the caller's descriptor number: it was not open (a read would hang) */
        fail_request(p, &p->reqs[0], URING_ERRNO, EBADF, st);
        ring_close(&r);
        return;
    }
    int64_t *retry = malloc((size_t)depth * sizeof(int64_t)); /* requests to resubmit (at most those in flight) */
    if (retry == NULL) {
        sk_status_set(st, SK_ERR_NOMEM, 0, -1, 0, 0, 0, 0);
        ring_close(&r);
        return;
    }
    int64_t next = 0, nretry = 0;
    unsigned inflight = 0;
    int stop = 0;
    while (inflight > 0 || (!stop && (next < p->nreqs || nretry > 0))) {
        unsigned tail = *r.sq_tail;
        while (!stop && inflight < depth && (nretry > 0 || next < p->nreqs)) {
            prep_read(&r, &tail, fd, p, nretry > 0 ? retry[--nretry] : next++);
            inflight++;
        }
        ring_publish(&r, tail);
        /* with the ring full, wait for a quarter of it: one enter per batch of completions, not per read,
         * while three quarters stay in flight */
        const unsigned batch = inflight >= depth && depth >= 8 ? depth / 4 : 1;
        if (ring_submit_wait(&r, batch, &err) < 0) { /* the ring itself failed: wait no more, report it */
            sk_status_set(st, URING_ENTER, err, -1, 0, 0, 0, 0);
            break;
        }
        unsigned head = *r.cq_head;
        const unsigned ctail = __atomic_load_n(r.cq_tail, __ATOMIC_ACQUIRE);
        for (; head != ctail; head++) {
            const struct io_uring_cqe *cqe = &r.cqes[head & *r.cq_mask];
            const int64_t q = (int64_t)cqe->user_data;
            const int res = cqe->res;
            request_t *req = &p->reqs[q];
            inflight--;
            if (res == -EAGAIN || res == -EINTR) {
                if (++req->retries <= SK_URING_MAX_RETRIES && !stop) {
                    retry[nretry++] = q;
                    continue;
                }
                fail_request(p, req, URING_ERRNO, -res, st);
                stop = 1;
            } else if (res < 0) {
                fail_request(p, req, URING_ERRNO, -res, st);
                stop = 1;
            } else if (res == 0) {
                fail_request(p, req, URING_EOF, 0, st);
                stop = 1;
            } else {
                req->done += res;
                advance_iov(p, req, res);
                if (req->done < req->len) { /* short read: the rest, unless O_DIRECT stopped mid-block (EOF) */
                    if (direct && !sk_is_aligned((uint64_t)(req->off + req->done), SK_DIRECT_ALIGN)) {
                        fail_request(p, req, URING_EOF, 0, st);
                        stop = 1;
                    } else if (!stop) {
                        retry[nretry++] = q;
                    }
                }
            }
        }
        __atomic_store_n(r.cq_head, head, __ATOMIC_RELEASE);
    }
    free(retry);
    ring_close(&r);
}

PyObject *sk_uring_read_ranges(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"fd", "offsets", "lengths", "out", "out_offsets", "direct", "queue_depth", "merge",
                             NULL};
    PyObject *offsets_obj, *lengths_obj, *out_obj, *out_offsets_obj;
    int fd, direct, merge = 1;
    Py_ssize_t queue_depth = 256; /* kernels.URING_QUEUE_DEPTH */
    Py_buffer offsets = {0}, lengths = {0}, out = {0}, out_offsets = {0};
    sk_status st = {0};
    plan_t p = {0};
    int64_t total = 0;
    PyObject *result = NULL;
    const char *fn = "uring_read_ranges";

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOOOOp|np:uring_read_ranges", kwlist, &fd, &offsets_obj,
                                     &lengths_obj, &out_obj, &out_offsets_obj, &direct, &queue_depth, &merge))
        return NULL;
    if (sk_check_fd(fn, fd) < 0 || sk_check_min(fn, "queue_depth", queue_depth, 1) < 0) return NULL;
    if (queue_depth > SK_URING_MAX_QUEUE_DEPTH) {
        PyErr_Format(PyExc_ValueError, "%s: 'queue_depth' expected <= %d (got %zd)", fn, SK_URING_MAX_QUEUE_DEPTH,
                     queue_depth);
        return NULL;
    }
    const int64_t K = sk_get_read_ranges(fn, offsets_obj, lengths_obj, out_obj, out_offsets_obj, direct, &offsets,
                                         &lengths, &out, &out_offsets, &total);
    if (K < 0) goto done;
    const int64_t *off = offsets.buf, *len = lengths.buf, *ooff = out_offsets.buf;
    int64_t pieces = 0; /* bound on iovecs and requests: two per range (the tail of a request, then new ones) plus
                         * one per SK_URING_MAX_REQUEST bytes */
    for (int64_t k = 0; k < K; k++)
        if (len[k] > 0) {
            p.nspans++;
            pieces += 2 + len[k] / SK_URING_MAX_REQUEST;
        }
    p.spans = malloc((size_t)(p.nspans > 0 ? p.nspans : 1) * sizeof(span_t));
    p.reqs = malloc((size_t)(pieces > 0 ? pieces : 1) * sizeof(request_t));
    p.iov = malloc((size_t)(pieces > 0 ? pieces : 1) * sizeof(struct iovec));
    p.copies = malloc((size_t)(p.nspans > 0 ? p.nspans : 1) * sizeof(copy_t));
    if (p.spans == NULL || p.reqs == NULL || p.iov == NULL || p.copies == NULL) {
        PyErr_NoMemory();
        goto done;
    }

    Py_BEGIN_ALLOW_THREADS
    int sorted = 1;
    for (int64_t k = 0, i = 0; k < K; k++) {
        if (len[k] == 0) continue;
        p.spans[i] = (span_t){off[k], len[k], ooff[k], k, 1};
        if (i > 0 && span_cmp(&p.spans[i - 1], &p.spans[i]) > 0) sorted = 0;
        i++;
    }
    if (merge && !sorted) qsort(p.spans, (size_t)p.nspans, sizeof(span_t), span_cmp);
    plan_requests(&p, out.buf, merge);
    run_requests(&p, fd, direct, (unsigned)queue_depth, &st);
    if (st.code == URING_OK) /* rule 1: the same pages, copied once every read is in */
        for (int64_t c = 0; c < p.ncopies; c++)
            memmove((char *)out.buf + p.copies[c].dst, (char *)out.buf + p.copies[c].src, (size_t)p.copies[c].len);
    Py_END_ALLOW_THREADS

    if (st.code == URING_SETUP)
        sk_raise_errno(st.err_no, "%s: setting up an io_uring of depth %zd for fd %d", fn, queue_depth, fd);
    else if (st.code == URING_ENTER)
        sk_raise_errno(st.err_no, "%s: io_uring_enter on the ring reading fd %d", fn, fd);
    else if (st.code == SK_ERR_NOMEM)
        PyErr_NoMemory();
    else if (sk_raise_read_error(fn, fd, &st) == 0)
        result = Py_BuildValue("(LL)", (long long)total, (long long)(merge ? p.reads : K));

done:
    free(p.spans);
    free(p.reqs);
    free(p.iov);
    free(p.copies);
    SK_RELEASE(&offsets, &lengths, &out, &out_offsets);
    return result;
}
