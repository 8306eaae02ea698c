/*
 * CPU linear, conv, pooling and upsample ops (backends/ref/{linear,conv,pool,upsample}.c):
 * forward on hand-computed values in fp32 and fp64 and against a naive bounds-checked
 * reference, hand-computed backward where there is a rule to check (max-pool ties and
 * NaN, avg-pool spread, upsample blocks), backward against float64 central differences
 * (ck_gradcheck_op) over strides, dilations and valid/same/asymmetric padding, backward
 * accumulation, fp32 against fp64, and the refusal of other dtypes and bad shapes.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/ref/ref_ops.h"
#include "harness/verify/gradcheck.h"
#include "harness/core/rng.h"
#include "tests/test_util.h"

// ----------------------------------------------------------------------------
// helpers: tensors built from double arrays, op dispatch, a shape oracle

/* A tensor of dtype dt shaped s, holding v (numel doubles) or zeros when v is NULL. */
static ck_tensor tensor_new(const char *name, ck_dtype dt, ck_shape s, const double *v)
{
    ck_tensor t = {name, dt, s, NULL};
    int64_t n = ck_shape_numel(&s);
    t.data = calloc((size_t)n, ck_dtype_size(dt));
    ck_assert_ptr_nonnull(t.data);
    for (int64_t i = 0; v && i < n; i++) {
        if (dt == CK_F32)
            ((float *)t.data)[i] = (float)v[i];
        else if (dt == CK_F64)
            ((double *)t.data)[i] = v[i];
    }
    return t;
}

