/*
 * The JSON report (schema: reports/SCHEMA.md, version CK_REPORT_SCHEMA_VERSION) and its
 * atomic writer.
 *
 * Numbers are written as raw text, never through cJSON's own number printer, for two
 * reasons: integers (bytes, counts, seeds, ULP distances) must stay exact above 2^53,
 * where a double cannot hold them, and doubles must round-trip and be spelled the same
 * way on every run. Non-finite doubles, which cJSON would print as null, become the
 * strings "NaN", "Infinity" and "-Infinity". The builder (harness/io/json_build.h) is shared
 * with the compare report.
 */
#include "reports/report.h"

#include "harness/verify/judge.h"

#include "harness/verify/bisect.h"
#include "harness/io/files.h"
#include "harness/io/json_build.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------- */
/* Report sections                                                                     */
/* ---------------------------------------------------------------------------------- */

static const char *layer_name(const ck_result *r, int i)
{
    if (r->g && r->g->nodes && i >= 0 && i < r->g->n && r->g->nodes[i].spec)
        return r->g->nodes[i].spec->name;
    if (r->cs && r->cs->layers && i >= 0 && i < r->cs->n_layers)
        return r->cs->layers[i].name;
    return NULL;
}

static const char *ckpt_spec_name(ck_ckpt_kind k)
{
    switch (k) {
    case CK_CKPT_SQRT: return "sqrt";
    case CK_CKPT_EVERY: return "every";
    case CK_CKPT_SEGMENTS: return "segments";
    }
    return "?";
}

static void add_case(ck_json_builder *b, cJSON *root, const ck_result *r,
                     const ck_report_meta *meta)
{
    const ck_case *cs = r->cs;
    cJSON *c = ck_json_add_object(b, root, "case");
    ck_json_add_string(b, c, "name", cs ? cs->name : NULL);
    ck_json_add_string(b, c, "file",
                       meta && meta->case_path ? meta->case_path : cs ? cs->path : NULL);
    ck_json_add_string(b, c, "description", cs ? cs->description : NULL);
}

static void add_segments(ck_json_builder *b, cJSON *ckpt, const ck_result *r)
{
    cJSON *segs = ck_json_add_array(b, ckpt, "segments");
    for (int s = 0; s < r->n_segments && r->segments; s++) {
        cJSON *seg = ck_json_add_object(b, segs, NULL);
        ck_json_add_int(b, seg, "index", s);
        ck_json_add_int(b, seg, "first", r->segments[s].first);
        ck_json_add_int(b, seg, "last", r->segments[s].last);
        cJSON *layers = ck_json_add_array(b, seg, "layers");
        for (int l = r->segments[s].first; l <= r->segments[s].last; l++)
            ck_json_add_string(b, layers, NULL, layer_name(r, l));
    }
}

static void add_config(ck_json_builder *b, cJSON *root, const ck_result *r)
{
    const ck_case *cs = r->cs;
    cJSON *cfg = ck_json_add_object(b, root, "config");
    if (!cs) {
        /* Without a case there is no configuration to state, only the resolved plan. */
        cJSON *ckpt = ck_json_add_object(b, cfg, "checkpoint");
        ck_json_add_null(b, ckpt, "spec");
        add_segments(b, ckpt, r);
        return;
    }
    ck_json_add_uint(b, cfg, "seed", cs->seed);
    ck_json_add_int(b, cfg, "steps", cs->steps);

    cJSON *opt = ck_json_add_object(b, cfg, "optimizer");
    ck_json_add_string(b, opt, "kind", ck_optimizer_kind_name(cs->optimizer.kind));
    ck_json_add_real(b, opt, "lr", cs->optimizer.lr);
    ck_json_add_real(b, opt, "momentum", cs->optimizer.momentum);
    ck_json_add_real(b, opt, "beta1", cs->optimizer.beta1);
    ck_json_add_real(b, opt, "beta2", cs->optimizer.beta2);
    ck_json_add_real(b, opt, "eps", cs->optimizer.eps);
    ck_json_add_real(b, opt, "weight_decay", cs->optimizer.weight_decay);

    ck_json_add_string(b, cfg, "loss", ck_loss_kind_name(cs->loss));

    cJSON *pol = ck_json_add_object(b, cfg, "policies");
    ck_json_add_string(b, pol, "rng", ck_rng_policy_name(cs->rng));
    ck_json_add_string(b, pol, "batchnorm_recompute", ck_bn_policy_name(cs->bn));
    ck_json_add_string(b, pol, "reduction_dtype", cs->reduction_low ? "low" : "fp32");
    ck_json_add_string(b, pol, "recompute_filter", cs->recompute_fp32_only ? "fp32_only" : "all");

    cJSON *tol = ck_json_add_object(b, cfg, "tolerance");
    ck_json_add_real(b, tol, "rtol", cs->rtol);
    ck_json_add_real(b, tol, "atol", cs->atol);

    cJSON *ckpt = ck_json_add_object(b, cfg, "checkpoint");
    ck_json_add_string(b, ckpt, "spec", ckpt_spec_name(cs->ckpt_kind));
    if (cs->ckpt_kind == CK_CKPT_EVERY)
        ck_json_add_int(b, ckpt, "every", cs->ckpt_every);
    add_segments(b, ckpt, r);

    if (cs->has_min_memory_saving)
        ck_json_add_real(b, cfg, "min_memory_saving", cs->min_memory_saving);
    else
        ck_json_add_null(b, cfg, "min_memory_saving");
    ck_json_add_string(b, cfg, "expect", ck_expect_name(ck_case_expect(cs, r->dtype)));
    ck_json_add_string(b, cfg, "expect_memory", cs->expect_memory_met ? "met" : "unmet");
    ck_json_add_bool(b, cfg, "expect_vacuous", cs->expect_vacuous);
    if (cs->init_from)
        ck_json_add_string(b, cfg, "init_from", cs->init_shown ? cs->init_shown : cs->init_from);
    else
        ck_json_add_null(b, cfg, "init_from");
}

