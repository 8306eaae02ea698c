/*
 * The outcome of running one case: what the report writers (reports/) print.
 * Filled by the runner (runner.c); owned by the caller, freed with ck_result_free.
 */
#ifndef CK_RESULT_H
#define CK_RESULT_H

#include "harness/core/metrics.h"
#include "harness/model/graph.h"

typedef enum {
    CK_KIND_LOSS = 0,
    CK_KIND_GRAD,
    CK_KIND_PARAM,
    CK_KIND_BUFFER
} ck_tensor_kind;

const char *ck_tensor_kind_name(ck_tensor_kind k); /* "loss", "grad", "param", "buffer" */

typedef struct {
    char *name;         /* "enc1.weight", "enc1_bn.running_mean", "loss" */
    ck_tensor_kind kind;
    int step;           /* 0-based */
    ck_dtype dtype;
    ck_shape shape;
    ck_metrics m;
    ck_verdict verdict;
    /* low precision vs fp32 only (-1 where not applicable): the tolerance used, and how
     * many values overflowed to inf, flushed to zero or were subnormal in the low dtype */
    double rtol, atol;
    double rel_l2_limit; /* < 0: elementwise verdict; else close iff rel_l2 <= it */
    int64_t cast_overflow, cast_flushed, cast_subnormal;
} ck_tensor_result;

typedef struct {
    double scale; /* the loss scale this step's backward used */
    bool skipped; /* the optimizer step was skipped (non-finite gradients) */
} ck_scale_step;

typedef struct {
    const char *label;     /* "plain", "checkpointed" */
    int steps;
    double *losses;        /* steps entries */
    int64_t peak_activation_bytes;
    int64_t recomputed_layers; /* layer forwards run as recomputation, over all steps */
    double wall_time_s;    /* excluded from determinism checks */
    ck_scale_step *scales; /* steps entries */
    int64_t recomputed_other_dtype; /* recomputations run in fp32 while the forward ran low */
    int first_other_dtype_layer;    /* the first such layer, or -1 */
} ck_run_summary;

typedef struct {
    int first, last; /* inclusive layer indices */
} ck_segment;

typedef struct ck_bisect_result ck_bisect_result; /* bisect.h */

/* Which algorithm a backend ran for one (layer, pass): filled from the CUDA backend's
 * records (cuDNN/cuBLAS); empty on the CPU, which has one fixed algorithm per op. */
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
struct ck_recompute_check;

typedef struct {
    const ck_case *cs;
    const ck_graph *g;
    char backend[32];
    char backend_device[128];
    char backend_versions[256];
    ck_dtype dtype;

    int n_segments;
    ck_segment *segments; /* resolved checkpoint segments */

    ck_run_summary plain, ckpt;

    int n_tensors;
    ck_tensor_result *tensors; /* in comparison order: per step loss, buffers, grads
                                  (backward order), params */
    int first_divergence;      /* index into tensors of the first non-identical, or -1 */

    double memory_saving;      /* 1 - ckpt_peak / plain_peak */
    bool memory_met;           /* saving >= min_memory_saving (true when none set) */
    ck_verdict verdict;        /* worst tensor verdict */
    bool expect_met;           /* verdict agrees with the case's expect */
    bool memory_expectation_met; /* memory_met == cs->expect_memory_met */
    bool pass;                 /* expect_met && memory_expectation_met && vs_fp32_expect_met
                                  && the cross-backend check (when run) is not a mismatch */

    ck_bisect_result *bisect;  /* owned; NULL unless bisect or a noise floor ran */
    bool verified_recompute;   /* --verify-recompute ran */
    int n_recompute_checks;
    struct ck_recompute_check *recompute_checks; /* owned; every recomputed layer output */
    int recompute_mismatches;  /* checks whose recomputed output differs from the original */

    /* mixed precision (harness/precision.md) */
    int scale_mismatches;      /* steps whose loss scale or skip decision differ between runs */
    int first_scale_mismatch;  /* that step, or -1 */
    bool has_vs_fp32;          /* a low-precision run judged against the fp32 plain run */
    int n_vs_fp32;
    ck_tensor_result *vs_fp32; /* low plain (a) vs fp32 plain (ref), record order */
    ck_verdict vs_fp32_verdict;
    int vs_fp32_first;         /* first tensor outside tolerance, or -1 */
    bool vs_fp32_expect_met;   /* vs_fp32_verdict agrees with the case's expect_precision */

    /* backends */
    char algo_policy[16];      /* "deterministic" / "fastest"; empty on the CPU */
    int n_algos;
    ck_algo_record *algos;     /* what ran, per layer and pass */
    bool has_vs_backend;       /* --against: this backend's plain run vs the reference's */
    char vs_backend_name[32];  /* the reference backend */
    int n_vs_backend;
    ck_tensor_result *vs_backend;
    ck_verdict vs_backend_verdict;
    int vs_backend_first;      /* first tensor outside tolerance, or -1 */
} ck_result;

void ck_result_free(ck_result *r);

#endif
