/*
 * Plain-equivalence segment by segment (segmentwise.h): the checkpointed run and one run per
 * segment keeping that segment's activations, in lockstep, each step judged and dropped.
 */
#include "harness/verify/segmentwise.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/engine/memory_plan.h"
#include "harness/verify/bisect.h"
#include "harness/verify/judge.h"
#include "harness/verify/lowp_refs.h"
#include "harness/verify/training.h"

ck_status ck_segmentwise_plan(const ck_graph *g, const ck_plan *full, int keep, ck_plan *out,
                              ck_error *err)
{
    memset(out, 0, sizeof *out);
    int n = full->n_segments;
    bool *enabled = malloc((size_t)(n > 0 ? n : 1) * sizeof *enabled);
    if (!enabled)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory planning segments");
    for (int s = 0; s < n; s++)
        enabled[s] = s != keep;
    ck_status st = ck_plan_build_subset(g, enabled, out, err);
    free(enabled);
    return st;
}

/* ---- one training of the lockstep: its plan, hooks, record and judge ------------------ */

/* What a training's executor observer does: the recompute check it carries and progress. */
typedef struct {
    const ck_case_run_opts *opts;
    ck_progress_info info;
    ck_recompute_watch *watch; /* NULL: none */
} observer_relay;

static ck_status relay(void *user, const ck_exec_event_info *ev, ck_error *err)
{
    observer_relay *r = user;
    if (r->watch) {
        ck_status st = ck_recompute_watch_observe(r->watch, ev, err);
        if (st != CK_OK)
            return st;
    }
    if (r->opts && r->opts->progress) {
        ck_progress_info *in = &r->info;
        ck_progress_advance(in, ev);
        r->opts->progress(r->opts->progress_user, in);
    }
    return CK_OK;
}

typedef struct {
    ck_plan plan;          /* the checkpointed run: the full plan; a segment run: without it */
    char label[32];        /* "checkpointed", "segment 2 kept" */
    observer_relay relay;
    ck_run_hooks hooks;
    ck_trainer tr;
    bool begun;
    ck_record rec;
    ck_step_judge j;       /* segment runs: against the checkpointed run */
    ck_vacuity vac;
} lane;

/* The lanes: 0 the checkpointed run, 1 + s the run keeping segment s. */
typedef struct {
    int n;                 /* 1 + segments */
    lane *l;
    ck_lowp_refs refs;
    bool judge_lowp;
} lockstep;

static ck_status lanes_make(lockstep *ls, ck_backend *b, const ck_graph *g,
                            const ck_segmentwise_opts *o, ck_error *err)
{
    ck_plan full;
    ck_status st = ck_plan_build(g, &full, err);
    if (st != CK_OK)
        return st;
    ls->n = 1 + full.n_segments;
    ls->l = calloc((size_t)ls->n, sizeof *ls->l);
    if (!ls->l) {
        ck_plan_free(&full);
        ls->n = 0;
        return ck_fail(err, CK_ERR_NOMEM, "out of memory planning segment runs");
    }
    for (int k = 0; k < ls->n && st == CK_OK; k++) {
        lane *ln = &ls->l[k];
        if (k == 0)
            snprintf(ln->label, sizeof ln->label, "checkpointed");
        else
            snprintf(ln->label, sizeof ln->label, "segment %d kept", k - 1);
        ln->relay = (observer_relay){.opts = o->run,
                                     .info = {.run = k, .n_runs = ls->n, .run_label = ln->label,
                                              .steps = g->cs->steps, .n_layers = g->n}};
        /* the checkpointed run checks segment 0, the run keeping s checks s + 1 */
        if (o->verify_recompute && k < full.n_segments)
            st = ck_recompute_watch_new(b, g, &full, k, &ln->relay.watch, err);
        if (st == CK_OK)
            st = k == 0 ? ck_plan_build(g, &ln->plan, err)
                        : ck_segmentwise_plan(g, &full, k - 1, &ln->plan, err);
    }
    ck_plan_free(&full);
    return st;
}

