/*
 * A model case: the parsed, validated contents of a case file (format in cases/README.md).
 *
 * ck_case_parse checks syntax, types, ranges, names and references and fills this
 * struct; shape checks happen in ck_graph_build (graph.h). Every error is one line that
 * starts with the file and the JSON path, e.g.
 *   cases/x.json: layers[3].kernel: must be a positive integer, got -1
 */
#ifndef CK_CASE_H
#define CK_CASE_H

#include "harness/core/ops.h"
#include "harness/core/status.h"
#include "harness/core/tensor.h"
#include "harness/model/catalogue.h"

#define CK_MAX_PRECISIONS 3

typedef struct {
    char *pattern; /* fnmatch pattern over tensor names, e.g. "dec*.weight" */
    double rtol, atol;
    double rel_l2; /* < 0: unset; else the tensor is close when ||a - ref|| / ||ref|| <= it */
} ck_tol_pattern;

/* A parameter of this layer that is another layer's ("share", cases/README.md): the one
 * tensor, its gradient accumulated once per use; resolved by ck_graph_build. */
typedef struct {
    char *suffix; /* this layer's parameter: "weight" or "bias" */
    char *target; /* the owner's parameter as written: "LAYER.SUFFIX" */
} ck_share_spec;

#define CK_MAX_SHARES 2

typedef struct {
    char *name;          /* unique within the case */
    char *op_name;       /* as written: "conv3d", "maxpool2d", ... */
    ck_op_params op;     /* options parsed; padding not yet resolved */
    int n_in;
    int in[CK_MAX_INPUTS]; /* layer indices, all < this layer's; -1 = the model input */
    int n_shares;
    ck_share_spec shares[CK_MAX_SHARES];
    bool share_object;     /* "share" was written as an object (messages name share.SUFFIX) */
} ck_layer_spec;

typedef struct {
    char *path; /* the file it came from (for messages) */
    char *name;
    char *description; /* may be NULL */
    uint64_t seed;     /* default 0 */

    ck_shape input_shape; /* (N, ...) */
    ck_dist input_dist;   /* default uniform; tokens: i32 ids in [0, input_vocab) */
    int64_t input_vocab;

    int n_layers;
    ck_layer_spec *layers;

    ck_loss_kind loss; /* default mean */
    int loss_class_dim;       /* cross_entropy: class_dim as written (default 1; negative
                                 from the end; resolved in the graph's ck_loss_spec) */
    bool loss_has_ignore;     /* cross_entropy: ignore_index given */
    int64_t loss_ignore_index;
    double loss_label_smoothing; /* cross_entropy: label_smoothing in [0, 1], default 0 */

    ck_ckpt_kind ckpt_kind; /* default sqrt */
    int ckpt_every;         /* CK_CKPT_EVERY */
    int n_segments;         /* CK_CKPT_SEGMENTS */
    int (*segments)[2];     /* inclusive [first, last] layer indices, in order */

    int steps; /* default 1 */
    ck_optimizer optimizer; /* default sgd, lr 0.01 */

    ck_rng_policy rng;     /* default counter */
    ck_bn_policy bn;       /* default skip */

    double rtol, atol;     /* default 1.3e-6, 1e-5 (torch fp32) */
    bool has_min_memory_saving;
    double min_memory_saving; /* fraction in [0, 1) */

    ck_expect expect;          /* default close; with per-dtype overrides below */
    bool has_expect_dtype[3];  /* expect given per dtype: fp32, fp16, bf16 */
    ck_expect expect_dtype[3];
    bool expect_memory_met;    /* default true; false for canaries of useless checkpointing */

    char *init_from; /* "init": {"from": FILE}: parameters and buffers loaded by name; a
                        relative path is taken from the case file's directory; NULL: seeded */
    const char *init_shown; /* how reports name init_from when it is a temporary file (run
                               MODEL.onnx: the model's own initializers); NULL: init_from.
                               Not owned */

    /* ---- mixed precision (harness/precision.md) ---- */
    int n_precisions;                      /* default 1: {fp32} */
    ck_dtype precisions[CK_MAX_PRECISIONS]; /* fp32, fp16, bf16, in the order written */
    ck_loss_scale_kind loss_scale;         /* train.loss_scale, default none */
    double loss_scale_value;               /* static: the scale; dynamic: initial; 65536 */
    int growth_interval;                   /* dynamic: clean steps before x2, default 2000 */
    ck_autocast_policy autocast;           /* policies.autocast_recompute, default restore */
    bool reduction_low;                    /* policies.reduction_dtype "low" (canary; default
                                              "fp32"): batchnorm statistics summed in the
                                              low dtype (ck_op_params) */
    bool recompute_fp32_only;              /* policies.recompute_filter "fp32_only" (canary;
                                              default "all"): a recomputed segment passes no
                                              gradient to its fp16/bf16 inputs (executor) */
    double fp16_rtol, fp16_atol;           /* low vs fp32: tolerance.fp16, default 1e-3, 1e-5 */
    double bf16_rtol, bf16_atol;           /* tolerance.bf16, default 1.6e-2, 1e-5 */
    double fp16_rel_l2, bf16_rel_l2;       /* optional norm criterion, < 0 when unset */
    bool has_fp16_tol, has_bf16_tol;       /* tolerance.fp16 / tolerance.bf16 written: the
                                              case's tolerance replaces the calibrated
                                              default (precision_judge.h) for that dtype */
    int n_tol_patterns;                    /* tolerance.tensors: first match wins */
    ck_tol_pattern *tol_patterns;
    ck_expect expect_fp16, expect_bf16;    /* expect_precision: close (default), mismatch or any */
    bool has_expect_precision;             /* expect_precision was written */
    bool expect_nonfinite;                 /* expect_nonfinite: NaN/Inf in a run is expected
                                              (otherwise any one fails the case) */
    bool expect_vacuous;                   /* expect_vacuous: the runs' gradients are expected
                                              to carry no information (default false) */
} ck_case;

