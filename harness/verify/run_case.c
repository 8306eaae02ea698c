/*
 * One case end to end: the plain and the checkpointed run (with dumps when asked), the
 * fp32 reference of a low-precision run, and the judgement (run_case.h).
 */
#include "harness/verify/run_case.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/engine/dump.h"
#include "harness/engine/memory_plan.h"
#include "harness/io/files.h"
#include "harness/verify/judge.h"
#include "harness/verify/lowp_refs.h"
#include "harness/verify/training.h"

ck_status ck_run_case(ck_backend *b, const ck_graph *g, ck_dtype dtype, ck_result *res,
                      ck_error *err)
{
    return ck_run_case_ex(b, g, dtype, NULL, res, err);
}

/* The executor's layer events of one lockstep training, passed on as progress. */
typedef struct {
    const ck_case_run_opts *opts;
    ck_progress_info info;
    char label[48]; /* as lowp_refs_begin's "calibration %d/%d" */
} progress_relay;

/* A relay for lockstep training `run` of n_runs, named `label`. */
static void relay_init(progress_relay *r, const ck_case_run_opts *opts, const ck_graph *g,
                       int run, int n_runs, const char *label)
{
    memset(r, 0, sizeof *r);
    r->opts = opts;
    snprintf(r->label, sizeof r->label, "%s", label);
    r->info = (ck_progress_info){.run = run, .n_runs = n_runs, .run_label = r->label,
                                 .steps = g->cs->steps, .n_layers = g->n};
}

void ck_progress_advance(ck_progress_info *in, const ck_exec_event_info *ev)
{
    in->step = ev->step;
    in->layer = ev->layer;
    in->backward = ev->ev == CK_EVENT_BACKWARD;
    in->recompute = ev->recompute;
    /* a step is n_layers forward passes and n_layers backward ones; the trainings take
     * each step in turn, so step s of run k comes after step s of runs 0..k-1 */
    double per_step = in->n_layers > 0 ? 2.0 * in->n_layers : 1.0;
    double pos = in->backward ? 2.0 * in->n_layers - in->layer : in->layer;
    double frac = ((double)in->step * in->n_runs + in->run + pos / per_step) /
                  ((double)in->n_runs * (in->steps > 0 ? in->steps : 1));
    frac = frac > 1.0 ? 1.0 : frac;
    if (frac > in->fraction) /* a recomputation's forward events come within backward */
        in->fraction = frac;
}

static ck_status relay_progress(void *user, const ck_exec_event_info *ev, ck_error *err)
{
    (void)err;
    progress_relay *r = user;
    ck_progress_info *in = &r->info;
    in->run_label = r->label;
    ck_progress_advance(in, ev);
    r->opts->progress(r->opts->progress_user, in);
    return CK_OK;
}

/* The backend's identity, copied into the result. */
void ck_result_describe_backend(ck_backend *b, ck_result *res)
{
    ck_backend_info info;
    b->info(b, &info);
    snprintf(res->backend, sizeof res->backend, "%s", info.name);
    snprintf(res->backend_device, sizeof res->backend_device, "%s", info.device);
    snprintf(res->backend_versions, sizeof res->backend_versions, "%s", info.versions);
    res->backend_threads = info.threads;
    snprintf(res->backend_isa, sizeof res->backend_isa, "%s", info.isa);
}

/* The two runs' hooks: progress relays and dump specs (opts may be NULL). */
typedef struct {
    ck_manifest manifest;
    bool dumping;
    ck_dump_spec dplain, dckpt;
    ck_run_hooks hplain, hckpt;
    progress_relay rplain, rckpt;
} run_pair_hooks;

/* n_runs: the trainings that advance in lockstep with the pair (the pair's two and a
 * low-precision case's references), for the progress fraction. */
