/*
 * The memory prediction: a run's peak activation bytes before it runs, without allocating a
 * tensor. The executor runs one step's whole schedule of allocations and frees through the
 * accounting allocator with no backend (executor.h, dry_run): no kernel runs, the bytes
 * are counted as a real run counts them. The schedule depends only on the graph, the plan
 * and the dtype (never on values), and every step repeats it, so the prediction equals the
 * measured peak of every run of the same graph, plan and dtype (tests pin this on every
 * shipped case).
 */
#ifndef CK_MEMORY_PLAN_H
#define CK_MEMORY_PLAN_H

#include "harness/engine/executor.h"

typedef struct {
    int64_t peak_bytes;        /* the run's peak of live activation bytes */
    int64_t forward_end_bytes; /* live after the forward: what the run holds for backward */
    int n_segments;            /* 0 for a plain run */
    int64_t *segment_peak;     /* per segment: the peak from its recomputation to the end
                                  of its backward */
} ck_memory_prediction;

/* plan NULL: the plain run. */
ck_status ck_predict_memory(const ck_graph *g, const ck_plan *plan, ck_dtype dtype,
                            ck_memory_prediction *out, ck_error *err);
/* The same for a run whose observer reads every layer's output gradient (executor.h:
 * keep_activation_grads, a run dumping activation gradients): no relu's backward fused. */
ck_status ck_predict_memory_keeping_grads(const ck_graph *g, const ck_plan *plan,
                                          ck_dtype dtype, bool keep_activation_grads,
                                          ck_memory_prediction *out, ck_error *err);
void ck_memory_prediction_free(ck_memory_prediction *p);

#endif
