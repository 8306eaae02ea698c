/*
 * CPU backend, normalisation: batchnorm (training with and without running-stat updates,
 * eval, without affine parameters) and layernorm. Forward passes against hand-computed
 * values, running statistics as PyTorch updates them, backward passes against float64
 * central differences (ck_gradcheck_op), accumulation, and fp32 against fp64 agreement.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/ref/ref_ops.h"
#include "harness/verify/gradcheck.h"
#include "tests/test_util.h"

/* this file's random tensors (tu_tensor_rand) and gradcheck samples */
#define RAND_SEED 77
#define GRADCHECK_SEED 11

static ck_tensor *nbt_new(int64_t value)
{
    ck_shape scalar;
    memset(&scalar, 0, sizeof scalar);
    ck_tensor *t = tu_tensor_new("num_batches_tracked", CK_I64, scalar);
    ((int64_t *)t->data)[0] = value;
    return t;
}

static int64_t nbt_get(const ck_tensor *t) { return ((const int64_t *)t->data)[0]; }

static ck_op_params op_of(ck_op_kind kind, bool eval)
{
    ck_op_params op;
    ck_op_params_default(&op, kind, 0);
    op.eval = eval;
    return op;
}

/* ---- gradcheck through the backend ---- */

static void node_add_param(ck_node *n, const char *suffix, ck_shape shape)
{
    ck_param_spec *p = &n->params[n->n_params++];
    p->suffix = suffix;
    p->shape = shape;
    p->dtype = CK_F32; /* the run's compute dtype */
    p->init = CK_INIT_UNIFORM;
    p->a = 1.0;
}

static void node_add_buffer(ck_node *n, const char *suffix, ck_shape shape, ck_dtype dt,
                            double value)
{
    ck_param_spec *p = &n->buffers[n->n_buffers++];
    p->suffix = suffix;
    p->shape = shape;
    p->dtype = dt;
    p->init = CK_INIT_CONST;
    p->a = value;
}

/* A batchnorm node over x (N, C, ...) as ck_op_state_specs would build it. */
static ck_node bn_node(ck_shape x, bool eval, bool affine, double rm, double rv)
{
    ck_node n = tu_node_make(op_of(CK_OP_BATCHNORM, eval), 1, x);
    ck_shape c = SHAPE(x.dim[1]), scalar;
    memset(&scalar, 0, sizeof scalar);
    if (affine) {
        node_add_param(&n, "weight", c);
        node_add_param(&n, "bias", c);
    }
    node_add_buffer(&n, "running_mean", c, CK_F32, rm);
    node_add_buffer(&n, "running_var", c, CK_F32, rv);
    node_add_buffer(&n, "num_batches_tracked", scalar, CK_I64, 0.0);
    n.has_saved = true;
    n.saved_shape = SHAPE(2, x.dim[1]);
    return n;
}

/* A layernorm node over x (N, ...), weight and bias shaped x[1:]. */
static ck_node ln_node(ck_shape x, bool affine)
{
    ck_node n = tu_node_make(op_of(CK_OP_LAYERNORM, false), 1, x);
    if (affine) {
        ck_shape inner = ck_shape_make(x.ndim - 1, x.dim + 1);
        node_add_param(&n, "weight", inner);
        node_add_param(&n, "bias", inner);
    }
    n.has_saved = true;
    n.saved_shape = SHAPE(2, x.dim[0]);
    return n;
}

/* ================================ batchnorm ================================ */

/* x (2, 2, 2): channel 0 holds {1, 2, 3, 4} (mean 2.5, var 1.25, unbiased 5/3), channel 1
 * holds {-1, 0, 2, 7} (mean 2, var 9.5, unbiased 38/3); weight {2, 0.5}, bias {0.1, -1}. */
static const double bn_x[8] = {1, 2, -1, 0, 3, 4, 2, 7};
static const double bn_w[2] = {2.0, 0.5}, bn_b[2] = {0.1, -1.0};
static const double bn_y_train[8] = {
    -2.5832708399378537, -0.794423613312618,  -1.4866640072534039, -1.3244426715022692,
    0.994423613312618,   2.783270839937854,   -1.0,                -0.1888933212443269};
