/*
 * Human-readable report text: the summary table, the --quiet line, and the failure and
 * memory sentences that the JSON report embeds verbatim (so both say the same thing).
 *
 * Everything printed is a function of the result alone: no addresses, times or locale
 * dependent spellings (non-finite numbers are spelled by hand, since printf may write
 * "-nan").
 */
#include "reports/report.h"

#include "harness/verify/judge.h"

#include "harness/verify/bisect.h"
#include "harness/verify/precision_cause.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------- */
/* Small formatters                                                                    */
/* ---------------------------------------------------------------------------------- */

char *ck_format_bytes(int64_t bytes, char *buf, size_t n)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes > -1024 && bytes < 1024) {
        snprintf(buf, n, "%" PRId64 " B", bytes);
        return buf;
    }
    double v = (double)bytes / 1024.0;
    size_t u = 0;
    while (fabs(v) >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, n, "%.2f %s", v, units[u]);
    return buf;
}

/* A short number for prose and tables; fmt is a printf conversion for one double. */
static char *fmt_num(double x, const char *fmt, char *buf, size_t n)
{
    if (isnan(x))
        snprintf(buf, n, "nan");
    else if (isinf(x))
        snprintf(buf, n, "%s", x > 0 ? "inf" : "-inf");
    else
        snprintf(buf, n, fmt, x);
    return buf;
}

/* A fraction as a percentage, "35.0%"; "n/a" when it is not a number (no plain peak). */
static char *fmt_pct(double frac, char *buf, size_t n)
{
    if (!isfinite(frac))
        snprintf(buf, n, "n/a");
    else
        snprintf(buf, n, "%.1f%%", frac * 100.0 + 0.0);
    return buf;
}

static char *fmt_ulp(uint64_t u, char *buf, size_t n)
{
    if (u == UINT64_MAX)
        snprintf(buf, n, "inf"); /* an unmatched NaN or infinity */
    else
        snprintf(buf, n, "%" PRIu64, u);
    return buf;
}

static const char *case_name(const ck_result *r)
{
    return r->cs && r->cs->name ? r->cs->name : "?";
}

static const char *tensor_name(const ck_tensor_result *t)
{
    return t->name ? t->name : "?";
}

