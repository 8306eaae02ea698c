/*
 * CPU backend in fp16 and bf16 (harness/precision.md): every op, forward and backward,
 * every loss and the optimizer, against the same op in fp64 and in fp32 on the same
 * low-representable inputs.
 *
 * Three runs per op and low dtype L, with identical values in every tensor:
 *   low  - activations (x, y, dy, dx) and linear/conv weight, bias and their gradients in
 *          L; batchnorm/layernorm weight, bias, their gradients, running buffers and every
 *          `saved` tensor in fp32, as precision.md stores them;
 *   ref  - the same, with every L tensor in fp64 (the fp32 ones stay fp32);
 *   fp32 - every tensor in fp32.
 *
 * Bounds asserted, and why they hold:
 *  - forward, L outputs: BITWISE equal to the ref output rounded once to L (0 ulp). Each
 *    kernel loads every tensor exactly into a double and runs the very computation the
 *    fp64 op runs (the fp64 kernel, or the same double expression), so the only
 *    difference is the final rounding, done once.
 *  - backward, L gradients (pre-filled with L values `old`; the ref run starts from zero
 *    and so yields the bare contribution c): BITWISE equal to the exact sum old + c
 *    rounded once to L. The expected value is computed here independently of the backend
 *    (TwoSum and an explicit tie test), and a dedicated case checks a sum where rounding
 *    the double sum old + c would round twice and give the other neighbour.
 *  - fp32 tensors of the low run (running stats, saved statistics, batchnorm/layernorm
 *    parameter gradients): BITWISE equal to the fp32 run's, which computes the same
 *    doubles from the same values and rounds them the same way.
 *  - against the fp32 run: |low - round_L(v32)| <= 1 ulp_L, where ulp_L is the spacing of
 *    L's grid at the value. low = round_L(v64) (above), and the fp32 op is within a few
 *    fp32 ulps of v64 (it accumulates conv/linear/avgpool sums in float, or rounds a
 *    double once), 2^13 (fp16) or 2^16 (bf16) times finer than L's grid; round_L is
 *    monotone, so values less than one L ulp apart round to the same or adjacent L
 *    values. The premise |v32 - v64| < ulp_L is asserted with it.
 *  - losses: the double loss is bitwise the same in all three runs (same values, same
 *    double arithmetic); dy = scale dL/dy is bitwise the ref dy rounded once.
 *  - optimizer (fp32 param and state, L gradient): the updated parameter and state are
 *    bitwise those of the fp64-gradient and fp32-gradient steps.
 *  - dropout: the mask (which elements are zero) is the same in fp32, fp16 and bf16.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/registry.h"
#include "harness/core/half.h"
#include "harness/core/rng.h"
#include "tests/test_util.h"

// ----------------------------------------------------------------------------
// tensors and the low formats

static int64_t numel(const ck_tensor *t) { return ck_shape_numel(&t->shape); }

static uint16_t low_bits(double v, ck_dtype dt)
{
    return dt == CK_F16 ? ck_f64_to_f16(v) : ck_f64_to_bf16(v);
}

/* v must be representable in t's dtype (every value here is) */
static void tset_exact(ck_tensor *t, int64_t i, double v)
{
    tu_tset(t, i, v);
    REQUIRE(tu_tget(t, i) == v, "tset: %a is not representable in %s", v, ck_dtype_name(t->dtype));
}

static void tfill(ck_tensor *t, const double *v)
{
    for (int64_t i = 0; i < numel(t); i++)
        tset_exact(t, i, v[i]);
}

/* Spacing of dt's grid at v: 2^(max(floor(log2 |v|), emin) - mantissa bits). */
static double ulp_low(double v, ck_dtype dt)
{
    const int mbits = dt == CK_F16 ? 10 : 7, emin = dt == CK_F16 ? -14 : -126;
    int e = emin + 1;
    if (v != 0.0 && isfinite(v))
        frexp(fabs(v), &e);
    return ldexp(1.0, (e - 1 < emin ? emin : e - 1) - mbits);
}

/* old + c, both doubles, rounded ONCE to dt, computed without the backend's code: the
 * double sum s and its exact error e (TwoSum); s rounds like the exact sum unless s is a
 * tie of dt's grid and e != 0, in which case the exact sum lies off the tie on e's side. */
static double round_sum_once(double old, double c, ck_dtype dt)
{
    const double s = old + c;
    const double bv = s - old;
    const double e = (old - (s - bv)) + (c - bv);
    const double r = ck_round_to_dtype(s, dt);
    if (e == 0.0 || !isfinite(s) || fabs(s - r) != ulp_low(s, dt) / 2)
        return r;
    const double other = 2 * s - r; /* the neighbour on the other side of the tie */
    return e > 0 ? fmax(r, other) : fmin(r, other);
}

// ----------------------------------------------------------------------------
// the ops

typedef struct {
    const char *desc;
    ck_op_kind kind;
    int nsp, n_in;
    ck_shape in[3];
    int kernel[3], stride[3], dilation[3], pad_lo[3], pad_hi[3], scale[3];
    int64_t units, filters;
    bool no_bias, eval;
    double slope, rate, stddev;
} lp_row;

