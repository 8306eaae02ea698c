/*
 * Host-side checks of the losses (check.h): mean, sum, mse, cross-entropy.
 */
#include "backends/check/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(t, buf) ck_shape_str(&(t)->shape, buf, sizeof buf)

static ck_status ce_check(const ck_tensor *y, const ck_tensor *target, ck_ncs_dims *d,
                          ck_error *err)
{
    char a[128], b[128];
    if (y->shape.ndim < 2)
        return ck_fail(err, CK_ERR_INPUT, "cross_entropy: %s has shape %s, needs (N, C, ...)",
                       ck_opc_tname(y), ck_shape_str(&y->shape, a, sizeof a));
    if (target->dtype != CK_I32)
        return ck_fail(err, CK_ERR_UNSUPPORTED, "cross_entropy: target %s is %s, expected i32",
                       ck_opc_tname(target), ck_dtype_name(target->dtype));
    bool ok = target->shape.ndim == y->shape.ndim - 1 && target->shape.dim[0] == y->shape.dim[0];
    for (int i = 1; ok && i < target->shape.ndim; i++)
        ok = target->shape.dim[i] == y->shape.dim[i + 1];
    if (!ok)
        return ck_fail(err, CK_ERR_INPUT, "cross_entropy: target %s has shape %s, expected %s "
                       "without dim 1 (%s)", ck_opc_tname(target),
                       ck_shape_str(&target->shape, a, sizeof a), ck_opc_tname(y),
                       ck_shape_str(&y->shape, b, sizeof b));
    d->N = y->shape.dim[0];
    d->C = y->shape.dim[1];
    d->S = ck_shape_numel(&y->shape) / (d->N * d->C);
    return CK_OK;
}

ck_status ck_opc_ce_classes(const ck_tensor *target, const int32_t *t, const ck_ncs_dims *d,
                            ck_error *err)
{
    const int64_t numel = d->N * d->S;
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
                           "outside [0, %lld)", ck_opc_tname(target), where, t[i],
                           (long long)d->C);
        }
    }
    return CK_OK;
}

ck_status ck_opc_loss(const char *be, ck_loss_kind kind, const ck_tensor *y,
                      const ck_tensor *target, ck_ncs_dims *d, ck_error *err)
{
    const char *fn = ck_loss_kind_name(kind);
    char what[64];
    snprintf(what, sizeof what, "%s loss", fn);
    const ck_tensor *ys[] = {y};
    CK_TRY(ck_opc_float_dtypes(be, what, ys, 1, err));
    switch (kind) {
    case CK_LOSS_MEAN:
    case CK_LOSS_SUM:
        return CK_OK;
    case CK_LOSS_MSE:
        if (!target)
            return ck_fail(err, CK_ERR_INTERNAL, "mse loss: no target");
        if (!ck_opc_is_float(target->dtype))
            return ck_fail(err, CK_ERR_UNSUPPORTED, "mse loss: target %s is %s, expected a "
                           "float dtype", ck_opc_tname(target), ck_dtype_name(target->dtype));
        if (!ck_shape_equal(&target->shape, &y->shape)) {
            char a[128], b[128];
            return ck_fail(err, CK_ERR_INPUT, "mse loss: target %s has shape %s, %s has %s",
                           ck_opc_tname(target), ck_shape_str(&target->shape, a, sizeof a),
                           ck_opc_tname(y), ck_shape_str(&y->shape, b, sizeof b));
        }
        return CK_OK;
    case CK_LOSS_CROSS_ENTROPY:
        if (!target)
            return ck_fail(err, CK_ERR_INTERNAL, "cross_entropy loss: no target");
        return ce_check(y, target, d, err);
    default:
        return ck_fail(err, CK_ERR_UNSUPPORTED, "unknown loss kind %d", (int)kind);
    }
}

ck_status ck_opc_loss_dy(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *dy,
                         ck_error *err)
{
    if (!dy || !ck_opc_is_float(dy->dtype) || !ck_shape_equal(&dy->shape, &y->shape))
        return ck_fail(err, CK_ERR_INTERNAL, "%s loss backward: the gradient tensor must have "
                       "a float dtype and the shape of %s", ck_loss_kind_name(kind),
                       ck_opc_tname(y));
    return CK_OK;
}

// ----------------------------------------------------------------------------
// optimizer

/* t is present (when `required`), has a float dtype and the parameter's element count. */
/* ----------------------------------------------------------------------- cross-entropy */

ck_status ck_opc_ce_spec(const char *be, const ck_loss_spec *loss, const ck_tensor *y,
                      const ck_tensor *target, int64_t *outer, int64_t *C, int64_t *inner,
                      ck_error *err)
{
    CK_TRY(ck_opc_need("cross_entropy", y, "logits", err));
    CK_TRY(ck_opc_need("cross_entropy", target, "target", err));
    const ck_tensor *ys[] = {y};
    CK_TRY(ck_opc_float_dtypes(be, "cross_entropy", ys, 1, err));
    const int cd = loss->class_dim;
    char s1[96], s2[96];
    bool ok = target->dtype == CK_I32 && cd >= 0 && cd < y->shape.ndim &&
              target->shape.ndim == y->shape.ndim - 1;
    for (int d = 0, t = 0; ok && d < y->shape.ndim; d++) {
        if (d == cd)
            continue;
        ok = target->shape.dim[t++] == y->shape.dim[d];
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "cross_entropy: target '%s' %s (%s) is not logits '%s' %s without class "
                       "dim %d, in i32",
                       ck_opc_tname(target), SH(target, s1), ck_dtype_name(target->dtype),
                       ck_opc_tname(y), SH(y, s2), cd);
    *outer = ck_opc_prod(&y->shape, 0, cd);
    *C = y->shape.dim[cd];
    *inner = ck_opc_prod(&y->shape, cd + 1, y->shape.ndim);
    return CK_OK;
}

ck_status ck_opc_ce_spec_classes(const ck_loss_spec *loss, const ck_tensor *target,
                              const int32_t *t, int64_t n, int64_t C, ck_error *err)
{
    for (int64_t i = 0; i < n; i++) {
        if (loss->has_ignore && t[i] == loss->ignore_index)
            continue;
        if (t[i] < 0 || t[i] >= C)
            return ck_fail(err, CK_ERR_INPUT,
                           "cross_entropy: class index %d at flat position %lld of '%s' is "
                           "outside [0, %lld)%s",
                           (int)t[i], (long long)i, ck_opc_tname(target), (long long)C,
                           loss->has_ignore ? " and is not ignore_index" : "");
    }
    return CK_OK;
}