/* Appends printf-formatted text at *used, never past n; keeps buf terminated. */
static void append(char *buf, size_t n, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void append(char *buf, size_t n, size_t *used, const char *fmt, ...)
{
    if (*used >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *used, n - *used, fmt, ap);
    va_end(ap);
    if (w > 0)
        *used = *used + (size_t)w < n ? *used + (size_t)w : n;
}

/* ---------------------------------------------------------------------------------- */
/* Failure sentences                                                                   */
/* ---------------------------------------------------------------------------------- */

typedef struct {
    int identical, close, mismatch;
} verdict_counts;

static verdict_counts count_verdicts(const ck_result *r)
{
    verdict_counts c = {0, 0, 0};
    for (int i = 0; i < r->n_tensors; i++) {
        switch (r->tensors[i].verdict) {
        case CK_VERDICT_IDENTICAL: c.identical++; break;
        case CK_VERDICT_CLOSE: c.close++; break;
        case CK_VERDICT_MISMATCH: c.mismatch++; break;
        }
    }
    return c;
}

static const ck_tensor_result *first_with_verdict(const ck_result *r, ck_verdict v)
{
    for (int i = 0; i < r->n_tensors; i++)
        if (r->tensors[i].verdict == v)
            return &r->tensors[i];
    return NULL;
}

static const ck_tensor_result *first_divergent(const ck_result *r)
{
    if (r->first_divergence >= 0 && r->first_divergence < r->n_tensors)
        return &r->tensors[r->first_divergence];
    for (int i = 0; i < r->n_tensors; i++)
        if (r->tensors[i].verdict != CK_VERDICT_IDENTICAL)
            return &r->tensors[i];
    return NULL;
}

/* "step 0: grad fc1.weight (max_abs 0.031, 5 of 100 elements outside, first at [0, 3])" */
static void describe_tensor(const ck_tensor_result *t, char *buf, size_t n, size_t *used)
{
    char a[32], u[32];
    append(buf, n, used, "step %d: %s %s (max_abs %s", t->step, ck_tensor_kind_name(t->kind),
           tensor_name(t), fmt_num(t->m.max_abs, "%.3g", a, sizeof a));
    if (t->verdict != CK_VERDICT_MISMATCH) {
        append(buf, n, used, ", max_ulp %s)", fmt_ulp(t->m.max_ulp, u, sizeof u));
        return;
    }
    append(buf, n, used, ", %" PRId64 " of %" PRId64 " elements outside", t->m.n_outside,
           t->m.numel);
    if (t->m.first_bad >= 0 && t->m.first_bad < t->m.numel && t->shape.ndim > 0 &&
        t->shape.ndim <= CK_MAX_DIMS) {
        int64_t idx[CK_MAX_DIMS];
        ck_shape_unflatten(&t->shape, t->m.first_bad, idx);
        append(buf, n, used, ", first at [");
        for (int d = 0; d < t->shape.ndim; d++)
            append(buf, n, used, "%s%" PRId64, d ? ", " : "", idx[d]);
        append(buf, n, used, "]");
    }
    if (t->m.max_ulp == UINT64_MAX && ck_dtype_is_float(t->dtype))
        append(buf, n, used,
               ", NaN/Inf checkpointed %" PRId64 "/%" PRId64 " vs plain %" PRId64 "/%" PRId64,
               t->m.nan_a, t->m.inf_a, t->m.nan_ref, t->m.inf_ref);
    append(buf, n, used, ")");
}

static void verdict_failure(const ck_result *r, char *buf, size_t n)
{
    size_t used = 0;
    verdict_counts c = count_verdicts(r);
    int differ = c.close + c.mismatch;
    const ck_tensor_result *first = first_divergent(r);
    bool has_expect = r->cs != NULL;
    ck_expect e = has_expect ? ck_case_expect(r->cs, r->dtype) : CK_EXPECT_CLOSE;

    if (r->verdict == CK_VERDICT_MISMATCH && (!has_expect || e != CK_EXPECT_MISMATCH)) {
        append(buf, n, &used, "mismatch: %d of %d tensors outside tolerance", c.mismatch,
               r->n_tensors);
        if (first) {
            append(buf, n, &used, "; first divergence at ");
            describe_tensor(first, buf, n, &used);
        }
        const ck_tensor_result *mis = first_with_verdict(r, CK_VERDICT_MISMATCH);
        if (mis && mis != first) {
            append(buf, n, &used, "; first mismatch at ");
            describe_tensor(mis, buf, n, &used);
        }
    } else if (r->verdict == CK_VERDICT_CLOSE && has_expect && e == CK_EXPECT_IDENTICAL) {
        append(buf, n, &used,
               "close but expected identical: %d of %d tensors differ bitwise, all within "
               "tolerance",
               differ, r->n_tensors);
        if (first) {
            append(buf, n, &used, "; first divergence at ");
            describe_tensor(first, buf, n, &used);
        }
    } else if (has_expect && e == CK_EXPECT_MISMATCH && r->verdict == CK_VERDICT_IDENTICAL) {
        append(buf, n, &used, "expected mismatch but runs were identical");
    } else if (has_expect && e == CK_EXPECT_MISMATCH && r->verdict == CK_VERDICT_CLOSE) {
        append(buf, n, &used,
               "expected mismatch but all tensors were within tolerance (%d of %d differ "
               "bitwise)",
               differ, r->n_tensors);
    } else {
        append(buf, n, &used, "verdict %s does not meet expect %s", ck_verdict_name(r->verdict),
               has_expect ? ck_expect_name(e) : "?");
    }
}

void ck_report_memory_message(const ck_result *r, char *buf, size_t n)
{
    char saved[32], plain[32], ckpt[32], min[32];
    size_t used = 0;
    fmt_pct(r->memory_saving, saved, sizeof saved);
    ck_format_bytes(ck_report_plain_peak(r), plain, sizeof plain);
    ck_format_bytes(r->ckpt.peak_activation_bytes, ckpt, sizeof ckpt);
    append(buf, n, &used,
           "checkpointing saved %s of peak activation memory (plain %s%s, checkpointed %s)",
           saved, plain, ck_report_segmentwise(r) ? " predicted" : "", ckpt);
    if (r->cs && r->cs->has_min_memory_saving)
        append(buf, n, &used, "; the case requires at least %s",
               fmt_pct(r->cs->min_memory_saving, min, sizeof min));
    else
        append(buf, n, &used, "; the case sets no minimum");
}

static void memory_failure(const ck_result *r, char *buf, size_t n)
{
    size_t used = 0;
    char msg[CK_REPORT_LINE_MAX];
    ck_report_memory_message(r, msg, sizeof msg);
    if (!r->memory_met)
        append(buf, n, &used, "memory: %s", msg);
    else
        /* A canary of useless checkpointing (expect_memory unmet) that saved enough: the
         * thing the canary plants was not there. */
        append(buf, n, &used, "memory: expected the saving to fall short, but %s", msg);
}

void ck_report_recompute_failure(const ck_result *r, char *buf, size_t n)
{
    const ck_recompute_check *first = NULL;
    for (int k = 0; k < r->n_recompute_checks && !first; k++)
        if (r->recompute_checks[k].verdict != CK_VERDICT_IDENTICAL)
            first = &r->recompute_checks[k];
    if (!first) {
        snprintf(buf, n, "recomputation: every recomputed output equals its original");
        return;
    }
    const ck_node *nd = &r->g->nodes[first->layer];
    snprintf(buf, n,
             "recomputation: %d of %d recomputed layer outputs differ from their originals; "
             "first: `%s` (%s) at step %d, max_abs %.3g, %lld of %lld elements",
             r->recompute_mismatches, r->n_recompute_checks, nd->spec->name, nd->spec->op_name,
             first->step, first->m.max_abs,
             (long long)(first->m.n_outside ? first->m.n_outside : first->m.numel),
             (long long)first->m.numel);
}

const char *ck_report_status(const ck_result *r)
{
    if (r->pass)
        return "pass";
    return r->vacuous && !(r->cs && r->cs->expect_vacuous) ? "vacuous" : "fail";
}

/* The judgement against fp32 in one clause: "vs fp32 (calibrated): grad fc0.weight step 0
 * error 1 > bound 0.0039" for its worst row. */
static void vs_fp32_worst_clause(const ck_result *r, char *buf, size_t n)
{
    const ck_tensor_result *t =
        r->vs_fp32_worst >= 0 && r->vs_fp32_worst < r->n_vs_fp32 ? &r->vs_fp32[r->vs_fp32_worst]
                                                                 : NULL;
    if (!t) {
        snprintf(buf, n, "no tensors");
    } else if (t->bound >= 0.0) {
        snprintf(buf, n, "%s %s step %d: error %.3g %s bound %.3g (%s)",
                 ck_tensor_kind_name(t->kind), t->name, t->step, t->error,
                 t->error <= t->bound ? "<=" : ">", t->bound, ck_bound_source_name(t->bound_source));
    } else {
        snprintf(buf, n, "%s %s step %d: %lld of %lld outside rtol %g atol %g (%s)",
                 ck_tensor_kind_name(t->kind), t->name, t->step, (long long)t->m.n_outside,
                 (long long)t->m.numel, t->rtol, t->atol, ck_bound_source_name(t->bound_source));
    }
}

/* "; activations: NaN 16, Inf 0 in 1 layer, first in the output of layer conv1 (conv1:out),
 * step 0, element 3 (NaN)" */
static void append_act_nonfinite(char *buf, size_t n, size_t *used, const ck_act_nonfinite *a,
                                 const ck_graph *g, bool first_item)
{
    if (a->nan + a->inf == 0)
        return;
    append(buf, n, used, "%sactivations: NaN %lld, Inf %lld in %d layer%s", first_item ? "" : "; ",
           (long long)a->nan, (long long)a->inf, a->layers, a->layers == 1 ? "" : "s");
    if (a->first.layer < 0)
        return;
    const char *what = a->first.backward ? "grad" : "out";
    const char *where = a->first.backward ? "output gradient"
                        : a->first.recompute ? "recomputed output" : "output";
    if (g && a->first.layer < g->n && g->nodes[a->first.layer].spec) {
        const char *ln = g->nodes[a->first.layer].spec->name;
        append(buf, n, used, ", first in the %s of layer %s (%s:%s)", where, ln, ln, what);
    } else
        append(buf, n, used, ", first in the %s of layer #%d", where, a->first.layer);
    append(buf, n, used, ", step %d, element %lld (%s)", a->first.step,
           (long long)a->first.index, a->first.nan ? "NaN" : "Inf");
}

void ck_report_nonfinite_message(const char *label, const ck_nonfinite_counts *c,
                                 const ck_graph *g, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    int64_t loss_bad = c->loss_nan + c->loss_inf, grad_bad = c->grad_nan + c->grad_inf;
    int64_t act_bad = c->act.nan + c->act.inf;
    if (loss_bad + grad_bad + c->other_nan + c->other_inf + act_bad == 0)
        return;
    append(buf, n, &used, "%s run: ", label);
    if (loss_bad)
        append(buf, n, &used, "loss NaN/Inf %s(%lld of %lld values: NaN %lld, Inf %lld)",
               c->all_loss ? "at every step " : "", (long long)loss_bad,
               (long long)c->loss_values, (long long)c->loss_nan, (long long)c->loss_inf);
    if (grad_bad)
        append(buf, n, &used, "%sgradients %s(%lld of %lld values NaN/Inf: NaN %lld, Inf %lld)",
               loss_bad ? "; " : "", c->all_grads ? "all NaN/Inf " : "", (long long)grad_bad,
               (long long)c->grad_values, (long long)c->grad_nan, (long long)c->grad_inf);
    if (c->other_nan + c->other_inf)
        append(buf, n, &used, "%sparameters/buffers: NaN %lld, Inf %lld",
               loss_bad + grad_bad ? "; " : "", (long long)c->other_nan, (long long)c->other_inf);
    if (loss_bad + grad_bad + c->other_nan + c->other_inf)
        append(buf, n, &used, "; %d tensor%s affected", c->tensors, c->tensors == 1 ? "" : "s");
    append_act_nonfinite(buf, n, &used, &c->act, g,
                         loss_bad + grad_bad + c->other_nan + c->other_inf == 0);
}

void ck_report_vacuity_text(const ck_vacuity *v, char *buf, size_t n)
{
    double frac = v->elements > 0 ? (double)(v->zero + v->subnormal) / (double)v->elements : 0.0;
    switch (v->reason) {
    case CK_VACUITY_LOSS_ZERO:
    case CK_VACUITY_LOSS_NONFINITE:
        snprintf(buf, n, "the loss at step %d is %s", v->step,
                 v->reason == CK_VACUITY_LOSS_ZERO ? "exactly 0" : "not finite");
        return;
    case CK_VACUITY_ALL_SKIPPED:
        snprintf(buf, n, "the loss scaler skipped every step (%d): no update was ever taken",
                 v->skipped);
        return;
    case CK_VACUITY_NO_GRADIENTS:
        snprintf(buf, n, "the model has no gradients to compare");
        return;
    case CK_VACUITY_ZERO_GRADIENTS:
        snprintf(buf, n,
                 "%.2f%% of %lld gradient elements are zero (%lld) or subnormal (%lld): at "
                 "least %.0f%% carries no information",
                 100.0 * frac, (long long)v->elements, (long long)v->zero,
                 (long long)v->subnormal, 100.0 * CK_VACUOUS_FRACTION);
        return;
    default:
        if (n)
            buf[0] = '\0';
        return;
    }
}

void ck_report_vacuous_reason(const ck_result *r, char *buf, size_t n)
{
    const ck_vacuity *vp = &r->plain.vacuity, *vc = &r->ckpt.vacuity;
    if (!r->vacuous || (!vp->vacuous && !vc->vacuous)) {
        if (n)
            buf[0] = '\0';
        return;
    }
    char why[CK_REPORT_LINE_MAX];
    ck_report_vacuity_text(vp->vacuous ? vp : vc, why, sizeof why);
    snprintf(buf, n, "%s run: %s", vp->vacuous ? "plain" : "checkpointed", why);
}

/* "cause: ...; remedy: ..." for a low-precision run outside its bound (precision_cause.h). */
static void lowp_cause_text(const ck_result *r, char *buf, size_t n, size_t *used)
{
    ck_lowp_cause c;
    ck_lowp_cause_find(r, &c);
    const char *dt = ck_dtype_name(r->dtype);
    char pct[32];
    fmt_pct(c.underflow_share, pct, sizeof pct);
    switch (c.kind) {
    case CK_LOWP_CAUSE_OVERFLOW:
        append(buf, n, used,
                 "cause: overflow (%lld values overflowed to inf in %s, the loss scaler "
                 "skipped %d of %d steps); remedy: %s",
                 (long long)c.overflowed, dt, c.skipped_steps, c.steps,
                 c.loss_scaled ? "a smaller train.loss_scale_value, or bf16 (fp32's range)"
                               : "bf16 (fp32's range), or keep the overflowing layers in fp32");
        break;
    case CK_LOWP_CAUSE_LOW_REDUCTION:
        append(buf, n, used,
                 "cause: reductions accumulate in %s (policies.reduction_dtype \"low\"); "
                 "remedy: accumulate in fp32 (drop policies.reduction_dtype)",
                 dt);
        break;
    case CK_LOWP_CAUSE_UNDERFLOW:
        append(buf, n, used,
                 "cause: underflow (%lld gradient values flushed to zero and %lld subnormal in "
                 "%s, %s of %lld); remedy: %s",
                 (long long)c.flushed, (long long)c.subnormal, dt, pct, (long long)c.elements,
                 c.loss_scaled ? "a larger train.loss_scale_value"
                               : "loss scaling (train.loss_scale \"dynamic\")");
        break;
    default:
        append(buf, n, used,
                 "cause: none measured (no overflow, %s of the gradient values underflowed, "
                 "reductions in fp32): the model amplifies %s rounding; remedy: keep the worst "
                 "tensor's layers in fp32, or measure and set tolerance.%s",
                 pct, dt, dt);
        break;
    }
}

int ck_report_failures(const ck_result *r, char lines[][CK_REPORT_LINE_MAX], int max_lines)
{
    int count = 0;
    if (r->pass || max_lines <= 0)
        return 0;
    if (r->nonfinite_failed && count < max_lines) {
        /* its own line, first: a run that produced nothing but NaN/Inf proves nothing, and
         * a NaN or Inf the case does not expect fails it whatever later ops did with it */
        const ck_nonfinite_counts *pl = &r->nonfinite_plain, *ck = &r->nonfinite_ckpt;
        bool throughout = pl->all_loss || pl->all_grads || ck->all_loss || ck->all_grads;
        const ck_nonfinite_counts *c =
            throughout ? (pl->all_loss || pl->all_grads ? pl : ck)
                       : (pl->loss_nan + pl->loss_inf + pl->grad_nan + pl->grad_inf +
                                  pl->other_nan + pl->other_inf - pl->skipped_step_grads +
                                  pl->act.nan + pl->act.inf > 0
                              ? pl
                              : ck);
        char what[CK_REPORT_LINE_MAX - 96];
        ck_report_nonfinite_message(c == pl ? "plain" : "checkpointed", c, r->g, what,
                                    sizeof what);
        if (throughout)
            snprintf(lines[count++], CK_REPORT_LINE_MAX, "non-finite: NaN/Inf throughout, %s",
                     what);
        else
            snprintf(lines[count++], CK_REPORT_LINE_MAX,
                     "non-finite: NaN/Inf the case does not expect (expect_nonfinite), %s", what);
    }
    char vacuous_reason[CK_REPORT_LINE_MAX - 64];
    ck_report_vacuous_reason(r, vacuous_reason, sizeof vacuous_reason);
    if (r->vacuous && !(r->cs && r->cs->expect_vacuous) && count < max_lines)
        snprintf(lines[count++], CK_REPORT_LINE_MAX,
                 "vacuous: %s; plain and checkpointed agreeing proves nothing here",
                 vacuous_reason);
    if (!r->vacuous && r->cs && r->cs->expect_vacuous && count < max_lines)
        snprintf(lines[count++], CK_REPORT_LINE_MAX,
                 "expected vacuous gradients (expect_vacuous), but the runs' gradients carry "
                 "information");
    if (!r->expect_met && count < max_lines)
        verdict_failure(r, lines[count++], CK_REPORT_LINE_MAX);
    if (!r->memory_expectation_met && count < max_lines)
        memory_failure(r, lines[count++], CK_REPORT_LINE_MAX);
    if (r->recompute_mismatches > 0 && count < max_lines)
        ck_report_recompute_failure(r, lines[count++], CK_REPORT_LINE_MAX);
    if (r->scale_mismatches > 0 && count < max_lines) {
        int s = r->first_scale_mismatch;
        snprintf(lines[count++], CK_REPORT_LINE_MAX,
                 "loss scale: %d step%s where the runs' scale or skip decision differ; first at "
                 "step %d: plain %g%s, checkpointed %g%s",
                 r->scale_mismatches, r->scale_mismatches == 1 ? "" : "s", s,
                 r->plain.scales[s].scale, r->plain.scales[s].skipped ? " (skipped)" : "",
                 r->ckpt.scales[s].scale, r->ckpt.scales[s].skipped ? " (skipped)" : "");
    }
    if (r->has_vs_backend && r->vs_backend_verdict == CK_VERDICT_MISMATCH && count < max_lines) {
        const ck_tensor_result *t =
            r->vs_backend_first >= 0 ? &r->vs_backend[r->vs_backend_first] : NULL;
        snprintf(lines[count++], CK_REPORT_LINE_MAX,
                 "vs %s: the %s backend's plain run differs from the %s backend's beyond the "
                 "bound%s%s%s",
                 r->vs_backend_name, r->backend, r->vs_backend_name, t ? "; first: " : "",
                 t ? t->name : "", t ? " (relative L2)" : "");
    }
    if (r->has_vs_fp32 && !r->vs_fp32_expect_met &&
        r->precision_check == CK_PRECISION_CHECK_FAIL && count < max_lines) {
        char worst[CK_REPORT_LINE_MAX / 2];
        vs_fp32_worst_clause(r, worst, sizeof worst);
        if (r->vs_fp32_verdict == CK_VERDICT_MISMATCH) {
            size_t used = 0;
            append(lines[count], CK_REPORT_LINE_MAX, &used,
                   "vs fp32: the %s run is outside its bound of the fp32 run; worst: %s; ",
                   ck_dtype_name(r->dtype), worst);
            lowp_cause_text(r, lines[count++], CK_REPORT_LINE_MAX, &used);
        }
        else
            snprintf(lines[count++], CK_REPORT_LINE_MAX,
                     "vs fp32: expected the %s run to leave its bound of the fp32 run, but it "
                     "stayed within (verdict %s; worst: %s)",
                     ck_dtype_name(r->dtype), ck_verdict_name(r->vs_fp32_verdict), worst);
    }
    if (count == 0 && r->nonfinite_failed)
        return count;
    if (count == 0)
        /* pass is false yet neither reason holds: say so rather than print nothing. */
        snprintf(lines[count++], CK_REPORT_LINE_MAX,
                 "fail: the result is marked failed with verdict and memory expectations met");
    return count;
}

/* ---------------------------------------------------------------------------------- */
/* Summary table                                                                       */
/* ---------------------------------------------------------------------------------- */

static int verdict_rank(ck_verdict v)
{
    switch (v) {
    case CK_VERDICT_MISMATCH: return 2;
    case CK_VERDICT_CLOSE: return 1;
    case CK_VERDICT_IDENTICAL: return 0;
    }
    return 3; /* an unknown verdict is the most alarming */
}

/* qsort is not stable, so the position in r->tensors is the last key (the pointers all
 * point into that one array): the order is total and the table the same on every libc. */
static int worse_first(const void *pa, const void *pb)
{
    const ck_tensor_result *a = *(const ck_tensor_result *const *)pa;
    const ck_tensor_result *b = *(const ck_tensor_result *const *)pb;
    int ra = verdict_rank(a->verdict), rb = verdict_rank(b->verdict);
    if (ra != rb)
        return ra > rb ? -1 : 1;
    if (a->m.n_outside != b->m.n_outside)
        return a->m.n_outside > b->m.n_outside ? -1 : 1;
    /* NaN sorts as the largest max_abs. */
    double xa = isnan(a->m.max_abs) ? INFINITY : a->m.max_abs;
    double xb = isnan(b->m.max_abs) ? INFINITY : b->m.max_abs;
    if (xa != xb)
        return xa > xb ? -1 : 1;
    return (a > b) - (a < b);
}

/* PASS, FAIL or VACUOUS */
static const char *status_word(const ck_result *r)
{
    const char *st = ck_report_status(r);
    return strcmp(st, "pass") == 0 ? "PASS" : strcmp(st, "vacuous") == 0 ? "VACUOUS" : "FAIL";
}

static void print_header(FILE *f, const ck_result *r)
{
    char plain[32], ckpt[32], saved[32];
    /* two short lines rather than one wide one: the text fits 80 columns */
    fprintf(f, "case %s: %s, verdict %s (%s, %s)\n", case_name(r), status_word(r),
            ck_verdict_name(r->verdict), r->backend[0] ? r->backend : "?", ck_dtype_name(r->dtype));
    fprintf(f, "memory: plain %s%s, checkpointed %s (saving %s)\n",
            ck_format_bytes(ck_report_plain_peak(r), plain, sizeof plain),
            ck_report_segmentwise(r) ? " predicted, not run" : "",
            ck_format_bytes(r->ckpt.peak_activation_bytes, ckpt, sizeof ckpt),
            fmt_pct(r->memory_saving, saved, sizeof saved));
    ck_report_print_segment_runs(f, r);
    verdict_counts c = count_verdicts(r);
    if (r->n_retained_steps > 0) {
        /* a long run: counts over every step, rows of the kept steps only */
        fprintf(f, "tensors %lld over %d steps: identical %lld, close %lld, mismatch %lld\n",
                (long long)r->tensors_judged, r->plain.steps, (long long)r->judged_counts[0],
                (long long)r->judged_counts[1], (long long)r->judged_counts[2]);
        fprintf(f, "rows kept for step%s", r->n_retained_steps == 1 ? "" : "s");
        for (int k = 0; k < r->n_retained_steps; k++)
            fprintf(f, "%s %d", k ? "," : "", r->retained_steps[k]);
        fprintf(f, " (step 0, the first divergent step, the last step)\n");
    } else {
        fprintf(f, "tensors %d: identical %d, close %d, mismatch %d\n", r->n_tensors,
                c.identical, c.close, c.mismatch);
    }
}

static void print_row(FILE *f, const ck_tensor_result *t, int name_w, int ulp_w)
{
    /* max_rel is in the JSON report; the text keeps to 80 columns */
    char a[32], u[32];
    fprintf(f, "%4d %-6s %-*s %-9s %10s %*s %" PRId64 "/%" PRId64 "\n", t->step,
            ck_tensor_kind_name(t->kind), name_w, tensor_name(t), ck_verdict_name(t->verdict),
            fmt_num(t->m.max_abs, "%.3e", a, sizeof a), ulp_w,
            fmt_ulp(t->m.max_ulp, u, sizeof u), t->m.n_outside, t->m.numel);
}

static void print_scales(FILE *f, const char *label, const ck_run_summary *run)
{
    fprintf(f, " %s", label);
    for (int s = 0; run->scales && s < run->steps; s++) {
        /* a long run: the first and last CK_FULL_RECORD_STEPS / 2 steps */
        int half = CK_FULL_RECORD_STEPS / 2;
        if (run->steps > CK_FULL_RECORD_STEPS && s == half)
            fprintf(f, " ... (%d steps)", run->steps - 2 * half);
        if (run->steps > CK_FULL_RECORD_STEPS && s >= half && s < run->steps - half)
            continue;
        fprintf(f, " %g%s", run->scales[s].scale, run->scales[s].skipped ? "(skipped)" : "");
    }
}

/* The rows of the judgement against fp32 with the largest error / bound, worst first. */
static double vs_fp32_badness(const ck_tensor_result *t)
{
    double w = t->bound > 0.0 ? t->error / t->bound
               : (double)t->m.n_outside / (double)(t->m.numel > 0 ? t->m.numel : 1);
    if (isnan(w))
        w = INFINITY;
    return (t->verdict == CK_VERDICT_MISMATCH ? 1.0 : 0.0) + (w < 1e300 ? w : 1e300);
}

static void print_worst_vs_fp32(FILE *f, const ck_result *r, int max_rows)
{
    bool *shown = calloc((size_t)(r->n_vs_fp32 ? r->n_vs_fp32 : 1), sizeof *shown);
    if (!shown)
        return;
    /* 80 columns: the name last */
    fprintf(f, "%4s %-6s %-8s %8s %8s %8s %-14s %s\n", "step", "kind", "verdict", "error",
            "bound", "spread", "bound from", "name");
    for (int row = 0; row < max_rows && row < r->n_vs_fp32; row++) {
        int best = -1;
        for (int k = 0; k < r->n_vs_fp32; k++)
            if (!shown[k] && (best < 0 || vs_fp32_badness(&r->vs_fp32[k]) >
                                              vs_fp32_badness(&r->vs_fp32[best])))
                best = k;
        if (best < 0)
            break;
        shown[best] = true;
        const ck_tensor_result *t = &r->vs_fp32[best];
        char e[32], bd[32], sp[32];
        fprintf(f, "%4d %-6s %-8s %8s %8s %8s %-14s %s\n", t->step,
                ck_tensor_kind_name(t->kind), ck_verdict_name(t->verdict),
                t->error >= 0.0 ? fmt_num(t->error, "%.2e", e, sizeof e) : "-",
                t->bound >= 0.0 ? fmt_num(t->bound, "%.2e", bd, sizeof bd) : "-",
                t->spread >= 0.0 ? fmt_num(t->spread, "%.2e", sp, sizeof sp) : "-",
                ck_bound_source_name(t->bound_source), t->name);
    }
    free(shown);
}

/* Each run's gradients: how many elements, how many zero, subnormal or flushed. */
static void print_gradients(FILE *f, const ck_result *r)
{
    const ck_run_summary *runs[2] = {&r->plain, &r->ckpt};
    fprintf(f, "gradients:");
    for (int i = 0; i < 2; i++) {
        const ck_vacuity *v = &runs[i]->vacuity;
        fprintf(f, "%s %s %lld elements, %lld zero (%.1f%%), %lld subnormal", i ? ";" : "",
                runs[i]->label ? runs[i]->label : (i ? "checkpointed" : "plain"),
                (long long)v->elements, (long long)v->zero,
                v->elements ? 100.0 * (double)v->zero / (double)v->elements : 0.0,
                (long long)v->subnormal);
        if (v->flushed >= 0)
            fprintf(f, ", %lld flushed", (long long)v->flushed);
    }
    fprintf(f, "%s\n", r->vacuous ? " | VACUOUS" : "");
}

/* Mixed precision: the loss scale per step and the judgement against fp32. */
static void print_precision(FILE *f, const ck_result *r)
{
    const ck_case *c = r->cs;
    bool low = r->dtype == CK_F16 || r->dtype == CK_BF16;
    if (!low && c->loss_scale == CK_SCALE_NONE)
        return;
    fprintf(f, "precision %s (fp32 master weights, autocast_recompute %s) | loss scale %s:",
            ck_dtype_name(r->dtype), ck_autocast_name(c->autocast),
            ck_loss_scale_name(c->loss_scale));
    print_scales(f, "plain", &r->plain);
    fprintf(f, ";");
    print_scales(f, "checkpointed", &r->ckpt);
    fprintf(f, "\n");
    if (r->ckpt.recomputed_other_dtype > 0)
        fprintf(f, "note recomputation ran in fp32 while the original forward ran in %s: %lld "
                   "recomputed layer outputs, first `%s` (autocast_recompute %s)\n",
                ck_dtype_name(r->dtype), (long long)r->ckpt.recomputed_other_dtype,
                r->g->nodes[r->ckpt.first_other_dtype_layer].spec->name,
                ck_autocast_name(c->autocast));
    if (!r->has_vs_fp32)
        return;
    int outside = 0;
    int64_t flushed = 0, overflow = 0, subnormal = 0;
    const ck_tensor_result *most_flushed = NULL;
    for (int k = 0; k < r->n_vs_fp32; k++) {
        const ck_tensor_result *t = &r->vs_fp32[k];
        outside += t->verdict == CK_VERDICT_MISMATCH;
        if (t->cast_overflow < 0)
            continue;
        flushed += t->cast_flushed;
        overflow += t->cast_overflow;
        subnormal += t->cast_subnormal;
        if (t->cast_flushed > 0 && (!most_flushed || t->cast_flushed > most_flushed->cast_flushed))
            most_flushed = t;
    }
    char worst[CK_REPORT_LINE_MAX / 2];
    vs_fp32_worst_clause(r, worst, sizeof worst);
    fprintf(f, "vs fp32: %s (expect %s, --precision-check %s) | %d of %d tensors outside "
               "their bound | worst: %s\n",
            ck_verdict_name(r->vs_fp32_verdict), ck_expect_name(ck_case_expect_vs_fp32(c, r->dtype)),
            ck_precision_check_name(r->precision_check), outside, r->n_vs_fp32, worst);
    if (!r->vs_fp32_expect_met)
        print_worst_vs_fp32(f, r, 8);
    fprintf(f, "%s values: %lld overflowed to inf, %lld flushed to zero, %lld subnormal",
            ck_dtype_name(r->dtype), (long long)overflow, (long long)flushed, (long long)subnormal);
    if (most_flushed)
        fprintf(f, "; most flushed: step %d %s %s (%lld of %lld)", most_flushed->step,
                ck_tensor_kind_name(most_flushed->kind), most_flushed->name,
                (long long)most_flushed->cast_flushed, (long long)most_flushed->m.numel);
    fprintf(f, "\n");
}

/* CUDA: the algorithm policy and any nondeterministic algorithm that ran; --against. */
static void print_backend(FILE *f, const ck_result *r)
{
    if (r->algo_policy[0]) {
        int nondet = 0;
        const ck_algo_record *first = NULL;
        for (int i = 0; i < r->n_algos; i++)
            if (!r->algos[i].deterministic && nondet++ == 0)
                first = &r->algos[i];
        fprintf(f, "algorithms (%s): %d layer passes recorded, %d nondeterministic", r->algo_policy,
                r->n_algos, nondet);
        if (first)
            fprintf(f, " (first: %s %s %s)", first->layer, first->pass, first->engine);
        fprintf(f, "\n");
    }
    if (r->has_device_memory)
        fprintf(f, "device memory: pool peak %lld B, convolution workspaces peak %lld B, "
                "other scratch peak %lld B\n", (long long)r->device_memory.pool_peak_bytes,
                (long long)r->device_memory.workspace_peak_bytes,
                (long long)r->device_memory.scratch_peak_bytes);
    if (r->has_vs_backend) {
        int outside = 0;
        for (int k = 0; k < r->n_vs_backend; k++)
            outside += r->vs_backend[k].verdict == CK_VERDICT_MISMATCH;
        fprintf(f, "vs %s: %s | %d of %d tensors beyond their relative L2 bound",
                r->vs_backend_name, ck_verdict_name(r->vs_backend_verdict), outside,
                r->n_vs_backend);
        if (r->vs_backend_first >= 0) {
            const ck_tensor_result *t = &r->vs_backend[r->vs_backend_first];
            fprintf(f, "; first: step %d %s %s (rel_l2 %.3g > %g)", t->step,
                    ck_tensor_kind_name(t->kind), t->name, t->m.rel_l2, t->rel_l2_limit);
        }
        fprintf(f, "\n");
    }
}

void ck_report_print_summary(FILE *f, const ck_result *r, int max_rows)
{
    const ck_tensor_result **order = NULL;
    print_header(f, r);
    print_backend(f, r);
    print_precision(f, r);
    print_gradients(f, r);

    int rows = max_rows < 0 || max_rows > r->n_tensors ? r->n_tensors : max_rows;
    if (rows > 0) {
        order = malloc((size_t)r->n_tensors * sizeof *order);
        if (!order) {
            fprintf(f, "(tensor table left out: out of memory)\n");
            goto failures;
        }
        for (int i = 0; i < r->n_tensors; i++)
            order[i] = &r->tensors[i];
        qsort(order, (size_t)r->n_tensors, sizeof *order, worse_first);

        /* Columns as wide as the rows shown need (names capped at 40, longer ones just
         * push their row out), so a small table stays compact. */
        int name_w = 4, ulp_w = 7;
        for (int i = 0; i < rows; i++) {
            char u[32];
            int len = (int)strlen(tensor_name(order[i]));
            if (len > name_w)
                name_w = len < 40 ? len : 40;
            len = (int)strlen(fmt_ulp(order[i]->m.max_ulp, u, sizeof u));
            if (len > ulp_w)
                ulp_w = len;
        }
        fprintf(f, "%4s %-6s %-*s %-9s %10s %*s %s\n", "step", "kind", name_w, "name",
                "verdict", "max_abs", ulp_w, "max_ulp", "outside/numel");
        for (int i = 0; i < rows; i++)
            print_row(f, order[i], name_w, ulp_w);
        if (rows < r->n_tensors)
            fprintf(f, "... %d more tensors\n", r->n_tensors - rows);
    }

failures:;
    char lines[CK_REPORT_MAX_FAILURES][CK_REPORT_LINE_MAX];
    int nf = ck_report_failures(r, lines, CK_REPORT_MAX_FAILURES);
    for (int i = 0; i < nf; i++)
        fprintf(f, "FAIL %s\n", lines[i]);
    if (!r->nonfinite_failed) {
        /* partial NaN/Inf (a loss scaler's skipped steps): counted, said, not failed */
        char msg[CK_REPORT_LINE_MAX];
        ck_report_nonfinite_message("plain", &r->nonfinite_plain, r->g, msg, sizeof msg);
        if (msg[0])
            fprintf(f, "note non-finite: %s\n", msg);
        ck_report_nonfinite_message("checkpointed", &r->nonfinite_ckpt, r->g, msg, sizeof msg);
        if (msg[0])
            fprintf(f, "note non-finite: %s\n", msg);
    }
    if (!r->memory_met && r->memory_expectation_met) {
        /* A canary of useless checkpointing: not a failure, but the reader should see
         * that the planted problem was what made the saving fall short. */
        char msg[CK_REPORT_LINE_MAX];
        ck_report_memory_message(r, msg, sizeof msg);
        fprintf(f, "note memory: %s (as the case expects)\n", msg);
    }
    free(order);
}

void ck_report_print_oneline(FILE *f, const ck_result *r)
{
    /* "saving", as in the header: one sign convention for the same number */
    char plain[32], ckpt[32], change[32];
    fmt_pct(r->memory_saving, change, sizeof change);
    const ck_nonfinite_counts *p = &r->nonfinite_plain, *q = &r->nonfinite_ckpt;
    int64_t nan = p->loss_nan + p->grad_nan + p->other_nan + q->loss_nan + q->grad_nan +
                  q->other_nan + p->act.nan + q->act.nan;
    int64_t inf = p->loss_inf + p->grad_inf + p->other_inf + q->loss_inf + q->grad_inf +
                  q->other_inf + p->act.inf + q->act.inf;
    fprintf(f, "%s %s %s  %s  memory %s -> %s (saving %s)", status_word(r), case_name(r),
            ck_dtype_name(r->dtype), ck_verdict_name(r->verdict),
            ck_format_bytes(ck_report_plain_peak(r), plain, sizeof plain),
            ck_format_bytes(r->ckpt.peak_activation_bytes, ckpt, sizeof ckpt), change);
    if (nan + inf)
        fprintf(f, "  %s: NaN %lld, Inf %lld",
                r->nonfinite_failed ? (p->all_loss || p->all_grads || q->all_loss || q->all_grads
                                           ? "non-finite throughout"
                                           : "non-finite, not expected")
                                    : "non-finite",
                (long long)nan,
                (long long)inf);
    /* name the failing judgement and its worst tensor */
    if (!r->pass && r->vacuous && !(r->cs && r->cs->expect_vacuous)) {
        char why[CK_REPORT_LINE_MAX];
        ck_report_vacuous_reason(r, why, sizeof why);
        fprintf(f, "  vacuous: %s", why);
    } else if (!r->pass && r->has_vs_fp32 && !r->vs_fp32_expect_met &&
               r->precision_check == CK_PRECISION_CHECK_FAIL) {
        char worst[CK_REPORT_LINE_MAX / 2];
        vs_fp32_worst_clause(r, worst, sizeof worst);
        fprintf(f, "  vs fp32 %s: %s", ck_verdict_name(r->vs_fp32_verdict), worst);
        ck_lowp_cause c;
        ck_lowp_cause_find(r, &c);
        static const char *const short_cause[] = {
            [CK_LOWP_CAUSE_OVERFLOW] = "overflow (remedy: a smaller loss scale, or bf16)",
            [CK_LOWP_CAUSE_LOW_REDUCTION] = "reductions in the low dtype (remedy: fp32 "
                                            "accumulation)",
            [CK_LOWP_CAUSE_UNDERFLOW] = "underflow (remedy: loss scaling)",
        };
        if (r->vs_fp32_verdict == CK_VERDICT_MISMATCH && c.kind != CK_LOWP_CAUSE_NONE)
            fprintf(f, "; cause: %s", short_cause[c.kind]);
    } else if (!r->pass && !r->expect_met && r->first_divergence >= 0) {
        const ck_tensor_result *t = &r->tensors[r->first_divergence];
        fprintf(f, "  %s vs checkpointed: first %s %s step %d",
                ck_report_segmentwise(r) ? r->plain.label : "plain",
                ck_tensor_kind_name(t->kind), t->name, t->step);
        if (r->bisect && r->bisect->n_causes > 0 && r->g) { /* bisected: why, in its words */
            char cause[CK_REPORT_LINE_MAX];
            ck_bisect_cause_text(r->g, &r->bisect->causes[0], cause, sizeof cause);
            int more = r->bisect->n_causes - 1;
            fprintf(f, "; cause: %s", cause);
            if (more > 0)
                fprintf(f, " (and %d more cause%s)", more, more == 1 ? "" : "s");
        }
    }
    fprintf(f, "\n");
    if (ck_report_segmentwise(r)) { /* say how, on a line of its own (80 columns) */
        char big[32];
        fprintf(f, "  segment by segment (%s): %d runs, largest peak %s\n",
                r->segmentwise_reason == CK_SEGMENTWISE_PLAIN_OVER_LIMIT
                    ? "plain over the limit"
                    : "--plain",
                r->n_segment_runs,
                ck_format_bytes(ck_report_largest_segment_run_peak(r), big, sizeof big));
    }
}
