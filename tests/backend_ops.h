/*
 * The op table: one list of op rows (op, options, input shapes, value kind, tolerance
 * classes, a description printed as one string) run against any backend beside the
 * reference backend `ref`. Used by the Check suite tests/test_backend_ops.c (every
 * registered backend that can be created here) and by the GPU test program
 * tests/gpu/test_gpu.c (the CUDA backend, or the CPU standing in for it). Plain C, no
 * libcheck: results are counted in a bo_ctx and printed as one line per comparison.
 *
 * Per row (bo_run_row):
 *  - forward and backward in fp32, fp16, bf16 and fp64 from the same inputs on both backends,
 *    gradients accumulating into random values; every output against ref within the
 *    row's tolerance class (bo_tolerance; docs/cuda.md):
 *      EXACT  bit-identical;
 *      TRANS  transcendentals and reordered sums: about a unit of the dtype's last place;
 *      LIB    library or SIMD kernels (cuBLAS, cuDNN, the cpu backend's GEMM and
 *             convolutions): within the dtype's accumulation error;
 *  - the low-precision rule (backend.h: "ops compute wide and round each output element
 *    once"): in fp16 and bf16, every low-dtype output and gradient lies within one unit
 *    of the last place of ref's float64 result on the same values, rounded once to the
 *    low dtype; a row marked `breaks_lowp_rule` (a low-precision reduction, the canary)
 *    must break it;
 *  - gradchecks: the backend's float64 backward against float64 central differences of
 *    its own forward (ck_gradcheck_op), and its fp32 backward against float64 central
 *    differences of ref's forward (the fp32 kernels themselves, which a float64 check
 *    may not reach);
 *  - for linear, conv and conv_transpose (ck_backward_dx_over_input, backend.h), on the
 *    tested backend alone (ref too): dW and db computed without dx, then dx alone with the
 *    input's data hidden (NULL), bitwise the same as one call computing all three, in fp32,
 *    fp16, bf16 and fp64 — the contract the executor relies on to write an input's
 *    gradient over the input's buffer;
 *  - for the same ops, on the tested backend alone (ref too): the input gradient written
 *    over the input r (a relu's output) with the relu's backward applied
 *    (ck_op_grads.din0_relu_over_input) bitwise equal to dx into a zeroed buffer and then
 *    the relu's backward, in fp32, fp16, bf16 and fp64, r and dy holding NaN, infinities and
 *    signed zeros; bo_run_losses does the same for loss_backward's relu_over (mean, sum,
 *    mse);
 *  - the record key the CUDA backend files its algorithm choice under (layer from the
 *    weight's name, pass, dtype) belongs to this row's shape alone (bo_ledger).
 * A row the backend's `supports` refuses in a dtype is skipped, and counted as skipped.
 */
#ifndef CK_TESTS_BACKEND_OPS_H
#define CK_TESTS_BACKEND_OPS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "backends/backend.h"

typedef enum { BO_EXACT = 0, BO_TRANS, BO_LIB } bo_class;

typedef enum { BO_VALS_NORMAL = 0, BO_VALS_TIES, BO_VALS_POSITIVE, BO_VALS_UNIT, BO_VALS_ZERO } bo_vals;

typedef struct {
    char desc[96];     /* "conv2d k3x2 s1x2 d2x1 pad 1x0 bias, x (2, 3, 9, 11)" */
    ck_op_params op;
    int n_in;
    ck_shape in[3];
    bo_vals vals;      /* the inputs' values */
    bo_class fwd, bwd; /* forward outputs, gradients */
    bool alias;        /* one tensor feeds every input (x + x): din[k] all the same */
    uint64_t rng_offset;
    bool breaks_lowp_rule; /* a low-precision reduction: the rule must catch it */
} bo_row;

/* The table (built once); its size in *n. */
const bo_row *bo_rows(int *n);
/* Whether the row's description contains filter (NULL or "": every row). */
bool bo_row_matches(const bo_row *r, const char *filter);

/* The dtypes of one call: activations, their gradients, linear/conv parameters and the
 * wide tensors (norm parameters, running buffers, saved statistics). */
typedef struct {
    ck_dtype in, out, dout, din, param, wide;
} bo_dtypes;
bo_dtypes bo_dtypes_of(ck_dtype dt);

/* |a - b| <= rtol |b| + atol_frac max|b| (bitwise for EXACT); `cpu` picks the fast cpu
 * backend's LIB numbers (its kernels are sequential fmaf chains, tighter than a GPU
 * library's). */
typedef struct {
    double rtol, atol_frac;
    bool bitwise;
} bo_tolerance;
bo_tolerance bo_tolerance_for(bo_class c, ck_dtype dt, bool cpu);

/* The record keys seen so far: (layer, dtype) -> the row and variant that used it. */
#define BO_LEDGER_MAX 512
typedef struct {
    int n;
    struct {
        char layer[64];
        ck_dtype dtype;
        char owner[128];
    } e[BO_LEDGER_MAX];
} bo_ledger;

typedef struct {
    ck_backend *ref, *b;
    bool cpu_tolerances; /* b is the fast cpu backend (bo_tolerance_for) */
    FILE *out;           /* one line per comparison (PASS/FAIL/SKIP); NULL: none */
    bool print_passes;   /* with out: the PASS lines too */
    int pass, fail, skip;
    char first_failure[640];
    bo_ledger ledger;
} bo_ctx;

/* ctx for b beside ref, counters zero. */
void bo_ctx_init(bo_ctx *c, ck_backend *ref, ck_backend *b, FILE *out);

/* What bo_run_row runs. */
enum {
    BO_RUN_CLASSES = 1,   /* forward/backward vs ref in fp32, fp16, bf16, fp64 */
    BO_RUN_LOWP = 2,      /* the low-precision rule in fp16, bf16 */
    BO_RUN_GRADCHECK = 4, /* both gradchecks */
    BO_RUN_SPLIT = 8,     /* linear/conv backward in two calls (ck_backward_dx_over_input),
                             dx written fresh (ck_backward_dx_fresh) and fused with a relu
                             (din0_relu_over_input) */
    BO_RUN_ALL = 15
};
/* Runs row `index` of the table (seeded by its index). */
void bo_run_row(bo_ctx *c, int index, unsigned what);

/* One forward and backward of a row in the given dtypes on b vs ref with the row's
 * classes (or `cls` when >= 0 for both); `variant` names the call in its description and
 * in its tensors' names. */
void bo_run_variant(bo_ctx *c, int index, bo_dtypes d, const char *variant, int cls);

/* What the backends share beyond the ops, each against ref: dropout masks for several
 * rates and stream offsets (bitwise), every loss in fp32/fp16/bf16, every optimizer,
 * convert (master <-> low casts, unscaling), the calibration rounding (bitwise), and
 * conv/linear/batchnorm backward run twice on b (bitwise the same). */
void bo_run_dropout_masks(bo_ctx *c);
void bo_run_losses(bo_ctx *c);
void bo_run_optimizers(bo_ctx *c);
void bo_run_convert(bo_ctx *c);
void bo_run_calibration_round(bo_ctx *c);
void bo_run_determinism(bo_ctx *c);

#endif