static void lanes_free(lockstep *ls)
{
    for (int k = 0; k < ls->n; k++) {
        lane *ln = &ls->l[k];
        if (ln->begun)
            ck_trainer_free(&ln->tr);
        ck_record_free(&ln->rec);
        ck_step_judge_free(&ln->j);
        ck_recompute_watch_free(ln->relay.watch);
        ck_plan_free(&ln->plan);
    }
    free(ls->l);
    ck_lowp_refs_free(&ls->refs);
    memset(ls, 0, sizeof *ls);
}

static ck_status lanes_begin(lockstep *ls, ck_backend *b, const ck_graph *g, ck_dtype dtype,
                             const ck_segmentwise_opts *o, ck_error *err)
{
    ck_training_log *log = o->run ? o->run->log : NULL;
    for (int k = 0; k < ls->n; k++) {
        lane *ln = &ls->l[k];
        ck_step_judge_init(&ln->j, g->cs, CK_F32, 0.0, CK_VERDICT_CLOSE);
        memset(&ln->vac, 0, sizeof ln->vac);
        ln->vac.flushed = -1;
        bool observed = ln->relay.watch || (o->run && o->run->progress);
        ln->hooks = (ck_run_hooks){.observer = observed ? relay : NULL,
                                   .observer_user = &ln->relay,
                                   .run_name = k ? ln->label : NULL};
        ck_training t = {.kind = k ? CK_TRAINING_SEGMENT_KEPT : CK_TRAINING_CHECKPOINTED,
                         .b = b, .g = g, .plan = &ln->plan, .dtype = dtype,
                         .hooks = &ln->hooks, .log = log};
        ck_status st = ck_training_begin(&t, &ln->tr, &ln->rec, err);
        if (st != CK_OK)
            return st;
        ln->begun = true;
    }
    /* after the checkpointed run began: its per-step scales tell the references which
     * steps to skip */
    ls->refs.log = log;
    ls->refs.ov = o->run && o->run->precision_override.set ? &o->run->precision_override : NULL;
    if (ls->judge_lowp)
        return ck_lowp_refs_begin(&ls->refs, b, g, &ls->l[0].plan, dtype, &ls->l[0].rec, err);
    return CK_OK;
}

/* Every step: the checkpointed run first (the references read its loss scaler's decision),
 * then each segment run, judged against it and dropped. */
static ck_status lanes_train(lockstep *ls, const ck_graph *g, ck_dtype dtype, ck_error *err)
{
    lane *c = &ls->l[0];
    for (int step = 0; step < g->cs->steps; step++) {
        ck_status st = ck_trainer_step(&c->tr, step, err);
        for (int k = 1; k < ls->n && st == CK_OK; k++) {
            lane *ln = &ls->l[k];
            if ((st = ck_trainer_step(&ln->tr, step, err)) != CK_OK ||
                (st = ck_step_judge_add(&ln->j, g, &ln->rec, &c->rec, step, err)) != CK_OK)
                break;
            ck_vacuity_count(&ln->rec, dtype, &ln->vac);
            ck_record_drop_entries(&ln->rec);
        }
        if (st == CK_OK) {
            ck_vacuity_count(&c->rec, dtype, &c->vac);
            if (ls->judge_lowp)
                st = ck_lowp_refs_step(&ls->refs, g, &c->rec, step, err);
        }
        ck_record_drop_entries(&c->rec);
        if (st != CK_OK)
            return st;
    }
    for (int k = 0; k < ls->n; k++) {
        ck_trainer_end(&ls->l[k].tr);
        ck_vacuity_finish(&ls->l[k].rec, &ls->l[k].vac);
    }
    return CK_OK;
}

/* ---- the result ------------------------------------------------------------------------ */

static int count_scale_mismatches(const ck_record *a, const ck_record *b, int steps, int *first)
{
    int n = 0;
    *first = -1;
    for (int s = 0; s < steps && a->scales && b->scales; s++)
        if (a->scales[s].scale != b->scales[s].scale ||
            a->scales[s].skipped != b->scales[s].skipped) {
            n++;
            if (*first < 0)
                *first = s;
        }
    return n;
}

