/*
 * The executor's accounting allocator: every activation-side buffer (layer outputs,
 * saved-for-backward scratch, activation gradients) goes through it, so the peak of live
 * activation bytes is a measured fact of a run, not an estimate. Bytes are counted as
 * requested (tensor sizes), independent of the backend's rounding, so the numbers are the
 * same on every backend and every run.
 *
 * Two records of live bytes over time, both bounded:
 *  - ck_mem_trace, always on: a downsampled timeline (at most CK_MEM_TRACE_MAX points,
 *    the peak always kept) for the report's memory chart;
 *  - ck_alloc_trace, optional: the exact event log — every allocation, free and mark (a
 *    named point of the run such as "forward end") with the tensor's name and the live
 *    bytes after it — into a buffer the caller owns, for tests and debugging.
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

/* The exact event log (ck_alloc_trace). */
#define CK_ALLOC_TAG_MAX 64

typedef enum { CK_ALLOC_EV_ALLOC = 0, CK_ALLOC_EV_FREE, CK_ALLOC_EV_MARK } ck_alloc_event_kind;

typedef struct {
    int64_t index;            /* 0-based position of the event since the trace was started */
    ck_alloc_event_kind kind;
    int64_t bytes;            /* allocated or freed; 0 for a mark */
    int64_t live_bytes;       /* live activation bytes after the event */
    char tag[CK_ALLOC_TAG_MAX]; /* the tensor ("l0:out", "bn1:saved", "r1:grad") or the
                                   mark ("forward end"), truncated to fit */
} ck_alloc_event;

/* A trace into events[0 .. capacity-1]. When full, later events are not stored, only
 * counted in `lost`: the first `capacity` events of the run are kept. */
typedef struct {
    ck_alloc_event *events;
    int capacity;
    int n;          /* events stored */
    int64_t lost;   /* events not stored because the buffer was full */
} ck_alloc_trace;

void ck_alloc_trace_init(ck_alloc_trace *t, ck_alloc_event *events, int capacity);

typedef struct {
    ck_backend *b;
    int64_t live_bytes;
    int64_t peak_bytes;
    int64_t window_peak; /* highest live bytes since the owner last set it (to live_bytes) */
    int64_t n_allocs;
    ck_mem_trace trace;        /* always on */
    ck_alloc_trace *event_log; /* NULL: no event log */
} ck_act_alloc;

/* b NULL: a dry run (the memory prediction) that counts bytes without allocating; every
 * tensor's data then points at one shared byte that must never be read or written. */
void ck_act_alloc_init(ck_act_alloc *a, ck_backend *b);
/* Allocates t->data for t's dtype and shape; `what` names the tensor in the OOM message. */
ck_status ck_act_alloc_tensor(ck_act_alloc *a, ck_tensor *t, ck_error *err);
void ck_act_free_tensor(ck_act_alloc *a, ck_tensor *t);
/* Records a named point of the run in the event log (no-op without one; not an event of
 * the ck_mem_trace timeline). */
void ck_act_alloc_mark(ck_act_alloc *a, const char *tag);

/* Records one event with the live bytes after it (the allocator calls it itself). */
void ck_mem_trace_add(ck_mem_trace *t, int64_t live_bytes);

#endif
