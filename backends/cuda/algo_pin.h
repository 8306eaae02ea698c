/*
 * How the CUDA backend decides which convolution engine and which cuDNN algorithm runs a
 * call, and what happens when that algorithm cannot run: plain C with no CUDA headers, so
 * that tests/test_cuda_algo_policy.c checks every rule on machines without a GPU. conv.cu
 * feeds it cuDNN's answers and follows its decisions.
 *
 *  - Engine: fp32, fp16 and bf16 calls whose tensors share one dtype go to cuDNN; fp64 calls
 *    go to the backend's own deterministic fp64 kernels (conv_direct.h); calls of mixed
 *    dtypes run on fp64 copies, hence on the same kernels.
 *  - Ranking: cuDNN's candidates, with workspace sizes from cudnnGet*WorkspaceSize, filtered
 *    by ck_cuda_algo_rank (policy, math type, status) under a workspace cap.
 *  - Pinning: the algorithm that first runs a (pass, dtype, shape) is pinned for the whole
 *    process (ck_cuda_pin_table): every later call of that key runs it, whatever memory is
 *    free, so the plain and the checkpointed run of a case use the same algorithms.
 *  - Failure: ck_cuda_after_failure says whether to try the next candidate or fail; under
 *    `deterministic` an algorithm is never switched because memory ran short (one line naming
 *    the layer and the bytes instead).
 *  - Fallback: a pass cuDNN refuses on its first call runs on the direct kernels from then on
 *    (ck_cuda_falls_back).
 */
#ifndef CK_CUDA_ALGO_PIN_H
#define CK_CUDA_ALGO_PIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "backends/cuda/algo_policy.h"

/* ---- engine ---- */

typedef enum {
    CK_CUDA_CONV_CUDNN = 0,  /* one dtype among fp32, fp16, bf16 */
    CK_CUDA_CONV_DIRECT = 1, /* every tensor fp64: conv_direct.h */
    CK_CUDA_CONV_WIDE = 2    /* mixed dtypes: fp64 copies, then CK_CUDA_CONV_DIRECT */
} ck_cuda_conv_engine;

/* `common`: the dtype every tensor of the call shares, CK_DTYPE_COUNT when they differ. */
ck_cuda_conv_engine ck_cuda_conv_engine_for(ck_dtype common);

/* The math type to set on the convolution descriptor before asking cuDNN for algorithms
 * of a pass in `dtype` (set again before every query, so that the math type a previous
 * pass ran with never reaches the next pass's query): fp32 FMA, fp16/bf16 TENSOR_OP,
 * anything else DEFAULT. */
ck_cuda_math ck_cuda_query_math(ck_dtype dtype);

/* The layer a weight tensor belongs to: its name up to the last '.' ("enc1.weight" ->
 * "enc1"); "(unnamed)" for NULL. */
void ck_cuda_layer_name(const char *tensor_name, char *buf, size_t n);

/* ---- workspace cap ---- */

/* Default cap on one convolution's workspace: 1 GiB, and never more than 1/8 of the
 * device's memory. */
#define CK_CUDA_WORKSPACE_CAP_DEFAULT ((size_t)1 << 30)

/* The cap for a device with `device_total` bytes. `env` (CK_CUDA_WORKSPACE_MIB, may be
 * NULL or empty) overrides it with a whole number of MiB, 0 to 1048576 (0: only
 * algorithms without a workspace); anything else is CK_ERR_INPUT with one line. */
ck_status ck_cuda_workspace_cap(size_t device_total, const char *env, size_t *cap,
                                ck_error *err);

/* ---- pinning ---- */

/* A convolution pass's key: pass, dtype and every size cuDNN sees. */
typedef struct {
    int pass, dtype, nd; /* nd: cuDNN's spatial dims (2 or 3) */
    int xd[5], wd[5], yd[5];
    int pad[3], stride[3], dil[3];
} ck_cuda_conv_key;

/* The key for these sizes (unused entries zero, so keys compare field by field). */
ck_cuda_conv_key ck_cuda_conv_key_make(ck_cuda_pass pass, ck_dtype dtype, int nd,
                                       const int *xd, const int *wd, const int *yd,
                                       const int *pad, const int *stride, const int *dil);
bool ck_cuda_conv_key_equal(const ck_cuda_conv_key *a, const ck_cuda_conv_key *b);

typedef struct {
    ck_cuda_conv_key key;
    ck_cuda_algo_candidate cand[32]; /* usable candidates, best first */
    int n;
    int tried;       /* candidates given up (refused, or no workspace under fastest) */
    bool pinned;     /* cand[tried] has run: it runs every later call */
    bool from_find;
} ck_cuda_conv_choice;

typedef struct {
    ck_cuda_conv_choice *e;
    int n, cap;
} ck_cuda_pin_table;

/* The entry for key, or NULL. */
ck_cuda_conv_choice *ck_cuda_pin_find(ck_cuda_pin_table *t, const ck_cuda_conv_key *key);
/* Adds key with the ranked candidates c[0..n) (n <= 32); CK_ERR_INTERNAL if key is there
 * already, CK_ERR_NOMEM. */
