/*
 * CUDA convolution (CK_OP_CONV): conv1d/2d/3d as PyTorch computes it (cross-correlation,
 * groups 1) through cuDNN's convolution calls. Everything that touches cuDNN's
 * convolution API lives in this one file, so it can be swapped for the graph API
 * (cudnnBackend*) without touching the rest of the backend. This version uses the
 * legacy calls (cudnnConvolutionForward/BackwardData/BackwardFilter with
 * cudnnFind* or cudnnGet*_v7 for the algorithm), which cuDNN 9 marks deprecated but ships.
 *
 *   y[n,f,o...] = b[f] + sum_{c,k...} W[f,c,k...] * x[n,c, o*stride - pad_lo + k*dilation]
 *
 * Shapes: conv1d and conv2d run as 4-D NCHW (conv1d with H = 1), conv3d as 5-D NCDHW.
 * cuDNN pads symmetrically; "same" padding with an even window pads one more at the end,
 * so an asymmetric layer runs on a zero-padded copy of its input (and its input gradient
 * is accumulated through a padded copy of dx, so it is still rounded once).
 *
 * Engines (algo_pin.h, ck_cuda_conv_engine_for): calls whose tensors are all fp32, all fp16
 * or all bf16 go to cuDNN: fp32 as FLOAT with FMA math only (no TF32; the math type is read
 * back after it is set), fp16 (HALF) and bf16 (BFLOAT16) with FLOAT compute. The bias is
 * broadcast into y and the convolution adds to it (beta = 1); backward data and filter
 * accumulate into dx and dW (beta = 1); so each element is rounded once. The bias gradient
 * is a fixed-order double reduction (cuda_common.cuh). fp64 calls run on the backend's own
 * deterministic direct kernels (conv_direct.h: bitwise the CPU reference's), and calls of
 * mixed dtypes (a recomputation in another dtype) run them on fp64 copies with results
 * rounded once into their tensors, as the CPU's wide views do (cuda_forward_wide /
 * cuda_backward_wide). No DOUBLE data reaches cuDNN.
 *
 * Algorithms (ck_cuda_algo_policy; rules in algo_policy.c and algo_pin.h):
 *  - deterministic: cuDNN's heuristic ranking (cudnnGet*_v7), keeping only algorithms
 *    it marks deterministic and never backward-filter ALGO_0/ALGO_3 or backward-data
 *    ALGO_0. No timing is involved, so every run of the program picks the same ones.
 *  - fastest: cudnnFind* measures every algorithm once per shape; fastest first.
 * Before each query the descriptor's math type is set for the query's dtype, so the math
 * type one pass ran with never reaches the next pass's query. Each candidate's workspace
 * comes from cudnnGet*WorkspaceSize, and candidates above the workspace cap
 * (CK_CUDA_WORKSPACE_MIB, default 1 GiB) are dropped. The algorithm that first runs a
 * (pass, dtype, shape) is pinned for the process; under `deterministic` a workspace that
 * cannot be allocated is an error naming the layer and the bytes, never a silent switch.
 * cuDNN answering NOT_SUPPORTED (e.g. fp16/bf16 NCDHW through the legacy API) is
 * CK_ERR_UNSUPPORTED naming the layer. What ran is recorded per layer and pass.
 */
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/conv_direct.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static_assert(CUDNN_CONVOLUTION_FWD_ALGO_COUNT == CK_CUDA_FWD_ALGO_COUNT &&
                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT == CK_CUDA_BWD_DATA_ALGO_COUNT &&
                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT == CK_CUDA_BWD_FILTER_ALGO_COUNT,
              "algo_policy.c's name tables follow cuDNN's algorithm enums");
static_assert(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 == 0 &&
                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 == 3 &&
                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 == 0 &&
                  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM == 1,
              "algo_policy.c refuses these by number");
static_assert(CUDNN_NON_DETERMINISTIC == (int)CK_CUDA_NONDETERMINISTIC &&
                  CUDNN_DETERMINISTIC == (int)CK_CUDA_DETERMINISTIC,
              "ck_cuda_determinism mirrors cudnnDeterminism_t");
static_assert(CUDNN_DEFAULT_MATH == (int)CK_CUDA_MATH_DEFAULT &&
                  CUDNN_TENSOR_OP_MATH == (int)CK_CUDA_MATH_TENSOR_OP &&
                  CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ==
                      (int)CK_CUDA_MATH_TENSOR_OP_ALLOW_CONVERSION &&
                  CUDNN_FMA_MATH == (int)CK_CUDA_MATH_FMA,
              "ck_cuda_math mirrors cudnnMathType_t");

// ----------------------------------------------------------------------------
// geometry: the op's shapes as cuDNN sees them

typedef struct {
    int nsp;     /* the op's spatial dims (1..3) */
    int ncd;     /* cuDNN's spatial dims: 2 (conv1d, conv2d) or 3 (conv3d) */
    int64_t N, C, F;
    int64_t in[3], out[3], k[3]; /* first ncd entries; conv1d gets a leading 1 */
    int pad[3], stride[3], dil[3]; /* the symmetric part of the padding, cuDNN's */
    int extra_lo[3], extra_hi[3];  /* explicit zero padding on top (asymmetric layers) */
    int64_t pin[3];                /* input spatial sizes after the explicit padding */
    bool padded;                   /* any explicit padding */
} conv_geom;

static int64_t prod(const int64_t *v, int n)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        p *= v[i];
    return p;
}

/* Checks x (N, C, s...), W (F, C, k...), b (F), y (N, F, o...) against op (the shapes as
 * the CPU's conv_setup, backends/check/check.h) and fills g. */