static ck_status pair_hooks_init(run_pair_hooks *h, const ck_graph *g, const ck_plan *plan,
                                 ck_dtype dtype, const ck_case_run_opts *opts, int n_runs,
                                 ck_error *err)
{
    const ck_case *c = g->cs;
    memset(h, 0, sizeof *h);
    h->dumping = opts && opts->dump_dir;
    relay_init(&h->rplain, opts, g, 0, n_runs, "plain");
    relay_init(&h->rckpt, opts, g, 1, n_runs, "checkpointed");
    if (opts && opts->progress) {
        h->hplain.observer = h->hckpt.observer = relay_progress;
        h->hplain.observer_user = &h->rplain;
        h->hckpt.observer_user = &h->rckpt;
    }
    if (!h->dumping)
        return CK_OK;
    ck_status st;
    if ((st = ck_mkdir_p(opts->dump_dir, err)) != CK_OK ||
        (st = ck_manifest_init(&h->manifest, c->name, err)) != CK_OK ||
        (st = ck_manifest_describe(&h->manifest, g, plan, dtype, err)) != CK_OK ||
        (c->path && access(c->path, R_OK) == 0 && /* parsed from a file, not from text */
         (st = ck_dump_case_file(opts->dump_dir, c->path, err)) != CK_OK))
        return st;
    h->dplain = (ck_dump_spec){.dir = opts->dump_dir, .label = "plain", .manifest = &h->manifest,
                               .activations = opts->dump_activations,
                               .activation_grads = opts->dump_activation_grads,
                               .optimizer_state = opts->dump_optimizer};
    h->dckpt = h->dplain;
    h->dckpt.label = "checkpointed";
    h->hplain.dump = &h->dplain;
    h->hckpt.dump = &h->dckpt;
    return CK_OK;
}

/* The fp32 reference and calibration runs that judge a low-precision run (lowp_refs.h), with
 * the progress of each relayed as runs 2, 3.. of the lockstep. */
typedef struct {
    const ck_case_run_opts *opts;
    ck_lowp_refs core;
    progress_relay rf, rcal[CK_PRECISION_CALIB_RUNS];
} lowp_refs;

/* The references' trainings: the fp32 reference and the calibration runs. */
static int lowp_refs_count(const ck_case_run_opts *opts)
{
    return 1 + (opts && opts->precision_override.set ? 0 : CK_PRECISION_CALIB_RUNS);
}

static ck_status lowp_refs_begin(lowp_refs *r, ck_backend *b, const ck_graph *g, ck_dtype dtype,
                                 const ck_case_run_opts *opts, const ck_record *plain,
                                 ck_error *err)
{
    r->core.log = opts ? opts->log : NULL;
    r->core.ov = opts && opts->precision_override.set ? &opts->precision_override : NULL;
    int n_calib = lowp_refs_count(opts) - 1;
    int n_runs = 2 + 1 + n_calib;
    relay_init(&r->rf, opts, g, 2, n_runs, "fp32 reference");
    r->core.observer_user[0] = &r->rf;
    for (int j = 0; j < n_calib; j++) {
        char label[48]; /* two ints of up to 11 characters each */
        snprintf(label, sizeof label, "calibration %d/%d", j + 1, n_calib);
        relay_init(&r->rcal[j], opts, g, 3 + j, n_runs, label);
        r->core.observer_user[1 + j] = &r->rcal[j];
    }
    if (opts && opts->progress)
        r->core.observer = relay_progress;
    return ck_lowp_refs_begin(&r->core, b, g, NULL, dtype, plain, err);
}

/* Plain and checkpointed train in lockstep (with the low-precision run's references when
 * refs is not NULL); each step is judged and its tensors dropped, so memory does not grow
 * with the steps. */
