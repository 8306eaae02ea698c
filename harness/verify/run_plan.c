/* The run plan of one case x dtype and its execution (run_plan.h). */
#include "harness/verify/run_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/engine/memory_plan.h"
#include "harness/verify/judge.h"
#include "harness/verify/segmentwise.h"

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

/* Peak activation bytes of one training: plan NULL plain; keep >= 0: the full plan
 * without segment `keep` (the run that keeps it); unfused: a training that fuses no relu's
 * backward (memory_plan.h: one whose observer reads every output gradient, a calibration
 * run), whose peak can only be higher. */
static ck_status predict_peak(const ck_graph *g, const ck_plan *full, int keep, ck_dtype dtype,
                              bool unfused, int64_t *peak, ck_error *err)
{
    ck_plan sub;
    const ck_plan *plan = full;
    if (keep >= 0) {
        ck_status st = ck_segmentwise_plan(g, full, keep, &sub, err);
        if (st != CK_OK)
            return st;
        plan = &sub;
    }
    ck_memory_prediction pr;
    ck_status st = ck_predict_memory_keeping_grads(g, plan, dtype, unfused, &pr, err);
    if (st == CK_OK) {
        *peak = pr.peak_bytes;
        ck_memory_prediction_free(&pr);
    }
    if (keep >= 0)
        ck_plan_free(&sub);
    return st;
}

/* The predictions ck_run_plan_fit decides from: of each configuration, the largest peak
 * of its trainings. Bisect's trainings and a run dumping activation gradients read every
 * layer's output gradient, the calibration runs among the fp32 references round every one:
 * those fuse no relu's backward, so their configurations are predicted unfused. */
static bool runs_unfused(const ck_run_plan *p, const ck_run_request *rq)
{
    return p->stage[CK_STAGE_BISECT] || (rq->run.dump_dir && rq->run.dump_activation_grads);
}

static ck_status predict_all(ck_run_plan *p, const ck_graph *g, const ck_plan *full,
                             const ck_run_request *rq, ck_error *err)
{
    ck_status st;
    bool with_fp32 = p->stage[CK_STAGE_VS_FP32] && p->dtype != CK_F32;
    bool unfused = runs_unfused(p, rq);
    bool fp32_unfused = unfused || p->calibration_runs > 0;
    if ((st = predict_peak(g, NULL, -1, p->dtype, unfused, &p->plain_peak, err)) != CK_OK ||
        (st = predict_peak(g, full, -1, p->dtype, unfused, &p->ckpt_peak, err)) != CK_OK)
        return st;
    if (with_fp32 &&
        ((st = predict_peak(g, NULL, -1, CK_F32, fp32_unfused, &p->fp32_plain_peak, err)) != CK_OK ||
         (st = predict_peak(g, full, -1, CK_F32, fp32_unfused, &p->fp32_ckpt_peak, err)) != CK_OK))
        return st;
    p->largest_segment_run = -1;
    for (int s = 0; s < full->n_segments; s++) {
        int64_t peak;
        if ((st = predict_peak(g, full, s, p->dtype, unfused, &peak, err)) != CK_OK)
            return st;
        if (p->largest_segment_run < 0 || peak > p->largest_segment_run_peak) {
            p->largest_segment_run_peak = peak;
            p->largest_segment_run = s;
        }
    }
    p->fitted = true;
    return CK_OK;
}

/* Segment by segment instead of the plain run: the fixed trainings change accordingly. */
static void go_segmentwise(ck_run_plan *p, int n_segments, ck_segmentwise_reason why)
{
    p->segmentwise = true;
    p->segmentwise_reason = why;
    p->fixed.count[CK_TRAINING_PLAIN] = 0;
    p->fixed.count[CK_TRAINING_SEGMENT_KEPT] = n_segments;
    p->fixed.count[CK_TRAINING_RECOMPUTE_CHECK] = 0; /* the checks ride along the runs */
}

/* A stage that needs the plain run, which segment by segment does not hold; NULL: none. */
static const char *needs_plain(const ck_run_plan *p, const ck_run_request *rq)
{
    if (p->stage[CK_STAGE_VS_BACKEND])
        return "--against (it runs the plain configuration on both backends)";
    if (p->stage[CK_STAGE_BISECT])
        return rq->force_bisect ? "bisect (it runs the plain configuration)"
               : rq->bisect     ? "--bisect (it runs the plain configuration)"
                                : "a noise floor (the plain run twice)";
    if (rq->run.dump_dir)
        return "--dump (it writes the plain run's tensors)";
    return NULL;
}

