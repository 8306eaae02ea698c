/*
 * Fast CPU layernorm (CK_OP_LAYERNORM) for fp32 tensors (saved statistics fp32 or fp64):
 * the reference's double arithmetic (backends/ref/norm.c) operation for operation, split
 * across threads where no value's order changes:
 *  - forward: by rows (a row's mean, variance, saved statistics and outputs are its own);
 *  - backward: dweight and dbias by columns (each column's two sums over the rows in row
 *    order, as the reference's), then dx by rows (a row's two sums over its columns).
 * The saved statistics are read back rounded to their dtype, as the reference reads them.
 * Other dtypes and refused arguments go to the reference (delegate.c).
 */
#include "backends/cpu/cpu_common.h"

#include <math.h>

#define LN_ROWS_PER_TASK 16
#define LN_COLS_PER_TASK 64

typedef struct {
    int64_t N, D;
    double eps;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db;
    void *saved;
    bool saved_f64;
} ln_job;

static inline double saved_ld(const ln_job *j, int64_t i)
{
    return j->saved_f64 ? ((const double *)j->saved)[i] : (double)((const float *)j->saved)[i];
}

static inline void saved_st(const ln_job *j, int64_t i, double v)
{
    if (j->saved_f64)
        ((double *)j->saved)[i] = v;
    else
        ((float *)j->saved)[i] = (float)v;
}

static inline double w_or_1(const ln_job *j, int64_t c)
{
    return j->w ? (double)j->w[c] : 1.0;
}

static void ln_fwd_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const ln_job *j = vctx;
    const int64_t n1 = (task + 1) * LN_ROWS_PER_TASK < j->N ? (task + 1) * LN_ROWS_PER_TASK : j->N;
    for (int64_t n = task * LN_ROWS_PER_TASK; n < n1; n++) {
        const float *x = j->x + n * j->D;
        float *y = j->y + n * j->D;
        double sum = 0.0;
        for (int64_t c = 0; c < j->D; c++)
            sum += (double)x[c];
        double mean = sum / (double)j->D;
        double sq = 0.0;
        for (int64_t c = 0; c < j->D; c++) {
            double d = (double)x[c] - mean;
            sq += d * d;
        }
        double invstd = 1.0 / sqrt(sq / (double)j->D + j->eps);
        if (j->saved) {
            saved_st(j, n, mean);
            saved_st(j, j->N + n, invstd);
        }
        for (int64_t c = 0; c < j->D; c++) {
            double xhat = ((double)x[c] - mean) * invstd;
            y[c] = (float)(xhat * w_or_1(j, c) + (j->b ? (double)j->b[c] : 0.0));
        }
    }
}

/* dweight, dbias over the columns [c0, c1): the sums over rows n in increasing order */
static void ln_params_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const ln_job *j = vctx;
    const int64_t c0 = task * LN_COLS_PER_TASK;
    const int64_t c1 = c0 + LN_COLS_PER_TASK < j->D ? c0 + LN_COLS_PER_TASK : j->D;
    double sum_dy[LN_COLS_PER_TASK] = {0}, sum_dy_xhat[LN_COLS_PER_TASK] = {0};
    for (int64_t n = 0; n < j->N; n++) {
        const double mean = saved_ld(j, n), invstd = saved_ld(j, j->N + n);
        const float *x = j->x + n * j->D, *dy = j->dy + n * j->D;
        for (int64_t c = c0; c < c1; c++) {
            double d = (double)dy[c];
            sum_dy[c - c0] += d;
            sum_dy_xhat[c - c0] += d * ((double)x[c] - mean) * invstd;
        }
    }
    for (int64_t c = c0; c < c1; c++) {
        if (j->dw)
            j->dw[c] = (float)((double)j->dw[c] + sum_dy_xhat[c - c0]);
        if (j->db)
            j->db[c] = (float)((double)j->db[c] + sum_dy[c - c0]);
    }
}

