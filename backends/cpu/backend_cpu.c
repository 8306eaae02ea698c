/*
 * The fast CPU backend: host memory, a thread pool, and the fast kernels for linear, conv
 * and relu (linear.c, conv.c, activation.c on gemm.c and conv_kernels.c). Every other op,
 * the losses, the optimizer and dtype conversion run on a reference backend this backend
 * creates through the registry ("ref", backends/ref/): single-threaded and fixed-order, so
 * they keep the reference bits. Determinism rules and what may differ between machines: docs/cpu-backend.md.
 */
#include "backends/cpu/cpu_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "backends/cpu/cpu_common.h"
#include "backends/host_memory.h"
#include "backends/registry.h"

typedef struct {
    ck_backend be;
    cpu_ctx ctx;
} cpu_backend;

static const cpu_ctx *ctx_of(ck_backend *b)
{
    return &((cpu_backend *)b->impl)->ctx;
}

/* every op the reference supports: the fast kernels cover a subset of its ops, and the
 * rest run on it */
static bool cpu_supports(ck_backend *b, const ck_op_params *op, ck_dtype dtype)
{
    ck_backend *r = ((cpu_backend *)b->impl)->ctx.ref;
    return (unsigned)op->kind < CK_OP_KIND_COUNT && ck_opc_is_float(dtype) &&
           r->supports(r, op, dtype);
}

typedef ck_status (*fast_fwd_fn)(const cpu_ctx *, const ck_op_params *, const ck_fwd_args *,
                                 ck_op_io *, ck_error *);
typedef ck_status (*fast_bwd_fn)(const cpu_ctx *, const ck_op_params *, const ck_fwd_args *,
                                 const ck_op_io *, ck_op_grads *, ck_error *);

/* the fast kernels; every op kind not listed runs on the reference backend */
static const struct {
    fast_fwd_fn fwd;
    fast_bwd_fn bwd;
} fast_ops[CK_OP_KIND_COUNT] = {
    [CK_OP_LINEAR] = {cpu_linear_forward, cpu_linear_backward},
    [CK_OP_CONV] = {cpu_conv_forward, cpu_conv_backward},
    /* relu in fp32 here; the other activations go on to the reference */
    [CK_OP_RELU] = {cpu_activation_forward, cpu_activation_backward},
};