static double *normal_values(int64_t n, uint64_t seed)
{
    ck_rng_stream s = ck_rng_keyed(seed, CK_RNG_NO_LAYER, CK_PURPOSE_TEST, 0);
    double *v = malloc((size_t)n * sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = ck_rng_normal_f64(&s, (uint64_t)i);
    return v;
}

static ck_status op_forward(const ck_op_params *op, ck_op_io *io, ck_error *err)
{
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    switch (op->kind) {
    case CK_OP_LINEAR: return ref_linear_forward(op, &args, io, err);
    case CK_OP_CONV: return ref_conv_forward(op, &args, io, err);
    case CK_OP_MAXPOOL:
    case CK_OP_AVGPOOL: return ref_pool_forward(op, &args, io, err);
    case CK_OP_UPSAMPLE: return ref_upsample_forward(op, &args, io, err);
    default: return ck_fail(err, CK_ERR_INTERNAL, "not a spatial op");
    }
}

static ck_status op_backward(const ck_op_params *op, const ck_op_io *io, ck_op_grads *g,
                             ck_error *err)
{
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    switch (op->kind) {
    case CK_OP_LINEAR: return ref_linear_backward(op, &args, io, g, err);
    case CK_OP_CONV: return ref_conv_backward(op, &args, io, g, err);
    case CK_OP_MAXPOOL:
    case CK_OP_AVGPOOL: return ref_pool_backward(op, &args, io, g, err);
    case CK_OP_UPSAMPLE: return ref_upsample_backward(op, &args, io, g, err);
    default: return ck_fail(err, CK_ERR_INTERNAL, "not a spatial op");
    }
}

/* The test's own shape rules: fills out_shape and the weight/bias specs of a node for op
 * applied to an input shaped `in` (independent of the graph builder). */
static void node_for(const ck_op_params *op, ck_shape in, ck_node *node)
{
    memset(node, 0, sizeof *node);
    node->op = *op;
    node->n_in = 1;
    ck_shape out = in;
    ck_shape w = {0}, b = {0};
    switch (op->kind) {
    case CK_OP_LINEAR:
        out.dim[in.ndim - 1] = op->units;
        w = SHAPE(op->units, in.dim[in.ndim - 1]);
        b = SHAPE(op->units);
        break;
    case CK_OP_CONV:
        out.dim[1] = op->filters;
        w.ndim = in.ndim;
        w.dim[0] = op->filters;
        w.dim[1] = in.dim[1];
        b = SHAPE(op->filters);
        for (int a = 0; a < op->nsp; a++) {
            int64_t extent = (int64_t)op->dilation[a] * (op->kernel[a] - 1) + 1;
            out.dim[2 + a] =
                (in.dim[2 + a] + op->pad_lo[a] + op->pad_hi[a] - extent) / op->stride[a] + 1;
            w.dim[2 + a] = op->kernel[a];
        }
        break;
    case CK_OP_MAXPOOL:
    case CK_OP_AVGPOOL:
        for (int a = 0; a < op->nsp; a++)
            out.dim[2 + a] = (in.dim[2 + a] - op->kernel[a]) / op->stride[a] + 1;
        break;
    case CK_OP_UPSAMPLE:
        for (int a = 0; a < op->nsp; a++)
            out.dim[2 + a] = in.dim[2 + a] * op->scale[a];
        break;
    default: ck_abort_msg("not a spatial op");
    }
    node->out_shape = out;
    if (w.ndim > 0) {
        node->params[node->n_params++] =
            (ck_param_spec){"weight", w, CK_F32, CK_INIT_UNIFORM, 0.5};
        if (op->bias)
            node->params[node->n_params++] =
                (ck_param_spec){"bias", b, CK_F32, CK_INIT_UNIFORM, 0.5};
    }
}

/* Op parameter shorthands for the tables. */
#define CONV(n, f, has_bias, ...)                                                          \
    {                                                                                      \
        .kind = CK_OP_CONV, .nsp = n, .filters = f, .bias = has_bias, .pad_mode =          \
            CK_PAD_EXPLICIT, __VA_ARGS__                                                   \
    }
#define LINEAR(u, has_bias) {.kind = CK_OP_LINEAR, .units = u, .bias = has_bias}
#define POOL(k, n, ...) {.kind = k, .nsp = n, __VA_ARGS__}
#define UPSAMPLE(n, ...) {.kind = CK_OP_UPSAMPLE, .nsp = n, .scale = {__VA_ARGS__}}

// ----------------------------------------------------------------------------
// forward on hand-computed values (each row runs in fp32 and fp64)

static const double x_1to5[] = {1, 2, 3, 4, 5};
static const double w_123[] = {1, 2, 3};
static const double b_half[] = {0.5};
/* y[o] = 0.5 + x[o-2] + 2 x[o-1] + 3 x[o] with x zero outside [0, 5) */
static const double y_conv1d_causal[] = {3.5, 8.5, 14.5, 20.5, 26.5};

static const double x_4x4[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static const double w_conv2d_s2[] = {1, 2, 3, 4, /* filter 1 */ 0, 0, 0, -1};
static const double b_conv2d_s2[] = {0, 1};
/* filter 0: 10 v + 34, filter 1: 1 - (v + 5), v = x[2a][2b] */
static const double y_conv2d_s2[] = {34, 54, 114, 134, -4, -6, -12, -14};

static const double x_conv2d_dil[] = {
    0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
    23, 24, /* channel 1: ones */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1,  1,  1,  1,  1};
static const double w_conv2d_dil[] = {1, 0, 0, 2, /* channel 1 */ 1, 1, 1, 1};
/* x0[a][b] + 2 x0[a+2][b+2] + 4 = 3 (5a + b) + 28 */
static const double y_conv2d_dil[] = {28, 31, 34, 43, 46, 49, 58, 61, 64};

static const double x_2ch_2x2x2[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const double w_swap[] = {0, 1, 1, 0};
static const double b_swap[] = {100, 200};
static const double y_conv3d_swap[] = {109, 110, 111, 112, 113, 114, 115, 116,
                                       201, 202, 203, 204, 205, 206, 207, 208};

static const double x_linear[] = {1, 2, 3, 4, 5, 6};
static const double w_linear[] = {1, 0, -1, 0.5, 0.5, 0.5};
static const double b_linear[] = {1, -1};
static const double y_linear[] = {-1, 2, -1, 6.5};

static const double x_pool_tie[] = {1, 3, 3, 0, /* row 1 */ 3, 2, 1, 1};
static const double y_maxpool_tie[] = {3, 3};
static const double y_avgpool_tie[] = {2.25, 1.25};

static const double x_maxpool1d[] = {1, 5, 2, 7, 3, 0, 9};
static const double y_maxpool1d[] = {5, 7, 9};
static const double x_avgpool1d[] = {5, 2, 7, 3, /* plane 1 */ 0, 9, 1, 8};
static const double y_avgpool1d_k2s1[] = {3.5, 4.5, 5, 4.5, 5, 4.5};

static const double x_up[] = {1, 2, 3, 4};
static const double y_up_2x3[] = {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,
                                  3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4};
static const double y_up1d_3[] = {1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4};

static const struct {
    const char *desc;
    ck_op_params op;
    ck_shape x_shape, w_shape;
    const double *x, *w, *b, *want;
} fwd_rows[] = {
    {"conv1d k3 causal padding (lo 2, hi 0) with bias",
     CONV(1, 1, true, .kernel = {3}, .stride = {1}, .dilation = {1}, .pad_lo = {2}),
     SHAPE_INIT(1, 1, 5), SHAPE_INIT(1, 1, 3), x_1to5, w_123, b_half, y_conv1d_causal},
    {"conv2d k2 stride 2, two filters",
     CONV(2, 2, true, .kernel = {2, 2}, .stride = {2, 2}, .dilation = {1, 1}),
     SHAPE_INIT(1, 1, 4, 4), SHAPE_INIT(2, 1, 2, 2), x_4x4, w_conv2d_s2, b_conv2d_s2, y_conv2d_s2},
    {"conv2d k2 dilation 2, two channels, no bias",
     CONV(2, 1, false, .kernel = {2, 2}, .stride = {1, 1}, .dilation = {2, 2}),
     SHAPE_INIT(1, 2, 5, 5), SHAPE_INIT(1, 2, 2, 2), x_conv2d_dil, w_conv2d_dil, NULL,
     y_conv2d_dil},
    {"conv3d 1x1x1 swaps two channels and adds bias",
     CONV(3, 2, true, .kernel = {1, 1, 1}, .stride = {1, 1, 1}, .dilation = {1, 1, 1}),
     SHAPE_INIT(1, 2, 2, 2, 2), SHAPE_INIT(2, 2, 1, 1, 1), x_2ch_2x2x2, w_swap, b_swap,
     y_conv3d_swap},
    {"linear 2x3 -> 2x2 with bias", LINEAR(2, true), SHAPE_INIT(2, 3), SHAPE_INIT(2, 3), x_linear,
     w_linear, b_linear, y_linear},
    {"linear on a 3-D input (2, 1, 3)", LINEAR(2, true), SHAPE_INIT(2, 1, 3), SHAPE_INIT(2, 3),
     x_linear, w_linear, b_linear, y_linear},
    {"maxpool2d k2 s2 with ties", POOL(CK_OP_MAXPOOL, 2, .kernel = {2, 2}, .stride = {2, 2}),
     SHAPE_INIT(1, 1, 2, 4), {0}, x_pool_tie, NULL, NULL, y_maxpool_tie},
    {"avgpool2d k2 s2", POOL(CK_OP_AVGPOOL, 2, .kernel = {2, 2}, .stride = {2, 2}),
     SHAPE_INIT(1, 1, 2, 4), {0}, x_pool_tie, NULL, NULL, y_avgpool_tie},
    {"maxpool1d k3 s2 (floor)", POOL(CK_OP_MAXPOOL, 1, .kernel = {3}, .stride = {2}),
     SHAPE_INIT(1, 1, 7), {0}, x_maxpool1d, NULL, NULL, y_maxpool1d},
    {"avgpool1d k2 s1 over two planes", POOL(CK_OP_AVGPOOL, 1, .kernel = {2}, .stride = {1}),
     SHAPE_INIT(2, 1, 4), {0}, x_avgpool1d, NULL, NULL, y_avgpool1d_k2s1},
    {"upsample2d scale (2, 3)", UPSAMPLE(2, 2, 3), SHAPE_INIT(1, 1, 2, 2), {0}, x_up, NULL, NULL,
     y_up_2x3},
    {"upsample1d scale 3 over two channels", UPSAMPLE(1, 3), SHAPE_INIT(1, 2, 2), {0}, x_up, NULL,
     NULL, y_up1d_3},
};

START_TEST(forward_matches_hand_computed_values)
{
    const int row = _i / 2;
    const ck_dtype dt = _i % 2 ? CK_F64 : CK_F32;
    const char *desc = fwd_rows[row].desc;
    const ck_op_params *op = &fwd_rows[row].op;
    ck_node node;
    node_for(op, fwd_rows[row].x_shape, &node);
    ck_tensor x = tensor_new("x", dt, fwd_rows[row].x_shape, fwd_rows[row].x);
    ck_tensor y = tensor_new("y", dt, node.out_shape, NULL);
    ck_tensor w = {0}, b = {0};
    ck_op_io io = {.n_in = 1, .in = {&x}, .out = &y};
    if (fwd_rows[row].w) {
        ck_assert_msg(ck_shape_equal(&fwd_rows[row].w_shape, &node.params[0].shape),
                      "%s: weight shape in the table disagrees with the oracle", desc);
        w = tensor_new("w", dt, fwd_rows[row].w_shape, fwd_rows[row].w);
        io.weight = &w;
    }
    if (fwd_rows[row].b) {
        b = tensor_new("b", dt, node.params[1].shape, fwd_rows[row].b);
        io.bias = &b;
    }
    ck_error err = {{0}};
    ck_status st = op_forward(op, &io, &err);
    ck_assert_msg(st == CK_OK, "%s (%s): %s", desc, ck_dtype_name(dt), err.msg);
    for (int64_t i = 0; i < ck_shape_numel(&node.out_shape); i++) {
        double got = tu_tget(&y, i), want = fwd_rows[row].want[i];
        ck_assert_msg(fabs(got - want) <= 1e-6 * fmax(1.0, fabs(want)),
                      "%s (%s): y[%lld] = %.9g, want %.9g", desc, ck_dtype_name(dt),
                      (long long)i, got, want);
    }
    free(x.data);
    free(y.data);
    free(w.data);
    free(b.data);
}
END_TEST

// ----------------------------------------------------------------------------
// backward on hand-computed values

/* Runs backward of a weightless op (pool, upsample) in dtype dt; returns dx (numel of x). */
static double *weightless_backward(const ck_op_params *op, ck_dtype dt, ck_shape xs,
                                   const double *xv, const double *dyv)
{
    ck_node node;
    node_for(op, xs, &node);
    ck_tensor x = tensor_new("x", dt, xs, xv);
    ck_tensor dx = tensor_new("dx", dt, xs, NULL);
    ck_tensor dy = tensor_new("dy", dt, node.out_shape, dyv);
    ck_op_io io = {.n_in = 1, .in = {&x}};
    ck_op_grads g = {.dout = &dy, .din = {&dx}};
    ck_error err = {{0}};
    ck_assert_msg(op_backward(op, &io, &g, &err) == CK_OK, "%s", err.msg);
    int64_t n = ck_shape_numel(&xs);
    double *out = malloc((size_t)n * sizeof *out);
    ck_assert_ptr_nonnull(out);
    for (int64_t i = 0; i < n; i++)
        out[i] = tu_tget(&dx, i);
    free(x.data);
    free(dx.data);
    free(dy.data);
    return out;
}

static void assert_values(const char *what, const double *got, const double *want, int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i] || (isnan(got[i]) && isnan(want[i])),
                      "%s: [%d] = %g, want %g", what, i, got[i], want[i]);
}

START_TEST(maxpool_backward_routes_to_the_first_maximum)
{
    const ck_op_params op = POOL(CK_OP_MAXPOOL, 2, .kernel = {2, 2}, .stride = {2, 2});
    const double dy[] = {1, 10};
    /* window 0 [1 3; 3 2]: the 3 at (0, 1) comes first; window 1 [3 0; 1 1]: (0, 2) */
    const double want[] = {0, 1, 10, 0, 0, 0, 0, 0};
    for (int k = 0; k < 2; k++) {
        double *dx = weightless_backward(&op, k ? CK_F64 : CK_F32, SHAPE(1, 1, 2, 4),
                                         x_pool_tie, dy);
        assert_values(k ? "maxpool ties fp64" : "maxpool ties fp32", dx, want, 8);
        free(dx);
    }
}
END_TEST

START_TEST(maxpool_propagates_nan_and_routes_to_the_first_nan)
{
    const ck_op_params op = POOL(CK_OP_MAXPOOL, 1, .kernel = {4}, .stride = {4});
    /* window 0: a NaN after a larger number; window 1: NaN first; window 2: two NaNs */
    const double x[] = {5, NAN, 7, 1, NAN, 9, 2, 3, 1, NAN, 8, NAN};
    const double dy[] = {1, 2, 3};
    const double want_dx[] = {0, 1, 0, 0, 2, 0, 0, 0, 0, 3, 0, 0};
    for (int k = 0; k < 2; k++) {
        const ck_dtype dt = k ? CK_F64 : CK_F32;
        ck_tensor xt = tensor_new("x", dt, SHAPE(1, 1, 12), x);
        ck_tensor yt = tensor_new("y", dt, SHAPE(1, 1, 3), NULL);
        ck_op_io io = {.n_in = 1, .in = {&xt}, .out = &yt};
        ck_error err = {{0}};
        ck_assert_msg(op_forward(&op, &io, &err) == CK_OK, "%s", err.msg);
        for (int i = 0; i < 3; i++)
            ck_assert_msg(isnan(tu_tget(&yt, i)), "maxpool NaN %s: y[%d] = %g, want NaN",
                          ck_dtype_name(dt), i, tu_tget(&yt, i));
        double *dx = weightless_backward(&op, dt, xt.shape, x, dy);
        assert_values("maxpool NaN routing", dx, want_dx, 12);
        free(dx);
        free(xt.data);
        free(yt.data);
    }
}
END_TEST

START_TEST(avgpool_backward_spreads_evenly)
{
    const ck_op_params op = POOL(CK_OP_AVGPOOL, 1, .kernel = {2}, .stride = {1});
    const double x[] = {1, 2, 3, 4};
    const double dy[] = {4, 8, 12};
    const double want[] = {2, 6, 10, 6};
    double *dx = weightless_backward(&op, CK_F64, SHAPE(1, 1, 4), x, dy);
    assert_values("avgpool1d k2 s1", dx, want, 4);
    free(dx);
}
END_TEST

START_TEST(upsample_backward_sums_each_block)
{
    const ck_op_params op = UPSAMPLE(2, 2, 3);
    double dy[24];
    for (int i = 0; i < 24; i++)
        dy[i] = i; /* rows of 6: block (0, 0) holds 0 1 2 6 7 8 */
    const double want[] = {24, 42, 96, 114};
    for (int k = 0; k < 2; k++) {
        double *dx = weightless_backward(&op, k ? CK_F64 : CK_F32, SHAPE(1, 1, 2, 2),
                                         x_up, dy);
        assert_values("upsample2d (2, 3) block sums", dx, want, 4);
        free(dx);
    }
}
END_TEST

// ----------------------------------------------------------------------------
// configurations for the gradient checks, accumulation and fp32 vs fp64

static const struct {
    const char *desc;
    ck_op_params op;
    ck_shape in;
} grad_rows[] = {
    {"conv1d k3 s2 explicit pad lo 2 hi 1, bias",
     CONV(1, 3, true, .kernel = {3}, .stride = {2}, .dilation = {1}, .pad_lo = {2},
          .pad_hi = {1}),
     SHAPE_INIT(2, 2, 9)},
    {"conv1d k3 dilation 3 valid, no bias",
     CONV(1, 2, false, .kernel = {3}, .stride = {1}, .dilation = {3}), SHAPE_INIT(1, 2, 10)},
    {"conv1d k2 pad 3/3 wider than the kernel (edge outputs read only padding)",
     CONV(1, 2, true, .kernel = {2}, .stride = {1}, .dilation = {1}, .pad_lo = {3},
          .pad_hi = {3}),
     SHAPE_INIT(1, 1, 4)},
    {"conv2d k3 same (pad 1/1), bias",
     CONV(2, 2, true, .kernel = {3, 3}, .stride = {1, 1}, .dilation = {1, 1},
          .pad_lo = {1, 1}, .pad_hi = {1, 1}),
     SHAPE_INIT(2, 2, 5, 6)},
    {"conv2d k(3,2) s(2,1) dil(1,2) pad lo(0,2) hi(1,1), bias",
     CONV(2, 3, true, .kernel = {3, 2}, .stride = {2, 1}, .dilation = {1, 2},
          .pad_lo = {0, 2}, .pad_hi = {1, 1}),
     SHAPE_INIT(1, 2, 6, 7)},
    {"conv2d k2 stride 3 > kernel, no bias",
     CONV(2, 2, false, .kernel = {2, 2}, .stride = {3, 3}, .dilation = {1, 1}),
     SHAPE_INIT(1, 1, 7, 8)},
    {"conv3d k3 same, bias",
     CONV(3, 2, true, .kernel = {3, 3, 3}, .stride = {1, 1, 1}, .dilation = {1, 1, 1},
          .pad_lo = {1, 1, 1}, .pad_hi = {1, 1, 1}),
     SHAPE_INIT(1, 2, 4, 4, 4)},
    {"conv3d k(2,3,2) s(2,1,3) dil(1,2,1) pad lo(1,0,0) hi(0,2,1), no bias",
     CONV(3, 2, false, .kernel = {2, 3, 2}, .stride = {2, 1, 3}, .dilation = {1, 2, 1},
          .pad_lo = {1, 0, 0}, .pad_hi = {0, 2, 1}),
     SHAPE_INIT(2, 1, 5, 6, 5)},
    {"linear on (2, 3, 4) -> 5 units, bias", LINEAR(5, true), SHAPE_INIT(2, 3, 4)},
    {"linear on (3, 7) -> 2 units, no bias", LINEAR(2, false), SHAPE_INIT(3, 7)},
    {"maxpool1d k3 s2", POOL(CK_OP_MAXPOOL, 1, .kernel = {3}, .stride = {2}), SHAPE_INIT(2, 2, 9)},
    {"maxpool2d k(2,3) s(3,2)", POOL(CK_OP_MAXPOOL, 2, .kernel = {2, 3}, .stride = {3, 2}),
     SHAPE_INIT(1, 2, 8, 9)},
    {"maxpool3d k2 s(2,1,2)",
     POOL(CK_OP_MAXPOOL, 3, .kernel = {2, 2, 2}, .stride = {2, 1, 2}), SHAPE_INIT(1, 2, 4, 3, 5)},
    {"avgpool1d k2 s3", POOL(CK_OP_AVGPOOL, 1, .kernel = {2}, .stride = {3}), SHAPE_INIT(2, 1, 8)},
    {"avgpool2d k(3,2) s(1,2)", POOL(CK_OP_AVGPOOL, 2, .kernel = {3, 2}, .stride = {1, 2}),
     SHAPE_INIT(1, 2, 5, 6)},
    {"avgpool3d k2 s2", POOL(CK_OP_AVGPOOL, 3, .kernel = {2, 2, 2}, .stride = {2, 2, 2}),
     SHAPE_INIT(1, 1, 4, 4, 5)},
    {"upsample1d scale 3", UPSAMPLE(1, 3), SHAPE_INIT(2, 2, 4)},
    {"upsample2d scale (2, 3)", UPSAMPLE(2, 2, 3), SHAPE_INIT(1, 2, 3, 2)},
    {"upsample3d scale (2, 1, 3)", UPSAMPLE(3, 2, 1, 3), SHAPE_INIT(1, 1, 2, 3, 2)},
};

#define N_GRAD_ROWS ((int)(sizeof grad_rows / sizeof grad_rows[0]))

START_TEST(backward_matches_float64_finite_differences)
{
    ck_node node;
    node_for(&grad_rows[_i].op, grad_rows[_i].in, &node);
    ck_backend *b = tu_cpu_backend();
    ck_error err = {{0}};
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    ck_gradcheck_result res;
    ck_status st = ck_gradcheck_op(b, &node, &grad_rows[_i].in, &args, 1000u + (uint64_t)_i,
                                   NULL, &res, &err);
    b->destroy(b);
    ck_assert_msg(st == CK_OK, "%s: %s", grad_rows[_i].desc, err.msg);
    char report[1024] = "";
    size_t used = 0;
    for (int k = 0; k < res.n && used < sizeof report; k++) {
        const ck_gradcheck_entry *e = &res.e[k];
        int w = snprintf(report + used, sizeof report - used,
                         " [%s: %lld/%lld failed, max abs %.3g, max rel %.3g, worst #%lld "
                         "analytic %.9g numeric %.9g]",
                         e->name, (long long)e->failed, (long long)e->checked, e->max_abs_err,
                         e->max_rel_err, (long long)e->worst_index, e->worst_analytic,
                         e->worst_numeric);
        used += w > 0 ? (size_t)w : 0;
    }
    ck_assert_msg(res.ok, "%s:%s", grad_rows[_i].desc, report);
    ck_assert_msg(res.n == 1 + node.n_params, "%s: %d entries checked, want %d",
                  grad_rows[_i].desc, res.n, 1 + node.n_params);
}
END_TEST

/* The forward written straight from the definitions, one output element at a time, with
 * bounds checks: y (out_shape) from x (in), w, b, all float64 and row-major. */
static double naive_output(const ck_op_params *op, const ck_shape *in, const double *x,
                           const ck_shape *ws, const double *w, const double *b,
                           const ck_shape *out, int64_t flat)
{
    int64_t o[CK_MAX_DIMS], pos[CK_MAX_DIMS];
    ck_shape_unflatten(out, flat, o);
    if (op->kind == CK_OP_LINEAR) {
        int64_t nin = in->dim[in->ndim - 1], u = o[out->ndim - 1], row = flat / op->units;
        double acc = b ? b[u] : 0.0;
        for (int64_t i = 0; i < nin; i++)
            acc += x[row * nin + i] * w[u * nin + i];
        return acc;
    }
    const int nsp = op->nsp;
    ck_shape window = {.ndim = nsp};
    for (int a = 0; a < nsp; a++)
        window.dim[a] = op->kind == CK_OP_UPSAMPLE ? 1 : op->kernel[a];
    const int64_t channels = op->kind == CK_OP_CONV ? in->dim[1] : 1;
    double acc = op->kind == CK_OP_CONV && b ? b[o[1]] : 0.0;
    bool first = true;
    for (int64_t c = 0; c < channels; c++) {
        for (int64_t k = 0; k < ck_shape_numel(&window); k++) {
            int64_t kk[CK_MAX_SPATIAL];
            ck_shape_unflatten(&window, k, kk);
            bool inside = true;
            pos[0] = o[0];
            pos[1] = op->kind == CK_OP_CONV ? c : o[1];
            for (int a = 0; a < nsp; a++) {
                int64_t p = o[2 + a];
                if (op->kind == CK_OP_CONV)
                    p = p * op->stride[a] - op->pad_lo[a] + kk[a] * op->dilation[a];
                else if (op->kind == CK_OP_UPSAMPLE)
                    p = p / op->scale[a];
                else
                    p = p * op->stride[a] + kk[a];
                inside = inside && p >= 0 && p < in->dim[2 + a];
                pos[2 + a] = p;
            }
            if (!inside)
                continue;
            int64_t xi = 0;
            for (int d = 0; d < in->ndim; d++)
                xi = xi * in->dim[d] + pos[d];
            if (op->kind == CK_OP_CONV) {
                int64_t wi = o[1] * in->dim[1] + c;
                for (int a = 0; a < nsp; a++)
                    wi = wi * ws->dim[2 + a] + kk[a];
                acc += w[wi] * x[xi];
            } else if (op->kind == CK_OP_MAXPOOL) {
                acc = first || x[xi] > acc ? x[xi] : acc;
            } else {
                acc += x[xi];
            }
            first = false;
        }
    }
    return op->kind == CK_OP_AVGPOOL ? acc / (double)ck_shape_numel(&window) : acc;
}

START_TEST(forward_matches_a_naive_reference)
{
    const ck_op_params *op = &grad_rows[_i].op;
    ck_node node;
    node_for(op, grad_rows[_i].in, &node);
    ck_shape in = grad_rows[_i].in, out = node.out_shape;
    double *xv = normal_values(ck_shape_numel(&in), 11);
    double *wv = node.n_params > 0 ? normal_values(ck_shape_numel(&node.params[0].shape), 12)
                                   : NULL;
    double *bv = node.n_params > 1 ? normal_values(ck_shape_numel(&node.params[1].shape), 13)
                                   : NULL;
    ck_tensor x = tensor_new("x", CK_F64, in, xv), y = tensor_new("y", CK_F64, out, NULL);
    ck_tensor w = {0}, b = {0};
    ck_op_io io = {.n_in = 1, .in = {&x}, .out = &y};
    if (wv) {
        w = tensor_new("w", CK_F64, node.params[0].shape, wv);
        io.weight = &w;
    }
    if (bv) {
        b = tensor_new("b", CK_F64, node.params[1].shape, bv);
        io.bias = &b;
    }
    ck_error err = {{0}};
    ck_assert_msg(op_forward(op, &io, &err) == CK_OK, "%s: %s", grad_rows[_i].desc, err.msg);
    for (int64_t i = 0; i < ck_shape_numel(&out); i++) {
        double want = naive_output(op, &in, xv, &node.params[0].shape, wv, bv, &out, i);
        double got = tu_tget(&y, i);
        ck_assert_msg(fabs(got - want) <= 1e-12 * fmax(1.0, fabs(want)),
                      "%s: y[%lld] = %.17g, naive %.17g", grad_rows[_i].desc, (long long)i,
                      got, want);
    }
    free(xv);
    free(wv);
    free(bv);
    free(x.data);
    free(y.data);
    free(w.data);
    free(b.data);
}
END_TEST

/* One configuration run in one dtype on fixed random data: x, weight, bias, dy in;
 * y, dx, dweight, dbias out (grads accumulated over `passes` backward calls from zero). */
typedef struct {
    ck_node node;
    ck_tensor x, w, b, y, dy, dx, dw, db;
} op_run;

static void op_run_make(op_run *r, int row, ck_dtype dt, int passes)
{
    memset(r, 0, sizeof *r);
    const ck_op_params *op = &grad_rows[row].op;
    node_for(op, grad_rows[row].in, &r->node);
    ck_shape xs = grad_rows[row].in, ys = r->node.out_shape;
    double *v = normal_values(ck_shape_numel(&xs), 1);
    r->x = tensor_new("x", dt, xs, v);
    free(v);
    r->dx = tensor_new("dx", dt, xs, NULL);
    r->y = tensor_new("y", dt, ys, NULL);
    v = normal_values(ck_shape_numel(&ys), 2);
    r->dy = tensor_new("dy", dt, ys, v);
    free(v);
    ck_op_io io = {.n_in = 1, .in = {&r->x}, .out = &r->y};
    ck_op_grads g = {.dout = &r->dy, .din = {&r->dx}};
    for (int p = 0; p < r->node.n_params; p++) {
        const ck_param_spec *ps = &r->node.params[p];
        bool is_w = strcmp(ps->suffix, "weight") == 0;
        v = normal_values(ck_shape_numel(&ps->shape), 3 + (uint64_t)p);
        *(is_w ? &r->w : &r->b) = tensor_new(ps->suffix, dt, ps->shape, v);
        *(is_w ? &r->dw : &r->db) = tensor_new(ps->suffix, dt, ps->shape, NULL);
        free(v);
        if (is_w) {
            io.weight = &r->w;
            g.dweight = &r->dw;
        } else {
            io.bias = &r->b;
            g.dbias = &r->db;
        }
    }
    ck_error err = {{0}};
    ck_assert_msg(op_forward(op, &io, &err) == CK_OK, "%s: %s", grad_rows[row].desc, err.msg);
    for (int k = 0; k < passes; k++)
        ck_assert_msg(op_backward(op, &io, &g, &err) == CK_OK, "%s: %s", grad_rows[row].desc,
                      err.msg);
}

static void op_run_free(op_run *r)
{
    ck_tensor *all[] = {&r->x, &r->w, &r->b, &r->y, &r->dy, &r->dx, &r->dw, &r->db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]->data);
}

