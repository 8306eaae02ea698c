/*
 * The CUDA backend's numerics that are plain C shared by host and device, run on the host
 * against the CPU backend bit for bit:
 *  - the direct fp64 convolution (backends/cuda/conv_direct.h), the engine of fp64 and
 *    mixed-dtype convolutions: forward, backward data, backward filter and bias, 1-D to 3-D,
 *    stride, dilation, symmetric and asymmetric padding, accumulating into non-zero
 *    gradients; and, composed as cuda_forward_wide/cuda_backward_wide compose it, a mixed
 *    fp16/fp32/bf16 call;
 *  - the round-to-odd accumulation into fp16/bf16 (backends/check/numerics.h) that
 *    cuda_convert and every gradient accumulation use, against an oracle written with
 *    nextafter, and against the CPU backend's convert.
 * The kernels in conv.cu and backend.cu call exactly these functions, one GPU
 * thread per element; what these tests cannot show is that the GPU runs them (docs/cuda.md).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/registry.h"
#include "backends/cuda/conv_direct.h"
#include "backends/check/numerics.h"
#include "backends/ref/ref_elem.h"
#include "harness/core/half.h"
#include "tests/test_util.h"

#define CONV(n, f, has_bias, ...)                                                          \
    {                                                                                      \
        .kind = CK_OP_CONV, .nsp = n, .filters = f, .bias = has_bias, .pad_mode =          \
            CK_PAD_EXPLICIT, __VA_ARGS__                                                   \
    }

static const struct {
    const char *desc;
    ck_op_params op;
    ck_shape in;
} rows[] = {
    {"conv1d k3 s2 pad lo 2 hi 1, bias",
     CONV(1, 3, true, .kernel = {3}, .stride = {2}, .dilation = {1}, .pad_lo = {2},
          .pad_hi = {1}),
     SHAPE_INIT(2, 2, 9)},
    {"conv1d k3 dilation 3 valid, no bias",
     CONV(1, 2, false, .kernel = {3}, .stride = {1}, .dilation = {3}), SHAPE_INIT(1, 2, 10)},
    {"conv1d k2 pad 3/3 wider than the kernel",
     CONV(1, 2, true, .kernel = {2}, .stride = {1}, .dilation = {1}, .pad_lo = {3},
          .pad_hi = {3}),
     SHAPE_INIT(1, 1, 4)},
    {"conv2d k3 same, bias",
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
    {"conv3d k3 same (the seed model's layer), no bias",
     CONV(3, 4, false, .kernel = {3, 3, 3}, .stride = {1, 1, 1}, .dilation = {1, 1, 1},
          .pad_lo = {1, 1, 1}, .pad_hi = {1, 1, 1}),
     SHAPE_INIT(1, 4, 5, 4, 6)},
    {"conv3d k2 same (even: pad lo 0 hi 1), bias",
     CONV(3, 2, true, .kernel = {2, 2, 2}, .stride = {1, 1, 1}, .dilation = {1, 1, 1},
          .pad_lo = {0, 0, 0}, .pad_hi = {1, 1, 1}),
     SHAPE_INIT(2, 2, 3, 4, 3)},
    {"conv3d k(2,3,2) s(2,1,3) dil(1,2,1) pad lo(1,0,0) hi(0,2,1), no bias",
     CONV(3, 2, false, .kernel = {2, 3, 2}, .stride = {2, 1, 3}, .dilation = {1, 2, 1},
          .pad_lo = {1, 0, 0}, .pad_hi = {0, 2, 1}),
     SHAPE_INIT(2, 1, 5, 6, 5)},
};

/* The tensors of one conv call in the given dtypes (x, w, b, y/dy, grads), random values,
 * gradients starting from non-zero values so that accumulation is checked too. */
typedef struct {
    ck_tensor *x, *w, *b, *y, *dy, *dx, *dw, *db;
} conv_set;

static ck_shape out_shape(const ck_op_params *op, ck_shape in)
{
    ck_shape s = in;
    s.dim[1] = op->filters;
    for (int a = 0; a < op->nsp; a++) {
        int64_t span = (int64_t)op->dilation[a] * (op->kernel[a] - 1) + 1;
        s.dim[2 + a] = (in.dim[2 + a] + op->pad_lo[a] + op->pad_hi[a] - span) / op->stride[a] + 1;
    }
    return s;
}

