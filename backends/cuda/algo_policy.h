/*
 * The CUDA backend's algorithm policy (--algo), passes, math modes and what-ran records:
 * plain C rules (algo_policy.c), unit-tested on the CPU, shared by the convolution and
 * GEMM code and by the pinning rules (algo_pin.h).
 */
#ifndef CK_CUDA_ALGO_POLICY_H
#define CK_CUDA_ALGO_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#include <math.h> /* before the C-linkage block: harness/core/rng.h includes it */
#include <stdarg.h>
extern "C" {
#endif

#include "backends/backend.h"

/* ---- algorithm policy (--algo) ---- */

typedef enum {
    CK_CUDA_ALGO_DETERMINISTIC = 0, /* default: only algorithms cuDNN marks deterministic,
                                       never backward-filter ALGO_0/ALGO_3 or backward-data
                                       ALGO_0; chosen by cuDNN's heuristics (the same choice
                                       on every run) */
    CK_CUDA_ALGO_FASTEST = 1,       /* whatever cudnnFind measures fastest, deterministic
                                       or not */
    CK_CUDA_ALGO_POLICY_COUNT
} ck_cuda_algo_policy;

/* The three convolution passes (and the three GEMMs of a linear layer). */
typedef enum {
    CK_CUDA_PASS_FORWARD = 0,
    CK_CUDA_PASS_BACKWARD_DATA = 1,   /* d input */
    CK_CUDA_PASS_BACKWARD_FILTER = 2, /* d weight */
    CK_CUDA_PASS_COUNT
} ck_cuda_pass;

/* As cuDNN reports it per algorithm and shape (cudnnDeterminism_t). */
typedef enum { CK_CUDA_NONDETERMINISTIC = 0, CK_CUDA_DETERMINISTIC = 1 } ck_cuda_determinism;

/* cudnnMathType_t */
typedef enum {
    CK_CUDA_MATH_DEFAULT = 0,   /* on Ampere and later: TF32 allowed for fp32 */
    CK_CUDA_MATH_TENSOR_OP = 1,
    CK_CUDA_MATH_TENSOR_OP_ALLOW_CONVERSION = 2,
    CK_CUDA_MATH_FMA = 3,       /* FMA kernels only: strict fp32 */
    CK_CUDA_MATH_COUNT
} ck_cuda_math;

/* Highest algorithm number (exclusive) per pass: cuDNN's *_ALGO_COUNT. */
#define CK_CUDA_FWD_ALGO_COUNT 8
#define CK_CUDA_BWD_DATA_ALGO_COUNT 6
#define CK_CUDA_BWD_FILTER_ALGO_COUNT 7

/* "deterministic" / "fastest" */
const char *ck_cuda_algo_policy_name(ck_cuda_algo_policy p);
/* Parses "deterministic" or "fastest"; false for anything else. */
bool ck_cuda_algo_policy_parse(const char *s, ck_cuda_algo_policy *out);
/* "forward", "backward_data", "backward_filter" */
const char *ck_cuda_pass_name(ck_cuda_pass p);
/* cuDNN's name without the prefix, e.g. "IMPLICIT_PRECOMP_GEMM", "ALGO_1", "FFT_TILING";
 * "unknown" when out of range. */
const char *ck_cuda_conv_algo_name(ck_cuda_pass p, int algo);
/* "DEFAULT", "TENSOR_OP", "TENSOR_OP_ALLOW_CONVERSION", "FMA"; "unknown" when out of range */
const char *ck_cuda_math_name(int math);

/* Whether `policy` lets algorithm `algo` run `pass`, given cuDNN's determinism flag for it.
 * deterministic: never backward-filter ALGO_0 or ALGO_3 nor backward-data ALGO_0 (whatever
 * the flag says), nothing flagged nondeterministic, nothing out of range. fastest: every
 * algorithm in range. */
bool ck_cuda_algo_allowed(ck_cuda_pass pass, int algo, ck_cuda_determinism det,
                          ck_cuda_algo_policy policy);

/* Whether math type `math` keeps the arithmetic of `dtype`: fp32 only with FMA (no TF32
 * tensor cores), fp64 without TENSOR_OP_ALLOW_CONVERSION, fp16/bf16 with any math type
 * (they accumulate in fp32 either way). */
bool ck_cuda_math_allowed(ck_dtype dtype, int math);

/* One entry of cudnnFind's or cudnnGet*_v7's answer, in cuDNN-independent form. */
typedef struct {
    int algo;
    bool status_ok;           /* CUDNN_STATUS_SUCCESS */
    float time_ms;            /* cudnnFind: measured; heuristics: -1 */
    size_t memory;            /* workspace bytes */
    ck_cuda_determinism determinism;
    int math;                 /* ck_cuda_math */
} ck_cuda_algo_candidate;

/* Orders the usable candidates best first: writes their indices into order[] (room for
 * n) and returns how many there are. Usable: status ok, allowed by the policy for this
 * pass, math allowed for dtype, workspace <= workspace_limit. by_time: ascending
 * measured time (ties keep the input order); otherwise the input (heuristic) order. */
int ck_cuda_algo_rank(ck_cuda_pass pass, ck_dtype dtype, ck_cuda_algo_policy policy,
                      size_t workspace_limit, bool by_time, const ck_cuda_algo_candidate *c,
                      int n, int *order);

/* ---- what ran: one record per (layer, pass) ---- */

typedef struct {
    char layer[64];          /* the layer's name (from its weight tensor, "enc1.weight") */
    char op[16];             /* "conv1d", "conv2d", "conv3d", "linear" */
    ck_cuda_pass pass;
    ck_dtype dtype;
    char engine[64];         /* "cudnn IMPLICIT_PRECOMP_GEMM", "cublasGemmEx DEFAULT" */
    int algo;                /* cuDNN enum value; -1 for cuBLAS (CUBLAS_GEMM_DEFAULT) */
    bool deterministic;      /* cuDNN's flag for this algorithm and shape; cuBLAS: true */
    char math[48];           /* "FMA (no TF32)", "TENSOR_OP", "cuBLAS pedantic fp32" */
    size_t workspace_bytes;
    float time_ms;           /* cudnnFind's measurement; -1 when chosen by heuristics */
    char chosen_by[16];      /* "heuristic", "find", "fixed" (cuBLAS) */
    int64_t calls;           /* how often this layer ran this pass */
    bool changed;            /* another algorithm ran for this layer and pass earlier
                                (a fallback after out-of-memory or NOT_SUPPORTED) */
} ck_cuda_algo_record;

#ifdef __cplusplus
}
#endif

#endif
