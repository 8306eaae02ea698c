/* Accounting allocator for activation memory (see alloc.h). */
#include "harness/engine/alloc.h"

void ck_act_alloc_init(ck_act_alloc *a, ck_backend *b)
{
    a->b = b;
    a->live_bytes = 0;
    a->peak_bytes = 0;
    a->n_allocs = 0;
    a->trace.n = 0;
    a->trace.stride = 1;
    a->trace.events = 0;
}

ck_status ck_act_alloc_tensor(ck_act_alloc *a, ck_tensor *t, ck_error *err)
{
    int64_t n;
    if (!ck_shape_numel_checked(&t->shape, ck_dtype_size(t->dtype), &n))
        return ck_fail(err, CK_ERR_INPUT, "tensor %s: shape too large", t->name ? t->name : "?");
    size_t bytes = (size_t)n * ck_dtype_size(t->dtype);
    ck_status st = a->b->alloc(a->b, bytes, &t->data, err);
    if (st != CK_OK) {
        ck_error_prefix(err, "allocating %zu bytes for %s (%lld bytes of activations live)",
                        bytes, t->name ? t->name : "?", (long long)a->live_bytes);
        t->data = NULL;
        return st;
    }
    a->live_bytes += (int64_t)bytes;
    a->n_allocs++;
    if (a->live_bytes > a->peak_bytes)
        a->peak_bytes = a->live_bytes;
    ck_mem_trace_add(&a->trace, a->live_bytes);
    return CK_OK;
}

void ck_act_free_tensor(ck_act_alloc *a, ck_tensor *t)
{
    if (!t->data)
        return;
    a->b->free(a->b, t->data);
    a->live_bytes -= (int64_t)ck_tensor_bytes(t);
    t->data = NULL;
    ck_mem_trace_add(&a->trace, a->live_bytes);
}

void ck_mem_trace_add(ck_mem_trace *t, int64_t live_bytes)
{
    if (t->stride < 1)
        t->stride = 1;
    int64_t e = t->events++;
    if (t->n > 0 && t->pt[t->n - 1].event / t->stride == e / t->stride) {
        if (live_bytes > t->pt[t->n - 1].bytes)
            t->pt[t->n - 1] = (ck_mem_point){e, live_bytes};
        return;
    }
    if (t->n == CK_MEM_TRACE_MAX) {
        /* merge neighbouring buckets, keeping each pair's larger value */
        int m = 0;
        t->stride *= 2;
        for (int i = 0; i < t->n; i++) {
            if (m > 0 && t->pt[m - 1].event / t->stride == t->pt[i].event / t->stride) {
                if (t->pt[i].bytes > t->pt[m - 1].bytes)
                    t->pt[m - 1] = t->pt[i];
            } else {
                t->pt[m++] = t->pt[i];
            }
        }
        t->n = m;
        if (t->pt[t->n - 1].event / t->stride == e / t->stride) {
            if (live_bytes > t->pt[t->n - 1].bytes)
                t->pt[t->n - 1] = (ck_mem_point){e, live_bytes};
            return;
        }
    }
    t->pt[t->n++] = (ck_mem_point){e, live_bytes};
}
