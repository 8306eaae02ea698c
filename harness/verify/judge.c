/*
 * Judging run records: plain vs checkpointed, low precision vs fp32, one backend vs
 * another, and whether a result meets its case's expectations (judge.h).
 */
#include "harness/verify/judge.h"

#include <fnmatch.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/half.h"
#include "harness/model/op_def.h"


bool ck_expectation_met(ck_expect e, ck_verdict v)
{
    switch (e) {
    case CK_EXPECT_IDENTICAL: return v == CK_VERDICT_IDENTICAL;
    case CK_EXPECT_CLOSE: return v != CK_VERDICT_MISMATCH;
    case CK_EXPECT_MISMATCH: return v == CK_VERDICT_MISMATCH;
    case CK_EXPECT_ANY: return true;
    }
    return false;
}

void ck_fill_summary(ck_run_summary *s, const char *label, ck_record *rec)
{
    s->label = label;
    s->steps = rec->steps;
    s->losses = rec->losses; /* ownership moves to the result */
    rec->losses = NULL;
    s->scales = rec->scales;
    rec->scales = NULL;
    s->peak_activation_bytes = rec->peak_activation_bytes;
    s->recomputed_layers = rec->recomputed_layers;
    s->recomputed_other_dtype = rec->recomputed_other_dtype;
    s->first_other_dtype_layer = rec->first_other_dtype_layer;
    s->act_nonfinite = rec->act_nonfinite;
    s->wall_time_s = rec->wall_time_s;
    s->step_wall_s = rec->step_wall_s;
    rec->step_wall_s = NULL;
    s->train_wall_s = rec->train_wall_s;
    rec->train_wall_s = NULL;
    s->mem = rec->mem;
}

/* Compares rec against ref entry by entry with the case's tolerance; rows for a judgement
 * against fp32 are re-judged by the caller. */
static const ck_tol_pattern *tensor_pattern(const ck_case *c, const ck_tensor_result *t);

static ck_status compare_entries(const ck_graph *g, const ck_record *ref, const ck_record *rec,
                                 bool measure, ck_tensor_result **out, int *n_out, int *first,
                                 ck_verdict *worst, ck_error *err)
{
    const ck_case *c = g->cs;
    if (ref->n != rec->n)
        return ck_fail(err, CK_ERR_INTERNAL, "runs recorded %d and %d tensors", ref->n, rec->n);
    ck_tensor_result *t = calloc((size_t)(ref->n ? ref->n : 1), sizeof *t);
    if (!t)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory comparing runs");
    *out = t;
    *n_out = 0;
    *first = -1;
    *worst = CK_VERDICT_IDENTICAL;
    for (int k = 0; k < ref->n; k++) {
        const ck_record_entry *p = &ref->e[k], *q = &rec->e[k];
        ck_tensor_result *tr = &t[k];
        tr->name = strdup(p->name);
        if (!tr->name)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory comparing runs");
        *n_out = k + 1;
        tr->kind = p->kind;
        tr->step = p->step;
        tr->dtype = p->dtype;
        tr->shape = p->shape;
        tr->cast_overflow = tr->cast_flushed = tr->cast_subnormal = -1;
        tr->error = tr->bound = tr->spread = -1.0;
        if (strcmp(p->name, q->name) != 0 || p->kind != q->kind || p->dtype != q->dtype ||
            !ck_shape_equal(&p->shape, &q->shape))
            return ck_fail(err, CK_ERR_INTERNAL, "runs recorded %s and %s at position %d", p->name,
                           q->name, k);
        tr->rel_l2_limit = -1.0;
        tr->rtol = c->rtol;
        tr->atol = c->atol;
        if (!measure) /* the caller measures each row by its own rule */
            continue;
        tr->verdict = ck_compare(p->dtype, ck_shape_numel(&p->shape), q->data, p->data, tr->rtol,
                                 tr->atol, &tr->m);
        if (tr->verdict != CK_VERDICT_IDENTICAL && *first < 0)
            *first = k;
        if (tr->verdict > *worst)
            *worst = tr->verdict;
    }
    return CK_OK;
}

/* cast_stats is defined below */
static void cast_stats(const ck_graph *g, ck_dtype low, const ck_record_entry *f32e,
                       const ck_record_entry *lowe, double scale, ck_tensor_result *tr);

