/*
 * CPU optimizer step: sgd, sgd with momentum and adam, as PyTorch's torch.optim.SGD
 * (dampening 0, no nesterov) and torch.optim.Adam (no amsgrad) compute them.
 *
 * The gradient is first multiplied by grad_scale (the inverse loss scale under mixed
 * precision, 1 otherwise), then weight decay adds wd * p. Everything is computed in double
 * and stored once in each tensor's dtype. Each tensor is loaded in its own dtype: under
 * mixed precision param and state are the fp32 masters and the gradient is the fp32
 * master gradient, but a low-dtype (fp16/bf16) gradient is read as well (ref_elem.h,
 * harness/precision.md). Step 1 starts from fresh state, as PyTorch
 * does: the momentum buffer becomes the first gradient, adam's moments start at zero.
 */
#include "backends/ref/ref_ops.h"
#include "backends/ref/ref_elem.h"

#include <math.h>

/* ---- the updates; g already scaled and decayed ---- */

/* p -= lr g */
static void sgd_update(ck_tensor *param, int64_t i, double g, double lr)
{
    ref_st(param, i, ref_ld(param, i) - lr * g);
}

/* v = momentum v + g (v = g at step 1); p -= lr v */
static void momentum_update(ck_tensor *param, ck_tensor *buf, int64_t i, double g,
                            const ck_optimizer *opt, int64_t step)
{
    double v = step == 1 ? g : opt->momentum * ref_ld(buf, i) + g;
    ref_st(buf, i, v);
    ref_st(param, i, ref_ld(param, i) - opt->lr * v);
}

/* m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr mhat / (sqrt(vhat) + eps) */
static void adam_update(ck_tensor *param, ck_tensor *m_buf, ck_tensor *v_buf, int64_t i,
                        double g, const ck_optimizer *opt, double bias_corr1, double bias_corr2,
                        int64_t step, double decay)
{
    double m_prev = step == 1 ? 0.0 : ref_ld(m_buf, i);
    double v_prev = step == 1 ? 0.0 : ref_ld(v_buf, i);
    double m = opt->beta1 * m_prev + (1.0 - opt->beta1) * g;
    double v = opt->beta2 * v_prev + (1.0 - opt->beta2) * g * g;
    ref_st(m_buf, i, m);
    ref_st(v_buf, i, v);
    double mhat = m / bias_corr1, vhat = v / bias_corr2;
    /* adamw: p (1 - lr wd) first, in double: one rounding of the whole update */
    ref_st(param, i, ref_ld(param, i) * decay - opt->lr * mhat / (sqrt(vhat) + opt->eps));
}

ck_status ref_optimizer_step(const ck_optimizer *opt, int64_t step, double grad_scale,
                             ck_tensor *param, const ck_tensor *grad, ck_tensor *state0,
                             ck_tensor *state1, ck_error *err)
{
    if ((unsigned)opt->kind >= CK_OPT_KIND_COUNT)
        return ck_fail(err, CK_ERR_UNSUPPORTED, "unknown optimizer kind %d",
                       (int)opt->kind);
    const char *fn = ck_optimizer_kind_name(opt->kind);
    const ck_tensor *ps[] = {param};
    CK_TRY(ref_check_float_dtypes(fn, ps, 1, err));
    CK_TRY(ck_opc_optimizer_args(REF_BE, fn, opt, step, param, grad, state0, state1, err));

    double bias_corr1 = 1.0 - pow(opt->beta1, (double)step);
    double bias_corr2 = 1.0 - pow(opt->beta2, (double)step);
    int64_t numel = ck_shape_numel(&param->shape);
    for (int64_t i = 0; i < numel; i++) {
        const bool decoupled = opt->kind == CK_OPT_ADAMW;
        double g = ref_ld(grad, i) * grad_scale +
                   (decoupled ? 0.0 : opt->weight_decay * ref_ld(param, i));
        switch (opt->kind) {
        case CK_OPT_SGD: sgd_update(param, i, g, opt->lr); break;
        case CK_OPT_MOMENTUM: momentum_update(param, state0, i, g, opt, step); break;
        case CK_OPT_ADAM:
            adam_update(param, state0, state1, i, g, opt, bias_corr1, bias_corr2, step, 1.0);
            break;
        case CK_OPT_ADAMW:
            adam_update(param, state0, state1, i, g, opt, bias_corr1, bias_corr2, step,
                        1.0 - opt->lr * opt->weight_decay);
            break;
        default: break;
        }
    }
    return CK_OK;
}
