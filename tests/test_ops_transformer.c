/*
 * CPU reference backend, the transformer and modern U-Net ops: matmul, softmax, log_softmax, attention,
 * embedding, reshape, permute/transpose, layernorm with normalized_shape, rmsnorm,
 * groupnorm, mul, silu, gelu tanh, conv_transpose1d/2d/3d, linear/bilinear/trilinear
 * upsampling, padded max/avg pooling.
 *
 * For every row of the table:
 *  - gradcheck: float64 central differences (ck_gradcheck_op) for every input and
 *    parameter, and every gradient is non-zero somewhere (no vacuous comparison);
 *  - fp16/bf16 (harness/precision.md), the bounds of test_ops_lowp.c: the low forward
 *    output is BITWISE the fp64 output (same values) rounded once; each low gradient is
 *    BITWISE its prior value plus the fp64 contribution, rounded once; fp32 parameters of
 *    the norms (rmsnorm, groupnorm, layernorm) get BITWISE the fp32 run's gradients; and
 *    every low value is within one low-dtype ulp of the fp32 run's value rounded;
 *  - accumulation: backward adds to the gradients it is given.
 * Plus hand-computed values for the ops whose results are easy to state, and the
 * attention dropout mask's dependence on its stream.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "harness/core/half.h"
#include "harness/core/rng.h"
#include "harness/model/graph.h"
#include "harness/verify/bisect.h"
#include "harness/verify/gradcheck.h"
#include "harness/verify/run_case.h"
#include "reports/report.h"
#include "tests/test_util.h"

#define GRADCHECK_SEED 18

// ----------------------------------------------------------------------------
// the table

typedef struct {
    const char *desc;
    ck_op_kind kind;
    int nsp, n_in;
    ck_shape in[3];
    void (*set)(ck_op_params *op);
} op_row;

static void set_mm_trans(ck_op_params *op) { op->trans_a = op->trans_b = true; }
static void set_mm_units(ck_op_params *op) { op->units = 5; }
static void set_dim1(ck_op_params *op) { op->dim = 1; }
static void set_attn_causal(ck_op_params *op)
{
    op->heads = 2;
    op->causal = true;
}
static void set_attn_drop(ck_op_params *op)
{
    op->heads = 2;
    op->rate = 0.3;
}
static void set_attn_self(ck_op_params *op)
{
    op->causal = true;
    op->rate = 0.25;
    op->attn_scale = 0.7;
}
static void set_emb(ck_op_params *op)
{
    op->vocab = 7;
    op->units = 3;
}
static void set_reshape(ck_op_params *op)
{
    op->n_shape = 3;
    op->shape[0] = 2;
    op->shape[1] = -1;
    op->shape[2] = 2;
}
static void set_permute(ck_op_params *op)
{
    op->n_perm = 3;
    op->perm[0] = 2;
    op->perm[1] = 0;
    op->perm[2] = -2;
}
static void set_transpose(ck_op_params *op)
{
    op->dim0 = 1;
    op->dim1 = -1;
}
static void set_norm_last(ck_op_params *op)
{
    op->n_norm = 1;
    op->norm_shape[0] = 4;
}
static void set_norm_two(ck_op_params *op)
{
    op->n_norm = 2;
    op->norm_shape[0] = 3;
    op->norm_shape[1] = 5;
}
static void set_groups(ck_op_params *op) { op->groups = 2; }
static void set_gelu_tanh(ck_op_params *op) { op->gelu_tanh = true; }
static void set_convt1(ck_op_params *op)
{
    op->filters = 3;
    op->kernel[0] = 3;
    op->stride[0] = 2;
    op->pad_mode = CK_PAD_EXPLICIT;
    op->pad[0] = 1;
    op->out_pad[0] = 1;
}
static void set_convt2(ck_op_params *op)
{
    op->filters = 2;
    op->kernel[0] = 2;
    op->kernel[1] = 3;
    op->stride[0] = 2;
    op->dilation[1] = 2;
    op->pad_mode = CK_PAD_EXPLICIT;
    op->pad[1] = 1;
    op->out_pad[0] = 1;
    op->bias = false;
}
static void set_convt3(ck_op_params *op)
{
    op->filters = 2;
    for (int d = 0; d < 3; d++)
        op->kernel[d] = op->stride[d] = 2;
}
static void set_lerp(ck_op_params *op)
{
    op->mode = CK_UPSAMPLE_LINEAR;
    for (int d = 0; d < 3; d++)
        op->scale[d] = 2;
}
static void set_lerp_ac(ck_op_params *op)
{
    set_lerp(op);
    op->scale[1] = 3;
    op->align_corners = true;
}
static void set_pool_pad(ck_op_params *op)
{
    for (int d = 0; d < 3; d++) {
        op->kernel[d] = 3;
        op->stride[d] = 2;
        op->pad[d] = 1;
    }
    op->pad_mode = CK_PAD_EXPLICIT;
}
static void set_pool_pad_excl(ck_op_params *op)
{
    set_pool_pad(op);
    op->count_include_pad = false;
}
static void set_pool_pad_even(ck_op_params *op)
{
    for (int d = 0; d < 3; d++) {
        op->kernel[d] = 2;
        op->stride[d] = 1;
        op->pad[d] = 1;
    }
    op->pad_mode = CK_PAD_EXPLICIT;
}

static void set_slice_last(ck_op_params *op)
{
    op->dim = -1;
    op->n_slice = 2;
    op->slice_range[0] = 2;
    op->slice_range[1] = 5;
}

static void set_slice_mid(ck_op_params *op)
{
    op->dim = 1;
    op->n_slice = 2;
    op->slice_range[0] = 0;
    op->slice_range[1] = 2;
}

static const op_row rows[] = {
    {"matmul of two inputs", CK_OP_MATMUL, 0, 2, {SHAPE_INIT(2, 3, 4), SHAPE_INIT(2, 4, 5)}, NULL},
    {"matmul transposed", CK_OP_MATMUL, 0, 2, {SHAPE_INIT(2, 4, 3), SHAPE_INIT(2, 5, 4)},
     set_mm_trans},
    {"matmul by a 2-D input", CK_OP_MATMUL, 0, 2, {SHAPE_INIT(2, 3, 4), SHAPE_INIT(4, 5)}, NULL},
    {"matmul by a weight", CK_OP_MATMUL, 0, 1, {SHAPE_INIT(2, 3, 4)}, set_mm_units},
    {"softmax over the last dim", CK_OP_SOFTMAX, 0, 1, {SHAPE_INIT(2, 3, 5)}, NULL},
    {"softmax over dim 1", CK_OP_SOFTMAX, 0, 1, {SHAPE_INIT(2, 4, 3)}, set_dim1},
    {"log_softmax over dim 1", CK_OP_LOG_SOFTMAX, 0, 1, {SHAPE_INIT(2, 4, 3)}, set_dim1},
    {"attention causal, 2 heads", CK_OP_ATTENTION, 0, 3,
     {SHAPE_INIT(2, 4, 6), SHAPE_INIT(2, 4, 6), SHAPE_INIT(2, 4, 6)}, set_attn_causal},
    {"attention with dropout, Lq != Lk, Dk != Dv", CK_OP_ATTENTION, 0, 3,
     {SHAPE_INIT(2, 3, 4), SHAPE_INIT(2, 5, 4), SHAPE_INIT(2, 5, 6)}, set_attn_drop},
    {"self-attention q = k = v, causal, dropout, scale", CK_OP_ATTENTION, 0, 1,
     {SHAPE_INIT(2, 5, 4)}, set_attn_self},
    {"embedding", CK_OP_EMBEDDING, 0, 1, {SHAPE_INIT(2, 4)}, set_emb},
    {"reshape with -1", CK_OP_RESHAPE, 0, 1, {SHAPE_INIT(2, 3, 4)}, set_reshape},
    {"permute", CK_OP_PERMUTE, 0, 1, {SHAPE_INIT(2, 3, 4)}, set_permute},
    {"transpose", CK_OP_PERMUTE, 0, 1, {SHAPE_INIT(2, 3, 4)}, set_transpose},
    {"layernorm over the last dim", CK_OP_LAYERNORM, 0, 1, {SHAPE_INIT(2, 3, 4)}, set_norm_last},
    {"layernorm over every non-batch dim", CK_OP_LAYERNORM, 0, 1, {SHAPE_INIT(2, 3, 4)}, NULL},
    {"rmsnorm over the last dim", CK_OP_RMSNORM, 0, 1, {SHAPE_INIT(2, 3, 5)}, NULL},
    {"rmsnorm over two dims", CK_OP_RMSNORM, 0, 1, {SHAPE_INIT(2, 3, 5)}, set_norm_two},
    {"groupnorm", CK_OP_GROUPNORM, 0, 1, {SHAPE_INIT(2, 4, 3, 2)}, set_groups},
    {"mul", CK_OP_MUL, 0, 2, {SHAPE_INIT(2, 3, 4), SHAPE_INIT(2, 3, 4)}, NULL},
    {"silu", CK_OP_SILU, 0, 1, {SHAPE_INIT(3, 7)}, NULL},
    {"gelu tanh", CK_OP_GELU, 0, 1, {SHAPE_INIT(3, 7)}, set_gelu_tanh},
    {"conv_transpose1d stride 2, padding, output_padding", CK_OP_CONV_TRANSPOSE, 1, 1,
     {SHAPE_INIT(2, 2, 4)}, set_convt1},
    {"conv_transpose2d dilated, no bias", CK_OP_CONV_TRANSPOSE, 2, 1, {SHAPE_INIT(1, 2, 3, 3)},
     set_convt2},
    {"conv_transpose3d stride 2", CK_OP_CONV_TRANSPOSE, 3, 1, {SHAPE_INIT(1, 2, 2, 2, 2)},
     set_convt3},
    {"linear upsampling", CK_OP_UPSAMPLE, 1, 1, {SHAPE_INIT(2, 2, 3)}, set_lerp},
    {"bilinear upsampling", CK_OP_UPSAMPLE, 2, 1, {SHAPE_INIT(1, 2, 3, 2)}, set_lerp},
    {"trilinear upsampling, align_corners", CK_OP_UPSAMPLE, 3, 1, {SHAPE_INIT(1, 1, 2, 3, 2)},
     set_lerp_ac},
    {"maxpool2d padded", CK_OP_MAXPOOL, 2, 1, {SHAPE_INIT(1, 2, 5, 4)}, set_pool_pad},
    {"maxpool1d padded, even window", CK_OP_MAXPOOL, 1, 1, {SHAPE_INIT(2, 2, 5)},
     set_pool_pad_even},
    {"avgpool2d padded, count_include_pad", CK_OP_AVGPOOL, 2, 1, {SHAPE_INIT(1, 2, 5, 4)},
     set_pool_pad},
    {"avgpool3d padded, count_include_pad false", CK_OP_AVGPOOL, 3, 1,
     {SHAPE_INIT(1, 1, 3, 4, 3)}, set_pool_pad_excl},
    {"positional", CK_OP_POSITIONAL, 0, 1, {SHAPE_INIT(3, 4, 2)}, NULL},
    {"slice of the last dim", CK_OP_SLICE, 0, 1, {SHAPE_INIT(2, 3, 6)}, set_slice_last},
    {"slice of dim 1", CK_OP_SLICE, 0, 1, {SHAPE_INIT(2, 5, 3)}, set_slice_mid},
};

/* The row's node as ck_graph_build makes it: options resolved, shapes, params, draws. */
static ck_node node_of(const op_row *r)
{
    ck_op_params op;
    ck_op_params_default(&op, r->kind, r->nsp);
    if (r->set)
        r->set(&op);
    ck_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.n_in = r->n_in;
    ck_error err = {{0}};
    ck_status st = ck_op_infer(&n.op, r->n_in, r->in, &n.out_shape, &err);
    ck_assert_msg(st == CK_OK, "%s: shape inference failed: %s", r->desc, err.msg);
    ck_op_state_specs(&n, &r->in[0]);
    ck_op_draw_specs(&n, r->in);
    return n;
}

