/*
 * CPU backend, pointwise and shape ops: activations, dropout, gaussian noise, add, concat
 * and flatten. Forward passes against hand-computed values, backward passes against
 * float64 central differences (ck_gradcheck_op), accumulation of gradients, the dropout
 * mask's dependence on its seed stream, and fp32 against fp64 forward agreement.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/ref/ref_ops.h"
#include "backends/registry.h"
#include "harness/verify/gradcheck.h"
#include "tests/test_util.h"

/* this file's random tensors (tu_tensor_rand) and gradcheck samples */
#define RAND_SEED 99
#define GRADCHECK_SEED 7

static ck_fwd_args fwd_args(uint32_t layer, uint32_t step)
{
    ck_fwd_args a;
    memset(&a, 0, sizeof a);
    a.rng = ck_rng_keyed(2024, layer, CK_PURPOSE_DROPOUT, step);
    return a;
}

static ck_op_params op_of(ck_op_kind kind)
{
    ck_op_params op;
    ck_op_params_default(&op, kind, 0);
    return op;
}

/* ================================ activations ================================ */

static const double act_x[5] = {-2.0, -0.5, 0.0, 1.0, 3.0};

static const struct {
    const char *desc;
    ck_op_kind kind;
    double y[5];
} act_cases[] = {
    {"relu", CK_OP_RELU, {0.0, 0.0, 0.0, 1.0, 3.0}},
    {"leaky_relu slope 0.1", CK_OP_LEAKY_RELU, {-0.2, -0.05, 0.0, 1.0, 3.0}},
    {"gelu", CK_OP_GELU,
     {-0.04550026389635842, -0.15426876936299344, 0.0, 0.8413447460685429, 2.99595030590511}},
    {"tanh", CK_OP_TANH,
     {-0.9640275800758169, -0.46211715726000974, 0.0, 0.7615941559557649, 0.9950547536867305}},
    {"sigmoid", CK_OP_SIGMOID,
     {0.11920292202211755, 0.3775406687981454, 0.5, 0.7310585786300049, 0.9525741268224334}},
};

START_TEST(activation_forward_matches_hand_values)
{
    for (int d = 0; d < 2; d++) {
        ck_dtype dt = d ? CK_F32 : CK_F64;
        ck_op_params op = op_of(act_cases[_i].kind);
        op.slope = 0.1;
        ck_tensor *x = tu_tensor_of("x", dt, SHAPE(5), act_x);
        ck_tensor *y = tu_tensor_new("y", dt, SHAPE(5));
        ck_op_io io = {.n_in = 1, .in = {x}, .out = y};
        ck_fwd_args args = fwd_args(0, 0);
        tu_forward_ok(act_cases[_i].desc, &op, &args, &io);
        tu_assert_values(act_cases[_i].desc, y, act_cases[_i].y,
                         dt == CK_F32 ? F32_ULP : 1e-15, 1e-300);
        tu_tensor_free(x);
        tu_tensor_free(y);
    }
}
END_TEST

START_TEST(activation_backward_at_zero_uses_the_input)
{
    /* relu'(0) = 0 and leaky'(0) = slope, as PyTorch; din starts at 1 to show += */
    const double zero[1] = {0.0}, one[1] = {1.0};
    const struct {
        ck_op_kind kind;
        double want;
    } rows[] = {{CK_OP_RELU, 1.0}, {CK_OP_LEAKY_RELU, 1.0 + 0.25 * 0.1},
                {CK_OP_GELU, 1.0 + 0.25 * 0.5}, {CK_OP_TANH, 1.0 + 0.25},
                {CK_OP_SIGMOID, 1.0 + 0.25 * 0.25}};
    for (int r = 0; r < COUNT(rows); r++) {
        ck_op_params op = op_of(rows[r].kind);
        op.slope = 0.1;
        ck_tensor *x = tu_tensor_of("x", CK_F64, SHAPE(1), zero);
        ck_tensor *y = tu_tensor_new("y", CK_F64, SHAPE(1));
        ck_tensor *dy = tu_tensor_of("dy", CK_F64, SHAPE(1), (double[]){0.25});
        ck_tensor *dx = tu_tensor_of("dx", CK_F64, SHAPE(1), one);
        ck_op_io io = {.n_in = 1, .in = {x}, .out = y};
        ck_op_grads g = {.dout = dy, .din = {dx}};
        ck_fwd_args args = fwd_args(0, 0);
        tu_forward_ok(ck_op_kind_name(rows[r].kind), &op, &args, &io);
        tu_backward_ok(ck_op_kind_name(rows[r].kind), &op, &args, &io, &g);
        ck_assert_msg(fabs(tu_tget(dx, 0) - rows[r].want) < 1e-15, "%s: dx %.17g, want %.17g",
                      ck_op_kind_name(rows[r].kind), tu_tget(dx, 0), rows[r].want);
        tu_tensor_free(x);
        tu_tensor_free(y);
        tu_tensor_free(dy);
        tu_tensor_free(dx);
    }
}
END_TEST

/* torch.relu keeps NaN (clamp_min propagates it) and its backward (threshold_backward on
 * the output) passes dy through at NaN; a relu that turned NaN into 0 hid a NaN model's
 * weights from every later check. Every CPU backend, every float dtype. */