/* max |a - scale * b| / max(max |scale * b|, tiny) over two same-shaped tensors */
static double max_rel_diff(const ck_tensor *a, const ck_tensor *b, double scale)
{
    if (!a->data)
        return 0.0;
    double diff = 0.0, mag = 1e-30;
    for (int64_t i = 0; i < ck_shape_numel(&a->shape); i++) {
        double want = scale * tu_tget(b, i);
        diff = fmax(diff, fabs(tu_tget(a, i) - want));
        mag = fmax(mag, fabs(want));
    }
    return diff / mag;
}

START_TEST(backward_accumulates_into_every_gradient)
{
    op_run once, twice;
    op_run_make(&once, _i, CK_F64, 1);
    op_run_make(&twice, _i, CK_F64, 2);
    const ck_tensor *g1[] = {&once.dx, &once.dw, &once.db};
    const ck_tensor *g2[] = {&twice.dx, &twice.dw, &twice.db};
    for (int k = 0; k < 3; k++) {
        double rel = max_rel_diff(g2[k], g1[k], 2.0);
        ck_assert_msg(rel <= 1e-13, "%s: %s after two backward calls is not twice one call "
                      "(max rel diff %.3g)", grad_rows[_i].desc, k == 0 ? "din" : k == 1 ?
                      "dweight" : "dbias", rel);
    }
    op_run_free(&once);
    op_run_free(&twice);
}
END_TEST

