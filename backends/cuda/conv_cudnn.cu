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
 * Data types: fp32 (FLOAT, math FMA: no TF32), fp64 (DOUBLE), fp16 (HALF with FLOAT
 * compute), bf16 (BFLOAT16 with FLOAT compute). The bias is broadcast into y and the
 * convolution adds to it (beta = 1); backward data and filter accumulate into dx and dW
 * (beta = 1); so each element is rounded once. The bias gradient is a fixed-order double
 * reduction (cuda_common.cuh), as the CPU computes it. All tensors of a call share one
 * dtype on this path; when they do not (a recomputation in another dtype) the layer runs
 * on fp64 copies with its results rounded once into their tensors, as the CPU's wide
 * views do (cuda_forward_wide / cuda_backward_wide).
 *
 * Algorithms (ck_cuda_algo_policy, filtered by algo_policy.c):
 *  - deterministic: cuDNN's heuristic ranking (cudnnGet*_v7), keeping only algorithms
 *    it marks deterministic and never backward-filter ALGO_0/ALGO_3 or backward-data
 *    ALGO_0. No timing is involved, so every run of the program picks the same ones.
 *  - fastest: cudnnFind* measures every algorithm once per shape; fastest first.
 * The ranked list is cached per (pass, dtype, shape); an algorithm whose workspace does
 * not fit or that cuDNN refuses at run time (NOT_SUPPORTED) gives way to the next. What
 * ran is recorded per layer and pass (cuda_record_algo).
 */
#include "backends/cuda/cuda_common.cuh"

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
 * the CPU's conv_setup, backends/op_check.h) and fills g. */
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

/* The math type set before asking cuDNN for algorithms (see ck_cuda_math_allowed). */
static cudnnMathType_t initial_math(ck_dtype dt)
{
    switch (dt) {
    case CK_F32: return CUDNN_FMA_MATH;
    case CK_F16:
    case CK_BF16: return CUDNN_TENSOR_OP_MATH;
    default: return CUDNN_DEFAULT_MATH;
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

static ck_status make_descs(const conv_geom *g, ck_dtype dt, conv_descs *d, ck_error *err)
{
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
    CK_CUDNN_CHECK(cudnnSetTensorNdDescriptorEx(d->x, CUDNN_TENSOR_NCHW, t, nb, xd));
    CK_CUDNN_CHECK(cudnnSetTensorNdDescriptorEx(d->y, CUDNN_TENSOR_NCHW, t, nb, yd));
    CK_CUDNN_CHECK(cudnnSetFilterNdDescriptor(d->w, t, CUDNN_TENSOR_NCHW, nb, wd));
    CK_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(d->conv, g->ncd, g->pad, g->stride, g->dil,
                                                   CUDNN_CROSS_CORRELATION,
                                                   dt == CK_F64 ? CUDNN_DATA_DOUBLE
                                                                : CUDNN_DATA_FLOAT));
    CK_CUDNN_CHECK(cudnnSetConvolutionMathType(d->conv, initial_math(dt)));

    int od[5] = {0, 0, 0, 0, 0};
    CK_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(d->conv, d->x, d->w, nb, od));
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

// ----------------------------------------------------------------------------
// algorithm choice, cached per (pass, dtype, shape)

#define CONV_MAX_CANDIDATES 32

typedef struct {
    int pass, dtype, ncd;
    int xd[5], wd[5], pad[3], stride[3], dil[3];
} conv_key;

typedef struct {
    conv_key key;
    bool from_find;
    int n;    /* usable candidates, best first */
    int next; /* first candidate cuDNN has not refused (NOT_SUPPORTED) */
    ck_cuda_algo_candidate cand[CONV_MAX_CANDIDATES];
} conv_choice;

struct ck_cuda_conv_cache {
    conv_choice *e;
    int n, cap;
};

void cuda_conv_release(ck_cuda *cu)
{
    if (cu->cudnn)
        (void)cudnnDestroy(cu->cudnn);
    cu->cudnn = nullptr;
    if (cu->conv_cache) {
        free(cu->conv_cache->e);
        free(cu->conv_cache);
    }
    cu->conv_cache = nullptr;
}

static conv_key make_key(const conv_geom *g, ck_dtype dt, ck_cuda_pass pass)
{
    conv_key k;
    memset(&k, 0, sizeof k); /* compared with memcmp: no stray padding bytes */
    k.pass = pass;
    k.dtype = dt;
    k.ncd = g->ncd;
    k.xd[0] = (int)g->N;
    k.xd[1] = (int)g->C;
    k.wd[0] = (int)g->F;
    k.wd[1] = (int)g->C;
    for (int a = 0; a < g->ncd; a++) {
        k.xd[2 + a] = (int)g->pin[a];
        k.wd[2 + a] = (int)g->k[a];
        k.pad[a] = g->pad[a];
        k.stride[a] = g->stride[a];
        k.dil[a] = g->dil[a];
    }
    return k;
}

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

/* Asks cuDNN (heuristics or measurement, per the policy) for the pass's algorithms. */
static ck_status query_algorithms(ck_cuda *cu, const conv_descs *d, ck_cuda_pass pass,
                                  bool find, ck_cuda_algo_candidate *c, int *n, ck_error *err)
{
    cudnnHandle_t h = cu->cudnn;
    int max = 0, got = 0;
    if (find) {
        /* cudnnFind allocates its own buffers with cudaMalloc: hand back the pool's
         * cached blocks first */
        CK_CUDA_CHECK(cudaStreamSynchronize(cu->stream));
        CK_CUDA_CHECK(cudaMemPoolTrimTo(cu->pool, 0));
    }
    switch (pass) {
    case CK_CUDA_PASS_FORWARD: {
        cudnnConvolutionFwdAlgoPerf_t perf[CONV_MAX_CANDIDATES];
        CK_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
        max = max < CONV_MAX_CANDIDATES ? max : CONV_MAX_CANDIDATES;
        if (find)
            CK_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(h, d->x, d->w, d->conv, d->y,
                                                                max, &got, perf));
        else
            CK_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d->x, d->w, d->conv, d->y,
                                                                  max, &got, perf));
        *n = to_candidates(perf, got, c, find);
        break;
    }
    case CK_CUDA_PASS_BACKWARD_DATA: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CONV_MAX_CANDIDATES];
        CK_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
        max = max < CONV_MAX_CANDIDATES ? max : CONV_MAX_CANDIDATES;
        if (find)
            CK_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(h, d->w, d->y, d->conv,
                                                                     d->x, max, &got, perf));
        else
            CK_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d->w, d->y, d->conv,
                                                                       d->x, max, &got, perf));
        *n = to_candidates(perf, got, c, find);
        break;
    }
    case CK_CUDA_PASS_BACKWARD_FILTER: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CONV_MAX_CANDIDATES];
        CK_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
        max = max < CONV_MAX_CANDIDATES ? max : CONV_MAX_CANDIDATES;
        if (find)
            CK_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(h, d->x, d->y, d->conv,
                                                                       d->w, max, &got, perf));
        else
            CK_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                h, d->x, d->y, d->conv, d->w, max, &got, perf));
        *n = to_candidates(perf, got, c, find);
        break;
    }
    default:
        return ck_fail(err, CK_ERR_INTERNAL, "conv: pass %d", (int)pass);
    }
    return CK_OK;
}

