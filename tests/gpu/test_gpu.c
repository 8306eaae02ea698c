/*
 * The GPU test program: the CUDA backend against the CPU reference, op by op, and the
 * seed model's step time and activation memory. Built with the CUDA backend only
 * ($(BUILD)/test_gpu); tests/gpu/run.sh runs it on the GPU machine, `make cuda-check` runs
 * `--quick` (and, without a GPU, prints one SKIP line and exits 0).
 *
 *   test_gpu [--quick] [--device N]          the op suite (exit 0: all passed, 1: not)
 *   test_gpu --bench CASE --dtype D [--device N] [--algo P] [--out FILE]
 *                                            plain and checkpointed steps of CASE
 *   test_gpu --cpu-as-gpu [...]              a second CPU backend stands in for CUDA: a
 *                                            self-test of this program on any machine
 *
 * The op suite, for every op family in fp32, fp16 and bf16 (and a mixed-dtype call):
 *  - forward and backward on both backends from the same inputs (every value rounded to
 *    its tensor's dtype first), gradients starting from random values so accumulation is
 *    checked too; each output compared element by element against the CPU with the
 *    tolerance of its class (docs/cuda.md): EXACT ops must be bit-identical, TRANS ops
 *    (transcendentals, reductions) within a unit of the dtype's last place, LIB ops
 *    (cuBLAS, cuDNN) within the dtype's accumulation error;
 *  - dropout masks bit-identical to the CPU's for several stream offsets and rates;
 *  - determinism: conv, linear and batchnorm backward run twice give the same bits;
 *  - every op's backward against float64 finite differences on the CUDA backend
 *    (ck_gradcheck_op; skipped by --quick);
 *  - the algorithm records: under --algo deterministic every conv pass ran an algorithm
 *    cuDNN marks deterministic, never backward-filter ALGO_0/ALGO_3 or backward-data ALGO_0;
 *  - an impossible allocation fails with CK_ERR_NOMEM and a message naming the bytes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/registry.h"
#include "backends/backend.h"
#include "backends/cuda/cuda_api.h"
#include "harness/model/case.h"
#include "harness/engine/executor.h"
#include "harness/verify/gradcheck.h"
#include "harness/model/graph.h"
#include "harness/core/half.h"
#include "harness/model/params.h"
#include "harness/model/plan.h"
#include "harness/core/rng.h"
#include "harness/engine/train.h"

#define SHAPE(...)                                                                         \
    ((ck_shape){.ndim = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),         \
                .dim = {__VA_ARGS__}})

static ck_backend *g_cpu, *g_gpu;
static int g_pass, g_fail;
static bool g_quick, g_cpu_as_gpu;

/* the backend under test: CUDA, or with --cpu-as-gpu a second instance of the reference (the
 * self-test checks this program against bitwise expectations the reference meets) */
static ck_status create_under_test(ck_backend **b, int device, ck_cuda_algo_policy pol,
                                   ck_error *err)
{
    if (g_cpu_as_gpu)
        return ck_backend_create("ref", NULL, b, err);
    return ck_backend_cuda_create(b, device, pol, err);
}

static void fail_line(const char *fmt, const char *a, const char *b)
{
    printf("FAIL  %s: %s\n", a, b ? b : fmt);
    g_fail++;
}

// ----------------------------------------------------------------------------
// host values

enum { VALS_NORMAL = 0, VALS_TIES, VALS_POSITIVE, VALS_UNIT, VALS_ZERO, VALS_TIES_NAN };

/* n doubles drawn from a test stream: N(0, 1); small integers / 4 with ties and exact
 * zeros; U(0.5, 1.5); U(-1, 1); zeros; the ties with NaN every 7th element */
static double *draw(int64_t n, uint64_t seed, int kind)
{
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!v) {
        fprintf(stderr, "test_gpu: out of host memory\n");
        exit(2);
    }
    ck_rng_stream s = ck_rng_keyed(seed, CK_RNG_NO_LAYER, CK_PURPOSE_TEST, 0);
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case VALS_TIES: v[i] = (double)((int)ck_rng_below(&s, (uint64_t)i, 9) - 4) / 4.0; break;
        case VALS_TIES_NAN: /* ties, and a NaN every 7th element (relu keeps NaN, as torch) */
            v[i] = i % 7 == 3 ? NAN : (double)((int)ck_rng_below(&s, (uint64_t)i, 9) - 4) / 4.0;
            break;
        case VALS_POSITIVE: v[i] = 0.5 + ck_rng_uniform_f64(&s, (uint64_t)i); break;
        case VALS_UNIT: v[i] = 2.0 * ck_rng_uniform_f64(&s, (uint64_t)i) - 1.0; break;
        case VALS_ZERO: v[i] = 0.0; break;
        default: v[i] = ck_rng_normal_f64(&s, (uint64_t)i); break;
        }
    }
    return v;
}

static double elem(ck_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case CK_F32: return ((const float *)p)[i];
    case CK_F64: return ((const double *)p)[i];
    case CK_F16: return ck_f16_to_f32(((const uint16_t *)p)[i]);
    case CK_BF16: return ck_bf16_to_f32(((const uint16_t *)p)[i]);
    case CK_I32: return ((const int32_t *)p)[i];
    case CK_I64: return (double)((const int64_t *)p)[i];
    default: return 0.0;
    }
}

// ----------------------------------------------------------------------------
// a tensor on both backends

typedef struct {
    char name[64];
    ck_tensor cpu, gpu;
    bool live;
} pair;

static bool pair_make(pair *p, const char *name, ck_dtype dt, ck_shape s, const double *vals)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->cpu = (ck_tensor){p->name, dt, s, NULL};
    p->gpu = p->cpu;
    const int64_t n = ck_shape_numel(&s);
    const size_t bytes = (size_t)n * ck_dtype_size(dt);
    void *host = calloc(1, bytes ? bytes : 1);
    ck_error err;
    bool ok = host != NULL;
    if (ok && vals)
        ck_convert_from_f64(dt, host, vals, n);
    if (ok && (g_cpu->alloc(g_cpu, bytes, &p->cpu.data, &err) != CK_OK ||
               g_cpu->upload(g_cpu, &p->cpu, host, &err) != CK_OK ||
               g_gpu->alloc(g_gpu, bytes, &p->gpu.data, &err) != CK_OK ||
               g_gpu->upload(g_gpu, &p->gpu, host, &err) != CK_OK)) {
        fail_line("", name, err.msg);
        ok = false;
    }
    free(host);
    p->live = ok;
    return ok;
}

static void pair_free(pair *p)
{
    if (p->cpu.data)
        g_cpu->free(g_cpu, p->cpu.data);
    if (p->gpu.data)
        g_gpu->free(g_gpu, p->gpu.data);
    memset(p, 0, sizeof *p);
}

/* t's bytes on the host (malloc'd) */
static void *fetch(ck_backend *b, const ck_tensor *t)
{
    size_t bytes = ck_tensor_bytes(t);
    void *host = malloc(bytes ? bytes : 1);
    ck_error err;
    if (!host)
        return NULL;
    if (b->download(b, t, host, &err) != CK_OK) {
        fail_line("", t->name ? t->name : "download", err.msg);
        free(host);
        return NULL;
    }
    return host;
}

// ----------------------------------------------------------------------------
// comparison classes (docs/cuda.md)

typedef enum { CLS_EXACT = 0, CLS_TRANS, CLS_LIB } cmp_class;

typedef struct {
    double rtol, atol_frac; /* |a - b| <= rtol |b| + atol_frac max|b| */
    bool bitwise;
} tolerance;

static tolerance tolerance_for(cmp_class c, ck_dtype dt)
{
    tolerance t = {0.0, 0.0, c == CLS_EXACT};
    const bool lib = c == CLS_LIB;
    switch (dt) {
    case CK_F64: t.rtol = lib ? 1e-10 : 1e-14; t.atol_frac = lib ? 1e-10 : 1e-14; break;
    case CK_F32: t.rtol = lib ? 1e-4 : 1e-6; t.atol_frac = lib ? 1e-4 : 1e-6; break;
    case CK_F16: t.rtol = lib ? 4e-3 : 1e-3; t.atol_frac = lib ? 4e-3 : 1e-3; break;
    case CK_BF16: t.rtol = lib ? 3e-2 : 8e-3; t.atol_frac = lib ? 3e-2 : 8e-3; break;
    default: break;
    }
    return t;
}

/* Compares the CUDA tensor of p against the CPU's. */
static void compare(const char *what, const pair *p, cmp_class cls)
{
    const ck_dtype dt = p->cpu.dtype;
    const int64_t n = ck_shape_numel(&p->cpu.shape);
    const size_t es = ck_dtype_size(dt);
    unsigned char *a = fetch(g_gpu, &p->gpu), *b = fetch(g_cpu, &p->cpu);
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    const tolerance tol = tolerance_for(cls, dt);
    double maxref = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double v = fabs(elem(dt, b, i));
        if (isfinite(v) && v > maxref)
            maxref = v;
    }
    int64_t same = 0, bad = 0, worst = -1;
    double worst_err = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (memcmp(a + i * es, b + i * es, es) == 0) {
            same++;
            continue;
        }
        double x = elem(dt, a, i), y = elem(dt, b, i);
        double e = fabs(x - y);
        bool ok = !tol.bitwise && (isnan(x) == isnan(y)) &&
                  (isnan(x) || x == y || e <= tol.rtol * fabs(y) + tol.atol_frac * maxref);
        if (isnan(x) != isnan(y))
            e = INFINITY;
        if (!ok)
            bad++;
        if (e >= worst_err) {
            worst_err = e;
            worst = i;
        }
    }
    char line[512];
    snprintf(line, sizeof line, "%-52s %-5s n=%-7lld bitwise %6.2f%%  max|err| %.3g (max|ref| %.3g)",
             what, ck_dtype_name(dt), (long long)n, n ? 100.0 * (double)same / (double)n : 100.0,
             worst_err, maxref);
    if (bad) {
        printf("FAIL  %s: %lld outside %s (worst at %lld: cuda %.9g cpu %.9g)\n", line,
               (long long)bad, tol.bitwise ? "bitwise identity" : "tolerance", (long long)worst,
               elem(dt, a, worst), elem(dt, b, worst));
        g_fail++;
    } else {
        printf("PASS  %s\n", line);
        g_pass++;
    }
    free(a);
    free(b);
}

// ----------------------------------------------------------------------------
// one op, forward and backward, on both backends

typedef struct {
    ck_dtype in, out, dout, din; /* activations */
    ck_dtype param;              /* linear/conv weight and bias (the low copies) */
    ck_dtype wide;               /* norm parameters, running buffers, saved statistics */
} op_dtypes;

static op_dtypes dtypes_of(ck_dtype dt)
{
    ck_dtype master = dt == CK_F64 ? CK_F64 : CK_F32;
    return (op_dtypes){dt, dt, dt, dt, dt, master};
}

typedef struct {
    const char *desc;
    ck_op_params op;
    int n_in;
    ck_shape in[3];
    int vals;          /* VALS_* of the inputs */
    cmp_class fwd_cls; /* forward outputs */
    cmp_class bwd_cls; /* gradients */
    bool alias;        /* add: one tensor feeds both inputs (din[0] == din[1]) */
    uint64_t rng_offset;
} op_test;

static bool is_norm(ck_op_kind k)
{
    return k == CK_OP_BATCHNORM || k == CK_OP_LAYERNORM || k == CK_OP_RMSNORM ||
           k == CK_OP_GROUPNORM;
}

static ck_status run_both_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *c,
                                  ck_op_io *g, const char *desc)
{
    ck_error err;
    ck_status st = g_cpu->forward(g_cpu, op, args, c, &err);
    if (st != CK_OK) {
        fail_line("", desc, err.msg);
        return st;
    }
    if ((st = g_gpu->forward(g_gpu, op, args, g, &err)) != CK_OK)
        fail_line("", desc, err.msg);
    return st;
}

static void run_op(const op_test *t, op_dtypes dts, uint64_t seed)
{
    char desc[160];
    ck_error err;
    ck_node node;
    memset(&node, 0, sizeof node);
    node.op = t->op;
    node.n_in = t->n_in;
    if (ck_op_infer(&node.op, t->n_in, t->in, &node.out_shape, &err) != CK_OK) {
        fail_line("", t->desc, err.msg);
        return;
    }
    ck_op_state_specs(&node, &t->in[0]);
    const bool norm = is_norm(node.op.kind);
    const ck_dtype pdt = norm ? dts.wide : dts.param;

    pair in[3], out, w, b, rm, rv, nbt, saved, dout, din[3], dw, db;
    pair *all[] = {&in[0], &in[1], &in[2], &out, &w, &b, &rm, &rv, &nbt, &saved,
                   &dout, &din[0], &din[1], &din[2], &dw, &db};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        memset(all[k], 0, sizeof *all[k]);
    ck_op_io ioc, iog;
    memset(&ioc, 0, sizeof ioc);
    memset(&iog, 0, sizeof iog);
    ioc.n_in = iog.n_in = t->n_in;

    /* inputs (with `alias`, every input is in[0]) */
    bool ok = true;
    for (int k = 0; k < t->n_in && ok; k++) {
        const int src = t->alias ? 0 : k;
        if (src == k) {
            double *v = draw(ck_shape_numel(&t->in[k]), seed + 10 + (uint64_t)k, t->vals);
            char name[32];
            snprintf(name, sizeof name, "in%d", k);
            ok = pair_make(&in[k], name, dts.in, t->in[k], v);
            free(v);
        }
        ioc.in[k] = &in[src].cpu;
        iog.in[k] = &in[src].gpu;
    }
    ok = ok && pair_make(&out, "out", dts.out, node.out_shape, NULL);
    ioc.out = &out.cpu;
    iog.out = &out.gpu;
    /* parameters and buffers */
    for (int p = 0; p < node.n_params && ok; p++) {
        const ck_param_spec *ps = &node.params[p];
        const bool is_bias = strcmp(ps->suffix, "bias") == 0;
        const int64_t n = ck_shape_numel(&ps->shape);
        double *v = draw(n, seed + 20 + (uint64_t)p,
                         norm && !is_bias ? VALS_POSITIVE : VALS_UNIT);
        pair *dst = is_bias ? &b : &w;
        ok = pair_make(dst, ps->suffix, pdt, ps->shape, v);
        free(v);
        if (is_bias) {
            ioc.bias = &b.cpu;
            iog.bias = &b.gpu;
        } else {
            ioc.weight = &w.cpu;
            iog.weight = &w.gpu;
        }
    }
    for (int k = 0; k < node.n_buffers && ok; k++) {
        const ck_param_spec *bs = &node.buffers[k];
        const int64_t n = ck_shape_numel(&bs->shape);
        if (strcmp(bs->suffix, "num_batches_tracked") == 0) {
            const double three = 3.0;
            ok = pair_make(&nbt, bs->suffix, CK_I64, bs->shape, &three);
            ioc.num_batches_tracked = &nbt.cpu;
            iog.num_batches_tracked = &nbt.gpu;
            continue;
        }
        const bool var = strcmp(bs->suffix, "running_var") == 0;
        double *v = draw(n, seed + 30 + (uint64_t)k, var ? VALS_POSITIVE : VALS_UNIT);
        pair *dst = var ? &rv : &rm;
        ok = pair_make(dst, bs->suffix, dts.wide, bs->shape, v);
        free(v);
        if (var) {
            ioc.running_var = &rv.cpu;
            iog.running_var = &rv.gpu;
        } else {
            ioc.running_mean = &rm.cpu;
            iog.running_mean = &rm.gpu;
        }
    }
    if (ok && node.has_saved) {
        ok = pair_make(&saved, "saved", dts.wide, node.saved_shape, NULL);
        ioc.saved = &saved.cpu;
        iog.saved = &saved.gpu;
    }
    if (!ok)
        goto done;

    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    args.update_running_stats = !node.op.eval;
    args.rng = ck_rng_keyed(seed, 3, node.op.kind == CK_OP_DROPOUT ? CK_PURPOSE_DROPOUT
                                                                    : CK_PURPOSE_NOISE, 1);
    args.rng.offset = t->rng_offset;

    /* forward */
    if (run_both_forward(&node.op, &args, &ioc, &iog, t->desc) != CK_OK)
        goto done;
    snprintf(desc, sizeof desc, "%s forward out", t->desc);
    compare(desc, &out, t->fwd_cls);
    if (node.has_saved) {
        snprintf(desc, sizeof desc, "%s forward saved", t->desc);
        compare(desc, &saved, CLS_TRANS);
    }
    if (rm.live) {
        snprintf(desc, sizeof desc, "%s forward running_mean", t->desc);
        compare(desc, &rm, CLS_TRANS);
        snprintf(desc, sizeof desc, "%s forward running_var", t->desc);
        compare(desc, &rv, CLS_TRANS);
    }
    if (nbt.live) {
        snprintf(desc, sizeof desc, "%s forward num_batches_tracked", t->desc);
        compare(desc, &nbt, CLS_EXACT);
    }

    /* backward: gradients start from random values, so accumulation is checked too */
    ck_op_grads gc, gg;
    memset(&gc, 0, sizeof gc);
    memset(&gg, 0, sizeof gg);
    {
        double *v = draw(ck_shape_numel(&node.out_shape), seed + 40, VALS_NORMAL);
        ok = pair_make(&dout, "dout", dts.dout, node.out_shape, v);
        free(v);
    }
    gc.dout = &dout.cpu;
    gg.dout = &dout.gpu;
    for (int k = 0; k < t->n_in && ok; k++) {
        if (t->alias && k > 0) {
            gc.din[k] = &din[0].cpu;
            gg.din[k] = &din[0].gpu;
            continue;
        }
        double *v = draw(ck_shape_numel(&t->in[k]), seed + 50 + (uint64_t)k, VALS_NORMAL);
        char name[32];
        snprintf(name, sizeof name, "din%d", k);
        ok = pair_make(&din[k], name, dts.din, t->in[k], v);
        free(v);
        gc.din[k] = &din[k].cpu;
        gg.din[k] = &din[k].gpu;
    }
    if (ok && w.live) {
        double *v = draw(ck_shape_numel(&w.cpu.shape), seed + 60, VALS_NORMAL);
        ok = pair_make(&dw, "dweight", pdt, w.cpu.shape, v);
        free(v);
        gc.dweight = &dw.cpu;
        gg.dweight = &dw.gpu;
    }
    if (ok && b.live) {
        double *v = draw(ck_shape_numel(&b.cpu.shape), seed + 61, VALS_NORMAL);
        ok = pair_make(&db, "dbias", pdt, b.cpu.shape, v);
        free(v);
        gc.dbias = &db.cpu;
        gg.dbias = &db.gpu;
    }
    if (!ok)
        goto done;
    if (g_cpu->backward(g_cpu, &node.op, &args, &ioc, &gc, &err) != CK_OK) {
        fail_line("", t->desc, err.msg);
        goto done;
    }
    if (g_gpu->backward(g_gpu, &node.op, &args, &iog, &gg, &err) != CK_OK) {
        fail_line("", t->desc, err.msg);
        goto done;
    }
    for (int k = 0; k < t->n_in; k++) {
        if (!din[k].live)
            continue;
        snprintf(desc, sizeof desc, "%s backward din%d", t->desc, k);
        compare(desc, &din[k], t->bwd_cls);
    }
    if (dw.live) {
        snprintf(desc, sizeof desc, "%s backward dweight", t->desc);
        compare(desc, &dw, t->bwd_cls);
    }
    if (db.live) {
        snprintf(desc, sizeof desc, "%s backward dbias", t->desc);
        compare(desc, &db, norm ? t->bwd_cls : CLS_TRANS);
    }
done:
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        pair_free(all[k]);
}