void ck_step_judge_init(ck_step_judge *j, const ck_case *c, ck_dtype low_vs_fp32,
                        double rel_l2_limit, ck_verdict diverged_at)
{
    memset(j, 0, sizeof *j);
    j->low_vs_fp32 = low_vs_fp32;
    j->rel_l2_limit = rel_l2_limit;
    j->keep_all = c->steps <= CK_FULL_RECORD_STEPS;
    j->last_step = c->steps - 1;
    j->diverged_at = diverged_at;
    j->first = -1;
    j->first_divergent_step = -1;
    j->worst = CK_VERDICT_IDENTICAL;
}

static void free_results(ck_tensor_result *t, int n)
{
    for (int i = 0; i < n && t; i++)
        free(t[i].name);
    free(t);
}

void ck_step_judge_free(ck_step_judge *j)
{
    free_results(j->t, j->n);
    j->t = NULL;
    j->n = j->cap = 0;
}

/* Element i of a recorded float tensor (fp32 or fp64 host copies) as a double. */
static double entry_value(const ck_record_entry *e, int64_t i)
{
    return e->dtype == CK_F64 ? ((const double *)e->data)[i]
           : e->dtype == CK_F32 ? (double)((const float *)e->data)[i]
                                : 0.0;
}

/* ||e||_2 and ||a - e||_2 over finite pairs (fp32/fp64 entries; 0 otherwise). */
static void entry_norms(const ck_record_entry *ref, const ck_record_entry *a, double *ref_norm,
                        double *diff_norm)
{
    double r2 = 0.0, d2 = 0.0;
    int64_t n = ck_shape_numel(&ref->shape);
    for (int64_t i = 0; i < n; i++) {
        double x = entry_value(ref, i), y = entry_value(a, i);
        if (!isfinite(x) || !isfinite(y))
            continue;
        r2 += x * x;
        d2 += (y - x) * (y - x);
    }
    *ref_norm = sqrt(r2);
    *diff_norm = sqrt(d2);
}

