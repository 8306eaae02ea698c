/*
 * The cpu backend's convert (backend.h) from fp32 to fp32: the reference's double
 * arithmetic element by element (backends/ref/convert.c: v = src * scale in double, then
 * stored or added to the old value with one rounding), split into fixed element ranges
 * across the pool's threads (element-wise: the split cannot change a bit). The executor's
 * moves of a concat's first input run on it. Other dtypes are the reference's own call.
 */
#include "backends/cpu/cpu_common.h"

typedef struct {
    float *d;
    const float *s;
    double scale;
    bool accumulate;
    int64_t n;
} convert_job;

#define ELEMS_PER_TASK 65536

static void convert_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const convert_job *j = vctx;
    const int64_t i0 = task * ELEMS_PER_TASK;
    const int64_t i1 = i0 + ELEMS_PER_TASK < j->n ? i0 + ELEMS_PER_TASK : j->n;
    if (j->accumulate) /* old + v rounded once, v = s * scale in double (ref_acc) */
        for (int64_t i = i0; i < i1; i++)
            j->d[i] = (float)((double)j->d[i] + (double)j->s[i] * j->scale);
    else
        for (int64_t i = i0; i < i1; i++)
            j->d[i] = (float)((double)j->s[i] * j->scale);
}

ck_status cpu_convert(const cpu_ctx *c, ck_tensor *dst, const ck_tensor *src, double scale,
                      bool accumulate, ck_error *err)
{
    if (dst->dtype != CK_F32 || src->dtype != CK_F32 || !ck_shape_equal(&dst->shape, &src->shape))
        return ref_convert(dst, src, scale, accumulate, err); /* its checks and messages */
    convert_job j = {dst->data, src->data, scale, accumulate, ck_shape_numel(&dst->shape)};
    if (j.n > 0)
        cpk_parallel(c->pool, (j.n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, convert_task, &j);
    return CK_OK;
}
