/*
 * Fast CPU activations. relu in fp32 runs here, split across threads by element ranges
 * (elementwise: no reduction, so the split cannot change a bit) and bit-identical to the
 * reference backend's relu: forward x > 0 ? x : +0, backward dx + dy * (x > 0 ? 1 : 0)
 * rounded once. Every other activation, and relu in fp16/bf16/fp64, is delegated to the
 * reference backend (backends/ref/activation.c) for now.
 */
#include "backends/cpu/cpu_common.h"


#define ELEMS_PER_TASK 16384

typedef struct {
    const float *x, *dy;
    float *y, *dx;
    int64_t n;
} relu_job;

static void relu_fwd_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const relu_job *j = vctx;
    const int64_t i0 = task * ELEMS_PER_TASK;
    const int64_t i1 = i0 + ELEMS_PER_TASK < j->n ? i0 + ELEMS_PER_TASK : j->n;
    for (int64_t i = i0; i < i1; i++)
        j->y[i] = j->x[i] > 0.0f ? j->x[i] : 0.0f;
}

static void relu_bwd_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const relu_job *j = vctx;
    const int64_t i0 = task * ELEMS_PER_TASK;
    const int64_t i1 = i0 + ELEMS_PER_TASK < j->n ? i0 + ELEMS_PER_TASK : j->n;
    for (int64_t i = i0; i < i1; i++)
        j->dx[i] = j->dx[i] + j->dy[i] * (j->x[i] > 0.0f ? 1.0f : 0.0f);
}

static bool all_f32(const ck_tensor *const *t, int n)
{
    for (int i = 0; i < n; i++)
        if (t[i] && t[i]->dtype != CK_F32)
            return false;
    return true;
}

ck_status cpu_activation_forward(const cpu_ctx *c, const ck_op_params *op,
                                 const ck_fwd_args *args, ck_op_io *io, ck_error *err)
{
    CK_TRY(ck_opc_activation_fwd(CPU_BE, op, io, err));
    const ck_tensor *all[] = {io->in[0], io->out};
    if (op->kind != CK_OP_RELU || !all_f32(all, 2))
        return c->ref->forward(c->ref, op, args, io, err);
    relu_job j = {.x = io->in[0]->data, .y = io->out->data,
                  .n = ck_shape_numel(&io->in[0]->shape)};
    cpk_parallel(c->pool, (j.n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, relu_fwd_task, &j);
    return CK_OK;
}

ck_status cpu_activation_backward(const cpu_ctx *c, const ck_op_params *op,
                                  const ck_fwd_args *args, const ck_op_io *io, ck_op_grads *g,
                                  ck_error *err)
{
    CK_TRY(ck_opc_activation_bwd(CPU_BE, op, io, g, err));
    if (!g->din[0])
        return CK_OK;
    const ck_tensor *all[] = {io->in[0], g->dout, g->din[0]};
    if (op->kind != CK_OP_RELU || !all_f32(all, 3))
        return c->ref->backward(c->ref, op, args, io, g, err);
    relu_job j = {.x = io->in[0]->data, .dy = g->dout->data, .dx = g->din[0]->data,
                  .n = ck_shape_numel(&io->in[0]->shape)};
    cpk_parallel(c->pool, (j.n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, relu_bwd_task, &j);
    return CK_OK;
}
