/*
 * The cpu backend's delegated ops, its fp32 layout kernels and its NaN/Inf count, bit for
 * bit:
 *  - ops without a fast kernel, split into element ranges or samples across threads
 *    (backends/cpu/delegate.c), give the reference backend's bits, forward and backward, in
 *    fp32, fp16 and bf16, with 1, 2 and 3 threads, on shapes large enough to be split;
 *  - the fp32 kernels for relu, max pooling, concat and nearest upsampling give the
 *    reference's bits on inputs full of ties, NaNs, signed zeros and Infs, on every ISA
 *    path the machine has and 1, 2 and 3 threads; so do the fp32 layernorm kernel, the
 *    fp32 attention on values outside its GEMM path's range, and the fp32 optimizer step
 *    (every optimizer, three steps);
 *  - the fp32 GELU (tanh form) kernel, not the reference's bits: the same bits on every
 *    ISA path and thread count, within one ulp of the formula in long double;
 *  - the fp32 attention's GEMM path, not the reference's bits: the same bits on every ISA
 *    path and thread count, within the GEMM tolerance of the reference;
 *  - the count_nonfinite capability (backends/cpu/nonfinite.c) gives the counts, first index
 *    and kind of a host scan (ck_count_nonfinite), for every float dtype, with planted NaN
 *    and Inf, on 1, 2 and 3 threads and on the portable and the machine's SIMD path.
 * No timing is asserted.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/backend.h"
#include "backends/cpu/kernels.h"
#include "backends/registry.h"
#include "harness/engine/act_finite.h"
#include "tests/test_util.h"

static ck_backend *make_cpu(int threads, const char *isa)
{
    ck_backend *b = NULL;
    ck_error err = {{0}};
    ck_assert_msg(ck_backend_cpu_create_with(&b, threads, isa, &err) == CK_OK, "cpu: %s",
                  err.msg);
    return b;
}

// ----------------------------------------------------------------------------
// delegated ops against the reference

typedef struct {
    const char *desc;
    ck_op_kind kind;
    int nsp;
    int n_in;
    ck_shape in[3];
    ck_shape out;
} delegate_row;

static const delegate_row delegate_rows[] = {
    {"gelu tanh, 70000 elements", CK_OP_GELU, 0, 1, {SHAPE_INIT(7, 100, 100)}, SHAPE_INIT(7, 100, 100)},
    {"gelu exact", CK_OP_GELU, 0, 1, {SHAPE_INIT(5, 20000)}, SHAPE_INIT(5, 20000)},
    {"sigmoid", CK_OP_SIGMOID, 0, 1, {SHAPE_INIT(3, 33333)}, SHAPE_INIT(3, 33333)},
    {"add of 3", CK_OP_ADD, 0, 3, {SHAPE_INIT(2, 40001), SHAPE_INIT(2, 40001), SHAPE_INIT(2, 40001)},
     SHAPE_INIT(2, 40001)},
    {"maxpool2d k2 s2", CK_OP_MAXPOOL, 2, 1, {SHAPE_INIT(3, 4, 16, 18)}, SHAPE_INIT(3, 4, 8, 9)},
    {"maxpool2d k3 s2 (overlapping)", CK_OP_MAXPOOL, 2, 1, {SHAPE_INIT(3, 2, 9, 11)},
     SHAPE_INIT(3, 2, 4, 5)},
    {"upsample2d nearest x2", CK_OP_UPSAMPLE, 2, 1, {SHAPE_INIT(3, 4, 6, 5)}, SHAPE_INIT(3, 4, 12, 10)},
    {"concat of 2", CK_OP_CONCAT, 0, 2, {SHAPE_INIT(3, 2, 5, 4), SHAPE_INIT(3, 3, 5, 4)},
     SHAPE_INIT(3, 5, 5, 4)},
    {"softmax dim 1", CK_OP_SOFTMAX, 0, 1, {SHAPE_INIT(3, 7, 5)}, SHAPE_INIT(3, 7, 5)},
    {"attention causal, 2 heads", CK_OP_ATTENTION, 0, 3,
     {SHAPE_INIT(3, 6, 8), SHAPE_INIT(3, 6, 8), SHAPE_INIT(3, 6, 4)}, SHAPE_INIT(3, 6, 4)},
};

static ck_op_params row_op(const delegate_row *r)
{
    ck_op_params p;
    memset(&p, 0, sizeof p);
    ck_op_params_default(&p, r->kind, r->nsp);
    if (r->kind == CK_OP_GELU)
        p.gelu_tanh = strstr(r->desc, "tanh") != NULL;
    if (r->kind == CK_OP_MAXPOOL) {
        const int k = strstr(r->desc, "k3") ? 3 : 2;
        p.kernel[0] = p.kernel[1] = k;
        p.stride[0] = p.stride[1] = 2;
    }
    if (r->kind == CK_OP_UPSAMPLE)
        p.scale[0] = p.scale[1] = 2;
    if (r->kind == CK_OP_SOFTMAX)
        p.dim = 1;
    if (r->kind == CK_OP_ATTENTION) {
        p.heads = 2;
        p.causal = true;
    }
    return p;
}

/* t[0..n_in): inputs, [3]: out, [4]: dout, [5..5+n_in): din (non-zero: backward adds) */
static void make_tensors(const delegate_row *r, ck_dtype dt, ck_tensor *t[8])
{
    for (int i = 0; i < r->n_in; i++) {
        t[i] = tu_tensor_rand("in", dt, r->in[i], 11, (uint32_t)i, true);
        t[5 + i] = tu_tensor_rand("din", dt, r->in[i], 12, (uint32_t)i, false);
    }
    t[3] = tu_tensor_new("out", dt, r->out);
    t[4] = tu_tensor_rand("dout", dt, r->out, 13, 0, true);
}

