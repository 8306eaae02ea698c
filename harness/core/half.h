/*
 * IEEE binary16 (fp16) and bfloat16 (bf16) conversions, usable from C and CUDA.
 *
 * Every conversion is pure integer arithmetic on the bit patterns, so the CPU and the GPU
 * produce the same bits whatever the hardware's own conversion instructions do.
 *
 *   fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; largest finite 65504, smallest
 *         normal 2^-14, smallest subnormal 2^-24.
 *   bf16: the top 16 bits of an fp32: 1 sign, 8 exponent (bias 127), 7 mantissa bits;
 *         largest finite (2 - 2^-7) * 2^127 ~ 3.3895e38, smallest subnormal 2^-133.
 *
 * Narrowing (fp32 or fp64 -> fp16/bf16) rounds to nearest, ties to even, with gradual
 * underflow to subnormals; values whose rounding exceeds the largest finite value become
 * infinity of the same sign (IEEE 754 overflow). The fp64 narrowings round ONCE, directly
 * from the double: going through fp32 would round twice and can land on the other
 * neighbour (1 + 2^-11 + 2^-40 -> fp32 1 + 2^-11, a tie that fp16 breaks to 1.0, while
 * the double is above the tie and rounds to 1 + 2^-10).
 *
 * NaN stays NaN (never infinity): a narrowing keeps the top bits of the payload that fit
 * and sets the quiet bit; a widening (fp16/bf16 -> fp32) keeps the whole payload and also
 * sets the quiet bit, as hardware conversions quiet a signalling NaN. So every fp16/bf16
 * pattern survives a round trip through fp32 unchanged, except that a signalling NaN
 * comes back quiet.
 *
 * The classification helpers say what happened to a value cast to a dtype (overflow to
 * infinity, flush to zero, subnormal result): underflow reporting for mixed precision.
 * Semantics of mixed precision: harness/precision.md.
 */
#ifndef CK_HALF_H
#define CK_HALF_H

#include <stdint.h>
#include <string.h>

#include "harness/core/tensor.h"

#if defined(__CUDACC__)
#define CK_HALF_HD __host__ __device__ __forceinline__
#else
#define CK_HALF_HD static inline
#endif

#define CK_F16_INF 0x7c00u
#define CK_F16_MAX_FINITE 65504.0
#define CK_BF16_INF 0x7f80u

// ----------------------------------------------------------------------------
// bit access

CK_HALF_HD uint32_t ck_half_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

CK_HALF_HD float ck_half_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

CK_HALF_HD uint64_t ck_half_f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

// ----------------------------------------------------------------------------
// the one rounding routine both 16-bit formats share

/* Rounds the finite nonzero magnitude sig * 2^(e - 52) (sig a 53-bit integer with bit 52
 * set, i.e. 1.f * 2^e) to nearest-even in a format with `mbits` mantissa bits, exponent
 * bias `bias` and infinity pattern `inf_bits`, and returns sign | the magnitude's bits. */
CK_HALF_HD uint16_t ck_half_round_(uint16_t sign, int32_t e, uint64_t sig, int mbits,
                                   int32_t bias, uint32_t inf_bits)
{
    const int32_t emin = 1 - bias; /* exponent of the smallest normal */
    int32_t shift = 52 - mbits;    /* low bits of sig that do not fit */
    uint32_t base = 0;             /* biased exponent - 1, above the mantissa */
    if (e >= emin) {
        /* keep carries the hidden bit at position mbits, which adds the missing 1 */
        base = (uint32_t)(e + bias - 1) << mbits;
    } else {
        /* subnormal: shift the significand further right, exponent field 0 */
        shift += emin - e;
        if (shift > 53) /* below half the smallest subnormal: rounds to zero */
            return sign;
    }
    const uint64_t keep = sig >> shift;
    const uint64_t rem = sig & ((UINT64_C(1) << shift) - 1);
    const uint64_t half = UINT64_C(1) << (shift - 1);
    uint32_t bits = base + (uint32_t)keep;
    if (rem > half || (rem == half && (keep & 1)))
        bits++; /* a carry out of the mantissa moves into the exponent, as it should */
    if (bits >= inf_bits)
        bits = inf_bits; /* overflow */
    return (uint16_t)(sign | bits);
}

/* fp64 -> a 16-bit format, rounded once. */
CK_HALF_HD uint16_t ck_half_from_f64_(double v, int mbits, int32_t bias, uint32_t inf_bits)
{
    const uint64_t u = ck_half_f64_bits(v);
    const uint16_t sign = (uint16_t)((u >> 48) & 0x8000u);
    const uint32_t ef = (uint32_t)(u >> 52) & 0x7ffu;
    const uint64_t mant = u & ((UINT64_C(1) << 52) - 1);
    if (ef == 0x7ffu) {
        if (!mant)
            return (uint16_t)(sign | inf_bits);
        /* NaN: top payload bits, quiet bit set */
        return (uint16_t)(sign | inf_bits | (1u << (mbits - 1)) |
                          (uint32_t)(mant >> (52 - mbits)));
    }
    if (ef == 0) /* zero, or a double subnormal (< 2^-1022): below either format's range */
        return sign;
    return ck_half_round_(sign, (int32_t)ef - 1023, mant | (UINT64_C(1) << 52), mbits, bias,
                          inf_bits);
}

