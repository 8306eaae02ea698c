/*
 * The CPU backend's fp16/bf16 element access and wide views (ref_elem.h).
 */
#include "backends/ref/ref_elem.h"

#include <stdlib.h>
#include <string.h>

#include "harness/core/half.h"

// ----------------------------------------------------------------------------
// fp16/bf16 elements

double ref_ld_low(const ck_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case CK_F16: return (double)ck_f16_to_f32(((const uint16_t *)t->data)[i]);
    case CK_BF16: return (double)ck_bf16_to_f32(((const uint16_t *)t->data)[i]);
    default: return 0.0; /* unreachable: every op checks its dtypes first */
    }
}

void ref_st_low(ck_tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case CK_F16: ((uint16_t *)t->data)[i] = ck_f64_to_f16(v); break;
    case CK_BF16: ((uint16_t *)t->data)[i] = ck_f64_to_bf16(v); break;
    default: break; /* unreachable: every op checks its dtypes first */
    }
}

void ref_acc_low(ck_tensor *t, int64_t i, double v)
{
    ref_st_low(t, i, ck_sum_round_odd(ref_ld_low(t, i), v));
}

// ----------------------------------------------------------------------------
// wide views

static ck_status wide_alloc(const char *op, const ck_tensor *t, bool zero, ref_wide *w,
                            ck_error *err)
{
    const size_t n = (size_t)ck_shape_numel(&t->shape);
    const size_t cnt = n ? n : 1;
    w->owned = zero ? calloc(cnt, sizeof *w->owned) : malloc(cnt * sizeof *w->owned);
    if (!w->owned)
        return ck_fail(err, CK_ERR_NOMEM, "%s: no memory to widen '%s' (%zu values) to fp64",
                       op, ref_tname(t), n);
    w->data = w->owned;
    return CK_OK;
}

ck_status ref_wide_in(const char *op, const ck_tensor *t, ref_wide *w, ck_error *err)
{
    w->data = w->owned = NULL;
    if (!t || !t->data) /* absent, or hidden (a tensor the kernel does not read) */
        return CK_OK;
    if (t->dtype == CK_F64) {
        w->data = t->data;
        return CK_OK;
    }
    ck_status st = wide_alloc(op, t, false, w, err);
    if (st != CK_OK)
        return st;
    const int64_t n = ck_shape_numel(&t->shape);
    for (int64_t i = 0; i < n; i++)
        w->owned[i] = ref_ld(t, i);
    return CK_OK;
}

ck_status ref_wide_out(const char *op, const ck_tensor *t, bool zero, ref_wide *w,
                       ck_error *err)
{
    w->data = w->owned = NULL;
    if (!t || !t->data) /* absent, or hidden (a tensor the kernel does not read) */
        return CK_OK;
    if (t->dtype == CK_F64) {
        w->data = t->data;
        return CK_OK;
    }
    return wide_alloc(op, t, zero, w, err);
}

void ref_wide_store(ck_tensor *t, const ref_wide *w)
{
    if (!t || !w->owned)
        return;
    const int64_t n = ck_shape_numel(&t->shape);
    for (int64_t i = 0; i < n; i++)
        ref_st(t, i, w->owned[i]);
}

void ref_wide_accumulate(ck_tensor *t, const ref_wide *w)
{
    if (!t || !w->owned)
        return;
    const int64_t n = ck_shape_numel(&t->shape);
    for (int64_t i = 0; i < n; i++)
        ref_acc(t, i, w->owned[i]);
}

void ref_wide_free(ref_wide *w)
{
    free(w->owned);
    w->data = w->owned = NULL;
}
