/*
 * CPU losses: mean, sum, mse and cross-entropy, and their gradients.
 *
 * The loss is a double accumulated in a fixed order; the gradient dy = scale * dL/dy is
 * computed in double and rounded once into dy's dtype. y, an mse target and dy are each
 * loaded in their own dtype (fp32, fp64, fp16 or bf16: in a low-precision run all three
 * are low, and the loss is still a double; ref_elem.h, harness/precision.md).
 * Cross-entropy takes logits y (N, C, spatial...) and i32 class indices (N, spatial...),
 * and averages
 * logsumexp_c(y) - y[t] (max-subtracted) over the N * spatial positions, as PyTorch's
 * cross_entropy with reduction "mean" and no weights.
 */
#include "backends/ref/ref_ops.h"
#include "backends/ref/ref_elem.h"

#include <math.h>

/* ---- cross-entropy layout: y (N, C, S), target (N, S) ---- */

typedef ck_ncs_dims ce_dims;

static inline int64_t ce_index(const ce_dims *d, int64_t n, int64_t c, int64_t s)
{
    return (n * d->C + c) * d->S + s;
}

/* max_c y[n, c, s] and sum_c exp(y[n, c, s] - max) at one position */
static void ce_softmax_terms(const ck_tensor *y, const ce_dims *d, int64_t n, int64_t s,
                             double *max, double *sumexp)
{
    double m = -INFINITY;
    for (int64_t c = 0; c < d->C; c++)
        m = fmax(m, ref_ld(y, ce_index(d, n, c, s)));
    double se = 0.0;
    for (int64_t c = 0; c < d->C; c++)
        se += exp(ref_ld(y, ce_index(d, n, c, s)) - m);
    *max = m;
    *sumexp = se;
}

/* ---- checks shared by forward and backward ---- */

/* Validates y and target for `kind` (backends/check/check.h); for cross-entropy also fills *d
 * and checks every class index is in [0, C). */
static ck_status loss_check(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *target,
                            ce_dims *d, ck_error *err)
{
    CK_TRY(ck_opc_loss(REF_BE, kind, y, target, d, err));
    if (kind == CK_LOSS_CROSS_ENTROPY)
        return ck_opc_ce_classes(target, target->data, d, err);
    return CK_OK;
}

/* ================================ forward ================================ */

ck_status ref_loss_forward(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *target,
                           double *loss, ck_error *err)
{
    ce_dims d;
    CK_TRY(loss_check(kind, y, target, &d, err));
    int64_t numel = ck_shape_numel(&y->shape);
    double sum = 0.0;
    switch (kind) {
    case CK_LOSS_MEAN:
    case CK_LOSS_SUM:
        for (int64_t i = 0; i < numel; i++)
            sum += ref_ld(y, i);
        *loss = kind == CK_LOSS_MEAN ? sum / (double)numel : sum;
        return CK_OK;
    case CK_LOSS_MSE:
        for (int64_t i = 0; i < numel; i++) {
            double r = ref_ld(y, i) - ref_ld(target, i);
            sum += r * r;
        }
        *loss = sum / (double)numel;
        return CK_OK;
    case CK_LOSS_CROSS_ENTROPY: {
        const int32_t *t = target->data;
        for (int64_t n = 0; n < d.N; n++)
            for (int64_t s = 0; s < d.S; s++) {
                double max, sumexp;
                ce_softmax_terms(y, &d, n, s, &max, &sumexp);
                sum += max + log(sumexp) - ref_ld(y, ce_index(&d, n, t[n * d.S + s], s));
            }
        *loss = sum / (double)(d.N * d.S);
        return CK_OK;
    }
    default:
        return ck_fail(err, CK_ERR_INTERNAL, "loss kind %d passed the checks", (int)kind);
    }
}

/* ================================ backward ================================ */

/* relu_over (backend.h): y is a relu's output and dy its buffer; the relu's mask is taken
 * before the gradient (which reads y[k] only for element k) overwrites it, and applied after
 * (relu_over.c) */
static ck_status loss_backward_relu_over(ck_loss_kind kind, const ck_tensor *y,
                                         const ck_tensor *target, double scale, ck_tensor *dy,
                                         ck_error *err)
{
    CK_TRY(ck_opc_loss_relu_over(kind, y, dy, err));
    ref_relu_mask m;
    CK_TRY(ref_relu_mask_take("loss backward", y, &m, err));
    ck_status st = ref_loss_backward(kind, y, target, scale, dy, false, err);
    if (st != CK_OK) {
        ref_relu_mask_free(&m);
        return st;
    }
    ref_relu_mask_apply(&m, dy);
    return CK_OK;
}

ck_status ref_loss_backward(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *target,
                            double scale, ck_tensor *dy, bool relu_over, ck_error *err)
{
    ce_dims d;
    CK_TRY(loss_check(kind, y, target, &d, err));
    CK_TRY(ck_opc_loss_dy(kind, y, dy, err));
    if (relu_over)
        return loss_backward_relu_over(kind, y, target, scale, dy, err);
    int64_t numel = ck_shape_numel(&y->shape);
    switch (kind) {
    case CK_LOSS_MEAN:
    case CK_LOSS_SUM: {
        double g = kind == CK_LOSS_MEAN ? scale / (double)numel : scale;
        for (int64_t i = 0; i < numel; i++)
            ref_st(dy, i, g);
        return CK_OK;
    }
    case CK_LOSS_MSE: {
        double g = 2.0 * scale / (double)numel;
        for (int64_t i = 0; i < numel; i++)
            ref_st(dy, i, g * (ref_ld(y, i) - ref_ld(target, i)));
        return CK_OK;
    }
    case CK_LOSS_CROSS_ENTROPY: {
        const int32_t *t = target->data;
        double g = scale / (double)(d.N * d.S);
        for (int64_t n = 0; n < d.N; n++)
            for (int64_t s = 0; s < d.S; s++) {
                double max, sumexp;
                ce_softmax_terms(y, &d, n, s, &max, &sumexp);
                int32_t cls = t[n * d.S + s];
                for (int64_t c = 0; c < d.C; c++) {
                    int64_t i = ce_index(&d, n, c, s);
                    double p = exp(ref_ld(y, i) - max) / sumexp;
                    ref_st(dy, i, g * (p - (c == cls ? 1.0 : 0.0)));
                }
            }
        return CK_OK;
    }
    default:
        return ck_fail(err, CK_ERR_INTERNAL, "loss kind %d passed the checks", (int)kind);
    }
}

