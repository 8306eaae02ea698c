/*
 * The broadcast family's geometry and functions, as plain C marked CK_HD (numerics.h): the
 * reference backend and the CUDA device code index and compute with the same lines, so
 * both sum the same terms in the same order.
 *
 * Numpy broadcasting: an operand's dims are aligned to the full shape from the right (a
 * missing leading dim counts as 1); along a dim where the operand has size 1 and the full
 * shape more, every index reads the operand's one element. The full shape is the output of
 * a binary op and of expand, the input of a reduction (whose output, with the reduced dims
 * kept as 1, is the operand).
 *  - ck_bc_offset: the operand element that full-shape element i reads;
 *  - ck_bc_reader: the m-th full-shape element (ascending) that reads operand element j,
 *    m < ck_bc_geom.fan[k]. A gradient of a broadcast operand, a sum and an expand's
 *    backward add these in ascending order, in double, and round once.
 */
#ifndef CK_CHECK_BROADCAST_H
#define CK_CHECK_BROADCAST_H

#include <math.h>

#include "backends/check/numerics.h"

typedef struct {
    int nd;                           /* rank of the full shape (0: a scalar) */
    int64_t full[CK_OP_MAX_DIMS];     /* the full shape */
    int64_t dim[2][CK_OP_MAX_DIMS];   /* operand k's dims aligned to it (1: broadcast) */
    int64_t n_full, n[2], fan[2];     /* element counts; fan: n_full / n[k] */
} ck_bc_geom;

static inline CK_HD int64_t ck_bc_offset(const ck_bc_geom *g, int k, int64_t i)
{
    int64_t off = 0, st = 1;
    for (int d = g->nd - 1; d >= 0; d--) {
        const int64_t c = i % g->full[d];
        i /= g->full[d];
        if (g->dim[k][d] != 1) {
            off += c * st;
            st *= g->dim[k][d];
        }
    }
    return off;
}

static inline CK_HD int64_t ck_bc_reader(const ck_bc_geom *g, int k, int64_t j, int64_t m)
{
    int64_t idx = 0, st = 1;
    for (int d = g->nd - 1; d >= 0; d--) {
        int64_t c;
        if (g->dim[k][d] == g->full[d]) {
            c = j % g->full[d];
            j /= g->full[d];
        } else {
            c = m % g->full[d];
            m /= g->full[d];
        }
        idx += c * st;
        st *= g->full[d];
    }
    return idx;
}

/* ---- the binary functions (v: pow's exponent, masked_fill's value) ---- */

static inline CK_HD bool ck_bc_is_nan(double x)
{
    return x != x;
}

static inline CK_HD double ck_bc_f(ck_op_kind kind, double a, double b, double v)
{
    switch (kind) {
    case CK_OP_ADD: return a + b;
    case CK_OP_SUB: return a - b;
    case CK_OP_MUL: return a * b;
    case CK_OP_DIV: return a / b;
    /* torch.maximum / minimum: NaN if either is NaN */
    case CK_OP_MAXIMUM: return ck_bc_is_nan(a) || ck_bc_is_nan(b) ? a + b : a > b ? a : b;
    case CK_OP_MINIMUM: return ck_bc_is_nan(a) || ck_bc_is_nan(b) ? a + b : a < b ? a : b;
    case CK_OP_POW: return pow(a, v);
    case CK_OP_MASKED_FILL: return b != 0.0 ? v : a;
    default: return NAN; /* no such kind */
    }
}

/* d f / d a at (a, b) */
static inline CK_HD double ck_bc_da(ck_op_kind kind, double a, double b, double v)
{
    switch (kind) {
    case CK_OP_ADD:
    case CK_OP_SUB: return 1.0;
    case CK_OP_MUL: return b;
    case CK_OP_DIV: return 1.0 / b;
    /* ties share the gradient equally, as PyTorch's maximum/minimum backward */
    case CK_OP_MAXIMUM: return a > b ? 1.0 : a == b ? 0.5 : 0.0;
    case CK_OP_MINIMUM: return a < b ? 1.0 : a == b ? 0.5 : 0.0;
    case CK_OP_POW: return v == 0.0 ? 0.0 : v * pow(a, v - 1.0); /* PyTorch: 0 for x ** 0 */
    case CK_OP_MASKED_FILL: return b != 0.0 ? 0.0 : 1.0;
    default: return 0.0;
    }
}

/* d f / d b at (a, b) (pow and masked_fill: b is a constant, never differentiated) */
static inline CK_HD double ck_bc_db(ck_op_kind kind, double a, double b)
{
    switch (kind) {
    case CK_OP_ADD: return 1.0;
    case CK_OP_SUB: return -1.0;
    case CK_OP_MUL: return a;
    case CK_OP_DIV: return -a / (b * b);
    case CK_OP_MAXIMUM: return b > a ? 1.0 : a == b ? 0.5 : 0.0;
    case CK_OP_MINIMUM: return b < a ? 1.0 : a == b ? 0.5 : 0.0;
    default: return 0.0;
    }
}

/* whether a binary op's gradients read the operands' values (add and sub: shapes only;
 * masked_fill: the mask alone) */
static inline CK_HD bool ck_bc_grad_reads_values(ck_op_kind kind)
{
    return kind != CK_OP_ADD && kind != CK_OP_SUB && kind != CK_OP_MASKED_FILL;
}

#endif
