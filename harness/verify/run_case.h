/*
 * One case end to end on one backend and dtype: trains it plain and checkpointed from
 * identical weights and data, runs the fp32 reference of a low-precision case, and judges
 * the records into a ck_result (judge.h).
 */
#ifndef CK_RUN_CASE_H
#define CK_RUN_CASE_H

#include "harness/verify/result.h"

typedef struct {
    const char *dump_dir;  /* write the plain and checkpointed runs' tensors here; NULL: no */
    bool dump_activations;
    ck_precision_check precision_check; /* fail (default), warn, off (no fp32 runs) */
    ck_precision_override precision_override; /* run --rtol/--atol/--rel-l2 */
} ck_case_run_opts;

/* Plain and checkpointed runs of the case, compared into res (free with ck_result_free).
 * A low-precision case also runs fp32 twice: the reference, and the calibration run from
 * inputs and weights rounded to the low dtype (precision_judge.h). */
ck_status ck_run_case(ck_backend *b, const ck_graph *g, ck_dtype dtype, ck_result *res,
                      ck_error *err);
/* The same, with dumps (opts may be NULL). */
ck_status ck_run_case_ex(ck_backend *b, const ck_graph *g, ck_dtype dtype,
                         const ck_case_run_opts *opts, ck_result *res, ck_error *err);

#endif