ck_status ck_cuda_pin_add(ck_cuda_pin_table *t, const ck_cuda_conv_key *key,
                          const ck_cuda_algo_candidate *c, int n, bool from_find,
                          ck_cuda_conv_choice **out, ck_error *err);
void ck_cuda_pin_free(ck_cuda_pin_table *t);

/* The candidate to run now, or NULL when every candidate was given up. */
const ck_cuda_algo_candidate *ck_cuda_choice_current(const ck_cuda_conv_choice *ch);
/* The current candidate ran: it is pinned from now on. */
void ck_cuda_choice_ran(ck_cuda_conv_choice *ch);

typedef enum {
    CK_CUDA_FAIL_NO_WORKSPACE = 0, /* its workspace could not be allocated */
    CK_CUDA_FAIL_NOT_SUPPORTED = 1 /* cuDNN answered NOT_SUPPORTED when it ran */
} ck_cuda_failure;

typedef enum { CK_CUDA_TRY_NEXT = 0, CK_CUDA_FAIL = 1 } ck_cuda_next_step;

/* What to do when the current candidate of a choice failed this way: a pinned algorithm
 * is never replaced (FAIL); before pinning, NOT_SUPPORTED (a property of the shape, the same
 * in every run) moves on to the next candidate under both policies, and a workspace that
 * cannot be allocated (a property of the moment) moves on only under `fastest`. */
ck_cuda_next_step ck_cuda_after_failure(ck_cuda_algo_policy policy, bool pinned,
                                        ck_cuda_failure why);
/* Gives the current candidate up (after CK_CUDA_TRY_NEXT). */
void ck_cuda_choice_skip(ck_cuda_conv_choice *ch);

/* ---- the fallback onto the direct kernels ---- */

/* A cuDNN pass whose first call fails with CK_ERR_UNSUPPORTED (no algorithm the policy,
 * math rule and cap allow, NOT_SUPPORTED from every candidate, or a descriptor cuDNN does
 * not take: fp16/bf16 NCDHW through the legacy API, or no deterministic backward-filter
 * algorithm for a 3-D shape) runs on the backend's own direct kernels instead, through fp64
 * copies rounded once into its tensors (the mixed-dtype path), and keeps doing so for every
 * later call of its key, so the plain and the checkpointed run take the same engine. Never
 * for a pass whose algorithm was pinned (it ran before: its failure is an error), nor for
 * any other status (memory, a CUDA error). */
bool ck_cuda_falls_back(ck_status st, bool pinned);
/* The keys that fell back (a pin table whose entries carry no candidates). */
bool ck_cuda_fallback_find(ck_cuda_pin_table *t, const ck_cuda_conv_key *key);
ck_status ck_cuda_fallback_add(ck_cuda_pin_table *t, const ck_cuda_conv_key *key,
                               ck_error *err);

/* ---- one-line failures, each naming the layer ---- */

/* Where a failure happened: "layer `b0_conv3` (conv3d backward_filter, fp32)". */
typedef struct {
    const char *layer;
    int nsp;
    ck_cuda_pass pass;
    ck_dtype dtype;
    ck_cuda_algo_policy policy;
} ck_cuda_conv_site;

/* "ALGO_0 (nondeterministic, FMA, 0 B), ALGO_1 (deterministic, TENSOR_OP, not supported)"
 * or "nothing" */
void ck_cuda_describe_offer(ck_cuda_pass pass, const ck_cuda_algo_candidate *c, int n,
                            char *buf, size_t size);
/* CK_ERR_UNSUPPORTED: cuDNN offers nothing the policy, math rule and cap allow. */
ck_status ck_cuda_fail_no_algorithm(const ck_cuda_conv_site *s, size_t cap,
                                    const ck_cuda_algo_candidate *c, int n, ck_error *err);
/* CK_ERR_NOMEM: the workspace of `algo` (bytes) could not be allocated and the rules say
 * fail. */
ck_status ck_cuda_fail_workspace(const ck_cuda_conv_site *s, int algo, size_t bytes,
                                 bool pinned, ck_error *err);
/* CK_ERR_UNSUPPORTED: cuDNN refused `algo` (NOT_SUPPORTED) and nothing else may run. */
ck_status ck_cuda_fail_refused(const ck_cuda_conv_site *s, int algo, bool pinned,
                               ck_error *err);
/* CK_ERR_UNSUPPORTED: a cuDNN call (descriptor setup, algorithm query) answered
 * NOT_SUPPORTED for this layer, e.g. fp16/bf16 NCDHW through the legacy API; `call` is the
 * call's text, of which the function's name is kept. */
ck_status ck_cuda_fail_unsupported_call(const ck_cuda_conv_site *s, const char *call,
                                        ck_error *err);
/* CK_ERR_UNSUPPORTED: the descriptor does not hold the math type that was set (cuDNN
 * changed it): fp32 must run with FMA math. */
ck_status ck_cuda_fail_math(const ck_cuda_conv_site *s, int set, int got, ck_error *err);

#ifdef __cplusplus
}
#endif

#endif