static void run_op(ck_backend *b, const delegate_row *r, const ck_op_params *op, ck_tensor *t[8])
{
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    ck_op_io io;
    memset(&io, 0, sizeof io);
    io.n_in = r->n_in;
    for (int i = 0; i < r->n_in; i++)
        io.in[i] = t[i];
    io.out = t[3];
    ck_error err = {{0}};
    ck_assert_msg(b->forward(b, op, &args, &io, &err) == CK_OK, "%s forward: %s", r->desc,
                  err.msg);
    ck_op_grads g;
    memset(&g, 0, sizeof g);
    g.dout = t[4];
    for (int i = 0; i < r->n_in; i++)
        g.din[i] = t[5 + i];
    ck_assert_msg(b->backward(b, op, &args, &io, &g, &err) == CK_OK, "%s backward: %s", r->desc,
                  err.msg);
}

START_TEST(test_delegated_ops_bitwise_ref)
{
    const delegate_row *r = &delegate_rows[_i];
    const ck_op_params op = row_op(r);
    const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16};
    ck_backend *ref = NULL;
    ck_error err = {{0}};
    ck_assert(ck_backend_create("ref", NULL, &ref, &err) == CK_OK);
    for (int d = 0; d < 3; d++) {
        /* fp32 gelu (tanh form) runs the cpu backend's own kernel (gelu.c), tested below */
        if (dts[d] == CK_F32 && op.kind == CK_OP_GELU && op.gelu_tanh)
            continue;
        /* and fp32 attention the GEMM kernels of attention_gemm.c, tested below */
        if (dts[d] == CK_F32 && op.kind == CK_OP_ATTENTION)
            continue;
        ck_tensor *want[8] = {0};
        make_tensors(r, dts[d], want);
        run_op(ref, r, &op, want);
        for (int threads = 1; threads <= 3; threads++) {
            ck_backend *cpu = make_cpu(threads, NULL);
            ck_tensor *got[8] = {0};
            make_tensors(r, dts[d], got);
            run_op(cpu, r, &op, got);
            for (int k = 3; k < 5 + r->n_in; k++) {
                if (k == 4)
                    continue;
                REQUIRE(memcmp(got[k]->data, want[k]->data, ck_tensor_bytes(want[k])) == 0,
                        "%s in %s, %d threads: %s differs from ref bitwise", r->desc,
                        ck_dtype_name(dts[d]), threads, k == 3 ? "output" : "input gradient");
            }
            for (int k = 0; k < 8; k++)
                tu_tensor_free(got[k]);
            cpu->destroy(cpu);
        }
        for (int k = 0; k < 8; k++)
            tu_tensor_free(want[k]);
    }
    ref->destroy(ref);
}
END_TEST

// ----------------------------------------------------------------------------
// the fp32 kernels for relu, add, max pooling, concat and nearest upsampling (pointwise.c,
// pool.c, shape.c, upsample.c): the reference's bits on every ISA path and thread count,
// on inputs full of ties, NaNs (the first one in a window wins), signed zeros and Infs

typedef struct {
    const char *desc;
    ck_op_kind kind;
    int nsp, n_in;
    int k[3], stride[3], scale[3];
    ck_shape in[2];
    ck_shape out;
} layout_row;

static const layout_row layout_rows[] = {
    {"maxpool2d k2 s2, odd sizes", CK_OP_MAXPOOL, 2, 1, {2, 2}, {2, 2}, {0},
     {SHAPE_INIT(3, 5, 19, 37)}, SHAPE_INIT(3, 5, 9, 18)},
    {"maxpool2d k2 s2, 8-wide rows", CK_OP_MAXPOOL, 2, 1, {2, 2}, {2, 2}, {0},
     {SHAPE_INIT(2, 3, 16, 64)}, SHAPE_INIT(2, 3, 8, 32)},
    {"maxpool2d k3 s3", CK_OP_MAXPOOL, 2, 1, {3, 3}, {3, 3}, {0}, {SHAPE_INIT(2, 3, 10, 17)},
     SHAPE_INIT(2, 3, 3, 5)},
    {"maxpool2d k3 s2 (overlapping: backward delegated)", CK_OP_MAXPOOL, 2, 1, {3, 3}, {2, 2},
     {0}, {SHAPE_INIT(2, 3, 11, 13)}, SHAPE_INIT(2, 3, 5, 6)},
    {"maxpool3d k2 s2", CK_OP_MAXPOOL, 3, 1, {2, 2, 2}, {2, 2, 2}, {0},
     {SHAPE_INIT(2, 2, 6, 9, 20)}, SHAPE_INIT(2, 2, 3, 4, 10)},
    {"maxpool1d k2 s2", CK_OP_MAXPOOL, 1, 1, {2}, {2}, {0}, {SHAPE_INIT(3, 4, 41)},
     SHAPE_INIT(3, 4, 20)},
    {"upsample2d nearest x2", CK_OP_UPSAMPLE, 2, 1, {0}, {0}, {2, 2}, {SHAPE_INIT(3, 5, 7, 9)},
     SHAPE_INIT(3, 5, 14, 18)},
    {"upsample2d nearest x3 x1", CK_OP_UPSAMPLE, 2, 1, {0}, {0}, {3, 1},
     {SHAPE_INIT(2, 3, 5, 6)}, SHAPE_INIT(2, 3, 15, 6)},
    {"upsample3d nearest x2", CK_OP_UPSAMPLE, 3, 1, {0}, {0}, {2, 2, 2},
     {SHAPE_INIT(2, 2, 3, 4, 5)}, SHAPE_INIT(2, 2, 6, 8, 10)},
    {"concat of 2, 150000 elements", CK_OP_CONCAT, 0, 2, {0}, {0}, {0},
     {SHAPE_INIT(3, 7, 50, 40), SHAPE_INIT(3, 18, 50, 40)}, SHAPE_INIT(3, 25, 50, 40)},
    {"relu, 100003 elements", CK_OP_RELU, 0, 1, {0}, {0}, {0}, {SHAPE_INIT(7, 14286)},
     SHAPE_INIT(7, 14286)},
    {"add of 2, 100003 elements", CK_OP_ADD, 0, 2, {0}, {0}, {0},
     {SHAPE_INIT(7, 14286), SHAPE_INIT(7, 14286)}, SHAPE_INIT(7, 14286)},
    {"add of 1, 11 elements", CK_OP_ADD, 0, 1, {0}, {0}, {0}, {SHAPE_INIT(11)}, SHAPE_INIT(11)},
};

