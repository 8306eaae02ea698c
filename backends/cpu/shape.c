/*
 * Fast CPU concat (CK_OP_CONCAT) in fp32: the reference's copy (backends/ref/shape.c) as
 * block copies, and its backward din[k] += the matching slice of dout as one fp32 add per
 * element (the reference adds in double and rounds to fp32: for two fp32 operands that is
 * the correctly rounded fp32 sum, the same bits), split across threads by fixed ranges of
 * the output (every element copied or added by one task). The forward copies bits: a
 * signalling NaN stays signalling where the reference's trip through double quiets it.
 * Other dtypes, mixed dtypes and refused arguments go to the reference (delegate.c).
 */
#include "backends/cpu/cpu_common.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPK_X86 1
#else
#define CPK_X86 0
#endif

#define CONCAT_CHUNK 65536 /* output elements per task */

typedef struct {
    int n_in;
    int64_t N, out_block, block[CK_MAX_INPUTS];
    const float *in[CK_MAX_INPUTS];
    float *out;
    const float *dout;
    float *din[CK_MAX_INPUTS]; /* backward; NULL entries are skipped */
    bool backward;
    cpk_isa isa;
} concat_job;

#if CPK_X86
__attribute__((target("avx2"))) static int64_t add_avx2(float *d, const float *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_add_ps(_mm256_loadu_ps(d + i), _mm256_loadu_ps(s + i)));
    return i;
}
#endif

/* d[0..n) += s[0..n), one fp32 add each */
static void add_f32(cpk_isa isa, float *d, const float *s, int64_t n)
{
    int64_t i = 0;
#if CPK_X86
    if (isa != CPK_ISA_PORTABLE)
        i = add_avx2(d, s, n);
#endif
    (void)isa;
    for (; i < n; i++)
        d[i] = d[i] + s[i];
}

/* the output range [lo, hi): for each piece lying in one input's block, copy or add */
static void concat_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const concat_job *j = vctx;
    const int64_t total = j->N * j->out_block;
    int64_t pos = task * CONCAT_CHUNK;
    const int64_t hi = pos + CONCAT_CHUNK < total ? pos + CONCAT_CHUNK : total;
    while (pos < hi) {
        const int64_t n = pos / j->out_block;
        int64_t off = pos - n * j->out_block, k = 0;
        while (k < j->n_in - 1 && off >= j->block[k]) /* the blocks sum to out_block */
            off -= j->block[k++];
        const int64_t len = j->block[k] - off < hi - pos ? j->block[k] - off : hi - pos;
        const int64_t src = n * j->block[k] + off;
        if (!j->backward)
            memcpy(j->out + pos, j->in[k] + src, (size_t)len * sizeof(float));
        else if (j->din[k])
            add_f32(j->isa, j->din[k] + src, j->dout + pos, len);
        pos += len;
    }
}

static bool all_f32(const ck_tensor *const *t, int n, bool allow_null)
{
    for (int i = 0; i < n; i++)
        if (t[i] ? t[i]->dtype != CK_F32 : !allow_null)
            return false;
    return true;
}

static void run_concat(const cpu_ctx *c, concat_job *j)
{
    const int64_t total = j->N * j->out_block;
    if (total > 0)
        cpk_parallel(c->pool, (total + CONCAT_CHUNK - 1) / CONCAT_CHUNK, concat_task, j);
}

static ck_status concat_forward(const cpu_ctx *c, const ck_op_params *op,
                                const ck_fwd_args *args, ck_op_io *io, ck_error *err)
{
    concat_job j = {.n_in = io->n_in, .isa = c->isa};
    ck_error ignored = {{0}};
    if (io->n_in < 1 || io->n_in > CK_MAX_INPUTS || !all_f32(io->in, io->n_in, false) ||
        !io->out || io->out->dtype != CK_F32 ||
        ck_opc_concat_fwd(CPU_BE, op, io, &j.N, j.block, &j.out_block, &ignored) != CK_OK)
        return cpu_delegate_forward(c, op, args, io, err);
    for (int k = 0; k < io->n_in; k++)
        j.in[k] = io->in[k]->data;
    j.out = io->out->data;
    run_concat(c, &j);
    return CK_OK;
}

static ck_status concat_backward(const cpu_ctx *c, const ck_op_params *op,
                                 const ck_fwd_args *args, const ck_op_io *io, ck_op_grads *g,
                                 ck_error *err)
{
    concat_job j = {.n_in = io->n_in, .backward = true, .isa = c->isa};
    ck_error ignored = {{0}};
    if (io->n_in < 1 || io->n_in > CK_MAX_INPUTS || !g->dout || g->dout->dtype != CK_F32 ||
        !all_f32((const ck_tensor *const *)g->din, io->n_in, true) ||
        ck_opc_concat_bwd(CPU_BE, op, io, g, &j.N, j.block, &j.out_block, &ignored) != CK_OK)
        return cpu_delegate_backward(c, op, args, io, g, err);
    for (int k = 0; k < io->n_in; k++)
        j.din[k] = g->din[k] ? g->din[k]->data : NULL;
    j.dout = g->dout->data;
    run_concat(c, &j);
    return CK_OK;
}

ck_status cpu_shape_forward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                            ck_op_io *io, ck_error *err)
{
    if (op->kind == CK_OP_CONCAT)
        return concat_forward(c, op, args, io, err);
    return cpu_delegate_forward(c, op, args, io, err);
}

ck_status cpu_shape_backward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                             const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    if (op->kind == CK_OP_CONCAT)
        return concat_backward(c, op, args, io, g, err);
    return cpu_delegate_backward(c, op, args, io, g, err);
}
