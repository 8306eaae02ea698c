/*
 * One tensor compared between two runs: its name, kind, step, the metrics and the verdict,
 * and for judgements against fp32 the tolerance used and the cast statistics.
 */
#ifndef CK_TENSOR_RESULT_H
#define CK_TENSOR_RESULT_H

#include "harness/core/metrics.h"
#include "harness/engine/records.h"

/* Where a low-precision-vs-fp32 tensor's bound came from (precision_judge.h). */
typedef enum {
    CK_BOUND_NONE = 0,       /* not a judgement against fp32 */
    CK_BOUND_CALIBRATED,     /* K x the calibration run's spread (or the dtype floor) */
    CK_BOUND_NORM_RELATIVE,  /* a noise tensor, against the step's gradient norm */
    CK_BOUND_CASE,           /* the case's tolerance.fp16/bf16 or tolerance.tensors */
    CK_BOUND_OVERRIDE,       /* run --rtol/--atol/--rel-l2 */
    CK_BOUND_SKIPPED         /* a gradient of a step the low run's loss scaler skipped (it
                                overflowed, which is what scaling handles): not judged */
} ck_bound_source;

/* "calibrated", "norm-relative", "case tolerance", "override", "skipped step" ("" for none). */
const char *ck_bound_source_name(ck_bound_source s);

typedef struct ck_tensor_result {
    char *name;         /* "enc1.weight", "enc1_bn.running_mean", "loss" */
    ck_tensor_kind kind;
    int step;           /* 0-based */
    ck_dtype dtype;
    ck_shape shape;
    ck_metrics m;
    ck_verdict verdict;
    /* low precision vs fp32 only (-1 where not applicable): the tolerance used, and how
     * many values overflowed to inf, flushed to zero or were subnormal in the low dtype */
    double rtol, atol;
    double rel_l2_limit; /* < 0: elementwise verdict; else close iff rel_l2 <= it */
    int64_t cast_overflow, cast_flushed, cast_subnormal;
    /* the precision judgement (CK_BOUND_NONE elsewhere): error and bound in the same units
     * (relative L2, or against the step's gradient norm for norm-relative rows; both < 0
     * for an elementwise tolerance), and the calibration run's spread in those units */
    ck_bound_source bound_source;
    double error, bound, spread;
} ck_tensor_result;

#endif
