/*
 * Graph tests: shape inference for every op (incl. TF-style same padding with stride and
 * dilation), parameter/buffer/saved specs and their init bounds, consumers, loss targets,
 * and that every shipped case in cases/ builds (root from CK_ROOT, default ".").
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/model/case.h"
#include "harness/model/graph.h"

#define S2(a, b) {2, {a, b}}
#define S3(a, b, c) {3, {a, b, c}}
#define S4(a, b, c, d) {4, {a, b, c, d}}
#define S5(a, b, c, d, e) {5, {a, b, c, d, e}}

typedef struct {
    const char *desc;
    ck_op_kind kind;
    int nsp;
    int kernel, stride, dilation; /* 0 keeps the default; the same in every spatial dim */
    ck_pad_mode pad_mode;
    int pad, scale;
    int64_t width; /* units (linear) or filters (conv) */
    bool eval;
    int n_in;
    ck_shape in[2];
    ck_shape want;         /* ndim 0: an error is expected */
    const char *error;     /* fragment of that error */
    int pad_lo, pad_hi;    /* conv: expected padding of spatial dim 0 */
} infer_row;

static const infer_row infer_rows[] = {
    {"conv2d k3 same", CK_OP_CONV, 2, 3, 0, 0, CK_PAD_SAME, 0, 0, 8, false, 1,
     {S4(2, 3, 16, 16)}, S4(2, 8, 16, 16), NULL, 1, 1},
    {"conv1d k3 same stride 2, odd input", CK_OP_CONV, 1, 3, 2, 0, CK_PAD_SAME, 0, 0, 1, false,
     1, {S3(1, 1, 7)}, S3(1, 1, 4), NULL, 1, 1},
    {"conv1d k3 same stride 2, even input: extra pad at the end", CK_OP_CONV, 1, 3, 2, 0,
     CK_PAD_SAME, 0, 0, 1, false, 1, {S3(1, 1, 8)}, S3(1, 1, 4), NULL, 0, 1},
    {"conv1d k3 same dilation 2", CK_OP_CONV, 1, 3, 0, 2, CK_PAD_SAME, 0, 0, 2, false, 1,
     {S3(1, 1, 16)}, S3(1, 2, 16), NULL, 2, 2},
    {"conv1d k4 same: odd total", CK_OP_CONV, 1, 4, 0, 0, CK_PAD_SAME, 0, 0, 1, false, 1,
     {S3(1, 1, 10)}, S3(1, 1, 10), NULL, 1, 2},
    {"conv1d k1 same stride 2 needs no padding", CK_OP_CONV, 1, 1, 2, 0, CK_PAD_SAME, 0, 0, 1,
     false, 1, {S3(1, 1, 8)}, S3(1, 1, 4), NULL, 0, 0},
    {"conv1d k3 same stride 3 dilation 2", CK_OP_CONV, 1, 3, 3, 2, CK_PAD_SAME, 0, 0, 1, false,
     1, {S3(1, 1, 10)}, S3(1, 1, 4), NULL, 2, 2},
    {"conv1d k5 stride 2 explicit 2", CK_OP_CONV, 1, 5, 2, 0, CK_PAD_EXPLICIT, 2, 0, 8, false, 1,
     {S3(4, 2, 32)}, S3(4, 8, 16), NULL, 2, 2},
    {"conv3d k3 valid", CK_OP_CONV, 3, 3, 0, 0, CK_PAD_VALID, 0, 0, 4, false, 1,
     {S5(2, 1, 5, 6, 7)}, S5(2, 4, 3, 4, 5), NULL, 0, 0},
    {"conv1d k3 dilation 2 valid, exact fit", CK_OP_CONV, 1, 3, 0, 2, CK_PAD_VALID, 0, 0, 1,
     false, 1, {S3(1, 1, 5)}, S3(1, 1, 1), NULL, 0, 0},
    {"conv1d k3 dilation 2 valid, too small", CK_OP_CONV, 1, 3, 0, 2, CK_PAD_VALID, 0, 0, 1,
     false, 1, {S3(1, 1, 4)}, {0, {0}}, "kernel 3 (dilated 5) is larger than the input 4", 0, 0},
    {"conv1d k5 valid on 3", CK_OP_CONV, 1, 5, 0, 0, CK_PAD_VALID, 0, 0, 1, false, 1,
     {S3(1, 1, 3)}, {0, {0}}, "kernel 5 (dilated 5) is larger than the input 3 in spatial dim 0",
     0, 0},
    {"conv1d k7 explicit 1 on 3", CK_OP_CONV, 1, 7, 0, 0, CK_PAD_EXPLICIT, 1, 0, 1, false, 1,
     {S3(1, 1, 3)}, {0, {0}}, "larger than the padded input 5", 0, 0},
    {"conv2d on a rank-3 input", CK_OP_CONV, 2, 3, 0, 0, CK_PAD_VALID, 0, 0, 1, false, 1,
     {S3(1, 1, 8)}, {0, {0}}, "conv2d needs a rank-4 input (N, C, H, W), got [1, 1, 8]", 0, 0},
    {"maxpool2d 2", CK_OP_MAXPOOL, 2, 2, 2, 0, CK_PAD_VALID, 0, 0, 0, false, 1,
     {S4(1, 2, 16, 15)}, S4(1, 2, 8, 7), NULL, 0, 0},
    {"avgpool1d 3 stride 2", CK_OP_AVGPOOL, 1, 3, 2, 0, CK_PAD_VALID, 0, 0, 0, false, 1,
     {S3(1, 2, 7)}, S3(1, 2, 3), NULL, 0, 0},
    {"maxpool1d window larger than input", CK_OP_MAXPOOL, 1, 3, 3, 0, CK_PAD_VALID, 0, 0, 0,
     false, 1, {S3(1, 2, 2)}, {0, {0}}, "pool window 3 is larger than the input 2", 0, 0},
    {"avgpool3d on rank 4", CK_OP_AVGPOOL, 3, 2, 2, 0, CK_PAD_VALID, 0, 0, 0, false, 1,
     {S4(1, 2, 4, 4)}, {0, {0}}, "avgpool3d needs a rank-5 input", 0, 0},
    {"upsample3d 2", CK_OP_UPSAMPLE, 3, 0, 0, 0, CK_PAD_VALID, 0, 2, 0, false, 1,
     {S5(1, 1, 2, 3, 4)}, S5(1, 1, 4, 6, 8), NULL, 0, 0},
    {"upsample1d overflow", CK_OP_UPSAMPLE, 1, 0, 0, 0, CK_PAD_VALID, 0, 1 << 20, 0, false, 1,
     {S3(1, 1, INT64_C(1) << 50)}, {0, {0}}, "overflows", 0, 0},
    {"linear over the last dim", CK_OP_LINEAR, 0, 0, 0, 0, CK_PAD_VALID, 0, 0, 5, false, 1,
     {S3(4, 3, 7)}, S3(4, 3, 5), NULL, 0, 0},
    {"linear on rank 1", CK_OP_LINEAR, 0, 0, 0, 0, CK_PAD_VALID, 0, 0, 5, false, 1,
     {{1, {7}}}, {0, {0}}, "linear needs an input of rank >= 2", 0, 0},
    {"flatten", CK_OP_FLATTEN, 0, 0, 0, 0, CK_PAD_VALID, 0, 0, 0, false, 1, {S4(2, 3, 4, 5)},
     S2(2, 60), NULL, 0, 0},
    {"add of equal shapes", CK_OP_ADD, 0, 0, 0, 0, CK_PAD_VALID, 0, 0, 0, false, 2,
     {S3(2, 3, 4), S3(2, 3, 4)}, S3(2, 3, 4), NULL, 0, 0},
    {"add of different shapes", CK_OP_ADD, 0, 0, 0, 0, CK_PAD_VALID, 0, 0, 0, false, 2,
     {S3(2, 3, 4), S3(2, 3, 5)}, {0, {0}},
     "inputs input 0 [2, 3, 4] and input 1 [2, 3, 5] differ in shape", 0, 0},
    {"add of one input", CK_OP_ADD, 0, 0, 0, 0, CK_PAD_VALID, 0, 0, 0, false, 1,
     {S3(2, 3, 4)}, {0, {0}}, "add with one input needs a constant operand", 0, 0},
    {"relu of two inputs", CK_OP_RELU, 0, 0, 0, 0, CK_PAD_VALID, 0, 0, 0, false, 2,
     {S3(2, 3, 4), S3(2, 3, 4)}, {0, {0}}, "relu takes exactly one input, got 2", 0, 0},
    {"concat along channels", CK_OP_CONCAT, 0, 0, 0, 0, CK_PAD_VALID, 0, 0, 0, false, 2,
     {S3(2, 3, 4), S3(2, 5, 4)}, S3(2, 8, 4), NULL, 0, 0},
    {"concat differing in dim 2", CK_OP_CONCAT, 0, 0, 0, 0, CK_PAD_VALID, 0, 0, 0, false, 2,
     {S3(2, 3, 4), S3(2, 5, 5)}, {0, {0}}, "differ outside dim 1", 0, 0},
    {"concat of different ranks", CK_OP_CONCAT, 0, 0, 0, 0, CK_PAD_VALID, 0, 0, 0, false, 2,
     {S3(2, 3, 4), S2(2, 3)}, {0, {0}}, "differ outside dim 1", 0, 0},
    {"batchnorm with one value per channel", CK_OP_BATCHNORM, 0, 0, 0, 0, CK_PAD_VALID, 0, 0, 0,
     false, 1, {S2(1, 3)}, {0, {0}}, "more than 1 value per channel", 0, 0},
    {"batchnorm in eval with one value per channel", CK_OP_BATCHNORM, 0, 0, 0, 0, CK_PAD_VALID,
     0, 0, 0, true, 1, {S2(1, 3)}, S2(1, 3), NULL, 0, 0},
    {"batchnorm of a single sample with spatial dims", CK_OP_BATCHNORM, 0, 0, 0, 0,
     CK_PAD_VALID, 0, 0, 0, false, 1, {S3(1, 3, 2)}, S3(1, 3, 2), NULL, 0, 0},
    {"layernorm on rank 1", CK_OP_LAYERNORM, 0, 0, 0, 0, CK_PAD_VALID, 0, 0, 0, false, 1,
     {{1, {7}}}, {0, {0}}, "layernorm needs an input of rank >= 2", 0, 0},
};