static ck_status train_pair(ck_backend *b, const ck_graph *g, const ck_plan *plan, ck_dtype dtype,
                            run_pair_hooks *h, ck_training_log *log, lowp_refs *refs,
                            ck_record *plain, ck_record *ckpt, ck_result *res, ck_error *err)
{
    const ck_case *c = g->cs;
    ck_trainer tp, tc;
    bool have_tp = false, have_tc = false;
    ck_step_judge jmain;
    ck_step_judge_init(&jmain, c, CK_F32, 0.0, CK_VERDICT_CLOSE);
    ck_vacuity *vp = &res->plain.vacuity, *vc = &res->ckpt.vacuity;
    memset(vp, 0, sizeof *vp);
    memset(vc, 0, sizeof *vc);
    vp->flushed = vc->flushed = -1;
    ck_training t_plain = {.kind = CK_TRAINING_PLAIN, .b = b, .g = g, .dtype = dtype,
                           .hooks = &h->hplain, .log = log};
    ck_training t_ckpt = {.kind = CK_TRAINING_CHECKPOINTED, .b = b, .g = g, .plan = plan,
                          .dtype = dtype, .hooks = &h->hckpt, .log = log};
    ck_status st;
    if ((st = ck_training_begin(&t_plain, &tp, plain, err)) != CK_OK)
        goto steps_done;
    have_tp = true;
    if ((st = ck_training_begin(&t_ckpt, &tc, ckpt, err)) != CK_OK)
        goto steps_done;
    have_tc = true;
    /* after the plain run began: its per-step scales tell the references which steps to skip */
    if (refs && (st = lowp_refs_begin(refs, b, g, dtype, refs->opts, plain, err)) != CK_OK)
        goto steps_done;
    for (int step = 0; step < c->steps; step++) {
        if ((st = ck_trainer_step(&tp, step, err)) != CK_OK ||
            (st = ck_trainer_step(&tc, step, err)) != CK_OK)
            goto steps_done;
        if ((st = ck_step_judge_add(&jmain, g, plain, ckpt, step, err)) != CK_OK)
            goto steps_done;
        ck_vacuity_count(plain, dtype, vp);
        ck_vacuity_count(ckpt, dtype, vc);
        if (refs && (st = ck_lowp_refs_step(&refs->core, g, plain, step, err)) != CK_OK)
            goto steps_done;
        ck_record_drop_entries(plain);
        ck_record_drop_entries(ckpt);
    }
    ck_trainer_end(&tp);
    ck_trainer_end(&tc);
steps_done:
    if (have_tp)
        ck_trainer_free(&tp);
    if (have_tc)
        ck_trainer_free(&tc);
    if (st == CK_OK && h->dumping) {
        char path[4096];
        snprintf(path, sizeof path, "%s/manifest.json", h->dplain.dir);
        st = ck_manifest_write(&h->manifest, path, err);
    }
    if (st == CK_OK) {
        res->tensors = jmain.t;
        res->n_tensors = jmain.n;
        jmain.t = NULL;
        jmain.n = 0;
        res->first_divergence = jmain.first;
        res->verdict = jmain.worst;
        res->tensors_judged = jmain.judged;
        memcpy(res->judged_counts, jmain.counts, sizeof res->judged_counts);
        res->n_retained_steps = jmain.n_retained;
        memcpy(res->retained_steps, jmain.retained, sizeof res->retained_steps);
        res->nonfinite_plain = jmain.nonfinite[0];
        res->nonfinite_ckpt = jmain.nonfinite[1];
        res->nonfinite_counted = true;
        if (refs && (st = ck_lowp_judge_finish(&refs->core.j, res, err)) == CK_OK)
            res->plain.vacuity.flushed = res->vs_fp32_flushed_grads;
    }
    ck_step_judge_free(&jmain);
    return st;
}

/* The plan's prediction of both runs' memory (memory_plan.h), for the report's top. */
static ck_status predict_runs(const ck_graph *g, const ck_plan *plan, ck_dtype dtype,
                              const ck_case_run_opts *opts, ck_result *res, ck_error *err)
{
    /* a run dumping activation gradients keeps every relu's output gradient (executor.h) */
    bool keep = opts && opts->dump_dir && opts->dump_activation_grads;
    for (int k = 0; k < 2; k++) {
        ck_memory_prediction p;
        ck_status st = ck_predict_memory_keeping_grads(g, k ? plan : NULL, dtype, keep, &p, err);
        if (st != CK_OK)
            return st;
        ck_run_summary *s = k ? &res->ckpt : &res->plain;
        s->predicted = true;
        s->predicted_peak_bytes = p.peak_bytes;
        s->held_for_backward_bytes = p.forward_end_bytes;
        ck_memory_prediction_free(&p);
    }
    return CK_OK;
}

