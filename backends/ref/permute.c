/* permute / transpose: a strided copy (k18.h); backward is the inverse copy, added. */
#include "backends/ref/ref18.h"

/* x's flat index of y's flat index yi */
static int64_t src_index(int64_t yi, int ndim, const int64_t *xdim, const int *perm)
{
    int64_t xstride[8], s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        xstride[d] = s;
        s *= xdim[d];
    }
    int64_t xi = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        int64_t len = xdim[perm[d]];
        xi += (yi % len) * xstride[perm[d]];
        yi /= len;
    }
    return xi;
}

void k18_permute_fwd(double *y, const double *x, int ndim, const int64_t *xdim, const int *perm)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= xdim[d];
    for (int64_t i = 0; i < n; i++)
        y[i] = x[src_index(i, ndim, xdim, perm)];
}

void k18_permute_bwd(double *dx, const double *dy, int ndim, const int64_t *xdim,
                     const int *perm)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= xdim[d];
    for (int64_t i = 0; i < n; i++)
        dx[src_index(i, ndim, xdim, perm)] += dy[i];
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h): CK_OP_PERMUTE (permute, transpose) and CK_OP_RESHAPE

ck_status ref_permute_forward(const ck_op_params *op, const ck_fwd_args *args, ck_op_io *io,
                              ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    ref18_scope s;
    if (op->kind == CK_OP_RESHAPE) {
        CK_TRY(ck_opc18_reshape(REF_BE, x, io->out, err));
        ref18_begin(&s, "reshape", err);
        const double *xv = ref18_in(&s, x);
        double *y = ref18_out(&s, io->out);
        if (s.st == CK_OK)
            memcpy(y, xv, sizeof(double) * (size_t)ck_shape_numel(&x->shape));
        return ref18_end(&s, true);
    }
    CK_TRY(ck_opc18_permute(REF_BE, op, x, io->out, err));
    ref18_begin(&s, "permute", err);
    const double *xv = ref18_in(&s, x);
    double *y = ref18_out(&s, io->out);
    if (s.st == CK_OK)
        k18_permute_fwd(y, xv, x->shape.ndim, x->shape.dim, op->perm);
    return ref18_end(&s, true);
}

ck_status ref_permute_backward(const ck_op_params *op, const ck_fwd_args *args,
                               const ck_op_io *io, ck_op_grads *g, ck_error *err)
{
    (void)args;
    const ck_tensor *x = io->in[0];
    if (op->kind == CK_OP_RESHAPE)
        CK_TRY(ck_opc18_reshape(REF_BE, x, g->dout, err));
    else
        CK_TRY(ck_opc18_permute(REF_BE, op, x, g->dout, err));
    if (!g->din[0])
        return CK_OK;
    ref18_scope s;
    ref18_begin(&s, op->kind == CK_OP_RESHAPE ? "reshape backward" : "permute backward", err);
    const double *dy = ref18_in(&s, g->dout);
    double *dx = ref18_grad(&s, g->din[0]);
    if (s.st == CK_OK) {
        if (op->kind == CK_OP_RESHAPE) {
            const int64_t n = ck_shape_numel(&x->shape);
            for (int64_t i = 0; i < n; i++)
                dx[i] += dy[i];
        } else {
            k18_permute_bwd(dx, dy, x->shape.ndim, x->shape.dim, op->perm);
        }
    }
    return ref18_end(&s, true);
}
