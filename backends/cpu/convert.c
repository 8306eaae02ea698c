/*
 * dtype conversion with scaling for the CPU backend: casting fp32 master weights to the low
 * dtype once per step, and unscaling low-precision gradients into fp32 master gradients
 * (harness/precision.md). Every element is computed in double and rounded once.
 */
#include "cpu_ops.h"

#include "../../harness/half.h"

static double load(const ck_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case CK_F32: return ((const float *)t->data)[i];
    case CK_F64: return ((const double *)t->data)[i];
    case CK_F16: return ck_f16_to_f32(((const uint16_t *)t->data)[i]);
    case CK_BF16: return ck_bf16_to_f32(((const uint16_t *)t->data)[i]);
    default: return 0.0;
    }
}

static void store(ck_tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case CK_F32: ((float *)t->data)[i] = (float)v; break;
    case CK_F64: ((double *)t->data)[i] = v; break;
    case CK_F16: ((uint16_t *)t->data)[i] = ck_f64_to_f16(v); break;
    case CK_BF16: ((uint16_t *)t->data)[i] = ck_f64_to_bf16(v); break;
    default: break;
    }
}

ck_status cpu_convert(ck_tensor *dst, const ck_tensor *src, double scale, bool accumulate,
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
        double v = load(src, i) * scale;
        store(dst, i, accumulate ? load(dst, i) + v : v);
    }
    return CK_OK;
}
