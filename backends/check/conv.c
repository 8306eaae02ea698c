/*
 * Host-side checks and geometry of the conv family (check.h): conv, conv_transpose.
 */
#include "backends/check/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(t, buf) ck_shape_str(&(t)->shape, buf, sizeof buf)

ck_status ck_opc_conv_fit(const ck_op_params *op, const ck_tensor *x, const ck_tensor *w,
                          const ck_tensor *b, const ck_tensor *y, ck_error *err)
{
    char sx[96], sw[96], sy[96];
    const int nsp = op->nsp;
    if (nsp < 1 || nsp > CK_MAX_SPATIAL)
        return ck_fail(err, CK_ERR_INTERNAL, "conv: %d spatial dims (1 to 3 supported)", nsp);
    if (!w)
        return ck_fail(err, CK_ERR_INTERNAL, "conv%dd on '%s': no weight tensor", nsp,
                       ck_opc_tname(x));
    ck_shape_str(&x->shape, sx, sizeof sx);
    ck_shape_str(&w->shape, sw, sizeof sw);
    ck_shape_str(&y->shape, sy, sizeof sy);
    bool ok = x->shape.ndim == nsp + 2 && w->shape.ndim == nsp + 2 &&
              y->shape.ndim == nsp + 2 && w->shape.dim[1] == x->shape.dim[1] &&
              y->shape.dim[0] == x->shape.dim[0] && y->shape.dim[1] == w->shape.dim[0];
    for (int a = 0; ok && a < nsp; a++)
        ok = w->shape.dim[2 + a] == op->kernel[a];
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "conv%dd: input '%s' %s, weight '%s' %s and output '%s' %s do not fit",
                       nsp, ck_opc_tname(x), sx, ck_opc_tname(w), sw, ck_opc_tname(y), sy);
    if (b && ck_shape_numel(&b->shape) != w->shape.dim[0])
        return ck_fail(err, CK_ERR_INTERNAL, "conv%dd: bias '%s' does not have %lld entries",
                       nsp, ck_opc_tname(b), (long long)w->shape.dim[0]);
    return CK_OK;
}

// ----------------------------------------------------------------------------
// pool, upsample

/* --------------------------------------------------------------------- conv_transpose */

ck_status ck_opc_conv_transpose(const char *be, const ck_op_params *op, const ck_tensor *x,
                         const ck_tensor *w, const ck_tensor *b, const ck_tensor *y,
                         ck_convt_geom *g, ck_error *err)
{
    CK_TRY(ck_opc_need("conv_transpose", x, "input", err));
    CK_TRY(ck_opc_need("conv_transpose", w, "weight", err));
    CK_TRY(ck_opc_need("conv_transpose", y, "output (or its gradient)", err));
    const ck_tensor *all[] = {x, w, b, y};
    CK_TRY(ck_opc_float_dtypes(be, "conv_transpose", all, 4, err));
    const int nsp = op->nsp;
    char s1[96], s2[96], s3[96];
    bool ok = nsp >= 1 && nsp <= 3 && x->shape.ndim == 2 + nsp && y->shape.ndim == 2 + nsp &&
              w->shape.ndim == 2 + nsp;
    if (ok) {
        g->N = x->shape.dim[0];
        g->Ci = x->shape.dim[1];
        g->Co = w->shape.dim[1];
        ok = w->shape.dim[0] == g->Ci && y->shape.dim[0] == g->N && y->shape.dim[1] == g->Co &&
             (!b || ck_shape_numel(&b->shape) == g->Co);
        for (int a = 0; ok && a < 3; a++) {
            int s = a - (3 - nsp);
            g->in[a] = s < 0 ? 1 : x->shape.dim[2 + s];
            g->out[a] = s < 0 ? 1 : y->shape.dim[2 + s];
            g->k[a] = s < 0 ? 1 : w->shape.dim[2 + s];
            g->stride[a] = s < 0 ? 1 : op->stride[s];
            g->dil[a] = s < 0 ? 1 : op->dilation[s];
            g->pad[a] = s < 0 ? 0 : op->pad_lo[s];
            int64_t want = (g->in[a] - 1) * g->stride[a] - (s < 0 ? 0 : op->pad_lo[s] + op->pad_hi[s]) +
                           g->dil[a] * (g->k[a] - 1) + (s < 0 ? 0 : op->out_pad[s]) + 1;
            ok = g->out[a] == want && (s < 0 || g->k[a] == op->kernel[s]);
        }
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "conv_transpose%dd: shapes do not fit the op's geometry: x '%s' %s, weight "
                       "'%s' %s, y '%s' %s",
                       nsp, ck_opc_tname(x), SH(x, s1), ck_opc_tname(w), SH(w, s2),
                       ck_opc_tname(y), SH(y, s3));
    return CK_OK;
}

/* ---------------------------------------------------------- geometry in three dims */

ck_status ck_opc_conv_geom3(const ck_op_params *op, const ck_tensor *x, const ck_tensor *w,
                            const ck_tensor *b, const ck_tensor *y, ck_conv_geom3 *g,
                            ck_error *err)
{
    CK_TRY(ck_opc_conv_fit(op, x, w, b, y, err));
    const int nsp = op->nsp;
    memset(g, 0, sizeof *g);
    g->N = x->shape.dim[0];
    g->C = x->shape.dim[1];
    g->F = w->shape.dim[0];
    for (int a = 0; a < 3; a++) {
        const int s = a - (3 - nsp); /* the op's axis, < 0 for an added leading axis */
        g->in[a] = s < 0 ? 1 : x->shape.dim[2 + s];
        g->out[a] = s < 0 ? 1 : y->shape.dim[2 + s];
        g->k[a] = s < 0 ? 1 : op->kernel[s];
        g->stride[a] = s < 0 ? 1 : op->stride[s];
        g->dil[a] = s < 0 ? 1 : op->dilation[s];
        g->pad_lo[a] = s < 0 ? 0 : op->pad_lo[s];
        if (g->stride[a] < 1 || g->dil[a] < 1 || g->pad_lo[a] < 0 || g->k[a] < 1)
            return ck_fail(err, CK_ERR_INTERNAL,
                           "conv%dd: kernel %lld, stride %lld, dilation %lld, pad_lo %lld on "
                           "axis %d", nsp, (long long)g->k[a], (long long)g->stride[a],
                           (long long)g->dil[a], (long long)g->pad_lo[a], s);
    }
    return CK_OK;
}
