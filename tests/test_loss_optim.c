/*
 * CPU backend, losses and optimizer steps. Every loss against hand-computed values and its
 * gradient against float64 central differences of the loss itself; cross-entropy's
 * numerical stability and target checks; sgd, momentum and adam over two steps against
 * hand-computed (PyTorch-formula) numbers; fp32 against fp64 agreement.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "tests/test_util.h"

static ck_tensor *targets_of(ck_shape shape, const int32_t *v)
{
    ck_tensor *t = tu_tensor_new("target", CK_I32, shape);
    memcpy(t->data, v, (size_t)ck_shape_numel(&shape) * sizeof(int32_t));
    return t;
}

static double loss_ok(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *target)
{
    ck_error err = {{0}};
    double L = NAN;
    ck_status st = tu_cpu->loss_forward(tu_cpu, kind, y, target, &L, &err);
    ck_assert_msg(st == CK_OK, "%s loss failed: %s", ck_loss_kind_name(kind), err.msg);
    return L;
}

static void loss_grad_ok(ck_loss_kind kind, const ck_tensor *y, const ck_tensor *target,
                         double scale, ck_tensor *dy)
{
    ck_error err = {{0}};
    ck_status st = tu_cpu->loss_backward(tu_cpu, kind, y, target, scale, dy, false, &err);
    ck_assert_msg(st == CK_OK, "%s loss backward failed: %s", ck_loss_kind_name(kind), err.msg);
}

/* ================================== losses ================================== */

static const double loss_y[6] = {1.0, -2.0, 3.5, 0.0, 0.25, 4.0};
static const double loss_t[6] = {0.5, 0.0, 3.0, 1.0, 0.25, 2.0};

START_TEST(mean_sum_mse_match_hand_values)
{
    ck_dtype dt = _i ? CK_F32 : CK_F64;
    ck_tensor *y = tu_tensor_of("y", dt, SHAPE(2, 3), loss_y);
    ck_tensor *t = tu_tensor_of("t", dt, SHAPE(2, 3), loss_t);
    ck_assert_double_eq_tol(loss_ok(CK_LOSS_MEAN, y, NULL), 1.125, 1e-15);
    ck_assert_double_eq_tol(loss_ok(CK_LOSS_SUM, y, NULL), 6.75, 1e-15);
    /* squared differences 0.25, 4, 0.25, 1, 0, 4 */
    ck_assert_double_eq_tol(loss_ok(CK_LOSS_MSE, y, t), 9.5 / 6.0, 1e-15);

    /* gradients with scale 2: mean 2/6, sum 2, mse 2 * 2 (y - t) / 6 */
    ck_tensor *dy = tu_tensor_of("dy", dt, SHAPE(2, 3), (double[]){9, 9, 9, 9, 9, 9});
    double rtol = dt == CK_F32 ? F32_ULP : 1e-15;
    loss_grad_ok(CK_LOSS_MEAN, y, NULL, 2.0, dy);
    const double third = 1.0 / 3.0;
    tu_assert_values("mean dy", dy, (double[]){third, third, third, third, third, third}, rtol, 0);
    loss_grad_ok(CK_LOSS_SUM, y, NULL, 2.0, dy);
    tu_assert_values("sum dy", dy, (double[]){2, 2, 2, 2, 2, 2}, 0, 0);
    loss_grad_ok(CK_LOSS_MSE, y, t, 2.0, dy);
    tu_assert_values("mse dy", dy,
                     (double[]){2.0 / 6, -8.0 / 6, 2.0 / 6, -4.0 / 6, 0.0, 8.0 / 6}, rtol, 0);
    tu_tensor_free(y);
    tu_tensor_free(t);
    tu_tensor_free(dy);
}
END_TEST

