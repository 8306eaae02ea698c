/*
 * The unary functions exporters emit (pointwise family): sqrt, rsqrt, reciprocal, exp, log,
 * neg, erf, abs. Forward against libm's values in fp64 and fp32 (one rounding), backward
 * against float64 central differences on inputs inside each function's domain, backward
 * accumulating into dx (+=), and abs'(0) = 0 as PyTorch's.
 *
 * cast: finite differences of a rounding measure nothing (its derivative is 0 almost
 * everywhere, while its backward passes the gradient on, rounded, as PyTorch's), so only the
 * float32 form (the identity in float64) is checked against central differences and by
 * ck_gradcheck_op; the rounding forms are checked against exact values here, in each
 * storage dtype, and against PyTorch's value by value in tests/test_torch_fixtures.c.
 */
#include <check.h>
#include <math.h>
#include <string.h>

#include "harness/model/op_def.h"
#include "tests/test_util.h"

#define N 6

static const struct {
    const char *desc;
    ck_op_kind kind;
    double x[N]; /* inside the function's domain, away from kinks */
} rows[] = {
    {"sqrt", CK_OP_SQRT, {0.25, 0.5, 1.0, 2.0, 3.5, 9.0}},
    {"rsqrt", CK_OP_RSQRT, {0.25, 0.5, 1.0, 2.0, 3.5, 9.0}},
    {"reciprocal", CK_OP_RECIPROCAL, {-3.0, -0.5, 0.25, 1.0, 2.0, 7.0}},
    {"exp", CK_OP_EXP, {-3.0, -0.5, 0.0, 0.25, 1.0, 2.5}},
    {"log", CK_OP_LOG, {0.125, 0.5, 1.0, 2.0, 3.5, 10.0}},
    {"neg", CK_OP_NEG, {-3.0, -0.5, 0.0, 0.25, 1.0, 2.5}},
    {"erf", CK_OP_ERF, {-2.0, -0.5, 0.0, 0.25, 1.0, 2.5}},
    {"abs", CK_OP_ABS, {-3.0, -0.5, -0.125, 0.25, 1.0, 2.5}},
};