ck_status ck_run_plan_fit(ck_run_plan *p, const ck_graph *g, const ck_run_request *rq,
                          const char *limit_what, ck_error *err)
{
    const ck_case *c = g->cs;
    int64_t limit = rq->memory_limit;
    if (limit <= 0 && rq->plain != CK_PLAIN_SEGMENTWISE)
        return CK_OK;
    ck_plan full;
    ck_status st = ck_plan_build(g, &full, err);
    if (st != CK_OK)
        return st;
    if ((st = predict_all(p, g, &full, rq, err)) != CK_OK)
        goto out;
    const char *dt = ck_dtype_name(p->dtype);
    bool with_fp32 = p->stage[CK_STAGE_VS_FP32] && p->dtype != CK_F32;
    bool plain_fits = limit <= 0 || (p->plain_peak <= limit &&
                                     (!with_fp32 || p->fp32_plain_peak <= limit));
    if (rq->plain == CK_PLAIN_SEGMENTWISE)
        go_segmentwise(p, full.n_segments, CK_SEGMENTWISE_REQUESTED);
    else if (!plain_fits && p->ckpt_peak <= limit)
        go_segmentwise(p, full.n_segments, CK_SEGMENTWISE_PLAIN_OVER_LIMIT);
    if (!p->segmentwise) {
        /* as the trainings run: plain and checkpointed, then their fp32 references */
        const int64_t peaks[4] = {p->plain_peak, p->ckpt_peak, p->fp32_plain_peak,
                                  p->fp32_ckpt_peak};
        for (int k = 0; k < (with_fp32 ? 4 : 2) && limit > 0; k++) {
            if (peaks[k] <= limit)
                continue;
            p->refused = true;
            snprintf(p->refusal, sizeof p->refusal,
                     "%s (%s): the %s run is predicted to need %lld bytes of activations, %s "
                     "%lld bytes: not run", c->path, k < 2 ? dt : "fp32",
                     k % 2 ? "checkpointed" : "plain", (long long)peaks[k], limit_what,
                     (long long)limit);
            break;
        }
        goto out;
    }
    if (full.n_segments == 0) {
        p->refused = true;
        snprintf(p->refusal, sizeof p->refusal,
                 "%s (%s): the case checkpoints no segment: nothing to verify segment by "
                 "segment", c->path, dt);
        goto out;
    }
    const char *why = needs_plain(p, rq);
    if (why) {
        p->refused = true;
        if (p->segmentwise_reason == CK_SEGMENTWISE_PLAIN_OVER_LIMIT)
            snprintf(p->refusal, sizeof p->refusal,
                     "%s (%s): %s cannot run segment by segment (chosen because the plain run "
                     "is predicted to need %lld bytes of activations%s, %s %lld bytes)",
                     c->path, dt, why, (long long)p->plain_peak,
                     runs_unfused(p, rq) ? " with every output gradient kept" : "", limit_what,
                     (long long)limit);
        else
            snprintf(p->refusal, sizeof p->refusal, "%s (%s): %s cannot run segment by segment",
                     c->path, dt, why);
        goto out;
    }
    if (limit <= 0)
        goto out;
    /* every training of the segment-by-segment plan must fit on its own */
    int64_t need = p->ckpt_peak;
    char run[48] = "checkpointed run";
    if (p->largest_segment_run >= 0 && p->largest_segment_run_peak > need) {
        need = p->largest_segment_run_peak;
        snprintf(run, sizeof run, "run keeping segment %d", p->largest_segment_run);
    }
    if (with_fp32 && p->fp32_ckpt_peak > limit && p->fp32_ckpt_peak >= need) {
        need = p->fp32_ckpt_peak;
        snprintf(run, sizeof run, "checkpointed fp32 reference run");
    }
    if (need > limit) {
        p->refused = true;
        if (p->segmentwise_reason == CK_SEGMENTWISE_PLAIN_OVER_LIMIT)
            snprintf(p->refusal, sizeof p->refusal,
                     "%s (%s): the plain %s is predicted to need %lld bytes of activations, "
                     "%s %lld bytes; segment by segment, the %s would need %lld: not run",
                     c->path, dt, p->plain_peak > limit ? "run" : "fp32 reference run",
                     (long long)(p->plain_peak > limit ? p->plain_peak : p->fp32_plain_peak),
                     limit_what, (long long)limit, run, (long long)need);
        else
            snprintf(p->refusal, sizeof p->refusal,
                     "%s (%s): segment by segment, the %s is predicted to need %lld bytes of "
                     "activations, %s %lld bytes: not run", c->path, dt, run, (long long)need,
                     limit_what, (long long)limit);
    }
out:
    ck_plan_free(&full);
    return st;
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
    if (p->refused)
        return ck_fail(err, CK_ERR_INPUT, "%s", p->refusal);
    ck_case_run_opts ro = rq->run;
    ro.log = &out->log;
    tell(on_stage, user, CK_STAGE_PLAIN_VS_CHECKPOINTED, false);
    ck_status st;
    if (p->segmentwise) {
        ck_segmentwise_opts so = {.run = &ro, .reason = p->segmentwise_reason,
                                  .memory_limit = rq->memory_limit,
                                  .verify_recompute = p->stage[CK_STAGE_VERIFY_RECOMPUTE]};
        st = ck_run_case_segmentwise(b, g, p->dtype, &so, &out->res, err);
    } else {
        st = ck_run_case_ex(b, g, p->dtype, &ro, &out->res, err);
    }
    if (st != CK_OK)
        return st;
    tell(on_stage, user, CK_STAGE_PLAIN_VS_CHECKPOINTED, true);
    if (p->stage[CK_STAGE_VERIFY_RECOMPUTE] && !p->segmentwise) {
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
        ck_bisect_opts bo = {.noise_floor = true, .localise = localise, .log = &out->log,
                             .progress = ro.progress, .progress_user = ro.progress_user};
        if ((st = ck_bisect(b, g, p->dtype, &bo, &out->res, err)) != CK_OK)
            return st;
        out->bisected = true;
        tell(on_stage, user, CK_STAGE_BISECT, true);
    }
    return CK_OK;
}