/* Per-step lists (losses, loss scales) of runs longer than CK_FULL_RECORD_STEPS keep their
 * first and last CK_FULL_RECORD_STEPS / 2 steps, so a report's size does not grow with the
 * steps; the kept step numbers go beside them (SCHEMA.md, "Long runs"). */
static bool step_listed(const ck_run_summary *run, int s)
{
    return run->steps <= CK_FULL_RECORD_STEPS || s < CK_FULL_RECORD_STEPS / 2 ||
           s >= run->steps - CK_FULL_RECORD_STEPS / 2;
}

static void add_listed_steps(ck_json_builder *b, cJSON *o, const char *key,
                             const ck_run_summary *run)
{
    if (run->steps <= CK_FULL_RECORD_STEPS)
        return;
    cJSON *arr = ck_json_add_array(b, o, key);
    for (int s = 0; s < run->steps; s++)
        if (step_listed(run, s))
            ck_json_add_int(b, arr, NULL, s);
}

static void add_run(ck_json_builder *b, cJSON *runs, const char *key, const ck_run_summary *run,
                    const ck_report_meta *meta)
{
    cJSON *o = ck_json_add_object(b, runs, key);
    cJSON *losses = ck_json_add_array(b, o, "losses");
    for (int i = 0; i < run->steps && run->losses; i++)
        if (step_listed(run, i))
            ck_json_add_real(b, losses, NULL, run->losses[i]);
    add_listed_steps(b, o, "loss_steps", run);
    ck_json_add_int(b, o, "peak_activation_bytes", run->peak_activation_bytes);
    if (run->predicted) {
        ck_json_add_int(b, o, "predicted_peak_activation_bytes", run->predicted_peak_bytes);
        ck_json_add_int(b, o, "held_for_backward_bytes", run->held_for_backward_bytes);
    }
    ck_json_add_int(b, o, "recomputed_layers", run->recomputed_layers);
    if (meta && meta->include_wall_time) {
        ck_json_add_real(b, o, "wall_time_s", run->wall_time_s);
        cJSON *sw = ck_json_add_array(b, o, "step_wall_s");
        for (int i = 0; i < run->steps && run->step_wall_s; i++)
            if (step_listed(run, i)) /* long runs: the first and last 50 (loss_steps) */
                ck_json_add_real(b, sw, NULL, run->step_wall_s[i]);
        cJSON *tw = ck_json_add_array(b, o, "train_wall_s");
        for (int i = 0; i < run->steps && run->train_wall_s; i++)
            if (step_listed(run, i))
                ck_json_add_real(b, tw, NULL, run->train_wall_s[i]);
    }
    /* live activation bytes over the run's allocator events (engine/alloc.h) */
    cJSON *tl = ck_json_add_object(b, o, "memory_timeline");
    ck_json_add_int(b, tl, "events", run->mem.events);
    ck_json_add_int(b, tl, "stride", run->mem.stride);
    cJSON *pts = ck_json_add_array(b, tl, "points");
    for (int i = 0; i < run->mem.n && i < CK_MEM_TRACE_MAX; i++) {
        cJSON *pt = ck_json_add_array(b, pts, NULL);
        ck_json_add_int(b, pt, NULL, run->mem.pt[i].event);
        ck_json_add_int(b, pt, NULL, run->mem.pt[i].bytes);
    }
    /* vacuity (harness/verify/vacuity.h) */
    const ck_vacuity *v = &run->vacuity;
    cJSON *gr = ck_json_add_object(b, o, "gradients");
    ck_json_add_int(b, gr, "elements", v->elements);
    ck_json_add_int(b, gr, "zero", v->zero);
    ck_json_add_int(b, gr, "subnormal", v->subnormal);
    if (v->flushed >= 0)
        ck_json_add_int(b, gr, "flushed", v->flushed);
    else
        ck_json_add_null(b, gr, "flushed");
    ck_json_add_real(b, gr, "zero_fraction",
                     v->elements > 0 ? (double)v->zero / (double)v->elements : 0.0);
    ck_json_add_bool(b, o, "vacuous", v->vacuous);
    if (v->vacuous)
    {
        char why[CK_REPORT_LINE_MAX];
        ck_report_vacuity_text(v, why, sizeof why);
        ck_json_add_string(b, o, "vacuous_reason", why);
    }
}

/* The `run` section: where the report came from (SCHEMA.md "Run metadata"). */
static void add_run_metadata(ck_json_builder *b, cJSON *root, const ck_report_meta *meta)
{
    const ck_run_metadata *m = meta ? meta->run : NULL;
    if (!m)
        return;
    cJSON *o = ck_json_add_object(b, root, "run");
    ck_json_add_string(b, o, "git_commit", m->git_commit);
    cJSON *bc = ck_json_add_object(b, o, "build");
    ck_json_add_bool(b, bc, "cuda", m->cuda);
    ck_json_add_string(b, bc, "compiler", m->compiler);
    ck_json_add_string(b, bc, "flags", m->cflags);
    if (!m->reproducible) {
        ck_json_add_string(b, o, "host", m->host);
        ck_json_add_string(b, o, "started_utc", m->started_utc);
    }
    ck_json_add_bool(b, o, "reproducible", m->reproducible);
    ck_json_add_string(b, o, "command_line", m->command_line);
    ck_json_add_string(b, o, "case_sha256", m->case_sha256);
    if (m->init_path) {
        cJSON *in = ck_json_add_object(b, o, "init");
        ck_json_add_string(b, in, "path", m->init_path);
        ck_json_add_string(b, in, "sha256", m->init_sha256);
    } else {
        ck_json_add_null(b, o, "init");
    }
}

