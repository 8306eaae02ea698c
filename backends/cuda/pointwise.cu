/*
 * CUDA pointwise family: the activations relu, leaky_relu, gelu (exact, erf form), tanh,
 * sigmoid and sqrt; then mul, silu and gelu tanh; add; positional; cast.
 *
 * As backends/ref/pointwise.c: every kernel loads each tensor in its own dtype (x, y, dy
 * and dx need not share one), computes in double and rounds once on store; backward adds
 * its double contribution to dx with one rounding (ck_acc). Backward differentiates at the
 * input x (io->in[0]), so relu'(0) = 0 and leaky_relu'(0) = slope. relu and leaky_relu
 * match the CPU bit for bit; gelu, tanh and sigmoid use CUDA's double erf/exp/tanh (within
 * 2 ulp in double), so after rounding to fp32 or lower they almost always match glibc's.
 */
#include "backends/cuda/cuda_common.cuh"

/* glibc's M_SQRT1_2 and M_2_SQRTPI, spelled out for device code */
#define CK_SQRT1_2 0.70710678118654752440
#define CK_2_SQRTPI 1.12837916709551257390

// ----------------------------------------------------------------------------
// the functions and their derivatives (as the CPU's act / dact)

static __device__ __forceinline__ double ck_sigmoid(double x)
{
    /* never exponentiates a positive number, so it cannot overflow */
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

static __device__ __forceinline__ double ck_act(int kind, double slope, double x)
{
    switch (kind) {
    case CK_OP_RELU: return x <= 0.0 ? 0.0 : x; /* NaN stays NaN, as torch.relu */
    case CK_OP_LEAKY_RELU: return x > 0.0 ? x : slope * x;
    case CK_OP_GELU: return 0.5 * x * (1.0 + erf(x * CK_SQRT1_2));
    case CK_OP_TANH: return tanh(x);
    case CK_OP_SIGMOID: return ck_sigmoid(x);
    case CK_OP_SQRT: return sqrt(x);
    case CK_OP_RSQRT: return 1.0 / sqrt(x);
    case CK_OP_RECIPROCAL: return 1.0 / x;
    case CK_OP_EXP: return exp(x);
    case CK_OP_LOG: return log(x);
    case CK_OP_NEG: return -x;
    case CK_OP_ERF: return erf(x);
    case CK_OP_ABS: return fabs(x);
    default: return __longlong_as_double(0x7ff8000000000000LL); /* NaN */
    }
}

/* d act / dx at x */
static __device__ __forceinline__ double ck_dact(int kind, double slope, double x)
{
    switch (kind) {
    case CK_OP_RELU: return x <= 0.0 ? 0.0 : 1.0; /* threshold_backward: NaN passes dy */
    case CK_OP_LEAKY_RELU: return x > 0.0 ? 1.0 : slope;
    case CK_OP_GELU: {
        /* Phi(x) + x phi(x) */
        double cdf = 0.5 * (1.0 + erf(x * CK_SQRT1_2));
        double pdf = exp(-0.5 * x * x) * (0.5 * CK_2_SQRTPI * CK_SQRT1_2);
        return cdf + x * pdf;
    }
    case CK_OP_TANH: {
        double t = tanh(x);
        return 1.0 - t * t;
    }
    case CK_OP_SIGMOID: {
        double s = ck_sigmoid(x);
        return s * (1.0 - s);
    }
    case CK_OP_SQRT: return 0.5 / sqrt(x);
    case CK_OP_RSQRT: return -0.5 / (x * sqrt(x));
    case CK_OP_RECIPROCAL: return -1.0 / (x * x);
    case CK_OP_EXP: return exp(x);
    case CK_OP_LOG: return 1.0 / x;
    case CK_OP_NEG: return -1.0;
    case CK_OP_ERF: return CK_2_SQRTPI * exp(-x * x);
    case CK_OP_ABS: return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : 0.0;
    default: return __longlong_as_double(0x7ff8000000000000LL);
    }
}

// ----------------------------------------------------------------------------
// kernels

/* out = act(inp); all (numel) */
static __global__ void activation_forward_kernel(ck_dv out, ck_dv inp, int kind, double slope,
                                          int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    ck_st(out, i, ck_act(kind, slope, ck_ld(inp, i)));
}

/* dinp += dout * act'(inp); all (numel). fresh (ck_op_grads.din0_fresh): dinp holds no
 * gradient yet and may be dout itself: element i is set to +0 after element i of dout and
 * inp was read, then accumulated, the bits of a zeroed buffer. */
static __global__ void activation_backward_kernel(ck_dv dinp, ck_dv dout, ck_dv inp, int kind,
                                           double slope, int64_t numel, bool fresh)
{
    CK_GRID_STRIDE(i, numel)
    {
        const double v = ck_ld(dout, i) * ck_dact(kind, slope, ck_ld(inp, i));
        if (fresh)
            ck_st(dinp, i, 0.0);
        ck_acc(dinp, i, v);
    }
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

static ck_status activation_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  ck_op_io *io, ck_error *err)
{
    (void)args;
    CK_TRY(ck_opc_activation_fwd(CUDA_BE, op, io, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    activation_forward_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(io->out), ck_view(io->in[0]), (int)op->kind, op->slope, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status activation_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                   const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    CK_TRY(ck_opc_activation_bwd(CUDA_BE, op, io, g, err));
    if (!g->din[0])
        return CK_OK;
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    activation_backward_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(
        ck_view(g->din[0]), ck_view(g->dout),
        ck_view(op->kind == CK_OP_RELU ? io->out : io->in[0]), /* relu: y > 0 iff x > 0 */
        (int)op->kind, op->slope, n, g->din0_fresh);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

/* CUDA mul, silu, gelu (tanh) (backends/ref/pointwise.c): one thread per element. */
#include "backends/cuda/cuda_common.cuh"

#define GELU_C 0.7978845608028654
#define GELU_K 0.044715

static __device__ __forceinline__ double d_sigmoid(double x)
{
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

static __global__ void pw_fwd_kernel(int kind, ck_dv y, ck_dv a, ck_dv b, int64_t n)
{
    CK_GRID_STRIDE(i, n)
    {
        const double x = ck_ld(a, i);
        double v;
        if (kind == 0)
            v = x * ck_ld(b, i);
        else if (kind == 1)
            v = x * d_sigmoid(x);
        else
            v = 0.5 * x * (1.0 + tanh(GELU_C * (x + GELU_K * x * x * x)));
        ck_st(y, i, v);
    }
}

/* fresh (ck_op_grads.din0_fresh, silu and gelu): da holds no gradient yet and may be dy
 * itself: element i is set to +0 after element i of dy and a was read, then accumulated,
 * the bits of a zeroed buffer. */
static __global__ void pw_bwd_kernel(int kind, ck_dv da, ck_dv db, ck_dv dy, ck_dv a, ck_dv b, int64_t n,
                                     bool fresh)
{
    CK_GRID_STRIDE(i, n)
    {
        const double g = ck_ld(dy, i), x = ck_ld(a, i);
        if (fresh && (kind == 1 || kind == 2))
            ck_st(da, i, 0.0);
        if (kind == 3) {
            /* mul(x, x): both contributions, in the reference's order, rounded once */
            ck_acc(da, i, g * ck_ld(b, i) + g * x);
        } else if (kind == 0) {
            if (da.p)
                ck_acc(da, i, g * ck_ld(b, i));
            if (db.p)
                ck_acc(db, i, g * x);
        } else if (kind == 1) {
            const double s = d_sigmoid(x);
            ck_acc(da, i, g * (s * (1.0 + x * (1.0 - s))));
        } else {
            const double t = tanh(GELU_C * (x + GELU_K * x * x * x));
            ck_acc(da, i, g * (0.5 * (1.0 + t) +
                               0.5 * x * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_K * x * x)));
        }
    }
}

static ck_status launch_pointwise_fwd(ck_cuda *cu, int kind, ck_dv y, ck_dv a, ck_dv b, int64_t n,
                             ck_error *err)
{
    pw_fwd_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(kind, y, a, b, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status launch_pointwise_bwd(ck_cuda *cu, int kind, ck_dv da, ck_dv db, ck_dv dy, ck_dv a,
                             ck_dv b, int64_t n, bool fresh, ck_error *err)
{
    if (!da.p && !db.p)
        return CK_OK;
    pw_bwd_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(kind, da, db, dy, a, b, n, fresh);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh): CK_OP_MUL, CK_OP_SILU, CK_OP_GELU with approximate "tanh"

static int pw_kind(const ck_op_params *op)
{
    return op->kind == CK_OP_MUL ? 0 : op->kind == CK_OP_SILU ? 1 : 2;
}

static ck_status pw_check(const ck_op_params *op, const ck_op_io *io, const ck_tensor *y,
                          const ck_tensor *d1, const ck_tensor *d2, ck_error *err)
{
    const char *fn = op->kind == CK_OP_MUL ? "mul" : op->kind == CK_OP_SILU ? "silu" : "gelu";
    const int want = op->kind == CK_OP_MUL ? 2 : 1;
    if (io->n_in != want || !io->in[0] || (want == 2 && !io->in[1]) || !y)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs %d input(s) and an output", fn, want);
    const ck_tensor *ts[] = {y, want == 2 ? io->in[1] : NULL, d1, d2};
    return ck_opc_pointwise(CUDA_BE, fn, io->in[0], ts, 4, err);
}

static ck_status wide_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                   ck_op_io *io, ck_error *err)
{
    (void)args;
    CK_TRY(pw_check(op, io, io->out, NULL, NULL, err));
    return launch_pointwise_fwd(cu, pw_kind(op), ck_view(io->out), ck_view(io->in[0]),
                              ck_view(op->kind == CK_OP_MUL ? io->in[1] : NULL),
                              ck_shape_numel(&io->in[0]->shape), err);
}

static ck_status wide_op_backward(ck_cuda *cu, const ck_op_params *op,
                                    const ck_fwd_args *args, const ck_op_io *io, ck_op_grads *g,
                                    ck_error *err)
{
    (void)args;
    const bool two = op->kind == CK_OP_MUL;
    CK_TRY(pw_check(op, io, g->dout, g->din[0], two ? g->din[1] : NULL, err));
    if (two && g->din[0] && g->din[0] == g->din[1])
        return launch_pointwise_bwd(cu, 3, ck_view(g->din[0]), ck_view(NULL), ck_view(g->dout),
                                  ck_view(io->in[0]), ck_view(io->in[1]),
                                  ck_shape_numel(&io->in[0]->shape), false, err);
    return launch_pointwise_bwd(cu, pw_kind(op), ck_view(g->din[0]),
                              ck_view(two ? g->din[1] : NULL), ck_view(g->dout),
                              ck_view(io->in[0]), ck_view(two ? io->in[1] : NULL),
                              ck_shape_numel(&io->in[0]->shape), !two && g->din0_fresh, err);
}

// ----------------------------------------------------------------------------
// CK_OP_POSITIONAL (backends/ref/pointwise.c): y = x + W repeated over the batch

static __global__ void pos_fwd_kernel(ck_dv y, ck_dv x, ck_dv w, int64_t N, int64_t M)
{
    CK_GRID_STRIDE(i, N * M)
    ck_st(y, i, ck_ld(x, i) + ck_ld(w, i % M));
}

static __global__ void pos_dx_kernel(ck_dv dx, ck_dv dy, int64_t n)
{
    CK_GRID_STRIDE(i, n)
    ck_acc(dx, i, ck_ld(dy, i));
}

static __global__ void pos_dw_kernel(ck_dv dw, ck_dv dy, int64_t N, int64_t M)
{
    CK_GRID_STRIDE(j, M)
    {
        double acc = 0.0;
        for (int64_t n = 0; n < N; n++)
            acc = __dadd_rn(acc, ck_ld(dy, n * M + j));
        ck_acc(dw, j, acc);
    }
}

static ck_status positional_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  ck_op_io *io, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t N, M;
    CK_TRY(ck_opc_positional(CUDA_BE, io->in[0], io->weight, io->out, &N, &M, err));
    pos_fwd_kernel<<<ck_blocks(N * M), CK_THREADS, 0, cu->stream>>>(
        ck_view(io->out), ck_view(io->in[0]), ck_view(io->weight), N, M);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status positional_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                   const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t N, M;
    CK_TRY(ck_opc_positional(CUDA_BE, io->in[0], io->weight, g->dout, &N, &M, err));
    if (g->din[0]) {
        pos_dx_kernel<<<ck_blocks(N * M), CK_THREADS, 0, cu->stream>>>(ck_view(g->din[0]),
                                                                      ck_view(g->dout), N * M);
        CK_LAUNCH_CHECK();
    }
    if (g->dweight) {
        pos_dw_kernel<<<ck_blocks(M), CK_THREADS, 0, cu->stream>>>(ck_view(g->dweight),
                                                                  ck_view(g->dout), N, M);
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// add: n inputs of one shape, summed in input order in double and rounded once

typedef struct {
    ck_dv v[CK_MAX_INPUTS];
} input_list;

/* out = in[0] + in[1] + ... in input order; all (numel) */
static __global__ void add_forward_kernel(ck_dv out, input_list in, int n_in, int64_t numel)
{
    CK_GRID_STRIDE(i, numel)
    {
        double sum = 0.0;
        for (int k = 0; k < n_in; k++)
            sum = __dadd_rn(sum, ck_ld(in.v[k], i));
        ck_st(out, i, sum);
    }
}

/* dx[i] += dy[i]; all (numel) */
/* dx += dy; fresh (ck_op_grads.din0_fresh): dx holds no gradient yet and may be dy itself,
 * so element i is set to +0 after dy's element i was read */
static __global__ void accumulate_kernel(ck_dv dx, ck_dv dy, int64_t numel, bool fresh)
{
    CK_GRID_STRIDE(i, numel)
    {
        const double v = ck_ld(dy, i);
        if (fresh)
            ck_st(dx, i, 0.0);
        ck_acc(dx, i, v);
    }
}

static ck_status accumulate(ck_cuda *cu, ck_tensor *dx, const ck_tensor *dy, int64_t numel,
                            bool fresh, ck_error *err)
{
    accumulate_kernel<<<ck_blocks(numel), CK_THREADS, 0, cu->stream>>>(ck_view(dx), ck_view(dy),
                                                                       numel, fresh);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// add

static ck_status add_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                           ck_op_io *io, ck_error *err)
{
    (void)op;
    (void)args;
    CK_TRY(ck_opc_add_fwd(CUDA_BE, io, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    input_list in;
    memset(&in, 0, sizeof in);
    for (int k = 0; k < io->n_in; k++)
        in.v[k] = ck_view(io->in[k]);
    add_forward_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(ck_view(io->out), in,
                                                                     io->n_in, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status add_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                            const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    CK_TRY(ck_opc_add_bwd(CUDA_BE, io, g, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    for (int k = 0; k < io->n_in; k++)
        if (g->din[k])
            CK_TRY(accumulate(cu, g->din[k], g->dout, n, g->din0_fresh && k == 0, err));
    return CK_OK;
}

// ----------------------------------------------------------------------------
// cast (backends/ref/pointwise.c): y = x rounded to `to`, dx += dy rounded to `from`, with
// the one rounding rule of harness/core/half.h, so the bits are the reference's

static __global__ void cast_kernel(ck_dv out, ck_dv in, int dtype, bool accumulate, int64_t n)
{
    CK_GRID_STRIDE(i, n)
    {
        const double v = ck_cast_round(ck_ld(in, i), dtype, out.dt);
        if (accumulate)
            ck_acc(out, i, v);
        else
            ck_st(out, i, v);
    }
}

static ck_status cast_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                 ck_op_io *io, ck_error *err)
{
    (void)args;
    CK_TRY(ck_opc_activation_fwd(CUDA_BE, op, io, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    cast_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(ck_view(io->out), ck_view(io->in[0]),
                                                             op->cast_to, false, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status cast_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    CK_TRY(ck_opc_activation_bwd(CUDA_BE, op, io, g, err));
    if (!g->din[0])
        return CK_OK;
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    cast_kernel<<<ck_blocks(n), CK_THREADS, 0, cu->stream>>>(ck_view(g->din[0]), ck_view(g->dout),
                                                             op->cast_from, true, n);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// the family's entry points (cuda_common.cuh)

static cuda_op_fns pick(const ck_op_params *op)
{
    /* add/mul of differing shapes or with a constant: the broadcast family's kernels */
    if (ck_opc_is_broadcast(op))
        return cuda_op_fns{cuda_broadcast_forward, cuda_broadcast_backward};
    switch (op->kind) {
    case CK_OP_GELU:
        if (ck_gelu_is_tanh(op)) /* the tanh approximation */
            return cuda_op_fns{wide_op_forward, wide_op_backward};
        return cuda_op_fns{activation_op_forward, activation_op_backward};
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
    case CK_OP_ABS: return cuda_op_fns{activation_op_forward, activation_op_backward};
    case CK_OP_MUL:
    case CK_OP_SILU: return cuda_op_fns{wide_op_forward, wide_op_backward};
    case CK_OP_ADD: return cuda_op_fns{add_op_forward, add_op_backward};
    case CK_OP_POSITIONAL: return cuda_op_fns{positional_op_forward, positional_op_backward};
    case CK_OP_CAST: return cuda_op_fns{cast_op_forward, cast_op_backward};
    default: return cuda_op_fns{NULL, NULL};
    }
}

CUDA_FAMILY_ENTRIES(pointwise, pick)