#define N_INFER ((int)(sizeof infer_rows / sizeof infer_rows[0]))

static ck_op_params row_params(const infer_row *row)
{
    ck_op_params op;
    ck_op_params_default(&op, row->kind, row->nsp);
    for (int d = 0; d < row->nsp; d++) {
        if (row->kernel)
            op.kernel[d] = row->kernel;
        if (row->stride)
            op.stride[d] = row->stride;
        if (row->dilation)
            op.dilation[d] = row->dilation;
        if (row->scale)
            op.scale[d] = row->scale;
        op.pad[d] = row->pad;
    }
    op.pad_mode = row->pad_mode;
    op.units = row->width;
    op.filters = row->width;
    op.eval = row->eval;
    return op;
}

START_TEST(op_infer_matches_the_shape_rules)
{
    const infer_row *row = &infer_rows[_i];
    ck_op_params op = row_params(row);
    ck_shape out;
    ck_error err = {{0}};
    char got[128], want[128];
    memset(&out, 0, sizeof out);
    ck_status st = ck_op_infer(&op, row->n_in, row->in, &out, &err);
    if (row->want.ndim == 0) {
        ck_assert_msg(st == CK_ERR_INPUT, "%s: expected an error, got %s", row->desc,
                      ck_shape_str(&out, got, sizeof got));
        ck_assert_msg(strstr(err.msg, row->error) != NULL, "%s: message lacks \"%s\": %s",
                      row->desc, row->error, err.msg);
        return;
    }
    ck_assert_msg(st == CK_OK, "%s: %s", row->desc, err.msg);
    ck_assert_msg(ck_shape_equal(&out, &row->want), "%s: got %s, want %s", row->desc,
                  ck_shape_str(&out, got, sizeof got), ck_shape_str(&row->want, want, sizeof want));
    if (row->kind == CK_OP_CONV) {
        ck_assert_msg(op.pad_lo[0] == row->pad_lo && op.pad_hi[0] == row->pad_hi,
                      "%s: padding %d/%d, want %d/%d", row->desc, op.pad_lo[0], op.pad_hi[0],
                      row->pad_lo, row->pad_hi);
        for (int d = 1; d < row->nsp; d++)
            ck_assert_msg(op.pad_lo[d] == op.pad_lo[0] && op.pad_hi[d] == op.pad_hi[0],
                          "%s: dim %d padded differently", row->desc, d);
    }
}
END_TEST