/* "ALGO_0 (nondeterministic, FMA), ALGO_1 (deterministic, TENSOR_OP, not supported)" */
static void describe_offer(ck_cuda_pass pass, const ck_cuda_algo_candidate *c, int n, char *buf,
                           size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used + 1 < size; i++) {
        int w = snprintf(buf + used, size - used, "%s%s (%s, %s%s)", i ? ", " : "",
                         ck_cuda_conv_algo_name(pass, c[i].algo),
                         c[i].determinism == CK_CUDA_DETERMINISTIC ? "deterministic"
                                                                   : "nondeterministic",
                         ck_cuda_math_name(c[i].math), c[i].status_ok ? "" : ", not supported");
        if (w < 0)
            break;
        used += (size_t)w;
    }
    if (!n)
        snprintf(buf, size, "nothing");
}

/* The cached ranking for this pass and shape, asking cuDNN on first use. */
static ck_status conv_choice_for(ck_cuda *cu, const conv_geom *g, const conv_descs *d,
                                 ck_dtype dt, ck_cuda_pass pass, conv_choice **out,
                                 ck_error *err)
{
    const conv_key key = make_key(g, dt, pass);
    if (!cu->conv_cache) {
        cu->conv_cache = static_cast<ck_cuda_conv_cache *>(calloc(1, sizeof *cu->conv_cache));
        if (!cu->conv_cache)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory caching convolution algorithms");
    }
    ck_cuda_conv_cache *cache = cu->conv_cache;
    for (int i = 0; i < cache->n; i++)
        if (memcmp(&cache->e[i].key, &key, sizeof key) == 0) {
            *out = &cache->e[i];
            return CK_OK;
        }

    const bool find = cu->policy == CK_CUDA_ALGO_FASTEST;
    ck_cuda_algo_candidate raw[CONV_MAX_CANDIDATES];
    int nraw = 0, order[CONV_MAX_CANDIDATES];
    CK_TRY(query_algorithms(cu, d, pass, find, raw, &nraw, err));
    const int usable = ck_cuda_algo_rank(pass, dt, cu->policy, SIZE_MAX, find, raw, nraw, order);
    if (usable == 0) {
        char offer[512];
        describe_offer(pass, raw, nraw, offer, sizeof offer);
        return ck_fail(err, CK_ERR_UNSUPPORTED,
                       "conv%dd %s in %s: cuDNN offers no algorithm the %s policy allows "
                       "(offered: %s)%s", g->nsp, ck_cuda_pass_name(pass), ck_dtype_name(dt),
                       ck_cuda_algo_policy_name(cu->policy), offer,
                       cu->policy == CK_CUDA_ALGO_DETERMINISTIC ? "; --algo fastest allows "
                                                                  "nondeterministic ones"
                                                                : "");
    }
    if (cache->n == cache->cap) {
        int cap = cache->cap ? 2 * cache->cap : 16;
        void *p = realloc(cache->e, (size_t)cap * sizeof *cache->e);
        if (!p)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory caching convolution algorithms");
        cache->e = static_cast<conv_choice *>(p);
        cache->cap = cap;
    }
    conv_choice *ch = &cache->e[cache->n++];
    memset(ch, 0, sizeof *ch);
    ch->key = key;
    ch->from_find = find;
    ch->n = usable;
    for (int i = 0; i < usable; i++)
        ch->cand[i] = raw[order[i]];
    *out = ch;
    return CK_OK;
}