/*
 * Cross-entropy over a class dim with ignore_index and label smoothing (PyTorch
 * F.cross_entropy, reduction mean, no weights), in double (wide_kernels.h).
 */
#include "backends/ref/wide_scope.h"

#include <math.h>

static void terms(const double *y, int64_t C, int64_t inner, double *max, double *lse)
{
    double m = -INFINITY;
    for (int64_t c = 0; c < C; c++)
        m = fmax(m, y[c * inner]);
    double s = 0.0;
    for (int64_t c = 0; c < C; c++)
        s += exp(y[c * inner] - m);
    *max = m;
    *lse = log(s);
}

double f64_ce_loss(const double *y, const int32_t *t, int64_t outer, int64_t C, int64_t inner,
                   int64_t ignore_index, double smoothing)
{
    double sum = 0.0, smooth = 0.0; /* sum of -log p_target; of -sum_c log p_c */
    int64_t count = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int32_t cls = t[o * inner + i];
            if (cls == ignore_index)
                continue;
            const double *yr = y + o * C * inner + i;
            double m, lse;
            terms(yr, C, inner, &m, &lse);
            sum += m + lse - yr[(int64_t)cls * inner];
            if (smoothing != 0.0)
                for (int64_t c = 0; c < C; c++)
                    smooth += m + lse - yr[c * inner];
            count++;
        }
    if (smoothing != 0.0) /* PyTorch's (1 - e) nll + e / C smooth, each a mean over count */
        return (1.0 - smoothing) * (sum / (double)count) +
               smoothing / (double)C * (smooth / (double)count);
    return sum / (double)count; /* 0/0 = NaN when all are ignored, as PyTorch */
}

void f64_ce_grad(double *dy, const double *y, const int32_t *t, int64_t outer, int64_t C,
                 int64_t inner, int64_t ignore_index, double smoothing, double scale)
{
    int64_t count = 0;
    for (int64_t j = 0; j < outer * inner; j++)
        count += t[j] != ignore_index;
    const double gsc = scale / (double)count;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int32_t cls = t[o * inner + i];
            const double *yr = y + o * C * inner + i;
            double *dr = dy + o * C * inner + i;
            if (cls == ignore_index) {
                for (int64_t c = 0; c < C; c++)
                    dr[c * inner] = 0.0;
                continue;
            }
            double m, lse;
            terms(yr, C, inner, &m, &lse);
            if (smoothing == 0.0) {
                for (int64_t c = 0; c < C; c++)
                    dr[c * inner] = gsc * (exp(yr[c * inner] - m - lse) - (c == cls ? 1.0 : 0.0));
                continue;
            }
            const double on = 1.0 - smoothing, uniform = smoothing / (double)C;
            for (int64_t c = 0; c < C; c++)
                dr[c * inner] =
                    gsc * (exp(yr[c * inner] - m - lse) - (c == cls ? on : 0.0) - uniform);
        }
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h): the backend's ce_forward / ce_backward

ck_status ref_ce_forward(const ck_loss_spec *loss, const ck_tensor *y, const ck_tensor *target,
                         double *out, ck_error *err)
{
    int64_t outer, C, inner;
    CK_TRY(ck_opc_ce_spec(REF_BE, loss, y, target, &outer, &C, &inner, err));
    CK_TRY(ck_opc_ce_spec_classes(loss, target, target->data, outer * inner, C, err));
    ref_scope s;
    ref_scope_begin(&s, "cross_entropy", err);
    const double *yv = ref_scope_in(&s, y);
    if (s.st == CK_OK)
        *out = f64_ce_loss(yv, target->data, outer, C, inner,
                           loss->has_ignore ? loss->ignore_index : INT64_MIN,
                           loss->label_smoothing);
    return ref_scope_end(&s, true);
}

ck_status ref_ce_backward(const ck_loss_spec *loss, const ck_tensor *y, const ck_tensor *target,
                          double scale, ck_tensor *dy, ck_error *err)
{
    int64_t outer, C, inner;
    CK_TRY(ck_opc_ce_spec(REF_BE, loss, y, target, &outer, &C, &inner, err));
    CK_TRY(ck_opc_ce_spec_classes(loss, target, target->data, outer * inner, C, err));
    CK_TRY(ck_opc_loss_dy(CK_LOSS_CROSS_ENTROPY, y, dy, err));
    ref_scope s;
    ref_scope_begin(&s, "cross_entropy backward", err);
    const double *yv = ref_scope_in(&s, y);
    double *d = ref_scope_out(&s, dy);
    if (s.st == CK_OK)
        f64_ce_grad(d, yv, target->data, outer, C, inner,
                    loss->has_ignore ? loss->ignore_index : INT64_MIN, loss->label_smoothing,
                    scale);
    return ref_scope_end(&s, true);
}