START_TEST(relu_propagates_nan_as_pytorch)
{
    const char *names[] = {"ref", "cpu"};
    const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16};
    const double xv[4] = {NAN, -1.0, 0.0, 2.0};
    for (int bi = 0; bi < COUNT(names); bi++)
        for (int d = 0; d < COUNT(dts); d++) {
            ck_backend *b = NULL;
            ck_error err = {{0}};
            ck_assert_msg(ck_backend_create(names[bi], NULL, &b, &err) == CK_OK, "%s", err.msg);
            ck_op_params op = op_of(CK_OP_RELU);
            ck_tensor *x = tu_tensor_of("x", dts[d], SHAPE(4), xv);
            ck_tensor *y = tu_tensor_new("y", dts[d], SHAPE(4));
            ck_tensor *dy = tu_tensor_of("dy", dts[d], SHAPE(4), (double[]){0.5, 0.5, 0.5, 0.5});
            ck_tensor *dx = tu_tensor_new("dx", dts[d], SHAPE(4));
            ck_op_io io = {.n_in = 1, .in = {x}, .out = y};
            ck_op_grads g = {.dout = dy, .din = {dx}};
            ck_fwd_args args = fwd_args(0, 0);
            ck_assert_msg(b->forward(b, &op, &args, &io, &err) == CK_OK, "%s", err.msg);
            ck_assert_msg(b->backward(b, &op, &args, &io, &g, &err) == CK_OK, "%s", err.msg);
            const char *dn = ck_dtype_name(dts[d]);
            ck_assert_msg(isnan(tu_tget(y, 0)), "%s %s: relu(NaN) = %g", names[bi], dn, tu_tget(y, 0));
            ck_assert_msg(tu_tget(y, 1) == 0.0 && tu_tget(y, 2) == 0.0 && tu_tget(y, 3) == 2.0,
                          "%s %s: relu of -1, 0, 2", names[bi], dn);
            ck_assert_msg(tu_tget(dx, 0) == 0.5 && tu_tget(dx, 1) == 0.0 && tu_tget(dx, 2) == 0.0 &&
                              tu_tget(dx, 3) == 0.5,
                          "%s %s: dx %g %g %g %g", names[bi], dn, tu_tget(dx, 0), tu_tget(dx, 1),
                          tu_tget(dx, 2), tu_tget(dx, 3));
            tu_tensor_free(x);
            tu_tensor_free(y);
            tu_tensor_free(dy);
            tu_tensor_free(dx);
            b->destroy(b);
        }
}
END_TEST

START_TEST(sigmoid_and_tanh_saturate_without_nan)
{
    const double x[4] = {-800.0, -40.0, 40.0, 800.0};
    ck_op_kind kinds[2] = {CK_OP_SIGMOID, CK_OP_TANH};
    const double want[2][4] = {{0.0, 4.248354255291589e-18, 1.0, 1.0}, {-1.0, -1.0, 1.0, 1.0}};
    for (int k = 0; k < 2; k++) {
        ck_op_params op = op_of(kinds[k]);
        ck_tensor *xt = tu_tensor_of("x", CK_F64, SHAPE(4), x);
        ck_tensor *y = tu_tensor_new("y", CK_F64, SHAPE(4));
        ck_tensor *dy = tu_tensor_of("dy", CK_F64, SHAPE(4), (double[]){1, 1, 1, 1});
        ck_tensor *dx = tu_tensor_new("dx", CK_F64, SHAPE(4));
        ck_op_io io = {.n_in = 1, .in = {xt}, .out = y};
        ck_op_grads g = {.dout = dy, .din = {dx}};
        ck_fwd_args args = fwd_args(0, 0);
        tu_forward_ok(ck_op_kind_name(kinds[k]), &op, &args, &io);
        tu_backward_ok(ck_op_kind_name(kinds[k]), &op, &args, &io, &g);
        tu_assert_values(ck_op_kind_name(kinds[k]), y, want[k], 1e-15, 0.0);
        for (int i = 0; i < 4; i++)
            ck_assert_msg(isfinite(tu_tget(dx, i)) && tu_tget(dx, i) >= 0.0, "%s: dx[%d] = %g",
                          ck_op_kind_name(kinds[k]), i, tu_tget(dx, i));
        tu_tensor_free(xt);
        tu_tensor_free(y);
        tu_tensor_free(dy);
        tu_tensor_free(dx);
    }
}
END_TEST

START_TEST(activation_backward_passes_gradcheck)
{
    ck_op_params op = op_of(act_cases[_i].kind);
    op.slope = 0.1;
    ck_shape s = SHAPE(2, 3, 4);
    ck_node node = tu_node_make(op, 1, s);
    ck_fwd_args args = fwd_args(0, 0);
    tu_gradcheck_ok(act_cases[_i].desc, &node, &s, &args, GRADCHECK_SEED);
}
END_TEST

/* ================================ dropout ================================ */

/* Runs dropout (rate) on x = all ones in f64 and returns y. */
static ck_tensor *dropout_ones(ck_shape shape, double rate, const ck_fwd_args *args)
{
    ck_op_params op = op_of(CK_OP_DROPOUT);
    op.rate = rate;
    ck_tensor *x = tu_tensor_new("x", CK_F64, shape);
    for (int64_t i = 0; i < ck_shape_numel(&shape); i++)
        tu_tset(x, i, 1.0);
    ck_tensor *y = tu_tensor_new("y", CK_F64, shape);
    ck_op_io io = {.n_in = 1, .in = {x}, .out = y};
    tu_forward_ok("dropout", &op, args, &io);
    tu_tensor_free(x);
    return y;
}

