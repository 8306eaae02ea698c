/*
 * The backend interface: a struct of function pointers every backend implements.
 *
 * The core (harness/) talks to a backend only through this struct; a backend never sees
 * JSON, case files or reports. Memory handed out by `alloc` lives wherever the backend
 * computes (host for cpu, device for cuda); the core moves data with upload/download.
 *
 * Conventions for ops:
 *  - forward writes `io->out` (overwrites). It reads inputs, weight/bias, and for
 *    batchnorm the running buffers; it writes running buffers only when
 *    `args->update_running_stats` is set, and `io->saved` (when the op has one, see
 *    ck_graph's saved_shape) for its backward.
 *  - backward ACCUMULATES (+=) into every non-NULL `g->din[i]`, `g->dweight`, `g->dbias`,
 *    because a tensor can feed several layers. It receives the same ck_fwd_args as the
 *    forward that produced `io->out` (dropout regenerates its mask from args->rng).
 *  - every tensor is read and written in its own dtype (harness/precision.md): in a
 *    low-precision run activations and their gradients are fp16/bf16, linear/conv
 *    weights fp16/bf16, batchnorm/layernorm parameters, statistics and running buffers
 *    fp32; num_batches_tracked is i64 and cross-entropy targets i32. Ops compute wide and
 *    round each output element once.
 */
#ifndef CK_BACKEND_H
#define CK_BACKEND_H

#include "harness/core/ops.h"
#include "harness/core/rng.h"
#include "harness/core/status.h"
#include "harness/core/tensor.h"

typedef struct {
    bool recompute;            /* this forward recomputes a checkpoint segment */
    bool update_running_stats; /* batchnorm: update running_mean/var and num_batches_tracked */
    ck_rng_stream rng;         /* dropout and gaussian_noise draw from this stream */
} ck_fwd_args;

typedef struct {
    int n_in;
    const ck_tensor *in[CK_MAX_INPUTS];
    ck_tensor *out;
    ck_tensor *weight, *bias; /* NULL when the op has none */
    ck_tensor *running_mean, *running_var, *num_batches_tracked; /* batchnorm only */
    ck_tensor *saved; /* saved-for-backward scratch (batchnorm: mean, invstd per channel;
                         layernorm: mean, invstd per sample), NULL for other ops */
    const ck_tensor *constant; /* the broadcast family's constant operand (buffer `constant`,
                                  masked_fill's `mask`), NULL for other ops */
} ck_op_io;

typedef struct {
    const ck_tensor *dout;
    ck_tensor *din[CK_MAX_INPUTS]; /* accumulate; NULL when that input needs no gradient */
    ck_tensor *dweight, *dbias;    /* accumulate; NULL when the op has none */
    /* din[0] holds no gradient yet and may be the same buffer as dout: the backward stores
     * +0 into element k of din[0] and then accumulates as usual, after reading element k of
     * every tensor it reads — the bits of zeroing din[0] first, without the zero pass and
     * without a buffer of its own. The executor sets it only for the ops
     * ck_backward_writes_fresh names, whose kernels honour it on every backend, and for
     * those ck_backward_dx_fresh names, with din[0] a buffer of its own whose contents are
     * undefined. */
    bool din0_fresh;
    /* Fused relu (ck_backward_relu_over_input): in[0] is the output r of a relu, din[0] is
     * the same buffer and holds no gradient yet, dweight and dbias are NULL. The backward
     * stores into element k the relu's input gradient for r's gradient dx: the bits of dx
     * accumulated into a zeroed buffer and then the relu's backward with a fresh input
     * gradient, +0 + dx[k] * (r[k] <= 0 ? 0 : 1) rounded once (NaN in r passes dx; an Inf or
     * NaN dx where r <= 0 gives NaN), reading r[k] before it writes element k. */
    bool din0_relu_over_input;
    /* dweight and dbias hold no gradient yet (their contents are undefined): the backward
     * writes them with the bits of accumulating into zeroed tensors, without reading them.
     * Set only where the backend's capability "params_fresh" (CK_PROC_PARAMS_FRESH) says it
     * honours it for the op; the training step then needs no zero pass over those
     * gradients (harness/model/params.h: ck_model_claim_grads). */
    bool dparams_fresh;
} ck_op_grads;