static void add_memory(ck_json_builder *b, cJSON *root, const ck_result *r)
{
    cJSON *mem = ck_json_add_object(b, root, "memory");
    if (ck_report_segmentwise(r)) /* the plain run did not run: its exact prediction */
        ck_json_add_null(b, mem, "plain_peak_bytes");
    else
        ck_json_add_int(b, mem, "plain_peak_bytes", r->plain.peak_activation_bytes);
    ck_json_add_int(b, mem, "checkpointed_peak_bytes", r->ckpt.peak_activation_bytes);
    if (ck_report_segmentwise(r)) {
        ck_json_add_int(b, mem, "plain_predicted_peak_bytes", r->plain_predicted_peak_bytes);
        ck_json_add_int(b, mem, "checkpointed_predicted_peak_bytes",
                        r->ckpt.predicted_peak_bytes);
    } else if (r->plain.predicted && r->ckpt.predicted) {
        ck_json_add_int(b, mem, "plain_predicted_peak_bytes", r->plain.predicted_peak_bytes);
        ck_json_add_int(b, mem, "checkpointed_predicted_peak_bytes",
                        r->ckpt.predicted_peak_bytes);
    }
    ck_json_add_real(b, mem, "saving", r->memory_saving);
    if (r->cs && r->cs->has_min_memory_saving)
        ck_json_add_real(b, mem, "min_saving", r->cs->min_memory_saving);
    else
        ck_json_add_null(b, mem, "min_saving");
    ck_json_add_bool(b, mem, "met", r->memory_met);
    if (!r->memory_met) {
        char msg[CK_REPORT_LINE_MAX];
        ck_report_memory_message(r, msg, sizeof msg);
        ck_json_add_string(b, mem, "message", msg);
    }
}

static void add_metrics(ck_json_builder *b, cJSON *t, const ck_metrics *m, const ck_shape *shape)
{
    cJSON *mo = ck_json_add_object(b, t, "metrics");
    ck_json_add_bool(b, mo, "bitwise", m->bitwise);
    ck_json_add_real(b, mo, "max_abs", m->max_abs);
    ck_json_add_real(b, mo, "max_rel", m->max_rel);
    ck_json_add_real(b, mo, "rel_l2", m->rel_l2);
    ck_json_add_uint(b, mo, "max_ulp", m->max_ulp);
    ck_json_add_real(b, mo, "bound_ratio", m->max_ratio);
    ck_json_add_int(b, mo, "n_outside", m->n_outside);
    ck_json_add_int(b, mo, "numel", m->numel);
    if (m->first_bad >= 0 && m->first_bad < m->numel && shape->ndim >= 0 &&
        shape->ndim <= CK_MAX_DIMS) {
        int64_t idx[CK_MAX_DIMS];
        ck_shape_unflatten(shape, m->first_bad, idx);
        cJSON *fb = ck_json_add_array(b, mo, "first_bad_index");
        for (int d = 0; d < shape->ndim; d++)
            ck_json_add_int(b, fb, NULL, idx[d]);
    } else {
        ck_json_add_null(b, mo, "first_bad_index");
    }
    cJSON *nan = ck_json_add_object(b, mo, "nan");
    ck_json_add_int(b, nan, "a", m->nan_a);
    ck_json_add_int(b, nan, "ref", m->nan_ref);
    cJSON *inf = ck_json_add_object(b, mo, "inf");
    ck_json_add_int(b, inf, "a", m->inf_a);
    ck_json_add_int(b, inf, "ref", m->inf_ref);
}

static void add_tensors(ck_json_builder *b, cJSON *root, const ck_result *r)
{
    cJSON *arr = ck_json_add_array(b, root, "tensors");
    for (int i = 0; i < r->n_tensors && r->tensors; i++) {
        const ck_tensor_result *tr = &r->tensors[i];
        cJSON *t = ck_json_add_object(b, arr, NULL);
        ck_json_add_string(b, t, "name", tr->name);
        ck_json_add_string(b, t, "kind", ck_tensor_kind_name(tr->kind));
        ck_json_add_int(b, t, "step", tr->step);
        ck_json_add_string(b, t, "dtype", ck_dtype_name(tr->dtype));
        cJSON *shape = ck_json_add_array(b, t, "shape");
        for (int d = 0; d < tr->shape.ndim && d < CK_MAX_DIMS; d++)
            ck_json_add_int(b, shape, NULL, tr->shape.dim[d]);
        ck_json_add_string(b, t, "verdict", ck_verdict_name(tr->verdict));
        add_metrics(b, t, &tr->m, &tr->shape);
    }
}


/* "activations" (present only when a layer output or output gradient held NaN/Inf, so
 * reports of finite runs keep their shape): counts and where the first one appeared. */
static void add_act_nonfinite(ck_json_builder *b, cJSON *parent, const ck_result *r,
                              const ck_act_nonfinite *a)
{
    if (a->nan + a->inf + a->excused == 0)
        return;
    cJSON *o = ck_json_add_object(b, parent, "activations");
    ck_json_add_int(b, o, "nan", a->nan);
    ck_json_add_int(b, o, "inf", a->inf);
    ck_json_add_int(b, o, "excused", a->excused);
    ck_json_add_int(b, o, "layers", a->layers);
    if (a->first.layer < 0) {
        ck_json_add_null(b, o, "first");
        return;
    }
    cJSON *f = ck_json_add_object(b, o, "first");
    const char *ln = layer_name(r, a->first.layer);
    if (ln)
        ck_json_add_string(b, f, "layer", ln);
    else
        ck_json_add_null(b, f, "layer");
    ck_json_add_string(b, f, "tensor", a->first.backward ? "grad" : "out");
    ck_json_add_bool(b, f, "recompute", a->first.recompute);
    ck_json_add_int(b, f, "step", a->first.step);
    ck_json_add_int(b, f, "index", a->first.index);
    ck_json_add_string(b, f, "value", a->first.nan ? "NaN" : "Inf");
}