/* One segment run's line in the result, from its lane (before its record moves). */
static ck_status describe_run(const lockstep *ls, int k, const ck_graph *g, ck_dtype dtype,
                              ck_segment_run *sr, ck_error *err)
{
    const lane *ln = &ls->l[k];
    int first;
    memset(sr, 0, sizeof *sr);
    sr->segment = k - 1;
    snprintf(sr->label, sizeof sr->label, "%s", ln->label);
    sr->peak_activation_bytes = ln->rec.peak_activation_bytes;
    sr->recomputed_layers = ln->rec.recomputed_layers;
    sr->wall_time_s = ln->rec.wall_time_s;
    sr->verdict = ln->j.worst;
    sr->tensors_judged = ln->j.judged;
    memcpy(sr->counts, ln->j.counts, sizeof sr->counts);
    sr->first_step = -1;
    if (ln->j.first >= 0 && ln->j.first < ln->j.n) {
        const ck_tensor_result *t = &ln->j.t[ln->j.first];
        sr->first_step = t->step;
        sr->first_kind = t->kind;
        snprintf(sr->first_name, sizeof sr->first_name, "%s", t->name ? t->name : "?");
    }
    sr->scale_mismatches = count_scale_mismatches(&ln->rec, &ls->l[0].rec, g->cs->steps, &first);
    ck_memory_prediction pr;
    ck_status st = ck_predict_memory(g, &ln->plan, dtype, &pr, err);
    if (st != CK_OK)
        return st;
    sr->predicted_peak_bytes = pr.peak_bytes;
    ck_memory_prediction_free(&pr);
    return CK_OK;
}

/* Fills a run summary's prediction (held bytes too) for one plan (NULL: plain). */
static ck_status predict_summary(const ck_graph *g, const ck_plan *plan, ck_dtype dtype,
                                 ck_run_summary *s, int64_t *peak, ck_error *err)
{
    ck_memory_prediction pr;
    ck_status st = ck_predict_memory(g, plan, dtype, &pr, err);
    if (st != CK_OK)
        return st;
    if (s) {
        s->predicted = true;
        s->predicted_peak_bytes = pr.peak_bytes;
        s->held_for_backward_bytes = pr.forward_end_bytes;
    }
    if (peak)
        *peak = pr.peak_bytes;
    ck_memory_prediction_free(&pr);
    return CK_OK;
}

/* The judgement of the run shown (the first with the worst verdict) becomes the result's
 * main comparison; every run's facts go to res->segment_runs. */
