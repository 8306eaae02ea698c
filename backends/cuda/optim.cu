/*
 * CUDA optimizer step: sgd, sgd with momentum and adam, as PyTorch's torch.optim.SGD
 * (dampening 0, no nesterov) and torch.optim.Adam (no amsgrad) compute them.
 *
 * As backends/ref/optim.c, element by element: the gradient is first multiplied by
 * grad_scale, then weight decay adds wd * p; everything is computed in double with the
 * CPU's expressions and stored once in each tensor's dtype (each tensor is loaded in its
 * own: fp32 masters and state, an fp32 or low-dtype gradient); step 1 starts from fresh
 * state. Adam's bias corrections are computed once on the host with the CPU's pow, so
 * every update is bit-identical to the CPU backend's.
 */
#include "backends/cuda/cuda_common.cuh"

#include <math.h>

typedef struct {
    int kind;
    double lr, momentum, beta1, beta2, eps, weight_decay;
    double bias_corr1, bias_corr2;
    int64_t step;
} optim_args;

static __global__ void optimizer_kernel(ck_dv param, ck_dv grad, ck_dv state0, ck_dv state1,
                                 double grad_scale, optim_args o, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    {
        const bool decoupled = o.kind == CK_OPT_ADAMW;
        const double g = ck_ld(grad, i) * grad_scale +
                         (decoupled ? 0.0 : o.weight_decay * ck_ld(param, i));
        switch (o.kind) {
        case CK_OPT_SGD:
            /* p -= lr g */
            ck_st(param, i, ck_ld(param, i) - o.lr * g);
            break;
        case CK_OPT_MOMENTUM: {
            /* v = momentum v + g (v = g at step 1); p -= lr v */
            const double v = o.step == 1 ? g : o.momentum * ck_ld(state0, i) + g;
            ck_st(state0, i, v);
            ck_st(param, i, ck_ld(param, i) - o.lr * v);
            break;
        }
        case CK_OPT_ADAM:
        case CK_OPT_ADAMW: {
            /* m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr mhat / (sqrt(vhat) + eps) */
            const double m_prev = o.step == 1 ? 0.0 : ck_ld(state0, i);
            const double v_prev = o.step == 1 ? 0.0 : ck_ld(state1, i);
            const double m = o.beta1 * m_prev + (1.0 - o.beta1) * g;
            const double v = o.beta2 * v_prev + (1.0 - o.beta2) * g * g;
            ck_st(state0, i, m);
            ck_st(state1, i, v);
            const double mhat = m / o.bias_corr1, vhat = v / o.bias_corr2;
            /* adamw: p (1 - lr wd) first, in double (backends/ref/optim.c) */
            const double decay = decoupled ? 1.0 - o.lr * o.weight_decay : 1.0;
            ck_st(param, i, ck_ld(param, i) * decay - o.lr * mhat / (sqrt(vhat) + o.eps));
            break;
        }
        default: break;
        }
    }
}

ck_status cuda_optimizer_step(ck_cuda *cu, const ck_optimizer *opt, int64_t step,
                              double grad_scale, ck_tensor *param, const ck_tensor *grad,
                              ck_tensor *state0, ck_tensor *state1, ck_error *err)
{
    if ((unsigned)opt->kind >= CK_OPT_KIND_COUNT)
        return ck_fail(err, CK_ERR_UNSUPPORTED, "unknown optimizer kind %d",
                       (int)opt->kind);
    const char *fn = ck_optimizer_kind_name(opt->kind);
    if (!ck_cuda_float_dtype(param->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "%s: %s is %s; the cuda backend computes in "
                       "fp32, fp64, fp16 or bf16", fn, ck_cuda_tname(param),
                       ck_dtype_name(param->dtype));
    CK_TRY(ck_opc_optimizer_args(CUDA_BE, fn, opt, step, param, grad, state0, state1, err));
    const bool uses0 = opt->kind == CK_OPT_MOMENTUM || opt->kind == CK_OPT_ADAM ||
                       opt->kind == CK_OPT_ADAMW;
    const bool uses1 = opt->kind == CK_OPT_ADAM || opt->kind == CK_OPT_ADAMW;

    optim_args o;
    o.kind = (int)opt->kind;
    o.lr = opt->lr;
    o.momentum = opt->momentum;
    o.beta1 = opt->beta1;
    o.beta2 = opt->beta2;
    o.eps = opt->eps;
    o.weight_decay = opt->weight_decay;
    o.bias_corr1 = 1.0 - pow(opt->beta1, (double)step);
    o.bias_corr2 = 1.0 - pow(opt->beta2, (double)step);
    o.step = step;
    const int64_t n = ck_shape_numel(&param->shape);
    optimizer_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(param), ck_view(grad), ck_view(uses0 ? state0 : NULL),
        ck_view(uses1 ? state1 : NULL), grad_scale, o, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}