/* The ops whose backward honours ck_op_grads.din0_fresh on every backend (ref, cpu, cuda):
 * the element-wise activations that run through each backend's one activation kernel, gelu
 * (exact there, the tanh approximation in the wide kernels) and silu, and add. A backend
 * that adds its own kernel for one of these must honour the flag too. */
static inline bool ck_backward_writes_fresh(ck_op_kind kind)
{
    return kind == CK_OP_RELU || kind == CK_OP_LEAKY_RELU || kind == CK_OP_TANH ||
           kind == CK_OP_SIGMOID || kind == CK_OP_GELU || kind == CK_OP_SILU ||
           kind == CK_OP_ADD;
}

/* The ops whose backward honours ck_op_grads.din0_fresh on every backend (ref, cpu, cuda)
 * when din[0] is a buffer of its own, never dout's, holding anything: linear. The result has
 * the bits of din[0] zeroed and then accumulated into (the cpu backend's GEMM starts each
 * element's chain at +0 instead of loading it; ref and cuda zero the buffer first). The
 * executor sets it where an input gets its first gradient from such a layer, which then
 * needs no zero pass of its own (harness/engine/executor.c). */
static inline bool ck_backward_dx_fresh(ck_op_kind kind)
{
    return kind == CK_OP_LINEAR;
}

/* The ops whose input gradient does not read their input: linear, conv and conv_transpose
 * (dx from dy and W; only dW reads x). Their backward may be called with any of din[0],
 * dweight and dbias NULL, each gradient's bits the same whichever others are requested, and
 * with in[0]'s data NULL when only din[0] is requested. The executor uses this to write an
 * input's gradient over the input's own buffer once the weight gradient has read it: one
 * call for dweight/dbias, the buffer zeroed, one call for din[0] (harness/engine/executor.c). */
static inline bool ck_backward_dx_over_input(ck_op_kind kind)
{
    return kind == CK_OP_LINEAR || kind == CK_OP_CONV || kind == CK_OP_CONV_TRANSPOSE;
}

/* The ops whose backward honours ck_op_grads.din0_relu_over_input on every backend (ref,
 * cpu, cuda): those of ck_backward_dx_over_input. The executor sets it on the input-gradient
 * call of such a layer whose input is a relu's output that nothing else reads: the relu's
 * backward is then done, and the relu input's gradient sits in the relu output's buffer, with
 * no buffer of its own beside it (harness/engine/executor.c). Every backend first records the
 * relu's mask, one bit per element (numel / 8 bytes beside the tensor, the backend's own
 * memory), then zeroes the buffer, runs the ordinary input gradient into it and applies the
 * relu's backward element by element: the unfused bits by construction. */
static inline bool ck_backward_relu_over_input(ck_op_kind kind)
{
    return ck_backward_dx_over_input(kind);
}

typedef struct {
    char name[32];      /* "cpu", "cuda" */
    char device[128];   /* "x86_64 host", "NVIDIA H200" */
    char versions[256]; /* free text: driver, runtime, library versions */
    int threads;        /* worker threads of a multi-threaded CPU backend; 0 otherwise */
    char isa[32];       /* the SIMD path its kernels take ("avx2+fma"); "" when none */
} ck_backend_info;

typedef struct ck_backend ck_backend;

struct ck_backend {
    const char *name;
    void *impl; /* the backend's private state */

    /* ---- memory ---- */
    ck_status (*alloc)(ck_backend *b, size_t bytes, void **ptr, ck_error *err);
    void (*free)(ck_backend *b, void *ptr);
    /* host -> backend memory, tensor's full size */
    ck_status (*upload)(ck_backend *b, ck_tensor *dst, const void *host, ck_error *err);
    /* backend memory -> host, tensor's full size */
    ck_status (*download)(ck_backend *b, const ck_tensor *src, void *host, ck_error *err);
    ck_status (*zero)(ck_backend *b, ck_tensor *t, ck_error *err);
    /* same dtype and shape */
    ck_status (*copy)(ck_backend *b, ck_tensor *dst, const ck_tensor *src, ck_error *err);