ck_status ck_step_judge_add(ck_step_judge *j, const ck_graph *g, const ck_record *ref,
                            const ck_record *rec, int step, ck_error *err)
{
    ck_tensor_result *t = NULL;
    int n = 0, first = -1;
    ck_verdict worst;
    ck_status st = compare_entries(g, ref, rec, true, &t, &n, &first, &worst, err);
    if (st != CK_OK) {
        free_results(t, n);
        return st;
    }
    /* G: the norm of all this step's reference gradients. Under a relative-L2 bound, a
     * gradient that is rounding noise next to G (below CK_NOISE_OF_STEP x G: a conv bias
     * feeding a training batchnorm is zero in exact arithmetic) is judged by
     * ||a - ref|| <= bound x G instead, as its own norm means nothing */
    double step_g2 = 0.0;
    for (int k = 0; j->rel_l2_limit > 0.0 && k < ref->n; k++)
        if (ref->e[k].kind == CK_KIND_GRAD) {
            double rn, dn;
            entry_norms(&ref->e[k], &ref->e[k], &rn, &dn);
            step_g2 += rn * rn;
        }
    double step_g = sqrt(step_g2);
    int first_here = -1;
    for (int k = 0; k < n; k++) {
        ck_tensor_result *tr = &t[k];
        if (j->rel_l2_limit > 0.0) {
            tr->rel_l2_limit = j->rel_l2_limit;
            const ck_tol_pattern *own = tensor_pattern(g->cs, tr);
            if (own && tr->verdict != CK_VERDICT_IDENTICAL) {
                /* the case's own tolerance for this tensor (tolerance.tensors), e.g. the
                 * gradient of a conv bias that a batchnorm cancels to rounding noise:
                 * relative L2 cannot judge a tensor that is zero in exact arithmetic */
                tr->rtol = own->rtol;
                tr->atol = own->atol;
                tr->rel_l2_limit = own->rel_l2;
                tr->verdict = ck_compare(tr->dtype, ck_shape_numel(&tr->shape), rec->e[k].data,
                                         ref->e[k].data, tr->rtol, tr->atol, &tr->m);
                if (own->rel_l2 >= 0.0 && tr->verdict != CK_VERDICT_IDENTICAL)
                    tr->verdict = tr->m.rel_l2 <= own->rel_l2 && tr->m.max_ulp != UINT64_MAX
                                      ? CK_VERDICT_CLOSE
                                      : CK_VERDICT_MISMATCH;
            } else if (tr->verdict != CK_VERDICT_IDENTICAL) {
                bool ok = tr->m.rel_l2 <= j->rel_l2_limit;
                double rn = 0.0, dn = 0.0;
                if (!ok && tr->kind == CK_KIND_GRAD && step_g > 0.0) {
                    entry_norms(&ref->e[k], &rec->e[k], &rn, &dn);
                    if (rn < CK_NOISE_OF_STEP * step_g)
                        ok = dn <= j->rel_l2_limit * step_g;
                }
                tr->verdict = ok && tr->m.max_ulp != UINT64_MAX ? CK_VERDICT_CLOSE
                                                                : CK_VERDICT_MISMATCH;
            }
        }
        j->counts[tr->verdict]++;
        if (tr->verdict > j->worst)
            j->worst = tr->verdict;
        if (tr->verdict >= j->diverged_at && first_here < 0)
            first_here = k;
    }
    j->judged += n;
    ck_step_judge_count_nonfinite(j, ref, rec, step, t, n);
    bool first_divergence = first_here >= 0 && j->first_divergent_step < 0;
    if (first_divergence)
        j->first_divergent_step = step;
    bool keep = j->keep_all || step == 0 || step == j->last_step || first_divergence;
    if (!keep) {
        free_results(t, n);
        return CK_OK;
    }
    if (!j->keep_all && j->n_retained < 3)
        j->retained[j->n_retained++] = step;
    if (j->n + n > j->cap) {
        int nc = j->cap ? j->cap : 16;
        while (nc < j->n + n)
            nc *= 2;
        ck_tensor_result *grown = realloc(j->t, (size_t)nc * sizeof *grown);
        if (!grown) {
            free_results(t, n);
            return ck_fail(err, CK_ERR_NOMEM, "out of memory keeping step %d's results", step);
        }
        j->t = grown;
        j->cap = nc;
    }
    if (first_divergence && j->first < 0)
        j->first = j->n + first_here;
    memcpy(j->t + j->n, t, (size_t)n * sizeof *t);
    j->n += n;
    free(t); /* the names moved into j->t */
    return CK_OK;
}

ck_status ck_compare_records(const ck_graph *g, const ck_record *plain, const ck_record *ckpt,
                             ck_result *res, ck_error *err)
{
    return compare_entries(g, plain, ckpt, true, &res->tensors, &res->n_tensors,
                           &res->first_divergence, &res->verdict, err);
}

/* Whether layer `name`'s parameters are cast to the low dtype (linear/conv: precision.md). */
static bool param_is_cast(const ck_graph *g, const char *name)
{
    const char *dot = strrchr(name, '.');
    size_t len = dot ? (size_t)(dot - name) : strlen(name);
    for (int i = 0; i < g->n; i++)
        if (strlen(g->nodes[i].spec->name) == len && strncmp(g->nodes[i].spec->name, name, len) == 0)
            return ck_op_casts_params(g->nodes[i].op.kind);
    return false;
}

/* Where the low dtype went wrong, per tensor. Gradients: inf/NaN (overflow), zero where
 * fp32 is not (flushed), and values that were subnormal in the low dtype before unscaling
 * (|g * scale| below the smallest normal). Cast parameters: the master cast to the low
 * dtype, classified exactly. */
static void cast_stats(const ck_graph *g, ck_dtype low, const ck_record_entry *f32e,
                       const ck_record_entry *lowe, double scale, ck_tensor_result *tr)
{
    if (lowe->dtype != CK_F32)
        return;
    const float *lv = lowe->data, *fv = f32e->data;
    int64_t n = ck_shape_numel(&lowe->shape);
    double min_normal = low == CK_F16 ? 6.103515625e-05 : 1.1754943508222875e-38;
    if (lowe->kind == CK_KIND_GRAD) {
        tr->cast_overflow = tr->cast_flushed = tr->cast_subnormal = 0;
        for (int64_t i = 0; i < n; i++) {
            if (!isfinite(lv[i]))
                tr->cast_overflow++;
            else if (lv[i] == 0.0f && fv[i] != 0.0f)
                tr->cast_flushed++;
            else if (lv[i] != 0.0f && fabs((double)lv[i] * scale) < min_normal)
                tr->cast_subnormal++;
        }
    } else if (lowe->kind == CK_KIND_PARAM && param_is_cast(g, lowe->name)) {
        tr->cast_overflow = tr->cast_flushed = tr->cast_subnormal = 0;
        for (int64_t i = 0; i < n; i++) {
            ck_cast_class k = low == CK_F16 ? ck_f16_classify(lv[i]) : ck_bf16_classify(lv[i]);
            tr->cast_overflow += k == CK_CAST_OVERFLOW;
            tr->cast_flushed += k == CK_CAST_FLUSHED;
            tr->cast_subnormal += k == CK_CAST_SUBNORMAL;
        }
    }
}