static const lp_row lp_rows[] = {
    {.desc = "linear", .kind = CK_OP_LINEAR, .n_in = 1, .in = {SHAPE_INIT(2, 3, 5)}, .units = 4},
    {.desc = "linear without bias", .kind = CK_OP_LINEAR, .n_in = 1, .in = {SHAPE_INIT(3, 6)},
     .units = 2, .no_bias = true},
    {.desc = "conv1d stride 2 padded", .kind = CK_OP_CONV, .nsp = 1, .n_in = 1,
     .in = {SHAPE_INIT(2, 3, 9)}, .filters = 4, .kernel = {3}, .stride = {2}, .pad_lo = {1},
     .pad_hi = {1}},
    {.desc = "conv2d dilated, asymmetric padding", .kind = CK_OP_CONV, .nsp = 2, .n_in = 1,
     .in = {SHAPE_INIT(2, 2, 6, 5)}, .filters = 3, .kernel = {3, 2}, .stride = {1, 2},
     .dilation = {2, 1}, .pad_lo = {1, 0}, .pad_hi = {1, 1}},
    {.desc = "conv3d without bias", .kind = CK_OP_CONV, .nsp = 3, .n_in = 1,
     .in = {SHAPE_INIT(1, 2, 4, 4, 3)}, .filters = 2, .kernel = {2, 2, 2}, .no_bias = true},
    {.desc = "maxpool1d", .kind = CK_OP_MAXPOOL, .nsp = 1, .n_in = 1, .in = {SHAPE_INIT(2, 3, 8)},
     .kernel = {2}, .stride = {2}},
    {.desc = "maxpool2d overlapping windows", .kind = CK_OP_MAXPOOL, .nsp = 2, .n_in = 1,
     .in = {SHAPE_INIT(1, 2, 5, 5)}, .kernel = {3, 3}, .stride = {2, 2}},
    {.desc = "maxpool3d", .kind = CK_OP_MAXPOOL, .nsp = 3, .n_in = 1,
     .in = {SHAPE_INIT(1, 2, 4, 4, 4)}, .kernel = {2, 2, 2}, .stride = {2, 2, 2}},
    {.desc = "avgpool2d", .kind = CK_OP_AVGPOOL, .nsp = 2, .n_in = 1,
     .in = {SHAPE_INIT(2, 2, 4, 6)}, .kernel = {2, 3}, .stride = {2, 3}},
    {.desc = "avgpool3d overlapping windows", .kind = CK_OP_AVGPOOL, .nsp = 3, .n_in = 1,
     .in = {SHAPE_INIT(1, 1, 4, 4, 4)}, .kernel = {3, 3, 3}, .stride = {1, 1, 1}},
    {.desc = "upsample1d", .kind = CK_OP_UPSAMPLE, .nsp = 1, .n_in = 1, .in = {SHAPE_INIT(2, 3, 4)},
     .scale = {2}},
    {.desc = "upsample2d", .kind = CK_OP_UPSAMPLE, .nsp = 2, .n_in = 1,
     .in = {SHAPE_INIT(1, 2, 3, 3)}, .scale = {2, 3}},
    {.desc = "upsample3d", .kind = CK_OP_UPSAMPLE, .nsp = 3, .n_in = 1,
     .in = {SHAPE_INIT(1, 1, 2, 2, 2)}, .scale = {2, 2, 2}},
    {.desc = "relu", .kind = CK_OP_RELU, .n_in = 1, .in = {SHAPE_INIT(3, 17)}},
    {.desc = "leaky_relu", .kind = CK_OP_LEAKY_RELU, .n_in = 1, .in = {SHAPE_INIT(3, 17)},
     .slope = 0.1},
    {.desc = "gelu", .kind = CK_OP_GELU, .n_in = 1, .in = {SHAPE_INIT(3, 17)}},
    {.desc = "tanh", .kind = CK_OP_TANH, .n_in = 1, .in = {SHAPE_INIT(3, 17)}},
    {.desc = "sigmoid", .kind = CK_OP_SIGMOID, .n_in = 1, .in = {SHAPE_INIT(3, 17)}},
    {.desc = "batchnorm1d train", .kind = CK_OP_BATCHNORM, .n_in = 1, .in = {SHAPE_INIT(4, 3, 5)}},
    {.desc = "batchnorm2d train", .kind = CK_OP_BATCHNORM, .n_in = 1,
     .in = {SHAPE_INIT(2, 3, 3, 3)}},
    {.desc = "batchnorm2d eval", .kind = CK_OP_BATCHNORM, .n_in = 1, .in = {SHAPE_INIT(2, 3, 2, 2)},
     .eval = true},
    {.desc = "layernorm", .kind = CK_OP_LAYERNORM, .n_in = 1, .in = {SHAPE_INIT(3, 4, 5)}},
    {.desc = "dropout", .kind = CK_OP_DROPOUT, .n_in = 1, .in = {SHAPE_INIT(4, 64)}, .rate = 0.5},
    {.desc = "gaussian_noise", .kind = CK_OP_GAUSSIAN_NOISE, .n_in = 1, .in = {SHAPE_INIT(3, 16)},
     .stddev = 0.5},
    {.desc = "add of three", .kind = CK_OP_ADD, .n_in = 3,
     .in = {SHAPE_INIT(2, 3, 4), SHAPE_INIT(2, 3, 4), SHAPE_INIT(2, 3, 4)}},
    {.desc = "concat", .kind = CK_OP_CONCAT, .n_in = 2,
     .in = {SHAPE_INIT(2, 2, 3), SHAPE_INIT(2, 3, 3)}},
    {.desc = "flatten", .kind = CK_OP_FLATTEN, .n_in = 1, .in = {SHAPE_INIT(2, 3, 2, 2)}},
};

