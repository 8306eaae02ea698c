/* Which ops the CUDA backend runs (op_support.h). */
#include "backends/cuda/op_support.h"

#include "backends/check/check.h"

bool ck_cuda_supports_op(const ck_op_params *op, ck_dtype dtype)
{
    /* policies.reduction_dtype "low" is a reference-backend canary: the CUDA backend
     * always reduces wide */
    return (unsigned)op->kind < CK_OP_KIND_COUNT && ck_opc_is_float(dtype) &&
           !op->low_precision_reduction;
}
