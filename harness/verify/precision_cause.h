/*
 * Why a low-precision run left its bound of the fp32 run: the dominant cause the result
 * can measure, so a failure says what to change, not only which tensor showed it.
 * Checked in this order, the first that holds wins:
 *   overflow     a value overflowed to inf in the low dtype, or the loss scaler skipped
 *                a step (its gradients held inf or NaN);
 *   reduction    the case sums its reductions in the low dtype (policies.reduction_dtype
 *                "low"): fp32 accumulation is the remedy;
 *   underflow    at least CK_UNDERFLOW_SHARE of the gradient values were flushed to zero or
 *                subnormal in the low dtype: loss scaling (or a larger scale) is the remedy;
 *   none         none of these: the model's own sensitivity to rounding.
 * reports/ words the cause and its remedy (ck_report_failures).
 */
#ifndef CK_PRECISION_CAUSE_H
#define CK_PRECISION_CAUSE_H

#include "harness/verify/result.h"

#define CK_UNDERFLOW_SHARE 0.01

typedef enum {
    CK_LOWP_CAUSE_NONE = 0,
    CK_LOWP_CAUSE_OVERFLOW,
    CK_LOWP_CAUSE_LOW_REDUCTION,
    CK_LOWP_CAUSE_UNDERFLOW,
} ck_lowp_cause_kind;

typedef struct {
    ck_lowp_cause_kind kind;
    int64_t overflowed;          /* values that overflowed to inf (every judged tensor) */
    int skipped_steps, steps;    /* steps the plain run's loss scaler skipped, of steps */
    int64_t flushed, subnormal;  /* gradient values flushed to zero / subnormal (plain run) */
    int64_t elements;            /* gradient values of the plain run */
    double underflow_share;      /* (flushed + subnormal) / elements; 0 when none */
    bool loss_scaled;            /* the case scales its loss (train.loss_scale) */
} ck_lowp_cause;

/* The cause for r, a result judged against fp32 (has_vs_fp32). */
void ck_lowp_cause_find(const ck_result *r, ck_lowp_cause *out);

#endif