static void ln_dx_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const ln_job *j = vctx;
    const int64_t n1 = (task + 1) * LN_ROWS_PER_TASK < j->N ? (task + 1) * LN_ROWS_PER_TASK : j->N;
    const double D = (double)j->D;
    for (int64_t n = task * LN_ROWS_PER_TASK; n < n1; n++) {
        const float *x = j->x + n * j->D, *dy = j->dy + n * j->D;
        float *dx = j->dx + n * j->D;
        const double mean = saved_ld(j, n), invstd = saved_ld(j, j->N + n);
        double sum_g = 0.0, sum_g_xhat = 0.0;
        for (int64_t c = 0; c < j->D; c++) {
            double g = (double)dy[c] * w_or_1(j, c);
            sum_g += g;
            sum_g_xhat += g * ((double)x[c] - mean) * invstd;
        }
        for (int64_t c = 0; c < j->D; c++) {
            double xhat = ((double)x[c] - mean) * invstd;
            double g = (double)dy[c] * w_or_1(j, c);
            dx[c] = (float)((double)dx[c] + invstd / D * (D * g - sum_g - xhat * sum_g_xhat));
        }
    }
}

static bool f32_or_null(const ck_tensor *t)
{
    return !t || t->dtype == CK_F32;
}

/* the fast path's job (false: the call goes to the reference) */
static bool ln_fast(const ck_op_params *op, const ck_op_io *io, const ck_op_grads *g,
                    ln_job *j)
{
    if (op->kind != CK_OP_LAYERNORM || io->n_in != 1 || !io->in[0] ||
        io->in[0]->dtype != CK_F32 || !f32_or_null(io->weight) || !f32_or_null(io->bias) ||
        (io->saved && io->saved->dtype != CK_F32 && io->saved->dtype != CK_F64))
        return false;
    ck_error ignored = {{0}};
    if (!g) {
        if (!io->out || io->out->dtype != CK_F32 ||
            ck_opc_layernorm_fwd(CPU_BE, op, io, &j->N, &j->D, &ignored) != CK_OK)
            return false;
    } else if (!f32_or_null(g->dout) || !f32_or_null(g->din[0]) || !f32_or_null(g->dweight) ||
               !f32_or_null(g->dbias) ||
               ck_opc_layernorm_bwd(CPU_BE, op, io, g, &j->N, &j->D, &ignored) != CK_OK) {
        return false;
    }
    j->eps = op->eps;
    j->x = io->in[0]->data;
    j->w = io->weight ? io->weight->data : NULL;
    j->b = io->bias ? io->bias->data : NULL;
    j->saved = io->saved ? io->saved->data : NULL;
    j->saved_f64 = io->saved && io->saved->dtype == CK_F64;
    return j->N > 0 && j->D > 0;
}

ck_status cpu_norm_forward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                           ck_op_io *io, ck_error *err)
{
    ln_job j = {.N = 0};
    if (!ln_fast(op, io, NULL, &j))
        return cpu_delegate_forward(c, op, args, io, err);
    j.y = io->out->data;
    cpk_parallel(c->pool, (j.N + LN_ROWS_PER_TASK - 1) / LN_ROWS_PER_TASK, ln_fwd_task, &j);
    return CK_OK;
}

ck_status cpu_norm_backward(const cpu_ctx *c, const ck_op_params *op, const ck_fwd_args *args,
                            const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    ln_job j = {.N = 0};
    if (!ln_fast(op, io, g, &j))
        return cpu_delegate_backward(c, op, args, io, g, err);
    j.dy = g->dout->data;
    j.dx = g->din[0] ? g->din[0]->data : NULL;
    j.dw = g->dweight ? g->dweight->data : NULL;
    j.db = g->dbias ? g->dbias->data : NULL;
    if (j.dw || j.db)
        cpk_parallel(c->pool, (j.D + LN_COLS_PER_TASK - 1) / LN_COLS_PER_TASK, ln_params_task,
                     &j);
    if (j.dx)
        cpk_parallel(c->pool, (j.N + LN_ROWS_PER_TASK - 1) / LN_ROWS_PER_TASK, ln_dx_task, &j);
    return CK_OK;
}