static void set_make(conv_set *s, const ck_op_params *op, ck_shape in, uint64_t seed,
                     const ck_dtype dt[8])
{
    ck_shape ws = {.ndim = 2 + op->nsp, .dim = {op->filters, in.dim[1]}};
    for (int a = 0; a < op->nsp; a++)
        ws.dim[2 + a] = op->kernel[a];
    const ck_shape os = out_shape(op, in), bs = SHAPE(op->filters);
    s->x = tu_tensor_rand("x", dt[0], in, seed, 0, true);
    s->w = tu_tensor_rand("layer.weight", dt[1], ws, seed, 1, false);
    s->b = op->bias ? tu_tensor_rand("layer.bias", dt[2], bs, seed, 2, false) : NULL;
    s->y = tu_tensor_new("y", dt[3], os);
    s->dy = tu_tensor_rand("dy", dt[4], os, seed, 3, true);
    s->dx = tu_tensor_rand("dx", dt[5], in, seed, 4, true);
    s->dw = tu_tensor_rand("dw", dt[6], ws, seed, 5, true);
    s->db = op->bias ? tu_tensor_rand("db", dt[7], bs, seed, 6, true) : NULL;
}

static void set_free(conv_set *s)
{
    ck_tensor *all[] = {s->x, s->w, s->b, s->y, s->dy, s->dx, s->dw, s->db};
    for (int i = 0; i < 8; i++)
        if (all[i])
            tu_tensor_free(all[i]);
}

/* The CPU backend's forward and backward on s (y written, grads accumulated). */
static void run_cpu(const char *desc, const ck_op_params *op, conv_set *s)
{
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    ck_op_io io;
    memset(&io, 0, sizeof io);
    io.n_in = 1;
    io.in[0] = s->x;
    io.weight = s->w;
    io.bias = s->b;
    io.out = s->y;
    tu_forward_ok(desc, op, &args, &io);
    ck_op_grads g;
    memset(&g, 0, sizeof g);
    g.dout = s->dy;
    g.din[0] = s->dx;
    g.dweight = s->dw;
    g.dbias = s->b ? s->db : NULL;
    tu_backward_ok(desc, op, &args, &io, &g);
}

static double *wide_copy(const ck_tensor *t)
{
    if (!t)
        return NULL;
    const int64_t n = ck_shape_numel(&t->shape);
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    ck_assert_ptr_nonnull(d);
    for (int64_t i = 0; i < n; i++)
        d[i] = tu_tget(t, i);
    return d;
}

/* What the CUDA backend does with s: every tensor fp64 -> the direct kernels on the
 * tensors themselves; mixed dtypes -> fp64 copies (gradients from zero), the direct
 * kernels, then outputs rounded once and gradients added with ck_convert_value (the
 * device's ck_acc), as cuda_forward_wide/cuda_backward_wide. */
