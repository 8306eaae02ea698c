/*
 * Data types, shapes and the tensor handle every module passes around.
 *
 * Tensors are channels-first (N, C, spatial...), row-major, as PyTorch and cuDNN lay
 * them out. A ck_tensor does not own its memory: whoever allocated `data` (the executor's
 * accounting allocator, the runner's parameter store, a test) frees it. `data` points into
 * the backend's memory (host memory for the CPU backend, device memory for CUDA).
 */
#ifndef CK_TENSOR_H
#define CK_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    CK_F32 = 0,
    CK_F64,
    CK_F16,
    CK_BF16,
    CK_I32,
    CK_I64,
    CK_DTYPE_COUNT
} ck_dtype;

#define CK_MAX_DIMS 8

typedef struct {
    int ndim;
    int64_t dim[CK_MAX_DIMS];
} ck_shape;

typedef struct ck_tensor {
    const char *name; /* e.g. "enc1.weight", "enc1:out"; may be NULL for scratch */
    ck_dtype dtype;
    ck_shape shape;
    void *data;
} ck_tensor;

/* "fp32", "fp64", "fp16", "bf16", "i32", "i64" */
const char *ck_dtype_name(ck_dtype dt);
/* safetensors spelling: "F32", "F64", "F16", "BF16", "I32", "I64" */
const char *ck_dtype_st_name(ck_dtype dt);
size_t ck_dtype_size(ck_dtype dt);
bool ck_dtype_is_float(ck_dtype dt);
/* Parses "fp32"/"float32"/"f32" etc.; returns false if unknown. */
bool ck_dtype_parse(const char *s, ck_dtype *out);

/* Element count; the shape must have been validated with ck_shape_numel_checked. */
int64_t ck_shape_numel(const ck_shape *s);
/* Element count with overflow checks: false if any dim <= 0 or the product (or the
 * product times elem_size, when elem_size > 0) exceeds INT64_MAX / SIZE_MAX. */
bool ck_shape_numel_checked(const ck_shape *s, size_t elem_size, int64_t *numel);
bool ck_shape_equal(const ck_shape *a, const ck_shape *b);
/* Writes "[2, 4, 16, 16, 16]" into buf; returns buf. */
char *ck_shape_str(const ck_shape *s, char *buf, size_t n);
/* Converts a flat row-major index into a multi-index (idx has s->ndim entries). */
void ck_shape_unflatten(const ck_shape *s, int64_t flat, int64_t *idx);
ck_shape ck_shape_make(int ndim, const int64_t *dims);

static inline size_t ck_tensor_bytes(const ck_tensor *t)
{
    return (size_t)ck_shape_numel(&t->shape) * ck_dtype_size(t->dtype);
}

#endif