static ck_op_params make_op(const lp_row *r)
{
    ck_op_params op;
    ck_op_params_default(&op, r->kind, r->nsp);
    for (int a = 0; a < r->nsp; a++) {
        op.kernel[a] = r->kernel[a] ? r->kernel[a] : 1;
        op.stride[a] = r->stride[a] ? r->stride[a] : 1;
        op.dilation[a] = r->dilation[a] ? r->dilation[a] : 1;
        op.pad_lo[a] = r->pad_lo[a];
        op.pad_hi[a] = r->pad_hi[a];
        op.scale[a] = r->scale[a] ? r->scale[a] : 1;
    }
    if (r->pad_lo[0] || r->pad_lo[1] || r->pad_hi[0] || r->pad_hi[1])
        op.pad_mode = CK_PAD_EXPLICIT;
    op.units = r->units;
    op.filters = r->filters;
    op.bias = !r->no_bias;
    op.eval = r->eval;
    if (r->slope != 0.0)
        op.slope = r->slope;
    if (r->rate != 0.0)
        op.rate = r->rate;
    op.stddev = r->stddev;
    return op;
}

/* Shapes of everything an op touches, by the test's own rules. */
typedef struct {
    ck_shape out, w, b, stat, saved;
    bool has_w, has_b, has_running, has_saved;
    bool norm; /* batchnorm/layernorm: w, b, running buffers and saved stay fp32 */
} lp_geom;

static lp_geom geom_of(const lp_row *r, const ck_op_params *op)
{
    lp_geom g;
    memset(&g, 0, sizeof g);
    const ck_shape in = r->in[0];
    g.out = in;
    switch (r->kind) {
    case CK_OP_LINEAR:
        g.out.dim[in.ndim - 1] = r->units;
        g.w = SHAPE(r->units, in.dim[in.ndim - 1]);
        g.b = SHAPE(r->units);
        g.has_w = true;
        g.has_b = op->bias;
        break;
    case CK_OP_CONV:
        g.out.dim[1] = r->filters;
        g.w.ndim = in.ndim;
        g.w.dim[0] = r->filters;
        g.w.dim[1] = in.dim[1];
        for (int a = 0; a < r->nsp; a++) {
            int64_t extent = (int64_t)op->dilation[a] * (op->kernel[a] - 1) + 1;
            g.out.dim[2 + a] =
                (in.dim[2 + a] + op->pad_lo[a] + op->pad_hi[a] - extent) / op->stride[a] + 1;
            g.w.dim[2 + a] = op->kernel[a];
        }
        g.b = SHAPE(r->filters);
        g.has_w = true;
        g.has_b = op->bias;
        break;
    case CK_OP_MAXPOOL:
    case CK_OP_AVGPOOL:
        for (int a = 0; a < r->nsp; a++)
            g.out.dim[2 + a] = (in.dim[2 + a] - op->kernel[a]) / op->stride[a] + 1;
        break;
    case CK_OP_UPSAMPLE:
        for (int a = 0; a < r->nsp; a++)
            g.out.dim[2 + a] = in.dim[2 + a] * op->scale[a];
        break;
    case CK_OP_BATCHNORM:
        g.w = g.b = g.stat = SHAPE(in.dim[1]);
        g.saved = SHAPE(2, in.dim[1]);
        g.has_w = g.has_b = g.has_running = g.has_saved = g.norm = true;
        break;
    case CK_OP_LAYERNORM:
        g.w = g.b = ck_shape_make(in.ndim - 1, in.dim + 1);
        g.saved = SHAPE(2, in.dim[0]);
        g.has_w = g.has_b = g.has_saved = g.norm = true;
        break;
    case CK_OP_CONCAT:
        g.out.dim[1] = 0;
        for (int k = 0; k < r->n_in; k++)
            g.out.dim[1] += r->in[k].dim[1];
        break;
    case CK_OP_FLATTEN:
        g.out = SHAPE(in.dim[0], ck_shape_numel(&in) / in.dim[0]);
        break;
    default:
        break;
    }
    return g;
}

// ----------------------------------------------------------------------------
// values shared by the three runs, and the runs

typedef struct {
    double *in[3], *w, *b, *rm, *rv, *dout;
    double *old_din[3], *old_dw, *old_db; /* gradients' prior contents */
} lp_values;

/* n normal draws times `scale` (plus `shift`), each rounded to dt: representable in dt,
 * fp32 and fp64 alike; zeros replaced by 1 when `nonzero`. */
static double *draws(ck_shape s, uint32_t slot, double scale, double shift, ck_dtype dt,
                     bool nonzero)
{
    const int64_t n = ck_shape_numel(&s);
    double *v = malloc((size_t)n * sizeof *v);
    ck_assert_ptr_nonnull(v);
    ck_rng_stream st = ck_rng_keyed(4242, slot, CK_PURPOSE_TEST, 0);
    for (int64_t i = 0; i < n; i++) {
        v[i] = ck_round_to_dtype(shift + scale * ck_rng_normal_f64(&st, (uint64_t)i), dt);
        if (nonzero && v[i] == 0.0)
            v[i] = 1.0;
    }
    return v;
}

static void values_make(lp_values *v, const lp_row *r, const lp_geom *g, ck_dtype dt)
{
    memset(v, 0, sizeof *v);
    for (int k = 0; k < r->n_in; k++) {
        v->in[k] = draws(r->in[k], 10 + (uint32_t)k, 1.5, 0.0, dt, r->kind == CK_OP_DROPOUT);
        v->old_din[k] = draws(r->in[k], 20 + (uint32_t)k, 0.25, 0.0, dt, false);
    }
    v->dout = draws(g->out, 30, 1.0, 0.0, dt, false);
    if (g->has_w) {
        v->w = draws(g->w, 40, 0.5, g->norm ? 1.0 : 0.0, dt, false);
        v->old_dw = draws(g->w, 41, 0.25, 0.0, dt, false);
    }
    if (g->has_b) {
        v->b = draws(g->b, 50, 0.5, 0.0, dt, false);
        v->old_db = draws(g->b, 51, 0.25, 0.0, dt, false);
    }
    if (g->has_running) {
        v->rm = draws(g->stat, 60, 0.3, 0.0, dt, false);
        v->rv = draws(g->stat, 61, 0.2, 1.0, dt, false);
        for (int64_t i = 0; i < ck_shape_numel(&g->stat); i++)
            v->rv[i] = fabs(v->rv[i]) + 0.25; /* positive, still representable */
    }
}