static ck_op_params layout_op(const layout_row *r)
{
    ck_op_params p;
    memset(&p, 0, sizeof p);
    ck_op_params_default(&p, r->kind, r->nsp);
    for (int a = 0; a < r->nsp; a++) {
        if (r->kind == CK_OP_MAXPOOL) {
            p.kernel[a] = r->k[a];
            p.stride[a] = r->stride[a];
        }
        if (r->kind == CK_OP_UPSAMPLE)
            p.scale[a] = r->scale[a];
    }
    return p;
}

/* values on a coarse grid (ties in most windows), with NaNs, signed zeros and Infs */
static ck_tensor *tricky_tensor(const char *name, ck_shape shape, uint32_t stream)
{
    ck_tensor *t = tu_tensor_rand(name, CK_F32, shape, 31, stream, true);
    const int64_t n = ck_shape_numel(&shape);
    for (int64_t i = 0; i < n; i++) {
        float *v = (float *)t->data + i;
        *v = floorf(*v * 2.0f) / 2.0f;
        const uint32_t h = (uint32_t)(i * 2654435761u + stream * 40503u) >> 24;
        if (h < 3)
            *v = NAN;
        else if (h == 3)
            *v = -0.0f;
        else if (h == 4)
            *v = 0.0f;
        else if (h == 5)
            *v = i % 2 ? -INFINITY : INFINITY;
    }
    return t;
}

/* t[0..n_in): inputs, [3]: out, [4]: dout, [5..5+n_in): din */
static void layout_tensors(const layout_row *r, ck_tensor *t[8])
{
    for (int i = 0; i < r->n_in; i++) {
        t[i] = tricky_tensor("in", r->in[i], (uint32_t)i);
        t[5 + i] = tricky_tensor("din", r->in[i], 10u + (uint32_t)i);
    }
    t[3] = tu_tensor_new("out", CK_F32, r->out);
    t[4] = tricky_tensor("dout", r->out, 20);
}

/* the op's forward and backward on b; relu's backward reads the output (as the executor
 * calls it), once accumulating into din and once with din0_fresh into a second buffer (add:
 * a copy of dout that is din[0] and dout at once, so din[1] reads dout after din[0] took
 * it: -0 became +0) */
static void layout_run(ck_backend *b, const layout_row *r, ck_tensor *t[8], ck_tensor *fresh)
{
    const ck_op_params op = layout_op(r);
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    ck_op_io io;
    memset(&io, 0, sizeof io);
    io.n_in = r->n_in;
    for (int i = 0; i < r->n_in; i++)
        io.in[i] = t[i];
    io.out = t[3];
    ck_error err = {{0}};
    ck_assert_msg(b->forward(b, &op, &args, &io, &err) == CK_OK, "%s forward: %s", r->desc,
                  err.msg);
    ck_op_grads g;
    memset(&g, 0, sizeof g);
    g.dout = t[4];
    for (int i = 0; i < r->n_in; i++)
        g.din[i] = t[5 + i];
    ck_assert_msg(b->backward(b, &op, &args, &io, &g, &err) == CK_OK, "%s backward: %s",
                  r->desc, err.msg);
    if (fresh) {
        g.din[0] = fresh;
        g.din0_fresh = true;
        if (r->kind == CK_OP_ADD) {
            memcpy(fresh->data, t[4]->data, ck_tensor_bytes(fresh));
            g.dout = fresh;
        }
        ck_assert_msg(b->backward(b, &op, &args, &io, &g, &err) == CK_OK,
                      "%s backward (fresh): %s", r->desc, err.msg);
    }
}

START_TEST(test_fast_layout_ops_bitwise_ref)
{
    const layout_row *r = &layout_rows[_i];
    const bool with_fresh = r->kind == CK_OP_RELU || r->kind == CK_OP_ADD; /* a fresh din[0] too */
    ck_backend *ref = NULL;
    ck_error err = {{0}};
    ck_assert(ck_backend_create("ref", NULL, &ref, &err) == CK_OK);
    ck_tensor *want[8] = {0};
    layout_tensors(r, want);
    ck_tensor *want_fresh = with_fresh ? tu_tensor_new("fresh", CK_F32, r->in[0]) : NULL;
    layout_run(ref, r, want, want_fresh);
    const char *isas[] = {"portable", "avx2", "avx512"};
    const int best = (int)cpk_isa_detect();
    for (int s = 0; s <= best; s++)
        for (int threads = 1; threads <= 3; threads++) {
            ck_backend *cpu = make_cpu(threads, isas[s]);
            ck_tensor *got[8] = {0};
            layout_tensors(r, got);
            ck_tensor *got_fresh = with_fresh ? tu_tensor_new("fresh", CK_F32, r->in[0]) : NULL;
            layout_run(cpu, r, got, got_fresh);
            for (int k = 3; k < 5 + r->n_in; k++) {
                if (k == 4)
                    continue;
                REQUIRE(memcmp(got[k]->data, want[k]->data, ck_tensor_bytes(want[k])) == 0,
                        "%s, %s, %d threads: %s differs from ref bitwise", r->desc, isas[s],
                        threads, k == 3 ? "output" : "input gradient");
            }
            if (with_fresh)
                REQUIRE(memcmp(got_fresh->data, want_fresh->data, ck_tensor_bytes(want_fresh)) == 0,
                        "%s, %s, %d threads: the fresh input gradient differs from ref", r->desc,
                        isas[s], threads);
            for (int k = 0; k < 8; k++)
                tu_tensor_free(got[k]);
            tu_tensor_free(got_fresh);
            cpu->destroy(cpu);
        }
    for (int k = 0; k < 8; k++)
        tu_tensor_free(want[k]);
    tu_tensor_free(want_fresh);
    ref->destroy(ref);
}
END_TEST