static ck_fwd_args args_of(void)
{
    ck_fwd_args a;
    memset(&a, 0, sizeof a);
    a.rng = ck_rng_keyed(2026, 5, CK_PURPOSE_DROPOUT, 1);
    return a;
}

static bool is_norm(ck_op_kind k)
{
    return k == CK_OP_LAYERNORM || k == CK_OP_RMSNORM || k == CK_OP_GROUPNORM;
}

// ----------------------------------------------------------------------------
// tensors of one run

typedef struct {
    ck_tensor *in[3], *out, *par[2], *din[3], *dpar[2], *dout, *saved;
    ck_op_io io;
    ck_op_grads g;
} op_run;

static double draw(uint32_t slot, int64_t i, double scale, ck_dtype dt)
{
    ck_rng_stream s = ck_rng_keyed(77, slot, CK_PURPOSE_TEST, 0);
    return ck_round_to_dtype(scale * ck_rng_normal_f64(&s, (uint64_t)i), dt);
}

/* act: activations' dtype (and weight-like parameters'); norm parameters stay fp32 unless
 * act is fp64. Values are drawn representable in `vals` (the low dtype of the comparison).
 * Gradients start at their drawn prior values when with_old. */
static void run_make(op_run *R, const op_row *r, const ck_node *n, ck_dtype act, ck_dtype vals,
                     bool with_old)
{
    memset(R, 0, sizeof *R);
    const ck_dtype pdt = is_norm(r->kind) && act != CK_F64 ? CK_F32 : act;
    static const char *names[3] = {"x0", "x1", "x2"}, *dnames[3] = {"dx0", "dx1", "dx2"};
    R->io.n_in = r->n_in;
    for (int k = 0; k < r->n_in; k++) {
        const bool ids = r->kind == CK_OP_EMBEDDING;
        R->in[k] = tu_tensor_new(names[k], ids ? CK_I32 : act, r->in[k]);
        for (int64_t i = 0; i < ck_shape_numel(&r->in[k]); i++) {
            if (ids)
                ((int32_t *)R->in[k]->data)[i] = (int32_t)((i * 5 + 3) % n->op.vocab);
            else
                tu_tset(R->in[k], i, draw(10 + (uint32_t)k, i, 1.5, vals));
        }
        R->io.in[k] = R->in[k];
        if (ids)
            continue;
        R->din[k] = tu_tensor_new(dnames[k], act, r->in[k]);
        if (with_old)
            for (int64_t i = 0; i < ck_shape_numel(&r->in[k]); i++)
                tu_tset(R->din[k], i, draw(20 + (uint32_t)k, i, 0.25, vals));
        R->g.din[k] = R->din[k];
    }
    R->out = tu_tensor_new("y", act, n->out_shape);
    R->dout = tu_tensor_new("dy", act, n->out_shape);
    for (int64_t i = 0; i < ck_shape_numel(&n->out_shape); i++)
        tu_tset(R->dout, i, draw(30, i, 1.0, vals));
    for (int p = 0; p < n->n_params; p++) {
        const ck_param_spec *ps = &n->params[p];
        const bool bias = strcmp(ps->suffix, "bias") == 0;
        R->par[p] = tu_tensor_new(ps->suffix, pdt, ps->shape);
        R->dpar[p] = tu_tensor_new(bias ? "dbias" : "dweight", pdt, ps->shape);
        for (int64_t i = 0; i < ck_shape_numel(&ps->shape); i++) {
            tu_tset(R->par[p], i,
                    (is_norm(r->kind) && !bias ? 1.0 : 0.0) + draw(40 + (uint32_t)p, i, 0.5, vals));
            if (with_old)
                tu_tset(R->dpar[p], i, draw(50 + (uint32_t)p, i, 0.25, vals));
        }
        if (bias) {
            R->io.bias = R->par[p];
            R->g.dbias = R->dpar[p];
        } else {
            R->io.weight = R->par[p];
            R->g.dweight = R->dpar[p];
        }
    }
    if (n->has_saved) {
        R->saved = tu_tensor_new("saved", pdt, n->saved_shape);
        R->io.saved = R->saved;
    }
    R->io.out = R->out;
    R->g.dout = R->dout;
}

