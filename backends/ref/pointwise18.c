/* mul, silu, gelu (tanh approximation) in double (k18.h). */
#include "backends/ref/ref18.h"

#include <math.h>

void k18_mul_fwd(double *y, const double *a, const double *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] * b[i];
}

void k18_mul_bwd(double *da, double *db, const double *dy, const double *a, const double *b,
                 int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (da)
            da[i] += dy[i] * b[i];
        if (db)
            db[i] += dy[i] * a[i];
    }
}

static double sigmoid(double x)
{
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

double k18_silu(double x) { return x * sigmoid(x); }

double k18_dsilu(double x)
{
    double s = sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}

/* PyTorch's gelu(approximate='tanh'): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
#define GELU_C 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_K 0.044715

double k18_gelu_tanh(double x)
{
    return 0.5 * x * (1.0 + tanh(GELU_C * (x + GELU_K * x * x * x)));
}

double k18_dgelu_tanh(double x)
{
    double t = tanh(GELU_C * (x + GELU_K * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_K * x * x);
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h): CK_OP_MUL, CK_OP_SILU, CK_OP_GELU with approximate "tanh"

static const char *pw_name(const ck_op_params *op)
{
    return op->kind == CK_OP_MUL ? "mul" : op->kind == CK_OP_SILU ? "silu" : "gelu";
}

static ck_status pw_check(const ck_op_params *op, const ck_op_io *io, const ck_tensor *y,
                          const ck_tensor *dx1, const ck_tensor *dx2, ck_error *err)
{
    const int want = op->kind == CK_OP_MUL ? 2 : 1;
    if (io->n_in != want || !io->in[0] || (want == 2 && !io->in[1]) || !y)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs %d input(s) and an output", pw_name(op),
                       want);
    const ck_tensor *ts[] = {y, want == 2 ? io->in[1] : NULL, dx1, dx2};
    return ck_opc_pointwise(REF_BE, pw_name(op), io->in[0], ts, 4, err);
}

ck_status ref_pointwise18_forward(const ck_op_params *op, const ck_fwd_args *args,
                                  ck_op_io *io, ck_error *err)
{
    (void)args;
    CK_TRY(pw_check(op, io, io->out, NULL, NULL, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    ref18_scope s;
    ref18_begin(&s, pw_name(op), err);
    const double *a = ref18_in(&s, io->in[0]);
    const double *b = op->kind == CK_OP_MUL ? ref18_in(&s, io->in[1]) : NULL;
    double *y = ref18_out(&s, io->out);
    if (s.st == CK_OK) {
        if (op->kind == CK_OP_MUL)
            k18_mul_fwd(y, a, b, n);
        else
            for (int64_t i = 0; i < n; i++)
                y[i] = op->kind == CK_OP_SILU ? k18_silu(a[i]) : k18_gelu_tanh(a[i]);
    }
    return ref18_end(&s, true);
}

ck_status ref_pointwise18_backward(const ck_op_params *op, const ck_fwd_args *args,
                                   const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    const bool two = op->kind == CK_OP_MUL;
    CK_TRY(pw_check(op, io, g->dout, g->din[0], two ? g->din[1] : NULL, err));
    const int64_t n = ck_shape_numel(&io->in[0]->shape);
    ref18_scope s;
    ref18_begin(&s, pw_name(op), err);
    const double *a = ref18_in(&s, io->in[0]);
    const double *b = two ? ref18_in(&s, io->in[1]) : NULL;
    const double *dy = ref18_in(&s, g->dout);
    double *da = ref18_grad(&s, g->din[0]), *db = two ? ref18_grad(&s, g->din[1]) : NULL;
    if (s.st == CK_OK) {
        if (two)
            k18_mul_bwd(da, db, dy, a, b, n);
        else if (da)
            for (int64_t i = 0; i < n; i++)
                da[i] += dy[i] * (op->kind == CK_OP_SILU ? k18_dsilu(a[i]) : k18_dgelu_tanh(a[i]));
    }
    return ref18_end(&s, true);
}

// ----------------------------------------------------------------------------
// CK_OP_POSITIONAL: y = x + W, W (L, ...) repeated over the batch; dW sums the batch

ck_status ref_positional_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                                 ck_error *err)
{
    (void)op;
    (void)args;
    int64_t N, M;
    CK_TRY(ck_opc18_positional(REF_BE, io->in[0], io->weight, io->out, &N, &M, err));
    ref18_scope s;
    ref18_begin(&s, "positional", err);
    const double *x = ref18_in(&s, io->in[0]), *w = ref18_in(&s, io->weight);
    double *y = ref18_out(&s, io->out);
    if (s.st == CK_OK)
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < M; j++)
                y[n * M + j] = x[n * M + j] + w[j];
    return ref18_end(&s, true);
}

ck_status ref_positional_backward(const ck_op_params *op, const ck_fwd_args *args,
                                  const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)op;
    (void)args;
    int64_t N, M;
    CK_TRY(ck_opc18_positional(REF_BE, io->in[0], io->weight, g->dout, &N, &M, err));
    ref18_scope s;
    ref18_begin(&s, "positional backward", err);
    const double *dy = ref18_in(&s, g->dout);
    double *dx = ref18_grad(&s, g->din[0]), *dw = ref18_grad(&s, g->dweight);
    if (s.st == CK_OK) {
        if (dx)
            for (int64_t i = 0; i < N * M; i++)
                dx[i] += dy[i];
        if (dw)
            for (int64_t j = 0; j < M; j++) {
                double acc = 0.0;
                for (int64_t n = 0; n < N; n++)
                    acc += dy[n * M + j];
                dw[j] += acc;
            }
    }
    return ref18_end(&s, true);
}