/* The case's tolerance.tensors entry for t (matched as ck_case_precision_tolerance does:
 * "kind:name" or "name", first match), or NULL. */
static const ck_tol_pattern *tensor_pattern(const ck_case *c, const ck_tensor_result *t)
{
    char qualified[256];
    snprintf(qualified, sizeof qualified, "%s:%s", ck_tensor_kind_name(t->kind), t->name);
    for (int i = 0; i < c->n_tol_patterns; i++)
        if (fnmatch(c->tol_patterns[i].pattern, qualified, 0) == 0 ||
            fnmatch(c->tol_patterns[i].pattern, t->name, 0) == 0)
            return &c->tol_patterns[i];
    return NULL;
}

ck_status ck_compare_backends(ck_backend *b, ck_backend *ref, const ck_graph *g, ck_dtype dtype,
                              ck_result *res, ck_error *err)
{
    return ck_compare_backends_ex(b, ref, g, dtype, NULL, res, err);
}

ck_status ck_compare_backends_ex(ck_backend *b, ck_backend *ref, const ck_graph *g,
                                 ck_dtype dtype, ck_training_log *log, ck_result *res,
                                 ck_error *err)
{
    /* both backends' plain runs in lockstep, judged step by step (bounded memory) */
    ck_record ours, theirs;
    ck_trainer to, tt;
    bool have_o = false, have_t = false;
    double limit = dtype == CK_F16 ? 1e-2 : dtype == CK_BF16 ? 5e-2 : 1e-5;
    ck_step_judge j;
    ck_step_judge_init(&j, g->cs, CK_F32, limit, CK_VERDICT_MISMATCH);
    memset(&ours, 0, sizeof ours);
    memset(&theirs, 0, sizeof theirs);
    ck_training t_ours = {.kind = CK_TRAINING_PLAIN, .b = b, .g = g, .dtype = dtype, .log = log};
    ck_training t_theirs = {.kind = CK_TRAINING_OTHER_BACKEND, .b = ref, .g = g, .dtype = dtype,
                            .log = log};
    ck_status st = ck_training_begin(&t_ours, &to, &ours, err);
    have_o = st == CK_OK;
    if (st == CK_OK)
        st = ck_training_begin(&t_theirs, &tt, &theirs, err);
    have_t = have_o && st == CK_OK;
    for (int step = 0; st == CK_OK && step < g->cs->steps; step++) {
        if ((st = ck_trainer_step(&to, step, err)) == CK_OK &&
            (st = ck_trainer_step(&tt, step, err)) == CK_OK)
            st = ck_step_judge_add(&j, g, &theirs, &ours, step, err);
        ck_record_drop_entries(&ours);
        ck_record_drop_entries(&theirs);
    }
    if (have_o)
        ck_trainer_free(&to);
    if (have_t)
        ck_trainer_free(&tt);
    if (st == CK_OK) {
        res->vs_backend = j.t;
        res->n_vs_backend = j.n;
        j.t = NULL;
        j.n = 0;
        res->vs_backend_first = j.first;
        res->vs_backend_verdict = j.worst;
        res->has_vs_backend = true;
        snprintf(res->vs_backend_name, sizeof res->vs_backend_name, "%s", ref->name);
        ck_result_judge(res);
    }
    ck_step_judge_free(&j);
    ck_record_free(&ours);
    ck_record_free(&theirs);
    if (st != CK_OK)
        ck_error_prefix(err, "%s: cross-backend check against %s", g->cs->path, ref->name);
    return st;
}