static void add_outcome(ck_json_builder *b, cJSON *root, const ck_result *r)
{
    if (r->first_divergence >= 0 && r->first_divergence < r->n_tensors && r->tensors) {
        const ck_tensor_result *tr = &r->tensors[r->first_divergence];
        cJSON *fd = ck_json_add_object(b, root, "first_divergence");
        ck_json_add_int(b, fd, "tensor_index", r->first_divergence);
        ck_json_add_int(b, fd, "step", tr->step);
        ck_json_add_string(b, fd, "name", tr->name);
        ck_json_add_string(b, fd, "kind", ck_tensor_kind_name(tr->kind));
        ck_json_add_string(b, fd, "verdict", ck_verdict_name(tr->verdict));
    } else {
        ck_json_add_null(b, root, "first_divergence");
    }

    int counts[3] = {0, 0, 0};
    for (int i = 0; i < r->n_tensors && r->tensors; i++)
        if ((unsigned)r->tensors[i].verdict < 3)
            counts[r->tensors[i].verdict]++;
    cJSON *sum = ck_json_add_object(b, root, "summary");
    bool trimmed = r->n_retained_steps > 0; /* a long run: counts over every step */
    ck_json_add_int(b, sum, "tensors", trimmed ? r->tensors_judged : r->n_tensors);
    ck_json_add_int(b, sum, "identical", trimmed ? r->judged_counts[0] : counts[CK_VERDICT_IDENTICAL]);
    ck_json_add_int(b, sum, "close", trimmed ? r->judged_counts[1] : counts[CK_VERDICT_CLOSE]);
    ck_json_add_int(b, sum, "mismatch", trimmed ? r->judged_counts[2] : counts[CK_VERDICT_MISMATCH]);
    if (trimmed) {
        cJSON *kept = ck_json_add_array(b, sum, "steps_kept");
        for (int k = 0; k < r->n_retained_steps; k++)
            ck_json_add_int(b, kept, NULL, r->retained_steps[k]);
    }

    ck_json_add_string(b, root, "verdict", ck_verdict_name(r->verdict));
    ck_json_add_bool(b, root, "expect_met", r->expect_met);
    ck_json_add_bool(b, root, "memory_met", r->memory_met);
    ck_json_add_bool(b, root, "memory_expectation_met", r->memory_expectation_met);
    ck_json_add_bool(b, root, "vacuous", r->vacuous);
    if (r->vacuous) {
        char why[CK_REPORT_LINE_MAX];
        ck_report_vacuous_reason(r, why, sizeof why);
        ck_json_add_string(b, root, "vacuous_reason", why);
    } else
        ck_json_add_null(b, root, "vacuous_reason");
    ck_json_add_string(b, root, "status", ck_report_status(r));

    cJSON *nfin = ck_json_add_object(b, root, "nonfinite");
    ck_json_add_bool(b, nfin, "failed", r->nonfinite_failed);
    const ck_nonfinite_counts *runs[2] = {&r->nonfinite_plain, &r->nonfinite_ckpt};
    static const char *const labels[2] = {"plain", "checkpointed"};
    for (int k = 0; k < 2; k++) {
        cJSON *o = ck_json_add_object(b, nfin, labels[k]);
        ck_json_add_int(b, o, "loss_values", runs[k]->loss_values);
        ck_json_add_int(b, o, "loss_nan", runs[k]->loss_nan);
        ck_json_add_int(b, o, "loss_inf", runs[k]->loss_inf);
        ck_json_add_int(b, o, "grad_values", runs[k]->grad_values);
        ck_json_add_int(b, o, "grad_nan", runs[k]->grad_nan);
        ck_json_add_int(b, o, "grad_inf", runs[k]->grad_inf);
        ck_json_add_int(b, o, "other_nan", runs[k]->other_nan);
        ck_json_add_int(b, o, "other_inf", runs[k]->other_inf);
        ck_json_add_int(b, o, "tensors", runs[k]->tensors);
        ck_json_add_bool(b, o, "all_loss", runs[k]->all_loss);
        ck_json_add_bool(b, o, "all_grads", runs[k]->all_grads);
        add_act_nonfinite(b, o, r, &runs[k]->act);
    }

    char lines[CK_REPORT_MAX_FAILURES][CK_REPORT_LINE_MAX];
    int nf = ck_report_failures(r, lines, CK_REPORT_MAX_FAILURES);
    cJSON *fl = ck_json_add_array(b, root, "failures");
    for (int i = 0; i < nf; i++)
        ck_json_add_string(b, fl, NULL, lines[i]);
}

static void add_finding(ck_json_builder *b, cJSON *parent, const char *key, const ck_result *r,
                        const ck_layer_finding *f)
{
    if (f->layer < 0) {
        ck_json_add_null(b, parent, key);
        return;
    }
    cJSON *o = ck_json_add_object(b, parent, key);
    ck_json_add_string(b, o, "layer", layer_name(r, f->layer));
    ck_json_add_int(b, o, "step", f->step);
    ck_json_add_string(b, o, "verdict", ck_verdict_name(f->verdict));
    ck_json_add_real(b, o, "max_abs", f->m.max_abs);
    ck_json_add_int(b, o, "n_outside", f->m.n_outside);
    ck_json_add_int(b, o, "numel", f->m.numel);
}