static double libm(ck_op_kind k, double x)
{
    switch (k) {
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

static ck_fwd_args no_args(void)
{
    ck_fwd_args a;
    memset(&a, 0, sizeof a);
    return a;
}

static void forward(ck_op_kind k, ck_dtype dt, const double *x, double *y)
{
    ck_op_params op;
    ck_op_params_default(&op, k, 0);
    ck_tensor *tx = tu_tensor_of("x", dt, SHAPE(N), x);
    ck_tensor *ty = tu_tensor_new("y", dt, SHAPE(N));
    ck_op_io io = {.n_in = 1, .in = {tx}, .out = ty};
    ck_fwd_args a = no_args();
    tu_forward_ok(ck_op_kind_name(k), &op, &a, &io);
    for (int i = 0; i < N; i++)
        y[i] = tu_tget(ty, i);
    tu_tensor_free(tx);
    tu_tensor_free(ty);
}

START_TEST(unary_forward_matches_libm)
{
    double y[N], want[N];
    for (int i = 0; i < N; i++)
        want[i] = libm(rows[_i].kind, rows[_i].x[i]);
    forward(rows[_i].kind, CK_F64, rows[_i].x, y);
    for (int i = 0; i < N; i++)
        ck_assert_msg(y[i] == want[i], "%s fp64 x %g: %.17g, want %.17g", rows[_i].desc,
                      rows[_i].x[i], y[i], want[i]);
    /* fp32: the input as fp32, the result rounded once */
    double x32[N];
    for (int i = 0; i < N; i++)
        x32[i] = (float)rows[_i].x[i];
    forward(rows[_i].kind, CK_F32, x32, y);
    for (int i = 0; i < N; i++)
        ck_assert_msg(y[i] == (double)(float)libm(rows[_i].kind, x32[i]),
                      "%s fp32 x %g: %.9g", rows[_i].desc, x32[i], y[i]);
}
END_TEST

/* dx (starting at 0.5: backward adds) against float64 central differences of sum(dy y) */
START_TEST(unary_backward_matches_central_differences)
{
    const double dy[N] = {0.5, -1.0, 0.25, 2.0, -0.75, 1.5}, h = 1e-6;
    ck_op_params op;
    ck_op_params_default(&op, rows[_i].kind, 0);
    double start[N];
    for (int i = 0; i < N; i++)
        start[i] = 0.5;
    ck_tensor *tx = tu_tensor_of("x", CK_F64, SHAPE(N), rows[_i].x);
    ck_tensor *ty = tu_tensor_new("y", CK_F64, SHAPE(N));
    ck_tensor *tdy = tu_tensor_of("dy", CK_F64, SHAPE(N), dy);
    ck_tensor *tdx = tu_tensor_of("dx", CK_F64, SHAPE(N), start);
    ck_op_io io = {.n_in = 1, .in = {tx}, .out = ty};
    ck_op_grads g = {.dout = tdy, .din = {tdx}};
    ck_fwd_args a = no_args();
    tu_forward_ok(rows[_i].desc, &op, &a, &io);
    tu_backward_ok(rows[_i].desc, &op, &a, &io, &g);
    for (int i = 0; i < N; i++) {
        double xp[N], xm[N], yp[N], ym[N];
        memcpy(xp, rows[_i].x, sizeof xp);
        memcpy(xm, rows[_i].x, sizeof xm);
        xp[i] += h;
        xm[i] -= h;
        forward(rows[_i].kind, CK_F64, xp, yp);
        forward(rows[_i].kind, CK_F64, xm, ym);
        double fd = dy[i] * (yp[i] - ym[i]) / (2 * h);
        double got = tu_tget(tdx, i) - 0.5;
        ck_assert_msg(fabs(got - fd) <= 1e-7 * (1 + fabs(fd)), "%s x %g: dx %.12g, differences "
                      "%.12g", rows[_i].desc, rows[_i].x[i], got, fd);
        ck_assert_msg(got != 0.0 || rows[_i].kind == CK_OP_NEG, "%s: a zero gradient",
                      rows[_i].desc);
    }
    tu_tensor_free(tx);
    tu_tensor_free(ty);
    tu_tensor_free(tdy);
    tu_tensor_free(tdx);
}
END_TEST

START_TEST(abs_gradient_at_zero_is_zero_and_sqrt_of_negative_is_nan)
{
    ck_op_params op;
    ck_op_params_default(&op, CK_OP_ABS, 0);
    ck_tensor *x = tu_tensor_of("x", CK_F64, SHAPE(1), (double[]){0.0});
    ck_tensor *y = tu_tensor_new("y", CK_F64, SHAPE(1));
    ck_tensor *dy = tu_tensor_of("dy", CK_F64, SHAPE(1), (double[]){1.0});
    ck_tensor *dx = tu_tensor_of("dx", CK_F64, SHAPE(1), (double[]){0.0});
    ck_op_io io = {.n_in = 1, .in = {x}, .out = y};
    ck_op_grads g = {.dout = dy, .din = {dx}};
    ck_fwd_args a = no_args();
    tu_forward_ok("abs", &op, &a, &io);
    tu_backward_ok("abs", &op, &a, &io, &g);
    ck_assert(tu_tget(dx, 0) == 0.0);
    double nx[N] = {-1, -1, -1, -1, -1, -1}, ny[N];
    forward(CK_OP_SQRT, CK_F64, nx, ny);
    ck_assert(isnan(ny[0]));
    tu_tensor_free(x);
    tu_tensor_free(y);
    tu_tensor_free(dy);
    tu_tensor_free(dx);
}
END_TEST

/* ---- cast ---- */

static ck_op_params cast_op(ck_dtype to, ck_dtype from)
{
    ck_op_params op;
    ck_op_params_default(&op, CK_OP_CAST, 0);
    op.cast_to = to;
    op.cast_from = from;
    return op;
}

/* y = cast(x) and dx = 0.5 + cast's backward of dy, in storage dtype dt */
static void cast_run(ck_dtype to, ck_dtype from, ck_dtype dt, int n, const double *x,
                     const double *dy, double *y, double *dx)
{
    ck_op_params op = cast_op(to, from);
    double start[16];
    for (int i = 0; i < n; i++)
        start[i] = 0.5;
    ck_tensor *tx = tu_tensor_of("x", dt, SHAPE(n), x);
    ck_tensor *ty = tu_tensor_new("y", dt, SHAPE(n));
    ck_tensor *tdy = tu_tensor_of("dy", dt, SHAPE(n), dy);
    ck_tensor *tdx = tu_tensor_of("dx", dt, SHAPE(n), start);
    ck_op_io io = {.n_in = 1, .in = {tx}, .out = ty};
    ck_op_grads g = {.dout = tdy, .din = {tdx}};
    ck_fwd_args a = no_args();
    tu_forward_ok("cast", &op, &a, &io);
    tu_backward_ok("cast", &op, &a, &io, &g);
    for (int i = 0; i < n; i++) {
        y[i] = tu_tget(ty, i);
        dx[i] = tu_tget(tdx, i);
    }
    tu_tensor_free(tx);
    tu_tensor_free(ty);
    tu_tensor_free(tdy);
    tu_tensor_free(tdx);
}

#define P(e) ldexp(1.0, e)

/* the float32 form: the identity in float64, its backward dx += dy; against central
 * differences and through ck_gradcheck_op as every op */
START_TEST(cast_float32_form_matches_central_differences)
{
    const double x[N] = {-3.0, -0.5, 1e-3, 0.25, 1.0 + P(-30), 2.5};
    const double dy[N] = {0.5, -1.0, 0.25, 2.0, -0.75, 1.5}, h = 1e-6;
    double y[N], dx[N];
    cast_run(CK_F32, CK_F32, CK_F64, N, x, dy, y, dx);
    for (int i = 0; i < N; i++) {
        double xp[N], xm[N], yp[N], ym[N], unused[N];
        memcpy(xp, x, sizeof xp);
        memcpy(xm, x, sizeof xm);
        xp[i] += h;
        xm[i] -= h;
        cast_run(CK_F32, CK_F32, CK_F64, N, xp, dy, yp, unused);
        cast_run(CK_F32, CK_F32, CK_F64, N, xm, dy, ym, unused);
        const double fd = dy[i] * (yp[i] - ym[i]) / (2 * h);
        ck_assert_msg(fabs((dx[i] - 0.5) - fd) <= 1e-7 * (1 + fabs(fd)),
                      "cast float32 x %g: dx %.12g, differences %.12g", x[i], dx[i] - 0.5, fd);
        ck_assert(y[i] == x[i]); /* 1 + 2^-30 too: float64 keeps it */
    }
    ck_op_params op = cast_op(CK_F32, CK_F32);
    ck_node node = tu_node_make(op, 1, SHAPE(3, 5));
    ck_shape in_shape = SHAPE(3, 5);
    tu_gradcheck_ok("cast float32", &node, &in_shape, NULL, 21);
}
END_TEST

/* The rounding forms against exact values: ties to even both ways, float16's overflow at
 * 65520 (65519.99 still rounds down to 65504), subnormal ties, NaN kept, bfloat16's overflow
 * past float32's largest value; the gradient rounded to `from`, added to dx's 0.5. */
START_TEST(cast_rounds_to_exact_values)
{
    const struct { /* not static: ldexp is no constant expression for every compiler */
        const char *desc;
        ck_dtype to, from;
        double x, y;   /* forward */
        double dy, dx; /* backward: dx - 0.5 */
    } cases[] = {
        {"f16 tie to even, down", CK_F16, CK_F32, 1 + P(-11), 1.0, 1 + P(-11), 1 + P(-11)},
        {"f16 tie to even, up", CK_F16, CK_F32, 1 + 3 * P(-11), 1 + P(-9), 0.25, 0.25},
        {"f16 just above a tie", CK_F16, CK_F32, 1 + P(-11) + P(-23), 1 + P(-10), 0, 0},
        {"f16 largest finite", CK_F16, CK_F32, 65519.99609375, 65504.0, 1, 1},
        {"f16 overflow", CK_F16, CK_F32, 65520.0, INFINITY, 1, 1},
        {"f16 negative overflow", CK_F16, CK_F32, -1e10, -INFINITY, 1, 1},
        {"f16 subnormal tie to 0", CK_F16, CK_F32, P(-25), 0.0, 1, 1},
        {"f16 subnormal tie up", CK_F16, CK_F32, 3 * P(-25), P(-23), 1, 1},
        {"bf16 tie to even", CK_BF16, CK_F32, 1 + P(-8), 1.0, 1, 1},
        {"bf16 tie up", CK_BF16, CK_F32, 1 + 3 * P(-8), 1 + P(-6), 1, 1},
        {"bf16 float32's largest overflows", CK_BF16, CK_F32, 3.4028234663852886e38, INFINITY, 1, 1},
        {"back from f16: gradient tie to even", CK_F32, CK_F16, 1.5, 1.5, 1 + P(-11), 1.0},
        {"back from f16: gradient overflow", CK_F32, CK_F16, -2.0, -2.0, 70000.0, INFINITY},
        {"back from bf16: gradient tie up", CK_F32, CK_BF16, 3.0, 3.0, 1 + 3 * P(-8), 1 + P(-6)},
        {"f16 to bf16", CK_BF16, CK_F16, 1 + 5 * P(-10), 1.0 + P(-7), 1 + 3 * P(-10), 1 + 3 * P(-10)},
    };
    for (size_t r = 0; r < sizeof cases / sizeof cases[0]; r++) {
        double y, dx;
        cast_run(cases[r].to, cases[r].from, CK_F32, 1, &cases[r].x, &cases[r].dy, &y, &dx);
        ck_assert_msg(y == cases[r].y, "%s: y %.17g, want %.17g", cases[r].desc, y, cases[r].y);
        ck_assert_msg(dx - 0.5 == cases[r].dx, "%s: dx %.17g, want 0.5 + %.17g", cases[r].desc,
                      dx, cases[r].dx);
    }
    double nan_x = NAN, y, dx, one = 1.0;
    cast_run(CK_F16, CK_F32, CK_F32, 1, &nan_x, &one, &y, &dx);
    ck_assert(isnan(y) && dx == 1.5);
}
END_TEST

/* In fp16 and bf16 storage the value is rounded to `to`, then stored in the run's dtype
 * (round_run(round_to(x))); the gradient is rounded to `from`, then accumulated in the
 * run's dtype. A cast to the run's own dtype changes nothing. */
START_TEST(cast_in_low_precision_storage_rounds_then_stores)
{
    /* fp16 storage, cast to bfloat16: 1 + 5 * 2^-10 (an fp16 value) -> 1 + 2^-7 */
    double x = 1 + 5 * P(-10), dy = 1 + 3 * P(-10), y, dx;
    cast_run(CK_BF16, CK_F16, CK_F16, 1, &x, &dy, &y, &dx);
    ck_assert(y == 1 + P(-7));
    ck_assert(dx == 0.5 + dy); /* 1.5 + 3 * 2^-10 is an fp16 value: the sum is exact */
    /* bf16 storage, cast to float16: bfloat16's 2^100 overflows float16 */
    x = P(100);
    dy = 2.0;
    cast_run(CK_F16, CK_BF16, CK_BF16, 1, &x, &dy, &y, &dx);
    ck_assert(isinf(y) && y > 0);
    ck_assert(dx == 2.5);
    /* fp16 storage, cast to float16: the identity; from bfloat16: the gradient rounds */
    x = 1 + P(-10);
    dy = 1 + P(-10);
    cast_run(CK_F16, CK_BF16, CK_F16, 1, &x, &dy, &y, &dx);
    ck_assert(y == x);
    ck_assert(dx == 1.5); /* 1 + 2^-10 -> bfloat16 1.0, then 0.5 + 1.0 */
}
END_TEST

/* a cast's dtypes other than float32/float16/bfloat16 are refused by the backend */
START_TEST(cast_to_another_dtype_is_refused)
{
    ck_op_params op = cast_op(CK_F64, CK_F32);
    ck_tensor *tx = tu_tensor_of("x", CK_F32, SHAPE(1), (double[]){1.0});
    ck_tensor *ty = tu_tensor_new("y", CK_F32, SHAPE(1));
    ck_op_io io = {.n_in = 1, .in = {tx}, .out = ty};
    ck_fwd_args a = no_args();
    ck_error err;
    ck_assert_int_eq(tu_cpu->forward(tu_cpu, &op, &a, &io, &err), CK_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "cast: target dtype"), "'%s'", err.msg);
    tu_tensor_free(tx);
    tu_tensor_free(ty);
}
END_TEST

Suite *suite_ops_unary(void)
{
    Suite *s = suite_create("ops_unary");
    TCase *tc = tcase_create("unary");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_add_loop_test(tc, unary_forward_matches_libm, 0, (int)(sizeof rows / sizeof rows[0]));
    tcase_add_loop_test(tc, unary_backward_matches_central_differences, 0,
                        (int)(sizeof rows / sizeof rows[0]));
    tcase_add_test(tc, abs_gradient_at_zero_is_zero_and_sqrt_of_negative_is_nan);
    tcase_add_test(tc, cast_float32_form_matches_central_differences);
    tcase_add_test(tc, cast_rounds_to_exact_values);
    tcase_add_test(tc, cast_in_low_precision_storage_rounds_then_stores);
    tcase_add_test(tc, cast_to_another_dtype_is_refused);
    suite_add_tcase(s, tc);
    return s;
}
