/*
 * CPU linear layer (CK_OP_LINEAR): y = x W^T + b over the last dimension.
 *
 * x (..., in) is treated as M = numel / in rows. The kernels are written once as a macro
 * and instantiated for float and double; the weight gradient is reduced over the rows in
 * a double scratch buffer so fp32 runs lose little to the order of the sum.
 *
 * When every tensor of a call is fp32 (or every one fp64) the matching instantiation runs
 * on the tensors themselves. Otherwise (fp16/bf16 tensors, or dtypes mixed per tensor) each
 * tensor is widened to double once per call, the fp64 kernel runs, and each output element
 * is rounded once into its tensor's dtype; gradients are computed from zero in double and
 * then added to the existing values with one rounding (ref_elem.h, harness/precision.md).
 * So a low-dtype y is exactly the fp64 result on the same inputs, rounded once.
 */
#include "backends/ref/ref_ops.h"
#include "backends/ref/ref_elem.h"

#include <stdlib.h>
#include <string.h>

// ----------------------------------------------------------------------------
// kernels, one instantiation per element type

#define LINEAR_KERNELS(T, SFX)                                                                 \
    static void linear_forward_##SFX(T *out, const T *inp, const T *weight, const T *bias,     \
                                     int64_t M, int64_t in, int64_t units)                     \
    {                                                                                          \
        /* out (M, units), inp (M, in), weight (units, in), bias (units) or NULL */            \
        for (int64_t m = 0; m < M; m++) {                                                      \
            const T *x = inp + m * in;                                                         \
            T *y = out + m * units;                                                            \
            for (int64_t u = 0; u < units; u++) {                                              \
                const T *w = weight + u * in;                                                  \
                T acc = bias ? bias[u] : (T)0;                                                 \
                for (int64_t i = 0; i < in; i++)                                               \
                    acc += x[i] * w[i];                                                        \
                y[u] = acc;                                                                    \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    static void linear_backward_##SFX(T *dinp, T *dweight, T *dbias, double *dw_acc,           \
                                      const T *dout, const T *inp, const T *weight,            \
                                      int64_t M, int64_t in, int64_t units)                    \
    {                                                                                          \
        /* dinp (M, in), dweight (units, in), dbias (units), each NULL when not wanted;        \
         * dw_acc (units, in) zeroed double scratch when dweight is wanted */                  \
        for (int64_t m = 0; m < M; m++) {                                                      \
            const T *dy = dout + m * units;                                                    \
            const T *x = inp ? inp + m * in : NULL; /* NULL: dx only */                        \
            T *dx = dinp ? dinp + m * in : NULL;                                               \
            for (int64_t u = 0; u < units; u++) {                                              \
                T d = dy[u];                                                                   \
                if (dx) {                                                                      \
                    const T *w = weight + u * in;                                              \
                    for (int64_t i = 0; i < in; i++)                                           \
                        dx[i] += d * w[i];                                                     \
                }                                                                              \
                if (dw_acc) {                                                                  \
                    double *dw = dw_acc + u * in;                                              \
                    for (int64_t i = 0; i < in; i++)                                           \
                        dw[i] += (double)d * (double)x[i];                                     \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        if (dweight)                                                                           \
            for (int64_t j = 0; j < units * in; j++)                                           \
                dweight[j] += (T)dw_acc[j];                                                    \
        if (dbias)                                                                             \
            for (int64_t u = 0; u < units; u++) {                                              \
                double acc = 0.0;                                                              \
                for (int64_t m = 0; m < M; m++)                                                \
                    acc += (double)dout[m * units + u];                                        \
                dbias[u] += (T)acc;                                                            \
            }                                                                                  \
    }

LINEAR_KERNELS(float, f32)
LINEAR_KERNELS(double, f64)

#undef LINEAR_KERNELS

// ----------------------------------------------------------------------------
// entry points (ref_ops.h)

static ck_status linear_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                             ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    const ck_tensor *b = op->bias ? io->bias : NULL;
    const ck_tensor *all[] = {x, io->weight, b, io->out};
    ck_status st = ref_check_float_dtypes("linear", all, 4, err);
    if (st != CK_OK)
        return st;
    ck_linear_dims d;
    if ((st = ck_opc_linear_shapes(x, io->weight, b, io->out, &d, err)) != CK_OK)
        return st;
    switch (ref_common_dtype(all, 4)) {
    case CK_F32:
        linear_forward_f32(io->out->data, x->data, io->weight->data, b ? b->data : NULL, d.M,
                           d.in, d.units);
        return CK_OK;
    case CK_F64:
        linear_forward_f64(io->out->data, x->data, io->weight->data, b ? b->data : NULL, d.M,
                           d.in, d.units);
        return CK_OK;
    default:
        break;
    }
    /* low or mixed dtypes: the fp64 kernel on wide views, each output rounded once */
    ref_wide wx = {NULL, NULL}, ww = {NULL, NULL}, wb = {NULL, NULL}, wy = {NULL, NULL};
    if ((st = ref_wide_in("linear", x, &wx, err)) == CK_OK &&
        (st = ref_wide_in("linear", io->weight, &ww, err)) == CK_OK &&
        (st = ref_wide_in("linear", b, &wb, err)) == CK_OK &&
        (st = ref_wide_out("linear", io->out, false, &wy, err)) == CK_OK) {
        linear_forward_f64(wy.data, wx.data, ww.data, wb.data, d.M, d.in, d.units);
        ref_wide_store(io->out, &wy);
    }
    ref_wide_free(&wx);
    ref_wide_free(&ww);
    ref_wide_free(&wb);
    ref_wide_free(&wy);
    return st;
}

static ck_status linear_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    ck_tensor *db = op->bias ? g->dbias : NULL;
    const ck_tensor *all[] = {x, io->weight, g->dout, g->din[0], g->dweight, db};
    ck_status st = ref_check_float_dtypes("linear", all, 6, err);
    if (st != CK_OK)
        return st;
    ck_linear_dims d;
    if ((st = ck_opc_linear_shapes(x, io->weight, db, g->dout, &d, err)) != CK_OK)
        return st;
    if (g->din[0] && g->din0_fresh) /* its contents are undefined (backend.h) */
        memset(g->din[0]->data, 0, ck_tensor_bytes(g->din[0]));
    double *dw_acc = NULL;
    if (g->dweight) {
        dw_acc = calloc((size_t)(d.units * d.in), sizeof *dw_acc);
        if (!dw_acc)
            return ck_fail(err, CK_ERR_NOMEM, "linear: no memory for the weight gradient "
                           "scratch of '%s' (%lld x %lld doubles)", ref_tname(io->weight),
                           (long long)d.units, (long long)d.in);
    }
    const ck_dtype dt = ref_common_dtype(all, 6);
    if (dt == CK_F32 || dt == CK_F64) {
        void *dx = g->din[0] ? g->din[0]->data : NULL;
        void *dw = g->dweight ? g->dweight->data : NULL;
        void *dbias = db ? db->data : NULL;
        if (dt == CK_F32)
            linear_backward_f32(dx, dw, dbias, dw_acc, g->dout->data, x->data,
                                io->weight->data, d.M, d.in, d.units);
        else
            linear_backward_f64(dx, dw, dbias, dw_acc, g->dout->data, x->data,
                                io->weight->data, d.M, d.in, d.units);
        free(dw_acc);
        return CK_OK;
    }
    /* low or mixed dtypes: gradients computed from zero in double, then added with one
     * rounding each */
    ref_wide wx = {NULL, NULL}, ww = {NULL, NULL}, wdy = {NULL, NULL};
    ref_wide wdx = {NULL, NULL}, wdw = {NULL, NULL}, wdb = {NULL, NULL};
    if ((st = ref_wide_in("linear", x, &wx, err)) == CK_OK &&
        (st = ref_wide_in("linear", io->weight, &ww, err)) == CK_OK &&
        (st = ref_wide_in("linear", g->dout, &wdy, err)) == CK_OK &&
        (st = ref_wide_out("linear", g->din[0], true, &wdx, err)) == CK_OK &&
        (st = ref_wide_out("linear", g->dweight, true, &wdw, err)) == CK_OK &&
        (st = ref_wide_out("linear", db, true, &wdb, err)) == CK_OK) {
        linear_backward_f64(wdx.data, wdw.data, wdb.data, dw_acc, wdy.data, wx.data, ww.data,
                            d.M, d.in, d.units);
        ref_wide_accumulate(g->din[0], &wdx);
        ref_wide_accumulate(g->dweight, &wdw);
        ref_wide_accumulate(db, &wdb);
    }
    ref_wide *all_wide[] = {&wx, &ww, &wdy, &wdx, &wdw, &wdb};
    for (int i = 0; i < 6; i++)
        ref_wide_free(all_wide[i]);
    free(dw_acc);
    return st;
}

/*
 * matmul: batched Y = op(A) op(B) in double (wide_kernels.h). Every output element and every
 * gradient element is one sum formed in double in a fixed order (k ascending for Y, n
 * ascending for dA, batch then m ascending for dB), so the entry points round it once.
 */
#include "backends/ref/wide_scope.h"

static inline double a_at(const double *a, const ck_matmul_geom *g, int64_t bt, int64_t m,
                          int64_t k)
{
    return g->trans_a ? a[(bt * g->K + k) * g->M + m] : a[(bt * g->M + m) * g->K + k];
}

static inline int64_t b_index(const ck_matmul_geom *g, int64_t bt, int64_t k, int64_t n)
{
    int64_t bb = g->b_shared ? 0 : bt;
    return g->trans_b ? (bb * g->N + n) * g->K + k : (bb * g->K + k) * g->N + n;
}

static inline int64_t a_index(const ck_matmul_geom *g, int64_t bt, int64_t m, int64_t k)
{
    return g->trans_a ? (bt * g->K + k) * g->M + m : (bt * g->M + m) * g->K + k;
}

void f64_matmul_fwd(double *y, const double *a, const double *b, const ck_matmul_geom *g)
{
    for (int64_t bt = 0; bt < g->batch; bt++)
        for (int64_t m = 0; m < g->M; m++)
            for (int64_t n = 0; n < g->N; n++) {
                double acc = 0.0;
                for (int64_t k = 0; k < g->K; k++)
                    acc += a_at(a, g, bt, m, k) * b[b_index(g, bt, k, n)];
                y[(bt * g->M + m) * g->N + n] = acc;
            }
}

void f64_matmul_bwd(double *da, double *db, const double *dy, const double *a, const double *b,
                    const ck_matmul_geom *g)
{
    if (da)
        for (int64_t bt = 0; bt < g->batch; bt++)
            for (int64_t m = 0; m < g->M; m++)
                for (int64_t k = 0; k < g->K; k++) {
                    double acc = 0.0;
                    for (int64_t n = 0; n < g->N; n++)
                        acc += dy[(bt * g->M + m) * g->N + n] * b[b_index(g, bt, k, n)];
                    da[a_index(g, bt, m, k)] += acc;
                }
    if (db) {
        const int64_t nb = g->b_shared ? 1 : g->batch;
        for (int64_t bb = 0; bb < nb; bb++)
            for (int64_t k = 0; k < g->K; k++)
                for (int64_t n = 0; n < g->N; n++) {
                    double acc = 0.0;
                    for (int64_t bt = g->b_shared ? 0 : bb; bt < (g->b_shared ? g->batch : bb + 1);
                         bt++)
                        for (int64_t m = 0; m < g->M; m++)
                            acc += a_at(a, g, bt, m, k) * dy[(bt * g->M + m) * g->N + n];
                    db[b_index(g, bb, k, n)] += acc;
                }
    }
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h)

/* B: the second input, or the weight (K, units) when the op has one input */
static const ck_tensor *matmul_b(const ck_op_io *io)
{
    return io->n_in >= 2 ? io->in[1] : io->weight;
}

static ck_status matmul_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                             ck_error *err)
{
    (void)args;
    ck_matmul_geom g;
    CK_TRY(ck_opc_matmul(REF_BE, op, io->in[0], matmul_b(io), io->out, &g, err));
    ref_scope s;
    ref_scope_begin(&s, "matmul", err);
    const double *a = ref_scope_in(&s, io->in[0]), *b = ref_scope_in(&s, matmul_b(io));
    double *y = ref_scope_out(&s, io->out);
    if (s.st == CK_OK)
        f64_matmul_fwd(y, a, b, &g);
    return ref_scope_end(&s, true);
}

static ck_status matmul_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_matmul_geom geo;
    CK_TRY(ck_opc_matmul(REF_BE, op, io->in[0], matmul_b(io), g->dout, &geo, err));
    ck_tensor *db = io->n_in >= 2 ? g->din[1] : g->dweight;
    if (!g->din[0] && !db)
        return CK_OK;
    ref_scope s;
    ref_scope_begin(&s, "matmul backward", err);
    const double *a = ref_scope_in(&s, io->in[0]), *b = ref_scope_in(&s, matmul_b(io));
    const double *dy = ref_scope_in(&s, g->dout);
    double *da = ref_scope_grad(&s, g->din[0]), *dbw = ref_scope_grad(&s, db);
    if (s.st == CK_OK)
        f64_matmul_bwd(da, dbw, dy, a, b, &geo);
    return ref_scope_end(&s, true);
}

/* embedding: y[m] = W[ids[m]]; dW[ids[m]] += dy[m] in position order (wide_kernels.h). */
#include "backends/ref/wide_scope.h"

void f64_embedding_fwd(double *y, const int32_t *ids, const double *w, int64_t M, int64_t E)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t e = 0; e < E; e++)
            y[m * E + e] = w[(int64_t)ids[m] * E + e];
}