START_TEST(dropout_mask_follows_the_stream_and_scales_kept_values)
{
    const double rate = 0.3;
    const int n = 1000;
    ck_fwd_args args = fwd_args(3, 0);
    ck_tensor *y = dropout_ones(SHAPE(n), rate, &args);
    ck_tensor *again = dropout_ones(SHAPE(n), rate, &args);
    uint32_t thr = ck_dropout_threshold(rate);
    for (int i = 0; i < n; i++) {
        bool dropped = ck_rng_u32(&args.rng, (uint64_t)i) < thr;
        double want = dropped ? 0.0 : 1.0 / 0.7;
        ck_assert_msg(tu_tget(y, i) == want, "element %d: %.17g, want %.17g", i, tu_tget(y, i),
                      want);
        ck_assert_msg(tu_tget(again, i) == tu_tget(y, i), "element %d differs on replay", i);
    }

    /* another step, another layer, a shifted offset: other masks */
    ck_fwd_args step1 = fwd_args(3, 1), layer4 = fwd_args(4, 0), shifted = args;
    shifted.rng.offset = 4;
    ck_tensor *ys = dropout_ones(SHAPE(n), rate, &step1);
    ck_tensor *yl = dropout_ones(SHAPE(n), rate, &layer4);
    ck_tensor *yo = dropout_ones(SHAPE(n), rate, &shifted);
    int diff_step = 0, diff_layer = 0, diff_offset = 0;
    for (int i = 0; i < n; i++) {
        diff_step += tu_tget(ys, i) != tu_tget(y, i);
        diff_layer += tu_tget(yl, i) != tu_tget(y, i);
        diff_offset += tu_tget(yo, i) != tu_tget(y, i);
        /* an offset of 4 words is the same stream advanced by 4 elements */
        if (i + 4 < n)
            ck_assert(tu_tget(yo, i) == tu_tget(y, i + 4));
    }
    ck_assert_msg(diff_step > 100 && diff_layer > 100 && diff_offset > 100,
                  "masks differ in %d (step), %d (layer), %d (offset) of %d elements",
                  diff_step, diff_layer, diff_offset, n);
    tu_tensor_free(y);
    tu_tensor_free(again);
    tu_tensor_free(ys);
    tu_tensor_free(yl);
    tu_tensor_free(yo);
}
END_TEST

START_TEST(dropout_keeps_an_element_whose_word_equals_the_threshold)
{
    /* element i is dropped iff its word is below rate * 2^32: with the rate chosen so that
     * the threshold is exactly element 0's word, element 0 is kept (the boundary every
     * backend must draw the same way) */
    ck_fwd_args args = fwd_args(5, 0);
    uint32_t w0 = ck_rng_u32(&args.rng, 0);
    ck_assert(w0 > 0);
    double rate = (double)w0 / 4294967296.0; /* exact: w0 < 2^32 */
    ck_assert_uint_eq(ck_dropout_threshold(rate), w0);
    const int n = 64;
    ck_tensor *y = dropout_ones(SHAPE(n), rate, &args);
    ck_assert_msg(tu_tget(y, 0) == 1.0 / (1.0 - rate), "element 0 (word == threshold): %.17g",
                  tu_tget(y, 0));
    for (int i = 1; i < n; i++) {
        bool kept = ck_rng_u32(&args.rng, (uint64_t)i) >= w0;
        ck_assert_msg((tu_tget(y, i) != 0.0) == kept, "element %d", i);
    }
    tu_tensor_free(y);
}
END_TEST

START_TEST(dropout_keeps_about_one_minus_rate)
{
    const int n = 200000;
    const double rates[3] = {0.1, 0.3, 0.5};
    for (int r = 0; r < 3; r++) {
        ck_fwd_args args = fwd_args(1, 2);
        ck_tensor *y = dropout_ones(SHAPE(n), rates[r], &args);
        int kept = 0;
        for (int i = 0; i < n; i++)
            kept += tu_tget(y, i) != 0.0;
        /* the standard deviation of the fraction is below 0.0012 */
        ck_assert_msg(fabs((double)kept / n - (1.0 - rates[r])) < 0.01,
                      "rate %g: kept fraction %g", rates[r], (double)kept / n);
        tu_tensor_free(y);
    }
}
END_TEST

START_TEST(dropout_rate_zero_is_identity_and_rate_one_is_rejected)
{
    ck_fwd_args args = fwd_args(0, 0);
    ck_tensor *x = tu_tensor_rand("x", CK_F32, SHAPE(64), RAND_SEED, 1, true);
    ck_tensor *y = tu_tensor_new("y", CK_F32, SHAPE(64));
    ck_op_params op = op_of(CK_OP_DROPOUT);
    op.rate = 0.0;
    ck_op_io io = {.n_in = 1, .in = {x}, .out = y};
    tu_forward_ok("dropout rate 0", &op, &args, &io);
    ck_assert(memcmp(x->data, y->data, 64 * sizeof(float)) == 0);
    op.rate = 1.0;
    ck_error err = {{0}};
    ck_assert_int_eq(tu_cpu->forward(tu_cpu, &op, &args, &io, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "rate") != NULL, "message: %s", err.msg);
    tu_tensor_free(x);
    tu_tensor_free(y);
}
END_TEST