static ck_status cpu_forward(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                             ck_op_io *io, ck_error *err)
{
    if (!cpu_supports(b, op, io->out->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "cpu backend: no kernel for op %s in %s",
                       ck_op_kind_name(op->kind), ck_dtype_name(io->out->dtype));
    const cpu_ctx *c = ctx_of(b);
    if (fast_ops[op->kind].fwd)
        return fast_ops[op->kind].fwd(c, op, args, io, err);
    return c->ref->forward(c->ref, op, args, io, err);
}

static ck_status cpu_backward(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    if (!cpu_supports(b, op, io->out->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "cpu backend: no kernel for op %s in %s",
                       ck_op_kind_name(op->kind), ck_dtype_name(io->out->dtype));
    const cpu_ctx *c = ctx_of(b);
    if (fast_ops[op->kind].bwd)
        return fast_ops[op->kind].bwd(c, op, args, io, g, err);
    return c->ref->backward(c->ref, op, args, io, g, err);
}

static ck_status cpu_loss_fwd(ck_backend *b, ck_loss_kind kind, const ck_tensor *y,
                              const ck_tensor *target, double *loss, ck_error *err)
{
    ck_backend *r = ctx_of(b)->ref;
    return r->loss_forward(r, kind, y, target, loss, err);
}

static ck_status cpu_loss_bwd(ck_backend *b, ck_loss_kind kind, const ck_tensor *y,
                              const ck_tensor *target, double scale, ck_tensor *dy,
                              ck_error *err)
{
    ck_backend *r = ctx_of(b)->ref;
    return r->loss_backward(r, kind, y, target, scale, dy, err);
}

static ck_status cpu_convert_dtype(ck_backend *b, ck_tensor *dst, const ck_tensor *src,
                                   double scale, bool accumulate, ck_error *err)
{
    ck_backend *r = ctx_of(b)->ref;
    return r->convert(r, dst, src, scale, accumulate, err);
}

static ck_status cpu_optim(ck_backend *b, const ck_optimizer *opt, int64_t step,
                           double grad_scale, ck_tensor *param, const ck_tensor *grad,
                           ck_tensor *state0, ck_tensor *state1, ck_error *err)
{
    ck_backend *r = ctx_of(b)->ref;
    return r->optimizer_step(r, opt, step, grad_scale, param, grad, state0, state1, err);
}

/* optional capabilities: the reference backend's, called on the reference instance */
static ck_status cpu_ce_fwd(ck_backend *b, const ck_loss_spec *loss, const ck_tensor *y,
                            const ck_tensor *target, double *out, ck_error *err)
{
    ck_backend *r = ctx_of(b)->ref;
    union {
        void *p;
        ck_ce_forward_fn f;
    } u = {ck_backend_proc(r, CK_PROC_CE_FORWARD)};
    if (!u.p)
        return ck_fail(err, CK_ERR_UNSUPPORTED, "cpu backend: no cross_entropy capability");
    return u.f(r, loss, y, target, out, err);
}

static ck_status cpu_ce_bwd(ck_backend *b, const ck_loss_spec *loss, const ck_tensor *y,
                            const ck_tensor *target, double scale, ck_tensor *dy,
                            ck_error *err)
{
    ck_backend *r = ctx_of(b)->ref;
    union {
        void *p;
        ck_ce_backward_fn f;
    } u = {ck_backend_proc(r, CK_PROC_CE_BACKWARD)};
    if (!u.p)
        return ck_fail(err, CK_ERR_UNSUPPORTED, "cpu backend: no cross_entropy capability");
    return u.f(r, loss, y, target, scale, dy, err);
}

static void *cpu_get_proc(ck_backend *b, const char *name)
{
    ck_backend *r = ctx_of(b)->ref;
    if (strcmp(name, CK_PROC_CE_FORWARD) == 0 && ck_backend_proc(r, name))
        return (void *)(ck_ce_forward_fn)cpu_ce_fwd;
    if (strcmp(name, CK_PROC_CE_BACKWARD) == 0 && ck_backend_proc(r, name))
        return (void *)(ck_ce_backward_fn)cpu_ce_bwd;
    return NULL;
}

static void cpu_info(ck_backend *b, ck_backend_info *out)
{
    const cpu_ctx *c = ctx_of(b);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "cpu");
    struct utsname u;
    snprintf(out->device, sizeof out->device, "%s host, %d thread%s, %s",
             uname(&u) == 0 ? u.machine : "unknown", c->threads, c->threads == 1 ? "" : "s",
             cpk_isa_name(c->isa));
    out->threads = c->threads;
    snprintf(out->isa, sizeof out->isa, "%s", cpk_isa_name(c->isa));
#if defined(__clang__)
    snprintf(out->versions, sizeof out->versions, "clang %s", __clang_version__);
#elif defined(__GNUC__)
    snprintf(out->versions, sizeof out->versions, "gcc %d.%d.%d", __GNUC__, __GNUC_MINOR__,
             __GNUC_PATCHLEVEL__);
#endif
}

static void cpu_destroy(ck_backend *b)
{
    if (!b)
        return;
    cpu_backend *cb = b->impl;
    cpk_pool_destroy(cb->ctx.pool);
    if (cb->ctx.ref)
        cb->ctx.ref->destroy(cb->ctx.ref);
    free(cb);
}

bool ck_backend_cpu_config(const ck_backend *b, int *threads, const char **isa)
{
    if (!b || b->destroy != cpu_destroy)
        return false;
    const cpu_ctx *c = &((const cpu_backend *)b->impl)->ctx;
    if (threads)
        *threads = c->threads;
    if (isa)
        *isa = cpk_isa_name(c->isa);
    return true;
}

ck_status ck_backend_cpu_create_with(ck_backend **out, int threads, const char *isa,
                                     ck_error *err)
{
    *out = NULL;
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n < 1 ? 1 : n > 256 ? 256 : (int)n;
    }
    if (threads < 1 || threads > 256)
        return ck_fail(err, CK_ERR_INPUT, "cpu backend: %d threads: use 1 to 256", threads);
    const cpk_isa best = cpk_isa_detect();
    cpk_isa want = best;
    if (isa && strcmp(isa, "auto") != 0) {
        if (strcmp(isa, "portable") == 0)
            want = CPK_ISA_PORTABLE;
        else if (strcmp(isa, "avx2") == 0 || strcmp(isa, "avx2+fma") == 0)
            want = CPK_ISA_AVX2;
        else if (strcmp(isa, "avx512") == 0 || strcmp(isa, "avx512f") == 0)
            want = CPK_ISA_AVX512;
        else
            return ck_fail(err, CK_ERR_INPUT,
                           "cpu backend: unknown ISA '%s' (auto, portable, avx2, avx512)", isa);
        if (want > best)
            return ck_fail(err, CK_ERR_UNSUPPORTED,
                           "cpu backend: this machine does not support %s (best: %s)",
                           cpk_isa_name(want), cpk_isa_name(best));
    }
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory creating the cpu backend");
    cb->ctx.threads = threads;
    cb->ctx.isa = want;
    ck_status st = ck_backend_create("ref", NULL, &cb->ctx.ref, err);
    if (st != CK_OK) {
        free(cb);
        return st;
    }
    if (!(cb->ctx.pool = cpk_pool_create(threads))) {
        cb->ctx.ref->destroy(cb->ctx.ref);
        free(cb);
        return ck_fail(err, CK_ERR_NOMEM, "cpu backend: cannot start %d threads", threads);
    }
    ck_backend *b = &cb->be;
    b->name = "cpu";
    b->impl = cb;
    ck_host_memory_install(b);
    b->supports = cpu_supports;
    b->forward = cpu_forward;
    b->backward = cpu_backward;
    b->loss_forward = cpu_loss_fwd;
    b->loss_backward = cpu_loss_bwd;
    b->optimizer_step = cpu_optim;
    b->convert = cpu_convert_dtype;
    b->info = cpu_info;
    b->destroy = cpu_destroy;
    b->get_proc = cpu_get_proc;
    *out = b;
    return CK_OK;
}
