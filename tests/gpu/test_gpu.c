/*
 * The GPU test program: the op table (tests/backend_ops.h) on the CUDA backend beside the
 * CPU reference `ref`, what only a GPU has (algorithm records, allocation failure, the
 * fastest policy), and the seed model's step time and activation memory. Built with the
 * CUDA backend only ($(BUILD)/test_gpu); tests/gpu/run.sh runs it on the GPU machine,
 * `make cuda-check` runs `--quick` (and, without a GPU, prints one SKIP line and exits 0).
 *
 *   test_gpu [--quick] [--device N] [--filter TEXT] [--verbose]
 *                                            the op suite (exit 0: all passed, 1: not)
 *   test_gpu --bench CASE --dtype D [--device N] [--algo P] [--out FILE]
 *                                            plain and checkpointed steps of CASE
 *   test_gpu --cpu-as-gpu [...]              the cpu-as-cuda stand-in (the fast CPU backend
 *                                            refusing what CUDA refuses) takes the GPU's
 *                                            place: this program rehearsed on any machine
 *
 * The op suite:
 *  - every row of the op table (bo_run_row): forward and backward in fp32, fp16 and bf16
 *    against ref within the row's tolerance class, the low-precision rule, the record key
 *    ledger, linear/conv/conv_transpose backward in two calls (dW and db, then dx with the
 *    input hidden) bitwise equal to one, and (not with --quick) the fp64 and fp32 gradchecks;
 *  - the rows of linear, conv, maxpool, upsample, batchnorm and gelu in a mixed-dtype call
 *    (input fp16, output fp32: an autocast-dropping recomputation) and the convolutions in
 *    fp64 on the backend's direct kernels, which sum in ref's fixed order: bitwise;
 *  - dropout masks, losses, optimizers, convert, calibration rounding, determinism;
 *  - on the GPU: the algorithm records (under --algo deterministic every conv pass ran an
 *    algorithm cuDNN marks deterministic, never backward-filter ALGO_0/ALGO_3 or
 *    backward-data ALGO_0; fp32 with FMA math; nothing switched), an impossible
 *    allocation, and (not with --quick) the convolutions again under the fastest policy.
 * --filter TEXT runs only the rows whose description contains TEXT.
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
#include "harness/model/graph.h"
#include "harness/core/half.h"
#include "harness/model/params.h"
#include "harness/model/plan.h"
#include "harness/core/rng.h"
#include "harness/engine/train.h"
#include "tests/backend_ops.h"

static int g_pass, g_fail;
static bool g_cpu_as_gpu;

/* the backend under test: CUDA, or with --cpu-as-gpu the registry's cpu-as-cuda stand-in */
static ck_status create_under_test(ck_backend **b, int device, ck_cuda_algo_policy pol,
                                   ck_error *err)
{
    if (g_cpu_as_gpu)
        return ck_backend_create("cpu-as-cuda", NULL, b, err);
    return ck_backend_cuda_create(b, device, pol, err);
}

static double elem(ck_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case CK_F32: return ((const float *)p)[i];
    case CK_F64: return ((const double *)p)[i];
    case CK_F16: return ck_f16_to_f32(((const uint16_t *)p)[i]);
    case CK_BF16: return ck_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0.0;
    }
}

/* t's bytes on the host (malloc'd) */
static void *fetch(ck_backend *b, const ck_tensor *t)
{
    size_t bytes = ck_tensor_bytes(t);
    void *host = malloc(bytes ? bytes : 1);
    ck_error err;
    if (host && b->download(b, t, host, &err) != CK_OK) {
        fprintf(stderr, "test_gpu: %s: %s\n", t->name ? t->name : "download", err.msg);
        free(host);
        return NULL;
    }
    return host;
}

// ----------------------------------------------------------------------------
// what only the GPU has

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

