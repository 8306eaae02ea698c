/*
 * CPU pointwise activations: relu, leaky_relu, gelu (exact, erf form), tanh, sigmoid, and
 * the unary functions sqrt, rsqrt, reciprocal, exp, log, neg, erf, abs; cast.
 *
 * Every kernel loads each tensor in its own dtype (fp32, fp64, fp16 or bf16; x, y, dy and
 * dx need not share one), computes in double and rounds once on store; the backward adds
 * its double contribution to dx with one rounding (ref_elem.h, harness/precision.md).
 * The backward pass differentiates at the input x (io->in[0]), so relu'(0) = 0 and
 * leaky_relu'(0) = slope, as PyTorch's threshold_backward / leaky_relu_backward do; relu
 * reads its output y instead (y > 0 exactly when x > 0, so the result is the same bits), as
 * PyTorch saves relu's result: the executor then keeps one tensor where a conv feeds a relu.
 */
#include "backends/ref/ref_ops.h"
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
    case CK_OP_SQRT: return sqrt(x);
    case CK_OP_RSQRT: return 1.0 / sqrt(x);
    case CK_OP_RECIPROCAL: return 1.0 / x;
    case CK_OP_EXP: return exp(x);
    case CK_OP_LOG: return log(x);
    case CK_OP_NEG: return -x;
    case CK_OP_ERF: return erf(x);
    case CK_OP_ABS: return fabs(x);
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
    case CK_OP_SQRT: return 0.5 / sqrt(x);
    case CK_OP_RSQRT: return -0.5 / (x * sqrt(x));
    case CK_OP_RECIPROCAL: return -1.0 / (x * x);
    case CK_OP_EXP: return exp(x);
    case CK_OP_LOG: return 1.0 / x;
    case CK_OP_NEG: return -1.0;
    case CK_OP_ERF: return M_2_SQRTPI * exp(-x * x);
    case CK_OP_ABS: return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : 0.0;
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

/* dinp += dout * act'(inp); all (numel). fresh (ck_op_grads.din0_fresh): dinp holds no
 * gradient yet and may be dout itself, so element i of dinp is set to +0 after element i
 * of dout and inp was read, then accumulated: the bits of a zeroed buffer. */
static void activation_backward(ck_tensor *dinp, const ck_tensor *dout, const ck_tensor *inp,
                                ck_op_kind kind, double slope, int64_t numel, bool fresh)
{
    for (int64_t i = 0; i < numel; i++) {
        const double v = ref_ld(dout, i) * dact(kind, slope, ref_ld(inp, i));
        if (fresh)
            ref_st(dinp, i, 0.0);
        ref_acc(dinp, i, v);
    }
}

static ck_status activation_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
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

static ck_status activation_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_status rc = ck_opc_activation_bwd(REF_BE, op, io, g, err);
    if (rc != CK_OK || !g->din[0])
        return rc;
    /* relu: from its output (the file's comment) */
    const ck_tensor *at = op->kind == CK_OP_RELU ? io->out : io->in[0];
    activation_backward(g->din[0], g->dout, at, op->kind, op->slope,
                        ck_shape_numel(&io->in[0]->shape), g->din0_fresh);
    return CK_OK;
}

/* mul, silu, gelu (tanh approximation) in double (wide_kernels.h). */
#include "backends/ref/wide_scope.h"

#include <math.h>

void f64_mul_fwd(double *y, const double *a, const double *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] * b[i];
}

void f64_mul_bwd(double *da, double *db, const double *dy, const double *a, const double *b,
                 int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (da)
            da[i] += dy[i] * b[i];
        if (db)
            db[i] += dy[i] * a[i];
    }
}

double f64_silu(double x) { return x * sigmoid(x); }

double f64_dsilu(double x)
{
    double s = sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}