static void run_free(op_run *R)
{
    ck_tensor *all[] = {R->in[0], R->in[1], R->in[2], R->out, R->par[0], R->par[1],
                        R->din[0], R->din[1], R->din[2], R->dpar[0], R->dpar[1], R->dout,
                        R->saved};
    for (int i = 0; i < COUNT(all); i++)
        tu_tensor_free(all[i]);
}

static void run_op(const char *desc, const ck_node *n, op_run *R, bool backward)
{
    ck_fwd_args a = args_of();
    ck_error err = {{0}};
    ck_status st = tu_cpu->forward(tu_cpu, &n->op, &a, &R->io, &err);
    ck_assert_msg(st == CK_OK, "%s: forward failed: %s", desc, err.msg);
    if (!backward)
        return;
    st = tu_cpu->backward(tu_cpu, &n->op, &a, &R->io, &R->g, &err);
    ck_assert_msg(st == CK_OK, "%s: backward failed: %s", desc, err.msg);
}

// ----------------------------------------------------------------------------
// gradcheck

START_TEST(every_op_passes_gradcheck_with_nonzero_gradients)
{
    const op_row *r = &rows[_i];
    ck_node n = node_of(r);
    ck_fwd_args a = args_of();
    ck_gradcheck_result res;
    ck_error err = {{0}};
    ck_status st = ck_gradcheck_op(tu_cpu, &n, r->in, &a, GRADCHECK_SEED, NULL, &res, &err);
    ck_assert_msg(st == CK_OK, "%s: gradcheck did not run: %s", r->desc, err.msg);
    const int want = (r->kind == CK_OP_EMBEDDING ? 0 : r->n_in) + n.n_params;
    ck_assert_msg(res.n == want, "%s: %d gradients checked, want %d", r->desc, res.n, want);
    for (int i = 0; i < res.n; i++) {
        const ck_gradcheck_entry *e = &res.e[i];
        ck_assert_msg(e->checked > 0, "%s: %s: nothing checked", r->desc, e->name);
        ck_assert_msg(e->failed == 0, "%s: %s: %lld of %lld outside tolerance, worst [%lld] %.10g vs %.10g",
                      r->desc, e->name, (long long)e->failed, (long long)e->checked,
                      (long long)e->worst_index, e->worst_analytic, e->worst_numeric);
    }
    ck_assert(res.ok);

    /* the gradients compared are not all zero */
    op_run R;
    run_make(&R, r, &n, CK_F64, CK_F64, false);
    run_op(r->desc, &n, &R, true);
    ck_tensor *grads[] = {R.din[0], R.din[1], R.din[2], R.dpar[0], R.dpar[1]};
    for (int k = 0; k < COUNT(grads); k++) {
        if (!grads[k])
            continue;
        double mx = 0.0;
        for (int64_t i = 0; i < ck_shape_numel(&grads[k]->shape); i++)
            mx = fmax(mx, fabs(tu_tget(grads[k], i)));
        ck_assert_msg(mx > 1e-6, "%s: gradient %s is all zero", r->desc, grads[k]->name);
    }
    run_free(&R);
}
END_TEST

