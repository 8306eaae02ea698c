/* Accounting allocator for activation memory, its timeline and its event log (see alloc.h). */
#include "harness/engine/alloc.h"

#include <stdio.h>

void ck_alloc_trace_init(ck_alloc_trace *t, ck_alloc_event *events, int capacity)
{
    t->events = events;
    t->capacity = events && capacity > 0 ? capacity : 0;
    t->n = 0;
    t->lost = 0;
}

static void log_event(ck_act_alloc *a, ck_alloc_event_kind kind, int64_t bytes, const char *tag)
{
    ck_alloc_trace *t = a->event_log;
    if (!t)
        return;
    if (t->n >= t->capacity) {
        t->lost++;
        return;
    }
    ck_alloc_event *ev = &t->events[t->n];
    ev->index = t->n++;
    ev->kind = kind;
    ev->bytes = bytes;
    ev->live_bytes = a->live_bytes;
    snprintf(ev->tag, sizeof ev->tag, "%s", tag ? tag : "?");
}

void ck_act_alloc_init(ck_act_alloc *a, ck_backend *b)
{
    a->b = b;
    a->live_bytes = 0;
    a->peak_bytes = 0;
    a->window_peak = 0;
    a->n_allocs = 0;
    a->trace.n = 0;
    a->trace.stride = 1;
    a->trace.events = 0;
    a->event_log = NULL;
}

ck_status ck_act_alloc_tensor(ck_act_alloc *a, ck_tensor *t, ck_error *err)
{
    int64_t n;
    if (!ck_shape_numel_checked(&t->shape, ck_dtype_size(t->dtype), &n))
        return ck_fail(err, CK_ERR_INPUT, "tensor %s: shape too large", t->name ? t->name : "?");
    size_t bytes = (size_t)n * ck_dtype_size(t->dtype);
    static char dry_storage; /* what a tensor of a run without a backend points at */
    ck_status st = CK_OK;
    if (a->b)
        st = a->b->alloc(a->b, bytes, &t->data, err);
    else
        t->data = &dry_storage;
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
    if (a->live_bytes > a->window_peak)
        a->window_peak = a->live_bytes;
    ck_mem_trace_add(&a->trace, a->live_bytes);
    log_event(a, CK_ALLOC_EV_ALLOC, (int64_t)bytes, t->name);
    return CK_OK;
}

void ck_act_free_tensor(ck_act_alloc *a, ck_tensor *t)
{
    if (!t->data)
        return;
    if (a->b)
        a->b->free(a->b, t->data);
    int64_t bytes = (int64_t)ck_tensor_bytes(t);
    a->live_bytes -= bytes;
    t->data = NULL;
    ck_mem_trace_add(&a->trace, a->live_bytes);
    log_event(a, CK_ALLOC_EV_FREE, bytes, t->name);
}

void ck_act_alloc_mark(ck_act_alloc *a, const char *tag)
{
    log_event(a, CK_ALLOC_EV_MARK, 0, tag);
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
