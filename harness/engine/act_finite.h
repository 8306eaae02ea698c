/*
 * Finiteness of activations: every layer output the executor produces (forward and
 * recomputation) and every activation gradient backward reads is scanned once for NaN and
 * Inf, so a non-finite value that a later op drops (a max-pool picking a finite neighbour,
 * a multiply by a zero mask, a slice) is still seen. Counts are kept per layer and per run;
 * a step's counts are settled when the trainer knows whether its loss scaler skipped the
 * step: activation gradients of a skipped step are the overflow the scaler exists to
 * absorb (excused), forward outputs never are.
 */
#ifndef CK_ACT_FINITE_H
#define CK_ACT_FINITE_H

#include "harness/core/status.h"
#include "harness/core/tensor.h"

#include <stdbool.h>
#include <stdint.h>

/* Where a run's first non-finite activation appeared. */
typedef struct {
    int layer;      /* -1: none */
    int step;
    bool backward;  /* the layer's output gradient (else its output) */
    bool recompute; /* the output of a recomputation */
    int64_t index;  /* the first non-finite element */
    bool nan;       /* that element is NaN (else Inf) */
} ck_act_first;

/* A run's activation totals (records.h carries them into the result). */
typedef struct {
    int64_t nan, inf; /* non-finite elements over every step, excused ones not included */
    int64_t excused;  /* activation-gradient NaN/Inf on steps the loss scaler skipped */
    int layers;       /* layers whose output or output gradient held one */
    ck_act_first first;
} ck_act_nonfinite;

typedef struct {
    int n_layers;
    int64_t *layer_total;       /* per layer, over the run (excused not included) */
    int64_t *step_fwd, *step_bwd; /* per layer, this step, not yet settled */
    int64_t step_nan[2], step_inf[2]; /* this step: [0] outputs, [1] gradients */
    ck_act_first step_first[2];
    void *scratch;              /* host copy of one tensor */
    size_t scratch_bytes;
    ck_act_nonfinite total;
} ck_act_finite;

ck_status ck_act_finite_init(ck_act_finite *f, int n_layers, ck_error *err);
void ck_act_finite_free(ck_act_finite *f);

/* Counts NaN/Inf among host values of dtype dt (fp32/fp16/bf16/fp64; others count as
 * finite); *first gets the first one's index (-1 when none) and *first_nan its kind. */
void ck_count_nonfinite(ck_dtype dt, int64_t n, const void *data, int64_t *nan, int64_t *inf,
                        int64_t *first, bool *first_nan);

/* Adds host values of layer `layer`'s output (backward false) or output gradient to the
 * step's counts. */
void ck_act_finite_add(ck_act_finite *f, int layer, int step, bool backward, bool recompute,
                       ck_dtype dt, int64_t n, const void *host);

/* The same with the counts already made (a backend's CK_PROC_COUNT_NONFINITE): nan and
 * inf elements, the first one's index (-1: none) and kind. */
void ck_act_finite_record(ck_act_finite *f, int layer, int step, bool backward, bool recompute,
                          int64_t nan, int64_t inf, int64_t first, bool first_nan);

/* Settles the step: gradients' counts are excused when `skipped` (the loss scaler skipped
 * the step), else they join the totals with the outputs'. */
void ck_act_finite_end_step(ck_act_finite *f, bool skipped);

#endif