static void values_free(lp_values *v)
{
    double *all[] = {v->in[0], v->in[1], v->in[2], v->w, v->b, v->rm, v->rv, v->dout,
                     v->old_din[0], v->old_din[1], v->old_din[2], v->old_dw, v->old_db};
    for (int i = 0; i < COUNT(all); i++)
        free(all[i]);
}

typedef struct {
    ck_tensor *in[3], *out, *w, *b, *rm, *rv, *nbt, *saved;
    ck_tensor *dout, *din[3], *dw, *db;
    ck_op_io io;
    ck_op_grads grads;
} lp_run;

static const char *in_names[3] = {"x0", "x1", "x2"};
static const char *din_names[3] = {"dx0", "dx1", "dx2"};

/* One run: `act` is the dtype of activations (and of linear/conv parameters); the
 * normalisation parameters, running buffers and saved statistics are fp32. Gradients hold
 * the prior values when `with_old`, zeros otherwise. */
static void run_make(lp_run *run, const lp_row *r, const lp_geom *g, const lp_values *v,
                     ck_dtype act, bool with_old)
{
    memset(run, 0, sizeof *run);
    const ck_dtype pdt = g->norm ? CK_F32 : act;
    run->io.n_in = r->n_in;
    for (int k = 0; k < r->n_in; k++) {
        run->in[k] = tu_tensor_new(in_names[k], act, r->in[k]);
        tfill(run->in[k], v->in[k]);
        run->din[k] = tu_tensor_new(din_names[k], act, r->in[k]);
        if (with_old)
            tfill(run->din[k], v->old_din[k]);
        run->io.in[k] = run->in[k];
        run->grads.din[k] = run->din[k];
    }
    run->out = tu_tensor_new("y", act, g->out);
    run->dout = tu_tensor_new("dy", act, g->out);
    tfill(run->dout, v->dout);
    if (g->has_w) {
        run->w = tu_tensor_new("weight", pdt, g->w);
        tfill(run->w, v->w);
        run->dw = tu_tensor_new("dweight", pdt, g->w);
        if (with_old)
            tfill(run->dw, v->old_dw);
    }
    if (g->has_b) {
        run->b = tu_tensor_new("bias", pdt, g->b);
        tfill(run->b, v->b);
        run->db = tu_tensor_new("dbias", pdt, g->b);
        if (with_old)
            tfill(run->db, v->old_db);
    }
    if (g->has_running) {
        run->rm = tu_tensor_new("running_mean", CK_F32, g->stat);
        tfill(run->rm, v->rm);
        run->rv = tu_tensor_new("running_var", CK_F32, g->stat);
        tfill(run->rv, v->rv);
        ck_shape scalar;
        memset(&scalar, 0, sizeof scalar);
        run->nbt = tu_tensor_new("num_batches_tracked", CK_I64, scalar);
    }
    if (g->has_saved)
        run->saved = tu_tensor_new("saved", CK_F32, g->saved);
    run->io.out = run->out;
    run->io.weight = run->w;
    run->io.bias = run->b;
    run->io.running_mean = run->rm;
    run->io.running_var = run->rv;
    run->io.num_batches_tracked = run->nbt;
    run->io.saved = run->saved;
    run->grads.dout = run->dout;
    run->grads.dweight = run->dw;
    run->grads.dbias = run->db;
}

static void run_free(lp_run *run)
{
    ck_tensor *all[] = {run->in[0], run->in[1], run->in[2], run->out, run->w, run->b,
                        run->rm, run->rv, run->nbt, run->saved, run->dout, run->din[0],
                        run->din[1], run->din[2], run->dw, run->db};
    for (int i = 0; i < COUNT(all); i++)
        tu_tensor_free(all[i]);
}

static ck_fwd_args fwd_args_for(ck_op_kind kind)
{
    ck_fwd_args a;
    memset(&a, 0, sizeof a);
    a.update_running_stats = true;
    a.rng = ck_rng_keyed(2024, 3, kind == CK_OP_GAUSSIAN_NOISE ? CK_PURPOSE_NOISE
                                                               : CK_PURPOSE_DROPOUT, 1);
    return a;
}

static void forward_ok(const char *desc, const char *run, const ck_op_params *op,
                       const ck_fwd_args *args, lp_run *r)
{
    ck_error err = {{0}};
    ck_status st = tu_cpu->forward(tu_cpu, op, args, &r->io, &err);
    ck_assert_msg(st == CK_OK, "%s (%s run): forward failed: %s", desc, run, err.msg);
}

static void backward_ok(const char *desc, const char *run, const ck_op_params *op,
                        const ck_fwd_args *args, lp_run *r)
{
    ck_error err = {{0}};
    ck_status st = tu_cpu->backward(tu_cpu, op, args, &r->io, &r->grads, &err);
    ck_assert_msg(st == CK_OK, "%s (%s run): backward failed: %s", desc, run, err.msg);
}

// ----------------------------------------------------------------------------
// the assertions (bounds: see the file comment)

/* low[i] == ref[i] rounded once to low's dtype, bit for bit */
static void assert_rounded_once(const char *desc, const ck_tensor *low, const ck_tensor *ref)
{
    const uint16_t *bits = low->data;
    for (int64_t i = 0; i < numel(low); i++) {
        const double want = tu_tget(ref, i);
        REQUIRE(bits[i] == low_bits(want, low->dtype),
                "%s: %s[%lld] = %a (0x%04x), want %a rounded once = 0x%04x", desc, low->name,
                (long long)i, tu_tget(low, i), bits[i], want, low_bits(want, low->dtype));
    }
}