/* fp32 results agree with fp64 to max|y32 - y64| <= 1e-5 max|y64| on N(0, 1) data. */
START_TEST(fp32_agrees_with_fp64)
{
    op_run r32, r64;
    op_run_make(&r32, _i, CK_F32, 1);
    op_run_make(&r64, _i, CK_F64, 1);
    const ck_tensor *t32[] = {&r32.y, &r32.dx, &r32.dw, &r32.db};
    const ck_tensor *t64[] = {&r64.y, &r64.dx, &r64.dw, &r64.db};
    const char *names[] = {"y", "dx", "dweight", "dbias"};
    for (int k = 0; k < 4; k++) {
        double rel = max_rel_diff(t32[k], t64[k], 1.0);
        ck_assert_msg(rel <= 1e-5, "%s: fp32 %s differs from fp64 by %.3g of its max",
                      grad_rows[_i].desc, names[k], rel);
    }
    op_run_free(&r32);
    op_run_free(&r64);
}
END_TEST

START_TEST(other_dtypes_are_refused)
{
    ck_node node;
    node_for(&grad_rows[_i].op, grad_rows[_i].in, &node);
    int64_t big = ck_shape_numel(&node.out_shape) + ck_shape_numel(&grad_rows[_i].in) + 256;
    uint16_t *scratch = calloc((size_t)big, 8); /* large enough for any tensor here */
    ck_assert_ptr_nonnull(scratch);
    /* fp16/bf16 are accepted (test_ops_lowp.c); integer tensors are not */
    ck_tensor x = {"x", CK_I32, grad_rows[_i].in, scratch};
    ck_tensor y = {"y", CK_I32, node.out_shape, scratch};
    ck_tensor w = {"w", CK_I32, node.params[0].shape, scratch};
    ck_tensor b = {"b", CK_I32, node.params[1].shape, scratch};
    ck_op_io io = {.n_in = 1, .in = {&x}, .out = &y};
    ck_op_grads g = {.dout = &y, .din = {&x}};
    if (node.n_params > 0) {
        io.weight = g.dweight = &w;
        if (node.n_params > 1)
            io.bias = g.dbias = &b;
    }
    ck_error err = {{0}};
    ck_assert_int_eq(op_forward(&grad_rows[_i].op, &io, &err), CK_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "i32") != NULL, "message names the dtype: %s", err.msg);
    ck_assert_int_eq(op_backward(&grad_rows[_i].op, &io, &g, &err), CK_ERR_UNSUPPORTED);
    free(scratch);
}
END_TEST