static ck_status conv_setup(const ck_op_params *op, const ck_tensor *x, const ck_tensor *w,
                            const ck_tensor *b, const ck_tensor *y, conv_geom *g, ck_error *err)
{
    CK_TRY(ck_opc_conv_fit(op, x, w, b, y, err));
    const int nsp = op->nsp;
    memset(g, 0, sizeof *g);
    g->nsp = nsp;
    g->ncd = nsp == 3 ? 3 : 2;
    g->N = x->shape.dim[0];
    g->C = x->shape.dim[1];
    g->F = w->shape.dim[0];
    for (int a = 0; a < g->ncd; a++) {
        int s = a - (g->ncd - nsp); /* the op's axis, < 0 for conv1d's added H axis */
        g->in[a] = s < 0 ? 1 : x->shape.dim[2 + s];
        g->out[a] = s < 0 ? 1 : y->shape.dim[2 + s];
        g->k[a] = s < 0 ? 1 : op->kernel[s];
        int stride = s < 0 ? 1 : op->stride[s], dil = s < 0 ? 1 : op->dilation[s];
        int lo = s < 0 ? 0 : op->pad_lo[s], hi = s < 0 ? 0 : op->pad_hi[s];
        if (stride < 1 || dil < 1 || lo < 0 || hi < 0)
            return ck_fail(err, CK_ERR_INTERNAL,
                           "conv%dd: stride %d, dilation %d, padding %d/%d on axis %d", nsp,
                           stride, dil, lo, hi, s);
        g->stride[a] = stride;
        g->dil[a] = dil;
        g->pad[a] = lo < hi ? lo : hi;
        g->extra_lo[a] = lo - g->pad[a];
        g->extra_hi[a] = hi - g->pad[a];
        g->pin[a] = g->in[a] + g->extra_lo[a] + g->extra_hi[a];
        g->padded = g->padded || g->extra_lo[a] || g->extra_hi[a];
    }
    /* the legacy descriptors take int sizes and strides */
    const int64_t nx = g->N * g->C * prod(g->pin, g->ncd), ny = g->N * g->F * prod(g->out, g->ncd),
                  nw = g->F * g->C * prod(g->k, g->ncd);
    if (nx > INT_MAX || ny > INT_MAX || nw > INT_MAX) {
        char sx[96], sy[96];
        ck_shape_str(&x->shape, sx, sizeof sx);
        ck_shape_str(&y->shape, sy, sizeof sy);
        return ck_fail(err, CK_ERR_UNSUPPORTED,
                       "conv%dd: input '%s' %s or output '%s' %s has more than 2^31 - 1 "
                       "elements, the most cuDNN's convolution descriptors take", nsp,
                       ck_cuda_tname(x), sx, ck_cuda_tname(y), sy);
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// descriptors

static cudnnDataType_t cudnn_type(ck_dtype dt)
{
    switch (dt) {
    case CK_F64: return CUDNN_DATA_DOUBLE;
    case CK_F16: return CUDNN_DATA_HALF;
    case CK_BF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
    }
}

struct conv_descs {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr; /* x: the input as cuDNN reads it */
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    conv_descs() = default;
    conv_descs(const conv_descs &) = delete;
    conv_descs &operator=(const conv_descs &) = delete;
    ~conv_descs()
    {
        if (x)
            (void)cudnnDestroyTensorDescriptor(x);
        if (y)
            (void)cudnnDestroyTensorDescriptor(y);
        if (w)
            (void)cudnnDestroyFilterDescriptor(w);
        if (conv)
            (void)cudnnDestroyConvolutionDescriptor(conv);
    }
};

#define CONV_MAX_CANDIDATES 32

// ----------------------------------------------------------------------------
// algorithm choice: ranked once per (pass, dtype, shape), then pinned (algo_pin.h)

struct ck_cuda_conv_cache {
    ck_cuda_pin_table pins;
    ck_cuda_pin_table fallbacks; /* keys cuDNN refused: the direct kernels (algo_pin.h) */
};

void cuda_conv_release(ck_cuda *cu)
{
    if (cu->cudnn)
        (void)cudnnDestroy(cu->cudnn);
    cu->cudnn = nullptr;
    if (cu->conv_cache) {
        ck_cuda_pin_free(&cu->conv_cache->pins);
        ck_cuda_pin_free(&cu->conv_cache->fallbacks);
        free(cu->conv_cache);
    }
    cu->conv_cache = nullptr;
}

static ck_cuda_conv_key make_key(const conv_geom *g, ck_dtype dt, ck_cuda_pass pass)
{
    int xd[5] = {(int)g->N, (int)g->C}, wd[5] = {(int)g->F, (int)g->C},
        yd[5] = {(int)g->N, (int)g->F};
    for (int a = 0; a < g->ncd; a++) {
        xd[2 + a] = (int)g->pin[a];
        wd[2 + a] = (int)g->k[a];
        yd[2 + a] = (int)g->out[a];
    }
    return ck_cuda_conv_key_make(pass, dt, g->ncd, xd, wd, yd, g->pad, g->stride, g->dil);
}

/* Where a failure happens, for the one-line messages (algo_pin.h). */
struct conv_site_buf {
    char layer[64];
    ck_cuda_conv_site s;
    conv_site_buf(const ck_cuda *cu, const ck_tensor *weight, const conv_geom *g, ck_dtype dt,
                  ck_cuda_pass pass)
    {
        ck_cuda_layer_name(weight ? weight->name : NULL, layer, sizeof layer);
        s.layer = layer;
        s.nsp = g->nsp;
        s.pass = pass;
        s.dtype = dt;
        s.policy = cu->policy;
    }
};

/* A cuDNN call that may answer NOT_SUPPORTED for this layer's dtype or layout (fp16/bf16
 * NCDHW through the legacy API): CK_ERR_UNSUPPORTED naming the layer; any other failure is
 * CK_ERR_BACKEND as usual. */
#define CONV_CUDNN_CHECK(site, call)                                                       \
    do {                                                                                   \
        cudnnStatus_t conv_rc_ = (call);                                                   \
        if (conv_rc_ == CUDNN_STATUS_NOT_SUPPORTED)                                        \
            return ck_cuda_fail_unsupported_call(site, #call, err);                        \
        CK_CUDNN_CHECK(conv_rc_);                                                          \
    } while (0)

/* cuDNN's perf results (any of the three structs) in cuDNN-independent form. */
template <typename Perf>
static int to_candidates(const Perf *perf, int n, ck_cuda_algo_candidate *c, bool timed)
{
    for (int i = 0; i < n; i++) {
        c[i].algo = (int)perf[i].algo;
        c[i].status_ok = perf[i].status == CUDNN_STATUS_SUCCESS;
        c[i].time_ms = timed ? perf[i].time : -1.0f;
        c[i].memory = perf[i].memory;
        c[i].determinism = perf[i].determinism == CUDNN_DETERMINISTIC ? CK_CUDA_DETERMINISTIC
                                                                      : CK_CUDA_NONDETERMINISTIC;
        c[i].math = (int)perf[i].mathType;
    }
    return n;
}

/* Sets the descriptor's math type and reads it back: fp32 must hold FMA exactly (no TF32,
 * no fallback to another math type). */
static ck_status set_math(const conv_descs *d, const ck_cuda_conv_site *site, int math,
                          ck_error *err)
{
    CK_CUDNN_CHECK(cudnnSetConvolutionMathType(d->conv, static_cast<cudnnMathType_t>(math)));
    cudnnMathType_t got = CUDNN_DEFAULT_MATH;
    CK_CUDNN_CHECK(cudnnGetConvolutionMathType(d->conv, &got));
    if ((int)got != math || !ck_cuda_math_allowed(site->dtype, (int)got))
        return ck_cuda_fail_math(site, math, (int)got, err);
    return CK_OK;
}

static ck_status make_descs(const conv_geom *g, const ck_cuda_conv_site *site, conv_descs *d,
                           ck_error *err)
{
    const ck_dtype dt = site->dtype;
    const int nb = g->ncd + 2;
    int xd[5] = {(int)g->N, (int)g->C}, yd[5] = {(int)g->N, (int)g->F},
        wd[5] = {(int)g->F, (int)g->C};
    for (int a = 0; a < g->ncd; a++) {
        xd[2 + a] = (int)g->pin[a];
        yd[2 + a] = (int)g->out[a];
        wd[2 + a] = (int)g->k[a];
    }
    const cudnnDataType_t t = cudnn_type(dt);
    CK_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d->x));
    CK_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d->y));
    CK_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d->w));
    CK_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d->conv));
    CONV_CUDNN_CHECK(site, cudnnSetTensorNdDescriptorEx(d->x, CUDNN_TENSOR_NCHW, t, nb, xd));
    CONV_CUDNN_CHECK(site, cudnnSetTensorNdDescriptorEx(d->y, CUDNN_TENSOR_NCHW, t, nb, yd));
    CONV_CUDNN_CHECK(site, cudnnSetFilterNdDescriptor(d->w, t, CUDNN_TENSOR_NCHW, nb, wd));
    CONV_CUDNN_CHECK(site, cudnnSetConvolutionNdDescriptor(d->conv, g->ncd, g->pad, g->stride, g->dil,
                                                   CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT));
    CK_TRY(set_math(d, site, ck_cuda_query_math(dt), err));

    int od[5] = {0, 0, 0, 0, 0};
    CONV_CUDNN_CHECK(site, cudnnGetConvolutionNdForwardOutputDim(d->conv, d->x, d->w, nb, od));
    bool same = true;
    for (int i = 0; i < nb; i++)
        same = same && od[i] == yd[i];
    if (!same)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "conv%dd: cuDNN computes output [%d, %d, %d, %d, %d] for input "
                       "[%d, %d, %d, %d, %d] but the graph says [%d, %d, %d, %d, %d]",
                       g->nsp, od[0], od[1], od[2], od[3], od[4], xd[0], xd[1], xd[2], xd[3],
                       xd[4], yd[0], yd[1], yd[2], yd[3], yd[4]);
    return CK_OK;
}

