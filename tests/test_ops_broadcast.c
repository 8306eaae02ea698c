/*
 * The broadcast family against hand values: numpy broadcasting in forward and the sum of
 * a broadcast operand's gradient, the tie rules (maximum/minimum: half of dy to each
 * operand; amax: dy shared equally by the tied elements, as PyTorch), NaN propagation,
 * masked_fill's mask, a constant-first operand, expand's and sum's adjoint pair, and the
 * shape rules' refusals, and softmax's additive constant mask. (Every op is also in the op table and the PyTorch fixture
 * broadcast_ops.)
 */
#include <check.h>
#include <math.h>
#include <string.h>

#include "harness/model/graph.h"
#include "harness/model/op_def.h"
#include "tests/test_util.h"

static ck_fwd_args no_args(void)
{
    ck_fwd_args a;
    memset(&a, 0, sizeof a);
    return a;
}

static ck_op_params op_of(ck_op_kind k)
{
    ck_op_params op;
    ck_op_params_default(&op, k, 0);
    return op;
}

/* y = op(a, b) and da, db for dy = 1 (shape rules through ck_op_infer) */
static void run2(ck_op_params *op, ck_shape sa, const double *a, ck_shape sb, const double *b,
                 double *y, double *da, double *db)
{
    ck_shape in[2] = {sa, sb}, sy;
    ck_error err = {{0}};
    ck_assert_msg(ck_op_infer(op, 2, in, &sy, &err) == CK_OK, "%s", err.msg);
    ck_tensor *ta = tu_tensor_of("a", CK_F64, sa, a), *tb = tu_tensor_of("b", CK_F64, sb, b);
    ck_tensor *ty = tu_tensor_new("y", CK_F64, sy), *tdy = tu_tensor_new("dy", CK_F64, sy);
    ck_tensor *tda = tu_tensor_new("da", CK_F64, sa), *tdb = tu_tensor_new("db", CK_F64, sb);
    for (int64_t i = 0; i < ck_shape_numel(&sy); i++)
        tu_tset(tdy, i, 1.0);
    ck_op_io io = {.n_in = 2, .in = {ta, tb}, .out = ty};
    ck_op_grads g = {.dout = tdy, .din = {tda, tdb}};
    ck_fwd_args args = no_args();
    tu_forward_ok("forward", op, &args, &io);
    tu_backward_ok("backward", op, &args, &io, &g);
    for (int64_t i = 0; i < ck_shape_numel(&sy); i++)
        y[i] = tu_tget(ty, i);
    for (int64_t i = 0; i < ck_shape_numel(&sa); i++)
        da[i] = tu_tget(tda, i);
    for (int64_t i = 0; i < ck_shape_numel(&sb); i++)
        db[i] = tu_tget(tdb, i);
    ck_tensor *all[] = {ta, tb, ty, tdy, tda, tdb};
    for (int i = 0; i < 6; i++)
        tu_tensor_free(all[i]);
}

START_TEST(sub_broadcasts_and_sums_the_gradient_of_the_smaller_operand)
{
    /* (2, 3) - (3): y[i][j] = a[i][j] - b[j]; db[j] = -2 (two rows read b[j]) */
    const double a[] = {1, 2, 3, 4, 5, 6}, b[] = {10, 20, 30};
    double y[6], da[6], db[3];
    ck_op_params op = op_of(CK_OP_SUB);
    run2(&op, SHAPE(2, 3), a, SHAPE(3), b, y, da, db);
    const double want[] = {-9, -18, -27, -6, -15, -24};
    for (int i = 0; i < 6; i++) {
        ck_assert_double_eq(y[i], want[i]);
        ck_assert_double_eq(da[i], 1.0);
    }
    for (int j = 0; j < 3; j++)
        ck_assert_double_eq(db[j], -2.0);
    /* (2, 1) and (1, 3) grow each other to (2, 3) */
    ck_op_params mul = op_of(CK_OP_MUL);
    const double c[] = {2, 3}, d[] = {1, 10, 100};
    double y2[6], dc[2], dd[3];
    run2(&mul, SHAPE(2, 1), c, SHAPE(1, 3), d, y2, dc, dd);
    ck_assert(mul.broadcast);
    const double want2[] = {2, 20, 200, 3, 30, 300};
    for (int i = 0; i < 6; i++)
        ck_assert_double_eq(y2[i], want2[i]);
    ck_assert_double_eq(dc[0], 111.0);
    ck_assert_double_eq(dc[1], 111.0);
    ck_assert_double_eq(dd[0], 5.0);
    ck_assert_double_eq(dd[2], 5.0);
}
END_TEST