// ----------------------------------------------------------------------------
// the fp32 attention kernels (backends/cpu/attention_gemm.c, attention.c)
//  - the GEMM path (values in range): the same bits on every ISA path and thread count,
//    causal or not, square or not, one block of query rows or several; within the cpu
//    backend's GEMM tolerance of the reference (1e-5 |ref| + 1e-5 max |ref| per element,
//    the op table's LIB class, which linear and conv are held to);
//  - values out of the GEMM path's range (a NaN, an Inf, a value above 2^20 in q, k or v,
//    above 2^40 in dy): the reference's double arithmetic, bit for bit, NaN and Inf
//    where the reference has them

typedef struct {
    const char *desc;
    int64_t N, Lq, Lk, H, Dk, Dv;
    bool causal;
    bool missing_dq; /* backward without a gradient for q */
} attn_row;

static const attn_row attn_rows[] = {
    {"causal, 3 heads of 16", 2, 37, 37, 3, 16, 16, true, false},
    {"cross, 2 heads, Dk 13 Dv 9", 3, 11, 22, 2, 13, 9, false, false},
    {"causal, Lk < Lq, no dq", 2, 9, 6, 1, 8, 24, true, true},
    {"causal, 2 heads of 64, 130 rows (three blocks)", 1, 130, 130, 2, 64, 64, true, false},
    {"cross, Lq 70, Lk 150, Dk 32, Dv 40", 2, 70, 150, 1, 32, 40, false, false},
};

/* what a planted value does: none (the GEMM path), or one value out of its range */
typedef enum { PLANT_NONE, PLANT_NAN_Q, PLANT_INF_V, PLANT_BIG_K, PLANT_BIG_DY, PLANT_COUNT } plant_kind;
static const char *const plant_names[] = {"in range", "a NaN in q", "an Inf in v",
                                          "2^21 in k", "2^41 in dy"};

/* t[0..3): q, k, v; [3]: out; [4]: dout; [5..8): dq, dk, dv (non-zero: backward adds) */
static void attn_tensors(const attn_row *r, plant_kind plant, ck_tensor *t[8])
{
    const ck_shape sh[4] = {SHAPE(r->N, r->Lq, r->H * r->Dk), SHAPE(r->N, r->Lk, r->H * r->Dk),
                            SHAPE(r->N, r->Lk, r->H * r->Dv), SHAPE(r->N, r->Lq, r->H * r->Dv)};
    for (int i = 0; i < 3; i++) {
        t[i] = tu_tensor_rand("in", CK_F32, sh[i], 41, (uint32_t)i, true);
        t[5 + i] = tu_tensor_rand("din", CK_F32, sh[i], 42, (uint32_t)i, false);
    }
    t[3] = tu_tensor_new("out", CK_F32, sh[3]);
    t[4] = tu_tensor_rand("dout", CK_F32, sh[3], 43, 0, true);
    float *q = t[0]->data, *k = t[1]->data, *v = t[2]->data, *dy = t[4]->data;
    switch (plant) {
    case PLANT_NAN_Q: q[r->H * r->Dk + 1] = NAN; break; /* row 1 of sample 0 */
    case PLANT_INF_V: v[3] = INFINITY; break;
    case PLANT_BIG_K: k[ck_shape_numel(&sh[1]) - 1] = 0x1p21f; break;
    case PLANT_BIG_DY: dy[2] = -0x1p41f; break;
    default: break;
    }
}

/* forward into t[3], then backward into t[5..8) */
static void attn_run(ck_backend *b, const attn_row *r, ck_tensor *t[8])
{
    ck_op_params op;
    memset(&op, 0, sizeof op);
    ck_op_params_default(&op, CK_OP_ATTENTION, 0);
    op.heads = (int)r->H;
    op.causal = r->causal;
    ck_error err = {{0}};
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    ck_op_io io;
    memset(&io, 0, sizeof io);
    io.n_in = 3;
    io.in[0] = t[0], io.in[1] = t[1], io.in[2] = t[2];
    io.out = t[3];
    ck_assert_msg(b->forward(b, &op, &args, &io, &err) == CK_OK, "%s: %s", r->desc, err.msg);
    ck_op_grads g;
    memset(&g, 0, sizeof g);
    g.dout = t[4];
    g.din[0] = r->missing_dq ? NULL : t[5];
    g.din[1] = t[6], g.din[2] = t[7];
    ck_assert_msg(b->backward(b, &op, &args, &io, &g, &err) == CK_OK, "%s: %s", r->desc,
                  err.msg);
}

static const char *attn_tensor_name(int k)
{
    return k == 3 ? "output" : k == 5 ? "dq" : k == 6 ? "dk" : "dv";
}

/* got within 1e-5 |want| + 1e-5 max |want| of want, element by element, all finite */
static void attn_close(const char *what, const ck_tensor *got, const ck_tensor *want)
{
    const float *a = got->data, *w = want->data;
    const int64_t n = ck_shape_numel(&want->shape);
    double maxref = 0.0;
    for (int64_t i = 0; i < n; i++)
        maxref = fabs(w[i]) > maxref ? fabs(w[i]) : maxref;
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - (double)w[i]);
        if (!isfinite(a[i]) || !(e <= 1e-5 * fabs(w[i]) + 1e-5 * maxref)) {
            if (first < 0)
                first = i;
            bad++;
        }
    }
    REQUIRE(bad == 0, "%s: %lld of %lld elements outside 1e-5 |ref| + 1e-5 max |ref| (first "
            "%lld: %.9g, ref %.9g)", what, (long long)bad, (long long)n, (long long)first,
            first < 0 ? 0.0 : (double)a[first], first < 0 ? 0.0 : (double)w[first]);
}