/* low[i] == old[i] + ref[i] (ref: the contribution alone) rounded once, bit for bit */
static void assert_accumulated_once(const char *desc, const ck_tensor *low, const double *old,
                                    const ck_tensor *ref)
{
    const uint16_t *bits = low->data;
    for (int64_t i = 0; i < numel(low); i++) {
        const double want = round_sum_once(old[i], tu_tget(ref, i), low->dtype);
        REQUIRE(bits[i] == low_bits(want, low->dtype),
                "%s: %s[%lld] = %a, want %a + %a rounded once = %a", desc, low->name,
                (long long)i, tu_tget(low, i), old[i], tu_tget(ref, i), want);
    }
}

/* |low[i] - round_L(f32[i])| <= 1 ulp_L given |f32[i] - wide(i)| < 1 ulp_L, where wide is
 * the fp64 value (old[i] + ref[i] for gradients, ref[i] when old is NULL) */
static void assert_within_ulp_of_fp32(const char *desc, const ck_tensor *low,
                                      const ck_tensor *f32, const double *old,
                                      const ck_tensor *ref)
{
    const ck_dtype dt = low->dtype;
    for (int64_t i = 0; i < numel(low); i++) {
        const double v32 = tu_tget(f32, i), wide = (old ? old[i] : 0.0) + tu_tget(ref, i);
        const double ulp = fmax(ulp_low(v32, dt), ulp_low(wide, dt));
        REQUIRE(fabs(v32 - wide) < ulp,
                "%s: premise: fp32 %s[%lld] = %a is not within one %s ulp of fp64 %a", desc,
                f32->name, (long long)i, v32, ck_dtype_name(dt), wide);
        const double diff = fabs(tu_tget(low, i) - ck_round_to_dtype(v32, dt));
        REQUIRE(diff <= ulp, "%s: %s[%lld] = %a is %g %s ulps from fp32 %a rounded", desc,
                low->name, (long long)i, tu_tget(low, i), diff / ulp, ck_dtype_name(dt), v32);
    }
}

/* two fp32 tensors hold the same bits */
static void assert_same_f32(const char *desc, const ck_tensor *a, const ck_tensor *b)
{
    ck_assert_int_eq(a->dtype, CK_F32);
    ck_assert_int_eq(b->dtype, CK_F32);
    for (int64_t i = 0; i < numel(a); i++) {
        uint32_t ua, ub;
        memcpy(&ua, (const float *)a->data + i, 4);
        memcpy(&ub, (const float *)b->data + i, 4);
        REQUIRE(ua == ub, "%s: %s[%lld] = %a, the fp32 run has %a", desc, a->name,
                (long long)i, tu_tget(a, i), tu_tget(b, i));
    }
}

// ----------------------------------------------------------------------------
// every op, forward and backward

START_TEST(every_op_rounds_once_and_stays_within_one_ulp_of_fp32)
{
    const lp_row *r = &lp_rows[_i / 2];
    const ck_dtype dt = _i % 2 ? CK_BF16 : CK_F16;
    char desc[96];
    snprintf(desc, sizeof desc, "%s in %s", r->desc, ck_dtype_name(dt));
    const ck_op_params op = make_op(r);
    const lp_geom g = geom_of(r, &op);
    lp_values v;
    values_make(&v, r, &g, dt);
    lp_run low, ref, f32;
    run_make(&low, r, &g, &v, dt, true);
    run_make(&ref, r, &g, &v, CK_F64, false);
    run_make(&f32, r, &g, &v, CK_F32, true);
    const ck_fwd_args args = fwd_args_for(r->kind);

    /* forward */
    forward_ok(desc, "low", &op, &args, &low);
    forward_ok(desc, "fp64", &op, &args, &ref);
    forward_ok(desc, "fp32", &op, &args, &f32);
    assert_rounded_once(desc, low.out, ref.out);
    assert_within_ulp_of_fp32(desc, low.out, f32.out, NULL, ref.out);
    if (g.has_running) {
        /* fp32 buffers, from the same low inputs: the fp32 run's bits, and the ref's */
        assert_same_f32(desc, low.rm, f32.rm);
        assert_same_f32(desc, low.rv, f32.rv);
        assert_same_f32(desc, low.rm, ref.rm);
        assert_same_f32(desc, low.rv, ref.rv);
        ck_assert_int_eq(((int64_t *)low.nbt->data)[0], r->eval ? 0 : 1);
    }
    if (g.has_saved) {
        assert_same_f32(desc, low.saved, f32.saved);
        assert_same_f32(desc, low.saved, ref.saved);
    }

    /* backward */
    backward_ok(desc, "low", &op, &args, &low);
    backward_ok(desc, "fp64", &op, &args, &ref);
    backward_ok(desc, "fp32", &op, &args, &f32);
    for (int k = 0; k < r->n_in; k++) {
        assert_accumulated_once(desc, low.din[k], v.old_din[k], ref.din[k]);
        assert_within_ulp_of_fp32(desc, low.din[k], f32.din[k], v.old_din[k], ref.din[k]);
    }
    ck_tensor *lp[] = {low.dw, low.db}, *rp[] = {ref.dw, ref.db}, *fp[] = {f32.dw, f32.db};
    const double *old[] = {v.old_dw, v.old_db};
    for (int p = 0; p < 2; p++) {
        if (!lp[p])
            continue;
        if (g.norm) {
            assert_same_f32(desc, lp[p], fp[p]);
        } else {
            assert_accumulated_once(desc, lp[p], old[p], rp[p]);
            assert_within_ulp_of_fp32(desc, lp[p], fp[p], old[p], rp[p]);
        }
    }
    run_free(&low);
    run_free(&ref);
    run_free(&f32);
    values_free(&v);
}
END_TEST