// ----------------------------------------------------------------------------
// fp16 / bf16

static uint16_t low_bits(double v, ck_dtype dt)
{
    return dt == CK_F16 ? ck_f64_to_f16(v) : ck_f64_to_bf16(v);
}

static double ulp_low(double v, ck_dtype dt)
{
    const int mbits = dt == CK_F16 ? 10 : 7, emin = dt == CK_F16 ? -14 : -126;
    int e = emin + 1;
    if (v != 0.0 && isfinite(v))
        frexp(fabs(v), &e);
    return ldexp(1.0, (e - 1 < emin ? emin : e - 1) - mbits);
}

/* old + c rounded ONCE to dt, without the backend's code (as test_ops_lowp.c) */
static double round_sum_once(double old, double c, ck_dtype dt)
{
    const double s = old + c;
    const double bv = s - old;
    const double e = (old - (s - bv)) + (c - bv);
    const double r = ck_round_to_dtype(s, dt);
    if (e == 0.0 || !isfinite(s) || fabs(s - r) != ulp_low(s, dt) / 2)
        return r;
    const double other = 2 * s - r;
    return e > 0 ? fmax(r, other) : fmin(r, other);
}

static void assert_rounded_once(const char *desc, const ck_tensor *low, const ck_tensor *ref)
{
    const uint16_t *bits = low->data;
    for (int64_t i = 0; i < ck_shape_numel(&low->shape); i++) {
        const double want = tu_tget(ref, i);
        REQUIRE(bits[i] == low_bits(want, low->dtype),
                "%s: %s[%lld] = %a, want %a rounded once", desc, low->name, (long long)i,
                tu_tget(low, i), want);
    }
}

static void assert_accumulated_once(const char *desc, const ck_tensor *low, const ck_tensor *old,
                                    const ck_tensor *ref)
{
    const uint16_t *bits = low->data;
    for (int64_t i = 0; i < ck_shape_numel(&low->shape); i++) {
        const double want = round_sum_once(tu_tget(old, i), tu_tget(ref, i), low->dtype);
        REQUIRE(bits[i] == low_bits(want, low->dtype),
                "%s: %s[%lld] = %a, want %a + %a rounded once = %a", desc, low->name,
                (long long)i, tu_tget(low, i), tu_tget(old, i), tu_tget(ref, i), want);
    }
}

/* |low - round_L(f32)| <= 1 ulp_L given |f32 - wide| < 1 ulp_L (wide: old + ref, or ref) */
static void assert_within_ulp_of_fp32(const char *desc, const ck_tensor *low, const ck_tensor *f32,
                                      const ck_tensor *old, const ck_tensor *ref)
{
    const ck_dtype dt = low->dtype;
    for (int64_t i = 0; i < ck_shape_numel(&low->shape); i++) {
        const double v32 = tu_tget(f32, i), wide = (old ? tu_tget(old, i) : 0.0) + tu_tget(ref, i);
        const double ulp = fmax(ulp_low(v32, dt), ulp_low(wide, dt));
        REQUIRE(fabs(v32 - wide) < ulp, "%s: premise: fp32 %s[%lld] = %a is not within one ulp "
                "of fp64 %a", desc, f32->name, (long long)i, v32, wide);
        const double diff = fabs(tu_tget(low, i) - ck_round_to_dtype(v32, dt));
        REQUIRE(diff <= ulp, "%s: %s[%lld] = %a is %g ulps from fp32 %a rounded", desc,
                low->name, (long long)i, tu_tget(low, i), diff / ulp, v32);
    }
}

static void assert_same_bits(const char *desc, const ck_tensor *a, const ck_tensor *b)
{
    ck_assert_int_eq(a->dtype, b->dtype);
    REQUIRE(memcmp(a->data, b->data, ck_tensor_bytes(a)) == 0, "%s: %s differs from the %s run",
            desc, a->name, ck_dtype_name(b->dtype));
}

START_TEST(every_op_rounds_once_in_fp16_and_bf16)
{
    const op_row *r = &rows[_i / 2];
    const ck_dtype dt = _i % 2 ? CK_BF16 : CK_F16;
    char desc[128];
    snprintf(desc, sizeof desc, "%s in %s", r->desc, ck_dtype_name(dt));
    const ck_node n = node_of(r);
    op_run low, ref, f32, old;
    run_make(&low, r, &n, dt, dt, true);
    run_make(&ref, r, &n, CK_F64, dt, false); /* the bare contributions */
    run_make(&f32, r, &n, CK_F32, dt, true);
    run_make(&old, r, &n, dt, dt, true); /* the prior values, untouched */
    run_op(desc, &n, &low, true);
    run_op(desc, &n, &ref, true);
    run_op(desc, &n, &f32, true);
    assert_rounded_once(desc, low.out, ref.out);
    assert_within_ulp_of_fp32(desc, low.out, f32.out, NULL, ref.out);
    for (int k = 0; k < r->n_in; k++)
        if (low.din[k]) {
            assert_accumulated_once(desc, low.din[k], old.din[k], ref.din[k]);
            assert_within_ulp_of_fp32(desc, low.din[k], f32.din[k], old.din[k], ref.din[k]);
        }
    for (int p = 0; p < n.n_params; p++) {
        if (is_norm(r->kind)) {
            assert_same_bits(desc, low.dpar[p], f32.dpar[p]); /* fp32 in both runs */
        } else {
            assert_accumulated_once(desc, low.dpar[p], old.dpar[p], ref.dpar[p]);
            assert_within_ulp_of_fp32(desc, low.dpar[p], f32.dpar[p], old.dpar[p], ref.dpar[p]);
        }
    }
    run_free(&low);
    run_free(&ref);
    run_free(&f32);
    run_free(&old);
}
END_TEST

