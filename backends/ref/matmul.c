/*
 * matmul: batched Y = op(A) op(B) in double (k18.h). Every output element and every
 * gradient element is one sum formed in double in a fixed order (k ascending for Y, n
 * ascending for dA, batch then m ascending for dB), so the entry points round it once.
 */
#include "backends/ref/ref18.h"

static inline double a_at(const double *a, const k18_matmul_geom *g, int64_t bt, int64_t m,
                          int64_t k)
{
    return g->trans_a ? a[(bt * g->K + k) * g->M + m] : a[(bt * g->M + m) * g->K + k];
}

static inline int64_t b_index(const k18_matmul_geom *g, int64_t bt, int64_t k, int64_t n)
{
    int64_t bb = g->b_shared ? 0 : bt;
    return g->trans_b ? (bb * g->N + n) * g->K + k : (bb * g->K + k) * g->N + n;
}

static inline int64_t a_index(const k18_matmul_geom *g, int64_t bt, int64_t m, int64_t k)
{
    return g->trans_a ? (bt * g->K + k) * g->M + m : (bt * g->M + m) * g->K + k;
}

void k18_matmul_fwd(double *y, const double *a, const double *b, const k18_matmul_geom *g)
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

void k18_matmul_bwd(double *da, double *db, const double *dy, const double *a, const double *b,
                    const k18_matmul_geom *g)
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

ck_status ref_matmul_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                             ck_error *err)
{
    (void)args;
    k18_matmul_geom g;
    CK_TRY(ck_opc18_matmul(REF_BE, op, io->in[0], matmul_b(io), io->out, &g, err));
    ref18_scope s;
    ref18_begin(&s, "matmul", err);
    const double *a = ref18_in(&s, io->in[0]), *b = ref18_in(&s, matmul_b(io));
    double *y = ref18_out(&s, io->out);
    if (s.st == CK_OK)
        k18_matmul_fwd(y, a, b, &g);
    return ref18_end(&s, true);
}

ck_status ref_matmul_backward(const ck_op_params *op, const ck_fwd_args *args,
                              const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    k18_matmul_geom geo;
    CK_TRY(ck_opc18_matmul(REF_BE, op, io->in[0], matmul_b(io), g->dout, &geo, err));
    ck_tensor *db = io->n_in >= 2 ? g->din[1] : g->dweight;
    if (!g->din[0] && !db)
        return CK_OK;
    ref18_scope s;
    ref18_begin(&s, "matmul backward", err);
    const double *a = ref18_in(&s, io->in[0]), *b = ref18_in(&s, matmul_b(io));
    const double *dy = ref18_in(&s, g->dout);
    double *da = ref18_grad(&s, g->din[0]), *dbw = ref18_grad(&s, db);
    if (s.st == CK_OK)
        k18_matmul_bwd(da, dbw, dy, a, b, &geo);
    return ref18_end(&s, true);
}
