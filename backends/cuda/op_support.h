/*
 * Which ops the CUDA backend runs (op_support.c): plain C, compiled into the module (the
 * backend's `supports`) and into the library, where the registry's `cpu-as-cuda` stand-in
 * answers with the same rule, so a GPU run can be rehearsed on a machine without one.
 */
#ifndef CK_CUDA_OP_SUPPORT_H
#define CK_CUDA_OP_SUPPORT_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "harness/core/ops.h"
#include "harness/core/tensor.h"

/* Whether the CUDA backend runs op in dtype: every op of the catalogue in fp32, fp64, fp16
 * and bf16, except a low-precision reduction (policies.reduction_dtype "low", a
 * reference-backend canary). */
bool ck_cuda_supports_op(const ck_op_params *op, ck_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif
