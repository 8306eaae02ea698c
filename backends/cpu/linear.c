/*
 * Fast CPU linear layer (CK_OP_LINEAR): y = x W^T + b over the last dimension, x viewed as
 * (M, in). Every product is a packed SGEMM (gemm.c) in fp32: each output element is one
 * fma chain over the reduced dimension in ascending order (kernels.h), so the result does
 * not depend on the thread count or on the SIMD path.
 *
 *   forward   y  = b + x W^T           chain from the bias (0 without one)
 *   backward  dx += dy W               fp32: the chain continues from the existing dx (from
 *                                      +0 where din0_fresh / dparams_fresh say it holds
 *             dW += dy^T x             nothing yet); fp16/bf16: the contribution is computed from 0 in
 *                                      fp32 and added to the stored value with one rounding
 *             db += sum over rows of dy, in double per unit (row order), one rounding
 * fp64 calls (gradient checks) run the reference kernels (backends/ref/).
 */
#include "backends/cpu/cpu_common.h"

#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPK_X86 1
#else
#define CPK_X86 0
#endif

typedef struct {
    const float *dy;
    int64_t M, units;
    cpk_isa isa;
    double *out;
} colsum_job;

#if CPK_X86
/* units [u0, u0 + 16): four lanes of doubles per register, each lane one unit's chain
 * (+0, then + dy[m][u] for m ascending: the portable loop's operations, the same bits) */
__attribute__((target("avx2"))) static void colsum16_avx2(const colsum_job *j, int64_t u0)
{
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    __m256d a2 = _mm256_setzero_pd(), a3 = _mm256_setzero_pd();
    for (int64_t m = 0; m < j->M; m++) {
        const float *r = j->dy + m * j->units + u0;
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm_loadu_ps(r)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm_loadu_ps(r + 4)));
        a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm_loadu_ps(r + 8)));
        a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm_loadu_ps(r + 12)));
    }
    _mm256_storeu_pd(j->out + u0, a0);
    _mm256_storeu_pd(j->out + u0 + 4, a1);
    _mm256_storeu_pd(j->out + u0 + 8, a2);
    _mm256_storeu_pd(j->out + u0 + 12, a3);
}
#endif

static void colsum_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const colsum_job *j = vctx;
    /* 64 units per task; every unit one double chain over the rows */
    const int64_t u0 = task * 64, u1 = u0 + 64 < j->units ? u0 + 64 : j->units;
    int64_t v = u0;
#if CPK_X86
    if (j->isa != CPK_ISA_PORTABLE)
        for (; v + 16 <= u1; v += 16)
            colsum16_avx2(j, v);
#endif
    double acc[64];
    for (int64_t u = v; u < u1; u++)
        acc[u - v] = 0.0;
    for (int64_t m = 0; m < j->M; m++) {
        const float *r = j->dy + m * j->units;
        for (int64_t u = v; u < u1; u++)
            acc[u - v] += (double)r[u];
    }
    for (int64_t u = v; u < u1; u++)
        j->out[u] = acc[u - v];
}

ck_status cpu_linear_forward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                             ck_op_io *io, ck_error *err)
{
    const ck_tensor *x = io->in[0];
    const ck_tensor *b = op->bias ? io->bias : NULL;
    const ck_tensor *all[] = {x, io->weight, b, io->out};
    CK_TRY(ck_opc_float_dtypes(CPU_BE, "linear", all, 4, err));
    ck_linear_dims d;
    CK_TRY(ck_opc_linear_shapes(x, io->weight, b, io->out, &d, err));
    if (cpu_any_f64(all, 4))
        return ref_op_forward(op, args, io, err);
    const float *xf, *wf, *bf;
    float *ox = NULL, *ow = NULL, *ob = NULL, *y = NULL;
    ck_status st;
    if ((st = cpu_view_f32("linear", x, c, &xf, &ox, err)) != CK_OK ||
        (st = cpu_view_f32("linear", io->weight, c, &wf, &ow, err)) != CK_OK ||
        (st = cpu_view_f32("linear", b, c, &bf, &ob, err)) != CK_OK)
        goto done;
    if (io->out->dtype == CK_F32)
        y = io->out->data;
    else if ((st = cpu_scratch("linear", d.M * d.units, false, &y, err)) != CK_OK)
        goto done;
    /* each output's chain starts from its unit's bias (from +0 without one) */
    const cpk_gemm_src s = {.a = xf, .a_rs = d.in, .a_cs = 1, .b = wf, .b_rs = 1, .b_cs = d.in,
                            .col_init = bf};
    if (!cpk_sgemm(c->pool, c->isa, d.M, d.units, d.in, &s, y, d.units, false)) {
        st = ck_fail(err, CK_ERR_NOMEM, "linear: no memory for GEMM packing buffers");
        goto done;
    }
    cpu_store(c, io->out, y);
done:
    if (y && y != io->out->data)
        free(y);
    free(ox);
    free(ow);
    free(ob);
    return st;
}