static void run_direct(const char *desc, const ck_op_params *op, conv_set *s, bool all_f64)
{
    ck_conv_direct_geom g;
    ck_error err;
    ck_assert_msg(ck_conv_direct_setup(op, s->x, s->w, s->b, s->y, &g, &err) == CK_OK, "%s: %s",
                  desc, err.msg);
    double *x = wide_copy(s->x), *w = wide_copy(s->w), *b = wide_copy(s->b),
           *dy = wide_copy(s->dy);
    const int64_t ny = ck_shape_numel(&s->y->shape), nx = ck_shape_numel(&s->x->shape),
                  nw = ck_shape_numel(&s->w->shape), nb = s->b ? g.F : 0;
    double *y = calloc((size_t)ny, sizeof *y), *dx = calloc((size_t)nx, sizeof *dx),
           *dw = calloc((size_t)nw, sizeof *dw), *db = calloc((size_t)(nb ? nb : 1), sizeof *db);
    ck_assert(y && dx && dw && db);
    if (all_f64) { /* accumulate into the gradients themselves */
        memcpy(dx, s->dx->data, (size_t)nx * sizeof *dx);
        memcpy(dw, s->dw->data, (size_t)nw * sizeof *dw);
        if (nb)
            memcpy(db, s->db->data, (size_t)nb * sizeof *db);
    }
    for (int64_t i = 0; i < ny; i++)
        y[i] = ck_conv_direct_forward_at(&g, x, w, b, i);
    for (int64_t i = 0; i < nx; i++)
        dx[i] = ck_conv_direct_backward_data_at(&g, dy, w, dx[i], i);
    for (int64_t i = 0; i < nw; i++)
        dw[i] = ck_conv_direct_backward_filter_at(&g, x, dy, dw[i], i);
    for (int64_t f = 0; f < nb; f++)
        db[f] = ck_conv_direct_backward_bias_at(&g, dy, db[f], f);
    /* into the tensors: forward rounded once, gradients added with one rounding */
    for (int64_t i = 0; i < ny; i++)
        tu_tset(s->y, i, y[i]);
    ck_tensor *grads[] = {s->dx, s->dw, s->b ? s->db : NULL};
    double *vals[] = {dx, dw, db};
    for (int k = 0; k < 3; k++) {
        ck_tensor *t = grads[k];
        if (!t)
            continue;
        const bool low = t->dtype == CK_F16 || t->dtype == CK_BF16;
        for (int64_t i = 0; i < ck_shape_numel(&t->shape); i++)
            tu_tset(t, i, all_f64 ? vals[k][i]
                                  : ck_convert_value(tu_tget(t, i), vals[k][i], true, low));
    }
    free(x);
    free(w);
    free(b);
    free(dy);
    free(y);
    free(dx);
    free(dw);
    free(db);
}

static void assert_same_bits(const char *desc, const char *what, const ck_tensor *a,
                             const ck_tensor *b)
{
    if (!a)
        return;
    const size_t bytes = ck_tensor_bytes(a);
    if (memcmp(a->data, b->data, bytes) == 0)
        return;
    for (int64_t i = 0; i < ck_shape_numel(&a->shape); i++)
        REQUIRE(tu_tget(a, i) == tu_tget(b, i) || (isnan(tu_tget(a, i)) && isnan(tu_tget(b, i))),
                "%s: %s[%lld]: direct %.17g, cpu %.17g", desc, what, (long long)i,
                tu_tget(a, i), tu_tget(b, i));
    ck_abort_msg("%s: %s: equal values but different bits", desc, what);
}

static void check_row(int r, const ck_dtype dt[8], bool all_f64)
{
    conv_set cpu, dir;
    set_make(&cpu, &rows[r].op, rows[r].in, 900u + (uint64_t)r, dt);
    set_make(&dir, &rows[r].op, rows[r].in, 900u + (uint64_t)r, dt);
    run_cpu(rows[r].desc, &rows[r].op, &cpu);
    run_direct(rows[r].desc, &rows[r].op, &dir, all_f64);
    assert_same_bits(rows[r].desc, "y", dir.y, cpu.y);
    assert_same_bits(rows[r].desc, "dx", dir.dx, cpu.dx);
    assert_same_bits(rows[r].desc, "dw", dir.dw, cpu.dw);
    assert_same_bits(rows[r].desc, "db", dir.db, cpu.db);
    /* the check compares something: outputs and gradients are not all zero */
    bool any = false;
    for (int64_t i = 0; i < ck_shape_numel(&dir.y->shape); i++)
        any |= tu_tget(dir.y, i) != 0.0;
    ck_assert_msg(any, "%s: y is all zero", rows[r].desc);
    set_free(&cpu);
    set_free(&dir);
}

START_TEST(direct_fp64_conv_is_bitwise_the_cpu_reference)
{
    const ck_dtype f64[8] = {CK_F64, CK_F64, CK_F64, CK_F64, CK_F64, CK_F64, CK_F64, CK_F64};
    check_row(_i, f64, true);
}
END_TEST

START_TEST(mixed_dtype_conv_through_fp64_copies_is_bitwise_the_cpu_reference)
{
    /* an autocast recomputation: fp16 activations, fp32 weights and bias, bf16 and fp16
     * gradients: the CPU's wide path, and the CUDA backend's */
    const ck_dtype mixed[8] = {CK_F16, CK_F32, CK_F32, CK_F16, CK_F16, CK_F16, CK_F32, CK_BF16};
    check_row(_i, mixed, false);
}
END_TEST

