/* Host memory for the CPU backends (host_memory.h). */
#include "backends/host_memory.h"

#include "harness/core/calibration.h"

#include <stdlib.h>
#include <string.h>

static ck_status host_alloc(ck_backend *b, size_t bytes, void **ptr, ck_error *err)
{
    (void)b;
    /* 64-byte alignment for vectorised loops; aligned_alloc needs a multiple of it */
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes)
        return ck_fail(err, CK_ERR_NOMEM, "allocation of %zu bytes overflows", bytes);
    *ptr = aligned_alloc(64, rounded ? rounded : 64);
    if (!*ptr)
        return ck_fail(err, CK_ERR_NOMEM, "out of host memory allocating %zu bytes", bytes);
    return CK_OK;
}

static void host_free(ck_backend *b, void *ptr)
{
    (void)b;
    free(ptr);
}

static ck_status host_upload(ck_backend *b, ck_tensor *dst, const void *host, ck_error *err)
{
    (void)b;
    (void)err;
    memcpy(dst->data, host, ck_tensor_bytes(dst));
    return CK_OK;
}

static ck_status host_download(ck_backend *b, const ck_tensor *src, void *host, ck_error *err)
{
    (void)b;
    (void)err;
    memcpy(host, src->data, ck_tensor_bytes(src));
    return CK_OK;
}

static ck_status host_zero(ck_backend *b, ck_tensor *t, ck_error *err)
{
    (void)b;
    (void)err;
    memset(t->data, 0, ck_tensor_bytes(t));
    return CK_OK;
}

static ck_status host_copy(ck_backend *b, ck_tensor *dst, const ck_tensor *src, ck_error *err)
{
    (void)b;
    if (dst->dtype != src->dtype || !ck_shape_equal(&dst->shape, &src->shape))
        return ck_fail(err, CK_ERR_INTERNAL, "copy between tensors of different dtype or shape");
    memmove(dst->data, src->data, ck_tensor_bytes(src));
    return CK_OK;
}

static ck_status host_calibration_round(ck_backend *b, ck_tensor *t, int bits, double rel,
                                        const ck_rng_stream *rng, ck_error *err)
{
    (void)b;
    if (t->dtype != CK_F32)
        return ck_fail(err, CK_ERR_INTERNAL, "calibration rounding of %s: fp32 tensors only",
                       t->name ? t->name : "?");
    float *v = t->data;
    const int64_t n = ck_shape_numel(&t->shape);
    for (int64_t k = 0; k < n; k++)
        v[k] = ck_calibration_round(v[k], bits, rel, rng, (uint64_t)k);
    return CK_OK;
}

void ck_host_memory_install(ck_backend *b)
{
    b->alloc = host_alloc;
    b->free = host_free;
    b->upload = host_upload;
    b->download = host_download;
    b->zero = host_zero;
    b->copy = host_copy;
    b->calibration_round = host_calibration_round;
}
