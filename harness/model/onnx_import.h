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
#include <stddef.h>

#include <cjson/cJSON.h>

#include "harness/io/onnx.h"
#include "harness/io/tensorset.h"

/* Where each weight tensor of an import came from: the ONNX initializer (the framework's
 * parameter or buffer name, e.g. "blocks.0.attn.c_attn.weight") and whether the case holds
 * it transposed. A tensor the importer made up (a zero LayerNorm bias) has source "". Two
 * case tensors may share a source: a weight the framework ties (a GPT's embedding and
 * head). */
typedef struct {
    char *param;  /* "<layer>.<suffix>" as in the case */
    char *source;
    bool transposed;
} ck_onnx_origin;

typedef struct {
    int n, cap;
    ck_onnx_origin *o;
} ck_onnx_origins;

void ck_onnx_origins_free(ck_onnx_origins *os);

typedef struct {
    const char *name;         /* the case's name; NULL: "onnx_model" */
    const char *loss;         /* mean (default), sum, mse, cross_entropy */
    const char *optimizer;    /* sgd (default), momentum, adam */
    double lr;                /* <= 0: the case default */
    int steps;                /* <= 0: the case default */
    const char *checkpoint;   /* "sqrt" (default), "every:K", "segments:A..B,C..D" */
    const char *weights_path; /* written as init.from; NULL: none */
    const char *precision;    /* NULL: fp32 */
    int class_dim;            /* cross_entropy's class dim; 0: inferred (below) */
    bool has_class_dim;
    bool has_ignore_index;    /* cross_entropy: positions whose target is ignore_index */
    long long ignore_index;
    ck_onnx_origins *origins; /* NULL: not wanted; else filled (initialised here) */
} ck_onnx_import_opts;

/* The framework module of an ONNX node, from the scope in its name ("/blocks.0/attn/Split"
 * -> "blocks.0.attn"); "" when the name has none. Every refusal names the node's module
 * (ck_onnx_node_module) first:
 * "model.onnx: module blocks.0.attn: node `/blocks.0/attn/Split` (Split): ...". */
void ck_onnx_module_of(const char *node_name, char *out, size_t n);

/* The module of torch 2.x's dynamo export of a node, from the scopes it records in the
 * node's metadata (ck_onnx_node.torch_scopes): "['', 'h.0', 'h.0.attn', 'view_1']" ->
 * "h.0.attn"; "" for the root module, or when the list is absent or malformed. */
void ck_onnx_scopes_module(const char *scopes, char *out, size_t n);

/* The module refusals name: the name's scope (ck_onnx_module_of), else the scopes in the
 * node's metadata (ck_onnx_scopes_module). */
void ck_onnx_node_module(const ck_onnx_node *node, char *out, size_t n);

/* The class dim written for --loss cross_entropy without --class-dim: -1 when the input is
 * token ids (a GPT's (N, L, vocab) logits with (N, L) targets; for (N, classes) logits -1
 * is 1) or when the output is (N, L, V) with the input's first two dims (a sequence model
 * on float features); else 1, PyTorch's (N, C, ...) layout. The case always names it. */

/* Maps m (read from path, for messages) into a case tree and its weights (the set is
 * initialised here; tensors named as the case's parameters and buffers, fp32, except
 * num_batches_tracked i64). The caller frees *case_json with cJSON_Delete and the set
 * with ck_tensorset_free. */
ck_status ck_onnx_import(const ck_onnx_model *m, const char *path, const ck_onnx_import_opts *o,
                         cJSON **case_json, ck_tensorset *weights, ck_error *err);

#endif