START_TEST(cross_entropy_matches_hand_values)
{
    ck_dtype dt = _i ? CK_F32 : CK_F64;
    /* (N=2, C=3): logsumexp(1, 2, 3) - 3 and log 3 - 0, averaged */
    ck_tensor *y = tu_tensor_of("y", dt, SHAPE(2, 3), (double[]){1, 2, 3, 0, 0, 0});
    ck_tensor *t = targets_of(SHAPE(2), (int32_t[]){2, 1});
    ck_assert_double_eq_tol(loss_ok(CK_LOSS_CROSS_ENTROPY, y, t), 0.7531091265562452, 1e-15);

    /* (N=1, C=2, L=2): position 0 logits (0.5, 1.5) class 1, position 1 (-1, 2) class 0 */
    ck_tensor *ys = tu_tensor_of("ys", dt, SHAPE(1, 2, 2), (double[]){0.5, -1, 1.5, 2});
    ck_tensor *ts = targets_of(SHAPE(1, 2), (int32_t[]){1, 0});
    ck_assert_double_eq_tol(loss_ok(CK_LOSS_CROSS_ENTROPY, ys, ts), 1.6809245195459823, 1e-15);

    /* gradient: scale / positions * (softmax - onehot); at the uniform row it is
     * (1/3, 1/3 - 1, 1/3) / 2 */
    ck_tensor *dy = tu_tensor_new("dy", dt, SHAPE(2, 3));
    loss_grad_ok(CK_LOSS_CROSS_ENTROPY, y, t, 1.0, dy);
    double e1 = exp(1.0), e2 = exp(2.0), e3 = exp(3.0), z = e1 + e2 + e3;
    tu_assert_values("cross_entropy dy", dy,
                     (double[]){e1 / z / 2, e2 / z / 2, (e3 / z - 1) / 2, 1.0 / 6, -1.0 / 3,
                                1.0 / 6},
                     dt == CK_F32 ? F32_ULP : 1e-15, 1e-17);
    tu_tensor_free(y);
    tu_tensor_free(t);
    tu_tensor_free(ys);
    tu_tensor_free(ts);
    tu_tensor_free(dy);
}
END_TEST

START_TEST(cross_entropy_is_stable_for_large_logits)
{
    ck_tensor *y = tu_tensor_of("y", CK_F32, SHAPE(2, 2), (double[]){1000, 0, -1000, 1000});
    ck_tensor *t = targets_of(SHAPE(2), (int32_t[]){0, 0});
    /* position 0: 0 (exp(-1000) vanishes); position 1: 2000 */
    ck_assert_double_eq_tol(loss_ok(CK_LOSS_CROSS_ENTROPY, y, t), 1000.0, 1e-12);
    ck_tensor *dy = tu_tensor_new("dy", CK_F32, SHAPE(2, 2));
    loss_grad_ok(CK_LOSS_CROSS_ENTROPY, y, t, 1.0, dy);
    tu_assert_values("cross_entropy dy", dy, (double[]){0, 0, -0.5, 0.5}, 0, 1e-30);
    tu_tensor_free(y);
    tu_tensor_free(t);
    tu_tensor_free(dy);
}
END_TEST

START_TEST(cross_entropy_names_a_bad_target)
{
    ck_tensor *y = tu_tensor_new("logits", CK_F64, SHAPE(2, 3, 2));
    ck_tensor *dy = tu_tensor_new("dy", CK_F64, SHAPE(2, 3, 2));
    const int32_t bad[2][4] = {{0, 1, 3, 2}, {0, -1, 2, 2}};
    const char *where[2] = {"target[1, 0] = 3", "target[0, 1] = -1"};
    for (int k = 0; k < 2; k++) {
        ck_tensor *t = targets_of(SHAPE(2, 2), bad[k]);
        ck_error err = {{0}};
        double L;
        ck_assert_int_eq(tu_cpu->loss_forward(tu_cpu, CK_LOSS_CROSS_ENTROPY, y, t, &L, &err),
                         CK_ERR_INPUT);
        ck_assert_msg(strstr(err.msg, where[k]) && strstr(err.msg, "[0, 3)"),
                      "message: %s (want %s)", err.msg, where[k]);
        ck_assert_int_eq(tu_cpu->loss_backward(tu_cpu, CK_LOSS_CROSS_ENTROPY, y, t, 1.0, dy, false, &err),
                         CK_ERR_INPUT);
        tu_tensor_free(t);
    }
    /* a target of the wrong shape */
    ck_tensor *t = targets_of(SHAPE(2, 3), (int32_t[]){0, 0, 0, 0, 0, 0});
    ck_error err = {{0}};
    double L;
    ck_assert_int_eq(tu_cpu->loss_forward(tu_cpu, CK_LOSS_CROSS_ENTROPY, y, t, &L, &err),
                     CK_ERR_INPUT);
    tu_tensor_free(t);
    tu_tensor_free(y);
    tu_tensor_free(dy);
}
END_TEST

static const struct {
    const char *desc;
    ck_loss_kind kind;
    int64_t dims[4];
    int ndim;
} grad_rows[] = {
    {"mean (2, 3, 2)", CK_LOSS_MEAN, {2, 3, 2}, 3},
    {"sum (2, 3, 2)", CK_LOSS_SUM, {2, 3, 2}, 3},
    {"mse (2, 3, 2)", CK_LOSS_MSE, {2, 3, 2}, 3},
    {"cross_entropy (4, 5)", CK_LOSS_CROSS_ENTROPY, {4, 5}, 2},
    {"cross_entropy (2, 3, 2, 2)", CK_LOSS_CROSS_ENTROPY, {2, 3, 2, 2}, 4},
};

