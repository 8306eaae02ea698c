/* Data type table and shape helpers. */
#include "harness/core/tensor.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name, *st_name;
    size_t size;
    bool is_float;
} dtype_table[CK_DTYPE_COUNT] = {
    [CK_F32] = {"fp32", "F32", 4, true},   [CK_F64] = {"fp64", "F64", 8, true},
    [CK_F16] = {"fp16", "F16", 2, true},   [CK_BF16] = {"bf16", "BF16", 2, true},
    [CK_I32] = {"i32", "I32", 4, false},   [CK_I64] = {"i64", "I64", 8, false},
};

const char *ck_dtype_name(ck_dtype dt)
{
    return (unsigned)dt < CK_DTYPE_COUNT ? dtype_table[dt].name : "?";
}

const char *ck_dtype_st_name(ck_dtype dt)
{
    return (unsigned)dt < CK_DTYPE_COUNT ? dtype_table[dt].st_name : "?";
}

size_t ck_dtype_size(ck_dtype dt)
{
    return (unsigned)dt < CK_DTYPE_COUNT ? dtype_table[dt].size : 0;
}

bool ck_dtype_is_float(ck_dtype dt)
{
    return (unsigned)dt < CK_DTYPE_COUNT && dtype_table[dt].is_float;
}

bool ck_dtype_parse(const char *s, ck_dtype *out)
{
    static const struct {
        const char *alias;
        ck_dtype dt;
    } aliases[] = {
        {"fp32", CK_F32}, {"float32", CK_F32}, {"f32", CK_F32},  {"fp64", CK_F64},
        {"float64", CK_F64}, {"f64", CK_F64},  {"fp16", CK_F16}, {"float16", CK_F16},
        {"f16", CK_F16},  {"half", CK_F16},    {"bf16", CK_BF16}, {"bfloat16", CK_BF16},
    };
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        if (strcmp(s, aliases[i].alias) == 0) {
            *out = aliases[i].dt;
            return true;
        }
    }
    return false;
}

int64_t ck_shape_numel(const ck_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->dim[i];
    return n;
}

bool ck_shape_numel_checked(const ck_shape *s, size_t elem_size, int64_t *numel)
{
    if (s->ndim < 0 || s->ndim > CK_MAX_DIMS)
        return false;
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) {
        if (s->dim[i] <= 0)
            return false;
        if (__builtin_mul_overflow(n, s->dim[i], &n))
            return false;
    }
    if (elem_size > 0) {
        int64_t bytes;
        if (__builtin_mul_overflow(n, (int64_t)elem_size, &bytes) || (uint64_t)bytes > SIZE_MAX)
            return false;
    }
    if (numel)
        *numel = n;
    return true;
}

bool ck_shape_equal(const ck_shape *a, const ck_shape *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dim[i] != b->dim[i])
            return false;
    return true;
}

char *ck_shape_str(const ck_shape *s, char *buf, size_t n)
{
    size_t used = 0;
    int w = snprintf(buf, n, "[");
    used = w > 0 ? (size_t)w : 0;
    for (int i = 0; i < s->ndim && used < n; i++) {
        w = snprintf(buf + used, n - used, "%s%lld", i ? ", " : "", (long long)s->dim[i]);
        if (w > 0)
            used += (size_t)w;
    }
    if (used < n)
        snprintf(buf + used, n - used, "]");
    return buf;
}

void ck_shape_unflatten(const ck_shape *s, int64_t flat, int64_t *idx)
{
    for (int i = s->ndim - 1; i >= 0; i--) {
        idx[i] = flat % s->dim[i];
        flat /= s->dim[i];
    }
}

ck_shape ck_shape_make(int ndim, const int64_t *dims)
{
    ck_shape s;
    memset(&s, 0, sizeof s);
    s.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        s.dim[i] = dims[i];
    return s;
}
