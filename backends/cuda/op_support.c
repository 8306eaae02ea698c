/*
 * Which ops the CUDA backend runs (cuda_api.h, ck_cuda_supports_op): plain C, compiled into
 * the module (the backend's `supports`) and into the library, where the registry's
 * `cpu-as-cuda` stand-in answers with the same rule so a GPU run can be rehearsed on a
 * machine without one (tests/gpu/run.sh).
 */
#include "backends/cuda/cuda_api.h"

#include "backends/check/check.h"

bool ck_cuda_supports_op(const ck_op_params *op, ck_dtype dtype)
{
    /* policies.reduction_dtype "low" is a reference-backend canary: the CUDA backend
     * always reduces wide */
    return (unsigned)op->kind < CK_OP_KIND_COUNT && ck_opc_is_float(dtype) &&
           !op->low_precision_reduction;
}
