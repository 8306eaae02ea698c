/*
 * dtype conversion with scaling for the CPU backend: casting fp32 master weights to the low
 * dtype once per step, and unscaling low-precision gradients into fp32 master gradients
 * (harness/precision.md). Every element is computed in double and rounded once
 * (an accumulation rounds old + v once, see ref_elem.h).
 */
#include "backends/ref/ref_ops.h"

#include "backends/ref/ref_elem.h"

ck_status ref_convert(ck_tensor *dst, const ck_tensor *src, double scale, bool accumulate,
                      ck_error *err)
{
    if (!ck_dtype_is_float(dst->dtype) || !ck_dtype_is_float(src->dtype))
        return ck_fail(err, CK_ERR_UNSUPPORTED, "convert %s -> %s: float dtypes only",
                       ck_dtype_name(src->dtype), ck_dtype_name(dst->dtype));
    if (!ck_shape_equal(&dst->shape, &src->shape))
        return ck_fail(err, CK_ERR_INTERNAL, "convert %s -> %s: shapes differ",
                       src->name ? src->name : "?", dst->name ? dst->name : "?");
    int64_t n = ck_shape_numel(&dst->shape);
    for (int64_t i = 0; i < n; i++) {
        double v = ref_ld(src, i) * scale;
        if (accumulate)
            ref_acc(dst, i, v); /* old + v rounded once */
        else
            ref_st(dst, i, v);
    }
    return CK_OK;
}
