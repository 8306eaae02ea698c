/*
 * Constant folding for ONNX import: the shape arithmetic exporters write into graphs
 * (Shape → Gather → Unsqueeze → Concat → Reshape, Range/ConstantOfShape/Expand of masks,
 * Equal/Where of constant masks, Slice of buffers) evaluated at import time when every
 * input is a constant, so that it never reaches the case as layers. Values are computed in
 * double (exact for integers below 2^53 and for the fp32 constants involved) and stored in
 * the first input's element type (Cast: its `to`; Shape, Range of ints: int64; Equal: bool).
 */
#ifndef CK_ONNX_FOLD_H
#define CK_ONNX_FOLD_H

#include <stdbool.h>
#include <stddef.h>

#include "harness/io/onnx.h"

#define CK_ONNX_FOLD_MAX_ELEMS (1 << 20)

/* Evaluates node n on constant inputs in[0..n_in) (NULL for an omitted optional input)
 * into *out (name = the node's first output, data malloc'd). *handled is false when the op
 * is not one folded here (nothing written); a fold that cannot be done exactly is an
 * error: CK_ERR_INPUT with why filled (no prefix), out untouched. */
ck_status ck_onnx_fold_eval(const ck_onnx_node *n, int64_t opset, const ck_onnx_tensor *const *in,
                            int n_in, ck_onnx_tensor *out, bool *handled, char *why,
                            size_t why_n);

/* A constant of shape `dims` from doubles (int64 or float type). */
ck_status ck_onnx_tensor_from_f64(const char *name, int data_type, int ndim, const int64_t *dims,
                                  const double *v, ck_onnx_tensor *out);
void ck_onnx_tensor_release(ck_onnx_tensor *t);

#endif