/* mean, invstd per channel: 1/sqrt(1.25 + 1e-5), 1/sqrt(9.5 + 1e-5) */
static const double bn_saved_train[4] = {2.5, 2.0, 0.894423613312618, 0.32444267150226924};
/* momentum 0.1 from (0, 1): 0.1 mean, 0.9 + 0.1 unbiased var */
static const double bn_rm_after[2] = {0.25, 0.2};
static const double bn_rv_after[2] = {1.0666666666666667, 2.166666666666667};

typedef struct {
    ck_tensor *x, *y, *w, *b, *rm, *rv, *nbt, *saved;
    ck_op_io io;
} bn_hand;

static void bn_hand_make(bn_hand *h, ck_dtype dt, const double *rm, const double *rv)
{
    h->x = tu_tensor_of("x", dt, SHAPE(2, 2, 2), bn_x);
    h->y = tu_tensor_new("y", dt, SHAPE(2, 2, 2));
    h->w = tu_tensor_of("bn.weight", dt, SHAPE(2), bn_w);
    h->b = tu_tensor_of("bn.bias", dt, SHAPE(2), bn_b);
    h->rm = tu_tensor_of("bn.running_mean", dt, SHAPE(2), rm);
    h->rv = tu_tensor_of("bn.running_var", dt, SHAPE(2), rv);
    h->nbt = nbt_new(0);
    h->saved = tu_tensor_new("bn.saved", dt, SHAPE(2, 2));
    ck_op_io io = {.n_in = 1, .in = {h->x}, .out = h->y, .weight = h->w, .bias = h->b,
                   .running_mean = h->rm, .running_var = h->rv,
                   .num_batches_tracked = h->nbt, .saved = h->saved};
    h->io = io;
}

static void bn_hand_free(bn_hand *h)
{
    tu_tensor_free(h->x);
    tu_tensor_free(h->y);
    tu_tensor_free(h->w);
    tu_tensor_free(h->b);
    tu_tensor_free(h->rm);
    tu_tensor_free(h->rv);
    tu_tensor_free(h->nbt);
    tu_tensor_free(h->saved);
}

START_TEST(batchnorm_train_normalises_and_updates_running_stats)
{
    ck_dtype dt = _i ? CK_F32 : CK_F64;
    double rtol = dt == CK_F32 ? F32_ULP : 1e-15;
    bn_hand h;
    bn_hand_make(&h, dt, (double[]){0, 0}, (double[]){1, 1});
    ck_op_params op = op_of(CK_OP_BATCHNORM, false);
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    args.update_running_stats = true;
    tu_forward_ok("batchnorm train", &op, &args, &h.io);
    tu_assert_values("batchnorm y", h.y, bn_y_train, rtol, 1e-15);
    tu_assert_values("batchnorm saved", h.saved, bn_saved_train, rtol, 0.0);
    tu_assert_values("batchnorm running_mean", h.rm, bn_rm_after, rtol, 0.0);
    tu_assert_values("batchnorm running_var", h.rv, bn_rv_after, rtol, 0.0);
    ck_assert_int_eq(nbt_get(h.nbt), 1);
    /* a second update counts on from the buffer */
    tu_forward_ok("batchnorm train, again", &op, &args, &h.io);
    ck_assert_int_eq(nbt_get(h.nbt), 2);
    bn_hand_free(&h);
}
END_TEST

START_TEST(batchnorm_without_update_leaves_buffers_alone)
{
    bn_hand h;
    bn_hand_make(&h, CK_F64, (double[]){0, 0}, (double[]){1, 1});
    ck_op_params op = op_of(CK_OP_BATCHNORM, false);
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    args.update_running_stats = false;
    tu_forward_ok("batchnorm train, no update", &op, &args, &h.io);
    tu_assert_values("batchnorm y", h.y, bn_y_train, 1e-15, 1e-15);
    tu_assert_values("batchnorm running_mean", h.rm, (double[]){0, 0}, 0.0, 0.0);
    tu_assert_values("batchnorm running_var", h.rv, (double[]){1, 1}, 0.0, 0.0);
    ck_assert_int_eq(nbt_get(h.nbt), 0);
    bn_hand_free(&h);
}
END_TEST

