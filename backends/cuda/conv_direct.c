/*
 * Geometry of the CUDA backend's own fp64 convolution (conv_direct.h). Plain C: compiled
 * into the CUDA module and into the library, where tests/test_cuda_cpu.c runs the element
 * functions on the host against the CPU backend.
 */
#include "backends/cuda/conv_direct.h"

#include <string.h>

#include "backends/check/check.h"

ck_status ck_conv_direct_setup(const ck_op_params *op, const ck_tensor *x, const ck_tensor *w,
                               const ck_tensor *b, const ck_tensor *y, ck_conv_direct_geom *g,
                               ck_error *err)
{
    CK_TRY(ck_opc_conv_fit(op, x, w, b, y, err));
    const int nsp = op->nsp;
    memset(g, 0, sizeof *g);
    g->N = x->shape.dim[0];
    g->C = x->shape.dim[1];
    g->F = w->shape.dim[0];
    for (int a = 0; a < 3; a++) {
        const int s = a - (3 - nsp); /* the op's axis, < 0 for an added leading axis */
        g->in[a] = s < 0 ? 1 : x->shape.dim[2 + s];
        g->out[a] = s < 0 ? 1 : y->shape.dim[2 + s];
        g->k[a] = s < 0 ? 1 : op->kernel[s];
        g->stride[a] = s < 0 ? 1 : op->stride[s];
        g->dil[a] = s < 0 ? 1 : op->dilation[s];
        g->pad_lo[a] = s < 0 ? 0 : op->pad_lo[s];
        if (g->stride[a] < 1 || g->dil[a] < 1 || g->pad_lo[a] < 0 || g->k[a] < 1)
            return ck_fail(err, CK_ERR_INTERNAL,
                           "conv%dd: kernel %lld, stride %lld, dilation %lld, pad_lo %lld on "
                           "axis %d", nsp, (long long)g->k[a], (long long)g->stride[a],
                           (long long)g->dil[a], (long long)g->pad_lo[a], s);
    }
    return CK_OK;
}