/* fp32 -> a 16-bit format, rounded once. */
CK_HALF_HD uint16_t ck_half_from_f32_(float f, int mbits, int32_t bias, uint32_t inf_bits)
{
    const uint32_t u = ck_half_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t ef = (u >> 23) & 0xffu;
    uint32_t mant = u & 0x7fffffu;
    if (ef == 0xffu) {
        if (!mant)
            return (uint16_t)(sign | inf_bits);
        return (uint16_t)(sign | inf_bits | (1u << (mbits - 1)) | (mant >> (23 - mbits)));
    }
    int32_t e = (int32_t)ef - 127;
    if (ef == 0) {
        if (!mant)
            return sign;
        /* fp32 subnormal mant * 2^-149: normalise (bf16 has subnormals this small) */
        e = -126;
        while (!(mant & 0x800000u)) {
            mant <<= 1;
            e--;
        }
    }
    return ck_half_round_(sign, e, (uint64_t)(mant | 0x800000u) << 29, mbits, bias, inf_bits);
}

// ----------------------------------------------------------------------------
// fp16

/* Exact; NaN keeps its payload and comes back quiet. */
CK_HALF_HD float ck_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t ef = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (ef == 0x1fu) {
        bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u);
    } else if (ef == 0) {
        if (!mant) {
            bits = sign;
        } else {
            /* subnormal mant * 2^-24: normalise */
            int32_t e = -14;
            while (!(mant & 0x400u)) {
                mant <<= 1;
                e--;
            }
            bits = sign | ((uint32_t)(e + 127) << 23) | ((mant & 0x3ffu) << 13);
        }
    } else {
        bits = sign | ((ef - 15 + 127) << 23) | (mant << 13);
    }
    return ck_half_f32_from_bits(bits);
}

CK_HALF_HD uint16_t ck_f32_to_f16(float f) { return ck_half_from_f32_(f, 10, 15, CK_F16_INF); }

/* Rounded once from the double (never through fp32). */
CK_HALF_HD uint16_t ck_f64_to_f16(double v) { return ck_half_from_f64_(v, 10, 15, CK_F16_INF); }

// ----------------------------------------------------------------------------
// bf16

/* Exact; NaN keeps its payload and comes back quiet. */
CK_HALF_HD float ck_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    if ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu))
        bits |= 0x400000u;
    return ck_half_f32_from_bits(bits);
}

CK_HALF_HD uint16_t ck_f32_to_bf16(float f) { return ck_half_from_f32_(f, 7, 127, CK_BF16_INF); }

/* Rounded once from the double (never through fp32). */
CK_HALF_HD uint16_t ck_f64_to_bf16(double v)
{
    return ck_half_from_f64_(v, 7, 127, CK_BF16_INF);
}

// ----------------------------------------------------------------------------
// rounding a double to a dtype, and what the rounding did

/* v rounded once to dt and widened back (exactly) to double; fp64 and the integer dtypes
 * return v unchanged. */
CK_HALF_HD double ck_round_to_dtype(double v, ck_dtype dt)
{
    switch (dt) {
    case CK_F32: return (double)(float)v;
    case CK_F16: return (double)ck_f16_to_f32(ck_f64_to_f16(v));
    case CK_BF16: return (double)ck_bf16_to_f32(ck_f64_to_bf16(v));
    default: return v;
    }
}

typedef enum {
    CK_CAST_OK = 0,    /* a normal number, or v was zero, infinite or NaN to begin with */
    CK_CAST_SUBNORMAL, /* the result is a nonzero subnormal of the dtype (precision lost) */
    CK_CAST_FLUSHED,   /* v is finite and nonzero, the result is +-0 */
    CK_CAST_OVERFLOW   /* v is finite, the result is +-infinity */
} ck_cast_class;

/* Classifies a 16-bit result r of rounding v (mbits mantissa bits, infinity inf_bits). */
CK_HALF_HD ck_cast_class ck_half_classify_(double v, uint16_t r, int mbits, uint32_t inf_bits)
{
    const uint32_t mag = r & 0x7fffu;
    const int finite = v - v == 0.0; /* false for infinities and NaN */
    if (!finite)
        return CK_CAST_OK;
    if (mag == inf_bits)
        return CK_CAST_OVERFLOW;
    if (mag == 0)
        return v != 0.0 ? CK_CAST_FLUSHED : CK_CAST_OK;
    return mag < (1u << mbits) ? CK_CAST_SUBNORMAL : CK_CAST_OK;
}

CK_HALF_HD ck_cast_class ck_f16_classify(double v)
{
    return ck_half_classify_(v, ck_f64_to_f16(v), 10, CK_F16_INF);
}

CK_HALF_HD ck_cast_class ck_bf16_classify(double v)
{
    return ck_half_classify_(v, ck_f64_to_bf16(v), 7, CK_BF16_INF);
}

CK_HALF_HD ck_cast_class ck_f32_classify(double v)
{
    const uint32_t mag = ck_half_f32_bits((float)v) & 0x7fffffffu;
    const int finite = v - v == 0.0;
    if (!finite)
        return CK_CAST_OK;
    if (mag == 0x7f800000u)
        return CK_CAST_OVERFLOW;
    if (mag == 0)
        return v != 0.0 ? CK_CAST_FLUSHED : CK_CAST_OK;
    return mag < 0x800000u ? CK_CAST_SUBNORMAL : CK_CAST_OK;
}

CK_HALF_HD ck_cast_class ck_f64_classify(double v)
{
    const uint64_t mag = ck_half_f64_bits(v) & ~(UINT64_C(1) << 63);
    return mag != 0 && mag < (UINT64_C(1) << 52) ? CK_CAST_SUBNORMAL : CK_CAST_OK;
}

/* What rounding v to dt did; CK_CAST_OK for the integer dtypes. */
CK_HALF_HD ck_cast_class ck_cast_classify(double v, ck_dtype dt)
{
    switch (dt) {
    case CK_F32: return ck_f32_classify(v);
    case CK_F64: return ck_f64_classify(v);
    case CK_F16: return ck_f16_classify(v);
    case CK_BF16: return ck_bf16_classify(v);
    default: return CK_CAST_OK;
    }
}

#endif
