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


bool ck_expectation_met(ck_expect e, ck_verdict v)
{
    switch (e) {
    case CK_EXPECT_IDENTICAL: return v == CK_VERDICT_IDENTICAL;
    case CK_EXPECT_CLOSE: return v != CK_VERDICT_MISMATCH;
    case CK_EXPECT_MISMATCH: return v == CK_VERDICT_MISMATCH;
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
    s->wall_time_s = rec->wall_time_s;
    s->step_wall_s = rec->step_wall_s;
    rec->step_wall_s = NULL;
    s->mem = rec->mem;
}

/* Compares rec against ref entry by entry; low_vs_fp32 selects the precision tolerances
 * (else the case's). */
static ck_status compare_entries(const ck_graph *g, const ck_record *ref, const ck_record *rec,
                                 ck_dtype low_vs_fp32, ck_tensor_result **out, int *n_out,
                                 int *first, ck_verdict *worst, ck_error *err)
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
        if (strcmp(p->name, q->name) != 0 || p->kind != q->kind || p->dtype != q->dtype ||
            !ck_shape_equal(&p->shape, &q->shape))
            return ck_fail(err, CK_ERR_INTERNAL, "runs recorded %s and %s at position %d", p->name,
                           q->name, k);
        tr->rel_l2_limit = -1.0;
        if (low_vs_fp32 == CK_F16 || low_vs_fp32 == CK_BF16) {
            ck_case_precision_tolerance(c, low_vs_fp32, ck_tensor_kind_name(p->kind), p->name,
                                        &tr->rtol, &tr->atol, &tr->rel_l2_limit);
        } else {
            tr->rtol = c->rtol;
            tr->atol = c->atol;
        }
        tr->verdict = ck_compare(p->dtype, ck_shape_numel(&p->shape), q->data, p->data, tr->rtol,
                                 tr->atol, &tr->m);
        if (tr->rel_l2_limit >= 0.0 && tr->verdict != CK_VERDICT_IDENTICAL) {
            /* the norm criterion: the tensor as a whole within rel_l2 of the reference, every
             * non-finite value matched */
            bool ok = tr->m.rel_l2 <= tr->rel_l2_limit && tr->m.max_ulp != UINT64_MAX;
            tr->verdict = ok ? CK_VERDICT_CLOSE : CK_VERDICT_MISMATCH;
        }
        if (tr->verdict != CK_VERDICT_IDENTICAL && *first < 0)
            *first = k;
        if (tr->verdict > *worst)
            *worst = tr->verdict;
    }
    return CK_OK;
}

ck_status ck_compare_records(const ck_graph *g, const ck_record *plain, const ck_record *ckpt,
                             ck_result *res, ck_error *err)
{
    return compare_entries(g, plain, ckpt, CK_F32, &res->tensors, &res->n_tensors,
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
    ck_record ours, theirs;
    memset(&ours, 0, sizeof ours);
    memset(&theirs, 0, sizeof theirs);
    ck_status st = ck_train(b, g, NULL, dtype, NULL, &ours, err);
    if (st == CK_OK)
        st = ck_train(ref, g, NULL, dtype, NULL, &theirs, err);
    if (st == CK_OK)
        st = compare_entries(g, &theirs, &ours, CK_F32, &res->vs_backend, &res->n_vs_backend,
                             &res->vs_backend_first, &res->vs_backend_verdict, err);
    if (st == CK_OK) {
        double limit = dtype == CK_F16 ? 1e-2 : dtype == CK_BF16 ? 5e-2 : 1e-5;
        res->vs_backend_verdict = CK_VERDICT_IDENTICAL;
        res->vs_backend_first = -1;
        for (int k = 0; k < res->n_vs_backend; k++) {
            ck_tensor_result *t = &res->vs_backend[k];
            t->rel_l2_limit = limit;
            const ck_tol_pattern *own = tensor_pattern(g->cs, t);
            if (own && t->verdict != CK_VERDICT_IDENTICAL) {
                /* the case's own tolerance for this tensor (tolerance.tensors), e.g. the
                 * gradient of a conv bias that a batchnorm cancels to rounding noise:
                 * relative L2 cannot judge a tensor that is zero in exact arithmetic */
                t->rtol = own->rtol;
                t->atol = own->atol;
                t->rel_l2_limit = own->rel_l2;
                t->verdict = ck_compare(t->dtype, ck_shape_numel(&t->shape), ours.e[k].data,
                                        theirs.e[k].data, t->rtol, t->atol, &t->m);
                if (own->rel_l2 >= 0.0 && t->verdict != CK_VERDICT_IDENTICAL)
                    t->verdict = t->m.rel_l2 <= own->rel_l2 && t->m.max_ulp != UINT64_MAX
                                     ? CK_VERDICT_CLOSE
                                     : CK_VERDICT_MISMATCH;
            } else if (t->verdict != CK_VERDICT_IDENTICAL)
                t->verdict = t->m.rel_l2 <= limit && t->m.max_ulp != UINT64_MAX
                                 ? CK_VERDICT_CLOSE
                                 : CK_VERDICT_MISMATCH;
            if (t->verdict == CK_VERDICT_MISMATCH && res->vs_backend_first < 0)
                res->vs_backend_first = k;
            if (t->verdict > res->vs_backend_verdict)
                res->vs_backend_verdict = t->verdict;
        }
        res->has_vs_backend = true;
        snprintf(res->vs_backend_name, sizeof res->vs_backend_name, "%s", ref->name);
        ck_result_judge(res);
    }
    ck_record_free(&ours);
    ck_record_free(&theirs);
    if (st != CK_OK)
        ck_error_prefix(err, "%s: cross-backend check against %s", g->cs->path, ref->name);
    return st;
}

ck_status ck_compare_vs_fp32(const ck_graph *g, ck_dtype low, const ck_record *fp32,
                             const ck_record *lowrec, ck_result *res, ck_error *err)
{
    ck_status st = compare_entries(g, fp32, lowrec, low, &res->vs_fp32, &res->n_vs_fp32,
                                   &res->vs_fp32_first, &res->vs_fp32_verdict, err);
    if (st != CK_OK)
        return st;
    res->has_vs_fp32 = true;
    res->vs_fp32_first = -1;
    for (int k = 0; k < res->n_vs_fp32; k++) {
        ck_tensor_result *tr = &res->vs_fp32[k];
        if (tr->verdict == CK_VERDICT_MISMATCH && res->vs_fp32_first < 0)
            res->vs_fp32_first = k;
        int step = tr->step < lowrec->steps ? tr->step : 0;
        cast_stats(g, low, &fp32->e[k], &lowrec->e[k], lowrec->scales[step].scale, tr);
    }
    return CK_OK;
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
    res->pass = res->expect_met && res->memory_expectation_met && res->vs_fp32_expect_met &&
                (!res->has_vs_backend || res->vs_backend_verdict != CK_VERDICT_MISMATCH);
}