START_TEST(mismatched_shapes_are_reported_with_tensor_names)
{
    double zeros[64] = {0};
    ck_error err = {{0}};
    /* conv2d whose weight expects 3 input channels, fed 2 */
    const ck_op_params conv = CONV(2, 1, false, .kernel = {2, 2}, .stride = {1, 1},
                                   .dilation = {1, 1});
    ck_tensor x = tensor_new("enc1:in", CK_F64, SHAPE(1, 2, 3, 3), zeros);
    ck_tensor w = tensor_new("enc1.weight", CK_F64, SHAPE(1, 3, 2, 2), zeros);
    ck_tensor y = tensor_new("enc1:out", CK_F64, SHAPE(1, 1, 2, 2), NULL);
    ck_op_io io = {.n_in = 1, .in = {&x}, .out = &y, .weight = &w};
    ck_assert_int_eq(op_forward(&conv, &io, &err), CK_ERR_INTERNAL);
    ck_assert_msg(strstr(err.msg, "enc1.weight") != NULL, "names the weight: %s", err.msg);
    /* maxpool whose output would need windows past the end of the input */
    const ck_op_params pool = POOL(CK_OP_MAXPOOL, 1, .kernel = {2}, .stride = {2});
    ck_tensor px = tensor_new("down:in", CK_F64, SHAPE(1, 1, 5), zeros);
    ck_tensor py = tensor_new("down:out", CK_F64, SHAPE(1, 1, 3), NULL);
    ck_op_io pio = {.n_in = 1, .in = {&px}, .out = &py};
    ck_assert_int_eq(op_forward(&pool, &pio, &err), CK_ERR_INTERNAL);
    ck_assert_msg(strstr(err.msg, "down:out") != NULL, "names the output: %s", err.msg);
    ck_tensor *all[] = {&x, &w, &y, &px, &py};
    for (int i = 0; i < 5; i++)
        free(all[i]->data);
}
END_TEST