static ck_status fill_result(lockstep *ls, const ck_graph *g, ck_dtype dtype, ck_result *res,
                             ck_error *err)
{
    const ck_case *c = g->cs;
    int n = ls->n - 1;
    res->n_segment_runs = n;
    res->segment_runs = calloc((size_t)(n > 0 ? n : 1), sizeof *res->segment_runs);
    if (!res->segment_runs)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    int shown = 1;
    ck_status st = CK_OK;
    for (int k = 1; k < ls->n && st == CK_OK; k++) {
        st = describe_run(ls, k, g, dtype, &res->segment_runs[k - 1], err);
        if (ls->l[k].j.worst > ls->l[shown].j.worst)
            shown = k;
    }
    if (st != CK_OK)
        return st;
    res->shown_segment_run = shown - 1;
    lane *sl = &ls->l[shown], *cl = &ls->l[0];
    res->tensors = sl->j.t;
    res->n_tensors = sl->j.n;
    sl->j.t = NULL;
    sl->j.n = 0;
    res->first_divergence = sl->j.first;
    res->verdict = sl->j.worst;
    res->tensors_judged = sl->j.judged;
    memcpy(res->judged_counts, sl->j.counts, sizeof res->judged_counts);
    res->n_retained_steps = sl->j.n_retained;
    memcpy(res->retained_steps, sl->j.retained, sizeof res->retained_steps);
    res->nonfinite_plain = sl->j.nonfinite[0];
    res->nonfinite_ckpt = sl->j.nonfinite[1];
    res->nonfinite_counted = true;
    res->scale_mismatches =
        count_scale_mismatches(&sl->rec, &cl->rec, c->steps, &res->first_scale_mismatch);
    ck_fill_summary(&res->plain, res->segment_runs[shown - 1].label, &sl->rec);
    ck_fill_summary(&res->ckpt, "checkpointed", &cl->rec);
    res->plain.vacuity = sl->vac;
    res->ckpt.vacuity = cl->vac;
    if ((st = predict_summary(g, &sl->plan, dtype, &res->plain, NULL, err)) != CK_OK ||
        (st = predict_summary(g, &cl->plan, dtype, &res->ckpt, NULL, err)) != CK_OK ||
        (st = predict_summary(g, NULL, dtype, NULL, &res->plain_predicted_peak_bytes, err)) !=
            CK_OK)
        return st;
    /* the saving against the plain run's exact prediction: it was not run */
    int64_t pp = res->plain_predicted_peak_bytes, cp = res->ckpt.peak_activation_bytes;
    res->memory_saving = pp > 0 ? 1.0 - (double)cp / (double)pp : 0.0;
    res->memory_met = !c->has_min_memory_saving || res->memory_saving >= c->min_memory_saving;
    if (ls->judge_lowp && (st = ck_lowp_judge_finish(&ls->refs.j, res, err)) == CK_OK)
        res->ckpt.vacuity.flushed = res->vs_fp32_flushed_grads;
    for (int k = 0; k < ls->n && st == CK_OK; k++)
        if (ls->l[k].relay.watch)
            st = ck_recompute_watch_take(ls->l[k].relay.watch, res, err);
    return st;
}

ck_status ck_run_case_segmentwise(ck_backend *b, const ck_graph *g, ck_dtype dtype,
                                  const ck_segmentwise_opts *o, ck_result *res, ck_error *err)
{
    const ck_case *c = g->cs;
    memset(res, 0, sizeof *res);
    res->cs = c;
    res->g = g;
    res->dtype = dtype;
    res->first_divergence = -1;
    res->first_scale_mismatch = -1;
    res->vs_fp32_first = res->vs_fp32_worst = res->vs_backend_first = -1;
    res->equivalence = CK_EQUIVALENCE_SEGMENTS;
    res->segmentwise_reason = o->reason;
    res->memory_limit_bytes = o->reason == CK_SEGMENTWISE_PLAIN_OVER_LIMIT ? o->memory_limit : 0;
    ck_result_describe_backend(b, res);
    if (o->run && o->run->dump_dir)
        return ck_fail(err, CK_ERR_INPUT, "%s: dumps need the plain run, which segment by "
                                          "segment does not hold", c->path);
    lockstep ls;
    memset(&ls, 0, sizeof ls);
    ck_status st = lanes_make(&ls, b, g, o, err);
    if (st != CK_OK)
        goto out;
    const ck_plan *full = &ls.l[0].plan;
    if (full->n_segments == 0) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: the case checkpoints no segment: nothing to "
                                        "verify segment by segment", c->path);
        goto out;
    }
    res->n_segments = full->n_segments;
    res->segments = malloc((size_t)(full->n_segments ? full->n_segments : 1) * sizeof *res->segments);
    if (!res->segments) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
        goto out;
    }
    memcpy(res->segments, full->segments, (size_t)full->n_segments * sizeof *res->segments);
    bool low = dtype == CK_F16 || dtype == CK_BF16;
    res->precision_check = o->run ? o->run->precision_check : CK_PRECISION_CHECK_FAIL;
    ls.judge_lowp = low && res->precision_check != CK_PRECISION_CHECK_OFF;
    if ((st = lanes_begin(&ls, b, g, dtype, o, err)) != CK_OK ||
        (st = lanes_train(&ls, g, dtype, err)) != CK_OK ||
        (st = fill_result(&ls, g, dtype, res, err)) != CK_OK)
        goto out;
    ck_result_judge(res);
out:
    lanes_free(&ls);
    return st;
}