START_TEST(dropout_backward_passes_gradcheck)
{
    ck_op_params op = op_of(CK_OP_DROPOUT);
    op.rate = 0.4;
    ck_shape s = SHAPE(2, 3, 5);
    ck_node node = tu_node_make(op, 1, s);
    ck_fwd_args args = fwd_args(5, 3);
    tu_gradcheck_ok("dropout 0.4", &node, &s, &args, GRADCHECK_SEED);
}
END_TEST

/* ============================= gaussian noise ============================= */

START_TEST(noise_adds_the_float_normal_draw)
{
    const int n = 20000;
    const double stddev = 0.5;
    ck_fwd_args args = fwd_args(2, 1);
    args.rng = ck_rng_keyed(2024, 2, CK_PURPOSE_NOISE, 1);
    ck_op_params op = op_of(CK_OP_GAUSSIAN_NOISE);
    op.stddev = stddev;
    for (int d = 0; d < 2; d++) {
        ck_dtype dt = d ? CK_F32 : CK_F64;
        ck_tensor *x = tu_tensor_rand("x", dt, SHAPE(n), RAND_SEED, 2, true);
        ck_tensor *y = tu_tensor_new("y", dt, SHAPE(n));
        ck_op_io io = {.n_in = 1, .in = {x}, .out = y};
        tu_forward_ok("noise", &op, &args, &io);
        double s1 = 0.0, s2 = 0.0;
        for (int i = 0; i < n; i++) {
            double z = (double)ck_rng_normal_f32(&args.rng, (uint64_t)i);
            double want = tu_tget(x, i) + stddev * z;
            if (dt == CK_F32)
                want = (float)want;
            ck_assert_msg(tu_tget(y, i) == want, "%s element %d: %.17g, want %.17g",
                          ck_dtype_name(dt), i, tu_tget(y, i), want);
            s1 += z;
            s2 += z * z;
        }
        ck_assert_double_eq_tol(s1 / n, 0.0, 0.03);
        ck_assert_double_eq_tol(s2 / n, 1.0, 0.04);
        tu_tensor_free(x);
        tu_tensor_free(y);
    }
}
END_TEST

START_TEST(noise_backward_passes_gradcheck)
{
    ck_op_params op = op_of(CK_OP_GAUSSIAN_NOISE);
    op.stddev = 0.7;
    ck_shape s = SHAPE(3, 4);
    ck_node node = tu_node_make(op, 1, s);
    ck_fwd_args args = fwd_args(1, 1);
    tu_gradcheck_ok("gaussian_noise 0.7", &node, &s, &args, GRADCHECK_SEED);
}
END_TEST

/* ============================= add, concat, flatten ============================= */

START_TEST(add_sums_inputs_in_order)
{
    const double a[4] = {1, 2, 3, 4}, b[4] = {0.5, -2, 10, 0}, c[4] = {-1, 0.25, 0, 1e-3};
    const double want[4] = {0.5, 0.25, 13, 4.001};
    for (int d = 0; d < 2; d++) {
        ck_dtype dt = d ? CK_F32 : CK_F64;
        ck_tensor *ta = tu_tensor_of("a", dt, SHAPE(2, 2), a);
        ck_tensor *tb = tu_tensor_of("b", dt, SHAPE(2, 2), b);
        ck_tensor *tc = tu_tensor_of("c", dt, SHAPE(2, 2), c);
        ck_tensor *y = tu_tensor_new("y", dt, SHAPE(2, 2));
        ck_op_params op = op_of(CK_OP_ADD);
        ck_op_io io = {.n_in = 3, .in = {ta, tb, tc}, .out = y};
        ck_fwd_args args = fwd_args(0, 0);
        tu_forward_ok("add", &op, &args, &io);
        tu_assert_values("add", y, want, dt == CK_F32 ? F32_ULP : 1e-15, 0.0);

        /* backward: every input gets dout, a NULL din is skipped */
        ck_tensor *dy = tu_tensor_of("dy", dt, SHAPE(2, 2), (double[]){1, -1, 2, 0.5});
        ck_tensor *da = tu_tensor_of("da", dt, SHAPE(2, 2), (double[]){1, 1, 1, 1});
        ck_tensor *dc = tu_tensor_new("dc", dt, SHAPE(2, 2));
        ck_op_grads g = {.dout = dy, .din = {da, NULL, dc}};
        tu_backward_ok("add", &op, &args, &io, &g);
        tu_assert_values("add da", da, (double[]){2, 0, 3, 1.5}, 0.0, 0.0);
        tu_assert_values("add dc", dc, (double[]){1, -1, 2, 0.5}, 0.0, 0.0);
        tu_tensor_free(ta);
        tu_tensor_free(tb);
        tu_tensor_free(tc);
        tu_tensor_free(y);
        tu_tensor_free(dy);
        tu_tensor_free(da);
        tu_tensor_free(dc);
    }
}
END_TEST

