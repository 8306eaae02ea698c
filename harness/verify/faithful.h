/*
 * Faithfulness of an imported model to the framework it came from: the case's train-mode
 * forward on the framework's own input, and (when the reference holds them) its loss and
 * every parameter gradient, against the framework's numbers. This is what catches an
 * exporter that changed the model (BatchNorm folded into the convolutions, Dropout
 * removed): such an import differs, or lacks the parameters, and is refused.
 *
 * The reference (an .npz or safetensors set; docs/onnx.md "The reference file"):
 *   input            the model's input (float32, or int64 token ids)
 *   output           the framework's output on it in training mode, every dropout at p = 0
 *   loss             optional: the loss the case computes (--loss) of that output
 *   target           the loss's target where it needs one (mse: float; cross_entropy: int64)
 *   grad.<name>      optional: dLoss/d<name> for the framework's parameters (ONNX
 *                    initializer names, e.g. grad.blocks.0.attn.c_attn.weight)
 *   output_eval      optional: the output in eval mode (running statistics, no dropout)
 *   count.batchnorm  optional int64 scalars: how many BatchNorm / Dropout (p > 0) modules
 *   count.dropout    the framework's model has
 *
 * The judgement (fp32): each tensor passes when its relative L2 error ‖got − ref‖/‖ref‖ is
 * at most 1e-4; a gradient whose reference norm is below 1e-6 of the whole step's gradient
 * norm (mathematically zero: a conv bias before a training BatchNorm) is judged against
 * that norm instead. The import is refused when anything differs, when the reference has
 * a gradient no parameter of the case came from, when the framework has more BatchNorm or
 * Dropout modules than the graph (the exporter folded or removed them), or when the
 * reference's train and eval outputs differ while the graph has no layer that behaves
 * differently in training.
 */
#ifndef CK_FAITHFUL_H
#define CK_FAITHFUL_H

#include "backends/backend.h"
#include "harness/io/tensorset.h"
#include "harness/model/graph.h"
#include "harness/model/onnx_import.h"

#define CK_FAITHFUL_REL_L2 1e-4
#define CK_FAITHFUL_ZERO_GRAD 1e-6

typedef struct {
    char name[192];      /* "output", "loss" or "grad.<source>" */
    int64_t numel;
    double rel_l2;       /* ‖got − ref‖ / ‖ref‖ (vs_step_norm: / the step's gradient norm) */
    bool vs_step_norm;
    int n_params;        /* case parameters summed into it (2: a weight the framework ties) */
    bool pass;
} ck_faithful_item;

typedef struct {
    int n;
    ck_faithful_item *items;
    int n_grads_missing;      /* reference gradients no parameter of the case came from */
    char first_missing[192];
    int n_params_unmatched;   /* case parameters without a reference gradient */
    bool has_loss, has_grads;
    bool has_eval;            /* output_eval in the reference */
    double train_eval_rel_l2; /* between the reference's output and output_eval */
    int ref_batchnorm, ref_dropout;   /* -1: the reference does not say */
    int case_batchnorm, case_dropout; /* layers of the case (dropout: rate > 0, attention
                                         dropout included), before dropout was set to 0 */
    bool pass;
    char why[640];            /* the refusal, "" when it passes */
} ck_faithful_result;

void ck_faithful_result_free(ck_faithful_result *r);

/* Runs g (built with every dropout rate 0; its weights loaded through init.from) on the
 * reference's input for one plain fp32 step with backward on backend b, and judges it
 * against ref. case_batchnorm/case_dropout describe the case before dropout was zeroed.
 * Returns CK_OK with res filled, pass or not; CK_ERR_INPUT when the reference itself is
 * unusable (no input or output, a shape that is not the model's), naming ref_path. */
ck_status ck_faithful_check(ck_backend *b, const ck_graph *g, const ck_onnx_origins *origins,
                            const ck_tensorset *ref, const char *ref_path, int case_batchnorm,
                            int case_dropout, ck_faithful_result *res, ck_error *err);

#endif