START_TEST(pointwise_ops_keep_the_shape)
{
    static const ck_op_kind kinds[] = {CK_OP_RELU, CK_OP_LEAKY_RELU, CK_OP_GELU,
                                       CK_OP_TANH, CK_OP_SIGMOID,    CK_OP_DROPOUT,
                                       CK_OP_GAUSSIAN_NOISE, CK_OP_LAYERNORM, CK_OP_BATCHNORM};
    ck_shape in = S4(2, 3, 5, 7), out;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        ck_op_params op;
        ck_error err = {{0}};
        ck_op_params_default(&op, kinds[i], 0);
        ck_assert_msg(ck_op_infer(&op, 1, &in, &out, &err) == CK_OK, "%s: %s",
                      ck_op_kind_name(kinds[i]), err.msg);
        ck_assert_msg(ck_shape_equal(&in, &out), "%s changed the shape", ck_op_kind_name(kinds[i]));
    }
}
END_TEST

/* Different windows per spatial dim resolve per dim. */
START_TEST(conv_resolves_padding_per_dim)
{
    ck_op_params op;
    ck_op_params_default(&op, CK_OP_CONV, 2);
    op.filters = 3;
    op.kernel[0] = 3;
    op.kernel[1] = 4;
    op.stride[1] = 2;
    op.pad_mode = CK_PAD_SAME;
    ck_shape in = S4(1, 2, 9, 9), out, want = S4(1, 3, 9, 5);
    ck_error err = {{0}};
    ck_assert_msg(ck_op_infer(&op, 1, &in, &out, &err) == CK_OK, "%s", err.msg);
    ck_assert(ck_shape_equal(&out, &want));
    ck_assert_int_eq(op.pad_lo[0], 1);
    ck_assert_int_eq(op.pad_hi[0], 1);
    /* out 5: total = 4*2 + 4 - 9 = 3 -> 1 before, 2 after */
    ck_assert_int_eq(op.pad_lo[1], 1);
    ck_assert_int_eq(op.pad_hi[1], 2);
}
END_TEST