/* ---------------------------------------------------------------------------------- */
/* Low precision against fp32, step by step                                           */
/* ---------------------------------------------------------------------------------- */

void ck_lowp_judge_init(ck_lowp_judge *j, const ck_case *c, ck_dtype low, int n_calib,
                        const ck_precision_override *ov)
{
    memset(j, 0, sizeof *j);
    j->low = low;
    j->n_calib = n_calib > CK_PRECISION_CALIB_RUNS ? CK_PRECISION_CALIB_RUNS : n_calib;
    j->ov = ov;
    j->keep_all = c->steps <= CK_FULL_RECORD_STEPS;
    j->last_step = c->steps - 1;
    j->first_step = -1;
}

void ck_lowp_judge_free(ck_lowp_judge *j)
{
    free_results(j->t, j->n);
    free_results(j->tw, j->n_tw);
    free(j->pos);
    free(j->tw_w);
    free(j->tw_mm);
    memset(j, 0, sizeof *j);
}

/* The worst-row weight: mismatches first, then the largest error / bound. */
static double row_weight(const ck_tensor_result *tr)
{
    double w = tr->bound > 0.0 ? tr->error / tr->bound
               : (double)tr->m.n_outside / (double)(tr->m.numel > 0 ? tr->m.numel : 1);
    return isnan(w) ? INFINITY : w;
}

static bool worse_row(bool mm, double w, bool than_mm, double than_w)
{
    return (mm && !than_mm) || (mm == than_mm && w > than_w);
}

static ck_status keep_row(ck_lowp_judge *j, const ck_tensor_result *tr, int pos, ck_error *err)
{
    if (j->n == j->cap) {
        int nc = j->cap ? j->cap * 2 : 64;
        ck_tensor_result *t = realloc(j->t, (size_t)nc * sizeof *t);
        if (!t)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory judging against fp32");
        j->t = t;
        int *p = realloc(j->pos, (size_t)nc * sizeof *p);
        if (!p)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory judging against fp32");
        j->pos = p;
        j->cap = nc;
    }
    j->t[j->n] = *tr;
    j->pos[j->n] = pos;
    j->n++;
    return CK_OK;
}