START_TEST(concat_joins_channels_in_input_order)
{
    /* (2, 1, 2) ++ (2, 2, 2) ++ (2, 1, 2) -> (2, 4, 2) */
    const double a[4] = {1, 2, 3, 4};
    const double b[8] = {10, 11, 12, 13, 14, 15, 16, 17};
    const double c[4] = {-1, -2, -3, -4};
    const double want[16] = {1, 2, 10, 11, 12, 13, -1, -2, 3, 4, 14, 15, 16, 17, -3, -4};
    ck_tensor *ta = tu_tensor_of("a", CK_F32, SHAPE(2, 1, 2), a);
    ck_tensor *tb = tu_tensor_of("b", CK_F32, SHAPE(2, 2, 2), b);
    ck_tensor *tc = tu_tensor_of("c", CK_F32, SHAPE(2, 1, 2), c);
    ck_tensor *y = tu_tensor_new("y", CK_F32, SHAPE(2, 4, 2));
    ck_op_params op = op_of(CK_OP_CONCAT);
    ck_op_io io = {.n_in = 3, .in = {ta, tb, tc}, .out = y};
    ck_fwd_args args = fwd_args(0, 0);
    tu_forward_ok("concat", &op, &args, &io);
    tu_assert_values("concat", y, want, 0.0, 0.0);

    /* backward slices dout back; the gradient of b starts at 1 to show += */
    ck_tensor *dy = tu_tensor_of("dy", CK_F32, SHAPE(2, 4, 2), want);
    ck_tensor *da = tu_tensor_new("da", CK_F32, SHAPE(2, 1, 2));
    ck_tensor *db = tu_tensor_of("db", CK_F32, SHAPE(2, 2, 2), (double[]){1, 1, 1, 1, 1, 1, 1, 1});
    ck_tensor *dc = tu_tensor_new("dc", CK_F32, SHAPE(2, 1, 2));
    ck_op_grads g = {.dout = dy, .din = {da, db, dc}};
    tu_backward_ok("concat", &op, &args, &io, &g);
    tu_assert_values("concat da", da, a, 0.0, 0.0);
    tu_assert_values("concat db", db, (double[]){11, 12, 13, 14, 15, 16, 17, 18}, 0.0, 0.0);
    tu_assert_values("concat dc", dc, c, 0.0, 0.0);
    tu_tensor_free(ta);
    tu_tensor_free(tb);
    tu_tensor_free(tc);
    tu_tensor_free(y);
    tu_tensor_free(dy);
    tu_tensor_free(da);
    tu_tensor_free(db);
    tu_tensor_free(dc);
}
END_TEST

START_TEST(concat_rejects_mismatched_spatial_dims)
{
    ck_tensor *ta = tu_tensor_new("a", CK_F64, SHAPE(2, 1, 2));
    ck_tensor *tb = tu_tensor_new("b", CK_F64, SHAPE(2, 1, 3));
    ck_tensor *y = tu_tensor_new("y", CK_F64, SHAPE(2, 2, 2));
    ck_op_params op = op_of(CK_OP_CONCAT);
    ck_op_io io = {.n_in = 2, .in = {ta, tb}, .out = y};
    ck_fwd_args args = fwd_args(0, 0);
    ck_error err = {{0}};
    ck_assert_int_ne(tu_cpu->forward(tu_cpu, &op, &args, &io, &err), CK_OK);
    ck_assert_msg(strstr(err.msg, "b has shape [2, 1, 3]") != NULL, "message: %s", err.msg);
    tu_tensor_free(ta);
    tu_tensor_free(tb);
    tu_tensor_free(y);
}
END_TEST

START_TEST(flatten_copies_row_major)
{
    const double x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ck_tensor *tx = tu_tensor_of("x", CK_F64, SHAPE(2, 2, 2), x);
    ck_tensor *y = tu_tensor_new("y", CK_F64, SHAPE(2, 4));
    ck_op_params op = op_of(CK_OP_FLATTEN);
    ck_op_io io = {.n_in = 1, .in = {tx}, .out = y};
    ck_fwd_args args = fwd_args(0, 0);
    tu_forward_ok("flatten", &op, &args, &io);
    tu_assert_values("flatten", y, x, 0.0, 0.0);
    ck_tensor *dx = tu_tensor_of("dx", CK_F64, SHAPE(2, 2, 2), x);
    ck_op_grads g = {.dout = y, .din = {dx}};
    tu_backward_ok("flatten", &op, &args, &io, &g);
    tu_assert_values("flatten dx", dx, (double[]){2, 4, 6, 8, 10, 12, 14, 16}, 0.0, 0.0);
    tu_tensor_free(tx);
    tu_tensor_free(y);
    tu_tensor_free(dx);
}
END_TEST

START_TEST(add_concat_flatten_pass_gradcheck)
{
    ck_fwd_args args = fwd_args(0, 0);
    ck_shape same[3] = {SHAPE(2, 3, 2), SHAPE(2, 3, 2), SHAPE(2, 3, 2)};
    ck_node add = tu_node_make(op_of(CK_OP_ADD), 3, same[0]);
    tu_gradcheck_ok("add of 3", &add, same, &args, GRADCHECK_SEED);

    ck_shape parts[3] = {SHAPE(2, 1, 3), SHAPE(2, 3, 3), SHAPE(2, 2, 3)};
    ck_node cat = tu_node_make(op_of(CK_OP_CONCAT), 3, SHAPE(2, 6, 3));
    tu_gradcheck_ok("concat of 3", &cat, parts, &args, GRADCHECK_SEED);

    ck_shape x = SHAPE(2, 3, 2, 2);
    ck_node flat = tu_node_make(op_of(CK_OP_FLATTEN), 1, SHAPE(2, 12));
    tu_gradcheck_ok("flatten", &flat, &x, &args, GRADCHECK_SEED);
}
END_TEST

