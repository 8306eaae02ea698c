/*
 * Transposed convolution (PyTorch ConvTranspose{1,2,3}d, groups 1), in double (k18.h).
 * Input position i and tap t feed output o = i stride - pad + t dil. Forward gathers:
 * each output element is one sum (bias first, then ci, then taps in row-major order);
 * dx gathers over (co, taps); dW over (n, input positions); db over (n, outputs).
 */
#include "backends/ref/ref18.h"

/* input index along one dim feeding output o through tap t, or -1 */
static inline int64_t src_pos(const k18_convt_geom *g, int a, int64_t o, int64_t t)
{
    int64_t num = o + g->pad[a] - t * g->dil[a];
    if (num < 0 || num % g->stride[a] != 0)
        return -1;
    int64_t i = num / g->stride[a];
    return i < g->in[a] ? i : -1;
}

/* output index along one dim that input i reaches through tap t, or -1 */
static inline int64_t dst_pos(const k18_convt_geom *g, int a, int64_t i, int64_t t)
{
    int64_t o = i * g->stride[a] - g->pad[a] + t * g->dil[a];
    return o >= 0 && o < g->out[a] ? o : -1;
}

#define VOL(v) ((v)[0] * (v)[1] * (v)[2])

void k18_convt_fwd(double *y, const double *x, const double *w, const double *b,
                   const k18_convt_geom *g)
{
    const int64_t ivol = VOL(g->in), ovol = VOL(g->out), kvol = VOL(g->k);
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t co = 0; co < g->Co; co++)
            for (int64_t o0 = 0; o0 < g->out[0]; o0++)
                for (int64_t o1 = 0; o1 < g->out[1]; o1++)
                    for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
                        double acc = b ? b[co] : 0.0;
                        for (int64_t ci = 0; ci < g->Ci; ci++) {
                            const double *xp = x + (n * g->Ci + ci) * ivol;
                            const double *wp = w + (ci * g->Co + co) * kvol;
                            for (int64_t t0 = 0; t0 < g->k[0]; t0++) {
                                int64_t i0 = src_pos(g, 0, o0, t0);
                                if (i0 < 0)
                                    continue;
                                for (int64_t t1 = 0; t1 < g->k[1]; t1++) {
                                    int64_t i1 = src_pos(g, 1, o1, t1);
                                    if (i1 < 0)
                                        continue;
                                    for (int64_t t2 = 0; t2 < g->k[2]; t2++) {
                                        int64_t i2 = src_pos(g, 2, o2, t2);
                                        if (i2 < 0)
                                            continue;
                                        acc += xp[(i0 * g->in[1] + i1) * g->in[2] + i2] *
                                               wp[(t0 * g->k[1] + t1) * g->k[2] + t2];
                                    }
                                }
                            }
                        }
                        y[(n * g->Co + co) * ovol + (o0 * g->out[1] + o1) * g->out[2] + o2] = acc;
                    }
}