/* backward adds to what the gradients hold: twice from zero is twice once */
START_TEST(backward_accumulates)
{
    const op_row *r = &rows[_i];
    const ck_node n = node_of(r);
    op_run R;
    run_make(&R, r, &n, CK_F64, CK_F64, false);
    run_op(r->desc, &n, &R, true);
    ck_tensor *g1[] = {R.din[0], R.din[1], R.din[2], R.dpar[0], R.dpar[1]};
    double *once[5] = {NULL};
    for (int k = 0; k < 5; k++) {
        if (!g1[k])
            continue;
        const int64_t cnt = ck_shape_numel(&g1[k]->shape);
        once[k] = malloc((size_t)cnt * sizeof(double));
        for (int64_t i = 0; i < cnt; i++)
            once[k][i] = tu_tget(g1[k], i);
    }
    ck_fwd_args a = args_of();
    ck_error err = {{0}};
    ck_assert_int_eq(tu_cpu->backward(tu_cpu, &n.op, &a, &R.io, &R.g, &err), CK_OK);
    for (int k = 0; k < 5; k++) {
        if (!g1[k])
            continue;
        for (int64_t i = 0; i < ck_shape_numel(&g1[k]->shape); i++)
            REQUIRE(fabs(tu_tget(g1[k], i) - 2 * once[k][i]) <= 1e-12 * (1 + fabs(once[k][i])),
                    "%s: %s[%lld] = %g after two backwards, once %g", r->desc, g1[k]->name,
                    (long long)i, tu_tget(g1[k], i), once[k][i]);
        free(once[k]);
    }
    run_free(&R);
}
END_TEST

// ----------------------------------------------------------------------------
// hand values

static ck_tensor *vec(const char *name, ck_dtype dt, ck_shape s, const double *v)
{
    return tu_tensor_of(name, dt, s, v);
}

START_TEST(matmul_softmax_and_shape_ops_give_hand_values)
{
    ck_fwd_args a = args_of();
    /* [[1, 2], [3, 4]] x [[5, 6], [7, 8]] = [[19, 22], [43, 50]] */
    const double A[] = {1, 2, 3, 4}, B[] = {5, 6, 7, 8}, want_mm[] = {19, 22, 43, 50};
    ck_tensor *ta = vec("a", CK_F32, SHAPE(1, 2, 2), A), *tb = vec("b", CK_F32, SHAPE(1, 2, 2), B);
    ck_tensor *ty = tu_tensor_new("y", CK_F32, SHAPE(1, 2, 2));
    ck_op_params op;
    ck_op_params_default(&op, CK_OP_MATMUL, 0);
    ck_op_io io = {.n_in = 2, .in = {ta, tb}, .out = ty};
    tu_forward_ok("matmul", &op, &a, &io);
    tu_assert_values("matmul", ty, want_mm, 0, 0);
    /* transpose_b: A B^T = [[17, 23], [39, 53]] */
    op.trans_b = true;
    const double want_bt[] = {17, 23, 39, 53};
    tu_forward_ok("matmul transpose_b", &op, &a, &io);
    tu_assert_values("matmul transpose_b", ty, want_bt, 0, 0);

    /* softmax of (0, ln 3) = (1/4, 3/4); log_softmax = (-ln 4, ln 3 - ln 4) */
    const double x[] = {0.0, log(3.0)}, want_sm[] = {0.25, 0.75},
                 want_lsm[] = {-log(4.0), log(3.0) - log(4.0)};
    ck_tensor *tx = vec("x", CK_F64, SHAPE(1, 2), x), *ts = tu_tensor_new("s", CK_F64, SHAPE(1, 2));
    ck_op_params_default(&op, CK_OP_SOFTMAX, 0);
    op.dim = 1;
    ck_op_io io2 = {.n_in = 1, .in = {tx}, .out = ts};
    tu_forward_ok("softmax", &op, &a, &io2);
    tu_assert_values("softmax", ts, want_sm, 1e-15, 0);
    op.kind = CK_OP_LOG_SOFTMAX;
    tu_forward_ok("log_softmax", &op, &a, &io2);
    tu_assert_values("log_softmax", ts, want_lsm, 1e-15, 0);

    /* transpose of (2, 3): [[0,1,2],[3,4,5]] -> [[0,3],[1,4],[2,5]] */
    const double m[] = {0, 1, 2, 3, 4, 5}, want_t[] = {0, 3, 1, 4, 2, 5};
    ck_tensor *tm = vec("m", CK_F32, SHAPE(2, 3), m), *tt = tu_tensor_new("t", CK_F32, SHAPE(3, 2));
    ck_op_params_default(&op, CK_OP_PERMUTE, 0);
    op.n_perm = 2;
    op.perm[0] = 1;
    op.perm[1] = 0;
    ck_op_io io3 = {.n_in = 1, .in = {tm}, .out = tt};
    tu_forward_ok("permute", &op, &a, &io3);
    tu_assert_values("permute", tt, want_t, 0, 0);

    /* silu(1) = 1 / (1 + e^-1); gelu tanh(1) = 0.5 (1 + tanh(sqrt(2/pi) 1.044715)) */
    const double one[] = {1.0};
    const double want_silu[] = {1.0 / (1.0 + exp(-1.0))},
                 want_gelu[] = {0.5 * (1.0 + tanh(sqrt(2.0 / M_PI) * 1.044715))};
    ck_tensor *t1 = vec("x", CK_F64, SHAPE(1, 1), one), *t2 = tu_tensor_new("y", CK_F64, SHAPE(1, 1));
    ck_op_io io4 = {.n_in = 1, .in = {t1}, .out = t2};
    ck_op_params_default(&op, CK_OP_SILU, 0);
    tu_forward_ok("silu", &op, &a, &io4);
    tu_assert_values("silu", t2, want_silu, 1e-15, 0);
    ck_op_params_default(&op, CK_OP_GELU, 0);
    op.gelu_tanh = true;
    tu_forward_ok("gelu tanh", &op, &a, &io4);
    tu_assert_values("gelu tanh", t2, want_gelu, 1e-15, 0);

    ck_tensor *all[] = {ta, tb, ty, tx, ts, tm, tt, t1, t2};
    for (int i = 0; i < COUNT(all); i++)
        tu_tensor_free(all[i]);
}
END_TEST

/* Causal attention with one key visible to the first query: its output is v[0]. Dropout
 * drops each probability by its own word of the stream: another stream, another mask;
 * the same stream, the same output (what recomputation relies on). */