/* ============================ across ops and dtypes ============================ */

/* One instance of every op in this file, on shapes small enough to check exhaustively. */
static const struct {
    const char *desc;
    ck_op_kind kind;
    double rate, stddev;
    int n_in;
    int64_t in_c[3]; /* dim 1 of each input of shape (2, c, 3) */
    int64_t out_c;
} op_rows[] = {
    {"relu", CK_OP_RELU, 0, 0, 1, {4}, 4},
    {"leaky_relu", CK_OP_LEAKY_RELU, 0, 0, 1, {4}, 4},
    {"gelu", CK_OP_GELU, 0, 0, 1, {4}, 4},
    {"tanh", CK_OP_TANH, 0, 0, 1, {4}, 4},
    {"sigmoid", CK_OP_SIGMOID, 0, 0, 1, {4}, 4},
    {"dropout", CK_OP_DROPOUT, 0.25, 0, 1, {4}, 4},
    {"gaussian_noise", CK_OP_GAUSSIAN_NOISE, 0, 0.3, 1, {4}, 4},
    {"add", CK_OP_ADD, 0, 0, 3, {4, 4, 4}, 4},
    {"concat", CK_OP_CONCAT, 0, 0, 3, {1, 2, 1}, 4},
};

typedef struct {
    ck_tensor *in[3], *din[3], *out, *dout;
    ck_op_params op;
    ck_op_io io;
    ck_op_grads g;
} op_inst;

static void op_inst_make(op_inst *s, int row, ck_dtype dt)
{
    memset(s, 0, sizeof *s);
    s->op = op_of(op_rows[row].kind);
    s->op.rate = op_rows[row].rate;
    s->op.stddev = op_rows[row].stddev;
    s->io.n_in = op_rows[row].n_in;
    for (int i = 0; i < op_rows[row].n_in; i++) {
        ck_shape sh = SHAPE(2, op_rows[row].in_c[i], 3);
        s->in[i] = tu_tensor_rand("x", dt, sh, RAND_SEED, (uint32_t)i, true);
        s->din[i] = tu_tensor_new("dx", dt, sh);
        s->io.in[i] = s->in[i];
        s->g.din[i] = s->din[i];
    }
    s->out = tu_tensor_new("y", dt, SHAPE(2, op_rows[row].out_c, 3));
    s->dout = tu_tensor_rand("dy", dt, SHAPE(2, op_rows[row].out_c, 3), RAND_SEED, 9, true);
    s->io.out = s->out;
    s->g.dout = s->dout;
}

static void op_inst_free(op_inst *s)
{
    for (int i = 0; i < 3; i++) {
        tu_tensor_free(s->in[i]);
        tu_tensor_free(s->din[i]);
    }
    tu_tensor_free(s->out);
    tu_tensor_free(s->dout);
}

START_TEST(fp32_forward_is_fp64_forward_rounded)
{
    /* Same inputs (fp32-representable) in both dtypes: every kernel computes in double and
     * rounds once, so the fp32 output is within one fp32 ulp of the fp64 output. */
    op_inst a, b;
    op_inst_make(&a, _i, CK_F32);
    op_inst_make(&b, _i, CK_F64);
    ck_fwd_args args = fwd_args(6, 0);
    tu_forward_ok(op_rows[_i].desc, &a.op, &args, &a.io);
    tu_forward_ok(op_rows[_i].desc, &b.op, &args, &b.io);
    for (int64_t i = 0; i < ck_shape_numel(&a.out->shape); i++) {
        double y32 = tu_tget(a.out, i), y64 = tu_tget(b.out, i);
        ck_assert_msg(fabs(y32 - y64) <= F32_ULP * fabs(y64) + 1e-38,
                      "%s: element %lld: fp32 %.9g, fp64 %.17g", op_rows[_i].desc,
                      (long long)i, y32, y64);
    }
    op_inst_free(&a);
    op_inst_free(&b);
}
END_TEST

START_TEST(backward_accumulates_into_gradients)
{
    /* a second backward adds the same gradient again: din == 2 * (first din) exactly */
    op_inst s;
    op_inst_make(&s, _i, CK_F64);
    ck_fwd_args args = fwd_args(6, 0);
    tu_forward_ok(op_rows[_i].desc, &s.op, &args, &s.io);
    tu_backward_ok(op_rows[_i].desc, &s.op, &args, &s.io, &s.g);
    ck_tensor *first[3] = {NULL, NULL, NULL};
    for (int i = 0; i < s.io.n_in; i++) {
        first[i] = tu_tensor_new("first", CK_F64, s.din[i]->shape);
        memcpy(first[i]->data, s.din[i]->data, ck_tensor_bytes(s.din[i]));
    }
    tu_backward_ok(op_rows[_i].desc, &s.op, &args, &s.io, &s.g);
    for (int i = 0; i < s.io.n_in; i++) {
        bool nonzero = false;
        for (int64_t k = 0; k < ck_shape_numel(&first[i]->shape); k++) {
            ck_assert_msg(tu_tget(s.din[i], k) == 2.0 * tu_tget(first[i], k),
                          "%s: din[%d][%lld] %.17g after two passes, %.17g after one",
                          op_rows[_i].desc, i, (long long)k, tu_tget(s.din[i], k),
                          tu_tget(first[i], k));
            nonzero = nonzero || tu_tget(first[i], k) != 0.0;
        }
        ck_assert_msg(nonzero, "%s: din[%d] is all zero", op_rows[_i].desc, i);
        tu_tensor_free(first[i]);
    }
    op_inst_free(&s);
}
END_TEST

