/*
 * Host-side checks of the optimizers (check.h).
 */
#include "backends/check/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(t, buf) ck_shape_str(&(t)->shape, buf, sizeof buf)

static ck_status check_like_param(const char *be, const char *fn, const ck_tensor *param,
                                  const ck_tensor *t, const char *role, bool required,
                                  ck_error *err)
{
    if (!t)
        return required ? ck_fail(err, CK_ERR_INTERNAL, "%s: %s needs a %s tensor", fn,
                                  ck_opc_tname(param), role)
                        : CK_OK;
    if (!ck_opc_is_float(t->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "%s: %s %s of %s is %s; the %s backend "
                       "computes in fp32, fp64, fp16 and bf16", fn, role, ck_opc_tname(t),
                       ck_opc_tname(param), ck_dtype_name(t->dtype), be);
    if (ck_shape_numel(&t->shape) != ck_shape_numel(&param->shape))
        return ck_fail(err, CK_ERR_INTERNAL, "%s: %s %s has %lld elements, %s has %lld", fn,
                       role, ck_opc_tname(t), (long long)ck_shape_numel(&t->shape),
                       ck_opc_tname(param), (long long)ck_shape_numel(&param->shape));
    return CK_OK;
}

ck_status ck_opc_optimizer_args(const char *be, const char *fn, const ck_optimizer *opt,
                                int64_t step, const ck_tensor *param, const ck_tensor *grad,
                                const ck_tensor *state0, const ck_tensor *state1,
                                ck_error *err)
{
    if (step < 1)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: step %lld, steps count from 1", fn,
                       (long long)step);
    CK_TRY(check_like_param(be, fn, param, grad, "gradient", true, err));
    const bool uses0 = opt->kind == CK_OPT_MOMENTUM || opt->kind == CK_OPT_ADAM ||
                       opt->kind == CK_OPT_ADAMW;
    const bool uses1 = opt->kind == CK_OPT_ADAM || opt->kind == CK_OPT_ADAMW;
    CK_TRY(check_like_param(be, fn, param, state0, uses1 ? "first moment" : "momentum buffer",
                         uses0, err));
    return check_like_param(be, fn, param, state1, "second moment", uses1, err);
}