START_TEST(maximum_and_minimum_split_ties_and_propagate_nan)
{
    const double a[] = {1, 2, 3, NAN}, b[] = {1, 5, 0, 0};
    double y[4], da[4], db[4];
    ck_op_params op = op_of(CK_OP_MAXIMUM);
    run2(&op, SHAPE(4), a, SHAPE(4), b, y, da, db);
    ck_assert_double_eq(y[0], 1.0);
    ck_assert_double_eq(y[1], 5.0);
    ck_assert_double_eq(y[2], 3.0);
    ck_assert(isnan(y[3]));
    /* a tie gives each operand half of dy (PyTorch's maximum backward) */
    ck_assert_double_eq(da[0], 0.5);
    ck_assert_double_eq(db[0], 0.5);
    ck_assert_double_eq(da[1], 0.0);
    ck_assert_double_eq(db[1], 1.0);
    ck_assert_double_eq(da[2], 1.0);
    ck_assert_double_eq(db[2], 0.0);
    op = op_of(CK_OP_MINIMUM);
    run2(&op, SHAPE(4), a, SHAPE(4), b, y, da, db);
    ck_assert_double_eq(y[1], 2.0);
    ck_assert_double_eq(y[2], 0.0);
    ck_assert(isnan(y[3]));
    ck_assert_double_eq(da[0], 0.5);
    ck_assert_double_eq(db[0], 0.5);
    ck_assert_double_eq(da[1], 1.0);
    ck_assert_double_eq(db[2], 1.0);
}
END_TEST

/* one-input op with the constant tensor c (io->constant) */
static void run1(ck_op_params *op, ck_shape sx, const double *x, ck_shape sc, const double *c,
                 double *y, double *dx)
{
    ck_shape sy;
    ck_error err = {{0}};
    ck_assert_msg(ck_op_infer(op, 1, &sx, &sy, &err) == CK_OK, "%s", err.msg);
    ck_tensor *tx = tu_tensor_of("x", CK_F64, sx, x), *tc = c ? tu_tensor_of("c", CK_F64, sc, c) : NULL;
    ck_tensor *ty = tu_tensor_new("y", CK_F64, sy), *tdy = tu_tensor_new("dy", CK_F64, sy);
    ck_tensor *tdx = tu_tensor_new("dx", CK_F64, sx);
    for (int64_t i = 0; i < ck_shape_numel(&sy); i++)
        tu_tset(tdy, i, 1.0 + (double)i);
    ck_op_io io = {.n_in = 1, .in = {tx}, .out = ty, .constant = tc};
    ck_op_grads g = {.dout = tdy, .din = {tdx}};
    ck_fwd_args args = no_args();
    tu_forward_ok("forward", op, &args, &io);
    tu_backward_ok("backward", op, &args, &io, &g);
    for (int64_t i = 0; i < ck_shape_numel(&sy); i++)
        y[i] = tu_tget(ty, i);
    for (int64_t i = 0; i < ck_shape_numel(&sx); i++)
        dx[i] = tu_tget(tdx, i);
    tu_tensor_free(tx);
    if (tc)
        tu_tensor_free(tc);
    tu_tensor_free(ty);
    tu_tensor_free(tdy);
    tu_tensor_free(tdx);
}

START_TEST(constants_masks_and_reductions_follow_pytorch)
{
    const double x[] = {1, 4, 4, 2, 8, 3};
    double y[6], dx[6];
    /* 2 / x: the constant first, dx = -2 dy / x^2 */
    ck_op_params op = op_of(CK_OP_DIV);
    op.scalar = 2.0;
    op.const_first = true;
    run1(&op, SHAPE(2, 3), x, SHAPE(1), NULL, y, dx);
    ck_assert_double_eq(y[1], 0.5);
    ck_assert_double_eq(dx[1], -2.0 * 2.0 / 16.0);
    /* masked_fill with a (1, 3) mask: column 1 filled with -7, no gradient there */
    const double mask[] = {0, 1, 0};
    op = op_of(CK_OP_MASKED_FILL);
    op.scalar = -7.0;
    op.n_const = 2;
    op.const_shape[0] = 1;
    op.const_shape[1] = 3;
    run1(&op, SHAPE(2, 3), x, SHAPE(1, 3), mask, y, dx);
    const double want[] = {1, -7, 4, 2, -7, 3}, wdx[] = {1, 0, 3, 4, 0, 6};
    for (int i = 0; i < 6; i++) {
        ck_assert_double_eq(y[i], want[i]);
        ck_assert_double_eq(dx[i], wdx[i]);
    }
    /* amax over dim 1: row 0 ties (4, 4) and shares dy = 1 equally */
    op = op_of(CK_OP_REDUCE_MAX);
    op.n_axes = 1;
    op.axes[0] = 1;
    run1(&op, SHAPE(2, 3), x, SHAPE(1), NULL, y, dx);
    ck_assert_double_eq(y[0], 4.0);
    ck_assert_double_eq(y[1], 8.0);
    const double wmax[] = {0, 0.5, 0.5, 0, 2, 0};
    for (int i = 0; i < 6; i++)
        ck_assert_double_eq(dx[i], wmax[i]);
    /* mean over dim 0 with keepdim: (1, 3) */
    op = op_of(CK_OP_REDUCE_MEAN);
    op.n_axes = 1;
    op.axes[0] = 0;
    op.keepdim = true;
    run1(&op, SHAPE(2, 3), x, SHAPE(1), NULL, y, dx);
    ck_assert_double_eq(y[0], 1.5);
    ck_assert_double_eq(y[2], 3.5);
    ck_assert_double_eq(dx[0], 0.5);
    ck_assert_double_eq(dx[5], 1.5);
    /* expand (3) -> (2, 3): dx sums the two rows of dy (1..6) */
    op = op_of(CK_OP_EXPAND);
    op.n_shape = 2;
    op.shape[0] = 2;
    op.shape[1] = 3;
    run1(&op, SHAPE(3), x, SHAPE(1), NULL, y, dx);
    ck_assert_double_eq(y[4], 4.0);
    ck_assert_double_eq(dx[0], 1.0 + 4.0);
    ck_assert_double_eq(dx[2], 3.0 + 6.0);
}
END_TEST