/* The gradient sum is rounded once from the exact old + contribution, not from their
 * double sum: leaky_relu backward at x < 0 adds dy * slope, and slope is a double that
 * puts the exact sum just above a tie of the low grid while the double sum is the tie. */
START_TEST(gradient_accumulation_rounds_the_exact_sum_once)
{
    const ck_dtype dt = _i ? CK_BF16 : CK_F16;
    const double half_ulp = dt == CK_F16 ? 0x1p-11 : 0x1p-8;
    ck_op_params op;
    ck_op_params_default(&op, CK_OP_LEAKY_RELU, 0);
    op.slope = half_ulp + 0x1p-60; /* a double; 1 + slope is not: the double sum drops 2^-60 */
    ck_assert(op.slope != half_ulp && 1.0 + op.slope == 1.0 + half_ulp);
    const ck_shape s = SHAPE(2);
    ck_tensor *x = tu_tensor_new("x", dt, s), *y = tu_tensor_new("y", dt, s);
    ck_tensor *dy = tu_tensor_new("dy", dt, s), *dx = tu_tensor_new("dx", dt, s);
    const double xv[] = {-1.0, -1.0}, dyv[] = {1.0, -1.0}, old[] = {1.0, -1.0};
    tfill(x, xv);
    tfill(dy, dyv);
    tfill(dx, old);
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    ck_op_io io = {.n_in = 1, .in = {x}, .out = y};
    ck_op_grads gr = {.dout = dy, .din = {dx}};
    ck_error err = {{0}};
    ck_assert_int_eq(tu_cpu->backward(tu_cpu, &op, &args, &io, &gr, &err), CK_OK);
    /* exact 1 + half_ulp + 2^-60 is above the tie: 1 + ulp; rounding the double sum (the
     * tie) would give 1.0; likewise for -1 */
    ck_assert_msg(tu_tget(dx, 0) == 1.0 + 2 * half_ulp, "%s: %a", ck_dtype_name(dt),
                  tu_tget(dx, 0));
    ck_assert_msg(tu_tget(dx, 1) == -1.0 - 2 * half_ulp, "%s: %a", ck_dtype_name(dt),
                  tu_tget(dx, 1));
    ck_assert(round_sum_once(1.0, op.slope, dt) == 1.0 + 2 * half_ulp);
    tu_tensor_free(x);
    tu_tensor_free(y);
    tu_tensor_free(dy);
    tu_tensor_free(dx);
}
END_TEST

/* Sums whose exact value 1 + h + 2^-24 (h: half an ulp of the low dtype at 1) lies just
 * above a tie of the low grid: rounded once from double they give 1 + 2h. Accumulated in
 * fp32 (the fp32 kernels of linear, conv and avgpool) or rounded to fp32 on the way (a
 * double rounding), 2^-24 is itself a tie in fp32 and goes to even, 1 + h, which is the
 * low tie and goes to even again: 1.0. The fp32 run shows the first step. */
typedef struct {
    const char *desc;
    ck_op_kind kind;
    int n_in;
} tie_row;

static const tie_row tie_rows[] = {
    {"linear", CK_OP_LINEAR, 1},
    {"conv1d", CK_OP_CONV, 1},
    {"avgpool1d", CK_OP_AVGPOOL, 1},
    {"add", CK_OP_ADD, 3},
};

START_TEST(sums_are_accumulated_in_double_and_rounded_once)
{
    const tie_row *r = &tie_rows[_i / 2];
    const ck_dtype dt = _i % 2 ? CK_BF16 : CK_F16;
    const double h = dt == CK_F16 ? 0x1p-11 : 0x1p-8;
    ck_op_params op;
    ck_op_params_default(&op, r->kind, r->kind == CK_OP_LINEAR || r->kind == CK_OP_ADD ? 0 : 1);
    ck_shape xs = SHAPE(1, 3), ws = SHAPE(1, 3), ys = SHAPE(1, 1), bs = SHAPE(1);
    double xv[4] = {1.0, h, 0x1p-24, 0.0}, wv[3] = {1.0, 1.0, 1.0}, bv[1] = {0.0};
    switch (r->kind) {
    case CK_OP_LINEAR: op.units = 1; break;
    case CK_OP_CONV:
        op.filters = 1;
        xs = SHAPE(1, 3, 1);
        ws = SHAPE(1, 3, 1);
        ys = SHAPE(1, 1, 1);
        break;
    case CK_OP_AVGPOOL: /* the mean of 4 (1 + h + 2^-24), 0, 0, 0 spread over 4 values */
        op.kernel[0] = op.stride[0] = 4;
        xs = SHAPE(1, 1, 4);
        ys = SHAPE(1, 1, 1);
        xv[0] = 4.0;
        xv[1] = 4 * h;
        xv[2] = 0x1p-22;
        break;
    default: /* add: x0 = 1, x1 = h, x2 = 2^-24 */
        xs = ys = SHAPE(1);
        break;
    }
    /* the reference backend's rule (the fast cpu backend accumulates linear/conv sums in
     * fp32 by design: tests/test_cpu_backend.c checks its rule) */
    ck_backend *ref = NULL;
    ck_error cerr = {{0}};
    ck_assert_msg(ck_backend_create("ref", NULL, &ref, &cerr) == CK_OK, "%s", cerr.msg);
    const ck_dtype runs[] = {dt, CK_F32};
    double got[2];
    for (int k = 0; k < 2; k++) {
        ck_tensor *x[3] = {NULL, NULL, NULL}, *w = NULL, *b = NULL;
        ck_tensor *y = tu_tensor_new("y", runs[k], ys);
        ck_op_io io = {.n_in = r->n_in, .out = y};
        for (int j = 0; j < r->n_in; j++) {
            x[j] = tu_tensor_new(in_names[j], runs[k], xs);
            if (r->n_in == 1)
                tfill(x[j], xv);
            else
                tset_exact(x[j], 0, xv[j]);
            io.in[j] = x[j];
        }
        if (r->kind == CK_OP_LINEAR || r->kind == CK_OP_CONV) {
            w = tu_tensor_new("weight", runs[k], ws);
            tfill(w, wv);
            b = tu_tensor_new("bias", runs[k], bs);
            tfill(b, bv);
            io.weight = w;
            io.bias = b;
        }
        ck_fwd_args args;
        memset(&args, 0, sizeof args);
        ck_error err = {{0}};
        ck_assert_msg(ref->forward(ref, &op, &args, &io, &err) == CK_OK, "%s: %s", r->desc,
                      err.msg);
        got[k] = tu_tget(y, 0);
        for (int j = 0; j < 3; j++)
            tu_tensor_free(x[j]);
        tu_tensor_free(w);
        tu_tensor_free(b);
        tu_tensor_free(y);
    }
    ref->destroy(ref);
    ck_assert_msg(got[0] == 1.0 + 2 * h, "%s in %s: %a, want %a", r->desc, ck_dtype_name(dt),
                  got[0], 1.0 + 2 * h);
    /* the fp32 op lands on the low tie, so rounding it would give 1.0: the case tells
     * one rounding from two */
    ck_assert_msg(got[1] == 1.0 + h && ck_round_to_dtype(got[1], dt) == 1.0,
                  "%s in fp32: %a", r->desc, got[1]);
}
END_TEST

