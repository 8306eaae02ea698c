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

typedef struct {
    ck_backend *b;
    int64_t live_bytes;
    int64_t peak_bytes;
    int64_t n_allocs;
} ck_act_alloc;

void ck_act_alloc_init(ck_act_alloc *a, ck_backend *b);
/* Allocates t->data for t's dtype and shape; `what` names the tensor in the OOM message. */
ck_status ck_act_alloc_tensor(ck_act_alloc *a, ck_tensor *t, ck_error *err);
void ck_act_free_tensor(ck_act_alloc *a, ck_tensor *t);

#endif