/* alpha and beta as cuDNN wants them: double for DOUBLE data, float otherwise */
struct conv_scalars {
    float f[2] = {1.0f, 0.0f};
    double d[2] = {1.0, 0.0};
    bool dbl;
    conv_scalars(ck_dtype dt, bool accumulate) : dbl(dt == CK_F64)
    {
        f[1] = accumulate ? 1.0f : 0.0f;
        d[1] = accumulate ? 1.0 : 0.0;
    }
    const void *alpha() const { return dbl ? (const void *)&d[0] : (const void *)&f[0]; }
    const void *beta() const { return dbl ? (const void *)&d[1] : (const void *)&f[1]; }
};

/* Runs `call(algo, workspace, bytes)` with the best candidate that cuDNN accepts and whose
 * workspace fits, and records it for the layer. */
template <typename Call>
static ck_status conv_run(ck_cuda *cu, conv_choice *ch, const conv_descs *d, const conv_geom *g,
                          ck_dtype dt, ck_cuda_pass pass, const ck_tensor *weight, Call call,
                          ck_error *err)
{
    ck_status last = CK_OK;
    for (int i = ch->next; i < ch->n; i++) {
        const ck_cuda_algo_candidate *c = &ch->cand[i];
        CK_CUDNN_CHECK(cudnnSetConvolutionMathType(d->conv, static_cast<cudnnMathType_t>(c->math)));
        ck_dev_buf ws;
        if (c->memory > 0) {
            last = ws.alloc(cu, c->memory, "the cuDNN workspace", err);
            if (last == CK_ERR_NOMEM)
                continue; /* this time only: the next call may have the memory */
            if (last != CK_OK)
                return last;
        }
        cudnnStatus_t rc = call(c->algo, ws.p, c->memory);
        if (rc == CUDNN_STATUS_NOT_SUPPORTED) {
            last = ck_fail(err, CK_ERR_UNSUPPORTED, "conv%dd %s: cuDNN refused %s "
                           "(CUDNN_STATUS_NOT_SUPPORTED) and no other allowed algorithm ran",
                           g->nsp, ck_cuda_pass_name(pass), ck_cuda_conv_algo_name(pass, c->algo));
            if (ch->next == i)
                ch->next = i + 1; /* refused for this shape: for good */
            continue;
        }
        static const char *const calls[CK_CUDA_PASS_COUNT] = {
            "cudnnConvolutionForward", "cudnnConvolutionBackwardData",
            "cudnnConvolutionBackwardFilter"};
        CK_TRY(ck_gpu_status(rc, __FILE__, __LINE__, calls[pass], err));
        char op[16], engine[64], math[48];
        snprintf(op, sizeof op, "conv%dd", g->nsp);
        snprintf(engine, sizeof engine, "cudnn %s", ck_cuda_conv_algo_name(pass, c->algo));
        if (c->math == CK_CUDA_MATH_FMA)
            snprintf(math, sizeof math, "FMA (no TF32)");
        else
            snprintf(math, sizeof math, "%s", ck_cuda_math_name(c->math));
        return cuda_record_algo(cu, weight, op, pass, dt, engine, c->algo,
                                c->determinism == CK_CUDA_DETERMINISTIC, math, c->memory,
                                c->time_ms, ch->from_find ? "find" : "heuristic", err);
    }
    if (last != CK_OK)
        return last; /* err holds the last refusal or out-of-memory */
    return ck_fail(err, CK_ERR_UNSUPPORTED, "conv%dd %s in %s: cuDNN refused every algorithm "
                   "the %s policy allows", g->nsp, ck_cuda_pass_name(pass), ck_dtype_name(dt),
                   ck_cuda_algo_policy_name(cu->policy));
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
// entry points (cuda_common.cuh)

ck_status cuda_conv_forward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
                            ck_op_io *io, ck_error *err)
{
    const ck_tensor *x = io->in[0];
    const ck_tensor *b = op->bias ? io->bias : NULL;
    const ck_tensor *all[] = {x, io->weight, b, io->out};
    CK_TRY(ck_cuda_check_float_dtypes("conv", all, 4, err));
    conv_geom g;
    CK_TRY(conv_setup(op, x, io->weight, b, io->out, &g, err));
    const ck_dtype dt = ck_common_dtype(all, 4);
    if (dt == CK_DTYPE_COUNT)
        return cuda_forward_wide(cu, cuda_conv_forward, op, args, io, err);
    CK_TRY(ensure_cudnn(cu, err));
    conv_descs d;
    CK_TRY(make_descs(&g, dt, &d, err));

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
    conv_choice *ch;
    CK_TRY(conv_choice_for(cu, &g, &d, dt, CK_CUDA_PASS_FORWARD, &ch, err));
    const conv_scalars s(dt, b != NULL);
    void *y = io->out->data;
    const void *w = io->weight->data;
    return conv_run(cu, ch, &d, &g, dt, CK_CUDA_PASS_FORWARD, io->weight,
                    [&](int algo, void *ws, size_t bytes) {
                        return cudnnConvolutionForward(
                            cu->cudnn, s.alpha(), d.x, xin, d.w, w, d.conv,
                            static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes, s.beta(),
                            d.y, y);
                    },
                    err);
}