START_TEST(attention_is_causal_and_its_dropout_follows_the_stream)
{
    const op_row r = {"attention", CK_OP_ATTENTION, 0, 1, {SHAPE_INIT(1, 6, 4)}, NULL};
    ck_node n = node_of(&r);
    n.op.causal = true;
    op_run R;
    run_make(&R, &r, &n, CK_F64, CK_F64, false);
    run_op("attention", &n, &R, false);
    for (int d = 0; d < 4; d++)
        ck_assert_msg(tu_tget(R.out, d) == tu_tget(R.in[0], d), "query 0 sees key 0 only");

    n.op.rate = 0.5;
    ck_fwd_args a1 = args_of(), a2 = args_of();
    a2.rng = ck_rng_keyed(2026, 6, CK_PURPOSE_DROPOUT, 1);
    ck_tensor *y1 = tu_tensor_new("y1", CK_F64, n.out_shape), *y2 = tu_tensor_new("y2", CK_F64, n.out_shape),
              *y3 = tu_tensor_new("y3", CK_F64, n.out_shape);
    ck_error err = {{0}};
    R.io.out = y1;
    ck_assert_int_eq(tu_cpu->forward(tu_cpu, &n.op, &a1, &R.io, &err), CK_OK);
    R.io.out = y2;
    ck_assert_int_eq(tu_cpu->forward(tu_cpu, &n.op, &a2, &R.io, &err), CK_OK);
    R.io.out = y3;
    ck_assert_int_eq(tu_cpu->forward(tu_cpu, &n.op, &a1, &R.io, &err), CK_OK);
    ck_assert(memcmp(y1->data, y3->data, ck_tensor_bytes(y1)) == 0);
    ck_assert(memcmp(y1->data, y2->data, ck_tensor_bytes(y1)) != 0);
    R.io.out = R.out;
    tu_tensor_free(y1);
    tu_tensor_free(y2);
    tu_tensor_free(y3);
    run_free(&R);
}
END_TEST

START_TEST(embedding_rejects_ids_outside_the_vocabulary)
{
    const op_row *r = &rows[10];
    ck_assert_int_eq(r->kind, CK_OP_EMBEDDING);
    const ck_node n = node_of(r);
    op_run R;
    run_make(&R, r, &n, CK_F32, CK_F32, false);
    ((int32_t *)R.in[0]->data)[5] = 7;
    ck_fwd_args a = args_of();
    ck_error err = {{0}};
    ck_assert_int_eq(tu_cpu->forward(tu_cpu, &n.op, &a, &R.io, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "token id 7 at [1, 1]") && strstr(err.msg, "[0, 7)"), "%s",
                  err.msg);
    run_free(&R);
}
END_TEST

/* cross-entropy over the last dim with ignore_index, against the loss written out */
START_TEST(cross_entropy_over_a_class_dim_ignores_positions)
{
    ck_status (*fwd)(ck_backend *, const ck_loss_spec *, const ck_tensor *, const ck_tensor *,
                     double *, ck_error *) = tu_cpu->ce_forward;
    ck_status (*bwd)(ck_backend *, const ck_loss_spec *, const ck_tensor *, const ck_tensor *,
                     double, ck_tensor *, ck_error *) = tu_cpu->ce_backward;
    ck_assert_ptr_nonnull(fwd);
    ck_assert_ptr_nonnull(bwd);
    /* logits (1, 3 positions, 2 classes), targets 1, 0 (ignored), 0 */
    const double y[] = {0.0, 1.0, 5.0, -5.0, 2.0, 0.0};
    ck_tensor *ty = tu_tensor_of("y", CK_F64, SHAPE(1, 3, 2), y);
    ck_tensor *tt = tu_tensor_new("t", CK_I32, SHAPE(1, 3));
    int32_t *t = tt->data;
    t[0] = 1;
    t[1] = 0;
    t[2] = 0;
    ck_loss_spec spec = {CK_LOSS_CROSS_ENTROPY, 2, true, 0, 0.0};
    spec.ignore_index = 0;
    /* with ignore_index 0 both class-0 positions are ignored: the loss is position 0's */
    double L = 0;
    ck_error err = {{0}};
    ck_assert_int_eq(fwd(tu_cpu, &spec, ty, tt, &L, &err), CK_OK);
    const double want = log(1.0 + exp(1.0)) - 1.0;
    ck_assert_msg(fabs(L - want) < 1e-15, "loss %.17g, want %.17g", L, want);
    ck_tensor *dy = tu_tensor_new("dy", CK_F64, SHAPE(1, 3, 2));
    ck_assert_int_eq(bwd(tu_cpu, &spec, ty, tt, 1.0, dy, &err), CK_OK);
    const double p1 = exp(1.0) / (1.0 + exp(1.0));
    const double want_dy[] = {1.0 - p1, p1 - 1.0, 0, 0, 0, 0};
    tu_assert_values("cross_entropy gradient", dy, want_dy, 1e-15, 1e-16);
    /* a class index outside [0, C) that is not ignore_index is refused */
    t[1] = 2;
    ck_assert_int_eq(fwd(tu_cpu, &spec, ty, tt, &L, &err), CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "not ignore_index"), "%s", err.msg);
    tu_tensor_free(ty);
    tu_tensor_free(tt);
    tu_tensor_free(dy);
}
END_TEST

/* label smoothing e (PyTorch's): the loss written out for one counted position, and the
 * gradient against float64 central differences over a class dim with ignored positions */