/* Run summaries, loss-scaler agreement, memory saving and the verdicts. */
static void finish_result(const ck_case *c, ck_record *plain, ck_record *ckpt, ck_result *res)
{
    ck_fill_summary(&res->plain, "plain", plain);
    ck_fill_summary(&res->ckpt, "checkpointed", ckpt);
    res->first_scale_mismatch = -1;
    for (int s = 0; s < c->steps; s++) {
        if (res->plain.scales[s].scale != res->ckpt.scales[s].scale ||
            res->plain.scales[s].skipped != res->ckpt.scales[s].skipped) {
            res->scale_mismatches++;
            if (res->first_scale_mismatch < 0)
                res->first_scale_mismatch = s;
        }
    }
    int64_t pp = res->plain.peak_activation_bytes, cp = res->ckpt.peak_activation_bytes;
    res->memory_saving = pp > 0 ? 1.0 - (double)cp / (double)pp : 0.0;
    res->memory_met = !c->has_min_memory_saving || res->memory_saving >= c->min_memory_saving;
    ck_result_judge(res);
}

ck_status ck_run_case_ex(ck_backend *b, const ck_graph *g, ck_dtype dtype,
                         const ck_case_run_opts *opts, ck_result *res, ck_error *err)
{
    const ck_case *c = g->cs;
    ck_record plain, ckpt;
    ck_plan plan;
    run_pair_hooks hooks;
    memset(&hooks, 0, sizeof hooks);
    lowp_refs refs;
    memset(&refs, 0, sizeof refs);
    memset(res, 0, sizeof *res);
    memset(&plain, 0, sizeof plain);
    memset(&ckpt, 0, sizeof ckpt);
    res->cs = c;
    res->g = g;
    res->dtype = dtype;
    ck_result_describe_backend(b, res);

    ck_status st = ck_plan_build(g, &plan, err);
    if (st != CK_OK)
        return st;
    res->n_segments = plan.n_segments;
    res->segments = malloc((size_t)(plan.n_segments ? plan.n_segments : 1) * sizeof *res->segments);
    if (!res->segments) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
        goto out;
    }
    memcpy(res->segments, plan.segments, (size_t)plan.n_segments * sizeof *res->segments);
    bool low = dtype == CK_F16 || dtype == CK_BF16;
    res->precision_check = opts ? opts->precision_check : CK_PRECISION_CHECK_FAIL;
    bool judge_lowp = low && res->precision_check != CK_PRECISION_CHECK_OFF;
    int n_lockstep = 2 + (judge_lowp ? lowp_refs_count(opts) : 0);
    if ((st = pair_hooks_init(&hooks, g, &plan, dtype, opts, n_lockstep, err)) != CK_OK)
        goto out;
    refs.opts = opts;
    if ((st = train_pair(b, g, &plan, dtype, &hooks, opts ? opts->log : NULL,
                         judge_lowp ? &refs : NULL, &plain, &ckpt, res, err)) != CK_OK)
        goto out;
    ck_vacuity_finish(&plain, &res->plain.vacuity);
    ck_vacuity_finish(&ckpt, &res->ckpt.vacuity);
    finish_result(c, &plain, &ckpt, res);
    if ((st = predict_runs(g, &plan, dtype, opts, res, err)) != CK_OK)
        goto out;
out:
    ck_lowp_refs_free(&refs.core);
    if (hooks.dumping)
        ck_manifest_free(&hooks.manifest);
    ck_record_free(&plain);
    ck_record_free(&ckpt);
    ck_plan_free(&plan);
    return st;
}