ck_status cuda_conv_backward(ck_cuda *cu, const ck_op_params *op, const ck_fwd_args *args,
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
    if (dt == CK_DTYPE_COUNT)
        return cuda_backward_wide(cu, cuda_conv_backward, op, args, io, gr, err);
    const conv_scalars s(dt, true); /* backward accumulates */
    const void *dy = gr->dout->data;

    if (gr->din[0] || gr->dweight) {
        CK_TRY(ensure_cudnn(cu, err));
        conv_descs d;
        CK_TRY(make_descs(&g, dt, &d, err));
        if (gr->din[0]) {
            /* asymmetric padding: accumulate through a padded copy of dx */
            ck_dev_buf dxpad;
            void *dx = gr->din[0]->data;
            if (g.padded) {
                CK_TRY(pad_input(cu, &g, dt, dx, &dxpad, "the padded input gradient", err));
                dx = dxpad.p;
            }
            conv_choice *ch;
            CK_TRY(conv_choice_for(cu, &g, &d, dt, CK_CUDA_PASS_BACKWARD_DATA, &ch, err));
            const void *w = io->weight->data;
            CK_TRY(conv_run(cu, ch, &d, &g, dt, CK_CUDA_PASS_BACKWARD_DATA, io->weight,
                            [&](int algo, void *ws, size_t bytes) {
                                return cudnnConvolutionBackwardData(
                                    cu->cudnn, s.alpha(), d.w, w, d.y, dy, d.conv,
                                    static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, bytes,
                                    s.beta(), d.x, dx);
                            },
                            err));
            if (g.padded)
                CK_TRY(crop_into(cu, &g, dt, &dxpad, gr->din[0]->data, err));
        }
        if (gr->dweight) {
            ck_dev_buf xpad;
            const void *xin = x->data;
            if (g.padded) {
                CK_TRY(pad_input(cu, &g, dt, x->data, &xpad, "the padded convolution input",
                                 err));
                xin = xpad.p;
            }
            conv_choice *ch;
            CK_TRY(conv_choice_for(cu, &g, &d, dt, CK_CUDA_PASS_BACKWARD_FILTER, &ch, err));
            void *dw = gr->dweight->data;
            CK_TRY(conv_run(cu, ch, &d, &g, dt, CK_CUDA_PASS_BACKWARD_FILTER, io->weight,
                            [&](int algo, void *ws, size_t bytes) {
                                return cudnnConvolutionBackwardFilter(
                                    cu->cudnn, s.alpha(), d.x, xin, d.y, dy, d.conv,
                                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws,
                                    bytes, s.beta(), d.w, dw);
                            },
                            err));
        }
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