ck_status ck_lowp_judge_add(ck_lowp_judge *j, const ck_graph *g, const ck_record *fp32,
                            const ck_record *calib, const ck_record *lowrec, int step,
                            ck_error *err)
{
    const ck_record_entry *ce[CK_PRECISION_CALIB_RUNS];
    ck_tensor_result *t = NULL;
    int n = 0, first = -1;
    ck_verdict worst;
    /* the rows' metrics come from the judgement's own tolerances below (ck_precision_judge_*) */
    ck_status st = compare_entries(g, fp32, lowrec, false, &t, &n, &first, &worst, err);
    for (int c = 0; c < j->n_calib && st == CK_OK; c++)
        if (calib[c].n != fp32->n)
            st = ck_fail(err, CK_ERR_INTERNAL, "the calibration run recorded %d tensors, fp32 %d",
                         calib[c].n, fp32->n);
    if (st == CK_OK && !j->keep_all && !j->tw) {
        /* long runs: each tensor's worst row, by its place in a step's entries */
        j->n_tw = n;
        j->tw = calloc((size_t)n + 1, sizeof *j->tw);
        j->tw_w = calloc((size_t)n + 1, sizeof *j->tw_w);
        j->tw_mm = calloc((size_t)n + 1, sizeof *j->tw_mm);
        if (!j->tw || !j->tw_w || !j->tw_mm)
            st = ck_fail(err, CK_ERR_NOMEM, "out of memory judging against fp32");
        for (int k = 0; k < n && st == CK_OK; k++)
            j->tw_w[k] = -1.0;
    }
    if (st == CK_OK && !j->keep_all && n != j->n_tw)
        st = ck_fail(err, CK_ERR_INTERNAL, "step %d recorded %d tensors, step 0 %d", step, n,
                     j->n_tw);
    if (st != CK_OK) {
        free_results(t, n);
        return st;
    }
    /* every entry's distances between the rounding-only runs, measured once: the step's
     * spread and gradient norm need the gradients', each tensor's judgement its own */
    ck_calib_distances *dist = malloc(((size_t)fp32->n + 1) * sizeof *dist);
    if (!dist) {
        free_results(t, n);
        return ck_fail(err, CK_ERR_NOMEM, "out of memory judging against fp32");
    }
    for (int k = 0; k < fp32->n; k++) {
        for (int c = 0; c < j->n_calib; c++) {
            ce[c] = &calib[c].e[k];
            if (strcmp(ce[c]->name, fp32->e[k].name) != 0 || ce[c]->dtype != fp32->e[k].dtype) {
                free(dist);
                free_results(t, n);
                return ck_fail(err, CK_ERR_INTERNAL, "the calibration run recorded %s at %d, "
                               "fp32 %s", ce[c]->name, k, fp32->e[k].name);
            }
        }
        const ck_record_entry *e = &fp32->e[k];
        const bool grad_of_step = e->kind == CK_KIND_GRAD && e->step == step;
        const bool judged_by_spread = e->dtype == CK_F32 || e->dtype == CK_F64 || grad_of_step;
        ck_calib_distances_of(e, ce, judged_by_spread ? j->n_calib : 0, grad_of_step, &dist[k]);
    }
    double gnorm = ck_step_grad_norm_of(fp32, dist, step);
    double spread = ck_step_spread_of(fp32, dist, j->n_calib, step);
    bool step_mismatch = false;
    for (int k = 0; k < n; k++) {
        ck_tensor_result *tr = &t[k];
        ck_precision_judge_measured(g->cs, j->low, &fp32->e[k], &dist[k], &lowrec->e[k], gnorm,
                                    spread, j->ov, tr);
        if (tr->kind == CK_KIND_GRAD && tr->step >= 0 && tr->step < lowrec->steps &&
            lowrec->scales[tr->step].skipped) {
            /* the loss scaler saw inf/NaN here and skipped the update (the fp32 runs skipped
             * it too): these gradients are the overflow scaling exists to absorb */
            tr->bound_source = CK_BOUND_SKIPPED;
            tr->error = tr->bound = tr->spread = -1.0;
            if (tr->verdict != CK_VERDICT_IDENTICAL)
                tr->verdict = CK_VERDICT_CLOSE;
        }
        int sstep = tr->step < lowrec->steps ? tr->step : 0;
        cast_stats(g, j->low, &fp32->e[k], &lowrec->e[k], lowrec->scales[sstep].scale, tr);
        if (tr->kind == CK_KIND_GRAD && tr->cast_flushed > 0)
            j->flushed_grads += tr->cast_flushed;
        if (tr->verdict > j->verdict)
            j->verdict = tr->verdict;
        step_mismatch = step_mismatch || tr->verdict == CK_VERDICT_MISMATCH;
    }
    free(dist);
    j->judged += n;
    bool first_mismatch = step_mismatch && j->first_step < 0;
    if (first_mismatch)
        j->first_step = step;
    bool keep = j->keep_all || step == 0 || step == j->last_step || first_mismatch;
    for (int k = 0; k < n && st == CK_OK; k++) {
        ck_tensor_result *tr = &t[k];
        if (!j->keep_all) {
            bool mm = tr->verdict == CK_VERDICT_MISMATCH;
            double w = row_weight(tr);
            if (worse_row(mm, w, j->tw_mm[k], j->tw_w[k])) {
                free(j->tw[k].name);
                j->tw[k] = *tr;
                if (!(j->tw[k].name = strdup(tr->name)))
                    st = ck_fail(err, CK_ERR_NOMEM, "out of memory judging against fp32");
                j->tw_w[k] = w;
                j->tw_mm[k] = mm;
            }
        }
        if (keep && st == CK_OK) {
            if ((st = keep_row(j, tr, k, err)) == CK_OK)
                tr->name = NULL; /* moved */
        }
    }
    free_results(t, n);
    return st;
}

typedef struct {
    ck_tensor_result t;
    int pos;
} keyed_row;

static int cmp_keyed(const void *a, const void *b)
{
    const keyed_row *x = a, *y = b;
    if (x->t.step != y->t.step)
        return (x->t.step > y->t.step) - (x->t.step < y->t.step);
    return (x->pos > y->pos) - (x->pos < y->pos);
}

