/*
 * Gradient checks against float64 central differences.
 *
 * Per op: L = sum(forward(x..., w, b) * r) with r a fixed random projection; the op's
 * backward gives dL/dx, dL/dw, dL/db, and central differences (L(v+eps) - L(v-eps)) / 2eps
 * evaluated in float64 give the reference. Per case: the same through the whole model and
 * its loss (gradcheck.c, `ckpt-harness gradcheck`).
 *
 * An element passes when |analytic - numeric| <= atol + rtol * |numeric|
 * (torch.autograd.gradcheck's defaults: eps 1e-6, atol 1e-5, rtol 1e-3).
 */
#ifndef CK_GRADCHECK_H
#define CK_GRADCHECK_H

#include "backends/backend.h"
#include "harness/model/graph.h"

typedef struct {
    double eps;       /* default 1e-6 */
    double atol;      /* default 1e-5 */
    double rtol;      /* default 1e-3 */
    int max_samples;  /* elements checked per tensor (all when numel <= max); default 64 */
} ck_gradcheck_opts;

void ck_gradcheck_opts_default(ck_gradcheck_opts *o);

typedef struct {
    char name[96];         /* "in0", "weight", "bias" (per op) or "enc1.weight" (per case) */
    int64_t checked;       /* elements compared */
    int64_t failed;        /* elements outside atol + rtol |numeric| */
    double max_abs_err;
    double max_rel_err;    /* |a - n| / max(|a|, |n|, 1e-12) */
    double max_of_tol;     /* |a - n| / (atol + rtol |n|): the share of the tolerance the
                              worst element used (above 1: outside) */
    int64_t worst_index;   /* flat index of the largest |a - n| - (atol + rtol |n|) */
    double worst_analytic, worst_numeric;
    /* "": compared. Otherwise why finite differences cannot judge this tensor's gradient
     * (checked 0): a cast rounding to or from float16/bfloat16 on its path to the loss */
    char not_checkable[160];
} ck_gradcheck_entry;

#define CK_GRADCHECK_MAX_ENTRIES 64

typedef struct {
    int n;
    ck_gradcheck_entry e[CK_GRADCHECK_MAX_ENTRIES];
    bool ok;
} ck_gradcheck_result;

/* Checks one op in float64 on backend b. `node` gives the op (padding resolved), the
 * output shape and the parameter/buffer/saved specs (from ck_graph_build, or filled by
 * hand in tests); in_shapes has node->n_in entries. Inputs are N(0, 1) draws and
 * parameters U(-1, 1) draws from `seed`; batchnorm buffers start at mean 0 / var 1.
 * `args` is passed to forward and backward as is (args->rng for dropout and noise). */
ck_status ck_gradcheck_op(ck_backend *b, const ck_node *node, const ck_shape *in_shapes,
                          const ck_fwd_args *args, uint64_t seed, const ck_gradcheck_opts *opts,
                          ck_gradcheck_result *res, ck_error *err);

/* Checks layer `layer` of a graph as it sits in its case: its node, its real input shapes,
 * and the case's seed (dropout/noise draw the counter stream of step 0). */
ck_status ck_gradcheck_layer(ck_backend *b, const ck_graph *g, int layer,
                             const ck_gradcheck_opts *opts, ck_gradcheck_result *res,
                             ck_error *err);

/* Checks the whole case in float64: step 0's loss as a function of every parameter, with
 * the case's initial weights and data, batchnorm buffers frozen and the `counter` RNG
 * policy (a policy that redraws per evaluation has no derivative). Returns one entry per
 * parameter tensor (named "<layer>.<suffix>") in *entries (malloc'd, caller frees). */
ck_status ck_gradcheck_case(ck_backend *b, const ck_graph *g, const ck_gradcheck_opts *opts,
                            ck_gradcheck_entry **entries, int *n_entries, ck_error *err);

/* Why finite differences cannot judge an op's gradient, or NULL: a cast to or from float16
 * or bfloat16 rounds in the float64 check too, so its derivative is 0 almost everywhere
 * while its backward passes the gradient on (rounded), as PyTorch's; finite differences of
 * such a step measure nothing. Its rounding is tested against exact values and PyTorch's
 * (tests/test_ops_unary.c, tests/test_torch_fixtures.c). A cast between float32 and float32
 * is the identity in float64 and is checked. ck_gradcheck_layer reports such a layer, and
 * ck_gradcheck_case every parameter whose gradient passes through one, as not checkable. */
const char *ck_gradcheck_not_smooth(const ck_node *node);

/* Shared by the per-op and per-case checks. */
int64_t ck_gradcheck_sample_index(uint64_t seed, uint32_t tensor_slot, int64_t numel,
                                  int max_samples, int64_t k);
void ck_gradcheck_entry_add(ck_gradcheck_entry *e, const ck_gradcheck_opts *o, int64_t index,
                            double analytic, double numeric);

#endif
