/*
 * The default low-precision judgement: per-tensor bounds calibrated from the model itself
 * (precision_judge.h).
 */
#include "harness/verify/precision_judge.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "harness/model/case.h"

const char *ck_bound_source_name(ck_bound_source s)
{
    switch (s) {
    case CK_BOUND_NONE: return "";
    case CK_BOUND_CALIBRATED: return "calibrated";
    case CK_BOUND_NORM_RELATIVE: return "norm-relative";
    case CK_BOUND_CASE: return "case tolerance";
    case CK_BOUND_OVERRIDE: return "override";
    case CK_BOUND_SKIPPED: return "skipped step";
    }
    return "?";
}

double ck_unit_roundoff(ck_dtype dt)
{
    return dt == CK_F16 ? ldexp(1.0, -11) : dt == CK_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -24);
}

static double value_at(ck_dtype dt, const void *data, int64_t i)
{
    switch (dt) {
    case CK_F32: return ((const float *)data)[i];
    case CK_F64: return ((const double *)data)[i];
    case CK_I32: return ((const int32_t *)data)[i];
    case CK_I64: return (double)((const int64_t *)data)[i];
    default: return 0.0;
    }
}

/* ||a - ref|| and ||ref|| over pairs where both are finite (non-finite pairs are the
 * metrics' business: an unmatched one fails on its own). Scaled sums: no overflow. */
static void l2_norms(ck_dtype dt, int64_t n, const void *a, const void *ref, double *diff,
                     double *refn)
{
    double ds = 0.0, dss = 1.0, rs = 0.0, rss = 1.0;
    for (int64_t i = 0; i < n; i++) {
        double x = value_at(dt, a, i), y = value_at(dt, ref, i);
        if (!isfinite(x) || !isfinite(y))
            continue;
        double d = fabs(x - y), r = fabs(y);
        if (d > 0.0) {
            if (d > ds) { dss = 1.0 + dss * (ds / d) * (ds / d); ds = d; }
            else dss += (d / ds) * (d / ds);
        }
        if (r > 0.0) {
            if (r > rs) { rss = 1.0 + rss * (rs / r) * (rs / r); rs = r; }
            else rss += (r / rs) * (r / rs);
        }
    }
    *diff = ds * sqrt(dss);
    *refn = rs * sqrt(rss);
}

/* ||a - ref|| alone: l2_norms's first result, by the same arithmetic */
static double l2_diff(ck_dtype dt, int64_t n, const void *a, const void *ref)
{
    double ds = 0.0, dss = 1.0;
    for (int64_t i = 0; i < n; i++) {
        double x = value_at(dt, a, i), y = value_at(dt, ref, i);
        if (!isfinite(x) || !isfinite(y))
            continue;
        double d = fabs(x - y);
        if (d > 0.0) {
            if (d > ds) { dss = 1.0 + dss * (ds / d) * (ds / d); ds = d; }
            else dss += (d / ds) * (d / ds);
        }
    }
    return ds * sqrt(dss);
}

/* ||ref|| over its finite values: l2_norms(ref, ref)'s second result, by the same
 * arithmetic */
static double l2_norm(ck_dtype dt, int64_t n, const void *ref)
{
    double rs = 0.0, rss = 1.0;
    for (int64_t i = 0; i < n; i++) {
        double y = value_at(dt, ref, i);
        if (!isfinite(y))
            continue;
        double r = fabs(y);
        if (r > 0.0) {
            if (r > rs) { rss = 1.0 + rss * (rs / r) * (rs / r); rs = r; }
            else rss += (r / rs) * (r / rs);
        }
    }
    return rs * sqrt(rss);
}

void ck_calib_distances_of(const ck_record_entry *ref, const ck_record_entry *const *calib,
                           int n_calib, bool with_norm, ck_calib_distances *out)
{
    const int64_t n = ck_shape_numel(&ref->shape);
    out->n = 0;
    for (int j = 0; j < n_calib && j < CK_PRECISION_CALIB_RUNS; j++)
        for (int i = -1; i < j; i++)
            out->d[out->n++] = l2_diff(ref->dtype, n, calib[j]->data,
                                       i < 0 ? ref->data : calib[i]->data);
    out->has_norm = with_norm;
    out->norm = with_norm ? l2_norm(ref->dtype, n, ref->data) : 0.0;
}

