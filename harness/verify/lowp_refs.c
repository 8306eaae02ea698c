/* The low-precision judgement's fp32 runs, in lockstep with the run they judge (lowp_refs.h). */
#include "harness/verify/lowp_refs.h"

#include <string.h>


ck_status ck_lowp_refs_begin(ck_lowp_refs *r, ck_backend *b, const ck_graph *g,
                             const ck_plan *plan, ck_dtype dtype, const ck_record *low,
                             ck_error *err)
{
    const ck_case *c = g->cs;
    ck_training_log *log = r->log;
    const ck_precision_override *ov = r->ov;
    r->n_calib = ov ? 0 : CK_PRECISION_CALIB_RUNS;
    ck_lowp_judge_init(&r->j, c, dtype, r->n_calib, ov);
    /* the reference runs keep the current step's loss and scale only (train.h) */
    ck_run_hooks href = {.skip_like = low->scales, .latest_step_only = true,
                         .observer = r->observer, .observer_user = r->observer_user[0]};
    ck_training t_ref = {.kind = CK_TRAINING_FP32_REFERENCE, .b = b, .g = g, .plan = plan,
                         .dtype = CK_F32, .hooks = &href, .log = log};
    ck_status st = ck_training_begin(&t_ref, &r->tf, &r->fp32, err);
    r->have_tf = st == CK_OK;
    for (; st == CK_OK && r->have_cal < r->n_calib; r->have_cal++) {
        int j = r->have_cal;
        ck_run_hooks hcal = {.round_to = dtype, .perturb_rel = j == 0 ? 0.0 : ck_unit_roundoff(dtype),
                             .perturb_seed = c->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(j + 1)),
                             .skip_like = low->scales, .latest_step_only = true,
                             .observer = r->observer, .observer_user = r->observer_user[1 + j]};
        ck_training t_cal = {.kind = CK_TRAINING_CALIBRATION, .b = b, .g = g, .plan = plan,
                             .dtype = CK_F32, .hooks = &hcal, .log = log};
        if ((st = ck_training_begin(&t_cal, &r->tcal[j], &r->calib[j], err)) != CK_OK)
            break;
    }
    return st;
}

ck_status ck_lowp_refs_step(ck_lowp_refs *r, const ck_graph *g, const ck_record *low_step,
                            int step, ck_error *err)
{
    ck_status st = ck_trainer_step(&r->tf, step, err);
    for (int j = 0; j < r->n_calib && st == CK_OK; j++)
        st = ck_trainer_step(&r->tcal[j], step, err);
    if (st == CK_OK)
        st = ck_lowp_judge_add(&r->j, g, &r->fp32, r->calib, low_step, step, err);
    ck_record_drop_entries(&r->fp32);
    for (int j = 0; j < r->n_calib; j++)
        ck_record_drop_entries(&r->calib[j]);
    return st;
}

void ck_lowp_refs_free(ck_lowp_refs *r)
{
    if (r->have_tf)
        ck_trainer_free(&r->tf);
    for (int j = 0; j < r->have_cal; j++)
        ck_trainer_free(&r->tcal[j]);
    ck_record_free(&r->fp32);
    for (int j = 0; j < CK_PRECISION_CALIB_RUNS; j++)
        ck_record_free(&r->calib[j]);
    ck_lowp_judge_free(&r->j);
}