static ck_status ensure_cudnn(ck_cuda *cu, ck_error *err)
{
    if (cu->cudnn)
        return CK_OK;
    CK_CUDNN_CHECK(cudnnCreate(&cu->cudnn));
    CK_CUDNN_CHECK(cudnnSetStream(cu->cudnn, cu->stream));
    return CK_OK;
}

/* The workspace cudnnGet*WorkspaceSize reports for algo with the descriptor's current math
 * type; false (and no error) when cuDNN does not support algo for this shape. */
static ck_status workspace_size(ck_cuda *cu, const conv_descs *d, ck_cuda_pass pass, int algo,
                                size_t *bytes, bool *ok, ck_error *err)
{
    cudnnStatus_t rc;
    *bytes = 0;
    switch (pass) {
    case CK_CUDA_PASS_FORWARD:
        rc = cudnnGetConvolutionForwardWorkspaceSize(
            cu->cudnn, d->x, d->w, d->conv, d->y, static_cast<cudnnConvolutionFwdAlgo_t>(algo),
            bytes);
        break;
    case CK_CUDA_PASS_BACKWARD_DATA:
        rc = cudnnGetConvolutionBackwardDataWorkspaceSize(
            cu->cudnn, d->w, d->y, d->conv, d->x,
            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
        break;
    default:
        rc = cudnnGetConvolutionBackwardFilterWorkspaceSize(
            cu->cudnn, d->x, d->y, d->conv, d->w,
            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
        break;
    }
    *ok = rc == CUDNN_STATUS_SUCCESS;
    if (rc == CUDNN_STATUS_NOT_SUPPORTED || rc == CUDNN_STATUS_BAD_PARAM)
        return CK_OK;
    CK_CUDNN_CHECK(rc);
    return CK_OK;
}

/* Asks cuDNN (heuristics or measurement, per the policy) for the pass's algorithms, with
 * the descriptor's math type set for the query first (so the math a previous pass ran
 * with never leaks into this query) and every workspace size from cudnnGet*WorkspaceSize. */
static ck_status query_algorithms(ck_cuda *cu, const conv_descs *d, const ck_cuda_conv_site *site,
                                  bool find, ck_cuda_algo_candidate *c, int *n, ck_error *err)
{
    cudnnHandle_t h = cu->cudnn;
    int max = 0, got = 0;
    CK_TRY(set_math(d, site, ck_cuda_query_math(site->dtype), err));
    if (find) {
        /* cudnnFind allocates its own buffers with cudaMalloc: hand back the pool's
         * cached blocks first */
        CK_CUDA_CHECK(cudaStreamSynchronize(cu->stream));
        CK_CUDA_CHECK(cudaMemPoolTrimTo(cu->pool, 0));
    }
    switch (site->pass) {
    case CK_CUDA_PASS_FORWARD: {
        cudnnConvolutionFwdAlgoPerf_t perf[CONV_MAX_CANDIDATES];
        CK_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
        max = max < CONV_MAX_CANDIDATES ? max : CONV_MAX_CANDIDATES;
        if (find)
            CONV_CUDNN_CHECK(site, cudnnFindConvolutionForwardAlgorithm(
                                       h, d->x, d->w, d->conv, d->y, max, &got, perf));
        else
            CONV_CUDNN_CHECK(site, cudnnGetConvolutionForwardAlgorithm_v7(
                                       h, d->x, d->w, d->conv, d->y, max, &got, perf));
        *n = to_candidates(perf, got, c, find);
        break;
    }
    case CK_CUDA_PASS_BACKWARD_DATA: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CONV_MAX_CANDIDATES];
        CK_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
        max = max < CONV_MAX_CANDIDATES ? max : CONV_MAX_CANDIDATES;
        if (find)
            CONV_CUDNN_CHECK(site, cudnnFindConvolutionBackwardDataAlgorithm(
                                       h, d->w, d->y, d->conv, d->x, max, &got, perf));
        else
            CONV_CUDNN_CHECK(site, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                       h, d->w, d->y, d->conv, d->x, max, &got, perf));
        *n = to_candidates(perf, got, c, find);
        break;
    }
    case CK_CUDA_PASS_BACKWARD_FILTER: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CONV_MAX_CANDIDATES];
        CK_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
        max = max < CONV_MAX_CANDIDATES ? max : CONV_MAX_CANDIDATES;
        if (find)
            CONV_CUDNN_CHECK(site, cudnnFindConvolutionBackwardFilterAlgorithm(
                                       h, d->x, d->y, d->conv, d->w, max, &got, perf));
        else
            CONV_CUDNN_CHECK(site, cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                                       h, d->x, d->y, d->conv, d->w, max, &got, perf));
        *n = to_candidates(perf, got, c, find);
        break;
    }
    default:
        return ck_fail(err, CK_ERR_INTERNAL, "conv: pass %d", (int)site->pass);
    }
    /* the workspace each candidate needs with its own math type, from cuDNN's size query
     * (the perf structs' memory field is an estimate) */
    for (int i = 0; i < *n; i++) {
        if (!c[i].status_ok || c[i].math < 0 || c[i].math >= CK_CUDA_MATH_COUNT)
            continue;
        CK_CUDNN_CHECK(cudnnSetConvolutionMathType(d->conv,
                                                   static_cast<cudnnMathType_t>(c[i].math)));
        size_t bytes = 0;
        bool ok = false;
        CK_TRY(workspace_size(cu, d, site->pass, c[i].algo, &bytes, &ok, err));
        c[i].status_ok = ok;
        c[i].memory = bytes;
    }
    return set_math(d, site, ck_cuda_query_math(site->dtype), err);
}