START_TEST(cross_entropy_label_smoothing_matches_hand_values_and_differences)
{
    const double y[] = {0.0, 1.0, 5.0, -5.0, 2.0, 0.0};
    ck_tensor *ty = tu_tensor_of("y", CK_F64, SHAPE(1, 3, 2), y);
    ck_tensor *tt = tu_tensor_new("t", CK_I32, SHAPE(1, 3));
    int32_t *t = tt->data;
    t[0] = 1;
    t[1] = 0;
    t[2] = 0;
    ck_loss_spec spec = {CK_LOSS_CROSS_ENTROPY, 2, true, 0, 0.2};
    double L = 0;
    ck_error err = {{0}};
    ck_assert_int_eq(tu_cpu->ce_forward(tu_cpu, &spec, ty, tt, &L, &err), CK_OK);
    /* position 0 alone: (1 - e) (lse - y1) + e / 2 ((lse - y0) + (lse - y1)) */
    const double lse = log(1.0 + exp(1.0));
    const double want = 0.8 * (lse - 1.0) + 0.1 * ((lse - 0.0) + (lse - 1.0));
    ck_assert_msg(fabs(L - want) < 1e-15, "loss %.17g, want %.17g", L, want);
    ck_tensor *dy = tu_tensor_new("dy", CK_F64, SHAPE(1, 3, 2));
    ck_assert_int_eq(tu_cpu->ce_backward(tu_cpu, &spec, ty, tt, 1.0, dy, &err), CK_OK);
    const double p1 = exp(1.0) / (1.0 + exp(1.0));
    const double want_dy[] = {(1.0 - p1) - 0.1, p1 - 0.8 - 0.1, 0, 0, 0, 0};
    tu_assert_values("smoothed cross_entropy gradient", dy, want_dy, 1e-15, 1e-16);
    tu_tensor_free(ty);
    tu_tensor_free(tt);
    tu_tensor_free(dy);

    /* (2, 4 classes, 3) over class dim 1, targets with ignore_index 2, e = 0.1, scale 1.5 */
    ck_tensor *x = tu_tensor_new("x", CK_F64, SHAPE(2, 4, 3));
    ck_tensor *tg = tu_tensor_new("t", CK_I32, SHAPE(2, 3));
    ck_rng_stream s = ck_rng_keyed(9, 0, CK_PURPOSE_TEST, 0);
    for (int64_t i = 0; i < 24; i++)
        tu_tset(x, i, 2.0 * ck_rng_normal_f64(&s, (uint64_t)i));
    const int32_t cls[] = {0, 2, 3, 1, 2, 0};
    memcpy(tg->data, cls, sizeof cls);
    ck_loss_spec sp = {CK_LOSS_CROSS_ENTROPY, 1, true, 2, 0.1};
    ck_tensor *g = tu_tensor_new("g", CK_F64, SHAPE(2, 4, 3));
    const double scale = 1.5, h = 1e-6;
    ck_assert_int_eq(tu_cpu->ce_backward(tu_cpu, &sp, x, tg, scale, g, &err), CK_OK);
    for (int64_t i = 0; i < 24; i++) {
        double v = tu_tget(x, i), lp, lm;
        tu_tset(x, i, v + h);
        ck_assert_int_eq(tu_cpu->ce_forward(tu_cpu, &sp, x, tg, &lp, &err), CK_OK);
        tu_tset(x, i, v - h);
        ck_assert_int_eq(tu_cpu->ce_forward(tu_cpu, &sp, x, tg, &lm, &err), CK_OK);
        tu_tset(x, i, v);
        double numeric = scale * (lp - lm) / (2.0 * h);
        ck_assert_msg(fabs(tu_tget(g, i) - numeric) <= 1e-7 + 1e-5 * fabs(numeric),
                      "dy[%lld] = %.12g, central difference %.12g", (long long)i, tu_tget(g, i),
                      numeric);
    }
    /* label_smoothing 0 is the plain loss bit for bit */
    double l0, l_plain;
    sp.label_smoothing = 0.0;
    ck_assert_int_eq(tu_cpu->ce_forward(tu_cpu, &sp, x, tg, &l0, &err), CK_OK);
    ck_loss_spec plain = {CK_LOSS_CROSS_ENTROPY, 1, true, 2, 0.0};
    ck_assert_int_eq(tu_cpu->ce_forward(tu_cpu, &plain, x, tg, &l_plain, &err), CK_OK);
    ck_assert(l0 == l_plain);
    tu_tensor_free(x);
    tu_tensor_free(tg);
    tu_tensor_free(g);
}
END_TEST

// ----------------------------------------------------------------------------
// cases: the canary, and what the parser and graph builder refuse

