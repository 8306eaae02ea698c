/*
 * The executor's accounting allocator: every activation-side buffer (layer outputs,
 * saved-for-backward scratch, activation gradients) goes through it, so the peak of live
 * activation bytes is a measured fact of a run, not an estimate. Bytes are counted as
 * requested (tensor sizes), independent of the backend's rounding, so the numbers are the
 * same on every backend and every run.
 */
#ifndef CK_ALLOC_H
#define CK_ALLOC_H

#include "backends/backend.h"

/* A bounded trace of live activation bytes over the run's allocator events (allocations
 * and frees, counted from 0): at most CK_MEM_TRACE_MAX points. Each point stands for a
 * bucket of `stride` consecutive events and holds the bucket's largest live-bytes value
 * and the event where it was reached, so the peak always survives; when the trace is full,
 * neighbouring buckets merge and the stride doubles. */
#define CK_MEM_TRACE_MAX 256
typedef struct {
    int64_t event;
    int64_t bytes;
} ck_mem_point;

typedef struct {
    int n;
    int64_t stride; /* events per point (a power of two) */
    int64_t events; /* events seen */
    ck_mem_point pt[CK_MEM_TRACE_MAX];
} ck_mem_trace;

typedef struct {
    ck_backend *b;
    int64_t live_bytes;
    int64_t peak_bytes;
    int64_t n_allocs;
    ck_mem_trace trace;
} ck_act_alloc;

void ck_act_alloc_init(ck_act_alloc *a, ck_backend *b);
/* Allocates t->data for t's dtype and shape; `what` names the tensor in the OOM message. */
ck_status ck_act_alloc_tensor(ck_act_alloc *a, ck_tensor *t, ck_error *err);
void ck_act_free_tensor(ck_act_alloc *a, ck_tensor *t);

/* Records one event with the live bytes after it (the allocator calls it itself). */
void ck_mem_trace_add(ck_mem_trace *t, int64_t live_bytes);

#endif