START_TEST(test_attention_kernels)
{
    const attn_row *r = &attn_rows[_i % COUNT(attn_rows)];
    const plant_kind plant = (plant_kind)(_i / (int)COUNT(attn_rows));
    ck_tensor *want[8] = {0}, *base[8] = {0};
    ck_backend *ref = NULL;
    ck_error err = {{0}};
    ck_assert(ck_backend_create("ref", NULL, &ref, &err) == CK_OK);
    attn_tensors(r, plant, want);
    attn_run(ref, r, want);
    ref->destroy(ref);
    char what[256];
    const char *isas[] = {"portable", "avx2", "avx512"};
    for (int s = 0; s <= (int)cpk_isa_detect(); s++)
        for (int threads = 1; threads <= 3; threads++) {
            ck_backend *b = make_cpu(threads, isas[s]);
            ck_tensor *t[8];
            attn_tensors(r, plant, t);
            attn_run(b, r, t);
            b->destroy(b);
            for (int k = 3; k < 8; k++) {
                if (k == 4 || (k == 5 && r->missing_dq))
                    continue;
                snprintf(what, sizeof what, "attention %s, %s, %s, %d threads: %s", r->desc,
                         plant_names[plant], isas[s], threads, attn_tensor_name(k));
                if (plant == PLANT_BIG_DY && k == 3) /* the forward's values are in range */
                    attn_close(what, t[k], want[k]);
                else if (plant != PLANT_NONE) /* the reference's arithmetic */
                    REQUIRE(memcmp(t[k]->data, want[k]->data, ck_tensor_bytes(t[k])) == 0,
                            "%s differs from ref bitwise", what);
                else if (!base[k])
                    attn_close(what, t[k], want[k]);
                else
                    REQUIRE(memcmp(t[k]->data, base[k]->data, ck_tensor_bytes(t[k])) == 0,
                            "%s differs from the portable path's on 1 thread", what);
            }
            for (int k = 0; k < 8; k++) {
                if (plant == PLANT_NONE && !base[k])
                    base[k] = t[k]; /* the portable path on one thread */
                else
                    tu_tensor_free(t[k]);
            }
        }
    for (int k = 0; k < 8; k++) {
        tu_tensor_free(want[k]);
        tu_tensor_free(base[k]);
    }
}
END_TEST

// ----------------------------------------------------------------------------
// the fp32 GELU (tanh form) kernel (gelu.c): not the reference's bits, so it is held to
//  - the same bits on every ISA path and thread count (forward; backward accumulating,
//    fresh, and fresh in dy's own buffer), on inputs full of NaNs, signed zeros, Infs,
//    huge, tiny and subnormal values and a sweep over [-12, 12];
//  - within one fp32 ulp of the formula evaluated in long double, for every finite result
//    (forward x * sigmoid(2u), the reference's 0.5 x (1 + tanh(u)); backward
//    dx + dy gelu'(x) rounded once), the same NaN and Inf positions as the reference.

static float gelu_test_x(int64_t i)
{
    const uint32_t h = (uint32_t)(i * 2654435761u) >> 8;
    switch (i % 8) {
    case 0: return -12.0f + 24.0f * (float)h / 16777216.0f;              /* sweep */
    case 1: return ldexpf((float)h / 16777216.0f - 0.5f, -(int)(h % 150)); /* tiny */
    case 2: return ldexpf((float)h / 16777216.0f - 0.5f, (int)(h % 128));  /* huge */
    case 3: {
        const float sp[] = {NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 3.4e38f, -3.4e38f,
                            1e-45f, -1e-45f, -21.6f, -30.0f, 30.0f, -5.0f, 5.0f};
        return sp[h % (sizeof sp / sizeof sp[0])];
    }
    default: return -6.0f + 12.0f * (float)h / 16777216.0f;
    }
}

static long double gelu_ld(long double x, long double *d)
{
    const long double c = 0.7978845608028654L, k = 0.044715L;
    const long double u = c * (x + k * x * x * x);
    const long double s = 1.0L / (1.0L + expl(-2.0L * u));
    *d = s + 2.0L * x * s * (1.0L - s) * c * (1.0L + 3.0L * k * x * x);
    return x * s;
}

/* |got - want| within one ulp of want in fp32 (0 when want rounds to 0) */
static bool within_ulp(float got, long double want)
{
    const float w = (float)want;
    if (isinf(w) || isinf(got))
        return got == w;
    const long double ulp = w == 0.0f ? ldexpl(1.0L, -149) : fabsl((long double)nextafterf(w, INFINITY) - w);
    return fabsl((long double)got - want) <= ulp + fabsl((long double)w - want);
}