Suite *suite_ops_spatial(void)
{
    Suite *s = suite_create("ops_spatial");
    TCase *tc = tcase_create("forward");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, forward_matches_hand_computed_values, 0,
                        2 * (int)(sizeof fwd_rows / sizeof fwd_rows[0]));
    tcase_add_test(tc, maxpool_backward_routes_to_the_first_maximum);
    tcase_add_test(tc, maxpool_propagates_nan_and_routes_to_the_first_nan);
    tcase_add_test(tc, avgpool_backward_spreads_evenly);
    tcase_add_test(tc, upsample_backward_sums_each_block);
    tcase_add_loop_test(tc, forward_matches_a_naive_reference, 0, N_GRAD_ROWS);
    tcase_add_loop_test(tc, other_dtypes_are_refused, 0, N_GRAD_ROWS);
    tcase_add_test(tc, mismatched_shapes_are_reported_with_tensor_names);
    suite_add_tcase(s, tc);

    tc = tcase_create("gradients");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, backward_matches_float64_finite_differences, 0, N_GRAD_ROWS);
    tcase_add_loop_test(tc, backward_accumulates_into_every_gradient, 0, N_GRAD_ROWS);
    tcase_add_loop_test(tc, fp32_agrees_with_fp64, 0, N_GRAD_ROWS);
    suite_add_tcase(s, tc);
    return s;
}