/* A random f64 (or f32) y and the target the kind needs (NULL for mean and sum). */
static void loss_inputs(int row, ck_dtype dt, ck_tensor **y, ck_tensor **t)
{
    ck_shape ys = ck_shape_make(grad_rows[row].ndim, grad_rows[row].dims);
    ck_rng_stream s = ck_rng_keyed(5, (uint32_t)row, CK_PURPOSE_TEST, 0);
    *y = tu_tensor_new("y", dt, ys);
    for (int64_t i = 0; i < ck_shape_numel(&ys); i++)
        tu_tset(*y, i, (float)(2.0 * ck_rng_normal_f64(&s, (uint64_t)i)));
    *t = NULL;
    ck_rng_stream ts = ck_rng_keyed(5, (uint32_t)row, CK_PURPOSE_TARGET, 0);
    if (grad_rows[row].kind == CK_LOSS_MSE) {
        *t = tu_tensor_new("t", dt, ys);
        for (int64_t i = 0; i < ck_shape_numel(&ys); i++)
            tu_tset(*t, i, (float)ck_rng_uniform_f64(&ts, (uint64_t)i));
    } else if (grad_rows[row].kind == CK_LOSS_CROSS_ENTROPY) {
        ck_shape tsh = ys;
        for (int d = 1; d + 1 < ys.ndim; d++)
            tsh.dim[d] = ys.dim[d + 1];
        tsh.ndim = ys.ndim - 1;
        *t = tu_tensor_new("t", CK_I32, tsh);
        for (int64_t i = 0; i < ck_shape_numel(&tsh); i++)
            ((int32_t *)(*t)->data)[i] =
                (int32_t)ck_rng_below(&ts, (uint64_t)i, (uint32_t)ys.dim[1]);
    }
}

START_TEST(loss_gradient_matches_central_differences)
{
    const double scale = 2.5, eps = 1e-6;
    ck_tensor *y, *t;
    loss_inputs(_i, CK_F64, &y, &t);
    ck_tensor *dy = tu_tensor_new("dy", CK_F64, y->shape);
    loss_grad_ok(grad_rows[_i].kind, y, t, scale, dy);
    for (int64_t i = 0; i < ck_shape_numel(&y->shape); i++) {
        double v = tu_tget(y, i);
        tu_tset(y, i, v + eps);
        double lp = loss_ok(grad_rows[_i].kind, y, t);
        tu_tset(y, i, v - eps);
        double lm = loss_ok(grad_rows[_i].kind, y, t);
        tu_tset(y, i, v);
        double numeric = scale * (lp - lm) / (2.0 * eps);
        ck_assert_msg(fabs(tu_tget(dy, i) - numeric) <= 1e-7 + 1e-5 * fabs(numeric),
                      "%s: dy[%lld] = %.12g, central difference %.12g", grad_rows[_i].desc,
                      (long long)i, tu_tget(dy, i), numeric);
    }
    tu_tensor_free(y);
    tu_tensor_free(t);
    tu_tensor_free(dy);
}
END_TEST

START_TEST(fp32_loss_equals_fp64_loss_on_the_same_values)
{
    /* both accumulate in double over the same values: the losses are identical, and the
     * fp32 gradient is the fp64 gradient rounded once */
    ck_tensor *y32, *t32, *y64, *t64;
    loss_inputs(_i, CK_F32, &y32, &t32);
    loss_inputs(_i, CK_F64, &y64, &t64);
    double l32 = loss_ok(grad_rows[_i].kind, y32, t32);
    double l64 = loss_ok(grad_rows[_i].kind, y64, t64);
    ck_assert_msg(l32 == l64, "%s: fp32 %.17g, fp64 %.17g", grad_rows[_i].desc, l32, l64);
    ck_tensor *d32 = tu_tensor_new("d32", CK_F32, y32->shape);
    ck_tensor *d64 = tu_tensor_new("d64", CK_F64, y64->shape);
    loss_grad_ok(grad_rows[_i].kind, y32, t32, 1.0, d32);
    loss_grad_ok(grad_rows[_i].kind, y64, t64, 1.0, d64);
    for (int64_t i = 0; i < ck_shape_numel(&y32->shape); i++)
        ck_assert_msg(fabs(tu_tget(d32, i) - tu_tget(d64, i)) <=
                          F32_ULP * fabs(tu_tget(d64, i)) + 1e-38,
                      "%s: dy[%lld] fp32 %.9g, fp64 %.17g", grad_rows[_i].desc, (long long)i,
                      tu_tget(d32, i), tu_tget(d64, i));
    tu_tensor_free(y32);
    tu_tensor_free(t32);
    tu_tensor_free(y64);
    tu_tensor_free(t64);
    tu_tensor_free(d32);
    tu_tensor_free(d64);
}
END_TEST