// ----------------------------------------------------------------------------
// the op table

static ck_op_params mkop(ck_op_kind k, int nsp)
{
    ck_op_params p;
    memset(&p, 0, sizeof p);
    ck_op_params_default(&p, k, nsp);
    return p;
}

static int build_tests(op_test *t, int cap)
{
    int n = 0;
#define ADD(...)                                                                           \
    do {                                                                                   \
        if (n < cap)                                                                       \
            t[n++] = (op_test)__VA_ARGS__;                                                 \
    } while (0)
    ck_op_params p;

    p = mkop(CK_OP_LINEAR, 0);
    p.units = 9;
    ADD({"linear 17->9 bias, x (4, 3, 17)", p, 1, {SHAPE(4, 3, 17)}, VALS_NORMAL, CLS_LIB,
         CLS_LIB, false, 0});
    p.bias = false;
    p.units = 7;
    ADD({"linear 33->7 no bias", p, 1, {SHAPE(5, 33)}, VALS_NORMAL, CLS_LIB, CLS_LIB, false, 0});

    p = mkop(CK_OP_CONV, 1);
    p.filters = 4;
    p.kernel[0] = 3;
    p.stride[0] = 2;
    p.pad_mode = CK_PAD_SAME;
    ADD({"conv1d k3 s2 same (asymmetric) bias", p, 1, {SHAPE(2, 3, 20)}, VALS_NORMAL, CLS_LIB,
         CLS_LIB, false, 0});
    p = mkop(CK_OP_CONV, 2);
    p.filters = 5;
    p.kernel[0] = 3;
    p.kernel[1] = 2;
    p.stride[1] = 2;
    p.dilation[0] = 2;
    p.pad_mode = CK_PAD_EXPLICIT;
    p.pad[0] = 1;
    ADD({"conv2d k3x2 s1x2 d2x1 pad 1x0 bias", p, 1, {SHAPE(2, 3, 9, 11)}, VALS_NORMAL, CLS_LIB,
         CLS_LIB, false, 0});
    p = mkop(CK_OP_CONV, 2);
    p.filters = 3;
    p.kernel[0] = 2;
    p.kernel[1] = 2;
    p.pad_mode = CK_PAD_SAME;
    p.bias = false;
    ADD({"conv2d k2 same (pads 0/1) no bias", p, 1, {SHAPE(1, 2, 7, 6)}, VALS_NORMAL, CLS_LIB,
         CLS_LIB, false, 0});
    p = mkop(CK_OP_CONV, 3);
    p.filters = 4;
    for (int d = 0; d < 3; d++)
        p.kernel[d] = 3;
    p.pad_mode = CK_PAD_SAME;
    p.bias = false;
    ADD({"conv3d 4 filters k3 same no bias (the seed's layer)", p, 1, {SHAPE(1, 4, 6, 7, 5)},
         VALS_NORMAL, CLS_LIB, CLS_LIB, false, 0});

    static const struct {
        ck_op_kind k;
        const char *name;
        cmp_class cls;
    } acts[] = {{CK_OP_RELU, "relu", CLS_EXACT},        {CK_OP_LEAKY_RELU, "leaky_relu", CLS_EXACT},
                {CK_OP_GELU, "gelu", CLS_TRANS},        {CK_OP_TANH, "tanh", CLS_TRANS},
                {CK_OP_SIGMOID, "sigmoid", CLS_TRANS}};
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
        p = mkop(acts[a].k, 0);
        ADD({acts[a].name, p, 1, {SHAPE(3, 5, 7)}, VALS_TIES, acts[a].cls, acts[a].cls, false, 0});
    }
    p = mkop(CK_OP_RELU, 0);
    ADD({"relu with NaN", p, 1, {SHAPE(3, 5, 7)}, VALS_TIES_NAN, CLS_EXACT, CLS_EXACT, false, 0});

    p = mkop(CK_OP_BATCHNORM, 2);
    ADD({"batchnorm train", p, 1, {SHAPE(2, 3, 4, 5)}, VALS_NORMAL, CLS_TRANS, CLS_TRANS, false,
         0});
    p.eval = true;
    ADD({"batchnorm eval", p, 1, {SHAPE(2, 3, 4, 5)}, VALS_NORMAL, CLS_TRANS, CLS_TRANS, false,
         0});
    p = mkop(CK_OP_LAYERNORM, 0);
    ADD({"layernorm", p, 1, {SHAPE(3, 4, 5)}, VALS_NORMAL, CLS_TRANS, CLS_TRANS, false, 0});

    p = mkop(CK_OP_DROPOUT, 0);
    p.rate = 0.3;
    ADD({"dropout 0.3", p, 1, {SHAPE(4, 37)}, VALS_NORMAL, CLS_EXACT, CLS_EXACT, false, 0});
    ADD({"dropout 0.3, stream offset 5", p, 1, {SHAPE(4, 37)}, VALS_NORMAL, CLS_EXACT, CLS_EXACT,
         false, 5});
    p = mkop(CK_OP_GAUSSIAN_NOISE, 0);
    p.stddev = 0.5;
    ADD({"gaussian_noise 0.5, stream offset 8", p, 1, {SHAPE(4, 37)}, VALS_NORMAL, CLS_TRANS,
         CLS_EXACT, false, 8});

    p = mkop(CK_OP_MAXPOOL, 2);
    p.kernel[0] = p.kernel[1] = 3;
    p.stride[0] = p.stride[1] = 2;
    ADD({"maxpool2d k3 s2 (overlapping, ties)", p, 1, {SHAPE(2, 3, 7, 8)}, VALS_TIES, CLS_EXACT,
         CLS_EXACT, false, 0});
    p = mkop(CK_OP_MAXPOOL, 3);
    p.kernel[0] = p.kernel[1] = p.kernel[2] = 2;
    p.stride[0] = p.stride[1] = p.stride[2] = 2;
    ADD({"maxpool3d k2 s2", p, 1, {SHAPE(1, 2, 4, 6, 5)}, VALS_NORMAL, CLS_EXACT, CLS_EXACT, false,
         0});
    p = mkop(CK_OP_AVGPOOL, 1);
    p.kernel[0] = 3;
    p.stride[0] = 1;
    ADD({"avgpool1d k3 s1 (overlapping)", p, 1, {SHAPE(2, 3, 10)}, VALS_NORMAL, CLS_EXACT,
         CLS_EXACT, false, 0});
    p = mkop(CK_OP_AVGPOOL, 3);
    p.kernel[0] = p.kernel[1] = p.kernel[2] = 2;
    p.stride[0] = p.stride[1] = p.stride[2] = 2;
    ADD({"avgpool3d k2 s2", p, 1, {SHAPE(1, 2, 4, 6, 4)}, VALS_NORMAL, CLS_EXACT, CLS_EXACT, false,
         0});

    p = mkop(CK_OP_UPSAMPLE, 1);
    p.scale[0] = 3;
    ADD({"upsample1d x3", p, 1, {SHAPE(2, 3, 5)}, VALS_NORMAL, CLS_EXACT, CLS_EXACT, false, 0});
    p = mkop(CK_OP_UPSAMPLE, 3);
    p.scale[0] = 2;
    p.scale[1] = 1;
    p.scale[2] = 3;
    ADD({"upsample3d x(2,1,3)", p, 1, {SHAPE(1, 2, 3, 4, 2)}, VALS_NORMAL, CLS_EXACT, CLS_EXACT,
         false, 0});

    p = mkop(CK_OP_ADD, 0);
    ADD({"add of 3", p, 3, {SHAPE(2, 3, 5), SHAPE(2, 3, 5), SHAPE(2, 3, 5)}, VALS_NORMAL,
         CLS_EXACT, CLS_EXACT, false, 0});
    ADD({"add x + x (one tensor, both inputs)", p, 2, {SHAPE(2, 3, 5), SHAPE(2, 3, 5)},
         VALS_NORMAL, CLS_EXACT, CLS_EXACT, true, 0});
    p = mkop(CK_OP_CONCAT, 0);
    ADD({"concat of 3 along channels", p, 3, {SHAPE(2, 1, 4, 3), SHAPE(2, 3, 4, 3), SHAPE(2, 2, 4, 3)},
         VALS_NORMAL, CLS_EXACT, CLS_EXACT, false, 0});
    p = mkop(CK_OP_FLATTEN, 0);
    ADD({"flatten", p, 1, {SHAPE(3, 2, 4, 5)}, VALS_NORMAL, CLS_EXACT, CLS_EXACT, false, 0});

    /* transformer and U-Net ops: the CUDA kernels gather what the reference scatters, so most gradients
     * are summed in another order (close, not bitwise) */
    p = mkop(CK_OP_MATMUL, 0);
    ADD({"matmul (2, 3, 4) x (2, 4, 5)", p, 2, {SHAPE(2, 3, 4), SHAPE(2, 4, 5)}, VALS_NORMAL,
         CLS_TRANS, CLS_TRANS, false, 0});
    p.trans_a = p.trans_b = true;
    ADD({"matmul transposed by a 2-D B", p, 2, {SHAPE(2, 4, 3), SHAPE(5, 4)}, VALS_NORMAL,
         CLS_TRANS, CLS_TRANS, false, 0});
    p = mkop(CK_OP_MATMUL, 0);
    p.units = 6;
    ADD({"matmul by a weight", p, 1, {SHAPE(2, 3, 4)}, VALS_NORMAL, CLS_TRANS, CLS_TRANS, false,
         0});
    p = mkop(CK_OP_SOFTMAX, 0);
    p.dim = 1;
    ADD({"softmax dim 1", p, 1, {SHAPE(2, 5, 3)}, VALS_NORMAL, CLS_TRANS, CLS_TRANS, false, 0});
    p = mkop(CK_OP_LOG_SOFTMAX, 0);
    ADD({"log_softmax dim -1", p, 1, {SHAPE(2, 3, 7)}, VALS_NORMAL, CLS_TRANS, CLS_TRANS, false,
         0});
    p = mkop(CK_OP_ATTENTION, 0);
    p.heads = 2;
    p.causal = true;
    p.rate = 0.2;
    ADD({"attention causal, 2 heads, dropout 0.2", p, 3,
         {SHAPE(2, 5, 6), SHAPE(2, 5, 6), SHAPE(2, 5, 4)}, VALS_NORMAL, CLS_TRANS, CLS_TRANS,
         false, 0});
    p = mkop(CK_OP_ATTENTION, 0);
    p.rate = 0.1;
    ADD({"self-attention q = k = v, dropout 0.1", p, 1, {SHAPE(2, 4, 6)}, VALS_NORMAL, CLS_TRANS,
         CLS_TRANS, false, 3});
    p = mkop(CK_OP_RESHAPE, 0);
    p.n_shape = 2;
    p.shape[0] = 6;
    p.shape[1] = -1;
    ADD({"reshape", p, 1, {SHAPE(2, 3, 4)}, VALS_NORMAL, CLS_EXACT, CLS_EXACT, false, 0});
    p = mkop(CK_OP_PERMUTE, 0);
    p.n_perm = 3;
    p.perm[0] = 2;
    p.perm[1] = 0;
    p.perm[2] = 1;
    ADD({"permute (2, 0, 1)", p, 1, {SHAPE(2, 3, 4)}, VALS_NORMAL, CLS_EXACT, CLS_EXACT, false,
         0});
    p = mkop(CK_OP_LAYERNORM, 0);
    p.n_norm = 1;
    p.norm_shape[0] = 5;
    ADD({"layernorm over the last dim", p, 1, {SHAPE(3, 4, 5)}, VALS_NORMAL, CLS_TRANS,
         CLS_TRANS, false, 0});
    p = mkop(CK_OP_RMSNORM, 0);
    ADD({"rmsnorm", p, 1, {SHAPE(3, 4, 5)}, VALS_NORMAL, CLS_TRANS, CLS_TRANS, false, 0});
    p = mkop(CK_OP_GROUPNORM, 2);
    p.groups = 2;
    ADD({"groupnorm 2 groups", p, 1, {SHAPE(2, 4, 3, 3)}, VALS_NORMAL, CLS_TRANS, CLS_TRANS,
         false, 0});
    p = mkop(CK_OP_MUL, 0);
    ADD({"mul", p, 2, {SHAPE(2, 3, 5), SHAPE(2, 3, 5)}, VALS_NORMAL, CLS_EXACT, CLS_TRANS, false,
         0});
    ADD({"mul x * x (one tensor, both inputs)", p, 2, {SHAPE(2, 3, 5), SHAPE(2, 3, 5)},
         VALS_NORMAL, CLS_EXACT, CLS_TRANS, true, 0});
    p = mkop(CK_OP_SILU, 0);
    ADD({"silu", p, 1, {SHAPE(3, 5, 7)}, VALS_TIES, CLS_TRANS, CLS_TRANS, false, 0});
    p = mkop(CK_OP_GELU, 0);
    p.gelu_tanh = true;
    ADD({"gelu tanh", p, 1, {SHAPE(3, 5, 7)}, VALS_TIES, CLS_TRANS, CLS_TRANS, false, 0});
    p = mkop(CK_OP_POSITIONAL, 0);
    ADD({"positional", p, 1, {SHAPE(3, 4, 5)}, VALS_NORMAL, CLS_EXACT, CLS_TRANS, false, 0});
    p = mkop(CK_OP_CONV_TRANSPOSE, 2);
    p.filters = 3;
    p.kernel[0] = 3;
    p.kernel[1] = 2;
    p.stride[0] = 2;
    p.dilation[1] = 2;
    p.pad_mode = CK_PAD_EXPLICIT;
    p.pad[0] = 1;
    p.out_pad[0] = 1;
    ADD({"conv_transpose2d k3x2 s2x1 d1x2 pad 1x0 out_pad 1x0", p, 1, {SHAPE(2, 2, 4, 3)},
         VALS_NORMAL, CLS_TRANS, CLS_TRANS, false, 0});
    p = mkop(CK_OP_CONV_TRANSPOSE, 3);
    p.filters = 2;
    for (int d = 0; d < 3; d++)
        p.kernel[d] = p.stride[d] = 2;
    ADD({"conv_transpose3d k2 s2", p, 1, {SHAPE(1, 2, 2, 3, 2)}, VALS_NORMAL, CLS_TRANS,
         CLS_TRANS, false, 0});
    p = mkop(CK_OP_UPSAMPLE, 2);
    p.mode = CK_UPSAMPLE_LINEAR;
    p.scale[0] = 2;
    p.scale[1] = 3;
    ADD({"upsample2d bilinear x(2,3)", p, 1, {SHAPE(1, 2, 3, 4)}, VALS_NORMAL, CLS_TRANS,
         CLS_TRANS, false, 0});
    p = mkop(CK_OP_UPSAMPLE, 3);
    p.mode = CK_UPSAMPLE_LINEAR;
    p.align_corners = true;
    for (int d = 0; d < 3; d++)
        p.scale[d] = 2;
    ADD({"upsample3d trilinear align_corners x2", p, 1, {SHAPE(1, 1, 2, 3, 2)}, VALS_NORMAL,
         CLS_TRANS, CLS_TRANS, false, 0});
    p = mkop(CK_OP_MAXPOOL, 2);
    p.kernel[0] = p.kernel[1] = 3;
    p.stride[0] = p.stride[1] = 2;
    p.pad_mode = CK_PAD_EXPLICIT;
    p.pad[0] = p.pad[1] = 1;
    ADD({"maxpool2d k3 s2 padded (ties)", p, 1, {SHAPE(2, 2, 6, 5)}, VALS_TIES, CLS_EXACT,
         CLS_EXACT, false, 0});
    p = mkop(CK_OP_AVGPOOL, 2);
    p.kernel[0] = p.kernel[1] = 3;
    p.stride[0] = p.stride[1] = 1;
    p.pad_mode = CK_PAD_EXPLICIT;
    p.pad[0] = p.pad[1] = 1;
    p.count_include_pad = false;
    ADD({"avgpool2d k3 padded, count_include_pad false", p, 1, {SHAPE(2, 2, 5, 4)}, VALS_NORMAL,
         CLS_TRANS, CLS_TRANS, false, 0});