/* ---- parameter, buffer and saved specs ------------------------------------------------ */

static void assert_spec(const ck_param_spec *p, const char *suffix, ck_shape shape,
                        ck_dtype dtype, ck_init_kind init, double a)
{
    char got[128], want[128];
    ck_assert_str_eq(p->suffix, suffix);
    ck_assert_msg(ck_shape_equal(&p->shape, &shape), "%s: shape %s, want %s", suffix,
                  ck_shape_str(&p->shape, got, sizeof got), ck_shape_str(&shape, want, sizeof want));
    ck_assert_int_eq(p->dtype, dtype);
    ck_assert_int_eq(p->init, init);
    ck_assert_msg(fabs(p->a - a) <= 1e-15 * fabs(a), "%s: a = %.17g, want %.17g", suffix, p->a, a);
}

START_TEST(linear_params_use_pytorch_default_bounds)
{
    ck_node node;
    memset(&node, 0, sizeof node);
    ck_op_params_default(&node.op, CK_OP_LINEAR, 0);
    node.op.units = 5;
    ck_shape in = S3(4, 3, 7);
    ck_op_state_specs(&node, &in);
    ck_assert_int_eq(node.n_params, 2);
    assert_spec(&node.params[0], "weight", (ck_shape)S2(5, 7), CK_F32, CK_INIT_UNIFORM,
                1.0 / sqrt(7.0));
    assert_spec(&node.params[1], "bias", (ck_shape){1, {5}}, CK_F32, CK_INIT_UNIFORM,
                1.0 / sqrt(7.0));
    ck_assert_int_eq(node.n_buffers, 0);
    ck_assert(!node.has_saved);

    node.op.bias = false;
    ck_op_state_specs(&node, &in);
    ck_assert_int_eq(node.n_params, 1);
}
END_TEST