START_TEST(loss_rejects_unsupported_dtypes)
{
    ck_error err = {{0}};
    double L;
    /* fp16/bf16 and per-tensor dtypes are accepted (test_ops_lowp.c); integers are not */
    ck_tensor *h = tu_tensor_new("h", CK_I32, SHAPE(2, 3));
    ck_assert_int_eq(tu_cpu->loss_forward(tu_cpu, CK_LOSS_MEAN, h, NULL, &L, &err),
                     CK_ERR_UNSUPPORTED);
    ck_tensor *y = tu_tensor_new("y", CK_F32, SHAPE(2, 3));
    ck_tensor *t64 = tu_tensor_new("t_i64", CK_I64, SHAPE(2, 3));
    ck_assert_int_eq(tu_cpu->loss_forward(tu_cpu, CK_LOSS_MSE, y, t64, &L, &err),
                     CK_ERR_UNSUPPORTED);
    ck_tensor *tf = tu_tensor_new("tf", CK_F32, SHAPE(2));
    ck_assert_int_eq(tu_cpu->loss_forward(tu_cpu, CK_LOSS_CROSS_ENTROPY, y, tf, &L, &err),
                     CK_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "tf") != NULL, "message names no tensor: %s", err.msg);
    tu_tensor_free(h);
    tu_tensor_free(y);
    tu_tensor_free(t64);
    tu_tensor_free(tf);
}
END_TEST

/* ================================ optimizers ================================ */

/* p = (1, -2); gradients (0.5, -1) then (0.25, 0.5); lr 0.1. Expected values follow
 * torch.optim's formulas, evaluated in double. */
static const double opt_p0[2] = {1.0, -2.0};
static const double opt_g[2][2] = {{0.5, -1.0}, {0.25, 0.5}};