ck_status ck_lowp_judge_finish(ck_lowp_judge *j, ck_result *res, ck_error *err)
{
    if (!j->keep_all && j->tw) {
        /* each tensor's worst row joins the kept steps' rows, in step order */
        for (int k = 0; k < j->n_tw; k++) {
            const ck_tensor_result *w = &j->tw[k];
            if (!w->name || w->step == 0 || w->step == j->last_step || w->step == j->first_step)
                continue;
            ck_status st = keep_row(j, w, k, err);
            if (st != CK_OK)
                return st;
            j->tw[k].name = NULL; /* moved */
        }
        keyed_row *kr = malloc(((size_t)j->n + 1) * sizeof *kr);
        if (!kr)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory judging against fp32");
        for (int i = 0; i < j->n; i++)
            kr[i] = (keyed_row){j->t[i], j->pos[i]};
        qsort(kr, (size_t)j->n, sizeof *kr, cmp_keyed);
        for (int i = 0; i < j->n; i++)
            j->t[i] = kr[i].t, j->pos[i] = kr[i].pos;
        free(kr);
    }
    res->has_vs_fp32 = true;
    res->vs_fp32_calibrated = j->n_calib > 0;
    res->vs_fp32_verdict = j->verdict;
    res->vs_fp32_first = -1;
    res->vs_fp32_worst = -1;
    double worst = -1.0;
    bool worst_mm = false;
    for (int k = 0; k < j->n; k++) {
        const ck_tensor_result *tr = &j->t[k];
        bool mm = tr->verdict == CK_VERDICT_MISMATCH;
        if (mm && res->vs_fp32_first < 0)
            res->vs_fp32_first = k;
        double w = row_weight(tr);
        if (worse_row(mm, w, worst_mm, worst)) {
            worst = w;
            worst_mm = mm;
            res->vs_fp32_worst = k;
        }
    }
    res->vs_fp32 = j->t;
    res->n_vs_fp32 = j->n;
    res->vs_fp32_judged = j->judged;
    res->vs_fp32_flushed_grads = j->flushed_grads;
    j->t = NULL;
    j->n = j->cap = 0;
    return CK_OK;
}

/* The entries of step `step` in a whole record (entries are in step order). */
static ck_record step_view_of(const ck_record *rec, int step, int *from)
{
    ck_record v = *rec;
    int a = *from, b = a;
    while (b < rec->n && rec->e[b].step == step)
        b++;
    v.e = rec->e + a;
    v.n = b - a;
    *from = b;
    return v;
}

ck_status ck_compare_vs_fp32(const ck_graph *g, ck_dtype low, const ck_record *fp32,
                             const ck_record *calib, int n_calib, const ck_record *lowrec,
                             const ck_precision_override *ov, ck_result *res, ck_error *err)
{
    ck_lowp_judge j;
    ck_lowp_judge_init(&j, g->cs, low, n_calib, ov);
    ck_record cv[CK_PRECISION_CALIB_RUNS];
    int af = 0, lf = 0, cf[CK_PRECISION_CALIB_RUNS] = {0};
    ck_status st = CK_OK;
    while (af < fp32->n && st == CK_OK) {
        int s = fp32->e[af].step;
        ck_record fv = step_view_of(fp32, s, &af), lv = step_view_of(lowrec, s, &lf);
        for (int c = 0; c < j.n_calib; c++)
            cv[c] = step_view_of(&calib[c], s, &cf[c]);
        st = ck_lowp_judge_add(&j, g, &fv, cv, &lv, s, err);
    }
    if (st == CK_OK)
        st = ck_lowp_judge_finish(&j, res, err);
    ck_lowp_judge_free(&j);
    return st;
}

/* Adds tensor t's NaN/Inf values to c[0] (the plain run, the reference side) and c[1]
 * (the checkpointed run); skipped[r]: run r's loss scaler skipped t's step. */
static void count_nonfinite(const ck_tensor_result *t, const bool skipped[2],
                            ck_nonfinite_counts c[2])
{
    int64_t nan[2] = {t->m.nan_ref, t->m.nan_a}, inf[2] = {t->m.inf_ref, t->m.inf_a};
    for (int r = 0; r < 2; r++) {
        if (nan[r] + inf[r] > 0)
            c[r].tensors++;
        if (t->kind == CK_KIND_LOSS) {
            c[r].loss_values += t->m.numel;
            c[r].loss_nan += nan[r];
            c[r].loss_inf += inf[r];
        } else if (t->kind == CK_KIND_GRAD) {
            c[r].grad_values += t->m.numel;
            c[r].grad_nan += nan[r];
            c[r].grad_inf += inf[r];
            if (skipped[r])
                c[r].skipped_step_grads += nan[r] + inf[r];
        } else {
            c[r].other_nan += nan[r];
            c[r].other_inf += inf[r];
        }
    }
}