/* The pinned (or ranked, before its first run) choice for this pass and shape, asking
 * cuDNN on first use. */
static ck_status conv_choice_for(ck_cuda *cu, const conv_geom *g, const conv_descs *d,
                                 const ck_cuda_conv_site *site, ck_cuda_conv_choice **out,
                                 ck_error *err)
{
    const ck_cuda_conv_key key = make_key(g, site->dtype, site->pass);
    if (!cu->conv_cache) {
        cu->conv_cache = static_cast<ck_cuda_conv_cache *>(calloc(1, sizeof *cu->conv_cache));
        if (!cu->conv_cache)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory caching convolution algorithms");
    }
    if ((*out = ck_cuda_pin_find(&cu->conv_cache->pins, &key)) != nullptr)
        return CK_OK;
    const bool find = cu->policy == CK_CUDA_ALGO_FASTEST;
    ck_cuda_algo_candidate raw[CONV_MAX_CANDIDATES], ranked[CONV_MAX_CANDIDATES];
    int nraw = 0, order[CONV_MAX_CANDIDATES];
    CK_TRY(query_algorithms(cu, d, site, find, raw, &nraw, err));
    const int usable = ck_cuda_algo_rank(site->pass, site->dtype, cu->policy, cu->workspace_cap,
                                         find, raw, nraw, order);
    if (usable == 0)
        return ck_cuda_fail_no_algorithm(site, cu->workspace_cap, raw, nraw, err);
    for (int i = 0; i < usable; i++)
        ranked[i] = raw[order[i]];
    return ck_cuda_pin_add(&cu->conv_cache->pins, &key, ranked, usable, find, out, err);
}

/* alpha and beta as cuDNN wants them: float (no DOUBLE data reaches cuDNN) */
struct conv_scalars {
    float f[2] = {1.0f, 0.0f};
    explicit conv_scalars(bool accumulate) { f[1] = accumulate ? 1.0f : 0.0f; }
    const void *alpha() const { return &f[0]; }
    const void *beta() const { return &f[1]; }
};

/* Runs `call(algo, workspace, bytes)` with the choice's pinned algorithm, or before its
 * first run with the best candidate the rules of algo_pin.h let run, and records it. */
template <typename Call>
static ck_status conv_run(ck_cuda *cu, ck_cuda_conv_choice *ch, const conv_descs *d,
                          const conv_geom *g, const ck_cuda_conv_site *site,
                          const ck_tensor *weight, Call call, ck_error *err)
{
    for (;;) {
        const ck_cuda_algo_candidate *c = ck_cuda_choice_current(ch);
        if (!c)
            return ck_cuda_fail_no_algorithm(site, cu->workspace_cap, ch->cand, ch->n, err);
        CK_TRY(set_math(d, site, c->math, err));
        ck_dev_buf ws;
        if (c->memory > 0) {
            ck_error oom;
            ck_status st = ws.alloc(cu, c->memory, "the cuDNN workspace", &oom, true);
            if (st == CK_ERR_NOMEM) {
                if (ck_cuda_after_failure(cu->policy, ch->pinned, CK_CUDA_FAIL_NO_WORKSPACE) ==
                    CK_CUDA_FAIL)
                    return ck_cuda_fail_workspace(site, c->algo, c->memory, ch->pinned, err);
                ck_cuda_choice_skip(ch);
                continue;
            }
            if (st != CK_OK) {
                *err = oom;
                return st;
            }
        }
        cudnnStatus_t rc = call(c->algo, ws.p, c->memory);
        if (rc == CUDNN_STATUS_NOT_SUPPORTED) {
            if (ck_cuda_after_failure(cu->policy, ch->pinned, CK_CUDA_FAIL_NOT_SUPPORTED) ==
                    CK_CUDA_FAIL ||
                ch->tried + 1 >= ch->n)
                return ck_cuda_fail_refused(site, c->algo, ch->pinned, err);
            ck_cuda_choice_skip(ch);
            continue;
        }
        static const char *const calls[CK_CUDA_PASS_COUNT] = {
            "cudnnConvolutionForward", "cudnnConvolutionBackwardData",
            "cudnnConvolutionBackwardFilter"};
        CK_TRY(ck_gpu_status(rc, __FILE__, __LINE__, calls[site->pass], err));
        ck_cuda_choice_ran(ch);
        char op[16], engine[64], math[48];
        snprintf(op, sizeof op, "conv%dd", g->nsp);
        snprintf(engine, sizeof engine, "cudnn %s", ck_cuda_conv_algo_name(site->pass, c->algo));
        if (c->math == CK_CUDA_MATH_FMA)
            snprintf(math, sizeof math, "FMA (no TF32)");
        else
            snprintf(math, sizeof math, "%s", ck_cuda_math_name(c->math));
        return cuda_record_algo(cu, weight, op, site->pass, site->dtype, engine, c->algo,
                                c->determinism == CK_CUDA_DETERMINISTIC, math, c->memory,
                                c->time_ms, ch->from_find ? "find" : "heuristic", err);
    }
}

// ----------------------------------------------------------------------------
// kernels: explicit padding, bias broadcast, bias gradient

/* Sizes of a (planes, d0, d1, d2) box, cuDNN's spatial dims with leading 1s. */
typedef struct {
    int64_t planes, d[3];
} conv_box;

static conv_box make_box(int64_t planes, const int64_t *sp, int ncd)
{
    conv_box b = {planes, {1, 1, 1}};
    for (int a = 0; a < ncd; a++)
        b.d[3 - ncd + a] = sp[a];
    return b;
}

/* dst (padded box) = src (inner box) placed at offset lo, zeros around it; one dtype */
static __global__ void conv_pad_kernel(ck_dv dst, ck_dv src, conv_box outer, conv_box inner, int64_t lo0,
                                int64_t lo1, int64_t lo2)
{
    CK_GRID_STRIDE(i, outer.planes * outer.d[0] * outer.d[1] * outer.d[2])
    {
        int64_t q2 = i % outer.d[2], t = i / outer.d[2];
        int64_t q1 = t % outer.d[1];
        t /= outer.d[1];
        int64_t q0 = t % outer.d[0], p = t / outer.d[0];
        int64_t a0 = q0 - lo0, a1 = q1 - lo1, a2 = q2 - lo2;
        bool inside = a0 >= 0 && a0 < inner.d[0] && a1 >= 0 && a1 < inner.d[1] && a2 >= 0 &&
                      a2 < inner.d[2];
        ck_st(dst, i,
              inside ? ck_ld(src, ((p * inner.d[0] + a0) * inner.d[1] + a1) * inner.d[2] + a2)
                     : 0.0);
    }
}

