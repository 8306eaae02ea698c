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
#include "harness/io/files.h"
#include "harness/verify/judge.h"

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

ck_status ck_run_case_ex(ck_backend *b, const ck_graph *g, ck_dtype dtype,
                         const ck_case_run_opts *opts, ck_result *res, ck_error *err)
{
    const ck_case *c = g->cs;
    ck_manifest manifest;
    bool dumping = opts && opts->dump_dir;
    memset(&manifest, 0, sizeof manifest);
    ck_record plain, ckpt;
    ck_plan plan;
    memset(res, 0, sizeof *res);
    memset(&plain, 0, sizeof plain);
    memset(&ckpt, 0, sizeof ckpt);
    res->cs = c;
    res->g = g;
    res->dtype = dtype;
    ck_backend_info info;
    b->info(b, &info);
    snprintf(res->backend, sizeof res->backend, "%s", info.name);
    snprintf(res->backend_device, sizeof res->backend_device, "%s", info.device);
    snprintf(res->backend_versions, sizeof res->backend_versions, "%s", info.versions);
    res->backend_threads = info.threads;
    snprintf(res->backend_isa, sizeof res->backend_isa, "%s", info.isa);

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

    ck_dump_spec dplain = {0}, dckpt = {0};
    ck_run_hooks hplain = {0}, hckpt = {0};
    progress_relay rplain = {opts, {.run = 0, .n_runs = 2, .run_label = "plain", .steps = c->steps,
                                    .n_layers = g->n}};
    progress_relay rckpt = {opts, {.run = 1, .n_runs = 2, .run_label = "checkpointed",
                                   .steps = c->steps, .n_layers = g->n}};
    if (opts && opts->progress) {
        hplain.observer = hckpt.observer = relay_progress;
        hplain.observer_user = &rplain;
        hckpt.observer_user = &rckpt;
    }
    if (dumping) {
        if ((st = ck_mkdir_p(opts->dump_dir, err)) != CK_OK ||
            (st = ck_manifest_init(&manifest, c->name, err)) != CK_OK ||
            (st = ck_manifest_describe(&manifest, g, &plan, dtype, err)) != CK_OK ||
            (c->path && access(c->path, R_OK) == 0 && /* parsed from a file, not from text */
             (st = ck_dump_case_file(opts->dump_dir, c->path, err)) != CK_OK))
            goto out;
        dplain = (ck_dump_spec){.dir = opts->dump_dir, .label = "plain", .manifest = &manifest,
                                .activations = opts->dump_activations,
                                .activation_grads = opts->dump_activation_grads,
                                .optimizer_state = opts->dump_optimizer};
        dckpt = dplain;
        dckpt.label = "checkpointed";
        hplain.dump = &dplain;
        hckpt.dump = &dckpt;
    }
    /* plain and checkpointed train in lockstep; each step is judged and its tensors dropped,
     * so memory does not grow with the steps. A low-precision run judged against fp32 keeps
     * its plain run's tensors: the precision judgement (precision_judge.h) calibrates every
     * tensor against whole fp32 and calibration runs trained after it. */
    bool low = dtype == CK_F16 || dtype == CK_BF16;
    res->precision_check = opts ? opts->precision_check : CK_PRECISION_CHECK_FAIL;
    bool judge_lowp = low && res->precision_check != CK_PRECISION_CHECK_OFF;
    const ck_precision_override *ov =
        opts && opts->precision_override.set ? &opts->precision_override : NULL;
    /* every run trains in lockstep and each step is judged and its tensors dropped, so
     * memory does not grow with the steps: plain and checkpointed; and for a low-precision
     * run, the fp32 reference and the calibration runs (the low dtype's roundings alone)
     * that judge it (precision_judge.h). The fp32 runs take the low run's updates: a step
     * its loss scaler skipped is skipped there too, or every later step would compare
     * different models (skip_like reads the plain run's decision for the step, made first). */
    int n_calib = judge_lowp && !ov ? CK_PRECISION_CALIB_RUNS : 0;
    ck_trainer tp, tc, tf, tcal[CK_PRECISION_CALIB_RUNS];
    ck_record fp32, calib[CK_PRECISION_CALIB_RUNS];
    memset(&fp32, 0, sizeof fp32);
    memset(calib, 0, sizeof calib);
    bool have_tp = false, have_tc = false, have_tf = false;
    int have_cal = 0;
    ck_step_judge jmain;
    ck_step_judge_init(&jmain, c, CK_F32, 0.0, CK_VERDICT_CLOSE);
    ck_lowp_judge jlow;
    ck_lowp_judge_init(&jlow, c, dtype, n_calib, ov);
    ck_vacuity *vp = &res->plain.vacuity, *vc = &res->ckpt.vacuity;
    memset(vp, 0, sizeof *vp);
    memset(vc, 0, sizeof *vc);
    vp->flushed = vc->flushed = -1;
    if ((st = ck_trainer_begin(&tp, b, g, NULL, dtype, &hplain, &plain, err)) != CK_OK)
        goto steps_done;
    have_tp = true;
    if ((st = ck_trainer_begin(&tc, b, g, &plan, dtype, &hckpt, &ckpt, err)) != CK_OK)
        goto steps_done;
    have_tc = true;
    if (judge_lowp) {
        ck_run_hooks href = {.skip_like = plain.scales, .latest_step_only = true};
        if ((st = ck_trainer_begin(&tf, b, g, NULL, CK_F32, &href, &fp32, err)) != CK_OK)
            goto steps_done;
        have_tf = true;
        for (; have_cal < n_calib; have_cal++) {
            int j = have_cal;
            ck_run_hooks hcal = {.round_to = dtype,
                                 .perturb_rel = j == 0 ? 0.0 : ck_unit_roundoff(dtype),
                                 .perturb_seed = c->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(j + 1)),
                                 .skip_like = plain.scales, .latest_step_only = true};
            if ((st = ck_trainer_begin(&tcal[j], b, g, NULL, CK_F32, &hcal, &calib[j], err)) !=
                CK_OK)
                goto steps_done;
        }
    }
    for (int step = 0; step < c->steps; step++) {
        if ((st = ck_trainer_step(&tp, step, err)) != CK_OK ||
            (st = ck_trainer_step(&tc, step, err)) != CK_OK)
            goto steps_done;
        if ((st = ck_step_judge_add(&jmain, g, &plain, &ckpt, step, err)) != CK_OK)
            goto steps_done;
        ck_vacuity_count(&plain, dtype, vp);
        ck_vacuity_count(&ckpt, dtype, vc);
        if (judge_lowp) {
            if ((st = ck_trainer_step(&tf, step, err)) != CK_OK)
                goto steps_done;
            for (int j = 0; j < n_calib; j++)
                if ((st = ck_trainer_step(&tcal[j], step, err)) != CK_OK)
                    goto steps_done;
            if ((st = ck_lowp_judge_add(&jlow, g, &fp32, calib, &plain, step, err)) != CK_OK)
                goto steps_done;
            ck_record_drop_entries(&fp32);
            for (int j = 0; j < n_calib; j++)
                ck_record_drop_entries(&calib[j]);
        }
        ck_record_drop_entries(&plain);
        ck_record_drop_entries(&ckpt);
    }
    ck_trainer_end(&tp);
    ck_trainer_end(&tc);