double ck_step_grad_norm_of(const ck_record *fp32, const ck_calib_distances *dist, int step)
{
    double g = 0.0;
    for (int k = 0; k < fp32->n; k++)
        if (fp32->e[k].kind == CK_KIND_GRAD && fp32->e[k].step == step)
            g = hypot(g, dist[k].norm);
    return g;
}

double ck_step_spread_of(const ck_record *fp32, const ck_calib_distances *dist, int n_calib,
                         int s)
{
    double out = 0.0;
    if (s == 0)
        return 0.0;
    for (int p = 0; p < n_calib * (n_calib + 1) / 2 && p < CK_PRECISION_PAIRS; p++) {
        double dsum = 0.0, rsum = 0.0;
        for (int k = 0; k < fp32->n; k++) {
            const ck_record_entry *e = &fp32->e[k];
            if (e->kind != CK_KIND_GRAD || e->step != s)
                continue;
            dsum += dist[k].d[p] * dist[k].d[p];
            rsum += dist[k].norm * dist[k].norm;
        }
        double sp = rsum > 0.0 ? sqrt(dsum / rsum) : 0.0;
        if (sp > out)
            out = sp;
    }
    return out;
}

double ck_step_grad_norm_at(const ck_record *rec, int step)
{
    double g = 0.0;
    for (int k = 0; k < rec->n; k++) {
        const ck_record_entry *e = &rec->e[k];
        if (e->kind != CK_KIND_GRAD || e->step != step)
            continue;
        double d, r;
        l2_norms(e->dtype, ck_shape_numel(&e->shape), e->data, e->data, &d, &r);
        g = hypot(g, r);
    }
    return g;
}

void ck_step_grad_norms(const ck_record *rec, double *out)
{
    for (int s = 0; s < rec->steps; s++)
        out[s] = 0.0;
    for (int k = 0; k < rec->n; k++) {
        const ck_record_entry *e = &rec->e[k];
        if (e->kind != CK_KIND_GRAD || e->step < 0 || e->step >= rec->steps)
            continue;
        double d, r;
        l2_norms(e->dtype, ck_shape_numel(&e->shape), e->data, e->data, &d, &r);
        out[e->step] = hypot(out[e->step], r);
    }
}

static bool is_float(ck_dtype dt)
{
    return dt == CK_F32 || dt == CK_F64;
}

double ck_step_spread_at(const ck_record *fp32, const ck_record *calib, int n_calib, int s)
{
    double out = 0.0;
    if (s == 0)
        return 0.0;
    for (int j = 0; j < n_calib; j++) {
        for (int i = -1; i < j; i++) {
            double dsum = 0.0, rsum = 0.0;
            for (int k = 0; k < fp32->n; k++) {
                const ck_record_entry *e = &fp32->e[k];
                if (e->kind != CK_KIND_GRAD || e->step != s || calib[j].n != fp32->n)
                    continue;
                double d, r, rr;
                int64_t n = ck_shape_numel(&e->shape);
                l2_norms(e->dtype, n, calib[j].e[k].data, i < 0 ? e->data : calib[i].e[k].data,
                         &d, &r);
                l2_norms(e->dtype, n, e->data, e->data, &r, &rr);
                dsum += d * d;
                rsum += rr * rr;
            }
            double sp = rsum > 0.0 ? sqrt(dsum / rsum) : 0.0;
            if (sp > out)
                out = sp;
        }
    }
    return out;
}

void ck_step_spreads(const ck_record *fp32, const ck_record *calib, int n_calib, double *out)
{
    for (int s = 0; s < fp32->steps; s++)
        out[s] = ck_step_spread_at(fp32, calib, n_calib, s);
}

void ck_precision_judge_tensor(const ck_case *c, ck_dtype low, const ck_record_entry *ref,
                               const ck_record_entry *const *calib, int n_calib,
                               const ck_record_entry *lowe,
                               double step_grad_norm, double step_spread,
                               const ck_precision_override *ov,
                               ck_tensor_result *tr)
{
    ck_calib_distances dist;
    ck_calib_distances_of(ref, calib, n_calib, false, &dist);
    ck_precision_judge_measured(c, low, ref, &dist, lowe, step_grad_norm, step_spread, ov, tr);
}