START_TEST(test_gelu_tanh_kernel)
{
    const int64_t n = 100003; /* several tasks, a tail shorter than every vector width */
    const ck_shape sh = {1, {n}};
    ck_tensor *x = tu_tensor_new("x", CK_F32, sh), *dy = tu_tensor_rand("dy", CK_F32, sh, 5, 1, true);
    ck_tensor *dx0 = tu_tensor_rand("dx", CK_F32, sh, 5, 2, true);
    float *xv = x->data;
    for (int64_t i = 0; i < n; i++)
        xv[i] = gelu_test_x(i);
    ck_op_params op;
    memset(&op, 0, sizeof op);
    op.kind = CK_OP_GELU;
    op.gelu_tanh = true;
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    const char *isas[] = {"portable", "avx2", "avx512"};
    ck_tensor *first[4] = {0};
    for (int s = 0; s <= (int)cpk_isa_detect(); s++)
        for (int threads = 1; threads <= 3; threads++) {
            ck_backend *b = make_cpu(threads, isas[s]);
            ck_tensor *y = tu_tensor_new("y", CK_F32, sh), *acc = tu_tensor_new("dx", CK_F32, sh),
                      *fresh = tu_tensor_new("dx", CK_F32, sh), *alias = tu_tensor_new("dy", CK_F32, sh);
            memcpy(acc->data, dx0->data, ck_tensor_bytes(dx0));
            memcpy(alias->data, dy->data, ck_tensor_bytes(dy));
            memset(fresh->data, 0x7f, ck_tensor_bytes(fresh)); /* garbage: fresh ignores it */
            ck_error err = {{0}};
            ck_op_io io = {.n_in = 1, .in = {x}, .out = y};
            ck_assert(b->forward(b, &op, &args, &io, &err) == CK_OK);
            ck_op_grads g = {.dout = dy, .din = {acc}};
            ck_assert(b->backward(b, &op, &args, &io, &g, &err) == CK_OK);
            g.din[0] = fresh;
            g.din0_fresh = true;
            ck_assert(b->backward(b, &op, &args, &io, &g, &err) == CK_OK);
            g.dout = g.din[0] = alias; /* the executor's gradient written over dy */
            ck_assert(b->backward(b, &op, &args, &io, &g, &err) == CK_OK);
            ck_tensor *got[4] = {y, acc, fresh, alias};
            const char *what[4] = {"output", "accumulated dx", "fresh dx", "dx over dy"};
            const size_t bytes = ck_tensor_bytes(y);
            for (int k = 0; k < 4; k++) {
                if (!first[k]) {
                    first[k] = got[k];
                    continue;
                }
                REQUIRE(memcmp(got[k]->data, first[k]->data, bytes) == 0,
                        "gelu tanh %s, %s, %d threads: differs from portable, 1 thread", what[k],
                        isas[s], threads);
                tu_tensor_free(got[k]);
            }
            b->destroy(b);
        }
    /* accuracy, and the reference's NaN and Inf positions */
    ck_backend *ref = NULL;
    ck_error err = {{0}};
    ck_assert(ck_backend_create("ref", NULL, &ref, &err) == CK_OK);
    ck_tensor *ry = tu_tensor_new("y", CK_F32, sh), *racc = tu_tensor_new("dx", CK_F32, sh);
    memcpy(racc->data, dx0->data, ck_tensor_bytes(dx0));
    ck_op_io io = {.n_in = 1, .in = {x}, .out = ry};
    ck_assert(ref->forward(ref, &op, &args, &io, &err) == CK_OK);
    ck_op_grads g = {.dout = dy, .din = {racc}};
    ck_assert(ref->backward(ref, &op, &args, &io, &g, &err) == CK_OK);
    const float *y = first[0]->data, *acc = first[1]->data, *fr = first[2]->data,
                *al = first[3]->data, *dyv = dy->data, *d0 = dx0->data, *ryv = ry->data,
                *rav = racc->data;
    int64_t finite = 0;
    for (int64_t i = 0; i < n; i++) {
        long double d;
        const long double yl = gelu_ld(xv[i], &d);
        REQUIRE(isnan(y[i]) == isnan(ryv[i]) && isinf(y[i]) == isinf(ryv[i]) &&
                    isnan(acc[i]) == isnan(rav[i]) && isinf(acc[i]) == isinf(rav[i]),
                "x = %a: y %a dx %a, the reference's y %a dx %a", (double)xv[i], (double)y[i],
                (double)acc[i], (double)ryv[i], (double)rav[i]);
        if (isnan(ryv[i]) || isnan(rav[i]) || !isfinite(xv[i]))
            continue;
        finite++;
        REQUIRE(within_ulp(y[i], yl), "x = %a: y %a, long double %La", (double)xv[i],
                (double)y[i], yl);
        const long double dl = (long double)d0[i] + (long double)dyv[i] * d;
        const long double fl = 0.0L + (long double)dyv[i] * d;
        REQUIRE(within_ulp(acc[i], dl) && within_ulp(fr[i], fl) && al[i] == fr[i],
                "x = %a dy %a: dx %a (fresh %a, over dy %a), long double %La (fresh %La)",
                (double)xv[i], (double)dyv[i], (double)acc[i], (double)fr[i], (double)al[i],
                dl, fl);
    }
    REQUIRE(finite > n / 2, "only %lld finite results compared", (long long)finite);
    for (int k = 0; k < 4; k++)
        tu_tensor_free(first[k]);
    tu_tensor_free(ry);
    tu_tensor_free(racc);
    tu_tensor_free(x);
    tu_tensor_free(dy);
    tu_tensor_free(dx0);
    ref->destroy(ref);
}
END_TEST

// ----------------------------------------------------------------------------
// the fp32 optimizer step (optim.c): the reference's bits for sgd, momentum, adam and adamw,
// with and without weight decay and a gradient scale, over three steps (fresh state at
// step 1), on values full of NaNs, signed zeros and Infs, every ISA path, 1-3 threads

typedef struct {
    const char *desc;
    ck_optimizer opt;
    double grad_scale;
} optim_row;

static const optim_row optim_rows[] = {
    {"sgd", {.kind = CK_OPT_SGD, .lr = 0.01}, 1.0},
    {"sgd, weight decay, scaled gradient", {.kind = CK_OPT_SGD, .lr = 0.1, .weight_decay = 0.01}, 0.25},
    {"momentum", {.kind = CK_OPT_MOMENTUM, .lr = 0.01, .momentum = 0.9}, 1.0},
    {"momentum, weight decay", {.kind = CK_OPT_MOMENTUM, .lr = 0.03, .momentum = 0.5, .weight_decay = 1e-3}, 0.5},
    {"adam", {.kind = CK_OPT_ADAM, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}, 1.0},
    {"adam, weight decay, scaled gradient", {.kind = CK_OPT_ADAM, .lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1}, 0.125},
    {"adamw", {.kind = CK_OPT_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01}, 1.0},
};