#undef ADD
    return n;
}

// ----------------------------------------------------------------------------
// dropout masks, determinism, losses, optimizers, records

/* The kept elements of a dropout over ones are exactly those the CPU keeps. */
static void test_dropout_masks(void)
{
    const double rates[] = {0.1, 0.5, 0.9};
    const uint64_t offsets[] = {0, 1, 2, 3, 7, 1000001};
    const int64_t n = 4099;
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++)
        for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++) {
            ck_op_params op = mkop(CK_OP_DROPOUT, 0);
            op.rate = rates[r];
            double *ones = malloc((size_t)n * sizeof *ones);
            for (int64_t i = 0; ones && i < n; i++)
                ones[i] = 1.0;
            pair x, y;
            if (!ones || !pair_make(&x, "x", CK_F32, SHAPE(1, n), ones) ||
                !pair_make(&y, "y", CK_F32, SHAPE(1, n), NULL)) {
                free(ones);
                return;
            }
            ck_fwd_args a;
            memset(&a, 0, sizeof a);
            a.rng = ck_rng_keyed(77, CK_RNG_NO_LAYER, CK_PURPOSE_GLOBAL, 0);
            a.rng.offset = offsets[o];
            ck_op_io c = {.n_in = 1, .in = {&x.cpu}, .out = &y.cpu};
            ck_op_io g = {.n_in = 1, .in = {&x.gpu}, .out = &y.gpu};
            char desc[96];
            snprintf(desc, sizeof desc, "dropout mask rate %.1f offset %llu", rates[r],
                     (unsigned long long)offsets[o]);
            if (run_both_forward(&op, &a, &c, &g, desc) == CK_OK)
                compare(desc, &y, CLS_EXACT);
            pair_free(&x);
            pair_free(&y);
            free(ones);
        }
}