/* dst (inner box) = src (padded box) at offset lo; one dtype */
static __global__ void conv_crop_kernel(ck_dv dst, ck_dv src, conv_box outer, conv_box inner, int64_t lo0,
                                 int64_t lo1, int64_t lo2)
{
    CK_GRID_STRIDE(i, inner.planes * inner.d[0] * inner.d[1] * inner.d[2])
    {
        int64_t a2 = i % inner.d[2], t = i / inner.d[2];
        int64_t a1 = t % inner.d[1];
        t /= inner.d[1];
        int64_t a0 = t % inner.d[0], p = t / inner.d[0];
        ck_st(dst, i,
              ck_ld(src, ((p * outer.d[0] + a0 + lo0) * outer.d[1] + a1 + lo1) * outer.d[2] + a2 +
                             lo2));
    }
}

/* y[n, f, s] = b[f]; y (N, F, S), same dtype */
static __global__ void conv_bias_fill_kernel(ck_dv y, ck_dv b, int64_t total, int64_t F, int64_t S)
{
    CK_GRID_STRIDE(i, total)
    ck_st(y, i, ck_ld(b, (i / S) % F));
}

/* sum over (n, s) of dy[n, f, s] */
struct conv_dbias_term {
    ck_dv dy;
    int64_t F, S;
    __device__ ck_dvec<1> operator()(int64_t f, int64_t m) const
    {
        const int64_t n = m / S, s = m % S;
        return {{ck_ld(dy, (n * F + f) * S + s)}};
    }
};

/* db[f] += (T)sum[f] as the CPU adds it (ck_acc_mode) */
static __global__ void conv_dbias_apply_kernel(ck_dv db, const double *sum, int64_t F, int mode)
{
    CK_GRID_STRIDE(f, F)
    ck_acc_mode(db, f, sum[f], mode);
}

