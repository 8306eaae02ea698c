/*
 * The fused relu backward of the host backends (ref and cpu; backend.h:
 * ck_op_grads.din0_relu_over_input and loss_backward's relu_over). The relu's mask is
 * recorded as one bit per element (!(r[k] <= 0): NaN passes), the relu output's buffer is
 * zeroed and the ordinary input gradient (or loss gradient) is computed into it, and then
 * the relu's backward is applied element by element with the reference relu's own
 * operations (element k set to +0, then dy[k] * (0 or 1) added with one rounding,
 * backends/ref/pointwise.c): the bits of the unfused sequence by construction. The mask is
 * numel / 8 bytes of host memory beside the tensor, outside the executor's activation
 * accounting; nothing of the tensor's size is allocated.
 */
#include "backends/ref/ref_ops.h"
#include "backends/ref/ref_elem.h"

#include <stdlib.h>
#include <string.h>

ck_status ref_relu_mask_take(const char *op, const ck_tensor *r, ref_relu_mask *m, ck_error *err)
{
    m->n = ck_shape_numel(&r->shape);
    m->bits = calloc((size_t)(m->n / 32 + 1), sizeof *m->bits);
    if (!m->bits)
        return ck_fail(err, CK_ERR_NOMEM, "%s: no memory for the relu mask of %s (%lld bits)", op,
                       ref_tname(r), (long long)m->n);
    if (r->dtype == CK_F32) {
        const float *v = r->data;
        for (int64_t k = 0; k < m->n; k++)
            m->bits[k >> 5] |= (uint32_t)!(v[k] <= 0.0f) << (k & 31);
    } else {
        for (int64_t k = 0; k < m->n; k++)
            m->bits[k >> 5] |= (uint32_t)!(ref_ld(r, k) <= 0.0) << (k & 31);
    }
    return CK_OK;
}

void ref_relu_mask_apply(ref_relu_mask *m, ck_tensor *din)
{
    if (din->dtype == CK_F32) { /* the same operations in float: exact, so the same bits */
        float *d = din->data;
        for (int64_t w = 0; w * 32 < m->n; w++) {
            const uint32_t word = m->bits[w];
            const int64_t k0 = w * 32, k1 = k0 + 32 < m->n ? k0 + 32 : m->n;
            for (int64_t k = k0; k < k1; k++)
                d[k] = 0.0f + d[k] * (float)((word >> (k - k0)) & 1u);
        }
        free(m->bits);
        m->bits = NULL;
        return;
    }
    for (int64_t k = 0; k < m->n; k++) {
        const double dact = (m->bits[k >> 5] >> (k & 31)) & 1u ? 1.0 : 0.0;
        const double v = ref_ld(din, k) * dact; /* relu's dout[k] * act'(x[k]) */
        ref_st(din, k, 0.0);
        ref_acc(din, k, v);
    }
    free(m->bits);
    m->bits = NULL;
}

void ref_relu_mask_free(ref_relu_mask *m)
{
    free(m->bits);
    m->bits = NULL;
}

ck_status ref_backward_input0_hidden(ref_host_bwd_fn fn, const void *ctx, const ck_op_params *op,
                                     const ck_fwd_args *args, const ck_op_io *io,
                                     const ck_op_grads *g, ck_error *err)
{
    ck_tensor hidden = *io->in[0];
    hidden.data = NULL;
    ck_op_io dx_io = *io;
    dx_io.in[0] = &hidden;
    ck_op_grads dx_g = *g;
    dx_g.din0_relu_over_input = false;
    return fn(ctx, op, args, &dx_io, &dx_g, err);
}

ck_status ref_backward_relu_over_input(ref_host_bwd_fn fn, const void *ctx, const ck_op_params *op,
                                       const ck_fwd_args *args, const ck_op_io *io,
                                       ck_op_grads *g, ck_error *err)
{
    CK_TRY(ck_opc_relu_over_input(op, io, g, err));
    ref_relu_mask m;
    CK_TRY(ref_relu_mask_take(ck_op_kind_name(op->kind), io->in[0], &m, err));
    memset(g->din[0]->data, 0, ck_tensor_bytes(g->din[0])); /* +0 in every float dtype */
    ck_status st = ref_backward_input0_hidden(fn, ctx, op, args, io, g, err);
    if (st != CK_OK) {
        ref_relu_mask_free(&m);
        return st;
    }
    ref_relu_mask_apply(&m, g->din[0]);
    return CK_OK;
}