void k18_convt_bwd(double *dx, double *dw, double *db, const double *dy, const double *x,
                   const double *w, const k18_convt_geom *g)
{
    const int64_t ivol = VOL(g->in), ovol = VOL(g->out), kvol = VOL(g->k);
    if (db)
        for (int64_t co = 0; co < g->Co; co++) {
            double acc = 0.0;
            for (int64_t n = 0; n < g->N; n++)
                for (int64_t o = 0; o < ovol; o++)
                    acc += dy[(n * g->Co + co) * ovol + o];
            db[co] += acc;
        }
    if (dx)
        for (int64_t n = 0; n < g->N; n++)
            for (int64_t ci = 0; ci < g->Ci; ci++)
                for (int64_t i0 = 0; i0 < g->in[0]; i0++)
                    for (int64_t i1 = 0; i1 < g->in[1]; i1++)
                        for (int64_t i2 = 0; i2 < g->in[2]; i2++) {
                            double acc = 0.0;
                            for (int64_t co = 0; co < g->Co; co++) {
                                const double *gp = dy + (n * g->Co + co) * ovol;
                                const double *wp = w + (ci * g->Co + co) * kvol;
                                for (int64_t t0 = 0; t0 < g->k[0]; t0++) {
                                    int64_t o0 = dst_pos(g, 0, i0, t0);
                                    if (o0 < 0)
                                        continue;
                                    for (int64_t t1 = 0; t1 < g->k[1]; t1++) {
                                        int64_t o1 = dst_pos(g, 1, i1, t1);
                                        if (o1 < 0)
                                            continue;
                                        for (int64_t t2 = 0; t2 < g->k[2]; t2++) {
                                            int64_t o2 = dst_pos(g, 2, i2, t2);
                                            if (o2 < 0)
                                                continue;
                                            acc += gp[(o0 * g->out[1] + o1) * g->out[2] + o2] *
                                                   wp[(t0 * g->k[1] + t1) * g->k[2] + t2];
                                        }
                                    }
                                }
                            }
                            dx[(n * g->Ci + ci) * ivol + (i0 * g->in[1] + i1) * g->in[2] + i2] +=
                                acc;
                        }
    if (dw)
        for (int64_t ci = 0; ci < g->Ci; ci++)
            for (int64_t co = 0; co < g->Co; co++)
                for (int64_t t0 = 0; t0 < g->k[0]; t0++)
                    for (int64_t t1 = 0; t1 < g->k[1]; t1++)
                        for (int64_t t2 = 0; t2 < g->k[2]; t2++) {
                            double acc = 0.0;
                            for (int64_t n = 0; n < g->N; n++) {
                                const double *xp = x + (n * g->Ci + ci) * ivol;
                                const double *gp = dy + (n * g->Co + co) * ovol;
                                for (int64_t i0 = 0; i0 < g->in[0]; i0++) {
                                    int64_t o0 = dst_pos(g, 0, i0, t0);
                                    if (o0 < 0)
                                        continue;
                                    for (int64_t i1 = 0; i1 < g->in[1]; i1++) {
                                        int64_t o1 = dst_pos(g, 1, i1, t1);
                                        if (o1 < 0)
                                            continue;
                                        for (int64_t i2 = 0; i2 < g->in[2]; i2++) {
                                            int64_t o2 = dst_pos(g, 2, i2, t2);
                                            if (o2 < 0)
                                                continue;
                                            acc += xp[(i0 * g->in[1] + i1) * g->in[2] + i2] *
                                                   gp[(o0 * g->out[1] + o1) * g->out[2] + o2];
                                        }
                                    }
                                }
                            }
                            dw[(ci * g->Co + co) * kvol + (t0 * g->k[1] + t1) * g->k[2] + t2] +=
                                acc;
                        }
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h)

ck_status ref_conv_transpose_forward(const ck_op_params *op, const ck_fwd_args *args,
                                     ck_op_io *io, ck_error *err)
{
    (void)args;
    const ck_tensor *b = op->bias ? io->bias : NULL;
    k18_convt_geom g;
    CK_TRY(ck_opc18_convt(REF_BE, op, io->in[0], io->weight, b, io->out, &g, err));
    ref18_scope s;
    ref18_begin(&s, "conv_transpose", err);
    const double *x = ref18_in(&s, io->in[0]), *w = ref18_in(&s, io->weight),
                 *bv = ref18_in(&s, b);
    double *y = ref18_out(&s, io->out);
    if (s.st == CK_OK)
        k18_convt_fwd(y, x, w, bv, &g);
    return ref18_end(&s, true);
}

ck_status ref_conv_transpose_backward(const ck_op_params *op, const ck_fwd_args *args,
                                      const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    ck_tensor *db = op->bias ? g->dbias : NULL;
    k18_convt_geom geo;
    CK_TRY(ck_opc18_convt(REF_BE, op, io->in[0], io->weight, db, g->dout, &geo, err));
    ref18_scope s;
    ref18_begin(&s, "conv_transpose backward", err);
    const double *x = ref18_in(&s, io->in[0]), *w = ref18_in(&s, io->weight),
                 *dy = ref18_in(&s, g->dout);
    double *dx = ref18_grad(&s, g->din[0]), *dw = ref18_grad(&s, g->dweight),
           *dbv = ref18_grad(&s, db);
    if (s.st == CK_OK)
        k18_convt_bwd(dx, dw, dbv, dy, x, w, &geo);
    return ref18_end(&s, true);
}