/* ck_op_grads.din0_fresh (backend.h): the executor hands an activation's backward its
 * output gradient's own buffer as the input gradient. The result must have the bits of a
 * zeroed gradient accumulated once, on every backend and dtype, including dy = -0 (0 + -0
 * is +0) and masked elements (dy * 0), and whatever the buffer held before. */
START_TEST(fresh_input_gradient_in_the_output_gradients_buffer_has_the_zeroed_bits)
{
    static const double xv[8] = {-2.0, -0.5, 0.0, 1.0, 3.0, -0.0, 0.25, -1.5};
    static const double dyv[8] = {-0.0, 0.75, -1.25, -0.0, 2.5, 0.5, -3.0, -0.0};
    static const char *backends[] = {"cpu", "ref"};
    static const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16, CK_F64};
    /* gelu twice: exact (the activation kernels), then the tanh approximation (the wide
     * kernels, as silu) */
    static const ck_op_kind kinds[] = {CK_OP_RELU, CK_OP_LEAKY_RELU, CK_OP_TANH, CK_OP_SIGMOID,
                                       CK_OP_GELU, CK_OP_GELU, CK_OP_SILU};
    ck_assert(ck_backward_writes_fresh(CK_OP_ADD));
    int checked = 0;
    for (int bi = 0; bi < COUNT(backends); bi++) {
        ck_backend *b = NULL;
        ck_error err = {{0}};
        ck_assert_msg(ck_backend_create(backends[bi], NULL, &b, &err) == CK_OK, "%s", err.msg);
        for (int di = 0; di < COUNT(dts); di++) {
            for (int ki = 0; ki < COUNT(kinds); ki++) {
                ck_assert(ck_backward_writes_fresh(kinds[ki]));
                ck_op_params op = op_of(kinds[ki]);
                op.gelu_tanh = kinds[ki] == CK_OP_GELU && ki > 0 && kinds[ki - 1] == CK_OP_GELU;
                ck_fwd_args args = fwd_args(0, 0);
                ck_tensor *x = tu_tensor_of("x", dts[di], SHAPE(8), xv);
                ck_tensor *y = tu_tensor_new("y", dts[di], SHAPE(8));
                ck_tensor *dy = tu_tensor_of("dy", dts[di], SHAPE(8), dyv);
                ck_tensor *zeroed = tu_tensor_new("dx", dts[di], SHAPE(8));
                ck_tensor *shared = tu_tensor_of("dx_in_dy", dts[di], SHAPE(8), dyv);
                ck_op_io io = {.n_in = 1, .in = {x}, .out = y};
                ck_assert_int_eq(b->forward(b, &op, &args, &io, &err), CK_OK);
                ck_op_grads g = {.dout = dy, .din = {zeroed}};
                ck_assert_msg(b->backward(b, &op, &args, &io, &g, &err) == CK_OK, "%s", err.msg);
                ck_tensor dy_view = *shared; /* the same buffer, as the executor passes it */
                ck_op_grads gf = {.dout = &dy_view, .din = {shared}, .din0_fresh = true};
                ck_assert_msg(b->backward(b, &op, &args, &io, &gf, &err) == CK_OK, "%s",
                              err.msg);
                ck_assert_msg(memcmp(zeroed->data, shared->data, ck_tensor_bytes(zeroed)) == 0,
                              "%s %s %s%s: the fresh gradient in dy's buffer differs from "
                              "zero + accumulate",
                              backends[bi], ck_dtype_name(dts[di]), ck_op_kind_name(kinds[ki]),
                              op.gelu_tanh ? " (tanh)" : "");
                checked++;
                tu_tensor_free(x);
                tu_tensor_free(y);
                tu_tensor_free(dy);
                tu_tensor_free(zeroed);
                tu_tensor_free(shared);
            }
            /* add, as the executor calls it for a residual: din[0] is dy's buffer (the
               other input's gradient is the same buffer, so din[1] is NULL) */
            ck_op_params op = op_of(CK_OP_ADD);
            ck_fwd_args args = fwd_args(0, 0);
            ck_tensor *x = tu_tensor_of("x", dts[di], SHAPE(8), xv);
            ck_tensor *dy = tu_tensor_of("dy", dts[di], SHAPE(8), dyv);
            ck_tensor *zeroed = tu_tensor_new("dx", dts[di], SHAPE(8));
            ck_tensor *shared = tu_tensor_of("dx_in_dy", dts[di], SHAPE(8), dyv);
            ck_op_io io = {.n_in = 2, .in = {x, x}, .out = dy};
            ck_op_grads g = {.dout = dy, .din = {zeroed}};
            ck_assert_msg(b->backward(b, &op, &args, &io, &g, &err) == CK_OK, "%s", err.msg);
            ck_tensor dy_view = *shared;
            ck_op_grads gf = {.dout = &dy_view, .din = {shared}, .din0_fresh = true};
            ck_assert_msg(b->backward(b, &op, &args, &io, &gf, &err) == CK_OK, "%s", err.msg);
            ck_assert_msg(memcmp(zeroed->data, shared->data, ck_tensor_bytes(zeroed)) == 0,
                          "%s %s add: the fresh gradient in dy's buffer differs from zero + "
                          "accumulate", backends[bi], ck_dtype_name(dts[di]));
            ck_assert_msg(!signbit(tu_tget(shared, 0)), "%s %s add: -0 stayed -0",
                          backends[bi], ck_dtype_name(dts[di]));
            checked++;
            tu_tensor_free(x);
            tu_tensor_free(dy);
            tu_tensor_free(zeroed);
            tu_tensor_free(shared);
        }
        b->destroy(b);
    }
    ck_assert_int_eq(checked, COUNT(backends) * COUNT(dts) * (COUNT(kinds) + 1));
}
END_TEST