/* PyTorch's gelu(approximate='tanh'): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
#define GELU_C 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_K 0.044715

double f64_gelu_tanh(double x)
{
    return 0.5 * x * (1.0 + tanh(GELU_C * (x + GELU_K * x * x * x)));
}

double f64_dgelu_tanh(double x)
{
    double t = tanh(GELU_C * (x + GELU_K * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_K * x * x);
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h): CK_OP_MUL, CK_OP_SILU, CK_OP_GELU with approximate "tanh"

static const char *pw_name(const ck_op_params *op)
{
    return op->kind == CK_OP_MUL ? "mul" : op->kind == CK_OP_SILU ? "silu" : "gelu";
}

static ck_status pw_check(const ck_op_params *op, const ck_op_io *io, const ck_tensor *y,
                          const ck_tensor *dx1, const ck_tensor *dx2, ck_error *err)
{
    const int want = op->kind == CK_OP_MUL ? 2 : 1;
    if (io->n_in != want || !io->in[0] || (want == 2 && !io->in[1]) || !y)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs %d input(s) and an output", pw_name(op),
                       want);
    const ck_tensor *ts[] = {y, want == 2 ? io->in[1] : NULL, dx1, dx2};
    return ck_opc_pointwise(REF_BE, pw_name(op), io->in[0], ts, 4, err);
}

static ck_status wide_op_forward(const ck_op_params *op, const ck_fwd_args *args,
                                  ck_op_io *io, ck_error *err)
{
    (void)args;
    CK_TRY(pw_check(op, io, io->out, NULL, NULL, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    ref_scope s;
    ref_scope_begin(&s, pw_name(op), err);
    const double *a = ref_scope_in(&s, io->in[0]);
    const double *b = op->kind == CK_OP_MUL ? ref_scope_in(&s, io->in[1]) : NULL;
    double *y = ref_scope_out(&s, io->out);
    if (s.st == CK_OK) {
        if (op->kind == CK_OP_MUL)
            f64_mul_fwd(y, a, b, n);
        else
            for (int64_t i = 0; i < n; i++)
                y[i] = op->kind == CK_OP_SILU ? f64_silu(a[i]) : f64_gelu_tanh(a[i]);
    }
    return ref_scope_end(&s, true);
}

static ck_status wide_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                   const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    const bool two = op->kind == CK_OP_MUL;
    CK_TRY(pw_check(op, io, g->dout, g->din[0], two ? g->din[1] : NULL, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    ref_scope s;
    ref_scope_begin(&s, pw_name(op), err);
    const double *a = ref_scope_in(&s, io->in[0]);
    const double *b = two ? ref_scope_in(&s, io->in[1]) : NULL;
    const double *dy = ref_scope_in(&s, g->dout);
    /* fresh (ck_op_grads.din0_fresh, silu and gelu): din[0] holds no gradient yet and may be
     * dout's buffer. Below fp64, dy is a widened copy by now, so din[0] is set to +0 and the
     * scratch is added to it as usual; in fp64 both are the tensor itself and element i of
     * da is stored from +0 after element i of dy was read: the bits of a zeroed buffer. */
    const bool fresh = !two && g->din0_fresh && g->din[0] && s.st == CK_OK;
    if (fresh && g->din[0]->dtype != CK_F64)
        memset(g->din[0]->data, 0, ck_tensor_bytes(g->din[0]));
    double *da = ref_scope_grad(&s, g->din[0]), *db = two ? ref_scope_grad(&s, g->din[1]) : NULL;
    if (s.st == CK_OK) {
        if (two)
            f64_mul_bwd(da, db, dy, a, b, n);
        else if (da)
            for (int64_t i = 0; i < n; i++) {
                const double v =
                    dy[i] * (op->kind == CK_OP_SILU ? f64_dsilu(a[i]) : f64_dgelu_tanh(a[i]));
                da[i] = (fresh ? 0.0 : da[i]) + v;
            }
    }
    return ref_scope_end(&s, true);
}

// ----------------------------------------------------------------------------
// CK_OP_POSITIONAL: y = x + W, W (L, ...) repeated over the batch; dW sums the batch

static ck_status positional_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                 ck_error *err)
{
    (void)op;
    (void)args;
    int64_t N, M;
    CK_TRY(ck_opc_positional(REF_BE, io->in[0], io->weight, io->out, &N, &M, err));
    ref_scope s;
    ref_scope_begin(&s, "positional", err);
    const double *x = ref_scope_in(&s, io->in[0]), *w = ref_scope_in(&s, io->weight);
    double *y = ref_scope_out(&s, io->out);
    if (s.st == CK_OK)
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < M; j++)
                y[n * M + j] = x[n * M + j] + w[j];
    return ref_scope_end(&s, true);
}

static ck_status positional_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t N, M;
    CK_TRY(ck_opc_positional(REF_BE, io->in[0], io->weight, g->dout, &N, &M, err));
    ref_scope s;
    ref_scope_begin(&s, "positional backward", err);
    const double *dy = ref_scope_in(&s, g->dout);
    double *dx = ref_scope_grad(&s, g->din[0]), *dw = ref_scope_grad(&s, g->dweight);
    if (s.st == CK_OK) {
        if (dx)
            for (int64_t i = 0; i < N * M; i++)
                dx[i] += dy[i];
        if (dw)
            for (int64_t j = 0; j < M; j++) {
                double acc = 0.0;
                for (int64_t n = 0; n < N; n++)
                    acc += dy[n * M + j];
                dw[j] += acc;
            }
    }
    return ref_scope_end(&s, true);
}