/* Parses text (len bytes, need not be NUL-terminated). `path` is used in messages. */
ck_status ck_case_parse(const char *text, size_t len, const char *path, ck_case *out,
                        ck_error *err);
/* Reads and parses a file. */
ck_status ck_case_load(const char *path, ck_case *out, ck_error *err);
void ck_case_free(ck_case *c);

/* The case's expectation for plain vs checkpointed in dtype dt (`expect`, a string or an
 * object {"fp32": ..., "fp16": ..., "bf16": ...}). */
ck_expect ck_case_expect(const ck_case *c, ck_dtype dt);
/* The case's expectation for a low-precision run against fp32 (expect_precision). */
ck_expect ck_case_expect_vs_fp32(const ck_case *c, ck_dtype dt);
/* The tolerance for comparing a low-precision run's tensor with the fp32 run's: the first
 * tolerance.tensors pattern that matches "<kind>:<name>" or "<name>" (so "grad:fc*.weight"
 * selects gradients only, "fc*.weight" gradients and parameters), else the dtype's
 * default. kind is "loss", "grad", "param" or "buffer". *from_case says whether the case
 * wrote it (a pattern matched, or tolerance.fp16/bf16 was given for dt): otherwise the
 * calibrated judgement applies (harness/verify/precision_judge.h). */
void ck_case_precision_tolerance(const ck_case *c, ck_dtype dt, const char *kind,
                                 const char *name, double *rtol, double *atol, double *rel_l2,
                                 bool *from_case);

/* Settings of c that a run in the dtypes dts[0..n) does not use (a per-dtype expect for a
 * dtype not run, expect_precision or loss scaling in an fp32-only run): up to max one-line
 * notes "<path>: <key>: ..." in notes[i] (each CK_CASE_NOTE_MAX bytes); returns how many. The
 * case stays valid (--dtype may run it in those dtypes); the command says so instead of
 * ignoring the settings silently. */
#define CK_CASE_NOTE_MAX 256
int ck_case_unused_settings(const ck_case *c, const ck_dtype *dts, int n,
                            char (*notes)[CK_CASE_NOTE_MAX], int max);

#endif