START_TEST(dropout_mask_is_the_same_in_every_dtype)
{
    const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16};
    const ck_shape s = SHAPE(8, 128);
    double *xv = draws(s, 70, 1.0, 0.0, CK_BF16, true); /* nonzero, exact in all three */
    ck_op_params op;
    ck_op_params_default(&op, CK_OP_DROPOUT, 0);
    op.rate = 0.3;
    const ck_fwd_args args = fwd_args_for(CK_OP_DROPOUT);
    bool *mask = calloc((size_t)ck_shape_numel(&s), sizeof *mask);
    ck_assert_ptr_nonnull(mask);
    int64_t dropped = 0;
    for (int d = 0; d < COUNT(dts); d++) {
        ck_tensor *x = tu_tensor_new("x", dts[d], s), *y = tu_tensor_new("y", dts[d], s);
        ck_tensor *dx = tu_tensor_new("dx", dts[d], s);
        tfill(x, xv);
        ck_op_io io = {.n_in = 1, .in = {x}, .out = y};
        ck_op_grads gr = {.dout = x, .din = {dx}}; /* dy = x: nonzero everywhere */
        ck_error err = {{0}};
        ck_assert_int_eq(tu_cpu->forward(tu_cpu, &op, &args, &io, &err), CK_OK);
        ck_assert_int_eq(tu_cpu->backward(tu_cpu, &op, &args, &io, &gr, &err), CK_OK);
        for (int64_t i = 0; i < ck_shape_numel(&s); i++) {
            const bool kept = tu_tget(y, i) != 0.0;
            if (d == 0) {
                mask[i] = kept;
                dropped += !kept;
            }
            REQUIRE(kept == mask[i], "%s: element %lld is %s, fp32 has it %s",
                    ck_dtype_name(dts[d]), (long long)i, kept ? "kept" : "dropped",
                    mask[i] ? "kept" : "dropped");
            REQUIRE((tu_tget(dx, i) != 0.0) == mask[i], "%s: dx[%lld] disagrees with the mask",
                    ck_dtype_name(dts[d]), (long long)i);
        }
        tu_tensor_free(x);
        tu_tensor_free(y);
        tu_tensor_free(dx);
    }
    /* rate 0.3 of 1024: a mask that is neither empty nor full */
    ck_assert_int_gt(dropped, 200);
    ck_assert_int_lt(dropped, 420);
    free(mask);
    free(xv);
}
END_TEST

// ----------------------------------------------------------------------------
// losses