/* Copies x into a zero-padded buffer (when the layer pads asymmetrically). */
static ck_status pad_input(ck_cuda *cu, const conv_geom *g, ck_dtype dt, void *x,
                           ck_dev_buf *buf, const char *what, ck_error *err)
{
    const conv_box outer = make_box(g->N * g->C, g->pin, g->ncd);
    const conv_box inner = make_box(g->N * g->C, g->in, g->ncd);
    int64_t lo[3] = {0, 0, 0};
    for (int a = 0; a < g->ncd; a++)
        lo[3 - g->ncd + a] = g->extra_lo[a];
    const int64_t total = outer.planes * outer.d[0] * outer.d[1] * outer.d[2];
    CK_TRY(buf->alloc(cu, (size_t)total * ck_dtype_size(dt), what, err));
    const ck_dv dst = {buf->p, (int)dt}, src = {x, (int)dt};
    conv_pad_kernel<<<ck_blocks(total), CK_THREADS, 0, cu->stream>>>(dst, src, outer, inner,
                                                                     lo[0], lo[1], lo[2]);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

/* Copies the interior of a padded buffer back into dx. */
static ck_status crop_into(ck_cuda *cu, const conv_geom *g, ck_dtype dt, const ck_dev_buf *buf,
                           void *dx, ck_error *err)
{
    const conv_box outer = make_box(g->N * g->C, g->pin, g->ncd);
    const conv_box inner = make_box(g->N * g->C, g->in, g->ncd);
    int64_t lo[3] = {0, 0, 0};
    for (int a = 0; a < g->ncd; a++)
        lo[3 - g->ncd + a] = g->extra_lo[a];
    const int64_t total = inner.planes * inner.d[0] * inner.d[1] * inner.d[2];
    const ck_dv dst = {dx, (int)dt}, src = {buf->p, (int)dt};
    conv_crop_kernel<<<ck_blocks(total), CK_THREADS, 0, cu->stream>>>(dst, src, outer, inner,
                                                                      lo[0], lo[1], lo[2]);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

// ----------------------------------------------------------------------------
// fp64 and mixed dtypes: the backend's own deterministic kernels (conv_direct.h)

static __global__ void conv_direct_forward_kernel(ck_conv_direct_geom g, const double *x,
                                                  const double *w, const double *b, double *y,
                                                  int64_t total)
{
    CK_GRID_STRIDE(i, total)
    y[i] = ck_conv_direct_forward_at(&g, x, w, b, i);
}

static __global__ void conv_direct_data_kernel(ck_conv_direct_geom g, const double *dy,
                                               const double *w, double *dx, int64_t total)
{
    CK_GRID_STRIDE(i, total)
    dx[i] = ck_conv_direct_backward_data_at(&g, dy, w, dx[i], i);
}

static __global__ void conv_direct_filter_kernel(ck_conv_direct_geom g, const double *x,
                                                 const double *dy, double *dw, int64_t total)
{
    CK_GRID_STRIDE(i, total)
    dw[i] = ck_conv_direct_backward_filter_at(&g, x, dy, dw[i], i);
}

static __global__ void conv_direct_bias_kernel(ck_conv_direct_geom g, const double *dy,
                                               double *db)
{
    CK_GRID_STRIDE(f, g.F)
    db[f] = ck_conv_direct_backward_bias_at(&g, dy, db[f], f);
}

/* Records the direct engine for the layer's pass (as cuDNN's algorithms are recorded). */
static ck_status record_direct(ck_cuda *cu, const ck_tensor *weight, int nsp, ck_cuda_pass pass,
                               ck_error *err)
{
    char op[16];
    snprintf(op, sizeof op, "conv%dd", nsp);
    return cuda_record_algo(cu, weight, op, pass, CK_F64, "direct fp64 (ckpt-harness)", -1,
                            true, "fp64, no FMA", 0, -1.0f, "fixed", err);
}

static ck_status conv_direct_forward(ck_cuda *cu, const ck_op_params *op, ck_op_io *io,
                                     const ck_tensor *b, ck_error *err)
{
    ck_conv_direct_geom g;
    CK_TRY(ck_conv_direct_setup(op, io->in[0], io->weight, b, io->out, &g, err));
    const int64_t total = ck_shape_numel(&io->out->shape);
    conv_direct_forward_kernel<<<ck_blocks(total), CK_THREADS, 0, cu->stream>>>(
        g, static_cast<const double *>(io->in[0]->data),
        static_cast<const double *>(io->weight->data),
        b ? static_cast<const double *>(b->data) : nullptr, static_cast<double *>(io->out->data),
        total);
    CK_LAUNCH_CHECK();
    return record_direct(cu, io->weight, op->nsp, CK_CUDA_PASS_FORWARD, err);
}

static ck_status conv_direct_backward(ck_cuda *cu, const ck_op_params *op, const ck_op_io *io,
                                      ck_op_grads *gr, ck_tensor *db, ck_error *err)
{
    ck_conv_direct_geom g;
    CK_TRY(ck_conv_direct_setup(op, io->in[0], io->weight, db, gr->dout, &g, err));
    const double *dy = static_cast<const double *>(gr->dout->data);
    if (gr->din[0]) {
        const int64_t total = ck_shape_numel(&gr->din[0]->shape);
        conv_direct_data_kernel<<<ck_blocks(total), CK_THREADS, 0, cu->stream>>>(
            g, dy, static_cast<const double *>(io->weight->data),
            static_cast<double *>(gr->din[0]->data), total);
        CK_LAUNCH_CHECK();
        CK_TRY(record_direct(cu, io->weight, op->nsp, CK_CUDA_PASS_BACKWARD_DATA, err));
    }
    if (gr->dweight) {
        const int64_t total = ck_shape_numel(&gr->dweight->shape);
        conv_direct_filter_kernel<<<ck_blocks(total), CK_THREADS, 0, cu->stream>>>(
            g, static_cast<const double *>(io->in[0]->data), dy,
            static_cast<double *>(gr->dweight->data), total);
        CK_LAUNCH_CHECK();
        CK_TRY(record_direct(cu, io->weight, op->nsp, CK_CUDA_PASS_BACKWARD_FILTER, err));
    }
    if (db) {
        conv_direct_bias_kernel<<<ck_blocks(g.F), CK_THREADS, 0, cu->stream>>>(
            g, dy, static_cast<double *>(db->data));
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// the fallback for passes cuDNN refuses (algo_pin.h, ck_cuda_falls_back)

static ck_status conv_cache(ck_cuda *cu, ck_error *err)
{
    if (!cu->conv_cache) {
        cu->conv_cache = static_cast<ck_cuda_conv_cache *>(calloc(1, sizeof *cu->conv_cache));
        if (!cu->conv_cache)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory caching convolution algorithms");
    }
    return CK_OK;
}

/* Whether this pass of this shape fell back before. */
static bool conv_fell_back(ck_cuda *cu, const conv_geom *g, ck_dtype dt, ck_cuda_pass pass)
{
    const ck_cuda_conv_key key = make_key(g, dt, pass);
    return cu->conv_cache && ck_cuda_fallback_find(&cu->conv_cache->fallbacks, &key);
}

/* Whether an algorithm has run (is pinned) for this pass of this shape. */
static bool conv_pinned(ck_cuda *cu, const conv_geom *g, ck_dtype dt, ck_cuda_pass pass)
{
    const ck_cuda_conv_key key = make_key(g, dt, pass);
    const ck_cuda_conv_choice *ch =
        cu->conv_cache ? ck_cuda_pin_find(&cu->conv_cache->pins, &key) : nullptr;
    return ch && ch->pinned;
}

/* After cuDNN's status st for a pass that was not pinned before: true (and remembered) when
 * the pass moves onto the direct kernels, whose call the caller then makes. */
static bool conv_take_fallback(ck_cuda *cu, const conv_geom *g, ck_dtype dt, ck_cuda_pass pass,
                               ck_status st, bool was_pinned, ck_error *err)
{
    if (!ck_cuda_falls_back(st, was_pinned))
        return false;
    const ck_cuda_conv_key key = make_key(g, dt, pass);
    ck_error keep = *err;
    if (conv_cache(cu, err) != CK_OK ||
        ck_cuda_fallback_add(&cu->conv_cache->fallbacks, &key, err) != CK_OK) {
        *err = keep;
        return false;
    }
    (void)cudaGetLastError();
    return true;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

/* The forward through cuDNN (one dtype among fp32, fp16, bf16). */
static ck_status conv_forward_cudnn(ck_cuda *cu, ck_op_io *io, const ck_tensor *b,
                                    const conv_geom *gp, ck_dtype dt, ck_error *err)
{
    const conv_geom &g = *gp;
    const ck_tensor *x = io->in[0];
    const conv_site_buf site(cu, io->weight, &g, dt, CK_CUDA_PASS_FORWARD);
    CK_TRY(ensure_cudnn(cu, err));
    conv_descs d;
    CK_TRY(make_descs(&g, &site.s, &d, err));

    ck_dev_buf xpad;
    const void *xin = x->data;
    if (g.padded) {
        CK_TRY(pad_input(cu, &g, dt, x->data, &xpad, "the padded convolution input", err));
        xin = xpad.p;
    }
    if (b) {
        const int64_t S = prod(g.out, g.ncd), total = g.N * g.F * S;
        conv_bias_fill_kernel<<<ck_blocks(total), CK_THREADS, 0, cu->stream>>>(
            ck_view(io->out), ck_view(b), total, g.F, S);
        CK_LAUNCH_CHECK();
    }
    ck_cuda_conv_choice *ch;
    CK_TRY(conv_choice_for(cu, &g, &d, &site.s, &ch, err));
    const conv_scalars s(b != NULL);
    void *y = io->out->data;
    const void *w = io->weight->data;
    return conv_run(cu, ch, &d, &g, &site.s, io->weight,
                    [&](int algo, void *ws, size_t bytes) {
                        return cudnnConvolutionForward(
                            cu->cudnn, s.alpha(), d.x, xin, d.w, w, d.conv,
                            static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes, s.beta(),
                            d.y, y);
                    },
                    err);
}

static ck_status conv_op_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                            ck_op_io *io, ck_error *err)
{
    const ck_tensor *x = io->in[0];
    const ck_tensor *b = op->bias ? io->bias : NULL;
    const ck_tensor *all[] = {x, io->weight, b, io->out};
    CK_TRY(ck_cuda_check_float_dtypes("conv", all, 4, err));
    const ck_dtype dt = ck_common_dtype(all, 4);
    switch (ck_cuda_conv_engine_for(dt)) {
    case CK_CUDA_CONV_WIDE: return cuda_forward_wide(cu, conv_op_forward, op, args, io, err);
    case CK_CUDA_CONV_DIRECT: return conv_direct_forward(cu, op, io, b, err);
    case CK_CUDA_CONV_CUDNN: break;
    }
    conv_geom g;
    CK_TRY(conv_setup(op, x, io->weight, b, io->out, &g, err));
    if (conv_fell_back(cu, &g, dt, CK_CUDA_PASS_FORWARD))
        return cuda_forward_wide(cu, conv_op_forward, op, args, io, err);
    const bool was_pinned = conv_pinned(cu, &g, dt, CK_CUDA_PASS_FORWARD);
    const ck_status st = conv_forward_cudnn(cu, io, b, &g, dt, err);
    if (st != CK_OK && conv_take_fallback(cu, &g, dt, CK_CUDA_PASS_FORWARD, st, was_pinned, err))
        return cuda_forward_wide(cu, conv_op_forward, op, args, io, err);
    return st;
}

/* One backward pass (data or filter) through cuDNN (one dtype among fp32, fp16, bf16);
 * both accumulate. */
static ck_status conv_backward_cudnn(ck_cuda *cu, const ck_op_io *io, ck_op_grads *gr,
                                     const conv_geom *gp, ck_dtype dt, ck_cuda_pass pass,
                                     ck_error *err)
{
    const conv_geom &g = *gp;
    const ck_tensor *x = io->in[0];
    const conv_scalars s(true); /* backward accumulates */
    const void *dy = gr->dout->data;
    CK_TRY(ensure_cudnn(cu, err));
    const conv_site_buf site(cu, io->weight, &g, dt, pass);
    conv_descs d;
    CK_TRY(make_descs(&g, &site.s, &d, err));
    ck_cuda_conv_choice *ch;
    if (pass == CK_CUDA_PASS_BACKWARD_DATA) {
        /* asymmetric padding: accumulate through a padded copy of dx */
        ck_dev_buf dxpad;
        void *dx = gr->din[0]->data;
        if (g.padded) {
            CK_TRY(pad_input(cu, &g, dt, dx, &dxpad, "the padded input gradient", err));
            dx = dxpad.p;
        }
        CK_TRY(conv_choice_for(cu, &g, &d, &site.s, &ch, err));
        const void *w = io->weight->data;
        CK_TRY(conv_run(cu, ch, &d, &g, &site.s, io->weight,
                        [&](int algo, void *ws, size_t bytes) {
                            return cudnnConvolutionBackwardData(
                                cu->cudnn, s.alpha(), d.w, w, d.y, dy, d.conv,
                                static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, bytes,
                                s.beta(), d.x, dx);
                        },
                        err));
        if (g.padded)
            CK_TRY(crop_into(cu, &g, dt, &dxpad, gr->din[0]->data, err));
        return CK_OK;
    }
    ck_dev_buf xpad;
    const void *xin = x->data;
    if (g.padded) {
        CK_TRY(pad_input(cu, &g, dt, x->data, &xpad, "the padded convolution input", err));
        xin = xpad.p;
    }
    CK_TRY(conv_choice_for(cu, &g, &d, &site.s, &ch, err));
    void *dw = gr->dweight->data;
    return conv_run(cu, ch, &d, &g, &site.s, io->weight,
                    [&](int algo, void *ws, size_t bytes) {
                        return cudnnConvolutionBackwardFilter(
                            cu->cudnn, s.alpha(), d.x, xin, d.y, dy, d.conv,
                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, bytes,
                            s.beta(), d.w, dw);
                    },
                    err);
}

static ck_status conv_op_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                             const ck_op_io *io, ck_op_grads *gr, ck_error *err)
{
    const ck_tensor *x = io->in[0];
    ck_tensor *db = op->bias ? gr->dbias : NULL;
    const ck_tensor *all[] = {x, io->weight, gr->dout, gr->din[0], gr->dweight, db};
    CK_TRY(ck_cuda_check_float_dtypes("conv", all, 6, err));
    conv_geom g;
    CK_TRY(conv_setup(op, x, io->weight, db, gr->dout, &g, err));
    if (!gr->din[0] && !gr->dweight && !db)
        return CK_OK;
    const ck_dtype dt = ck_common_dtype(all, 6);
    switch (ck_cuda_conv_engine_for(dt)) {
    case CK_CUDA_CONV_WIDE:
        return cuda_backward_wide(cu, conv_op_backward, op, args, io, gr, err);
    case CK_CUDA_CONV_DIRECT: return conv_direct_backward(cu, op, io, gr, db, err);
    case CK_CUDA_CONV_CUDNN: break;
    }
    const ck_cuda_pass passes[2] = {CK_CUDA_PASS_BACKWARD_DATA, CK_CUDA_PASS_BACKWARD_FILTER};
    for (int k = 0; k < 2; k++) {
        const ck_cuda_pass pass = passes[k];
        if (!(k == 0 ? gr->din[0] : gr->dweight))
            continue;
        /* a pass cuDNN refused runs on the direct kernels (algo_pin.h): this pass's
         * gradient alone, through fp64 copies */
        ck_op_grads one;
        memset(&one, 0, sizeof one);
        one.dout = gr->dout;
        if (k == 0)
            one.din[0] = gr->din[0];
        else
            one.dweight = gr->dweight;
        if (conv_fell_back(cu, &g, dt, pass)) {
            CK_TRY(cuda_backward_wide(cu, conv_op_backward, op, args, io, &one, err));
            continue;
        }
        const bool was_pinned = conv_pinned(cu, &g, dt, pass);
        const ck_status st = conv_backward_cudnn(cu, io, gr, &g, dt, pass, err);
        if (st != CK_OK && conv_take_fallback(cu, &g, dt, pass, st, was_pinned, err))
            CK_TRY(cuda_backward_wide(cu, conv_op_backward, op, args, io, &one, err));
        else if (st != CK_OK)
            return st;
    }
    if (db) {
        const int64_t S = prod(g.out, g.ncd);
        ck_dev_buf sum;
        CK_TRY(sum.alloc(cu, (size_t)g.F * sizeof(double), "conv bias gradient sums", err));
        CK_TRY(ck_row_sums<1>(cu, conv_dbias_term{ck_view(gr->dout), g.F, S}, g.F, g.N * S,
                              sum.as<double>(), err));
        const ck_tensor *mine[] = {db};
        conv_dbias_apply_kernel<<<ck_blocks(g.F), CK_THREADS, 0, cu->stream>>>(
            ck_view(db), sum.as<double>(), g.F, ck_mode_of(mine, 1));
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

/* CUDA transposed convolution (backends/ref/conv.c): y, dx and dW each one thread
 * per element, gathering in the reference's order; db one thread per output channel. */
#include "backends/cuda/cuda_common.cuh"

static __device__ __forceinline__ int64_t ct_src(const ck_convt_geom &g, int a, int64_t o, int64_t t)
{
    int64_t num = o + g.pad[a] - t * g.dil[a];
    if (num < 0 || num % g.stride[a] != 0)
        return -1;
    int64_t i = num / g.stride[a];
    return i < g.in[a] ? i : -1;
}
static __device__ __forceinline__ int64_t ct_dst(const ck_convt_geom &g, int a, int64_t i, int64_t t)
{
    int64_t o = i * g.stride[a] - g.pad[a] + t * g.dil[a];
    return o >= 0 && o < g.out[a] ? o : -1;
}

#define VOL3(v) ((v)[0] * (v)[1] * (v)[2])

static __global__ void ct_fwd_kernel(ck_dv y, ck_dv x, ck_dv w, ck_dv b, ck_convt_geom g)
{
    const int64_t ivol = VOL3(g.in), ovol = VOL3(g.out), kvol = VOL3(g.k);
    CK_GRID_STRIDE(e, g.N * g.Co * ovol)
    {
        const int64_t o2 = e % g.out[2], o1 = (e / g.out[2]) % g.out[1],
                      o0 = (e / (g.out[2] * g.out[1])) % g.out[0], co = (e / ovol) % g.Co,
                      n = e / (ovol * g.Co);
        double acc = b.p ? ck_ld(b, co) : 0.0;
        for (int64_t ci = 0; ci < g.Ci; ci++)
            for (int64_t t0 = 0; t0 < g.k[0]; t0++) {
                const int64_t i0 = ct_src(g, 0, o0, t0);
                if (i0 < 0)
                    continue;
                for (int64_t t1 = 0; t1 < g.k[1]; t1++) {
                    const int64_t i1 = ct_src(g, 1, o1, t1);
                    if (i1 < 0)
                        continue;
                    for (int64_t t2 = 0; t2 < g.k[2]; t2++) {
                        const int64_t i2 = ct_src(g, 2, o2, t2);
                        if (i2 < 0)
                            continue;
                        acc = __dadd_rn(acc, __dmul_rn(
                            ck_ld(x, (n * g.Ci + ci) * ivol + (i0 * g.in[1] + i1) * g.in[2] + i2),
                            ck_ld(w, (ci * g.Co + co) * kvol + (t0 * g.k[1] + t1) * g.k[2] + t2)));
                    }
                }
            }
        ck_st(y, e, acc);
    }
}

static __global__ void ct_dx_kernel(ck_dv dx, ck_dv dy, ck_dv w, ck_convt_geom g)
{
    const int64_t ivol = VOL3(g.in), ovol = VOL3(g.out), kvol = VOL3(g.k);
    CK_GRID_STRIDE(e, g.N * g.Ci * ivol)
    {
        const int64_t i2 = e % g.in[2], i1 = (e / g.in[2]) % g.in[1],
                      i0 = (e / (g.in[2] * g.in[1])) % g.in[0], ci = (e / ivol) % g.Ci,
                      n = e / (ivol * g.Ci);
        double acc = 0.0;
        for (int64_t co = 0; co < g.Co; co++)
            for (int64_t t0 = 0; t0 < g.k[0]; t0++) {
                const int64_t o0 = ct_dst(g, 0, i0, t0);
                if (o0 < 0)
                    continue;
                for (int64_t t1 = 0; t1 < g.k[1]; t1++) {
                    const int64_t o1 = ct_dst(g, 1, i1, t1);
                    if (o1 < 0)
                        continue;
                    for (int64_t t2 = 0; t2 < g.k[2]; t2++) {
                        const int64_t o2 = ct_dst(g, 2, i2, t2);
                        if (o2 < 0)
                            continue;
                        acc = __dadd_rn(acc, __dmul_rn(
                            ck_ld(dy, (n * g.Co + co) * ovol + (o0 * g.out[1] + o1) * g.out[2] + o2),
                            ck_ld(w, (ci * g.Co + co) * kvol + (t0 * g.k[1] + t1) * g.k[2] + t2)));
                    }
                }
            }
        ck_acc(dx, e, acc);
    }
}

static __global__ void ct_dw_kernel(ck_dv dw, ck_dv dy, ck_dv x, ck_convt_geom g)
{
    const int64_t ivol = VOL3(g.in), ovol = VOL3(g.out), kvol = VOL3(g.k);
    CK_GRID_STRIDE(e, g.Ci * g.Co * kvol)
    {
        const int64_t t2 = e % g.k[2], t1 = (e / g.k[2]) % g.k[1], t0 = (e / (g.k[2] * g.k[1])) % g.k[0],
                      co = (e / kvol) % g.Co, ci = e / (kvol * g.Co);
        double acc = 0.0;
        for (int64_t n = 0; n < g.N; n++)
            for (int64_t i0 = 0; i0 < g.in[0]; i0++) {
                const int64_t o0 = ct_dst(g, 0, i0, t0);
                if (o0 < 0)
                    continue;
                for (int64_t i1 = 0; i1 < g.in[1]; i1++) {
                    const int64_t o1 = ct_dst(g, 1, i1, t1);
                    if (o1 < 0)
                        continue;
                    for (int64_t i2 = 0; i2 < g.in[2]; i2++) {
                        const int64_t o2 = ct_dst(g, 2, i2, t2);
                        if (o2 < 0)
                            continue;
                        acc = __dadd_rn(acc, __dmul_rn(
                            ck_ld(x, (n * g.Ci + ci) * ivol + (i0 * g.in[1] + i1) * g.in[2] + i2),
                            ck_ld(dy, (n * g.Co + co) * ovol + (o0 * g.out[1] + o1) * g.out[2] + o2)));
                    }
                }
            }
        ck_acc(dw, e, acc);
    }
}

static __global__ void ct_db_kernel(ck_dv db, ck_dv dy, ck_convt_geom g)
{
    const int64_t ovol = VOL3(g.out);
    CK_GRID_STRIDE(co, g.Co)
    {
        double acc = 0.0;
        for (int64_t n = 0; n < g.N; n++)
            for (int64_t o = 0; o < ovol; o++)
                acc = __dadd_rn(acc, ck_ld(dy, (n * g.Co + co) * ovol + o));
        ck_acc(db, co, acc);
    }
}

static ck_status launch_convt_fwd(ck_cuda *cu, ck_dv y, ck_dv x, ck_dv w, ck_dv b,
                         const ck_convt_geom &g, ck_error *err)
{
    ct_fwd_kernel<<<ck_blocks(g.N * g.Co * VOL3(g.out)), CK_THREADS, 0, cu->stream>>>(y, x, w, b, g);
    CK_LAUNCH_CHECK();
    return CK_OK;
}

static ck_status launch_convt_bwd(ck_cuda *cu, ck_dv dx, ck_dv dw, ck_dv db, ck_dv dy, ck_dv x, ck_dv w,
                         const ck_convt_geom &g, ck_error *err)
{
    if (db.p) {
        ct_db_kernel<<<ck_blocks(g.Co), CK_THREADS, 0, cu->stream>>>(db, dy, g);
        CK_LAUNCH_CHECK();
    }
    if (dx.p) {
        ct_dx_kernel<<<ck_blocks(g.N * g.Ci * VOL3(g.in)), CK_THREADS, 0, cu->stream>>>(dx, dy, w, g);
        CK_LAUNCH_CHECK();
    }
    if (dw.p) {
        ct_dw_kernel<<<ck_blocks(g.Ci * g.Co * VOL3(g.k)), CK_THREADS, 0, cu->stream>>>(dw, dy, x, g);
        CK_LAUNCH_CHECK();
    }
    return CK_OK;
}

// ----------------------------------------------------------------------------
// entry points (cuda_common.cuh)

static ck_status conv_transpose_op_forward(ck_cuda *cu, const ck_op_params *op,
                                      const ck_fwd_args *args, ck_op_io *io, ck_error *err)
{
    (void)args;
    const ck_tensor *b = op->bias ? io->bias : NULL;
    ck_convt_geom g;
    CK_TRY(ck_opc_conv_transpose(CUDA_BE, op, io->in[0], io->weight, b, io->out, &g, err));
    return launch_convt_fwd(cu, ck_view(io->out), ck_view(io->in[0]), ck_view(io->weight),
                          ck_view(b), g, err);
}

static ck_status conv_transpose_op_backward(ck_cuda *cu, const ck_op_params *op,
                                       const ck_fwd_args *args, const ck_op_io *io,
                                       ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_tensor *db = op->bias ? g->dbias : NULL;
    ck_convt_geom geo;
    CK_TRY(ck_opc_conv_transpose(CUDA_BE, op, io->in[0], io->weight, db, g->dout, &geo, err));
    return launch_convt_bwd(cu, ck_view(g->din[0]), ck_view(g->dweight), ck_view(db),
                          ck_view(g->dout), ck_view(io->in[0]), ck_view(io->weight), geo, err);
}

// ----------------------------------------------------------------------------
// the family's entry points (cuda_common.cuh)

static cuda_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_CONV: return cuda_op_fns{conv_op_forward, conv_op_backward};
    case CK_OP_CONV_TRANSPOSE: return cuda_op_fns{conv_transpose_op_forward, conv_transpose_op_backward};
    default: return cuda_op_fns{NULL, NULL};
    }
}

CUDA_FAMILY_ENTRIES(conv, pick)
