/*
 * The fp32 reference and calibration runs that judge a low-precision run (precision_judge.h),
 * trained in lockstep with it: each step is judged (ck_lowp_judge) and every run's tensors
 * dropped, so memory does not grow with the steps. The fp32 runs take the low run's updates:
 * a step its loss scaler skipped is skipped there too, or every later step would compare
 * different models (skip_like reads the low run's decision for the step, made first).
 *
 * The references train the configuration of the low-precision run they judge: plain in the
 * ordinary comparison, checkpointed when plain-equivalence is established segment by
 * segment (segmentwise.h) and no plain run is held.
 */
#ifndef CK_LOWP_REFS_H
#define CK_LOWP_REFS_H

#include "harness/verify/judge.h"
#include "harness/verify/training.h"

typedef struct {
    ck_training_log *log;               /* counts the trainings; NULL: not counted */
    const ck_precision_override *ov;    /* run --rtol/--atol/--rel-l2; NULL: none */
    int n_calib;
    ck_trainer tf, tcal[CK_PRECISION_CALIB_RUNS];
    bool have_tf;
    int have_cal;
    ck_record fp32, calib[CK_PRECISION_CALIB_RUNS];
    ck_lowp_judge j;
    /* progress, when observer is set: the fp32 reference reports to it with
     * observer_user[0], calibration run j with observer_user[1 + j] */
    ck_exec_observer observer;
    void *observer_user[1 + CK_PRECISION_CALIB_RUNS];
} ck_lowp_refs;

/* Begins the references of the low-precision run `low` (which has begun: its per-step
 * scales say which steps to skip), training plan (NULL: plain). r->log, r->ov and the
 * observer fields are set by the caller; free with ck_lowp_refs_free also after a failure. */
ck_status ck_lowp_refs_begin(ck_lowp_refs *r, ck_backend *b, const ck_graph *g,
                             const ck_plan *plan, ck_dtype dtype, const ck_record *low,
                             ck_error *err);
/* Step `step` of the references, judged against the low run's entries of that step. */
ck_status ck_lowp_refs_step(ck_lowp_refs *r, const ck_graph *g, const ck_record *low_step,
                            int step, ck_error *err);
void ck_lowp_refs_free(ck_lowp_refs *r);

#endif
