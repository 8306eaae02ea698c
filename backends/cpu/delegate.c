/*
 * The ops without a fast kernel run on the reference backend's entry points
 * (backends/ref/ref_ops.h). Where an op's every output element depends on one slice of its
 * tensors only, the call is split into slices run on the pool's threads: each slice is a
 * reference call on views of the same memory, so every element is computed by the very
 * reference code, in the same order, as in one whole call - the reference's bits, whatever
 * the thread count. Two kinds of slices:
 *  - element ranges, for element-wise ops whose inputs, output and gradients all have one
 *    shape (gelu, tanh, sigmoid, leaky_relu, silu, add, mul, exp, cast, ...): chunks of
 *    DELEGATE_CHUNK elements, by size alone;
 *  - samples (dim 0), for ops that never mix samples: pooling, upsampling, concat (along
 *    dim 1), softmax and log_softmax over a dim other than 0, attention without dropout
 *    (its dropout mask is indexed by the element's place in the whole batch).
 * Ops with parameters, buffers or saved statistics (their gradients and statistics are
 * sums over the batch), random draws, and everything else run as one call.
 */
#include "backends/cpu/cpu_common.h"

#include <stdlib.h>
#include <string.h>

#define DELEGATE_CHUNK 32768 /* elements per slice of an element-wise op */

typedef enum { SPLIT_NONE, SPLIT_ELEMENTS, SPLIT_SAMPLES } split_kind;

static bool same_shape(const ck_tensor *a, const ck_tensor *b)
{
    return !a || !b || ck_shape_equal(&a->shape, &b->shape);
}

static bool elementwise_kind(ck_op_kind k)
{
    switch (k) {
    case CK_OP_LEAKY_RELU: case CK_OP_GELU: case CK_OP_TANH: case CK_OP_SIGMOID:
    case CK_OP_ADD: case CK_OP_MUL: case CK_OP_SILU: case CK_OP_SQRT: case CK_OP_RSQRT:
    case CK_OP_RECIPROCAL: case CK_OP_EXP: case CK_OP_LOG: case CK_OP_NEG: case CK_OP_ERF:
    case CK_OP_ABS: case CK_OP_CAST:
        return true;
    default:
        return false;
    }
}

static bool per_sample_kind(const ck_op_params *op, const ck_tensor *out)
{
    switch (op->kind) {
    case CK_OP_MAXPOOL: case CK_OP_AVGPOOL: case CK_OP_UPSAMPLE: case CK_OP_CONCAT:
        return true;
    case CK_OP_SOFTMAX: case CK_OP_LOG_SOFTMAX:
        return op->dim > 0 && op->dim < out->shape.ndim;
    case CK_OP_ATTENTION:
        return op->rate <= 0.0;
    default:
        return false;
    }
}

/* How the call may be split; g is NULL for a forward. The decision uses the op and the
 * shapes only. */
static split_kind split_of(const ck_op_params *op, const ck_op_io *io, const ck_op_grads *g)
{
    if (io->weight || io->bias || io->saved || io->running_mean || io->running_var ||
        io->num_batches_tracked || (g && (g->dweight || g->dbias)) || !io->out ||
        io->out->shape.ndim < 1)
        return SPLIT_NONE;
    const ck_tensor *out = io->out;
    if (elementwise_kind(op->kind)) {
        for (int i = 0; i < io->n_in; i++)
            if (!same_shape(io->in[i], out) || (g && !same_shape(g->din[i], out)))
                return SPLIT_NONE;
        if (g && !same_shape(g->dout, out))
            return SPLIT_NONE;
        return ck_shape_numel(&out->shape) > DELEGATE_CHUNK ? SPLIT_ELEMENTS : SPLIT_NONE;
    }
    if (!per_sample_kind(op, out) || out->shape.dim[0] < 2)
        return SPLIT_NONE;
    const int64_t n = out->shape.dim[0];
    for (int i = 0; i < io->n_in; i++)
        if (io->in[i] && (io->in[i]->shape.ndim < 1 || io->in[i]->shape.dim[0] != n))
            return SPLIT_NONE;
    return SPLIT_SAMPLES;
}

/* the slice [lo, hi) of t: elements of its flat view, or samples along dim 0 */
static void slice_view(const ck_tensor *t, split_kind k, int64_t lo, int64_t hi, ck_tensor *v)
{
    *v = *t;
    const size_t es = ck_dtype_size(t->dtype);
    size_t offset;
    if (k == SPLIT_ELEMENTS) {
        v->shape.ndim = 1;
        v->shape.dim[0] = hi - lo;
        offset = (size_t)lo * es;
    } else {
        const int64_t per = t->shape.dim[0] ? ck_shape_numel(&t->shape) / t->shape.dim[0] : 0;
        v->shape.dim[0] = hi - lo;
        offset = (size_t)(lo * per) * es;
    }
    /* a tensor without storage (one the op does not read) stays without it in every slice */
    v->data = t->data ? (char *)t->data + offset : NULL;
}