// ----------------------------------------------------------------------------
// round to odd

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

/* Round to odd written another way, with nextafter: the nearest double s = a + b when the
 * sum is exact or s is odd, else s's neighbour on the side of the exact sum (whose error
 * e comes from Knuth's TwoSum). */
static double odd_oracle(double a, double b)
{
    const double s = a + b;
    const double bv = s - a;
    const double e = (a - (s - bv)) + (b - bv);
    if (e == 0.0 || !isfinite(s))
        return s;
    int ex = 0;
    (void)frexp(s, &ex);
    const double ulp = fabs(s) < 0x1p-1022 ? 0x1p-1074 : ldexp(1.0, ex - 53);
    if (s != 0.0 && fmod(fabs(s) / ulp, 2.0) == 1.0) /* the last significand bit is 1 */
        return s;
    return nextafter(s, e > 0.0 ? INFINITY : -INFINITY);
}

START_TEST(sum_round_odd_is_the_cpus_bit_for_bit)
{
    const double edge[] = {0.0, -0.0, 1.0, -1.0, 0x1p-1074, -0x1p-1074, 0x1p-24, 0x1.8p-11,
                           65504.0, 65520.0, 0x1.fffffffffffffp1023, -0x1.fffffffffffffp1023,
                           INFINITY, -INFINITY, 1e-300, 3.0000000000000004, 0x1.0000000000001p0};
    const int ne = (int)(sizeof edge / sizeof edge[0]);
    for (int i = 0; i < ne; i++)
        for (int j = 0; j < ne; j++) {
            const double a = ck_sum_round_odd(edge[i], edge[j]),
                         b = odd_oracle(edge[i], edge[j]);
            REQUIRE(memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)),
                    "%a + %a: %a vs the oracle's %a", edge[i], edge[j], a, b);
        }
    uint64_t st = 12345;
    int inexact = 0;
    for (int k = 0; k < 200000; k++) {
        /* fp16-ish values of different magnitudes, as gradient accumulation sees them */
        const double a = ((double)lcg(&st) / 9007199254740992.0 - 0.5) * ldexp(1.0, (int)(lcg(&st) % 40) - 20);
        const double b = ((double)lcg(&st) / 9007199254740992.0 - 0.5) * ldexp(1.0, (int)(lcg(&st) % 80) - 40);
        const double x = ck_sum_round_odd(a, b), y = odd_oracle(a, b);
        REQUIRE(memcmp(&x, &y, sizeof x) == 0, "%a + %a: %a vs the oracle's %a", a, b, x, y);
        inexact += x != a + b;
    }
    ck_assert_msg(inexact > 1000, "only %d of the sums were inexact: the test exercises nothing",
                  inexact);
}
END_TEST

START_TEST(round_odd_avoids_the_double_rounding_of_a_plain_sum)
{
    /* fp16: 1 + 2^-11 is halfway between 1 and 1 + 2^-10; adding 2^-60 makes it just above.
     * A plain double sum rounds the tiny part away and then ties to even (1.0); summing to
     * odd keeps it and rounds up, as the exact sum does. */
    const double old = 1.0 + 0x1p-11, v = 0x1p-60;
    const uint16_t plain = ck_f64_to_f16(ck_convert_value(old, v, true, false));
    const uint16_t odd = ck_f64_to_f16(ck_convert_value(old, v, true, true));
    ck_assert_uint_eq(plain, ck_f64_to_f16(1.0));
    ck_assert_uint_eq(odd, ck_f64_to_f16(1.0 + 0x1p-10));
    /* not accumulating: the value itself */
    ck_assert(ck_convert_value(123.0, 0.5, false, true) == 0.5);
}
END_TEST

/* convert (backend.h) accumulating into fp16/bf16, as cuda_convert's kernel computes each
 * element, against the CPU backend's convert: bitwise */