/* The `bisect` section: noise floor, segment search, layer localisation, causes. */
static void add_bisect(ck_json_builder *b, cJSON *root, const ck_result *r)
{
    const ck_bisect_result *br = r->bisect;
    if (!br)
        return;
    cJSON *bs = ck_json_add_object(b, root, "bisect");
    cJSON *nf = ck_json_add_object(b, bs, "noise_floor");
    ck_json_add_bool(b, nf, "measured", br->noise_floor_measured);
    if (br->noise_floor_measured) {
        ck_json_add_string(b, nf, "verdict", ck_verdict_name(br->floor_verdict));
        ck_json_add_bool(b, nf, "within_noise_floor", br->within_noise_floor);
        add_finding(b, nf, "nondeterministic_layer", r, &br->nondet);
        if (br->nondet.layer >= 0)
            ck_json_add_string(b, nf, "nondeterministic_in",
                               br->nondet_in_backward ? "backward" : "forward");
        cJSON *diff = ck_json_add_array(b, nf, "differing_tensors");
        for (int k = 0; k < br->n_floor; k++) {
            const ck_tensor_result *t = &br->floor[k];
            if (t->verdict == CK_VERDICT_IDENTICAL)
                continue;
            cJSON *o = ck_json_add_object(b, diff, NULL);
            ck_json_add_string(b, o, "name", t->name);
            ck_json_add_string(b, o, "kind", ck_tensor_kind_name(t->kind));
            ck_json_add_int(b, o, "step", t->step);
            ck_json_add_string(b, o, "verdict", ck_verdict_name(t->verdict));
            ck_json_add_real(b, o, "max_abs", t->m.max_abs);
        }
    }
    cJSON *ss = ck_json_add_object(b, bs, "segment_search");
    ck_json_add_bool(b, ss, "searched", br->searched);
    ck_json_add_int(b, ss, "runs", br->search_runs);
    cJSON *cul = ck_json_add_array(b, ss, "culprit_segments");
    for (int s = 0; br->searched && s < br->n_segments && s < r->n_segments; s++) {
        if (!br->culprit[s])
            continue;
        cJSON *o = ck_json_add_object(b, cul, NULL);
        ck_json_add_int(b, o, "index", s);
        ck_json_add_string(b, o, "first", layer_name(r, r->segments[s].first));
        ck_json_add_string(b, o, "last", layer_name(r, r->segments[s].last));
        ck_json_add_int(b, o, "set", br->culprit_set ? br->culprit_set[s] : 0);
    }
    ck_json_add_int(b, ss, "independent_sets",
                    br->culprit_set ? br->n_culprit_sets : br->searched ? 1 : 0);
    ck_json_add_bool(b, ss, "sets_capped", br->sets_capped);
    if (br->step >= 0)
        ck_json_add_int(b, bs, "step", br->step);
    else
        ck_json_add_null(b, bs, "step");
    add_finding(b, bs, "forward", r, &br->forward);
    add_finding(b, bs, "backward", r, &br->backward);
    if (br->state_layer >= 0) {
        cJSON *st = ck_json_add_object(b, bs, "state");
        ck_json_add_string(b, st, "layer", layer_name(r, br->state_layer));
        ck_json_add_string(b, st, "buffer", br->state_buffer);
        ck_json_add_real(b, st, "max_abs", br->state_m.max_abs);
        if (br->nbt_orig >= 0)
            ck_json_add_int(b, st, "num_batches_tracked_original", br->nbt_orig);
        if (br->nbt_recomp >= 0)
            ck_json_add_int(b, st, "num_batches_tracked_recomputed", br->nbt_recomp);
    } else {
        ck_json_add_null(b, bs, "state");
    }
    if (br->rng.layer >= 0) {
        cJSON *rg = ck_json_add_object(b, bs, "rng");
        ck_json_add_string(b, rg, "layer", layer_name(r, br->rng.layer));
        ck_json_add_int(b, rg, "differing_draws", br->rng.rng_differs);
        ck_json_add_int(b, rg, "numel", br->rng.m.numel);
    } else {
        ck_json_add_null(b, bs, "rng");
    }
    cJSON *causes = ck_json_add_array(b, bs, "causes");
    for (int i = 0; i < br->n_causes; i++) {
        char line[CK_BISECT_LINE];
        ck_bisect_cause_text(r->g, &br->causes[i], line, sizeof line);
        ck_json_add_string(b, causes, NULL, line);
    }
    /* per cause: every layer it holds for (kept by name), and how many more */
    cJSON *cls = ck_json_add_array(b, bs, "cause_layers");
    for (int i = 0; i < br->n_causes; i++) {
        const ck_bisect_cause *c = &br->causes[i];
        cJSON *o = ck_json_add_object(b, cls, NULL);
        cJSON *names = ck_json_add_array(b, o, "layers");
        int n = c->n_layers > 0 ? c->n_layers : c->layer >= 0 ? 1 : 0;
        for (int k = 0; k < n && k < CK_CAUSE_MAX_LAYERS; k++)
            ck_json_add_string(b, names, NULL,
                               layer_name(r, c->n_layers > 0 ? c->layers[k] : c->layer));
        ck_json_add_int(b, o, "more", n > CK_CAUSE_MAX_LAYERS ? n - CK_CAUSE_MAX_LAYERS : 0);
    }
}

/* The `precision` section: loss scaling per step for both runs, the autocast policy, and the
 * low-precision plain run judged against the fp32 plain run. */
static void add_scales(ck_json_builder *b, cJSON *parent, const char *key,
                       const ck_run_summary *run)
{
    cJSON *arr = ck_json_add_array(b, parent, key);
    for (int s = 0; run->scales && s < run->steps; s++) {
        if (!step_listed(run, s))
            continue;
        cJSON *o = ck_json_add_object(b, arr, NULL);
        if (run->steps > CK_FULL_RECORD_STEPS)
            ck_json_add_int(b, o, "step", s);
        ck_json_add_real(b, o, "scale", run->scales[s].scale);
        ck_json_add_bool(b, o, "skipped", run->scales[s].skipped);
    }
}

