/*
 * Host-side checks of the random family (check.h): dropout and gaussian_noise.
 */
#include "backends/check/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(t, buf) ck_shape_str(&(t)->shape, buf, sizeof buf)

static ck_status dropout_check_rate(const char *fn, double rate, ck_error *err)
{
    if (!(rate >= 0.0 && rate < 1.0))
        return ck_fail(err, CK_ERR_INPUT, "%s: rate %g is outside [0, 1)", fn, rate);
    return CK_OK;
}

ck_status ck_opc_dropout_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                             ck_error *err)
{
    const char *fn = "dropout";
    CK_TRY(ck_opc_unary_io(fn, io, NULL, err));
    CK_TRY(dropout_check_rate(fn, op->rate, err));
    return ck_opc_unary_pointwise(be, fn, io, NULL, err);
}

ck_status ck_opc_dropout_bwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                             const ck_op_grads *g, ck_error *err)
{
    const char *fn = "dropout backward";
    CK_TRY(ck_opc_unary_io(fn, io, g, err));
    if (!g->din[0])
        return CK_OK;
    CK_TRY(dropout_check_rate(fn, op->rate, err));
    return ck_opc_unary_pointwise(be, fn, io, g, err);
}

ck_status ck_opc_noise_fwd(const char *be, const ck_op_params *op, const ck_op_io *io,
                           ck_error *err)
{
    const char *fn = "gaussian_noise";
    CK_TRY(ck_opc_unary_io(fn, io, NULL, err));
    if (!(op->stddev >= 0.0))
        return ck_fail(err, CK_ERR_INPUT, "%s: stddev must be >= 0, got %g", fn, op->stddev);
    return ck_opc_unary_pointwise(be, fn, io, NULL, err);
}

ck_status ck_opc_noise_bwd(const char *be, const ck_op_io *io, const ck_op_grads *g,
                           ck_error *err)
{
    const char *fn = "gaussian_noise backward";
    CK_TRY(ck_opc_unary_io(fn, io, g, err));
    if (!g->din[0])
        return CK_OK;
    return ck_opc_unary_pointwise(be, fn, io, g, err);
}

// ----------------------------------------------------------------------------
// shape ops

/* ref and t (when not NULL) have float dtypes; with `shape` set, t has ref's shape. */
