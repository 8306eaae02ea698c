/*
 * CPU losses: mean, sum, mse and cross-entropy, and their gradients.
 *
 * The loss is a double accumulated in a fixed order; the gradient dy = scale * dL/dy is
 * computed in double and rounded once into dy's dtype. y, an mse target and dy are each
 * loaded in their own dtype (fp32, fp64, fp16 or bf16: in a low-precision run all three
 * are low, and the loss is still a double; cpu_elem.h, harness/precision.md).
 * Cross-entropy takes logits y (N, C, spatial...) and i32 class indices (N, spatial...),
 * and averages
 * logsumexp_c(y) - y[t] (max-subtracted) over the N * spatial positions, as PyTorch's
 * cross_entropy with reduction "mean" and no weights.
 */
#include "cpu_elem.h"

#include <math.h>
#include <stdio.h>

#define TRY(expr)                                                                          \
    do {                                                                                   \
        ck_status rc_ = (expr);                                                            \
        if (rc_ != CK_OK)                                                                  \
            return rc_;                                                                    \
    } while (0)

/* ---- cross-entropy layout: y (N, C, S), target (N, S) ---- */

typedef struct {
    int64_t N, C, S;
} ce_dims;

static inline int64_t ce_index(const ce_dims *d, int64_t n, int64_t c, int64_t s)
{
    return (n * d->C + c) * d->S + s;
}

/* The target's shape is y's without dim 1, its dtype i32 and every class in [0, C). */
static ck_status ce_check(const ck_tensor *y, const ck_tensor *target, ce_dims *d,
                          ck_error *err)
{
    char a[128], b[128];
    if (y->shape.ndim < 2)
        return ck_fail(err, CK_ERR_INPUT, "cross_entropy: %s has shape %s, needs (N, C, ...)",
                       cpu_tname(y), ck_shape_str(&y->shape, a, sizeof a));
    if (target->dtype != CK_I32)
        return ck_fail(err, CK_ERR_UNSUPPORTED, "cross_entropy: target %s is %s, expected i32",
                       cpu_tname(target), ck_dtype_name(target->dtype));
    bool ok = target->shape.ndim == y->shape.ndim - 1 && target->shape.dim[0] == y->shape.dim[0];
    for (int i = 1; ok && i < target->shape.ndim; i++)
        ok = target->shape.dim[i] == y->shape.dim[i + 1];
    if (!ok)
        return ck_fail(err, CK_ERR_INPUT, "cross_entropy: target %s has shape %s, expected %s "
                       "without dim 1 (%s)", cpu_tname(target),
                       ck_shape_str(&target->shape, a, sizeof a), cpu_tname(y),
                       ck_shape_str(&y->shape, b, sizeof b));
    d->N = y->shape.dim[0];
    d->C = y->shape.dim[1];
    d->S = ck_shape_numel(&y->shape) / (d->N * d->C);
    const int32_t *t = target->data;
    int64_t numel = d->N * d->S;
    for (int64_t i = 0; i < numel; i++) {
        if (t[i] < 0 || t[i] >= d->C) {
            int64_t idx[CK_MAX_DIMS];
            ck_shape_unflatten(&target->shape, i, idx);
            char where[160];
            size_t used = 0;
            for (int k = 0; k < target->shape.ndim && used < sizeof where; k++) {
                int w = snprintf(where + used, sizeof where - used, "%s%lld", k ? ", " : "",
                                 (long long)idx[k]);
                if (w > 0)
                    used += (size_t)w;
            }
            return ck_fail(err, CK_ERR_INPUT, "cross_entropy: class index %s[%s] = %d is "
                           "outside [0, %lld)", cpu_tname(target), where, t[i], (long long)d->C);
        }
    }
    return CK_OK;
}

/* max_c y[n, c, s] and sum_c exp(y[n, c, s] - max) at one position */
static void ce_softmax_terms(const ck_tensor *y, const ce_dims *d, int64_t n, int64_t s,
                             double *max, double *sumexp)
{
    double m = -INFINITY;
    for (int64_t c = 0; c < d->C; c++)
        m = fmax(m, cpu_ld(y, ce_index(d, n, c, s)));
    double se = 0.0;
    for (int64_t c = 0; c < d->C; c++)
        se += exp(cpu_ld(y, ce_index(d, n, c, s)) - m);
    *max = m;
    *sumexp = se;
}

