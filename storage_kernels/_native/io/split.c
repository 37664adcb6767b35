/* A batch's address table grouped by tier, for the feature source's read stage (trainer/features/source.py).
 *
 * split_by_code(codes, slots, num_codes) -> (order, sorted_slots, ptr, lo, hi)
 *
 * codes (n,) int8 are each node's tier code, slots (n,) int64 its row in that tier. order lists the positions
 * 0..n-1 grouped by code, ascending within a code (a stable counting sort): code c's nodes are
 * order[ptr[c]:ptr[c + 1]], their slots sorted_slots[ptr[c]:ptr[c + 1]]; lo[c] / hi[c] are the smallest and
 * largest of those slots (0 and -1 when the code has none), so a tier checks its slot range without a pass of
 * its own. One pass to count and one to place, without the GIL: what were a mask, a flatnonzero, a gather and
 * a min and a max per tier over the batch's nodes. ValueError naming the first node whose code is outside
 * [0, num_codes). tests/storage_kernels/test_native_split.py has the NumPy reference. */
#include "common.h"
#include "kernels.h"

#define SPLIT_MAX_CODES 127

PyObject *sk_split_by_code(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"codes", "slots", "num_codes", NULL};
    PyObject *codes_obj, *slots_obj;
    Py_ssize_t num_codes;
    Py_buffer codes = {0}, slots = {0};
    PyObject *result = NULL;
    const char *fn = "split_by_code";
    int64_t *order = NULL, *sorted = NULL, *ptr = NULL, *lo = NULL, *hi = NULL, bad = -1;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOn:split_by_code", kwlist, &codes_obj, &slots_obj, &num_codes))
        return NULL;
    if (sk_check_min(fn, "num_codes", num_codes, 1) < 0) return NULL;
    if (num_codes > SPLIT_MAX_CODES) {
        PyErr_Format(PyExc_ValueError, "%s: 'num_codes' expected <= %d (got %zd)", fn, SPLIT_MAX_CODES, num_codes);
        return NULL;
    }
    if (sk_get_typed(codes_obj, fn, "codes", 'b', 1, "an int8", 0, &codes) < 0) goto done;
    if (sk_get_buffer(slots_obj, fn, "slots", SK_INT64, 1, 0, &slots) < 0) goto done;
    const int64_t n = sk_len(&codes), C = (int64_t)num_codes;
    if (sk_check_len(fn, "slots", &slots, n) < 0) goto done;
    const size_t nb = sizeof(int64_t) * (size_t)(n > 0 ? n : 1), cb = sizeof(int64_t) * (size_t)C;
    order = malloc(nb);
    sorted = malloc(nb);
    ptr = malloc(cb + sizeof(int64_t));
    lo = malloc(cb);
    hi = malloc(cb);
    if (order == NULL || sorted == NULL || ptr == NULL || lo == NULL || hi == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int8_t *code = codes.buf;
    const int64_t *slot = slots.buf;

    Py_BEGIN_ALLOW_THREADS
    int64_t count[SPLIT_MAX_CODES + 1] = {0}, cursor[SPLIT_MAX_CODES] = {0};
    for (int64_t c = 0; c < C; c++) {
        lo[c] = INT64_MAX;
        hi[c] = INT64_MIN;
    }
    for (int64_t i = 0; i < n; i++) {
        const int c = code[i];
        if (c < 0 || c >= C) {
            bad = i;
            break;
        }
        count[c]++;
        if (slot[i] < lo[c]) lo[c] = slot[i];
        if (slot[i] > hi[c]) hi[c] = slot[i];
    }
    if (bad < 0) {
        ptr[0] = 0;
        for (int64_t c = 0; c < C; c++) {
            ptr[c + 1] = ptr[c] + count[c];
            cursor[c] = ptr[c];
            if (count[c] == 0) {
                lo[c] = 0;
                hi[c] = -1;
            }
        }
        for (int64_t i = 0; i < n; i++) {
            const int64_t at = cursor[code[i]]++;
            order[at] = i;
            sorted[at] = slot[i];
        }
    }
    Py_END_ALLOW_THREADS

    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "%s: 'codes' expected codes in [0, %lld) (got codes[%lld]=%d)", fn,
                     (long long)C, (long long)bad, (int)code[bad]);
        goto done;
    }
    PyObject *a[5];
    int64_t **data[5] = {&order, &sorted, &ptr, &lo, &hi};
    const int64_t lens[5] = {n, n, C + 1, C, C};
    for (int i = 0; i < 5; i++) {
        a[i] = sk_int64_array_from_malloc(*data[i], lens[i]);
        *data[i] = NULL; /* owned by the array now (or freed on failure) */
        if (a[i] == NULL) {
            for (int j = 0; j < i; j++) Py_DECREF(a[j]);
            goto done;
        }
    }
    result = Py_BuildValue("(NNNNN)", a[0], a[1], a[2], a[3], a[4]);

done:
    free(order);
    free(sorted);
    free(ptr);
    free(lo);
    free(hi);
    SK_RELEASE(&codes, &slots);
    return result;
}