START_TEST(every_loss_in_low_precision)
{
    const ck_loss_kind kind = (ck_loss_kind)(_i / 2);
    const ck_dtype dt = _i % 2 ? CK_BF16 : CK_F16;
    char desc[96];
    snprintf(desc, sizeof desc, "%s loss in %s", ck_loss_kind_name(kind), ck_dtype_name(dt));
    const ck_shape ys = SHAPE(2, 3, 4), ts = SHAPE(2, 4);
    double *yv = draws(ys, 80, 2.0, 0.0, dt, false);
    double *tv = draws(ys, 81, 1.0, 0.0, dt, false);
    const double scale = 1024.0; /* a loss scale, as mixed-precision training uses */
    const ck_dtype runs[] = {dt, CK_F64, CK_F32};
    ck_tensor *y[3], *t[3], *dy[3];
    double loss[3];
    ck_tensor *cls = tu_tensor_new("classes", CK_I32, ts);
    for (int64_t i = 0; i < ck_shape_numel(&ts); i++)
        ((int32_t *)cls->data)[i] = (int32_t)((i * 7 + 1) % 3);
    for (int k = 0; k < 3; k++) {
        y[k] = tu_tensor_new("y", runs[k], ys);
        tfill(y[k], yv);
        t[k] = NULL;
        if (kind == CK_LOSS_MSE) {
            t[k] = tu_tensor_new("target", runs[k], ys);
            tfill(t[k], tv);
        }
        const ck_tensor *target = kind == CK_LOSS_CROSS_ENTROPY ? cls : t[k];
        dy[k] = tu_tensor_new("dy", runs[k], ys);
        ck_error err = {{0}};
        ck_assert_msg(tu_cpu->loss_forward(tu_cpu, kind, y[k], target, &loss[k], &err) == CK_OK,
                      "%s: %s", desc, err.msg);
        ck_assert_msg(tu_cpu->loss_backward(tu_cpu, kind, y[k], target, scale, dy[k], false, &err) ==
                          CK_OK,
                      "%s: %s", desc, err.msg);
    }
    ck_assert_msg(loss[0] == loss[1] && loss[0] == loss[2], "%s: losses %.17g, fp64 %.17g, "
                  "fp32 %.17g", desc, loss[0], loss[1], loss[2]);
    assert_rounded_once(desc, dy[0], dy[1]);
    assert_within_ulp_of_fp32(desc, dy[0], dy[2], NULL, dy[1]);
    for (int k = 0; k < 3; k++) {
        tu_tensor_free(y[k]);
        tu_tensor_free(t[k]);
        tu_tensor_free(dy[k]);
    }
    tu_tensor_free(cls);
    free(yv);
    free(tv);
}
END_TEST

// ----------------------------------------------------------------------------
// optimizer: fp32 master parameter and state, low-dtype gradient

START_TEST(optimizer_reads_a_low_precision_gradient)
{
    const ck_optimizer_kind kind = (ck_optimizer_kind)(_i / 2);
    const ck_dtype dt = _i % 2 ? CK_BF16 : CK_F16;
    char desc[96];
    snprintf(desc, sizeof desc, "%s with a %s gradient", ck_optimizer_kind_name(kind),
             ck_dtype_name(dt));
    const ck_optimizer opt = {.kind = kind, .lr = 0.01, .momentum = 0.9, .beta1 = 0.9,
                              .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-3};
    const ck_shape s = SHAPE(5, 7);
    double *pv = draws(s, 90, 1.0, 0.0, CK_F32, false);
    const ck_dtype gdt[] = {dt, CK_F64, CK_F32};
    ck_tensor *p[3], *s0[3], *s1[3], *g[3];
    for (int k = 0; k < 3; k++) {
        p[k] = tu_tensor_new("layer.weight", CK_F32, s);
        tfill(p[k], pv);
        s0[k] = tu_tensor_new("state0", CK_F32, s);
        s1[k] = tu_tensor_new("state1", CK_F32, s);
        g[k] = tu_tensor_new("grad", gdt[k], s);
    }
    for (int64_t step = 1; step <= 3; step++) {
        double *gv = draws(s, 91 + (uint32_t)step, 1000.0, 0.0, dt, false);
        for (int k = 0; k < 3; k++) {
            tfill(g[k], gv);
            ck_error err = {{0}};
            ck_assert_msg(tu_cpu->optimizer_step(tu_cpu, &opt, step, 1.0 / 1024.0, p[k], g[k],
                                                 kind == CK_OPT_SGD ? NULL : s0[k],
                                                 kind == CK_OPT_ADAM || kind == CK_OPT_ADAMW
                                                     ? s1[k]
                                                     : NULL,
                                                 &err) == CK_OK,
                          "%s: %s", desc, err.msg);
        }
        free(gv);
    }
    for (int k = 1; k < 3; k++) {
        assert_same_f32(desc, p[0], p[k]);
        assert_same_f32(desc, s0[0], s0[k]);
        assert_same_f32(desc, s1[0], s1[k]);
    }
    for (int k = 0; k < 3; k++) {
        tu_tensor_free(p[k]);
        tu_tensor_free(s0[k]);
        tu_tensor_free(s1[k]);
        tu_tensor_free(g[k]);
    }
    free(pv);
}
END_TEST

START_TEST(cpu_backend_supports_fp16_and_bf16)
{
    for (int k = 0; k < CK_OP_KIND_COUNT; k++) {
        ck_op_params op;
        ck_op_params_default(&op, (ck_op_kind)k, 0);
        ck_assert(tu_cpu->supports(tu_cpu, &op, CK_F16));
        ck_assert(tu_cpu->supports(tu_cpu, &op, CK_BF16));
        ck_assert(tu_cpu->supports(tu_cpu, &op, CK_F32));
        ck_assert(!tu_cpu->supports(tu_cpu, &op, CK_I32));
    }
}
END_TEST

Suite *suite_ops_lowp(void)
{
    Suite *s = suite_create("ops_lowp");
    TCase *tc = tcase_create("ops");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, every_op_rounds_once_and_stays_within_one_ulp_of_fp32, 0,
                        2 * COUNT(lp_rows));
    tcase_add_loop_test(tc, gradient_accumulation_rounds_the_exact_sum_once, 0, 2);
    tcase_add_loop_test(tc, sums_are_accumulated_in_double_and_rounded_once, 0,
                        2 * COUNT(tie_rows));
    tcase_add_test(tc, dropout_mask_is_the_same_in_every_dtype);
    tcase_add_test(tc, cpu_backend_supports_fp16_and_bf16);
    suite_add_tcase(s, tc);

    tc = tcase_create("loss_optim");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_add_loop_test(tc, every_loss_in_low_precision, 0, 2 * CK_LOSS_KIND_COUNT);
    tcase_add_loop_test(tc, optimizer_reads_a_low_precision_gradient, 0,
                        2 * CK_OPT_KIND_COUNT);
    suite_add_tcase(s, tc);
    return s;
}