/* ---- checks shared by forward and backward ---- */

/* Validates y and target for `kind`; for cross-entropy also fills *d. */
static ck_status loss_check(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *target,
                            ce_dims *d, ck_error *err)
{
    const char *fn = ck_loss_kind_name(kind);
    char what[64];
    snprintf(what, sizeof what, "%s loss", fn);
    const ck_tensor *ys[] = {y};
    TRY(cpu_check_float_dtypes(what, ys, 1, err));
    switch (kind) {
    case CK_LOSS_MEAN:
    case CK_LOSS_SUM:
        return CK_OK;
    case CK_LOSS_MSE:
        if (!target)
            return ck_fail(err, CK_ERR_INTERNAL, "mse loss: no target");
        if (!cpu_is_float(target->dtype))
            return ck_fail(err, CK_ERR_UNSUPPORTED, "mse loss: target %s is %s, expected a "
                           "float dtype", cpu_tname(target), ck_dtype_name(target->dtype));
        if (!ck_shape_equal(&target->shape, &y->shape)) {
            char a[128], b[128];
            return ck_fail(err, CK_ERR_INPUT, "mse loss: target %s has shape %s, %s has %s",
                           cpu_tname(target), ck_shape_str(&target->shape, a, sizeof a),
                           cpu_tname(y), ck_shape_str(&y->shape, b, sizeof b));
        }
        return CK_OK;
    case CK_LOSS_CROSS_ENTROPY:
        if (!target)
            return ck_fail(err, CK_ERR_INTERNAL, "cross_entropy loss: no target");
        return ce_check(y, target, d, err);
    default:
        return ck_fail(err, CK_ERR_UNSUPPORTED, "loss kind %d is not implemented", (int)kind);
    }
}

/* ================================ forward ================================ */

ck_status cpu_loss_forward(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *target,
                           double *loss, ck_error *err)
{
    ce_dims d;
    TRY(loss_check(kind, y, target, &d, err));
    int64_t numel = ck_shape_numel(&y->shape);
    double sum = 0.0;
    switch (kind) {
    case CK_LOSS_MEAN:
    case CK_LOSS_SUM:
        for (int64_t i = 0; i < numel; i++)
            sum += cpu_ld(y, i);
        *loss = kind == CK_LOSS_MEAN ? sum / (double)numel : sum;
        return CK_OK;
    case CK_LOSS_MSE:
        for (int64_t i = 0; i < numel; i++) {
            double r = cpu_ld(y, i) - cpu_ld(target, i);
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
                sum += max + log(sumexp) - cpu_ld(y, ce_index(&d, n, t[n * d.S + s], s));
            }
        *loss = sum / (double)(d.N * d.S);
        return CK_OK;
    }
    default:
        return ck_fail(err, CK_ERR_INTERNAL, "loss kind %d passed the checks", (int)kind);
    }
}

/* ================================ backward ================================ */

ck_status cpu_loss_backward(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *target,
                            double scale, ck_tensor *dy, ck_error *err)
{
    ce_dims d;
    TRY(loss_check(kind, y, target, &d, err));
    if (!dy || !cpu_is_float(dy->dtype) || !ck_shape_equal(&dy->shape, &y->shape))
        return ck_fail(err, CK_ERR_INTERNAL, "%s loss backward: the gradient tensor must have "
                       "a float dtype and the shape of %s", ck_loss_kind_name(kind), cpu_tname(y));
    int64_t numel = ck_shape_numel(&y->shape);
    switch (kind) {
    case CK_LOSS_MEAN:
    case CK_LOSS_SUM: {
        double g = kind == CK_LOSS_MEAN ? scale / (double)numel : scale;
        for (int64_t i = 0; i < numel; i++)
            cpu_st(dy, i, g);
        return CK_OK;
    }
    case CK_LOSS_MSE: {
        double g = 2.0 * scale / (double)numel;
        for (int64_t i = 0; i < numel; i++)
            cpu_st(dy, i, g * (cpu_ld(y, i) - cpu_ld(target, i)));
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
                    double p = exp(cpu_ld(y, i) - max) / sumexp;
                    cpu_st(dy, i, g * (p - (c == cls ? 1.0 : 0.0)));
                }
            }
        return CK_OK;
    }
    default:
        return ck_fail(err, CK_ERR_INTERNAL, "loss kind %d passed the checks", (int)kind);
    }
}