START_TEST(test_optimizer_bitwise_ref)
{
    const optim_row *r = &optim_rows[_i];
    const ck_shape sh = {1, {100003}}; /* several chunks and a short last one */
    ck_backend *ref = NULL;
    ck_error err = {{0}};
    ck_assert(ck_backend_create("ref", NULL, &ref, &err) == CK_OK);
    const char *isas[] = {"portable", "avx2", "avx512"};
    for (int s = -1; s <= (int)cpk_isa_detect(); s++)
        for (int threads = 1; threads <= (s < 0 ? 1 : 3); threads++) {
            ck_backend *b = s < 0 ? ref : make_cpu(threads, isas[s]);
            ck_tensor *p = tricky_tensor("p", sh, 40), *s0 = tricky_tensor("m", sh, 41),
                      *s1 = tricky_tensor("v", sh, 42);
            ck_tensor *want[3] = {tricky_tensor("p", sh, 40), tricky_tensor("m", sh, 41),
                                  tricky_tensor("v", sh, 42)};
            for (int step = 1; step <= 3; step++) {
                ck_tensor *g = tricky_tensor("g", sh, 50u + (uint32_t)step);
                ck_assert(ref->optimizer_step(ref, &r->opt, step, r->grad_scale, want[0], g,
                                              want[1], want[2], &err) == CK_OK);
                REQUIRE(b->optimizer_step(b, &r->opt, step, r->grad_scale, p, g, s0, s1, &err) ==
                            CK_OK,
                        "%s: %s", r->desc, err.msg);
                const ck_tensor *got[3] = {p, s0, s1};
                for (int k = 0; k < 3; k++)
                    REQUIRE(memcmp(got[k]->data, want[k]->data, ck_tensor_bytes(p)) == 0,
                            "%s, %s, %d threads, step %d: %s differs from ref bitwise", r->desc,
                            s < 0 ? "ref" : isas[s], threads, step,
                            k == 0 ? "the parameter" : k == 1 ? "state 0" : "state 1");
                tu_tensor_free(g);
            }
            tu_tensor_free(p);
            tu_tensor_free(s0);
            tu_tensor_free(s1);
            for (int k = 0; k < 3; k++)
                tu_tensor_free(want[k]);
            if (s >= 0)
                b->destroy(b);
        }
    ref->destroy(ref);
}
END_TEST

// ----------------------------------------------------------------------------
// the fp32 layernorm kernel (backends/cpu/norm.c): the reference's bits, with and without
// weight and bias, with fp32 and fp64 saved statistics, 1-3 threads, every ISA path the
// machine has (four rows or columns per register; a row's outputs four or eight columns per
// register); 39 rows of 150 and 35 of 20 leave tails of rows and columns after the groups
// of 4, 8 and 16

typedef struct {
    const char *desc;
    ck_shape x;
    int n_norm;
    bool affine;
    ck_dtype saved;
} ln_row;

static const ln_row ln_rows[] = {
    {"rows of 150, affine, fp32 saved", SHAPE_INIT(3, 13, 150), 1, true, CK_F32},
    {"rows of 2 x 10, no affine, fp64 saved", SHAPE_INIT(5, 7, 2, 10), 2, false, CK_F64},
};

START_TEST(test_layernorm_bitwise_ref)
{
    const ln_row *r = &ln_rows[_i];
    ck_op_params op;
    memset(&op, 0, sizeof op);
    ck_op_params_default(&op, CK_OP_LAYERNORM, 0);
    op.n_norm = r->n_norm;
    int64_t D = 1;
    for (int d = r->x.ndim - r->n_norm; d < r->x.ndim; d++)
        D *= r->x.dim[d];
    const int64_t N = ck_shape_numel(&r->x) / D;
    /* [0] x, [1] weight, [2] bias, [3] out, [4] saved, [5] dout, [6] dx, [7] dw, [8] db */
    ck_tensor *init[9] = {
        tu_tensor_rand("x", CK_F32, r->x, 51, 0, true),
        r->affine ? tu_tensor_rand("w", CK_F32, SHAPE(D), 51, 1, true) : NULL,
        r->affine ? tu_tensor_rand("b", CK_F32, SHAPE(D), 51, 2, true) : NULL,
        tu_tensor_new("out", CK_F32, r->x),
        tu_tensor_new("saved", r->saved, SHAPE(2, N)),
        tu_tensor_rand("dout", CK_F32, r->x, 51, 3, true),
        tu_tensor_rand("dx", CK_F32, r->x, 51, 4, true),
        r->affine ? tu_tensor_rand("dw", CK_F32, SHAPE(D), 51, 5, true) : NULL,
        r->affine ? tu_tensor_rand("db", CK_F32, SHAPE(D), 51, 6, true) : NULL,
    };
    /* specials: a NaN in row 1's x, +Inf in row 2's (Inf - Inf: the default NaN), a NaN in
     * row 3's dy, each in a vector's lanes (column 3) and in a row's tail (column D - 1).
     * The NaNs planted are the default NaN (-NaN: what x86 makes of Inf - Inf), so that
     * every NaN that meets another in a column's sum has one payload: which of two NaNs an
     * add returns follows its operand order, which the compiler may swap in the scalar
     * reference (it did under the sanitizer build's optimisation) */
    for (int64_t c = 3; c < D; c += D - 4) {
        tu_tset(init[0], 1 * D + c, -NAN);
        tu_tset(init[0], 2 * D + c, INFINITY);
        tu_tset(init[5], 3 * D + c, -NAN);
    }
    ck_tensor *want[9] = {0};
    ck_backend *ref = NULL;
    ck_error err = {{0}};
    ck_assert(ck_backend_create("ref", NULL, &ref, &err) == CK_OK);
    /* 0: the reference; then 1-3 threads on each ISA path the machine has */
    const char *isas[] = {"portable", "avx2", "avx512"};
    for (int run = 0; run <= 3 * ((int)cpk_isa_detect() + 1); run++) {
        const int threads = run == 0 ? 0 : (run - 1) % 3 + 1;
        ck_backend *b = threads == 0 ? ref : make_cpu(threads, isas[(run - 1) / 3]);
        ck_tensor *t[9] = {0};
        for (int k = 0; k < 9; k++)
            if (init[k]) {
                t[k] = tu_tensor_new("t", init[k]->dtype, init[k]->shape);
                memcpy(t[k]->data, init[k]->data, ck_tensor_bytes(init[k]));
            }
        ck_fwd_args args;
        memset(&args, 0, sizeof args);
        ck_op_io io;
        memset(&io, 0, sizeof io);
        io.n_in = 1;
        io.in[0] = t[0], io.weight = t[1], io.bias = t[2], io.out = t[3], io.saved = t[4];
        ck_assert_msg(b->forward(b, &op, &args, &io, &err) == CK_OK, "%s: %s", r->desc, err.msg);
        ck_op_grads g;
        memset(&g, 0, sizeof g);
        g.dout = t[5], g.din[0] = t[6], g.dweight = t[7], g.dbias = t[8];
        ck_assert_msg(b->backward(b, &op, &args, &io, &g, &err) == CK_OK, "%s: %s", r->desc,
                      err.msg);
        for (int k = 3; k < 9; k++) {
            if (!t[k] || k == 5)
                continue;
            if (threads == 0)
                want[k] = t[k], t[k] = NULL;
            else
                REQUIRE(memcmp(t[k]->data, want[k]->data, ck_tensor_bytes(t[k])) == 0,
                        "layernorm %s, %d threads, %s: tensor %d differs from ref bitwise",
                        r->desc, threads, isas[(run - 1) / 3], k);
        }
        for (int k = 0; k < 9; k++)
            tu_tensor_free(t[k]);
        if (threads > 0)
            b->destroy(b);
    }
    for (int k = 0; k < 9; k++) {
        tu_tensor_free(init[k]);
        tu_tensor_free(want[k]);
    }
    ref->destroy(ref);
}
END_TEST