START_TEST(gpt_canary_is_caught_and_bisected_to_the_attention_dropout)
{
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_file(&bc, "canary_gpt_stateful.json");
    ck_result r;
    ck_error err;
    ck_assert_msg(ck_run_case(b, &bc.g, CK_F32, &r, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_eq(r.verdict, CK_VERDICT_MISMATCH);
    ck_assert(r.pass); /* the case expects the mismatch */
    ck_bisect_opts o = {.noise_floor = true, .localise = true};
    ck_assert_msg(ck_bisect(b, &bc.g, CK_F32, &o, &r, &err) == CK_OK, "%s", err.msg);
    const ck_bisect_result *br = r.bisect;
    ck_assert(br != NULL);
    ck_assert_int_eq(br->step, 0);
    ck_assert_msg(br->forward.layer >= 0, "no forward culprit");
    ck_assert_str_eq(bc.g.nodes[br->forward.layer].spec->name, "b0_attn");
    ck_assert_int_eq(br->rng.layer, br->forward.layer);
    ck_assert_int_gt(br->rng.rng_differs, 0);
    bool found = false;
    for (int i = 0; i < br->n_causes; i++) {
        char line[CK_BISECT_LINE];
        ck_bisect_cause_text(&bc.g, &br->causes[i], line, sizeof line);
        found = found || (strstr(line, "attention dropout `b0_attn` drew a different "
                                       "mask on recomputation") &&
                          strstr(line, "rng policy `stateful`"));
    }
    ck_assert_msg(found, "the cause names the attention dropout");
    ck_result_free(&r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

static const struct {
    const char *json_layers; /* the layers (and loss) of a case over input [2, 4, 6] */
    const char *fragment;    /* of the one-line error */
} bad_cases[] = {
    {"[{\"name\": \"t\", \"op\": \"transpose\", \"dim0\": 1}]",
     "layers[0] (t).dim1: required for transpose"},
    {"[{\"name\": \"p\", \"op\": \"permute\", \"dims\": [0, 1, 1]}]",
     "permute: dims repeats dim 1"},
    {"[{\"name\": \"m\", \"op\": \"matmul\"}]",
     "layers[0] (m).units: required for matmul with one input"},
    {"[{\"name\": \"m\", \"op\": \"matmul\", \"units\": 3, \"transpose_b\": true}]",
     "layers[0] (m).transpose_b: applies to a second input"},
    {"[{\"name\": \"a\", \"op\": \"attention\", \"heads\": 4}]",
     "attention: heads 4 does not divide"},
    {"[{\"name\": \"r\", \"op\": \"reshape\", \"shape\": [5, -1]}]",
     "reshape: input [2, 4, 6] (48 elements) cannot take shape"},
    {"[{\"name\": \"n\", \"op\": \"layernorm\", \"normalized_shape\": [4]}]",
     "normalized_shape [4] is not the trailing dims of input [2, 4, 6] (omit it to normalise "
     "every non-batch dim)"},
    {"[{\"name\": \"n\", \"op\": \"rmsnorm\", \"normalized_shape\": [5]}]",
     "rmsnorm: normalized_shape [5] is not the trailing dims of input [2, 4, 6] (omit it to "
     "normalise the last dim)"},
    {"[{\"name\": \"g\", \"op\": \"groupnorm\", \"groups\": 3}]",
     "groupnorm: groups 3 does not divide the 4 channels"},
    {"[{\"name\": \"u\", \"op\": \"upsample1d\", \"scale\": 2, \"align_corners\": true}]",
     "align_corners: applies only to the linear modes"},
    {"[{\"name\": \"u\", \"op\": \"upsample1d\", \"scale\": 2, \"mode\": \"bilinear\"}]",
     "mode: must be one of"},
    {"[{\"name\": \"c\", \"op\": \"conv_transpose1d\", \"filters\": 2, \"kernel\": 3, "
     "\"output_padding\": 1}]",
     "output_padding: 1 in spatial dim 0 must be smaller than stride (1) or dilation (1)"},
    {"[{\"name\": \"p\", \"op\": \"maxpool1d\", \"pool\": 2, \"padding\": 2}]",
     "padding: 2 in spatial dim 0 is more than half the pool window 2"},
    {"[{\"name\": \"e\", \"op\": \"embedding\", \"vocab\": 4, \"units\": 2}]",
     "an embedding reads token ids"},
    {"[{\"name\": \"a\", \"op\": \"attention\", \"inputs\": [\"input\", \"input\"]}]",
     "attention takes 1 (q = k = v) or 3 (q, k, v) inputs, got 2"},
    {"[{\"name\": \"m\", \"op\": \"mul\", \"inputs\": [\"input\"]}]",
     "mul takes exactly 2 inputs, got 1"},
    {"[{\"name\": \"g\", \"op\": \"gelu\", \"approximate\": \"erf\"}]",
     "approximate: must be one of"},
};

START_TEST(bad_options_are_refused_with_their_json_path)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"name\": \"bad\", \"input\": {\"shape\": [2, 4, 6]}, \"layers\": %s}",
             bad_cases[_i].json_layers);
    ck_case c;
    ck_graph g;
    ck_error err = {{0}};
    ck_status st = ck_case_parse(text, strlen(text), "bad.json", &c, &err);
    if (st == CK_OK) {
        st = ck_graph_build(&c, &g, &err);
        if (st == CK_OK)
            ck_graph_free(&g);
        ck_case_free(&c);
    }
    ck_assert_msg(st == CK_ERR_INPUT, "accepted: %s", bad_cases[_i].json_layers);
    ck_assert_msg(strstr(err.msg, "bad.json") && strstr(err.msg, bad_cases[_i].fragment),
                  "message \"%s\" lacks \"%s\"", err.msg, bad_cases[_i].fragment);
}
END_TEST

START_TEST(token_inputs_feed_embeddings_only_and_losses_check_their_class_dim)
{
    static const char *const texts[][2] = {
        {"{\"name\": \"t\", \"input\": {\"shape\": [2, 4], \"dist\": \"tokens\", \"vocab\": 5}, "
         "\"layers\": [{\"name\": \"f\", \"op\": \"linear\", \"units\": 2}]}",
         "only an embedding layer can read them"},
        {"{\"name\": \"t\", \"input\": {\"shape\": [2, 4], \"dist\": \"tokens\"}, "
         "\"layers\": [{\"name\": \"f\", \"op\": \"linear\", \"units\": 2}]}",
         "input.vocab: required for \"dist\": \"tokens\""},
        {"{\"name\": \"t\", \"input\": {\"shape\": [2, 4], \"vocab\": 5}, "
         "\"layers\": [{\"name\": \"f\", \"op\": \"linear\", \"units\": 2}]}",
         "input.vocab: applies only to \"dist\": \"tokens\""},
        {"{\"name\": \"t\", \"input\": {\"shape\": [2, 4]}, \"loss\": {\"op\": \"mse\", "
         "\"ignore_index\": 0}, \"layers\": [{\"name\": \"f\", \"op\": \"linear\", \"units\": 2}]}",
         "loss.ignore_index: applies only to cross_entropy"},
        {"{\"name\": \"t\", \"input\": {\"shape\": [2, 4]}, \"loss\": {\"op\": \"cross_entropy\", "
         "\"class_dim\": 3}, \"layers\": [{\"name\": \"f\", \"op\": \"linear\", \"units\": 2}]}",
         "loss.class_dim: 3 is out of range for the output [2, 2]"},
    };
    for (int i = 0; i < COUNT(texts); i++) {
        ck_case c;
        ck_graph g;
        ck_error err = {{0}};
        ck_status st = ck_case_parse(texts[i][0], strlen(texts[i][0]), "t.json", &c, &err);
        if (st == CK_OK) {
            st = ck_graph_build(&c, &g, &err);
            if (st == CK_OK)
                ck_graph_free(&g);
            ck_case_free(&c);
        }
        ck_assert_msg(st == CK_ERR_INPUT && strstr(err.msg, texts[i][1]),
                      "case %d: \"%s\" lacks \"%s\"", i, err.msg, texts[i][1]);
    }
}
END_TEST

Suite *suite_ops_transformer(void)
{
    Suite *s = suite_create("ops_transformer");
    TCase *tc = tcase_create("gradcheck");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, every_op_passes_gradcheck_with_nonzero_gradients, 0, COUNT(rows));
    tcase_add_loop_test(tc, backward_accumulates, 0, COUNT(rows));
    suite_add_tcase(s, tc);

    tc = tcase_create("lowp");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, every_op_rounds_once_in_fp16_and_bf16, 0, 2 * COUNT(rows));
    suite_add_tcase(s, tc);

    tc = tcase_create("values");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, matmul_softmax_and_shape_ops_give_hand_values);
    tcase_add_test(tc, attention_is_causal_and_its_dropout_follows_the_stream);
    tcase_add_test(tc, embedding_rejects_ids_outside_the_vocabulary);
    tcase_add_test(tc, cross_entropy_over_a_class_dim_ignores_positions);
    tcase_add_test(tc, cross_entropy_label_smoothing_matches_hand_values_and_differences);
    suite_add_tcase(s, tc);

    tc = tcase_create("cases");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, gpt_canary_is_caught_and_bisected_to_the_attention_dropout);
    tcase_add_loop_test(tc, bad_options_are_refused_with_their_json_path, 0, COUNT(bad_cases));
    tcase_add_test(tc, token_inputs_feed_embeddings_only_and_losses_check_their_class_dim);
    suite_add_tcase(s, tc);
    return s;
}