static bool step_skipped(const ck_scale_step *scales, int steps, int step)
{
    return scales && step >= 0 && step < steps && scales[step].skipped;
}

void ck_step_judge_count_nonfinite(ck_step_judge *j, const ck_record *ref, const ck_record *rec,
                                   int step, const ck_tensor_result *t, int n)
{
    bool skipped[2] = {step_skipped(ref->scales, ref->steps, step),
                       step_skipped(rec->scales, rec->steps, step)};
    for (int k = 0; k < n; k++)
        count_nonfinite(&t[k], skipped, j->nonfinite);
}

void ck_judge_nonfinite(ck_result *res)
{
    ck_nonfinite_counts *runs[2] = {&res->nonfinite_plain, &res->nonfinite_ckpt};
    if (!res->nonfinite_counted) {
        ck_nonfinite_counts c[2];
        memset(c, 0, sizeof c);
        for (int k = 0; k < res->n_tensors; k++) {
            const ck_tensor_result *t = &res->tensors[k];
            bool skipped[2] = {step_skipped(res->plain.scales, res->plain.steps, t->step),
                               step_skipped(res->ckpt.scales, res->ckpt.steps, t->step)};
            count_nonfinite(t, skipped, c);
        }
        *runs[0] = c[0];
        *runs[1] = c[1];
    }
    runs[0]->act = res->plain.act_nonfinite;
    runs[1]->act = res->ckpt.act_nonfinite;
    bool expected = res->cs && res->cs->expect_nonfinite;
    res->nonfinite_failed = false;
    for (int r = 0; r < 2; r++) {
        ck_nonfinite_counts *c = runs[r];
        c->all_loss = c->loss_values > 0 && c->loss_nan + c->loss_inf == c->loss_values;
        c->all_grads = c->grad_values > 0 && c->grad_nan + c->grad_inf == c->grad_values;
        /* a NaN or an Inf anywhere (weights, gradients, loss, buffers) fails the case, whatever
         * later ops did with it, unless the case expects it; gradients on a step the loss
         * scaler skipped are the overflow it exists to absorb */
        int64_t unexcused = c->loss_nan + c->loss_inf + c->grad_nan + c->grad_inf -
                            c->skipped_step_grads + c->other_nan + c->other_inf +
                            c->act.nan + c->act.inf;
        res->nonfinite_failed = res->nonfinite_failed || c->all_loss || c->all_grads ||
                                (unexcused > 0 && !expected);
    }
}

void ck_result_judge(ck_result *res)
{
    const ck_case *c = res->cs;
    /* a recomputed output that differs from its original is a difference in its own right,
     * even when every gradient happens to agree */
    if (res->recompute_mismatches > 0 || res->scale_mismatches > 0)
        res->verdict = CK_VERDICT_MISMATCH;
    res->expect_met = ck_expectation_met(ck_case_expect(c, res->dtype), res->verdict);
    res->memory_expectation_met = res->memory_met == c->expect_memory_met;
    res->vs_fp32_expect_met = !res->has_vs_fp32 ||
                              ck_expectation_met(ck_case_expect_vs_fp32(c, res->dtype), res->vs_fp32_verdict);
    ck_judge_nonfinite(res);
    bool precision_gates = res->precision_check == CK_PRECISION_CHECK_FAIL;
    res->pass = !res->nonfinite_failed && res->expect_met && res->memory_expectation_met &&
                (!precision_gates || res->vs_fp32_expect_met) &&
                (!res->has_vs_backend || res->vs_backend_verdict != CK_VERDICT_MISMATCH);
    /* vacuity: a comparison of runs whose gradients carry no information is no pass */
    const ck_vacuity *vp = &res->plain.vacuity, *vc = &res->ckpt.vacuity;
    res->vacuous = vp->vacuous || vc->vacuous;
    if (res->vacuous != c->expect_vacuous)
        res->pass = false;
}