START_TEST(conv_params_span_channels_and_window)
{
    ck_node node;
    memset(&node, 0, sizeof node);
    ck_op_params_default(&node.op, CK_OP_CONV, 3);
    node.op.filters = 4;
    for (int d = 0; d < 3; d++)
        node.op.kernel[d] = 3;
    ck_shape in = S5(2, 2, 8, 8, 8);
    ck_op_state_specs(&node, &in);
    ck_assert_int_eq(node.n_params, 2);
    assert_spec(&node.params[0], "weight", (ck_shape)S5(4, 2, 3, 3, 3), CK_F32, CK_INIT_UNIFORM,
                1.0 / sqrt(54.0));
    assert_spec(&node.params[1], "bias", (ck_shape){1, {4}}, CK_F32, CK_INIT_UNIFORM,
                1.0 / sqrt(54.0));

    ck_op_params_default(&node.op, CK_OP_CONV, 2);
    node.op.filters = 6;
    node.op.kernel[0] = 3;
    node.op.kernel[1] = 5;
    node.op.bias = false;
    ck_shape in2 = S4(1, 3, 9, 9);
    ck_op_state_specs(&node, &in2);
    ck_assert_int_eq(node.n_params, 1);
    assert_spec(&node.params[0], "weight", (ck_shape)S4(6, 3, 3, 5), CK_F32, CK_INIT_UNIFORM,
                1.0 / sqrt(45.0));
}
END_TEST

START_TEST(batchnorm_state_is_per_channel)
{
    ck_node node;
    memset(&node, 0, sizeof node);
    ck_op_params_default(&node.op, CK_OP_BATCHNORM, 0);
    ck_shape in = S4(2, 5, 3, 3), c = {1, {5}}, scalar = {0, {0}};
    ck_op_state_specs(&node, &in);
    ck_assert_int_eq(node.n_params, 2);
    assert_spec(&node.params[0], "weight", c, CK_F32, CK_INIT_CONST, 1.0);
    assert_spec(&node.params[1], "bias", c, CK_F32, CK_INIT_CONST, 0.0);
    ck_assert_int_eq(node.n_buffers, 3);
    assert_spec(&node.buffers[0], "running_mean", c, CK_F32, CK_INIT_CONST, 0.0);
    assert_spec(&node.buffers[1], "running_var", c, CK_F32, CK_INIT_CONST, 1.0);
    assert_spec(&node.buffers[2], "num_batches_tracked", scalar, CK_I64, CK_INIT_CONST, 0.0);
    ck_assert(node.has_saved);
    ck_shape saved = S2(2, 5);
    ck_assert(ck_shape_equal(&node.saved_shape, &saved));
}
END_TEST

START_TEST(layernorm_state_spans_non_batch_dims)
{
    ck_node node;
    memset(&node, 0, sizeof node);
    ck_op_params_default(&node.op, CK_OP_LAYERNORM, 0);
    ck_shape in = S4(2, 3, 4, 5), rest = S3(3, 4, 5);
    ck_op_state_specs(&node, &in);
    ck_assert_int_eq(node.n_params, 2);
    assert_spec(&node.params[0], "weight", rest, CK_F32, CK_INIT_CONST, 1.0);
    assert_spec(&node.params[1], "bias", rest, CK_F32, CK_INIT_CONST, 0.0);
    ck_assert_int_eq(node.n_buffers, 0);
    ck_assert(node.has_saved);
    ck_shape saved = S2(2, 2);
    ck_assert(ck_shape_equal(&node.saved_shape, &saved));
}
END_TEST