START_TEST(non_float_dtypes_are_rejected_by_name)
{
    ck_fwd_args args = fwd_args(0, 0);
    ck_error err = {{0}};
    /* fp16/bf16 and per-tensor dtypes are accepted (test_ops_lowp.c); integers are not */
    ck_tensor *h = tu_tensor_new("h", CK_I32, SHAPE(4));
    ck_tensor *hy = tu_tensor_new("hy", CK_I32, SHAPE(4));
    ck_tensor *x = tu_tensor_new("x", CK_F32, SHAPE(4));
    ck_tensor *xi = tu_tensor_new("x_i64", CK_I64, SHAPE(4));
    const ck_op_kind kinds[] = {CK_OP_RELU, CK_OP_DROPOUT, CK_OP_GAUSSIAN_NOISE, CK_OP_ADD};
    for (int k = 0; k < COUNT(kinds); k++) {
        ck_op_params op = op_of(kinds[k]);
        /* straight into the kernel: the vtable would refuse i32 before it */
        ck_op_io io = {.n_in = 1, .in = {h}, .out = hy};
        ck_status st = CK_OK;
        switch (kinds[k]) {
        case CK_OP_RELU: st = ref_pointwise_forward(&op, &args, &io, &err); break;
        case CK_OP_DROPOUT: st = ref_random_forward(&op, &args, &io, &err); break;
        case CK_OP_GAUSSIAN_NOISE: st = ref_random_forward(&op, &args, &io, &err); break;
        default: st = ref_pointwise_forward(&op, &args, &io, &err); break;
        }
        ck_assert_msg(st == CK_ERR_UNSUPPORTED, "%s i32: status %d (%s)",
                      ck_op_kind_name(kinds[k]), (int)st, err.msg);
        ck_op_io mixed = {.n_in = 1, .in = {xi}, .out = x};
        ck_assert_int_eq(tu_cpu->forward(tu_cpu, &op, &args, &mixed, &err), CK_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(err.msg, "x_i64") != NULL, "message names no tensor: %s", err.msg);
    }
    tu_tensor_free(h);
    tu_tensor_free(hy);
    tu_tensor_free(x);
    tu_tensor_free(xi);
}
END_TEST

Suite *suite_ops_pointwise(void)
{
    Suite *s = suite_create("ops_pointwise");

    TCase *tc = tcase_create("activation");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, activation_forward_matches_hand_values, 0, COUNT(act_cases));
    tcase_add_test(tc, activation_backward_at_zero_uses_the_input);
    tcase_add_test(tc, relu_propagates_nan_as_pytorch);
    tcase_add_test(tc, sigmoid_and_tanh_saturate_without_nan);
    tcase_add_loop_test(tc, activation_backward_passes_gradcheck, 0, COUNT(act_cases));
    tcase_add_test(tc, fresh_input_gradient_in_the_output_gradients_buffer_has_the_zeroed_bits);
    suite_add_tcase(s, tc);

    tc = tcase_create("random");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, dropout_mask_follows_the_stream_and_scales_kept_values);
    tcase_add_test(tc, dropout_keeps_an_element_whose_word_equals_the_threshold);
    tcase_add_test(tc, dropout_keeps_about_one_minus_rate);
    tcase_add_test(tc, dropout_rate_zero_is_identity_and_rate_one_is_rejected);
    tcase_add_test(tc, dropout_backward_passes_gradcheck);
    tcase_add_test(tc, noise_adds_the_float_normal_draw);
    tcase_add_test(tc, noise_backward_passes_gradcheck);
    suite_add_tcase(s, tc);

    tc = tcase_create("shape");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, add_sums_inputs_in_order);
    tcase_add_test(tc, concat_joins_channels_in_input_order);
    tcase_add_test(tc, concat_rejects_mismatched_spatial_dims);
    tcase_add_test(tc, flatten_copies_row_major);
    tcase_add_test(tc, add_concat_flatten_pass_gradcheck);
    suite_add_tcase(s, tc);

    tc = tcase_create("dtypes");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, fp32_forward_is_fp64_forward_rounded, 0, COUNT(op_rows));
    tcase_add_loop_test(tc, backward_accumulates_into_gradients, 0, COUNT(op_rows));
    tcase_add_test(tc, non_float_dtypes_are_rejected_by_name);
    suite_add_tcase(s, tc);
    return s;
}