/* The `tensors` rows of a judgement against another run (vs_fp32, cross_backend): the
 * elementwise tolerance (with_tolerance), the relative-L2 bound when one applies, the
 * verdict, the metrics and, for low-precision runs, the cast statistics. */
static void add_judged_tensors(ck_json_builder *b, cJSON *parent, const ck_tensor_result *ts,
                               int n, bool with_tolerance)
{
    cJSON *arr = ck_json_add_array(b, parent, "tensors");
    for (int k = 0; k < n; k++) {
        const ck_tensor_result *t = &ts[k];
        cJSON *o = ck_json_add_object(b, arr, NULL);
        ck_json_add_string(b, o, "name", t->name);
        ck_json_add_string(b, o, "kind", ck_tensor_kind_name(t->kind));
        ck_json_add_int(b, o, "step", t->step);
        if (with_tolerance) {
            ck_json_add_real(b, o, "rtol", t->rtol);
            ck_json_add_real(b, o, "atol", t->atol);
        }
        if (t->rel_l2_limit >= 0.0)
            ck_json_add_real(b, o, "rel_l2_limit", t->rel_l2_limit);
        if (t->bound_source != CK_BOUND_NONE) {
            ck_json_add_string(b, o, "bound_source", ck_bound_source_name(t->bound_source));
            if (t->bound >= 0.0) {
                ck_json_add_real(b, o, "error", t->error);
                ck_json_add_real(b, o, "bound", t->bound);
            } else {
                ck_json_add_null(b, o, "error");
                ck_json_add_null(b, o, "bound");
            }
            if (t->spread >= 0.0)
                ck_json_add_real(b, o, "spread", t->spread);
            else
                ck_json_add_null(b, o, "spread");
        }
        ck_json_add_string(b, o, "verdict", ck_verdict_name(t->verdict));
        add_metrics(b, o, &t->m, &t->shape);
        if (t->cast_overflow >= 0) {
            cJSON *cs = ck_json_add_object(b, o, "cast");
            ck_json_add_int(b, cs, "overflow", t->cast_overflow);
            ck_json_add_int(b, cs, "flushed_to_zero", t->cast_flushed);
            ck_json_add_int(b, cs, "subnormal", t->cast_subnormal);
        }
    }
}

static void add_precision(ck_json_builder *b, cJSON *root, const ck_result *r)
{
    const ck_case *c = r->cs;
    cJSON *pr = ck_json_add_object(b, root, "precision");
    ck_json_add_string(b, pr, "dtype", ck_dtype_name(r->dtype));
    ck_json_add_string(b, pr, "master_dtype", r->dtype == CK_F64 ? "fp64" : "fp32");
    ck_json_add_string(b, pr, "autocast_recompute", ck_autocast_name(c->autocast));
    cJSON *ls = ck_json_add_object(b, pr, "loss_scale");
    ck_json_add_string(b, ls, "kind", ck_loss_scale_name(c->loss_scale));
    if (c->loss_scale != CK_SCALE_NONE)
        ck_json_add_real(b, ls, "initial", c->loss_scale_value);
    if (c->loss_scale == CK_SCALE_DYNAMIC)
        ck_json_add_int(b, ls, "growth_interval", c->growth_interval);
    add_scales(b, ls, "plain", &r->plain);
    add_scales(b, ls, "checkpointed", &r->ckpt);
    cJSON *rd = ck_json_add_object(b, pr, "recompute_dtype");
    ck_json_add_int(b, rd, "recomputations_in_other_dtype", r->ckpt.recomputed_other_dtype);
    if (r->ckpt.first_other_dtype_layer >= 0) {
        ck_json_add_string(b, rd, "first_layer", layer_name(r, r->ckpt.first_other_dtype_layer));
        ck_json_add_string(b, rd, "original", ck_dtype_name(r->dtype));
        ck_json_add_string(b, rd, "recomputed", "fp32");
    }
    ck_json_add_int(b, ls, "mismatches", r->scale_mismatches);
    if (r->first_scale_mismatch >= 0)
        ck_json_add_int(b, ls, "first_mismatch_step", r->first_scale_mismatch);
    else
        ck_json_add_null(b, ls, "first_mismatch_step");
    ck_json_add_string(b, pr, "precision_check", ck_precision_check_name(r->precision_check));
    if (!r->has_vs_fp32) {
        ck_json_add_null(b, pr, "vs_fp32");
        return;
    }
    cJSON *vs = ck_json_add_object(b, pr, "vs_fp32");
    cJSON *rule = ck_json_add_object(b, vs, "rule");
    ck_json_add_bool(b, rule, "calibrated", r->vs_fp32_calibrated);
    ck_json_add_real(b, rule, "k", CK_PRECISION_K);
    ck_json_add_real(b, rule, "k_after_update", CK_PRECISION_K_UPDATED);
    ck_json_add_int(b, rule, "calibration_runs", CK_PRECISION_CALIB_RUNS);
    ck_json_add_real(b, rule, "unit_roundoff", ck_unit_roundoff(r->dtype));
    ck_json_add_real(b, rule, "noise_spread", CK_PRECISION_NOISE);
    ck_json_add_string(b, vs, "verdict", ck_verdict_name(r->vs_fp32_verdict));
    if (r->vs_fp32_worst >= 0 && r->vs_fp32_worst < r->n_vs_fp32)
        ck_json_add_string(b, vs, "worst", r->vs_fp32[r->vs_fp32_worst].name);
    else
        ck_json_add_null(b, vs, "worst");
    ck_json_add_string(b, vs, "expect", ck_expect_name(ck_case_expect_vs_fp32(c, r->dtype)));
    ck_json_add_bool(b, vs, "expect_met", r->vs_fp32_expect_met);
    if (r->vs_fp32_first >= 0)
        ck_json_add_string(b, vs, "first_mismatch", r->vs_fp32[r->vs_fp32_first].name);
    else
        ck_json_add_null(b, vs, "first_mismatch");
    if (r->vs_fp32_judged > r->n_vs_fp32) {
        /* a long run keeps a bounded selection of rows (judge.h ck_lowp_judge) */
        ck_json_add_int(b, vs, "tensors_judged", r->vs_fp32_judged);
        ck_json_add_string(b, vs, "rows_kept", "step 0, the first mismatching step, the last "
                           "step, and each tensor's worst row");
    }
    add_judged_tensors(b, vs, r->vs_fp32, r->n_vs_fp32, true);
}