/* Backward twice from the same state on CUDA: the same bits. */
static void test_determinism(uint64_t seed)
{
    static const char *what[] = {"conv3d", "linear", "batchnorm"};
    for (int which = 0; which < 3; which++) {
        ck_op_params op;
        ck_shape in;
        if (which == 0) {
            op = mkop(CK_OP_CONV, 3);
            op.filters = 4;
            op.kernel[0] = op.kernel[1] = op.kernel[2] = 3;
            op.pad_mode = CK_PAD_SAME;
            in = SHAPE(2, 4, 9, 10, 11);
        } else if (which == 1) {
            op = mkop(CK_OP_LINEAR, 0);
            op.units = 64;
            in = SHAPE(256, 96);
        } else {
            op = mkop(CK_OP_BATCHNORM, 2);
            in = SHAPE(8, 3, 33, 35);
        }
        ck_node node;
        ck_error err;
        memset(&node, 0, sizeof node);
        node.op = op;
        node.n_in = 1;
        if (ck_op_infer(&node.op, 1, &in, &node.out_shape, &err) != CK_OK) {
            fail_line("", what[which], err.msg);
            continue;
        }
        ck_op_state_specs(&node, &in);
        pair x, y, w, b, s, dy, dx[2], dw[2];
        memset(&w, 0, sizeof w);
        memset(&b, 0, sizeof b);
        memset(&s, 0, sizeof s);
        double *vx = draw(ck_shape_numel(&in), seed, VALS_NORMAL);
        double *vy = draw(ck_shape_numel(&node.out_shape), seed + 1, VALS_NORMAL);
        bool ok = pair_make(&x, "x", CK_F32, in, vx) &&
                  pair_make(&y, "y", CK_F32, node.out_shape, NULL) &&
                  pair_make(&dy, "dy", CK_F32, node.out_shape, vy);
        free(vx);
        free(vy);
        for (int p = 0; p < node.n_params && ok; p++) {
            double *v = draw(ck_shape_numel(&node.params[p].shape), seed + 2 + p, VALS_UNIT);
            bool bias = strcmp(node.params[p].suffix, "bias") == 0;
            ok = pair_make(bias ? &b : &w, node.params[p].suffix, CK_F32, node.params[p].shape, v);
            free(v);
        }
        if (ok && node.has_saved)
            ok = pair_make(&s, "saved", CK_F32, node.saved_shape, NULL);
        for (int r = 0; r < 2 && ok; r++)
            ok = pair_make(&dx[r], "dx", CK_F32, in, NULL) &&
                 pair_make(&dw[r], "dw", CK_F32, w.cpu.shape, NULL);
        if (ok) {
            ck_op_io io = {.n_in = 1, .in = {&x.gpu}, .out = &y.gpu, .weight = &w.gpu,
                           .bias = b.live ? &b.gpu : NULL, .saved = s.live ? &s.gpu : NULL};
            ck_fwd_args a;
            memset(&a, 0, sizeof a);
            if (g_gpu->forward(g_gpu, &node.op, &a, &io, &err) != CK_OK) {
                fail_line("", what[which], err.msg);
                ok = false;
            }
            for (int r = 0; r < 2 && ok; r++) {
                ck_op_grads g = {.dout = &dy.gpu, .din = {&dx[r].gpu}, .dweight = &dw[r].gpu};
                if (g_gpu->backward(g_gpu, &node.op, &a, &io, &g, &err) != CK_OK) {
                    fail_line("", what[which], err.msg);
                    ok = false;
                }
            }
        }
        if (ok) {
            /* compare run 0 (as "cpu") with run 1 (as "gpu"), both on the GPU */
            for (int k = 0; k < 2; k++) {
                pair *r = k ? dw : dx;
                pair both = r[1];
                both.cpu = r[0].gpu;
                ck_backend *keep = g_cpu;
                g_cpu = g_gpu; /* fetch both from the GPU */
                char desc[96];
                snprintf(desc, sizeof desc, "determinism: %s backward twice, %s", what[which],
                         k ? "dweight" : "dinput");
                compare(desc, &both, CLS_EXACT);
                g_cpu = keep;
            }
        }
        pair *all[] = {&x, &y, &w, &b, &s, &dy, &dx[0], &dx[1], &dw[0], &dw[1]};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            pair_free(all[k]);
    }
}

