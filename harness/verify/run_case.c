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

/* The executor's layer events, passed on as progress. */
typedef struct {
    const ck_case_run_opts *opts;
    ck_progress_info info;
} progress_relay;

static ck_status relay_progress(void *user, const ck_exec_event_info *ev, ck_error *err)
{
    (void)err;
    progress_relay *r = user;
    r->info.step = ev->step;
    r->info.layer = ev->layer;
    r->info.backward = ev->ev == CK_EVENT_BACKWARD;
    r->info.recompute = ev->recompute;
    r->opts->progress(r->opts->progress_user, &r->info);
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

static ck_status pair_hooks_init(run_pair_hooks *h, const ck_graph *g, const ck_plan *plan,
                                 ck_dtype dtype, const ck_case_run_opts *opts, ck_error *err)
{
    const ck_case *c = g->cs;
    memset(h, 0, sizeof *h);
    h->dumping = opts && opts->dump_dir;
    h->rplain = (progress_relay){opts, {.run = 0, .n_runs = 2, .run_label = "plain",
                                        .steps = c->steps, .n_layers = g->n}};
    h->rckpt = (progress_relay){opts, {.run = 1, .n_runs = 2, .run_label = "checkpointed",
                                       .steps = c->steps, .n_layers = g->n}};
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

/* Plain and checkpointed train in lockstep (with the low-precision run's references when
 * refs is not NULL); each step is judged and its tensors dropped, so memory does not grow
 * with the steps. */
static ck_status train_pair(ck_backend *b, const ck_graph *g, const ck_plan *plan, ck_dtype dtype,
                            run_pair_hooks *h, ck_training_log *log, ck_lowp_refs *refs,
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
    if (refs && (st = ck_lowp_refs_begin(refs, b, g, NULL, dtype, plain, err)) != CK_OK)
        goto steps_done;
    for (int step = 0; step < c->steps; step++) {
        if ((st = ck_trainer_step(&tp, step, err)) != CK_OK ||
            (st = ck_trainer_step(&tc, step, err)) != CK_OK)
            goto steps_done;
        if ((st = ck_step_judge_add(&jmain, g, plain, ckpt, step, err)) != CK_OK)
            goto steps_done;
        ck_vacuity_count(plain, dtype, vp);
        ck_vacuity_count(ckpt, dtype, vc);
        if (refs && (st = ck_lowp_refs_step(refs, g, plain, step, err)) != CK_OK)
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
        if (refs && (st = ck_lowp_judge_finish(&refs->j, res, err)) == CK_OK)
            res->plain.vacuity.flushed = res->vs_fp32_flushed_grads;
    }
    ck_step_judge_free(&jmain);
    return st;
}

/* The plan's prediction of both runs' memory (memory_plan.h), for the report's top. */
static ck_status predict_runs(const ck_graph *g, const ck_plan *plan, ck_dtype dtype,
                              ck_result *res, ck_error *err)
{
    for (int k = 0; k < 2; k++) {
        ck_memory_prediction p;
        ck_status st = ck_predict_memory(g, k ? plan : NULL, dtype, &p, err);
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
    ck_lowp_refs refs;
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
    if ((st = pair_hooks_init(&hooks, g, &plan, dtype, opts, err)) != CK_OK)
        goto out;
    refs.log = opts ? opts->log : NULL;
    refs.ov = opts && opts->precision_override.set ? &opts->precision_override : NULL;
    if ((st = train_pair(b, g, &plan, dtype, &hooks, opts ? opts->log : NULL,
                         judge_lowp ? &refs : NULL, &plain, &ckpt, res, err)) != CK_OK)
        goto out;
    ck_vacuity_finish(&plain, &res->plain.vacuity);
    ck_vacuity_finish(&ckpt, &res->ckpt.vacuity);
    finish_result(c, &plain, &ckpt, res);
    if ((st = predict_runs(g, &plan, dtype, res, err)) != CK_OK)
        goto out;
out:
    ck_lowp_refs_free(&refs);
    if (hooks.dumping)
        ck_manifest_free(&hooks.manifest);
    ck_record_free(&plain);
    ck_record_free(&ckpt);
    ck_plan_free(&plan);
    return st;
}