/* backend.algo_policy and backend.algorithms: what ran per layer and pass (CUDA). */
static void add_backend_algorithms(ck_json_builder *b, cJSON *backend, const ck_result *r)
{
    if (!r->algo_policy[0])
        return;
    ck_json_add_string(b, backend, "algo_policy", r->algo_policy);
    cJSON *arr = ck_json_add_array(b, backend, "algorithms");
    for (int i = 0; i < r->n_algos; i++) {
        const ck_algo_record *a = &r->algos[i];
        cJSON *o = ck_json_add_object(b, arr, NULL);
        ck_json_add_string(b, o, "layer", a->layer);
        ck_json_add_string(b, o, "op", a->op);
        ck_json_add_string(b, o, "pass", a->pass);
        ck_json_add_string(b, o, "dtype", a->dtype);
        ck_json_add_string(b, o, "engine", a->engine);
        ck_json_add_int(b, o, "algo", a->algo);
        ck_json_add_bool(b, o, "deterministic", a->deterministic);
        ck_json_add_string(b, o, "math", a->math);
        ck_json_add_int(b, o, "workspace_bytes", a->workspace_bytes);
        if (a->time_ms >= 0)
            ck_json_add_real(b, o, "time_ms", a->time_ms);
        ck_json_add_string(b, o, "chosen_by", a->chosen_by);
        ck_json_add_int(b, o, "calls", a->calls);
        ck_json_add_bool(b, o, "changed", a->changed);
    }
    if (r->has_device_memory) {
        cJSON *m = ck_json_add_object(b, backend, "device_memory");
        ck_json_add_int(b, m, "pool_peak_bytes", r->device_memory.pool_peak_bytes);
        ck_json_add_int(b, m, "workspace_peak_bytes", r->device_memory.workspace_peak_bytes);
        ck_json_add_int(b, m, "scratch_peak_bytes", r->device_memory.scratch_peak_bytes);
    }
}

/* The `cross_backend` section of --against. */
static void add_cross_backend(ck_json_builder *b, cJSON *root, const ck_result *r)
{
    if (!r->has_vs_backend)
        return;
    cJSON *cb = ck_json_add_object(b, root, "cross_backend");
    ck_json_add_string(b, cb, "reference", r->vs_backend_name);
    ck_json_add_string(b, cb, "verdict", ck_verdict_name(r->vs_backend_verdict));
    if (r->vs_backend_first >= 0)
        ck_json_add_string(b, cb, "first_mismatch", r->vs_backend[r->vs_backend_first].name);
    else
        ck_json_add_null(b, cb, "first_mismatch");
    add_judged_tensors(b, cb, r->vs_backend, r->n_vs_backend, false);
}

/* The `recompute_check` section of --verify-recompute: every recomputed layer output. */
static void add_recompute_check(ck_json_builder *b, cJSON *root, const ck_result *r)
{
    if (!r->verified_recompute)
        return;
    cJSON *rc = ck_json_add_object(b, root, "recompute_check");
    ck_json_add_int(b, rc, "checked", r->n_recompute_checks);
    ck_json_add_int(b, rc, "differing", r->recompute_mismatches);
    cJSON *arr = ck_json_add_array(b, rc, "layers");
    for (int k = 0; k < r->n_recompute_checks; k++) {
        const ck_recompute_check *c = &r->recompute_checks[k];
        cJSON *o = ck_json_add_object(b, arr, NULL);
        ck_json_add_string(b, o, "layer", layer_name(r, c->layer));
        ck_json_add_int(b, o, "step", c->step);
        ck_json_add_string(b, o, "original_dtype", ck_dtype_name(c->orig_dtype));
        ck_json_add_string(b, o, "recomputed_dtype", ck_dtype_name(c->recomp_dtype));
        ck_json_add_string(b, o, "verdict", ck_verdict_name(c->verdict));
        ck_json_add_real(b, o, "max_abs", c->m.max_abs);
        ck_json_add_int(b, o, "n_outside", c->m.n_outside);
        if (c->rng_differs >= 0)
            ck_json_add_int(b, o, "differing_draws", c->rng_differs);
    }
}