    /* ---- ops ---- */
    /* Whether forward/backward of this op exist for this compute dtype. */
    bool (*supports)(ck_backend *b, const ck_op_params *op, ck_dtype dtype);
    ck_status (*forward)(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                         ck_op_io *io, ck_error *err);
    ck_status (*backward)(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                          const ck_op_io *io, ck_op_grads *g, ck_error *err);

    /* ---- loss ---- */
    /* target: same dtype/shape as y for mse; i32 class indices shaped y without dim 1 for
     * cross_entropy; NULL for mean and sum. The loss is accumulated in double. */
    ck_status (*loss_forward)(ck_backend *b, ck_loss_kind kind, const ck_tensor *y,
                              const ck_tensor *target, double *loss, ck_error *err);
    /* dy = scale * dL/dy (overwrites dy). relu_over (mean, sum and mse only, the losses
     * whose gradient element k reads element k of y alone): y is the output of a relu and
     * dy is y's own buffer; dy[k] becomes the relu's input gradient, the bits of the loss
     * gradient rounded into dy and then the relu's backward with a fresh input gradient
     * (ck_op_grads.din0_relu_over_input), y[k] read before element k is written. */
    ck_status (*loss_backward)(ck_backend *b, ck_loss_kind kind, const ck_tensor *y,
                               const ck_tensor *target, double scale, ck_tensor *dy,
                               bool relu_over, ck_error *err);
    /* Cross-entropy over loss->class_dim with an optional ignore_index (ck_loss_spec,
     * harness/core/ops.h): the engine uses these for a cross_entropy loss whose class_dim
     * is not 1 or that has an ignore_index. Same contract as loss_forward/loss_backward:
     * target i32 shaped y without the class dim; the loss is the mean over the positions
     * not ignored (NaN when every one is, as PyTorch). */
    ck_status (*ce_forward)(ck_backend *b, const ck_loss_spec *loss, const ck_tensor *y,
                            const ck_tensor *target, double *out, ck_error *err);
    ck_status (*ce_backward)(ck_backend *b, const ck_loss_spec *loss, const ck_tensor *y,
                             const ck_tensor *target, double scale, ck_tensor *dy,
                             ck_error *err);
    /* Whether the loss entries exist for this loss in this compute dtype (the preflight,
     * ck_backend_check_training, asks before any run). */
    bool (*supports_loss)(ck_backend *b, const ck_loss_spec *loss, ck_dtype dtype);

    /* ---- optimizer ---- */
    /* One update of `param` from `grad * grad_scale` (1-based step for adam's bias
     * correction). state0: momentum buffer / adam m; state1: adam v; NULL when unused.
     * Same dtype as param. */
    ck_status (*optimizer_step)(ck_backend *b, const ck_optimizer *opt, int64_t step,
                                double grad_scale, ck_tensor *param, const ck_tensor *grad,
                                ck_tensor *state0, ck_tensor *state1, ck_error *err);
    /* Whether optimizer_step exists for this optimizer with parameters of this dtype. */
    bool (*supports_optimizer)(ck_backend *b, const ck_optimizer *opt, ck_dtype dtype);

    /* ---- precision ---- */
    /* accumulate false: dst = src * scale; true: dst = dst + src * scale. Computed in double
     * and rounded once to dst's dtype (round to nearest even). Without accumulate nothing is
     * added, so a -0 product stays -0 (0 + -0 would give +0); with it, IEEE addition's signs
     * hold (-0 + -0 = -0). Same shape; any float dtypes; dst may be src. Casts master weights
     * to the low dtype and unscales low-precision gradients. */
    ck_status (*convert)(ck_backend *b, ck_tensor *dst, const ck_tensor *src, double scale,
                         bool accumulate, ck_error *err);
    /* The precision judgement's calibration rounding, in place, where the tensor lives (no
     * trip through the host): every element k of the fp32 tensor t becomes
     * ck_calibration_round(t[k], bits, rel, rng, k) (harness/core/calibration.h). */
    ck_status (*calibration_round)(ck_backend *b, ck_tensor *t, int bits, double rel,
                                   const ck_rng_stream *rng, ck_error *err);

    void (*info)(ck_backend *b, ck_backend_info *out);
    void (*destroy)(ck_backend *b);

