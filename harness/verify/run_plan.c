/* The run plan of one case x dtype and its execution (run_plan.h). */
#include "harness/verify/run_plan.h"

#include <string.h>

#include "harness/verify/judge.h"

ck_keeps_steps ck_run_request_keeps_steps(const ck_run_request *rq)
{
    return rq->force_bisect ? CK_KEEPS_BISECT
           : rq->bisect ? CK_KEEPS_BISECT_ON_MISMATCH
           : rq->noise_floor ? CK_KEEPS_NOISE_FLOOR
           : rq->verify_recompute ? CK_KEEPS_VERIFY_RECOMPUTE
                                  : CK_KEEPS_NONE;
}

void ck_run_plan_make(const ck_case *c, ck_dtype dtype, const ck_run_request *rq,
                      bool against, ck_run_plan *p)
{
    memset(p, 0, sizeof *p);
    p->dtype = dtype;
    p->keeps = ck_run_request_keeps_steps(rq);
    p->too_long = p->keeps != CK_KEEPS_NONE && c->steps > CK_FULL_RECORD_STEPS;
    p->stage[CK_STAGE_PLAIN_VS_CHECKPOINTED] = true;
    p->fixed.count[CK_TRAINING_PLAIN] = 1;
    p->fixed.count[CK_TRAINING_CHECKPOINTED] = 1;
    bool low = dtype == CK_F16 || dtype == CK_BF16;
    if (low && rq->run.precision_check != CK_PRECISION_CHECK_OFF) {
        p->stage[CK_STAGE_VS_FP32] = true;
        p->calibration_runs = rq->run.precision_override.set ? 0 : CK_PRECISION_CALIB_RUNS;
        p->fixed.count[CK_TRAINING_FP32_REFERENCE] = 1;
        p->fixed.count[CK_TRAINING_CALIBRATION] = p->calibration_runs;
    }
    if (rq->verify_recompute) {
        p->stage[CK_STAGE_VERIFY_RECOMPUTE] = true;
        p->fixed.count[CK_TRAINING_RECOMPUTE_CHECK] = 1;
    }
    if (against) {
        p->stage[CK_STAGE_VS_BACKEND] = true;
        p->fixed.count[CK_TRAINING_PLAIN]++;
        p->fixed.count[CK_TRAINING_OTHER_BACKEND] = 1;
    }
    p->localise = rq->force_bisect ? CK_LOCALISE_ALWAYS
                  : rq->bisect ? CK_LOCALISE_IF_MISMATCH
                               : CK_LOCALISE_NEVER;
    /* bisect always measures the noise floor first; asked for on its own, it runs without
     * localisation (unless --bisect finds a mismatch) */
    p->bisect = rq->noise_floor || p->localise == CK_LOCALISE_ALWAYS ? CK_LOCALISE_ALWAYS
                : p->localise;
    p->stage[CK_STAGE_BISECT] = p->bisect != CK_LOCALISE_NEVER;
    if (p->bisect == CK_LOCALISE_ALWAYS) {
        p->fixed.count[CK_TRAINING_BISECT] = 1;      /* the plain reference */
        p->fixed.count[CK_TRAINING_NOISE_FLOOR] = 1; /* two more when the floor is not zero */
    }
}

/* Whether the ordinary comparison is a mismatch for run --bisect. */
static bool mismatching(const ck_result *res)
{
    return res->verdict == CK_VERDICT_MISMATCH ||
           (ck_case_expect(res->cs, res->dtype) == CK_EXPECT_IDENTICAL &&
            res->verdict != CK_VERDICT_IDENTICAL);
}

static void tell(ck_stage_fn on_stage, void *user, ck_stage s, bool done)
{
    if (on_stage)
        on_stage(user, s, done);
}

ck_status ck_run_plan_execute(const ck_run_plan *p, const ck_run_request *rq, ck_backend *b,
                              ck_backend *against, const ck_graph *g, ck_stage_fn on_stage,
                              void *user, ck_run_outcome *out, ck_error *err)
{
    memset(out, 0, sizeof *out);
    if (p->too_long)
        return ck_fail(err, CK_ERR_INPUT, "%s: the run plan keeps every step's tensors: at most "
                                          "%d steps (the case trains %d)",
                       g->cs->path, CK_FULL_RECORD_STEPS, g->cs->steps);
    /* the judgement against fp32 needs the plain run's records: run_case trains it with
     * the pair, by the same rule as the plan's VS_FP32 stage */
    ck_case_run_opts ro = rq->run;
    ro.log = &out->log;
    tell(on_stage, user, CK_STAGE_PLAIN_VS_CHECKPOINTED, false);
    ck_status st = ck_run_case_ex(b, g, p->dtype, &ro, &out->res, err);
    if (st != CK_OK)
        return st;
    tell(on_stage, user, CK_STAGE_PLAIN_VS_CHECKPOINTED, true);
    if (p->stage[CK_STAGE_VERIFY_RECOMPUTE]) {
        tell(on_stage, user, CK_STAGE_VERIFY_RECOMPUTE, false);
        if ((st = ck_verify_recompute_ex(b, g, p->dtype, &out->log, &out->res, err)) != CK_OK)
            return st;
        tell(on_stage, user, CK_STAGE_VERIFY_RECOMPUTE, true);
    }
    if (p->stage[CK_STAGE_VS_BACKEND] && against) {
        tell(on_stage, user, CK_STAGE_VS_BACKEND, false);
        if ((st = ck_compare_backends_ex(b, against, g, p->dtype, &out->log, &out->res, err)) !=
            CK_OK)
            return st;
        tell(on_stage, user, CK_STAGE_VS_BACKEND, true);
    }
    bool mismatch = mismatching(&out->res);
    bool localise = p->localise == CK_LOCALISE_ALWAYS ||
                    (p->localise == CK_LOCALISE_IF_MISMATCH && mismatch);
    bool bisect = p->bisect == CK_LOCALISE_ALWAYS ||
                  (p->bisect == CK_LOCALISE_IF_MISMATCH && mismatch);
    if (bisect) {
        tell(on_stage, user, CK_STAGE_BISECT, false);
        ck_bisect_opts bo = {.noise_floor = true, .localise = localise, .log = &out->log};
        if ((st = ck_bisect(b, g, p->dtype, &bo, &out->res, err)) != CK_OK)
            return st;
        out->bisected = true;
        tell(on_stage, user, CK_STAGE_BISECT, true);
    }
    return CK_OK;
}