START_TEST(stateless_ops_have_no_state)
{
    static const ck_op_kind kinds[] = {CK_OP_RELU,    CK_OP_LEAKY_RELU, CK_OP_GELU,
                                       CK_OP_TANH,    CK_OP_SIGMOID,    CK_OP_DROPOUT,
                                       CK_OP_GAUSSIAN_NOISE, CK_OP_MAXPOOL, CK_OP_AVGPOOL,
                                       CK_OP_UPSAMPLE, CK_OP_ADD,       CK_OP_CONCAT,
                                       CK_OP_FLATTEN};
    ck_shape in = S4(2, 3, 4, 4);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        ck_node node;
        memset(&node, 0xff, sizeof node); /* stale values must be overwritten */
        ck_op_params_default(&node.op, kinds[i], 2);
        ck_op_state_specs(&node, &in);
        ck_assert_msg(node.n_params == 0 && node.n_buffers == 0 && !node.has_saved,
                      "%s has state", ck_op_kind_name(kinds[i]));
    }
}
END_TEST

/* ---- whole graphs ------------------------------------------------------------------------ */

static const char unet_text[] =
    "{\"name\": \"unet3d_bn\", \"seed\": 1234,"
    " \"input\": {\"shape\": [2, 1, 16, 16, 16]},"
    " \"layers\": ["
    "  {\"name\": \"enc1\", \"op\": \"conv3d\", \"filters\": 4, \"kernel\": 3, \"padding\": \"same\", \"bias\": false},"
    "  {\"name\": \"enc1_relu\", \"op\": \"relu\"},"
    "  {\"name\": \"enc1_bn\", \"op\": \"batchnorm\"},"
    "  {\"name\": \"down\", \"op\": \"maxpool3d\", \"pool\": 2},"
    "  {\"name\": \"mid\", \"op\": \"conv3d\", \"filters\": 4, \"kernel\": 3, \"padding\": \"same\"},"
    "  {\"name\": \"up\", \"op\": \"upsample3d\", \"scale\": 2},"
    "  {\"name\": \"skip\", \"op\": \"add\", \"inputs\": [\"up\", \"enc1_bn\"]},"
    "  {\"name\": \"drop\", \"op\": \"dropout\", \"rate\": 0.3},"
    "  {\"name\": \"head\", \"op\": \"conv3d\", \"filters\": 1, \"kernel\": 1}],"
    " \"loss\": {\"op\": \"mse\"}}";

static void build_text(const char *text, ck_case *c, ck_graph *g)
{
    ck_error err = {{0}};
    ck_assert_msg(ck_case_parse(text, strlen(text), "t/graph.json", c, &err) == CK_OK, "%s",
                  err.msg);
    ck_assert_msg(ck_graph_build(c, g, &err) == CK_OK, "%s", err.msg);
}

