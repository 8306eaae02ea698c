/*
 * The unary functions exporters emit (pointwise family): sqrt, rsqrt, reciprocal, exp, log,
 * neg, erf, abs. Forward against libm's values in fp64 and fp32 (one rounding), backward
 * against float64 central differences on inputs inside each function's domain, backward
 * accumulating into dx (+=), and abs'(0) = 0 as PyTorch's.
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

Suite *suite_ops_unary(void)
{
    Suite *s = suite_create("ops_unary");
    TCase *tc = tcase_create("unary");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_add_loop_test(tc, unary_forward_matches_libm, 0, (int)(sizeof rows / sizeof rows[0]));
    tcase_add_loop_test(tc, unary_backward_matches_central_differences, 0,
                        (int)(sizeof rows / sizeof rows[0]));
    tcase_add_test(tc, abs_gradient_at_zero_is_zero_and_sqrt_of_negative_is_nan);
    suite_add_tcase(s, tc);
    return s;
}