START_TEST(batchnorm_eval_uses_running_stats_and_updates_nothing)
{
    const double want[8] = {1.5523619468971113,  3.488844542759926,   -1.4076187916343899,
                            -1.0679364652723984, 5.425327138622741,   7.361809734485556,
                            -0.3885718125484152, 1.3098398192615424};
    const double saved[4] = {0.25, 0.2, 0.9682412979314075, 0.679364652723983};
    bn_hand h;
    bn_hand_make(&h, CK_F64, bn_rm_after, bn_rv_after);
    ck_op_params op = op_of(CK_OP_BATCHNORM, true);
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    args.update_running_stats = true; /* eval ignores it, as PyTorch does */
    tu_forward_ok("batchnorm eval", &op, &args, &h.io);
    tu_assert_values("batchnorm eval y", h.y, want, 1e-15, 1e-15);
    tu_assert_values("batchnorm eval saved", h.saved, saved, 1e-15, 0.0);
    tu_assert_values("batchnorm running_mean", h.rm, bn_rm_after, 0.0, 0.0);
    tu_assert_values("batchnorm running_var", h.rv, bn_rv_after, 0.0, 0.0);
    ck_assert_int_eq(nbt_get(h.nbt), 0);

    /* eval backward treats the statistics as constants: dx = dy * w * invstd */
    ck_tensor *dy = tu_tensor_of("dy", CK_F64, SHAPE(2, 2, 2), (double[]){1, 1, 1, 1, 1, 1, 1, 1});
    ck_tensor *dx = tu_tensor_new("dx", CK_F64, SHAPE(2, 2, 2));
    ck_op_grads g = {.dout = dy, .din = {dx}};
    tu_backward_ok("batchnorm eval", &op, &args, &h.io, &g);
    double a = 2.0 * saved[2], b = 0.5 * saved[3];
    tu_assert_values("batchnorm eval dx", dx, (double[]){a, a, b, b, a, a, b, b}, 1e-15, 0.0);
    tu_tensor_free(dy);
    tu_tensor_free(dx);
    bn_hand_free(&h);
}
END_TEST

START_TEST(batchnorm_without_affine_is_plain_normalisation)
{
    bn_hand h;
    bn_hand_make(&h, CK_F64, (double[]){0, 0}, (double[]){1, 1});
    h.io.weight = h.io.bias = NULL;
    ck_op_params op = op_of(CK_OP_BATCHNORM, false);
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    tu_forward_ok("batchnorm, no affine", &op, &args, &h.io);
    double want[8];
    for (int i = 0; i < 8; i++) {
        int c = (i / 2) % 2;
        want[i] = (bn_x[i] - bn_saved_train[c]) * bn_saved_train[2 + c];
    }
    tu_assert_values("batchnorm, no affine", h.y, want, 1e-15, 1e-15);
    bn_hand_free(&h);
}
END_TEST

START_TEST(batchnorm_train_rejects_one_value_per_channel)
{
    ck_tensor *x = tu_tensor_new("x", CK_F64, SHAPE(1, 3));
    ck_tensor *y = tu_tensor_new("y", CK_F64, SHAPE(1, 3));
    ck_op_params op = op_of(CK_OP_BATCHNORM, false);
    ck_op_io io = {.n_in = 1, .in = {x}, .out = y};
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    ck_error err = {{0}};
    ck_assert_int_eq(tu_cpu->forward(tu_cpu, &op, &args, &io, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "more than 1") != NULL, "message: %s", err.msg);
    tu_tensor_free(x);
    tu_tensor_free(y);
}
END_TEST

static const struct {
    const char *desc;
    int64_t dims[5];
    int ndim;
    bool eval, affine;
    double rm, rv;
} bn_grad_rows[] = {
    {"batchnorm2d train", {3, 2, 2, 2}, 4, false, true, 0.0, 1.0},
    {"batchnorm2d eval", {3, 2, 2, 2}, 4, true, true, 0.3, 2.0},
    {"batchnorm1d train (N, C)", {5, 3}, 2, false, true, 0.0, 1.0},
    {"batchnorm3d train, no affine", {2, 2, 2, 2, 3}, 5, false, false, 0.0, 1.0},
    {"batchnorm1d eval (N, C, L), no affine", {2, 3, 4}, 3, true, false, -0.5, 0.5},
};

