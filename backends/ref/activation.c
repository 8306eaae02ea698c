/*
 * CPU pointwise activations: relu, leaky_relu, gelu (exact, erf form), tanh, sigmoid.
 *
 * Every kernel loads each tensor in its own dtype (fp32, fp64, fp16 or bf16; x, y, dy and
 * dx need not share one), computes in double and rounds once on store; the backward adds
 * its double contribution to dx with one rounding (ref_elem.h, harness/precision.md).
 * The backward pass differentiates at the input x (io->in[0]), so relu'(0) = 0 and
 * leaky_relu'(0) = slope, as PyTorch's threshold_backward / leaky_relu_backward do.
 */
#include "backends/ref/ref_elem.h"

#include <math.h>

/* ---- the functions and their derivatives ---- */

static double sigmoid(double x)
{
    /* never exponentiates a positive number, so it cannot overflow */
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

static double act(ck_op_kind kind, double slope, double x)
{
    switch (kind) {
    case CK_OP_RELU: return x <= 0.0 ? 0.0 : x; /* NaN stays NaN, as torch.relu */
    case CK_OP_LEAKY_RELU: return x > 0.0 ? x : slope * x;
    case CK_OP_GELU: return 0.5 * x * (1.0 + erf(x * M_SQRT1_2));
    case CK_OP_TANH: return tanh(x);
    case CK_OP_SIGMOID: return sigmoid(x);
    default: return NAN;
    }
}

/* d act / dx at x */
static double dact(ck_op_kind kind, double slope, double x)
{
    switch (kind) {
    case CK_OP_RELU: return x <= 0.0 ? 0.0 : 1.0; /* threshold_backward: NaN passes dy */
    case CK_OP_LEAKY_RELU: return x > 0.0 ? 1.0 : slope;
    case CK_OP_GELU: {
        /* Phi(x) + x phi(x) */
        double cdf = 0.5 * (1.0 + erf(x * M_SQRT1_2));
        double pdf = exp(-0.5 * x * x) * (0.5 * M_2_SQRTPI * M_SQRT1_2);
        return cdf + x * pdf;
    }
    case CK_OP_TANH: {
        double t = tanh(x);
        return 1.0 - t * t;
    }
    case CK_OP_SIGMOID: {
        double s = sigmoid(x);
        return s * (1.0 - s);
    }
    default: return NAN;
    }
}

/* ---- layer functions ---- */

/* out = act(inp); all (numel) */
static void activation_forward(ck_tensor *out, const ck_tensor *inp, ck_op_kind kind,
                               double slope, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++)
        ref_st(out, i, act(kind, slope, ref_ld(inp, i)));
}

/* dinp += dout * act'(inp); all (numel) */
static void activation_backward(ck_tensor *dinp, const ck_tensor *dout, const ck_tensor *inp,
                                ck_op_kind kind, double slope, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++)
        ref_acc(dinp, i, ref_ld(dout, i) * dact(kind, slope, ref_ld(inp, i)));
}

ck_status ref_activation_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                 ck_error *err)
{
    (void)args;
    ck_status rc = ck_opc_activation_fwd(REF_BE, op, io, err);
    if (rc != CK_OK)
        return rc;
    activation_forward(io->out, io->in[0], op->kind, op->slope,
                       ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

ck_status ref_activation_backward(const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_status rc = ck_opc_activation_bwd(REF_BE, op, io, g, err);
    if (rc != CK_OK || !g->din[0])
        return rc;
    activation_backward(g->din[0], g->dout, io->in[0], op->kind, op->slope,
                        ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}