    /* ---- optional capabilities ---- */
    /* The function behind a capability name (CK_PROC_*), or NULL when this backend has
     * none; NULL itself when the backend has no optional capabilities at all. Only what a
     * backend may lack is here (the CUDA backend's algorithm records and device memory);
     * every backend has the entries above. Callers go through ck_backend_proc
     * (registry.h), never through a backend's own header. */
    void *(*get_proc)(ck_backend *b, const char *name);
};

/* Which algorithm a backend ran for one (layer, pass): the CUDA backend's records
 * (cuDNN/cuBLAS), in a backend-independent form; the CPU backends have one fixed algorithm
 * per op and no records. */
typedef struct {
    char layer[64];
    char op[16];
    char pass[24];    /* "forward", "backward_data", "backward_filter" */
    char dtype[8];
    char engine[64];  /* e.g. "cudnn IMPLICIT_PRECOMP_GEMM" */
    int algo;         /* cuDNN enum value, -1 for cuBLAS */
    bool deterministic;
    char math[48];    /* e.g. "FMA (no TF32)" */
    int64_t workspace_bytes;
    double time_ms;   /* measured by cudnnFind; -1 when chosen by heuristics */
    char chosen_by[16];
    int64_t calls;
    bool changed;     /* another algorithm ran for this layer and pass earlier */
} ck_algo_record;

/* Capability "algo_records": copies up to max of the records so far, in first-run order,
 * into out (which may be NULL when max is 0) and returns how many there are in all. */
#define CK_PROC_ALGO_RECORDS "algo_records"
typedef int (*ck_algo_records_fn)(ck_backend *b, ck_algo_record *out, int max);
/* Capability "algo_records_clear": forgets the records (between cases). */
#define CK_PROC_ALGO_RECORDS_CLEAR "algo_records_clear"
typedef void (*ck_algo_records_clear_fn)(ck_backend *b);

/* Capability "count_nonfinite": counts the NaN and Inf elements of the float tensor t where
 * it lives, without a host copy; *first gets the first one's index (-1 when none) and
 * *first_nan its kind: the same figures as a scan of a host copy. */
#define CK_PROC_COUNT_NONFINITE "count_nonfinite"
typedef ck_status (*ck_count_nonfinite_fn)(ck_backend *b, const ck_tensor *t, int64_t *nan,
                                           int64_t *inf, int64_t *first, bool *first_nan,
                                           ck_error *err);

/* Capability "host_parallel": runs fn(ctx, task) for every task in [0, ntasks) on the
 * backend's host threads (a CPU backend's pool, as many as `--threads`) and returns when all
 * are done; tasks run in any order on any thread, so each must write only what no other
 * task writes. Host-side work of the training loop (drawing a step's input and targets). */
#define CK_PROC_HOST_PARALLEL "host_parallel"
typedef void (*ck_host_task_fn)(void *ctx, int64_t task);
typedef void (*ck_host_parallel_fn)(ck_backend *b, int64_t ntasks, ck_host_task_fn fn,
                                    void *ctx);

/* Capability "params_fresh": whether this backend's backward of op `kind` honours
 * ck_op_grads.dparams_fresh (writes dweight and dbias as if into zeros). A backend without
 * it gets zeroed gradients, as before. */
#define CK_PROC_PARAMS_FRESH "params_fresh"
typedef bool (*ck_params_fresh_fn)(ck_backend *b, ck_op_kind kind);

/* A backend's own device memory (the CUDA backend's): what the executor's accounting
 * allocator does not see. Bytes; -1 where the backend cannot tell. */
typedef struct {
    int64_t pool_peak_bytes;      /* high-water mark of the device memory pool: tensors,
                                     workspaces and scratch together */
    int64_t workspace_peak_bytes; /* most bytes of convolution workspaces live at once */
    int64_t scratch_peak_bytes;   /* most bytes of other backend-internal buffers */
} ck_device_memory;

/* Capability "device_memory": fills out with the peaks since the last reset and, when
 * reset is true, starts new peaks from what is live now; false when nothing is known. */
#define CK_PROC_DEVICE_MEMORY "device_memory"
typedef bool (*ck_device_memory_fn)(ck_backend *b, ck_device_memory *out, bool reset);

#endif