START_TEST(batchnorm_backward_passes_gradcheck)
{
    ck_shape x = ck_shape_make(bn_grad_rows[_i].ndim, bn_grad_rows[_i].dims);
    ck_node node = bn_node(x, bn_grad_rows[_i].eval, bn_grad_rows[_i].affine,
                           bn_grad_rows[_i].rm, bn_grad_rows[_i].rv);
    tu_gradcheck_ok(bn_grad_rows[_i].desc, &node, &x, NULL, GRADCHECK_SEED);
}
END_TEST

/* ================================ layernorm ================================ */

START_TEST(layernorm_normalises_each_sample)
{
    ck_dtype dt = _i ? CK_F32 : CK_F64;
    double rtol = dt == CK_F32 ? F32_ULP : 1e-15;
    ck_tensor *x = tu_tensor_of("x", dt, SHAPE(2, 3), (double[]){1, 2, 3, -1, 0, 5});
    ck_tensor *y = tu_tensor_new("y", dt, SHAPE(2, 3));
    ck_tensor *w = tu_tensor_of("ln.weight", dt, SHAPE(3), (double[]){1, 2, 0.5});
    ck_tensor *b = tu_tensor_of("ln.bias", dt, SHAPE(3), (double[]){0, 0.1, -0.2});
    ck_tensor *saved = tu_tensor_new("ln.saved", dt, SHAPE(2, 2));
    ck_op_params op = op_of(CK_OP_LAYERNORM, false);
    ck_op_io io = {.n_in = 1, .in = {x}, .out = y, .weight = w, .bias = b, .saved = saved};
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    tu_forward_ok("layernorm", &op, &args, &io);
    /* sample 0: mean 2, var 2/3; sample 1: mean 4/3, var 62/9; eps 1e-5 */
    tu_assert_values("layernorm y", y,
                     (double[]){-1.2247356859083902, 0.1, 0.4123678429541951, -0.8890002437594552,
                                -0.9160002785822347, 0.4985001915252864},
                     rtol, 1e-15);
    tu_assert_values("layernorm saved", saved,
                     (double[]){2.0, 1.3333333333333333, 1.2247356859083902, 0.381000104468338},
                     rtol, 0.0);

    /* without affine parameters: y = xhat */
    io.weight = io.bias = NULL;
    tu_forward_ok("layernorm, no affine", &op, &args, &io);
    tu_assert_values("layernorm, no affine", y,
                     (double[]){-1.2247356859083902, 0.0, 1.2247356859083902, -0.8890002437594552,
                                -0.5080001392911173, 1.3970003830505728},
                     rtol, 1e-15);
    tu_tensor_free(x);
    tu_tensor_free(y);
    tu_tensor_free(w);
    tu_tensor_free(b);
    tu_tensor_free(saved);
}
END_TEST

START_TEST(layernorm_backward_passes_gradcheck)
{
    ck_shape x = SHAPE(2, 3, 4);
    ck_node node = ln_node(x, true);
    tu_gradcheck_ok("layernorm (2, 3, 4)", &node, &x, NULL, GRADCHECK_SEED);
    ck_shape x2 = SHAPE(3, 5);
    ck_node plain = ln_node(x2, false);
    tu_gradcheck_ok("layernorm (3, 5), no affine", &plain, &x2, NULL, GRADCHECK_SEED);
}
END_TEST

/* ============================ across ops and dtypes ============================ */

static const struct {
    const char *desc;
    ck_op_kind kind;
    bool eval;
} norm_rows[] = {
    {"batchnorm train", CK_OP_BATCHNORM, false},
    {"batchnorm eval", CK_OP_BATCHNORM, true},
    {"layernorm", CK_OP_LAYERNORM, false},
};

/* x (3, 2, 4) with random weight, bias, running stats and dout in one dtype */
typedef struct {
    ck_tensor *x, *y, *w, *b, *rm, *rv, *nbt, *saved, *dy, *dx, *dw, *db;
    ck_op_params op;
    ck_op_io io;
    ck_op_grads g;
} norm_inst;

