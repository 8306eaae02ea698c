/*
 * The CPU backend's shared dtype checks and wide views (cpu_elem.h).
 */
#include "cpu_elem.h"

#include <stdlib.h>

ck_status cpu_check_float_dtypes(const char *op, const ck_tensor *const *t, int n,
                                 ck_error *err)
{
    for (int i = 0; i < n; i++)
        if (t[i] && !cpu_is_float(t[i]->dtype))
            return ck_fail(err, CK_ERR_UNSUPPORTED,
                           "%s: dtype %s of '%s' is not supported by the cpu backend "
                           "(fp32, fp64, fp16 and bf16 only)", op,
                           ck_dtype_name(t[i]->dtype), cpu_tname(t[i]));
    return CK_OK;
}

ck_dtype cpu_common_dtype(const ck_tensor *const *t, int n)
{
    ck_dtype dt = CK_DTYPE_COUNT;
    for (int i = 0; i < n; i++) {
        if (!t[i])
            continue;
        if (dt == CK_DTYPE_COUNT)
            dt = t[i]->dtype;
        else if (t[i]->dtype != dt)
            return CK_DTYPE_COUNT;
    }
    return dt;
}

static ck_status wide_alloc(const char *op, const ck_tensor *t, bool zero, cpu_wide *w,
                            ck_error *err)
{
    const size_t n = (size_t)ck_shape_numel(&t->shape);
    const size_t cnt = n ? n : 1;
    w->owned = zero ? calloc(cnt, sizeof *w->owned) : malloc(cnt * sizeof *w->owned);
    if (!w->owned)
        return ck_fail(err, CK_ERR_NOMEM, "%s: no memory to widen '%s' (%zu values) to fp64",
                       op, cpu_tname(t), n);
    w->data = w->owned;
    return CK_OK;
}

ck_status cpu_wide_in(const char *op, const ck_tensor *t, cpu_wide *w, ck_error *err)
{
    w->data = w->owned = NULL;
    if (!t)
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
        w->owned[i] = cpu_ld(t, i);
    return CK_OK;
}

ck_status cpu_wide_out(const char *op, const ck_tensor *t, bool zero, cpu_wide *w,
                       ck_error *err)
{
    w->data = w->owned = NULL;
    if (!t)
        return CK_OK;
    if (t->dtype == CK_F64) {
        w->data = t->data;
        return CK_OK;
    }
    return wide_alloc(op, t, zero, w, err);
}

void cpu_wide_store(ck_tensor *t, const cpu_wide *w)
{
    if (!t || !w->owned)
        return;
    const int64_t n = ck_shape_numel(&t->shape);
    for (int64_t i = 0; i < n; i++)
        cpu_st(t, i, w->owned[i]);
}

void cpu_wide_accumulate(ck_tensor *t, const cpu_wide *w)
{
    if (!t || !w->owned)
        return;
    const int64_t n = ck_shape_numel(&t->shape);
    for (int64_t i = 0; i < n; i++)
        cpu_acc(t, i, w->owned[i]);
}

void cpu_wide_free(cpu_wide *w)
{
    free(w->owned);
    w->data = w->owned = NULL;
}