// ----------------------------------------------------------------------------
// NaN/Inf counts where the tensor lives

/* plants a NaN (kind 0) or an Inf (kind 1, sign by index) at element i */
static void plant(ck_tensor *t, int64_t i, int kind)
{
    tu_tset(t, i, kind == 0 ? NAN : (i % 2 ? -INFINITY : INFINITY));
}

START_TEST(test_count_nonfinite_matches_host_scan)
{
    const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16, CK_F64};
    const ck_dtype dt = dts[_i];
    /* none; one at the very end; several across chunks, the first an Inf; a short tensor */
    const int64_t sizes[] = {100003, 100003, 100003, 7};
    const int64_t at[][4] = {{-1}, {100002, -1}, {40000, 3, 99999, -1}, {6, -1}};
    const char *isas[] = {"portable", NULL};
    for (int c = 0; c < 4; c++) {
        ck_tensor *t = tu_tensor_rand("t", dt, SHAPE(sizes[c]), 21, (uint32_t)c, true);
        for (int k = 0; k < 4 && at[c][k] >= 0; k++)
            plant(t, at[c][k], k == 1 ? 1 : k % 2);
        if (c == 2) /* a huge finite value is not an Inf */
            tu_tset(t, 5, dt == CK_F16 ? 65504.0 : 3.0e38);
        int64_t wn, wi, wf;
        bool wfn;
        ck_count_nonfinite(dt, sizes[c], t->data, &wn, &wi, &wf, &wfn);
        for (int threads = 1; threads <= 3; threads++)
            for (int s = 0; s < 2; s++) {
                ck_backend *b = make_cpu(threads, isas[s]);
                union {
                    void *p;
                    ck_count_nonfinite_fn count;
                } u = {ck_backend_proc(b, CK_PROC_COUNT_NONFINITE)};
                ck_assert_ptr_nonnull(u.p);
                int64_t n = -5, inf = -5, first = -5;
                bool first_nan = !wfn;
                ck_error err = {{0}};
                ck_assert(u.count(b, t, &n, &inf, &first, &first_nan, &err) == CK_OK);
                REQUIRE(n == wn && inf == wi && first == wf && first_nan == wfn,
                        "%s case %d, %d threads, %s: nan %lld inf %lld first %lld (%d), host "
                        "scan %lld %lld %lld (%d)",
                        ck_dtype_name(dt), c, threads, isas[s] ? isas[s] : "best",
                        (long long)n, (long long)inf, (long long)first, first_nan,
                        (long long)wn, (long long)wi, (long long)wf, wfn);
                b->destroy(b);
            }
        if (c == 0)
            ck_assert_int_eq(wn + wi, 0);
        if (c == 2)
            ck_assert(wn == 2 && wi == 1 && wf == 3 && !wfn);
        tu_tensor_free(t);
    }
}
END_TEST

Suite *suite_cpu_delegate(void)
{
    Suite *s = suite_create("cpu_delegate");
    TCase *k = tcase_create("delegate");
    tcase_set_timeout(k, 120);
    tcase_add_loop_test(k, test_delegated_ops_bitwise_ref, 0, COUNT(delegate_rows));
    tcase_add_loop_test(k, test_fast_layout_ops_bitwise_ref, 0, COUNT(layout_rows));
    tcase_add_loop_test(k, test_attention_kernels, 0, COUNT(attn_rows) * PLANT_COUNT);
    tcase_add_loop_test(k, test_layernorm_bitwise_ref, 0, COUNT(ln_rows));
    tcase_add_loop_test(k, test_count_nonfinite_matches_host_scan, 0, 4);
    tcase_add_loop_test(k, test_optimizer_bitwise_ref, 0, COUNT(optim_rows));
    tcase_add_test(k, test_gelu_tanh_kernel);
    suite_add_tcase(s, k);
    return s;
}