START_TEST(convert_accumulating_into_low_precision_matches_the_cpu)
{
    const ck_dtype dsts[] = {CK_F16, CK_BF16, CK_F32, CK_F64};
    const ck_dtype srcs[] = {CK_F32, CK_F64, CK_F16};
    ck_backend *cpu = NULL;
    ck_error cerr = {{0}};
    ck_assert_msg(ck_backend_create("ref", NULL, &cpu, &cerr) == CK_OK, "%s", cerr.msg);
    int differ_from_plain = 0;
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 3; s++) {
            const ck_shape sh = SHAPE(4096);
            ck_tensor *src = tu_tensor_rand("src", srcs[s], sh, 77 + (uint64_t)s, 0, true);
            ck_tensor *ref = tu_tensor_rand("dst", dsts[d], sh, 99, 1, true);
            ck_tensor *mine = tu_tensor_rand("dst", dsts[d], sh, 99, 1, true);
            /* elements whose double sum lands on a tie of the low dtype although the exact
             * sum lies just past it (only an fp64 source can carry the 2^-60) */
            const bool low_dst = dsts[d] == CK_F16 || dsts[d] == CK_BF16;
            const double tie = dsts[d] == CK_F16 ? 0x1p-11 : 0x1p-8;
            for (int64_t i = 0; srcs[s] == CK_F64 && low_dst && i < 64; i++) {
                const double sign = i % 2 ? -1.0 : 1.0;
                tu_tset(ref, i, sign * (double)(1 + i / 2 % 4));
                tu_tset(mine, i, sign * (double)(1 + i / 2 % 4));
                tu_tset(src, i, sign * (tie + 0x1p-60) * (double)(1 + i / 2 % 4) * 0x1p9);
            }
            const double scale = 0x1p-9;
            ck_error err;
            ck_assert_int_eq(cpu->convert(cpu, ref, src, scale, true, &err), CK_OK);
            const bool low = dsts[d] == CK_F16 || dsts[d] == CK_BF16;
            for (int64_t i = 0; i < 4096; i++) {
                const double old = tu_tget(mine, i), v = tu_tget(src, i) * scale;
                const double plain = old + v;
                tu_tset(mine, i, ck_convert_value(old, v, true, low));
                if (low) {
                    ck_tensor *t = tu_tensor_new("t", dsts[d], SHAPE(1));
                    tu_tset(t, 0, plain);
                    differ_from_plain += tu_tget(t, 0) != tu_tget(mine, i);
                    tu_tensor_free(t);
                }
            }
            REQUIRE(memcmp(ref->data, mine->data, ck_tensor_bytes(ref)) == 0,
                    "convert %s -> %s (accumulate): differs from the CPU backend",
                    ck_dtype_name(srcs[s]), ck_dtype_name(dsts[d]));
            tu_tensor_free(src);
            tu_tensor_free(ref);
            tu_tensor_free(mine);
        }
    cpu->destroy(cpu);
    ck_assert_msg(differ_from_plain > 0, "no element where summing to odd matters: the test "
                  "would pass with a plain sum too");
}
END_TEST

/* The CUDA backend mirrors the reference (backends/ref), so its kernels are checked against
 * "ref" bitwise, not against the fast cpu backend (fp32 accumulation). */
static void ref_setup(void)
{
    ck_error err = {{0}};
    tu_cpu = NULL;
    ck_assert_msg(ck_backend_create("ref", NULL, &tu_cpu, &err) == CK_OK, "ref: %s", err.msg);
}

Suite *suite_cuda_numerics(void)
{
    Suite *s = suite_create("cuda_numerics");
    TCase *tc = tcase_create("conv_direct");
    tcase_add_checked_fixture(tc, ref_setup, tu_cpu_teardown);
    const int n = (int)(sizeof rows / sizeof rows[0]);
    tcase_add_loop_test(tc, direct_fp64_conv_is_bitwise_the_cpu_reference, 0, n);
    tcase_add_loop_test(tc, mixed_dtype_conv_through_fp64_copies_is_bitwise_the_cpu_reference,
                        0, n);
    suite_add_tcase(s, tc);
    TCase *ro = tcase_create("round_odd");
    tcase_add_test(ro, sum_round_odd_is_the_cpus_bit_for_bit);
    tcase_add_test(ro, round_odd_avoids_the_double_rounding_of_a_plain_sum);
    tcase_add_test(ro, convert_accumulating_into_low_precision_matches_the_cpu);
    suite_add_tcase(s, ro);
    return s;
}