/* The `equivalence` section (SCHEMA.md version 3); nothing for the ordinary comparison. */
static void add_equivalence(ck_json_builder *b, cJSON *root, const ck_result *r,
                                    bool include_wall_time)
{
    if (!ck_report_segmentwise(r))
        return;
    cJSON *o = ck_json_add_object(b, root, "equivalence");
    ck_json_add_string(b, o, "method", "segment-by-segment");
    ck_json_add_string(b, o, "reason",
                       r->segmentwise_reason == CK_SEGMENTWISE_PLAIN_OVER_LIMIT
                           ? "plain_over_memory_limit"
                           : "requested");
    ck_json_add_int(b, o, "plain_predicted_peak_bytes", r->plain_predicted_peak_bytes);
    if (r->segmentwise_reason == CK_SEGMENTWISE_PLAIN_OVER_LIMIT)
        ck_json_add_int(b, o, "memory_limit_bytes", r->memory_limit_bytes);
    else
        ck_json_add_null(b, o, "memory_limit_bytes");
    ck_json_add_int(b, o, "shown_run", r->shown_segment_run);
    cJSON *runs = ck_json_add_array(b, o, "runs");
    for (int k = 0; k < r->n_segment_runs; k++) {
        const ck_segment_run *sr = &r->segment_runs[k];
        cJSON *ro = ck_json_add_object(b, runs, NULL);
        ck_json_add_int(b, ro, "segment_kept", sr->segment);
        ck_json_add_string(b, ro, "label", sr->label);
        ck_json_add_int(b, ro, "peak_activation_bytes", sr->peak_activation_bytes);
        ck_json_add_int(b, ro, "predicted_peak_activation_bytes", sr->predicted_peak_bytes);
        ck_json_add_int(b, ro, "recomputed_layers", sr->recomputed_layers);
        ck_json_add_string(b, ro, "verdict", ck_verdict_name(sr->verdict));
        ck_json_add_int(b, ro, "tensors", sr->tensors_judged);
        ck_json_add_int(b, ro, "identical", sr->counts[0]);
        ck_json_add_int(b, ro, "close", sr->counts[1]);
        ck_json_add_int(b, ro, "mismatch", sr->counts[2]);
        ck_json_add_int(b, ro, "scale_mismatches", sr->scale_mismatches);
        if (sr->first_step >= 0) {
            cJSON *fd = ck_json_add_object(b, ro, "first_divergence");
            ck_json_add_int(b, fd, "step", sr->first_step);
            ck_json_add_string(b, fd, "name", sr->first_name);
            ck_json_add_string(b, fd, "kind", ck_tensor_kind_name(sr->first_kind));
        } else {
            ck_json_add_null(b, ro, "first_divergence");
        }
        if (include_wall_time)
            ck_json_add_real(b, ro, "wall_time_s", sr->wall_time_s);
    }
}

cJSON *ck_report_to_json(const ck_result *r, const ck_report_meta *meta)
{
    ck_json_builder b = {false};
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;

    ck_json_add_string(&b, root, "schema", CK_REPORT_SCHEMA);
    ck_json_add_int(&b, root, "schema_version", ck_report_segmentwise(r)
                                                     ? CK_REPORT_SCHEMA_VERSION_SEGMENTWISE
                                                     : CK_REPORT_SCHEMA_VERSION);
    cJSON *tool = ck_json_add_object(&b, root, "tool");
    ck_json_add_string(&b, tool, "name", "ckpt-harness");
    ck_json_add_string(&b, tool, "version",
                       meta && meta->tool_version ? meta->tool_version : "unknown");
    add_run_metadata(&b, root, meta);
    add_case(&b, root, r, meta);
    cJSON *backend = ck_json_add_object(&b, root, "backend");
    ck_json_add_string(&b, backend, "name", r->backend);
    ck_json_add_string(&b, backend, "device", r->backend_device);
    ck_json_add_string(&b, backend, "versions", r->backend_versions);
    if (r->backend_threads > 0) { /* a multi-threaded CPU backend (schema version 2) */
        ck_json_add_int(&b, backend, "threads", r->backend_threads);
        ck_json_add_string(&b, backend, "isa", r->backend_isa);
    }
    add_backend_algorithms(&b, backend, r);
    ck_json_add_string(&b, root, "dtype", ck_dtype_name(r->dtype));
    add_config(&b, root, r);
    cJSON *runs = ck_json_add_object(&b, root, "runs");
    if (ck_report_segmentwise(r)) { /* no plain run: the segment run whose rows are shown */
        ck_json_add_null(&b, runs, "plain");
        add_run(&b, runs, "segment_kept", &r->plain, meta);
    } else {
        add_run(&b, runs, "plain", &r->plain, meta);
    }
    add_run(&b, runs, "checkpointed", &r->ckpt, meta);
    add_memory(&b, root, r);
    add_equivalence(&b, root, r, meta && meta->include_wall_time);
    add_tensors(&b, root, r);
    add_outcome(&b, root, r);
    add_precision(&b, root, r);
    add_cross_backend(&b, root, r);
    add_bisect(&b, root, r);
    add_recompute_check(&b, root, r);

    if (b.failed) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

cJSON *ck_report_metrics_json(const ck_metrics *m, const ck_shape *shape)
{
    ck_json_builder b = {false};
    cJSON *holder = cJSON_CreateObject();
    if (!holder)
        return NULL;
    add_metrics(&b, holder, m, shape);
    cJSON *mo = b.failed ? NULL : cJSON_DetachItemFromObjectCaseSensitive(holder, "metrics");
    cJSON_Delete(holder);
    return mo;
}

char *ck_report_json_string(const ck_result *r, const ck_report_meta *meta)
{
    char *out = NULL;
    cJSON *root = ck_report_to_json(r, meta);
    if (!root)
        goto done;
    /* valid UTF-8 whatever the case's path or names held; freed with free() */
    out = ck_json_print_clean(root, NULL);
done:
    cJSON_Delete(root);
    return out;
}

/* ---------------------------------------------------------------------------------- */
/* Atomic write                                                                        */
/* ---------------------------------------------------------------------------------- */

ck_status ck_report_write_json(const ck_result *r, const ck_report_meta *meta, const char *path,
                               ck_error *err)
{
    char *text = ck_report_json_string(r, meta);
    if (!text)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory while building the report", path);
    ck_status st = ck_write_text_atomic(path, text, err);
    free(text);
    return st;
}