ck_status cpu_linear_backward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    const ck_tensor *x = io->in[0];
    ck_tensor *db = op->bias ? g->dbias : NULL;
    const ck_tensor *all[] = {x, io->weight, g->dout, g->din[0], g->dweight, db};
    CK_TRY(ck_opc_float_dtypes(CPU_BE, "linear", all, 6, err));
    ck_linear_dims d;
    CK_TRY(ck_opc_linear_shapes(x, io->weight, db, g->dout, &d, err));
    /* dparams_fresh (backend.h): an fp32 dW's chains start at +0 instead of loading it;
     * every other parameter gradient (db, a low-precision or fp64 dW) is zeroed here and
     * then accumulated into as usual: the bits of a zeroed gradient either way */
    const bool f64 = cpu_any_f64(all, 6);
    const bool dw_fresh = g->dparams_fresh && g->dweight && g->dweight->dtype == CK_F32 && !f64;
    if (g->dparams_fresh) {
        if (g->dweight && !dw_fresh)
            cpu_mem_zero(c->pool, g->dweight->data, ck_tensor_bytes(g->dweight));
        if (db)
            cpu_mem_zero(c->pool, db->data, ck_tensor_bytes(db));
        g->dparams_fresh = false;
    }
    if (f64)
        return ref_op_backward(op, args, io, g, err);
    const float *xf = NULL, *wf = NULL, *dyf = NULL;
    float *ox = NULL, *ow = NULL, *ody = NULL, *tmp = NULL;
    double *dbs = NULL;
    ck_status st;
    if ((st = cpu_view_f32("linear", g->dout, c, &dyf, &ody, err)) != CK_OK)
        goto done;
    if (g->din[0]) {
        ck_tensor *dx = g->din[0];
        if ((st = cpu_view_f32("linear", io->weight, c, &wf, &ow, err)) != CK_OK)
            goto done;
        const bool f32 = dx->dtype == CK_F32;
        float *out = f32 ? dx->data : NULL;
        if (!f32 && (st = cpu_scratch("linear", d.M * d.in, false, &tmp, err)) != CK_OK)
            goto done;
        if (!f32)
            out = tmp;
        const cpk_gemm_src s = {.a = dyf, .a_rs = d.units, .a_cs = 1,
                                .b = wf, .b_rs = d.in, .b_cs = 1};
        /* din0_fresh (backend.h): dx's contents are undefined; each element's chain starts
         * at +0 instead of at dx's zeroed value, the same bits */
        if (!cpk_sgemm(c->pool, c->isa, d.M, d.in, d.units, &s, out, d.in,
                       f32 && !g->din0_fresh))
            goto nomem;
        if (!f32 && g->din0_fresh)
            cpu_mem_zero(c->pool, dx->data, ck_tensor_bytes(dx));
        if (!f32)
            cpu_accumulate_f32(c, dx, tmp);
        free(tmp);
        tmp = NULL;
    }
    if (g->dweight) {
        ck_tensor *dw = g->dweight;
        if ((st = cpu_view_f32("linear", x, c, &xf, &ox, err)) != CK_OK)
            goto done;
        const bool f32 = dw->dtype == CK_F32;
        float *out = f32 ? dw->data : NULL;
        if (!f32 && (st = cpu_scratch("linear", d.units * d.in, false, &tmp, err)) != CK_OK)
            goto done;
        if (!f32)
            out = tmp;
        const cpk_gemm_src s = {.a = dyf, .a_rs = 1, .a_cs = d.units,
                                .b = xf, .b_rs = d.in, .b_cs = 1};
        if (!cpk_sgemm(c->pool, c->isa, d.units, d.in, d.M, &s, out, d.in, f32 && !dw_fresh))
            goto nomem;
        if (!f32)
            cpu_accumulate_f32(c, dw, tmp);
    }
    if (db) {
        if (!(dbs = malloc((size_t)d.units * sizeof *dbs)))
            goto nomem;
        colsum_job j = {dyf, d.M, d.units, c->isa, dbs};
        cpk_parallel(c->pool, (d.units + 63) / 64, colsum_task, &j);
        cpu_accumulate_f64(c, db, dbs);
    }
    st = CK_OK;
    goto done;
nomem:
    st = ck_fail(err, CK_ERR_NOMEM, "linear: no memory for backward scratch");
done:
    free(tmp);
    free(dbs);
    free(ox);
    free(ow);
    free(ody);
    return st;
}
