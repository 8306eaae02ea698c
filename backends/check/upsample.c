/*
 * Host-side checks and geometry of the upsample family (check.h): nearest and linear
 * modes.
 */
#include "backends/check/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(t, buf) ck_shape_str(&(t)->shape, buf, sizeof buf)

ck_status ck_opc_upsample_setup(const ck_op_params *op, const ck_tensor *x, const ck_tensor *y,
                                ck_upsample_geom *g, ck_error *err)
{
    const int nsp = op->nsp;
    if (nsp < 1 || nsp > CK_MAX_SPATIAL)
        return ck_fail(err, CK_ERR_INTERNAL, "upsample: %d spatial dims (1 to 3 supported)",
                       nsp);
    char sx[96], sy[96];
    bool ok = ck_opc_same_nc(nsp, x, y);
    g->planes = x->shape.dim[0] * x->shape.dim[1];
    for (int a = 0; ok && a < 3; a++) {
        int s = a - (3 - nsp); /* the op's axis, < 0 for an added leading axis */
        g->in[a] = s < 0 ? 1 : x->shape.dim[2 + s];
        g->out[a] = s < 0 ? 1 : y->shape.dim[2 + s];
        g->scale[a] = s < 0 ? 1 : op->scale[s];
        ok = g->scale[a] >= 1 && g->out[a] == g->in[a] * g->scale[a];
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "upsample%dd: output '%s' %s is not input '%s' %s times scale", nsp,
                       ck_opc_tname(y), ck_shape_str(&y->shape, sy, sizeof sy),
                       ck_opc_tname(x), ck_shape_str(&x->shape, sx, sizeof sx));
    return CK_OK;
}

// ----------------------------------------------------------------------------
// batchnorm, layernorm

/* t is NULL, or has a float dtype and `numel` elements (numel < 0: any count). */
/* ------------------------------------------------------------------ linear upsampling */

ck_status ck_opc_upsample_linear(const char *be, const ck_op_params *op, const ck_tensor *x,
                        const ck_tensor *y, ck_lerp_geom *g, ck_error *err)
{
    CK_TRY(ck_opc_need("upsample", x, "input", err));
    CK_TRY(ck_opc_need("upsample", y, "output (or its gradient)", err));
    const ck_tensor *all[] = {x, y};
    CK_TRY(ck_opc_float_dtypes(be, "upsample", all, 2, err));
    const int nsp = op->nsp;
    char s1[96], s2[96];
    bool ok = nsp >= 1 && nsp <= 3 && x->shape.ndim == 2 + nsp && y->shape.ndim == 2 + nsp &&
              x->shape.dim[0] == y->shape.dim[0] && x->shape.dim[1] == y->shape.dim[1];
    g->planes = x->shape.dim[0] * x->shape.dim[1];
    g->align_corners = op->align_corners;
    for (int a = 0; ok && a < 3; a++) {
        int s = a - (3 - nsp);
        g->in[a] = s < 0 ? 1 : x->shape.dim[2 + s];
        g->out[a] = s < 0 ? 1 : y->shape.dim[2 + s];
        ok = g->out[a] == g->in[a] * (s < 0 ? 1 : op->scale[s]);
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL,
                       "upsample%dd: output '%s' %s is not input '%s' %s times scale", nsp,
                       ck_opc_tname(y), SH(y, s2), ck_opc_tname(x), SH(x, s1));
    return CK_OK;
}