static const struct {
    const char *desc;
    ck_optimizer opt;
    double grad_scale;
    double p[2][2];      /* after step 1, step 2 */
    double s0[2][2];     /* momentum buffer / adam m */
    double s1[2][2];     /* adam v */
} opt_rows[] = {
    {"sgd", {.kind = CK_OPT_SGD, .lr = 0.1}, 1.0, {{0.95, -1.9}, {0.925, -1.95}}, {{0}}, {{0}}},
    {"sgd, weight decay 0.01, grad scale 0.5",
     {.kind = CK_OPT_SGD, .lr = 0.1, .weight_decay = 0.01},
     0.5,
     {{0.974, -1.948}, {0.960526, -1.971052}},
     {{0}},
     {{0}}},
    {"momentum 0.9",
     {.kind = CK_OPT_MOMENTUM, .lr = 0.1, .momentum = 0.9},
     1.0,
     {{0.95, -1.9}, {0.88, -1.86}},
     {{0.5, -1.0}, {0.7, -0.4}},
     {{0}}},
    /* weight decay enters the gradient before the momentum buffer (torch.optim.SGD):
     * d = g + 0.1 p; buf = d, then 0.9 buf + d; p -= 0.1 buf. Hand-computed and pinned
     * with PyTorch 1.13 (float64): p (0.94, -1.88), (0.8516, -1.8032); buf (0.6, -1.2),
     * (0.884, -0.768). Decay added after the buffer would give buf (0.5, -1.0), (0.7, -0.4) */
    {"momentum 0.9, weight decay 0.1",
     {.kind = CK_OPT_MOMENTUM, .lr = 0.1, .momentum = 0.9, .weight_decay = 0.1},
     1.0,
     {{0.94, -1.88}, {0.8516, -1.8032}},
     {{0.6, -1.2}, {0.884, -0.768}},
     {{0}}},
    {"adam",
     {.kind = CK_OPT_ADAM, .lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
     1.0,
     {{0.900000002, -1.900000001}, {0.8067820404774624, -1.873366297370903}},
     {{0.05, -0.1}, {0.07, -0.04}},
     {{0.00025, 0.001}, {0.00031225, 0.001249}}},
};

START_TEST(optimizer_two_steps_match_hand_values)
{
    ck_dtype dt = (_i % 2) ? CK_F32 : CK_F64;
    int row = _i / 2;
    /* fp32 rounds params and state after every step */
    double rtol = dt == CK_F32 ? 4 * F32_ULP : 1e-14;
    ck_tensor *p = tu_tensor_of("p", dt, SHAPE(2), opt_p0);
    ck_tensor *g = tu_tensor_new("g", dt, SHAPE(2));
    /* garbage in the state at step 1: PyTorch starts from fresh state */
    ck_tensor *s0 = tu_tensor_of("s0", dt, SHAPE(2), (double[]){123, -77});
    ck_tensor *s1 = tu_tensor_of("s1", dt, SHAPE(2), (double[]){5, 6});
    for (int step = 1; step <= 2; step++) {
        for (int i = 0; i < 2; i++)
            tu_tset(g, i, opt_g[step - 1][i]);
        ck_error err = {{0}};
        ck_status st = tu_cpu->optimizer_step(tu_cpu, &opt_rows[row].opt, step,
                                              opt_rows[row].grad_scale, p, g, s0, s1, &err);
        ck_assert_msg(st == CK_OK, "%s step %d: %s", opt_rows[row].desc, step, err.msg);
        char desc[128];
        snprintf(desc, sizeof desc, "%s step %d param", opt_rows[row].desc, step);
        tu_assert_values(desc, p, opt_rows[row].p[step - 1], rtol, 0.0);
        if (opt_rows[row].opt.kind != CK_OPT_SGD) {
            snprintf(desc, sizeof desc, "%s step %d state0", opt_rows[row].desc, step);
            tu_assert_values(desc, s0, opt_rows[row].s0[step - 1], rtol, 0.0);
        }
        if (opt_rows[row].opt.kind == CK_OPT_ADAM) {
            snprintf(desc, sizeof desc, "%s step %d state1", opt_rows[row].desc, step);
            tu_assert_values(desc, s1, opt_rows[row].s1[step - 1], rtol, 0.0);
        }
    }
    tu_tensor_free(p);
    tu_tensor_free(g);
    tu_tensor_free(s0);
    tu_tensor_free(s1);
}
END_TEST

START_TEST(optimizer_rejects_bad_arguments)
{
    ck_tensor *p = tu_tensor_of("enc.weight", CK_F32, SHAPE(2), opt_p0);
    ck_tensor *g = tu_tensor_new("g", CK_F32, SHAPE(2));
    ck_tensor *g64 = tu_tensor_new("g_i64", CK_I64, SHAPE(2));
    ck_tensor *s0 = tu_tensor_new("s0", CK_F32, SHAPE(2));
    ck_optimizer adam = {.kind = CK_OPT_ADAM, .lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    ck_optimizer sgd = {.kind = CK_OPT_SGD, .lr = 0.1};
    ck_error err = {{0}};
    /* adam without its second moment */
    ck_assert_int_ne(tu_cpu->optimizer_step(tu_cpu, &adam, 1, 1.0, p, g, s0, NULL, &err), CK_OK);
    ck_assert_msg(strstr(err.msg, "enc.weight") != NULL, "message: %s", err.msg);
    /* step 0 */
    ck_assert_int_ne(tu_cpu->optimizer_step(tu_cpu, &sgd, 0, 1.0, p, g, NULL, NULL, &err), CK_OK);
    /* a gradient of a non-float dtype */
    ck_assert_int_eq(tu_cpu->optimizer_step(tu_cpu, &sgd, 1, 1.0, p, g64, NULL, NULL, &err),
                     CK_ERR_UNSUPPORTED);
    tu_assert_values("untouched", p, opt_p0, 0.0, 0.0);
    tu_tensor_free(p);
    tu_tensor_free(g);
    tu_tensor_free(g64);
    tu_tensor_free(s0);
}
END_TEST

Suite *suite_loss_optim(void)
{
    Suite *s = suite_create("loss_optim");

    TCase *tc = tcase_create("loss");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, mean_sum_mse_match_hand_values, 0, 2);
    tcase_add_loop_test(tc, cross_entropy_matches_hand_values, 0, 2);
    tcase_add_test(tc, cross_entropy_is_stable_for_large_logits);
    tcase_add_test(tc, cross_entropy_names_a_bad_target);
    tcase_add_loop_test(tc, loss_gradient_matches_central_differences, 0, COUNT(grad_rows));
    tcase_add_loop_test(tc, fp32_loss_equals_fp64_loss_on_the_same_values, 0, COUNT(grad_rows));
    tcase_add_test(tc, loss_rejects_unsupported_dtypes);
    suite_add_tcase(s, tc);

    tc = tcase_create("optimizer");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, optimizer_two_steps_match_hand_values, 0, 2 * COUNT(opt_rows));
    tcase_add_test(tc, optimizer_rejects_bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}