static void norm_inst_make(norm_inst *s, int row, ck_dtype dt)
{
    memset(s, 0, sizeof *s);
    bool bn = norm_rows[row].kind == CK_OP_BATCHNORM;
    ck_shape xs = SHAPE(3, 2, 4), ps = bn ? SHAPE(2) : SHAPE(2, 4);
    s->op = op_of(norm_rows[row].kind, norm_rows[row].eval);
    s->x = tu_tensor_rand("x", dt, xs, RAND_SEED, 0, true);
    s->y = tu_tensor_new("y", dt, xs);
    s->w = tu_tensor_rand("weight", dt, ps, RAND_SEED, 1, false);
    s->b = tu_tensor_rand("bias", dt, ps, RAND_SEED, 2, false);
    s->saved = tu_tensor_new("saved", dt, SHAPE(2, bn ? 2 : 3));
    s->dy = tu_tensor_rand("dy", dt, xs, RAND_SEED, 3, true);
    s->dx = tu_tensor_new("dx", dt, xs);
    s->dw = tu_tensor_new("dweight", dt, ps);
    s->db = tu_tensor_new("dbias", dt, ps);
    ck_op_io io = {.n_in = 1, .in = {s->x}, .out = s->y, .weight = s->w, .bias = s->b,
                   .saved = s->saved};
    if (bn) {
        s->rm = tu_tensor_rand("running_mean", dt, ps, RAND_SEED, 4, false);
        s->rv = tu_tensor_of("running_var", dt, ps, (double[]){0.75, 1.5});
        s->nbt = nbt_new(0);
        io.running_mean = s->rm;
        io.running_var = s->rv;
        io.num_batches_tracked = s->nbt;
    }
    s->io = io;
    ck_op_grads g = {.dout = s->dy, .din = {s->dx}, .dweight = s->dw, .dbias = s->db};
    s->g = g;
}

static void norm_inst_free(norm_inst *s)
{
    ck_tensor *all[] = {s->x, s->y, s->w, s->b, s->rm, s->rv, s->nbt, s->saved, s->dy, s->dx,
                        s->dw, s->db};
    for (int i = 0; i < COUNT(all); i++)
        tu_tensor_free(all[i]);
}

START_TEST(fp32_forward_is_fp64_forward_rounded)
{
    /* Same fp32-representable inputs in both dtypes; statistics are accumulated in double
     * either way, so fp32 outputs, saved statistics and running buffers are within one
     * fp32 ulp of fp64's. */
    norm_inst a, b;
    norm_inst_make(&a, _i, CK_F32);
    norm_inst_make(&b, _i, CK_F64);
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    args.update_running_stats = true;
    tu_forward_ok(norm_rows[_i].desc, &a.op, &args, &a.io);
    tu_forward_ok(norm_rows[_i].desc, &b.op, &args, &b.io);
    const ck_tensor *pairs[4][2] = {{a.y, b.y}, {a.saved, b.saved}, {a.rm, b.rm}, {a.rv, b.rv}};
    for (int p = 0; p < 4; p++) {
        if (!pairs[p][0])
            continue;
        for (int64_t i = 0; i < ck_shape_numel(&pairs[p][0]->shape); i++) {
            double v32 = tu_tget(pairs[p][0], i), v64 = tu_tget(pairs[p][1], i);
            ck_assert_msg(fabs(v32 - v64) <= F32_ULP * fabs(v64) + 1e-38,
                          "%s: %s[%lld]: fp32 %.9g, fp64 %.17g", norm_rows[_i].desc,
                          pairs[p][0]->name, (long long)i, v32, v64);
        }
    }
    norm_inst_free(&a);
    norm_inst_free(&b);
}
END_TEST

