/*
 * Importing an ONNX model (harness/io/onnx.h) as a case: every node maps onto a case layer
 * (or is folded away: Identity, a Dropout in eval mode, a bias Add fused into the MatMul
 * before it, Constant), the initializers become the layers' parameters and buffers under
 * the harness's names, and the graph input's static shape becomes the case's input.
 *
 * Nothing is ever silently different: a node that cannot be mapped exactly (an op the
 * harness lacks, grouped convolution, asymmetric padding, a Resize that is not integer
 * nearest-neighbour, ...) fails the import with one line naming the node, its op type and
 * why. The supported set and how each op maps are in docs/onnx.md.
 *
 * Layer names: a node with parameters is named after its weight's module path ("features.3"
 * from "features.3.weight", dots and other characters outside [A-Za-z0-9_-] becoming "_"),
 * other nodes after their node name ("/act/Relu" -> "act_Relu"); clashes get a "_2" suffix.
 */
#ifndef CK_ONNX_IMPORT_H
#define CK_ONNX_IMPORT_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "harness/io/onnx.h"
#include "harness/io/tensorset.h"

typedef struct {
    const char *name;         /* the case's name; NULL: "onnx_model" */
    const char *loss;         /* mean (default), sum, mse, cross_entropy */
    const char *optimizer;    /* sgd (default), momentum, adam */
    double lr;                /* <= 0: the case default */
    int steps;                /* <= 0: the case default */
    const char *checkpoint;   /* "sqrt" (default), "every:K", "segments:A..B,C..D" */
    const char *weights_path; /* written as init.from; NULL: none */
    const char *precision;    /* NULL: fp32 */
} ck_onnx_import_opts;

/* Maps m (read from path, for messages) into a case tree and its weights (the set is
 * initialised here; tensors named as the case's parameters and buffers, fp32, except
 * num_batches_tracked i64). The caller frees *case_json with cJSON_Delete and the set
 * with ck_tensorset_free. */
ck_status ck_onnx_import(const ck_onnx_model *m, const char *path, const ck_onnx_import_opts *o,
                         cJSON **case_json, ck_tensorset *weights, ck_error *err);

#endif