void f64_embedding_bwd(double *dw, const double *dy, const int32_t *ids, int64_t M, int64_t E)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t e = 0; e < E; e++)
            dw[(int64_t)ids[m] * E + e] += dy[m * E + e];
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h): ids are the i32 input, never differentiated

static ck_status embedding_op_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                ck_error *err)
{
    (void)op;
    (void)args;
    int64_t M, V, E;
    CK_TRY(ck_opc_embedding(REF_BE, io->in[0], io->weight, io->out, &M, &V, &E, err));
    CK_TRY(ck_opc_embedding_ids(io->in[0], io->in[0]->data, M, V, err));
    ref_scope s;
    ref_scope_begin(&s, "embedding", err);
    const double *w = ref_scope_in(&s, io->weight);
    double *y = ref_scope_out(&s, io->out);
    if (s.st == CK_OK)
        f64_embedding_fwd(y, io->in[0]->data, w, M, E);
    return ref_scope_end(&s, true);
}

static ck_status embedding_op_backward(const ck_op_params *op, const ck_fwd_args *args,
                                 const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t M, V, E;
    CK_TRY(ck_opc_embedding(REF_BE, io->in[0], io->weight, g->dout, &M, &V, &E, err));
    if (!g->dweight)
        return CK_OK;
    CK_TRY(ck_opc_embedding_ids(io->in[0], io->in[0]->data, M, V, err));
    ref_scope s;
    ref_scope_begin(&s, "embedding backward", err);
    const double *dy = ref_scope_in(&s, g->dout);
    double *dw = ref_scope_grad(&s, g->dweight);
    if (s.st == CK_OK)
        f64_embedding_bwd(dw, dy, io->in[0]->data, M, E);
    return ref_scope_end(&s, true);
}

/* ---- the family's entry points (ref_ops.h) ---- */

static ref_op_fns pick(const ck_op_params *op)
{
    switch (op->kind) {
    case CK_OP_LINEAR: return (ref_op_fns){linear_op_forward, linear_op_backward};
    case CK_OP_MATMUL: return (ref_op_fns){matmul_op_forward, matmul_op_backward};
    case CK_OP_EMBEDDING: return (ref_op_fns){embedding_op_forward, embedding_op_backward};
    default: return (ref_op_fns){NULL, NULL};
    }
}

REF_FAMILY_ENTRIES(linear, pick)
