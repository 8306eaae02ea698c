/*
 * Host-side checks of the broadcast family (check.h): the operands of the binary ops and
 * the geometry of numpy broadcasting (broadcast.h) for them, expand and the reductions.
 */
#include "backends/check/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(t, buf) ck_shape_str(&(t)->shape, buf, sizeof buf)

bool ck_opc_is_broadcast(const ck_op_params *op)
{
    return ck_op_family_of(op->kind) == CK_FAMILY_BROADCAST ||
           ((op->kind == CK_OP_ADD || op->kind == CK_OP_MUL) && op->broadcast);
}

/* Operand k of g has dims `dims` (rank nd, right-aligned to the full shape). */
static bool geom_operand(ck_bc_geom *g, int k, int nd, const int64_t *dims)
{
    if (nd > g->nd)
        return false;
    int64_t n = 1;
    for (int d = 0; d < g->nd; d++) {
        const int src = d - (g->nd - nd);
        const int64_t v = src >= 0 ? dims[src] : 1;
        if (v != 1 && v != g->full[d])
            return false;
        g->dim[k][d] = v;
        n *= v;
    }
    g->n[k] = n;
    g->fan[k] = n > 0 ? g->n_full / n : 0;
    return true;
}

static void geom_full(ck_bc_geom *g, const ck_shape *full)
{
    memset(g, 0, sizeof *g);
    g->nd = full->ndim;
    for (int d = 0; d < full->ndim; d++)
        g->full[d] = full->dim[d];
    g->n_full = ck_shape_numel(full);
}

ck_status ck_opc_binary(const char *be, const ck_op_params *op, const ck_op_io *io,
                        const ck_tensor *y, ck_opc_bc_operands *o, ck_error *err)
{
    const char *fn = ck_op_kind_name(op->kind);
    char s1[128], s2[128];
    memset(o, 0, sizeof *o);
    o->scalar = op->scalar;
    o->input[0] = 0;
    o->input[1] = -1;
    if (io->n_in < 1 || !io->in[0] || !y)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: needs an input and an output", fn);
    o->t[0] = io->in[0];
    if (op->kind == CK_OP_MASKED_FILL) {
        if (!io->constant)
            return ck_fail(err, CK_ERR_INTERNAL, "masked_fill: no mask tensor");
        o->t[1] = io->constant;
    } else if (op->kind != CK_OP_POW) {
        if (io->n_in == 2) {
            if (!io->in[1])
                return ck_fail(err, CK_ERR_INTERNAL, "%s: input 1 is missing", fn);
            o->t[1] = io->in[1];
            o->input[1] = 1;
        } else if (op->n_const > 0) {
            if (!io->constant)
                return ck_fail(err, CK_ERR_INTERNAL, "%s: no constant tensor", fn);
            o->t[1] = io->constant;
        } else if (isnan(op->scalar)) {
            return ck_fail(err, CK_ERR_INTERNAL, "%s: one input and no constant", fn);
        }
        if (op->const_first && io->n_in == 1) {
            const ck_tensor *t = o->t[0];
            o->t[0] = o->t[1];
            o->t[1] = t;
            o->input[0] = -1;
            o->input[1] = 0;
        }
    }
    const ck_tensor *ts[] = {o->t[0], o->t[1], y};
    CK_TRY(ck_opc_float_dtypes(be, fn, ts, 3, err));
    geom_full(&o->g, &y->shape);
    for (int k = 0; k < 2; k++) {
        const ck_tensor *t = o->t[k];
        if (!t) {
            geom_operand(&o->g, k, 0, NULL);
            continue;
        }
        if (!geom_operand(&o->g, k, t->shape.ndim, t->shape.dim))
            return ck_fail(err, CK_ERR_INTERNAL, "%s: '%s' %s does not broadcast to '%s' %s", fn,
                           ck_opc_tname(t), SH(t, s1), ck_opc_tname(y), SH(y, s2));
    }
    return CK_OK;
}

ck_status ck_opc_reduce(const char *be, const ck_op_params *op, const ck_tensor *x,
                        const ck_tensor *y, ck_bc_geom *g, ck_error *err)
{
    const char *fn = ck_op_kind_name(op->kind);
    char s1[128], s2[128];
    CK_TRY(ck_opc_need(fn, x, "input", err));
    CK_TRY(ck_opc_need(fn, y, "output (or its gradient)", err));
    const ck_tensor *ts[] = {x, y};
    CK_TRY(ck_opc_float_dtypes(be, fn, ts, 2, err));
    bool ok;
    if (op->kind == CK_OP_EXPAND) {
        geom_full(g, &y->shape);
        ok = geom_operand(g, 0, x->shape.ndim, x->shape.dim);
    } else {
        geom_full(g, &x->shape);
        int64_t kept[CK_OP_MAX_DIMS];
        for (int d = 0; d < x->shape.ndim; d++)
            kept[d] = x->shape.dim[d];
        ok = op->n_axes >= 1;
        for (int a = 0; a < op->n_axes && ok; a++) {
            ok = op->axes[a] >= 0 && op->axes[a] < x->shape.ndim;
            if (ok)
                kept[op->axes[a]] = 1;
        }
        ok = ok && geom_operand(g, 0, x->shape.ndim, kept) &&
             g->n[0] == ck_shape_numel(&y->shape);
    }
    if (!ok)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: input '%s' %s does not fit '%s' %s", fn,
                       ck_opc_tname(x), SH(x, s1), ck_opc_tname(y), SH(y, s2));
    return CK_OK;
}

ck_status ck_opc_bc_against(const char *be, const char *fn, const ck_tensor *full,
                            const ck_tensor *t, ck_bc_geom *g, ck_error *err)
{
    char s1[128], s2[128];
    const ck_tensor *ts[] = {full, t};
    CK_TRY(ck_opc_float_dtypes(be, fn, ts, 2, err));
    geom_full(g, &full->shape);
    if (!geom_operand(g, 0, t->shape.ndim, t->shape.dim))
        return ck_fail(err, CK_ERR_INTERNAL, "%s: '%s' %s does not broadcast to '%s' %s", fn,
                       ck_opc_tname(t), SH(t, s1), ck_opc_tname(full), SH(full, s2));
    return CK_OK;
}