START_TEST(softmax_with_a_causal_mask_gives_masked_positions_nothing)
{
    /* (2, 2) scores, mask [[0, -inf], [0, 0]]: row 0 is all on position 0 */
    const double x[] = {0.3, 5.0, 1.0, 2.0}, mask[] = {0, -INFINITY, 0, 0};
    double y[4], dx[4];
    ck_op_params op = op_of(CK_OP_SOFTMAX);
    op.n_const = 2;
    op.const_shape[0] = 2;
    op.const_shape[1] = 2;
    run1(&op, SHAPE(2, 2), x, SHAPE(2, 2), mask, y, dx);
    ck_assert_double_eq(y[0], 1.0);
    ck_assert_double_eq(y[1], 0.0);
    ck_assert_double_eq_tol(y[3], 1.0 / (1.0 + exp(-1.0)), 1e-15);
    /* row 0 is constant (1, 0): no gradient; row 1 as an unmasked softmax */
    ck_assert_double_eq(dx[0], 0.0);
    ck_assert_double_eq(dx[1], 0.0);
    const double p = 1.0 / (1.0 + exp(-1.0)); /* y[3] */
    /* dy = (3, 4) on row 1: dx = y (dy - sum dy y) */
    const double s = 3.0 * (1.0 - p) + 4.0 * p;
    ck_assert_double_eq_tol(dx[3], p * (4.0 - s), 1e-15);
}
END_TEST

START_TEST(shape_rules_refuse_what_does_not_broadcast)
{
    ck_error err = {{0}};
    ck_shape y;
    ck_op_params op = op_of(CK_OP_SUB);
    ck_shape two[2] = {SHAPE(2, 3), SHAPE(2)};
    ck_assert_int_eq(ck_op_infer(&op, 2, two, &y, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "do not broadcast"), "%s", err.msg);
    op = op_of(CK_OP_DIV);
    ck_shape one[1] = {SHAPE(2, 3)};
    ck_assert_int_eq(ck_op_infer(&op, 1, one, &y, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "needs a constant operand"), "%s", err.msg);
    op = op_of(CK_OP_REDUCE_SUM);
    op.n_axes = 2;
    op.axes[0] = 0;
    op.axes[1] = 1;
    ck_assert_int_eq(ck_op_infer(&op, 1, one, &y, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "keepdim"), "%s", err.msg);
    op.keepdim = true;
    ck_assert_int_eq(ck_op_infer(&op, 1, one, &y, &err), CK_OK);
    ck_assert_int_eq(y.ndim, 2);
    ck_assert_int_eq(y.dim[0] * y.dim[1], 1);
    op = op_of(CK_OP_ADD); /* equal shapes: the pointwise kernel, not the broadcast one */
    ck_shape same[2] = {SHAPE(2, 3), SHAPE(2, 3)};
    ck_assert_int_eq(ck_op_infer(&op, 2, same, &y, &err), CK_OK);
    ck_assert(!op.broadcast);
}
END_TEST

Suite *suite_ops_broadcast(void)
{
    Suite *s = suite_create("ops_broadcast");
    TCase *tc = tcase_create("broadcast");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_add_test(tc, sub_broadcasts_and_sums_the_gradient_of_the_smaller_operand);
    tcase_add_test(tc, maximum_and_minimum_split_ties_and_propagate_nan);
    tcase_add_test(tc, constants_masks_and_reductions_follow_pytorch);
    tcase_add_test(tc, softmax_with_a_causal_mask_gives_masked_positions_nothing);
    tcase_add_test(tc, shape_rules_refuse_what_does_not_broadcast);
    suite_add_tcase(s, tc);
    return s;
}
