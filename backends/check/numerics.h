/*
 * Numerics every backend shares, as plain C marked CK_HD: the C compiler builds them for
 * the reference and fast CPU backends, nvcc for the CUDA device code, so one rule gives
 * the same bits everywhere (tests/test_cuda_numerics.c checks the host side against the
 * CPU backend):
 *  - round-to-odd accumulation into fp16/bf16 (harness/precision.md): old + v is first
 *    summed in double rounded to odd (TwoSum), so that the one later rounding to the
 *    16-bit dtype (nearest even) is the rounding of the exact sum; adding in double with
 *    nearest-even and rounding again can be off by one ulp of the low dtype (double
 *    rounding). Device code is built with -fmad=false, so these are the same IEEE
 *    operations on both sides;
 *  - the variant rules: which kernel of its family an op's options select (padded
 *    pooling, gelu's tanh approximation, linear upsampling).
 * Convolution geometry brought to three spatial dims is ck_conv_geom3 (check.h).
 */
#ifndef CK_CHECK_NUMERICS_H
#define CK_CHECK_NUMERICS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* half.h names a local `half`, which shadows CUDA's global `half` type under -Wshadow */
#ifdef __CUDACC__
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#endif
#include "harness/core/half.h"
#ifdef __CUDACC__
#pragma GCC diagnostic pop
#endif
#include "harness/core/ops.h"
#include "harness/core/tensor.h"

#ifdef __CUDACC__
#define CK_HD __host__ __device__
#else
#define CK_HD
#endif

/* a + b in double rounded to odd */
static inline CK_HD double ck_sum_round_odd(double a, double b)
{
    const double s = a + b;
    const double bv = s - a;
    const double e = (a - (s - bv)) + (b - bv); /* exact: a + b = s + e (TwoSum) */
    if (e == 0.0 || s - s != 0.0)               /* exact, or overflowed */
        return s;
    uint64_t u;
    memcpy(&u, &s, sizeof u);
    if (u & 1u)
        return s;
    /* toward the exact sum: away from zero when e has s's sign */
    u = (e > 0.0) == (s > 0.0) ? u + 1u : u - 1u;
    double r;
    memcpy(&r, &u, sizeof r);
    return r;
}

/* The double that convert (backend.h) rounds once into a dst element: src·scale, or, when
 * accumulating, old + src·scale, summed to odd when dst is fp16/bf16 (`low`). */
static inline CK_HD double ck_convert_value(double old, double v, bool accumulate, bool low)
{
    if (!accumulate)
        return v;
    return low ? ck_sum_round_odd(old, v) : old + v;
}

/* ---- the variant rules ---- */

/* A max/avg pool with padding on any spatial dim (resolved pad_lo/pad_hi) runs the
 * padded kernel (count_include_pad matters only there). */
static inline CK_HD bool ck_pool_is_padded(const ck_op_params *op)
{
    for (int d = 0; d < op->nsp && d < CK_MAX_SPATIAL; d++)
        if (op->pad_lo[d] || op->pad_hi[d])
            return true;
    return false;
}

/* gelu with approximate "tanh" runs the tanh form, in double */
static inline CK_HD bool ck_gelu_is_tanh(const ck_op_params *op)
{
    return op->kind == CK_OP_GELU && op->gelu_tanh;
}

/* cast (harness/model/ops/pointwise.c): v rounded to the cast's dtype `to` (a ck_dtype:
 * CK_F32, CK_F16, CK_BF16; round to nearest even, fp16 overflows to +-inf, NaN stays NaN),
 * for a tensor of dtype `storage`. float32 is the working precision of a run: in the float64
 * of the gradient check (exact arithmetic, where no op rounds to fp32 either) a cast to
 * float32 is the identity; in fp32, fp16 and bf16 storage rounding to float32 changes
 * nothing or is undone by the store's own rounding anyway. */
static inline CK_HD double ck_cast_round(double v, int to, int storage)
{
    if (to == CK_F32 && storage == CK_F64)
        return v;
    return ck_round_to_dtype(v, (ck_dtype)to);
}

/* upsample in a linear mode (linear, bilinear, trilinear) runs the interpolating kernel */
static inline CK_HD bool ck_upsample_is_linear(const ck_op_params *op)
{
    return op->kind == CK_OP_UPSAMPLE && op->mode == CK_UPSAMPLE_LINEAR;
}

#endif