#include "backends/ref/ref_elem.h"

/* ================================== cast ================================== */

/* y = x rounded to `to` (nearest even; fp16 overflows to +-inf, NaN stays NaN), stored in
 * y's dtype; dx += dy rounded to `from`, as PyTorch's x.to(dtype) and its backward
 * (cases/README.md, `cast`). Both read only their own tensors: backward reads nothing of
 * the forward. */
static ck_status cast_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                 ck_error *err)
{
    (void)args;
    CK_TRY(ck_opc_activation_fwd(REF_BE, op, io, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    for (int64_t i = 0; i < n; i++)
        ref_st(io->out, i, ck_cast_round(ref_ld(io->in[0], i), op->cast_to, io->out->dtype));
    return CK_OK;
}

static ck_status cast_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    CK_TRY(ck_opc_activation_bwd(REF_BE, op, io, g, err));
    if (!g->din[0])
        return CK_OK;
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    for (int64_t i = 0; i < n; i++)
        ref_acc(g->din[0], i, ck_cast_round(ref_ld(g->dout, i), op->cast_from, g->din[0]->dtype));
    return CK_OK;
}

/* ================================== add ================================== */

/* out = in[0] + in[1] + ... in input order; all (numel) */
static void add_forward(ck_tensor *out, const ck_tensor *const *in, int n_in, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++) {
        double sum = 0.0;
        for (int k = 0; k < n_in; k++)
            sum += ref_ld(in[k], i);
        ref_st(out, i, sum);
    }
}

/* din[k] += dout for every non-NULL din[k]; all (numel) */
/* din[k] += dout for each k; fresh (ck_op_grads.din0_fresh): din[0] holds no gradient yet
 * and may be dout itself, so element i is set to +0 after dout's element i was read */
static void add_backward(ck_tensor *const *din, const ck_tensor *dout, int n_in, int64_t numel,
                         bool fresh)
{
    for (int k = 0; k < n_in; k++) {
        if (!din[k])
            continue;
        for (int64_t i = 0; i < numel; i++) {
            const double v = ref_ld(dout, i);
            if (fresh && k == 0)
                ref_st(din[k], i, 0.0);
            ref_acc(din[k], i, v);
        }
    }
}

static ck_status add_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                          ck_error *err)
{
    CK_TRY(ck_opc_add_fwd(REF_BE, io, err));
    add_forward(io->out, io->in, io->n_in, ck_shape_numel(&io->in[0]->shape));
    return CK_OK;
}

static ck_status add_op_backward(const ck_op_params *op, const ck_fwd_args *args, const ck_op_io *io,
                           ck_op_grads *g, ck_error *err)
{
    CK_TRY(ck_opc_add_bwd(REF_BE, io, g, err));
    add_backward(g->din, g->dout, io->n_in, ck_shape_numel(&io->in[0]->shape), g->din0_fresh);
    return CK_OK;
}

/* ---- the family's entry points (ref_ops.h) ---- */

static ref_op_fns pick(const ck_op_params *op)
{
    /* add/mul of differing shapes or with a constant: the broadcast family's kernels */
    if (ck_opc_is_broadcast(op))
        return (ref_op_fns){ref_broadcast_forward, ref_broadcast_backward};
    switch (op->kind) {
    case CK_OP_GELU:
        if (ck_gelu_is_tanh(op)) /* the tanh approximation runs in double */
            return (ref_op_fns){wide_op_forward, wide_op_backward};
        /* fall through */
    case CK_OP_RELU:
    case CK_OP_LEAKY_RELU:
    case CK_OP_TANH:
    case CK_OP_SIGMOID:
    case CK_OP_SQRT:
    case CK_OP_RSQRT:
    case CK_OP_RECIPROCAL:
    case CK_OP_EXP:
    case CK_OP_LOG:
    case CK_OP_NEG:
    case CK_OP_ERF:
    case CK_OP_ABS:
        return (ref_op_fns){activation_op_forward, activation_op_backward};
    case CK_OP_MUL:
    case CK_OP_SILU: return (ref_op_fns){wide_op_forward, wide_op_backward};
    case CK_OP_ADD: return (ref_op_fns){add_op_forward, add_op_backward};
    case CK_OP_POSITIONAL: return (ref_op_fns){positional_op_forward, positional_op_backward};
    case CK_OP_CAST: return (ref_op_fns){cast_op_forward, cast_op_backward};
    default: return (ref_op_fns){NULL, NULL};
    }
}

REF_FAMILY_ENTRIES(pointwise, pick)