static void test_losses(uint64_t seed)
{
    const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16};
    for (size_t d = 0; d < 3; d++) {
        const ck_dtype dt = dts[d];
        for (int kind = 0; kind < CK_LOSS_KIND_COUNT; kind++) {
            const ck_shape ys = SHAPE(3, 5, 4, 2), ts = SHAPE(3, 4, 2);
            double *vy = draw(ck_shape_numel(&ys), seed + (uint64_t)kind, VALS_NORMAL);
            double *vt = draw(ck_shape_numel(&ys), seed + 9, VALS_UNIT);
            const int64_t nt = ck_shape_numel(&ts);
            ck_rng_stream s = ck_rng_keyed(seed, CK_RNG_NO_LAYER, CK_PURPOSE_TEST, 9);
            double *cls = draw(nt, seed, VALS_ZERO);
            for (int64_t i = 0; i < nt; i++)
                cls[i] = (double)ck_rng_below(&s, (uint64_t)i, 5);
            pair y, t, dy;
            memset(&t, 0, sizeof t);
            bool ok = pair_make(&y, "y", dt, ys, vy) && pair_make(&dy, "dy", dt, ys, NULL);
            if (ok && kind == CK_LOSS_MSE)
                ok = pair_make(&t, "target", dt, ys, vt);
            if (ok && kind == CK_LOSS_CROSS_ENTROPY)
                ok = pair_make(&t, "target", CK_I32, ts, cls);
            free(vy);
            free(vt);
            free(cls);
            ck_error err;
            double lc = 0, lg = 0;
            const ck_tensor *tc = t.live ? &t.cpu : NULL, *tg = t.live ? &t.gpu : NULL;
            if (ok && (g_cpu->loss_forward(g_cpu, kind, &y.cpu, tc, &lc, &err) != CK_OK ||
                       g_gpu->loss_forward(g_gpu, kind, &y.gpu, tg, &lg, &err) != CK_OK)) {
                fail_line("", ck_loss_kind_name(kind), err.msg);
                ok = false;
            }
            char desc[96];
            if (ok) {
                double e = fabs(lc - lg), tol = 1e-12 * fmax(1.0, fabs(lc));
                snprintf(desc, sizeof desc, "loss %s forward (%s)", ck_loss_kind_name(kind),
                         ck_dtype_name(dt));
                if (e <= tol) {
                    printf("PASS  %-52s cuda %.17g cpu %.17g\n", desc, lg, lc);
                    g_pass++;
                } else {
                    printf("FAIL  %-52s cuda %.17g cpu %.17g\n", desc, lg, lc);
                    g_fail++;
                }
                if (g_cpu->loss_backward(g_cpu, kind, &y.cpu, tc, 1024.0, &dy.cpu, &err) != CK_OK ||
                    g_gpu->loss_backward(g_gpu, kind, &y.gpu, tg, 1024.0, &dy.gpu, &err) != CK_OK) {
                    fail_line("", ck_loss_kind_name(kind), err.msg);
                } else {
                    snprintf(desc, sizeof desc, "loss %s backward, scale 2^10",
                             ck_loss_kind_name(kind));
                    compare(desc, &dy, kind == CK_LOSS_CROSS_ENTROPY ? CLS_TRANS : CLS_EXACT);
                }
            }
            pair_free(&y);
            pair_free(&t);
            pair_free(&dy);
        }
    }
}

static void test_optimizers(uint64_t seed)
{
    const ck_shape s = SHAPE(7, 13);
    const int64_t n = ck_shape_numel(&s);
    for (int kind = 0; kind < CK_OPT_KIND_COUNT; kind++)
        for (int64_t step = 1; step <= 3; step += 2) {
            ck_optimizer opt = {.kind = kind, .lr = 0.01, .momentum = 0.9, .beta1 = 0.9,
                                .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
            double *vp = draw(n, seed, VALS_UNIT), *vg = draw(n, seed + 1, VALS_NORMAL),
                   *v0 = draw(n, seed + 2, VALS_NORMAL), *v1 = draw(n, seed + 3, VALS_POSITIVE);
            pair p, g, s0, s1;
            /* master param and state fp32; the gradient fp16 (a low-dtype gradient is read) */
            bool ok = pair_make(&p, "param", CK_F32, s, vp) && pair_make(&g, "grad", CK_F16, s, vg) &&
                      pair_make(&s0, "state0", CK_F32, s, v0) &&
                      pair_make(&s1, "state1", CK_F32, s, v1);
            free(vp);
            free(vg);
            free(v0);
            free(v1);
            ck_error err;
            if (ok && (g_cpu->optimizer_step(g_cpu, &opt, step, 1.0 / 1024, &p.cpu, &g.cpu, &s0.cpu,
                                             &s1.cpu, &err) != CK_OK ||
                       g_gpu->optimizer_step(g_gpu, &opt, step, 1.0 / 1024, &p.gpu, &g.gpu, &s0.gpu,
                                             &s1.gpu, &err) != CK_OK)) {
                fail_line("", ck_optimizer_kind_name(kind), err.msg);
                ok = false;
            }
            if (ok) {
                char desc[96];
                snprintf(desc, sizeof desc, "optimizer %s step %lld param",
                         ck_optimizer_kind_name(kind), (long long)step);
                compare(desc, &p, CLS_EXACT);
                snprintf(desc, sizeof desc, "optimizer %s step %lld state0",
                         ck_optimizer_kind_name(kind), (long long)step);
                compare(desc, &s0, CLS_EXACT);
                snprintf(desc, sizeof desc, "optimizer %s step %lld state1",
                         ck_optimizer_kind_name(kind), (long long)step);
                compare(desc, &s1, CLS_EXACT);
            }
            pair_free(&p);
            pair_free(&g);
            pair_free(&s0);
            pair_free(&s1);
        }
}

/* master -> low casts and low -> master unscaling (backend.h's convert) */
static void test_convert(uint64_t seed)
{
    const ck_shape s = SHAPE(5, 41);
    double *v = draw(ck_shape_numel(&s), seed, VALS_NORMAL);
    for (int i = 0; i < 5; i++)
        v[i] *= 1e5 * (i + 1); /* overflow to inf in fp16 */
    v[5] = 1e-9;               /* flush to zero in fp16 */
    const ck_dtype pairs[][2] = {{CK_F16, CK_F32}, {CK_BF16, CK_F32}, {CK_F32, CK_F16},
                                 {CK_F32, CK_BF16}, {CK_F32, CK_F32}};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        for (int accumulate = 0; accumulate <= 1; accumulate++) {
            pair dst, src;
            if (!pair_make(&dst, "dst", pairs[k][0], s, v) ||
                !pair_make(&src, "src", pairs[k][1], s, v))
                break;
            ck_error err;
            const double scale = accumulate ? 1.0 / 65536.0 : 1.0;
            if (g_cpu->convert(g_cpu, &dst.cpu, &src.cpu, scale, accumulate, &err) != CK_OK ||
                g_gpu->convert(g_gpu, &dst.gpu, &src.gpu, scale, accumulate, &err) != CK_OK) {
                fail_line("", "convert", err.msg);
            } else {
                char desc[96];
                snprintf(desc, sizeof desc, "convert %s -> %s%s", ck_dtype_name(pairs[k][1]),
                         ck_dtype_name(pairs[k][0]), accumulate ? " scaled, accumulated" : "");
                compare(desc, &dst, CLS_EXACT);
            }
            pair_free(&dst);
            pair_free(&src);
        }
    }
    free(v);
}