START_TEST(unet_graph_has_shapes_consumers_and_targets)
{
    ck_case c;
    ck_graph g;
    build_text(unet_text, &c, &g);
    static const ck_shape want[9] = {
        S5(2, 4, 16, 16, 16), S5(2, 4, 16, 16, 16), S5(2, 4, 16, 16, 16),
        S5(2, 4, 8, 8, 8),    S5(2, 4, 8, 8, 8),    S5(2, 4, 16, 16, 16),
        S5(2, 4, 16, 16, 16), S5(2, 4, 16, 16, 16), S5(2, 1, 16, 16, 16)};
    static const int consumers[9] = {1, 1, 2, 1, 1, 1, 1, 1, 1};
    static const int last[9] = {1, 2, 6, 4, 5, 6, 7, 8, 9};
    ck_assert_int_eq(g.n, 9);
    ck_assert_ptr_eq(g.cs, &c);
    for (int i = 0; i < 9; i++) {
        char got[128];
        ck_assert_ptr_eq(g.nodes[i].spec, &c.layers[i]);
        ck_assert_msg(ck_shape_equal(&g.nodes[i].out_shape, &want[i]), "%s: %s",
                      c.layers[i].name, ck_shape_str(&g.nodes[i].out_shape, got, sizeof got));
        ck_assert_msg(g.nodes[i].n_consumers == consumers[i], "%s: %d consumers",
                      c.layers[i].name, g.nodes[i].n_consumers);
        ck_assert_msg(g.nodes[i].last_consumer == last[i], "%s: last consumer %d",
                      c.layers[i].name, g.nodes[i].last_consumer);
    }
    /* padding resolved in the graph, not in the case */
    ck_assert_int_eq(g.nodes[0].op.pad_lo[2], 1);
    ck_assert_int_eq(g.nodes[0].op.pad_hi[2], 1);
    ck_assert_int_eq(c.layers[0].op.pad_lo[0], 0);
    ck_assert_int_eq(g.nodes[6].n_in, 2);
    ck_assert_int_eq(g.nodes[6].in[1], 2);
    ck_assert_int_eq(g.nodes[0].in[0], -1);
    ck_assert_int_eq(g.nodes[0].n_params, 1); /* bias: false */
    ck_assert_int_eq(g.nodes[4].n_params, 2);
    ck_assert_int_eq(g.nodes[2].n_buffers, 3);
    ck_shape input = S5(2, 1, 16, 16, 16);
    ck_assert(ck_shape_equal(&g.input_shape, &input));
    ck_assert(ck_shape_equal(&g.output_shape, &want[8]));
    ck_assert(ck_shape_equal(&g.target_shape, &want[8]));
    ck_graph_free(&g);
    ck_assert_ptr_null(g.nodes);
    ck_case_free(&c);
}
END_TEST

START_TEST(loss_targets_follow_the_loss)
{
    static const struct {
        const char *desc, *text;
        ck_shape target;
    } rows[] = {
        {"cross_entropy on (N, C)",
         "{\"name\": \"t\", \"input\": {\"shape\": [8, 10]}, \"layers\": [{\"name\": \"a\", "
         "\"op\": \"relu\"}], \"loss\": {\"op\": \"cross_entropy\"}}",
         {1, {8}}},
        {"cross_entropy on (N, C, H, W)",
         "{\"name\": \"t\", \"input\": {\"shape\": [2, 5, 4, 3]}, \"layers\": [{\"name\": \"a\", "
         "\"op\": \"relu\"}], \"loss\": {\"op\": \"cross_entropy\"}}",
         S3(2, 4, 3)},
        {"mse", "{\"name\": \"t\", \"input\": {\"shape\": [2, 5]}, \"layers\": [{\"name\": \"a\", "
                "\"op\": \"relu\"}], \"loss\": {\"op\": \"mse\"}}",
         S2(2, 5)},
        {"sum", "{\"name\": \"t\", \"input\": {\"shape\": [2, 5]}, \"layers\": [{\"name\": \"a\", "
                "\"op\": \"relu\"}], \"loss\": {\"op\": \"sum\"}}",
         {0, {0}}},
        {"mean (default)", "{\"name\": \"t\", \"input\": {\"shape\": [2, 5]}, \"layers\": "
                           "[{\"name\": \"a\", \"op\": \"relu\"}]}",
         {0, {0}}},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ck_case c;
        ck_graph g;
        char got[128];
        build_text(rows[i].text, &c, &g);
        ck_assert_msg(ck_shape_equal(&g.target_shape, &rows[i].target), "%s: target %s",
                      rows[i].desc, ck_shape_str(&g.target_shape, got, sizeof got));
        ck_assert_int_eq(g.nodes[0].last_consumer, 1);
        ck_graph_free(&g);
        ck_case_free(&c);
    }
}
END_TEST

START_TEST(an_input_read_twice_counts_twice)
{
    ck_case c;
    ck_graph g;
    build_text("{\"name\": \"t\", \"input\": {\"shape\": [2, 5]}, \"layers\": ["
               "{\"name\": \"a\", \"op\": \"tanh\"},"
               "{\"name\": \"s\", \"op\": \"add\", \"inputs\": [\"a\", \"a\", \"input\"]}]}",
               &c, &g);
    ck_assert_int_eq(g.nodes[0].n_consumers, 2);
    ck_assert_int_eq(g.nodes[0].last_consumer, 1);
    ck_assert_int_eq(g.nodes[1].n_consumers, 1);
    ck_assert_int_eq(g.nodes[1].last_consumer, 2);
    ck_graph_free(&g);
    ck_case_free(&c);
}
END_TEST

