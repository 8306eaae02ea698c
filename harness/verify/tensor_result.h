/*
 * One tensor compared between two runs: its name, kind, step, the metrics and the verdict,
 * and for judgements against fp32 the tolerance used and the cast statistics.
 */
#ifndef CK_TENSOR_RESULT_H
#define CK_TENSOR_RESULT_H

#include "harness/core/metrics.h"
#include "harness/engine/records.h"

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
} ck_tensor_result;

#endif