static void check_records(ck_backend *b, bool deterministic)
{
    const ck_cuda_algo_record *r;
    int n = ck_cuda_algo_records(b, &r);
    printf("      algorithm records (%s policy): %d\n",
           deterministic ? "deterministic" : "fastest", n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        printf("      %-12s %-7s %-16s %-5s %-32s %-13s %-28s ws %zu B, %s%s\n", r[i].layer,
               r[i].op, ck_cuda_pass_name(r[i].pass), ck_dtype_name(r[i].dtype), r[i].engine,
               r[i].deterministic ? "deterministic" : "NONDETERMINISTIC", r[i].math,
               r[i].workspace_bytes, r[i].chosen_by, r[i].changed ? ", changed" : "");
        if (deterministic && r[i].algo >= 0 &&
            (!r[i].deterministic ||
             !ck_cuda_algo_allowed(r[i].pass, r[i].algo, CK_CUDA_DETERMINISTIC,
                                   CK_CUDA_ALGO_DETERMINISTIC)))
            bad++;
        if (r[i].dtype == CK_F32 && r[i].algo >= 0 && strstr(r[i].math, "FMA") == NULL)
            bad++;
        /* pinned per (pass, dtype, shape): a layer never switches algorithm, and no
         * workspace exceeds the default cap (1 GiB) */
        if (r[i].changed || r[i].workspace_bytes > ((size_t)1 << 30))
            bad++;
        /* fp64 convolutions never reach cuDNN */
        if (r[i].dtype == CK_F64 && strncmp(r[i].op, "conv", 4) == 0 &&
            strstr(r[i].engine, "direct") == NULL)
            bad++;
    }
    if (bad) {
        printf("FAIL  algorithm records: %d entries break the policy, the fp32 math rule, the "
               "pinning, the workspace cap or the fp64 engine\n", bad);
        g_fail++;
    } else {
        printf("PASS  algorithm records follow the policy (fp32 convolutions ran FMA, nothing "
               "switched, workspaces within the cap, fp64 convolutions on the direct kernels)\n");
        g_pass++;
    }
}

static void test_out_of_memory(void)
{
    void *p = NULL;
    ck_error err;
    const size_t huge = (size_t)1 << 44; /* 16 TiB */
    ck_status st = g_gpu->alloc(g_gpu, huge, &p, &err);
    if (st == CK_ERR_NOMEM && !p && strstr(err.msg, "17592186044416") && !strchr(err.msg, '\n')) {
        printf("PASS  an impossible allocation: %s\n", err.msg);
        g_pass++;
    } else {
        printf("FAIL  an impossible allocation returned %s: %s\n", ck_status_str(st), err.msg);
        g_fail++;
        if (p)
            g_gpu->free(g_gpu, p);
    }
}

static void test_gradchecks(const op_test *t, int n)
{
    for (int k = 0; k < n; k++) {
        ck_node node;
        ck_error err;
        memset(&node, 0, sizeof node);
        node.op = t[k].op;
        node.n_in = t[k].n_in;
        if (t[k].alias || ck_op_infer(&node.op, t[k].n_in, t[k].in, &node.out_shape, &err) != CK_OK)
            continue;
        ck_op_state_specs(&node, &t[k].in[0]);
        ck_fwd_args a;
        memset(&a, 0, sizeof a);
        a.rng = ck_rng_keyed(5, 2, CK_PURPOSE_DROPOUT, 0);
        ck_gradcheck_opts o;
        ck_gradcheck_opts_default(&o);
        ck_gradcheck_result res;
        memset(&res, 0, sizeof res);
        if (ck_gradcheck_op(g_gpu, &node, t[k].in, &a, 11, &o, &res, &err) != CK_OK) {
            fail_line("", t[k].desc, err.msg);
            continue;
        }
        double worst = 0.0;
        for (int e = 0; e < res.n; e++)
            worst = fmax(worst, res.e[e].max_rel_err);
        printf("%s  gradcheck fp64 on cuda: %-40s max rel err %.3g\n", res.ok ? "PASS" : "FAIL",
               t[k].desc, worst);
        if (res.ok)
            g_pass++;
        else
            g_fail++;
    }
}

// ----------------------------------------------------------------------------
// the seed model: step time and peak activation memory

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One mode (plain or checkpointed) of the bench: two steps, the second warm. Gradients of
 * step 0 go to grads (first mode) or are compared with them (second mode). */
static int bench_mode(ck_backend *b, const ck_graph *g, const ck_plan *plan, ck_dtype dt,
                      double **grads, int64_t *n_grads, double out[4], bool *grads_equal)
{
    const ck_case *c = g->cs;
    ck_model model;
    ck_exec ex;
    ck_tensor input, target;
    ck_error err;
    memset(&model, 0, sizeof model);
    memset(&ex, 0, sizeof ex);
    memset(&input, 0, sizeof input);
    memset(&target, 0, sizeof target);
    int rc = 1;
    ck_status st = ck_model_create(&model, b, g, dt, &err);
    if (st == CK_OK)
        st = ck_model_init(&model, c->seed, &err);
    ck_exec_config cfg = {.b = b, .g = g, .model = &model, .plan = plan, .seed = c->seed,
                          .rng = c->rng, .bn = c->bn, .autocast = c->autocast};
    if (st == CK_OK)
        st = ck_exec_create(&ex, &cfg, &err);
    const double scale = c->loss_scale == CK_SCALE_NONE ? 1.0 : c->loss_scale_value;
    for (int step = 0; step < 2 && st == CK_OK; step++) {
        double loss = 0.0;
        if ((st = ck_make_data(b, g, dt, step, &input, &target, &err)) != CK_OK)
            break;
        const double t0 = now_s();
        if ((st = ck_model_zero_grads(&model, &err)) != CK_OK ||
            (st = ck_model_cast_params(&model, &err)) != CK_OK ||
            (st = ck_exec_step(&ex, step, &input, target.data ? &target : NULL, c->loss, scale,
                               true, &loss, &err)) != CK_OK ||
            (st = ck_model_unscale_grads(&model, scale, &err)) != CK_OK)
            break;
        const double t1 = now_s();
        out[step] = t1 - t0;
        if (step == 0) {
            out[3] = loss;
            /* the step's gradients, for plain vs checkpointed */
            const bool first = *n_grads == 0;
            int64_t k = 0;
            for (int i = 0; i < g->n && st == CK_OK; i++)
                for (int p = 0; p < g->nodes[i].n_params && st == CK_OK; p++) {
                    ck_tensor *t = &model.layers[i].grad[p];
                    void *h = fetch(b, t);
                    if (!h) {
                        st = CK_ERR_BACKEND;
                        break;
                    }
                    const int64_t n = ck_shape_numel(&t->shape);
                    if (first) {
                        /* the first mode keeps them */
                        double *grown = realloc(*grads, (size_t)(k + n) * sizeof **grads);
                        if (!grown) {
                            free(h);
                            st = CK_ERR_NOMEM;
                            break;
                        }
                        *grads = grown;
                        for (int64_t e = 0; e < n; e++)
                            (*grads)[k + e] = elem(t->dtype, h, e);
                    } else if (k + n > *n_grads) {
                        *grads_equal = false;
                    } else {
                        for (int64_t e = 0; e < n; e++) {
                            const double v = elem(t->dtype, h, e);
                            if (memcmp(&(*grads)[k + e], &v, sizeof v) != 0)
                                *grads_equal = false;
                        }
                    }
                    k += n;
                    free(h);
                }
            if (first)
                *n_grads = k;
        }
        if (st == CK_OK)
            st = ck_model_update(&model, &c->optimizer, step + 1, 1.0, &err);
        ck_free_data(b, &input, &target);
    }
    if (st == CK_OK) {
        out[2] = (double)ex.act.peak_bytes;
        rc = 0;
    } else {
        fprintf(stderr, "test_gpu: bench: %s\n", err.msg);
    }
    ck_free_data(b, &input, &target);
    ck_exec_free(&ex);
    ck_model_free(&model);
    return rc;
}