static void test_out_of_memory(ck_backend *gpu)
{
    void *p = NULL;
    ck_error err;
    const size_t huge = (size_t)1 << 44; /* 16 TiB */
    ck_status st = gpu->alloc(gpu, huge, &p, &err);
    if (st == CK_ERR_NOMEM && !p && strstr(err.msg, "17592186044416") && !strchr(err.msg, '\n')) {
        printf("PASS  an impossible allocation: %s\n", err.msg);
        g_pass++;
    } else {
        printf("FAIL  an impossible allocation returned %s: %s\n", ck_status_str(st), err.msg);
        g_fail++;
        if (p)
            gpu->free(gpu, p);
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
        const ck_cuda_algo_record *r = NULL;
        int n = g_cpu_as_gpu ? 0 : ck_cuda_algo_records(b, &r); /* the stand-in keeps none */
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
// the op suite

/* every row in fp32/fp16/bf16 (and its gradchecks unless quick), then the mixed-dtype and
 * fp64 variants and what the backends share beyond the ops */
static void run_table(bo_ctx *c, const char *filter, bool quick)
{
    int n;
    const bo_row *rows = bo_rows(&n);
    const unsigned what = quick ? BO_RUN_CLASSES | BO_RUN_LOWP | BO_RUN_SPLIT : BO_RUN_ALL;
    for (int k = 0; k < n; k++)
        if (bo_row_matches(&rows[k], filter))
            bo_run_row(c, k, what);
    /* a recomputation in fp32 of a segment whose input is fp16 (autocast drop): mixed
     * dtypes in one call */
    const bo_dtypes mixed = {CK_F16, CK_F32, CK_F32, CK_F16, CK_F32, CK_F32};
    for (int k = 0; k < n; k++) {
        const ck_op_kind kind = rows[k].op.kind;
        if (!bo_row_matches(&rows[k], filter) ||
            !(kind == CK_OP_CONV || kind == CK_OP_LINEAR || kind == CK_OP_MAXPOOL ||
              kind == CK_OP_UPSAMPLE || kind == CK_OP_BATCHNORM || kind == CK_OP_GELU) ||
            rows[k].op.low_precision_reduction)
            continue;
        /* on CUDA, convolutions: the direct fp64 kernels, the CPU's sums; linear: fp64 on
         * both sides, rounded once (the CPU stand-in has kernels of its own: the row's
         * classes) */
        int cls = kind == CK_OP_CONV ? BO_EXACT : rows[k].fwd == BO_LIB ? BO_TRANS : -1;
        if (g_cpu_as_gpu)
            cls = -1;
        bo_run_variant(c, k, mixed, "in fp16, out fp32", cls);
    }
    /* fp64 convolutions run on the backend's own direct kernels (conv_direct.h), whose
     * fixed-order sums are the CPU's: bitwise */
    for (int k = 0; k < n; k++)
        if (bo_row_matches(&rows[k], filter) && rows[k].op.kind == CK_OP_CONV)
            bo_run_variant(c, k, bo_dtypes_of(CK_F64), "fp64, direct kernels", BO_EXACT);
    if (!filter || !filter[0]) {
        bo_run_dropout_masks(c);
        bo_run_losses(c);
        bo_run_optimizers(c);
        bo_run_convert(c);
        bo_run_calibration_round(c);
        bo_run_determinism(c);
    }
}

static void count(const bo_ctx *c)
{
    g_pass += c->pass;
    g_fail += c->fail;
}

int main(int argc, char **argv)
{
    const char *bench_case = NULL, *dtype = "fp32", *out = NULL, *filter = NULL;
    int device = 0;
    bool quick = false, verbose = false;
    ck_cuda_algo_policy pol = CK_CUDA_ALGO_DETERMINISTIC;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quick") == 0) {
            quick = true;
        } else if (strcmp(a, "--verbose") == 0) {
            verbose = true;
        } else if (strcmp(a, "--cpu-as-gpu") == 0) {
            g_cpu_as_gpu = true;
        } else if (strcmp(a, "--bench") == 0 && v) {
            bench_case = v;
            i++;
        } else if (strcmp(a, "--filter") == 0 && v) {
            filter = v;
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
            fprintf(stderr, "usage: test_gpu [--quick] [--device N] [--filter TEXT] [--verbose] "
                            "[--cpu-as-gpu] | --bench CASE [--dtype D] "
                            "[--algo deterministic|fastest] [--out FILE] [--device N] "
                            "[--cpu-as-gpu]\n");
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
    ck_backend *ref = NULL, *gpu = NULL;
    if (ck_backend_create("ref", NULL, &ref, &err) != CK_OK ||
        create_under_test(&gpu, device, pol, &err) != CK_OK) {
        printf("FAIL  creating the backends: %s\n", err.msg);
        return 1;
    }
    ck_backend_info info;
    gpu->info(gpu, &info);
    printf("backend under test: %s (%s)\n  %s\n", gpu->name, info.device, info.versions);

    bo_ctx *c = malloc(sizeof *c);
    if (!c) {
        printf("FAIL  out of memory\n");
        return 1;
    }
    bo_ctx_init(c, ref, gpu, stdout);
    c->print_passes = verbose;
    run_table(c, filter, quick);
    printf("op table on %s: %d passed, %d failed, %d skipped (%d record keys)\n", gpu->name,
           c->pass, c->fail, c->skip, c->ledger.n);
    count(c);
    if (!g_cpu_as_gpu) {
        check_records(gpu, pol == CK_CUDA_ALGO_DETERMINISTIC);
        test_out_of_memory(gpu);
    } else {
        printf("      algorithm records: the CPU stand-in keeps none (the table's record-key "
               "ledger above is the check that runs here)\n");
    }
    if (!quick && !g_cpu_as_gpu) {
        /* the fastest policy: the same conv layers through cudnnFind */
        ck_backend *fast = NULL;
        if (ck_backend_cuda_create(&fast, device, CK_CUDA_ALGO_FASTEST, &err) != CK_OK) {
            printf("FAIL  creating the fastest-policy backend: %s\n", err.msg);
            g_fail++;
        } else {
            bo_ctx_init(c, ref, fast, stdout);
            int n;
            const bo_row *rows = bo_rows(&n);
            for (int k = 0; k < n; k++)
                if (rows[k].op.kind == CK_OP_CONV && bo_row_matches(&rows[k], filter))
                    bo_run_variant(c, k, bo_dtypes_of(CK_F32), "fp32, fastest", -1);
            count(c);
            check_records(fast, false);
            fast->destroy(fast);
        }
    }
    free(c);
    printf("test_gpu: %d passed, %d failed\n", g_pass, g_fail);
    gpu->destroy(gpu);
    ref->destroy(ref);
    return g_fail ? 1 : 0;
}