void ck_precision_judge_measured(const ck_case *c, ck_dtype low, const ck_record_entry *ref,
                                 const ck_calib_distances *dist, const ck_record_entry *lowe,
                                 double step_grad_norm, double step_spread,
                                 const ck_precision_override *ov, ck_tensor_result *tr)
{
    int64_t n = ck_shape_numel(&ref->shape);
    tr->error = tr->bound = tr->spread = -1.0;
    tr->rel_l2_limit = -1.0;
    bool case_tol = false;
    ck_case_precision_tolerance(c, low, ck_tensor_kind_name(ref->kind), ref->name, &tr->rtol,
                                &tr->atol, &tr->rel_l2_limit, &case_tol);
    if (ov && ov->set) {
        tr->bound_source = CK_BOUND_OVERRIDE;
        tr->rtol = ov->rtol;
        tr->atol = ov->atol;
        tr->rel_l2_limit = ov->rel_l2;
    } else if (case_tol) {
        tr->bound_source = CK_BOUND_CASE;
    } else {
        tr->bound_source = is_float(ref->dtype) ? CK_BOUND_CALIBRATED : CK_BOUND_CASE;
    }
    /* one comparison, by the tolerance that applies (the override's, else the case's) */
    tr->verdict = ck_compare(ref->dtype, n, lowe->data, ref->data, tr->rtol, tr->atol, &tr->m);
    bool unmatched = tr->m.max_ulp == UINT64_MAX;
    if (tr->bound_source != CK_BOUND_CALIBRATED) {
        /* a tolerance the user wrote: elementwise, or by relative L2 when one is given */
        if (tr->rel_l2_limit >= 0.0 && tr->verdict != CK_VERDICT_IDENTICAL) {
            tr->error = tr->m.rel_l2;
            tr->bound = tr->rel_l2_limit;
            tr->verdict = tr->m.rel_l2 <= tr->rel_l2_limit && !unmatched ? CK_VERDICT_CLOSE
                                                                          : CK_VERDICT_MISMATCH;
        } else if (tr->rel_l2_limit >= 0.0) {
            tr->error = 0.0;
            tr->bound = tr->rel_l2_limit;
        }
        return;
    }
    double u = ck_unit_roundoff(low);
    double diff, refn, cdiff = 0.0;
    l2_norms(ref->dtype, n, lowe->data, ref->data, &diff, &refn);
    /* the spread: the largest distance between any two of the runs that differ only by
     * rounding-sized noise (the fp32 run and the calibration runs) */
    for (int p = 0; p < dist->n; p++)
        if (dist->d[p] > cdiff || isnan(dist->d[p]))
            cdiff = dist->d[p];
    double spread = refn > 0.0 ? cdiff / refn : INFINITY;
    double own_spread = spread;
    if (step_spread > spread)
        spread = step_spread;
    if (refn > 0.0 && own_spread < CK_PRECISION_NOISE) {
        tr->error = diff / refn;
        tr->spread = spread;
    } else {
        tr->bound_source = CK_BOUND_NORM_RELATIVE;
        double gn = step_grad_norm > 0.0 ? step_grad_norm : refn;
        if (gn > 0.0) {
            tr->error = diff / gn;
            tr->spread = cdiff / gn;
        } else {
            /* no scale at all: the reference and its step are exactly zero */
            tr->error = diff > 0.0 ? INFINITY : 0.0;
            tr->spread = 0.0;
        }
    }
    double k = ref->step == 0 && ref->kind != CK_KIND_PARAM ? CK_PRECISION_K : CK_PRECISION_K_UPDATED;
    tr->bound = k * (tr->spread > u ? tr->spread : u);
    if (tr->verdict == CK_VERDICT_IDENTICAL)
        return;
    tr->verdict = !unmatched && tr->error <= tr->bound ? CK_VERDICT_CLOSE : CK_VERDICT_MISMATCH;
}