/* ---- the shipped cases ------------------------------------------------------------------- */

static const char *case_root(void)
{
    const char *root = getenv("CK_ROOT");
    return root && root[0] ? root : ".";
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

START_TEST(every_shipped_case_builds)
{
    static const char *const required[] = {
        "mlp_dropout.json", "cnn_bn.json", "unet3d_bn.json", "resnet_concat.json",
        "conv1d_seq.json", "canary_dropout_stateful.json", "canary_bn_update.json",
        "canary_no_saving.json"};
    bool found[sizeof required / sizeof required[0]] = {false};
    char dir_path[1024];
    snprintf(dir_path, sizeof dir_path, "%s/cases", case_root());
    DIR *dir = opendir(dir_path);
    ck_assert_msg(dir != NULL, "cannot open %s (set CK_ROOT to the repository root)", dir_path);
    int built = 0;
    for (struct dirent *e = readdir(dir); e; e = readdir(dir)) {
        if (!has_suffix(e->d_name, ".json"))
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
        ck_case c;
        ck_graph g;
        ck_error err = {{0}};
        ck_assert_msg(ck_case_load(path, &c, &err) == CK_OK, "%s", err.msg);
        ck_assert_msg(ck_graph_build(&c, &g, &err) == CK_OK, "%s", err.msg);
        ck_assert_msg(c.description && c.description[0], "%s: no description", path);
        /* A canary must expect to be caught, in at least one of its precisions. */
        if (strncmp(e->d_name, "canary_", 7) == 0) {
            bool caught = !c.expect_memory_met;
            for (int k = 0; k < c.n_precisions; k++)
                caught = caught || ck_case_expect(&c, c.precisions[k]) == CK_EXPECT_MISMATCH ||
                         (c.precisions[k] != CK_F32 &&
                          ck_case_expect_vs_fp32(&c, c.precisions[k]) == CK_EXPECT_MISMATCH);
            ck_assert_msg(caught, "%s: a canary that expects nothing to be wrong", path);
        }
        for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
            if (strcmp(e->d_name, required[i]) == 0)
                found[i] = true;
        ck_graph_free(&g);
        ck_case_free(&c);
        built++;
    }
    closedir(dir);
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        ck_assert_msg(found[i], "cases/%s is missing", required[i]);
    ck_assert_int_ge(built, (int)(sizeof required / sizeof required[0]));
}
END_TEST

Suite *suite_graph(void)
{
    Suite *s = suite_create("graph");
    TCase *infer = tcase_create("infer");
    tcase_add_loop_test(infer, op_infer_matches_the_shape_rules, 0, N_INFER);
    tcase_add_test(infer, pointwise_ops_keep_the_shape);
    tcase_add_test(infer, conv_resolves_padding_per_dim);
    suite_add_tcase(s, infer);

    TCase *specs = tcase_create("specs");
    tcase_add_test(specs, linear_params_use_pytorch_default_bounds);
    tcase_add_test(specs, conv_params_span_channels_and_window);
    tcase_add_test(specs, batchnorm_state_is_per_channel);
    tcase_add_test(specs, layernorm_state_spans_non_batch_dims);
    tcase_add_test(specs, stateless_ops_have_no_state);
    suite_add_tcase(s, specs);

    TCase *graphs = tcase_create("graphs");
    tcase_set_timeout(graphs, 30);
    tcase_add_test(graphs, unet_graph_has_shapes_consumers_and_targets);
    tcase_add_test(graphs, loss_targets_follow_the_loss);
    tcase_add_test(graphs, an_input_read_twice_counts_twice);
    tcase_add_test(graphs, every_shipped_case_builds);
    suite_add_tcase(s, graphs);
    return s;
}