typedef struct {
    const ck_op_params *op;
    const ck_fwd_args *args;
    const ck_op_io *io;
    const ck_op_grads *g; /* NULL: forward */
    ck_op_io *io_mut;     /* the caller's io (forward) and g (backward) for a whole call */
    ck_op_grads *g_mut;
    split_kind kind;
    int64_t total, step; /* elements or samples; per slice */
    ck_status *st;
    ck_error *errs;
} delegate_job;

static void delegate_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const delegate_job *j = vctx;
    const int64_t lo = task * j->step, hi = lo + j->step < j->total ? lo + j->step : j->total;
    ck_tensor in[CK_MAX_INPUTS], out, dout, din[CK_MAX_INPUTS];
    ck_op_io io = *j->io;
    for (int i = 0; i < io.n_in; i++)
        if (io.in[i]) {
            slice_view(io.in[i], j->kind, lo, hi, &in[i]);
            io.in[i] = &in[i];
        }
    slice_view(j->io->out, j->kind, lo, hi, &out);
    io.out = &out;
    if (!j->g) {
        j->st[task] = ref_op_forward(j->op, j->args, &io, &j->errs[task]);
        return;
    }
    ck_op_grads g = *j->g;
    if (g.dout) {
        slice_view(j->g->dout, j->kind, lo, hi, &dout);
        g.dout = &dout;
    }
    for (int i = 0; i < io.n_in; i++)
        if (g.din[i]) {
            slice_view(j->g->din[i], j->kind, lo, hi, &din[i]);
            g.din[i] = &din[i];
        }
    j->st[task] = ref_op_backward(j->op, j->args, &io, &g, &j->errs[task]);
}

static ck_status run_split(const cpu_ctx *c, delegate_job *j, ck_error *err)
{
    const ck_tensor *out = j->io->out;
    j->total = j->kind == SPLIT_ELEMENTS ? ck_shape_numel(&out->shape) : out->shape.dim[0];
    j->step = j->kind == SPLIT_ELEMENTS ? DELEGATE_CHUNK : 1;
    const int64_t tasks = (j->total + j->step - 1) / j->step;
    j->st = calloc((size_t)tasks, sizeof *j->st);
    j->errs = calloc((size_t)tasks, sizeof *j->errs);
    if (!j->st || !j->errs) {
        free(j->st);
        free(j->errs);
        return ck_fail(err, CK_ERR_NOMEM, "cpu backend: out of memory splitting op %s",
                       ck_op_kind_name(j->op->kind));
    }
    cpk_parallel(c->pool, tasks, delegate_task, j);
    ck_status st = CK_OK;
    int64_t failed = 0;
    for (int64_t t = 0; t < tasks; t++)
        if (j->st[t] != CK_OK && failed++ == 0) {
            st = j->st[t];
            *err = j->errs[t]; /* the first failing slice's message, by slice order */
        }
    free(j->st);
    free(j->errs);
    if (failed == tasks) {
        /* every slice refused the call (the reference's argument checks, which run before
         * anything is written): the whole call's refusal names the tensors' real shapes */
        ck_error whole = {{0}};
        const ck_status ws = j->g ? ref_op_backward(j->op, j->args, j->io, j->g_mut, &whole)
                                  : ref_op_forward(j->op, j->args, j->io_mut, &whole);
        if (ws != CK_OK) {
            *err = whole;
            return ws;
        }
        return CK_OK; /* the whole call went through after all: its results stand */
    }
    return st;
}

ck_status cpu_delegate_forward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                               ck_op_io *io, ck_error *err)
{
    delegate_job j = {.op = op, .args = args, .io = io, .io_mut = io,
                      .kind = split_of(op, io, NULL)};
    if (j.kind == SPLIT_NONE)
        return ref_op_forward(op, args, io, err);
    return run_split(c, &j, err);
}

ck_status cpu_delegate_backward(const cpu_ctx *c, const ck_op_params *op,
                                const ck_fwd_args *args, const ck_op_io *io, ck_op_grads *g,
                                ck_error *err)
{
    delegate_job j = {.op = op, .args = args, .io = io, .g = g, .g_mut = g,
                      .kind = split_of(op, io, g)};
    if (j.kind == SPLIT_NONE)
        return ref_op_backward(op, args, io, g, err);
    return run_split(c, &j, err);
}