START_TEST(backward_accumulates_into_gradients)
{
    norm_inst s;
    norm_inst_make(&s, _i, CK_F64);
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    tu_forward_ok(norm_rows[_i].desc, &s.op, &args, &s.io);
    tu_backward_ok(norm_rows[_i].desc, &s.op, &args, &s.io, &s.g);
    ck_tensor *grads[3] = {s.dx, s.dw, s.db};
    double *first[3];
    for (int k = 0; k < 3; k++) {
        first[k] = malloc(ck_tensor_bytes(grads[k]));
        ck_assert_ptr_nonnull(first[k]);
        memcpy(first[k], grads[k]->data, ck_tensor_bytes(grads[k]));
    }
    tu_backward_ok(norm_rows[_i].desc, &s.op, &args, &s.io, &s.g);
    for (int k = 0; k < 3; k++) {
        for (int64_t i = 0; i < ck_shape_numel(&grads[k]->shape); i++)
            ck_assert_msg(tu_tget(grads[k], i) == 2.0 * first[k][i],
                          "%s: %s[%lld] %.17g after two passes, %.17g after one",
                          norm_rows[_i].desc, grads[k]->name, (long long)i, tu_tget(grads[k], i),
                          first[k][i]);
        free(first[k]);
    }
    norm_inst_free(&s);
}
END_TEST

START_TEST(non_float_dtypes_are_rejected_by_name)
{
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    ck_error err = {{0}};
    /* fp16/bf16 and per-tensor dtypes are accepted (test_ops_lowp.c); integers are not */
    ck_tensor *h = tu_tensor_new("h", CK_I32, SHAPE(2, 2));
    ck_tensor *hy = tu_tensor_new("hy", CK_I32, SHAPE(2, 2));
    ck_tensor *x = tu_tensor_new("x", CK_F32, SHAPE(2, 2));
    ck_tensor *y = tu_tensor_new("y", CK_F32, SHAPE(2, 2));
    ck_tensor *w64 = tu_tensor_new("w_i64", CK_I64, SHAPE(2));
    ck_op_params bn = op_of(CK_OP_BATCHNORM, false), ln = op_of(CK_OP_LAYERNORM, false);
    ck_op_io io = {.n_in = 1, .in = {h}, .out = hy};
    ck_assert_int_eq(ref_norm_forward(&bn, &args, &io, &err), CK_ERR_UNSUPPORTED);
    ck_assert_int_eq(ref_norm_forward(&ln, &args, &io, &err), CK_ERR_UNSUPPORTED);
    ck_op_io mixed = {.n_in = 1, .in = {x}, .out = y, .weight = w64};
    ck_assert_int_eq(tu_cpu->forward(tu_cpu, &bn, &args, &mixed, &err), CK_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "w_i64") != NULL, "message names no tensor: %s", err.msg);
    ck_assert_int_eq(tu_cpu->forward(tu_cpu, &ln, &args, &mixed, &err), CK_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "w_i64") != NULL, "message names no tensor: %s", err.msg);
    tu_tensor_free(h);
    tu_tensor_free(hy);
    tu_tensor_free(x);
    tu_tensor_free(y);
    tu_tensor_free(w64);
}
END_TEST

Suite *suite_ops_norm(void)
{
    Suite *s = suite_create("ops_norm");

    TCase *tc = tcase_create("batchnorm");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, batchnorm_train_normalises_and_updates_running_stats, 0, 2);
    tcase_add_test(tc, batchnorm_without_update_leaves_buffers_alone);
    tcase_add_test(tc, batchnorm_eval_uses_running_stats_and_updates_nothing);
    tcase_add_test(tc, batchnorm_without_affine_is_plain_normalisation);
    tcase_add_test(tc, batchnorm_train_rejects_one_value_per_channel);
    tcase_add_loop_test(tc, batchnorm_backward_passes_gradcheck, 0, COUNT(bn_grad_rows));
    suite_add_tcase(s, tc);

    tc = tcase_create("layernorm");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, layernorm_normalises_each_sample, 0, 2);
    tcase_add_test(tc, layernorm_backward_passes_gradcheck);
    suite_add_tcase(s, tc);

    tc = tcase_create("dtypes");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, fp32_forward_is_fp64_forward_rounded, 0, COUNT(norm_rows));
    tcase_add_loop_test(tc, backward_accumulates_into_gradients, 0, COUNT(norm_rows));
    tcase_add_test(tc, non_float_dtypes_are_rejected_by_name);
    suite_add_tcase(s, tc);
    return s;
}