static int bench(const char *path, const char *dtype, int device, ck_cuda_algo_policy pol,
                 const char *out_path)
{
    ck_dtype dt;
    if (!ck_dtype_parse(dtype, &dt)) {
        fprintf(stderr, "test_gpu: --dtype %s: unknown dtype\n", dtype);
        return 2;
    }
    ck_case cs;
    ck_graph g;
    ck_plan plan;
    ck_error err;
    if (ck_case_load(path, &cs, &err) != CK_OK) {
        fprintf(stderr, "test_gpu: %s\n", err.msg);
        return 2;
    }
    if (ck_graph_build(&cs, &g, &err) != CK_OK) {
        fprintf(stderr, "test_gpu: %s\n", err.msg);
        ck_case_free(&cs);
        return 2;
    }
    if (ck_plan_build(&g, &plan, &err) != CK_OK) {
        fprintf(stderr, "test_gpu: %s\n", err.msg);
        ck_graph_free(&g);
        ck_case_free(&cs);
        return 2;
    }
    ck_backend *b = NULL;
    int rc = 1;
    if (create_under_test(&b, device, pol, &err) != CK_OK) {
        fprintf(stderr, "test_gpu: %s\n", err.msg);
    } else {
        double plain[4] = {0}, ckpt[4] = {0};
        double *grads = NULL;
        int64_t n_grads = 0;
        bool equal = true;
        if (bench_mode(b, &g, NULL, dt, &grads, &n_grads, plain, &equal) == 0 &&
            bench_mode(b, &g, &plan, dt, &grads, &n_grads, ckpt, &equal) == 0) {
            const char *fmt = "%s %s %s step0_s %.4f step1_s %.4f peak_bytes %.0f loss %.17g "
                              "grads_bitwise_equal %s\n";
            FILE *f = out_path ? fopen(out_path, "a") : NULL;
            for (int k = 0; k < 2; k++) {
                const double *r = k ? ckpt : plain;
                const char *mode = k ? "checkpointed" : "plain";
                printf(fmt, cs.name, ck_dtype_name(dt), mode, r[0], r[1], r[2], r[3],
                       equal && plain[3] == ckpt[3] ? "yes" : "no");
                if (f)
                    fprintf(f, fmt, cs.name, ck_dtype_name(dt), mode, r[0], r[1], r[2], r[3],
                            equal && plain[3] == ckpt[3] ? "yes" : "no");
            }
            if (f)
                fclose(f);
            rc = equal && plain[3] == ckpt[3] ? 0 : 1;
        }
        free(grads);
        const ck_cuda_algo_record *r;
        int n = ck_cuda_algo_records(b, &r);
        for (int i = 0; i < n && i < 9; i++)
            printf("  %-12s %-16s %-30s %-13s %s, workspace %zu B, %lld calls\n", r[i].layer,
                   ck_cuda_pass_name(r[i].pass), r[i].engine,
                   r[i].deterministic ? "deterministic" : "nondeterministic", r[i].math,
                   r[i].workspace_bytes, (long long)r[i].calls);
        if (n > 9)
            printf("  ... %d records in all\n", n);
        b->destroy(b);
    }
    ck_plan_free(&plan);
    ck_graph_free(&g);
    ck_case_free(&cs);
    return rc;
}

// ----------------------------------------------------------------------------

int main(int argc, char **argv)
{
    const char *bench_case = NULL, *dtype = "fp32", *out = NULL;
    int device = 0;
    ck_cuda_algo_policy pol = CK_CUDA_ALGO_DETERMINISTIC;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quick") == 0) {
            g_quick = true;
        } else if (strcmp(a, "--cpu-as-gpu") == 0) {
            g_cpu_as_gpu = true;
        } else if (strcmp(a, "--bench") == 0 && v) {
            bench_case = v;
            i++;
        } else if (strcmp(a, "--dtype") == 0 && v) {
            dtype = v;
            i++;
        } else if (strcmp(a, "--out") == 0 && v) {
            out = v;
            i++;
        } else if (strcmp(a, "--device") == 0 && v) {
            device = atoi(v);
            i++;
        } else if (strcmp(a, "--algo") == 0 && v && ck_cuda_algo_policy_parse(v, &pol)) {
            i++;
        } else {
            fprintf(stderr, "usage: test_gpu [--quick] [--device N] [--cpu-as-gpu] | --bench CASE "
                            "[--dtype D] [--algo deterministic|fastest] [--out FILE] "
                            "[--device N] [--cpu-as-gpu]\n");
            return 2;
        }
    }
    char why[256];
    if (!g_cpu_as_gpu && !ck_cuda_available(why, sizeof why)) {
        printf("test_gpu: SKIP: the GPU tests need a CUDA device: %s\n", why);
        return 0;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (bench_case)
        return bench(bench_case, dtype, device, pol, out);

    ck_error err;
    /* the reference the tolerances are written against: the CPU reference backend (with
     * --cpu-as-gpu the fast cpu backend stands in for the GPU) */
    if (ck_backend_create("ref", NULL, &g_cpu, &err) != CK_OK ||
        create_under_test(&g_gpu, device, pol, &err) != CK_OK) {
        printf("FAIL  creating the backends: %s\n", err.msg);
        return 1;
    }
    ck_backend_info info;
    g_gpu->info(g_gpu, &info);
    printf("cuda backend: %s\n  %s\n", info.device, info.versions);

    static op_test tests[64];
    const int nt = build_tests(tests, 64);
    const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16};
    for (size_t d = 0; d < 3; d++)
        for (int k = 0; k < nt; k++)
            run_op(&tests[k], dtypes_of(dts[d]), 1000 + (uint64_t)k);

    /* a recomputation in fp32 of a segment whose input is fp16 (autocast drop): mixed
     * dtypes in one call, the CPU's wide path */
    const op_dtypes mixed = {CK_F16, CK_F32, CK_F32, CK_F16, CK_F32, CK_F32};
    for (int k = 0; k < nt; k++)
        if (tests[k].op.kind == CK_OP_CONV || tests[k].op.kind == CK_OP_LINEAR ||
            tests[k].op.kind == CK_OP_MAXPOOL || tests[k].op.kind == CK_OP_UPSAMPLE ||
            tests[k].op.kind == CK_OP_BATCHNORM || tests[k].op.kind == CK_OP_GELU) {
            op_test m = tests[k];
            char desc[128];
            snprintf(desc, sizeof desc, "%s [in fp16, out fp32]", tests[k].desc);
            m.desc = desc;
            if (m.op.kind == CK_OP_CONV)
                m.fwd_cls = m.bwd_cls = CLS_EXACT; /* the direct fp64 kernels: the CPU's sums */
            else if (m.fwd_cls == CLS_LIB)
                m.fwd_cls = m.bwd_cls = CLS_TRANS; /* fp64 on both sides, rounded once */
            run_op(&m, mixed, 5000 + (uint64_t)k);
        }
    /* fp64 convolutions run on the backend's own direct kernels (conv_direct.h), whose
     * fixed-order sums are the CPU's: bitwise */
    for (int k = 0; k < nt; k++)
        if (tests[k].op.kind == CK_OP_CONV) {
            op_test m = tests[k];
            char desc[128];
            snprintf(desc, sizeof desc, "%s [fp64, direct kernels]", tests[k].desc);
            m.desc = desc;
            m.fwd_cls = m.bwd_cls = CLS_EXACT;
            run_op(&m, dtypes_of(CK_F64), 7000 + (uint64_t)k);
        }

    test_dropout_masks();
    test_losses(300);
    test_optimizers(400);
    test_convert(500);
    test_determinism(600);
    if (!g_cpu_as_gpu) {
        check_records(g_gpu, pol == CK_CUDA_ALGO_DETERMINISTIC);
        test_out_of_memory();
    }
    if (!g_quick)
        test_gradchecks(tests, nt);
    if (!g_quick && !g_cpu_as_gpu) {
        /* the fastest policy: the same conv layers through cudnnFind */
        ck_backend *fast = NULL;
        if (ck_backend_cuda_create(&fast, device, CK_CUDA_ALGO_FASTEST, &err) != CK_OK) {
            printf("FAIL  creating the fastest-policy backend: %s\n", err.msg);
            g_fail++;
        } else {
            ck_backend *keep = g_gpu;
            g_gpu = fast;
            for (int k = 0; k < nt; k++)
                if (tests[k].op.kind == CK_OP_CONV)
                    run_op(&tests[k], dtypes_of(CK_F32), 7000 + (uint64_t)k);
            check_records(fast, false);
            g_gpu = keep;
            fast->destroy(fast);
        }
    }
    printf("test_gpu: %d passed, %d failed\n", g_pass, g_fail);
    g_gpu->destroy(g_gpu);
    g_cpu->destroy(g_cpu);
    return g_fail ? 1 : 0;
}