steps_done:
    if (have_tp)
        ck_trainer_free(&tp);
    if (have_tc)
        ck_trainer_free(&tc);
    if (have_tf)
        ck_trainer_free(&tf);
    for (int j = 0; j < have_cal; j++)
        ck_trainer_free(&tcal[j]);
    ck_record_free(&fp32);
    for (int j = 0; j < CK_PRECISION_CALIB_RUNS; j++)
        ck_record_free(&calib[j]);
    if (st == CK_OK && dumping) {
        char path[4096];
        snprintf(path, sizeof path, "%s/manifest.json", opts->dump_dir);
        st = ck_manifest_write(&manifest, path, err);
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
        if (judge_lowp)
            st = ck_lowp_judge_finish(&jlow, res, err);
    }
    ck_step_judge_free(&jmain);
    ck_lowp_judge_free(&jlow);
    if (st != CK_OK)
        goto out;
    ck_vacuity_finish(&plain, vp);
    ck_vacuity_finish(&ckpt, vc);
    if (judge_lowp)
        res->plain.vacuity.flushed = res->vs_fp32_flushed_grads;
    ck_fill_summary(&res->plain, "plain", &plain);
    ck_fill_summary(&res->ckpt, "checkpointed", &ckpt);
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
out:
    if (dumping)
        ck_manifest_free(&manifest);
    ck_record_free(&plain);
    ck_record_free(&ckpt);
    ck_plan_free(&plan);
    return st;
}
