/*
 * The cpu backend's fused relu backward (backend.h: ck_op_grads.din0_relu_over_input) in
 * fp32: the reference's operations element by element, split into fixed element ranges
 * across the pool's threads (element-wise: the split cannot change a bit). Other dtypes go
 * to the reference's own code.
 *
 * Fused relu: the relu's mask is taken as one bit per element, !(r[k] <= 0) (NaN passes),
 * before anything writes the buffer; the buffer is zeroed and the ordinary input gradient
 * accumulated into it (a linear's is written as if into zeros, ck_backward_dx_fresh, with
 * no zero pass); then element k becomes +0 + dx[k] * (bit ? 1 : 0), one rounding:
 * the bits of the reference's fused relu (backends/ref/relu_over.c) and of the unfused
 * sequence. The mask is numel / 8 bytes of host memory outside the activation accounting.
 */
#include "backends/cpu/cpu_common.h"

#include <stdlib.h>

#define WORDS_PER_TASK 2048 /* 65536 elements */

typedef struct {
    float *v;
    uint32_t *bits;
    int64_t n;
} mask_job;

static void mask_take_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const mask_job *j = vctx;
    const int64_t w0 = task * WORDS_PER_TASK;
    for (int64_t w = w0; w < w0 + WORDS_PER_TASK && w * 32 < j->n; w++) {
        const int64_t k0 = w * 32, k1 = k0 + 32 < j->n ? k0 + 32 : j->n;
        uint32_t word = 0;
        for (int64_t k = k0; k < k1; k++)
            word |= (uint32_t)!(j->v[k] <= 0.0f) << (k - k0);
        j->bits[w] = word;
    }
}

static void mask_apply_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const mask_job *j = vctx;
    const int64_t w0 = task * WORDS_PER_TASK;
    for (int64_t w = w0; w < w0 + WORDS_PER_TASK && w * 32 < j->n; w++) {
        const uint32_t word = j->bits[w];
        const int64_t k0 = w * 32, k1 = k0 + 32 < j->n ? k0 + 32 : j->n;
        for (int64_t k = k0; k < k1; k++)
            j->v[k] = 0.0f + j->v[k] * (float)((word >> (k - k0)) & 1u);
    }
}

ck_status cpu_backward_relu_over_input(const cpu_ctx *c, ref_host_bwd_fn fn,
                                       const ck_op_params *op, const ck_fwd_args *args,
                                       const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    CK_TRY(ck_opc_relu_over_input(op, io, g, err));
    if (io->in[0]->dtype != CK_F32 || g->din[0]->dtype != CK_F32)
        return ref_backward_relu_over_input(fn, c, op, args, io, g, err);
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    const int64_t words = n / 32 + 1;
    uint32_t *bits = malloc((size_t)words * sizeof *bits);
    if (!bits)
        return ck_fail(err, CK_ERR_NOMEM, "%s: no memory for the relu mask of %s (%lld bits)",
                       ck_op_kind_name(op->kind), io->in[0]->name ? io->in[0]->name : "?",
                       (long long)n);
    mask_job j = {io->in[0]->data, bits, n};
    const int64_t tasks = (words + WORDS_PER_TASK - 1) / WORDS_PER_TASK;
    cpk_parallel(c->pool, tasks, mask_take_task, &j);
    /* a linear writes dx as if into zeros (ck_backward_dx_fresh): no zero pass */
    ck_op_grads dx_g = *g;
    dx_g.din0_fresh = ck_backward_dx_fresh(op->kind);
    if (!dx_g.din0_fresh)
        cpu_mem_zero(c->pool, g->din[0]->data, ck_tensor_bytes(g->din[0]));
    ck_status st = ref_backward_input0_hidden(fn, c, op, args, io, &dx_g, err);
    if (st == CK_OK) {
        j.v = g->din[0]->data;
        cpk_parallel(c->pool, tasks, mask_apply_task, &j);
    }
    free(bits);
    return st;
}
