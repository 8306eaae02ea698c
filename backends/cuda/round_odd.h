/*
 * The CUDA backend's one-rounding accumulation into fp16/bf16, as plain C marked CK_HD:
 * nvcc compiles it for the device (cuda_common.cuh's ck_acc, cuda_convert) and the C
 * compiler for the host, where tests/test_cuda_cpu.c checks it bit for bit against the CPU
 * backend (backends/ref/ref_elem.c, ref_sum_round_odd).
 *
 * old + v is first summed in double rounded to odd (TwoSum), so that the one later rounding
 * to the 16-bit dtype (nearest even) is the rounding of the exact sum: adding in double
 * with nearest-even and then rounding again can be off by one ulp of the low dtype
 * (double rounding). Device code is built with -fmad=false, so the operations below are
 * the same IEEE operations on both sides.
 */
#ifndef CK_CUDA_ROUND_ODD_H
#define CK_CUDA_ROUND_ODD_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define CK_HD_RO __host__ __device__
#else
#define CK_HD_RO
#endif

/* a + b in double rounded to odd: ref_sum_round_odd */
static inline CK_HD_RO double ck_sum_round_odd(double a, double b)
{
    const double s = a + b;
    const double bv = s - a;
    const double e = (a - (s - bv)) + (b - bv); /* exact: a + b = s + e */
    if (e == 0.0 || s - s != 0.0)               /* exact, or overflowed */
        return s;
    uint64_t u;
    memcpy(&u, &s, sizeof u);
    if (u & 1u)
        return s;
    u = (e > 0.0) == (s > 0.0) ? u + 1u : u - 1u; /* toward the exact sum */
    double r;
    memcpy(&r, &u, sizeof r);
    return r;
}

/* The double that convert (backend.h) rounds once into a dst element: src·scale, or, when
 * accumulating, old + src·scale, summed to odd when dst is fp16/bf16 (`low`). */
static inline CK_HD_RO double ck_convert_value(double old, double v, bool accumulate, bool low)
{
    if (!accumulate)
        return v;
    return low ? ck_sum_round_odd(old, v) : old + v;
}

#endif
