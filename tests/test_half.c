/*
 * harness/core/half.h: fp16 and bf16 conversions and the cast classification.
 *
 * Exhaustive where the domain is small (every fp16 and bf16 bit pattern), against an
 * independent reference where it is not (every 1021st fp32 pattern, and a million random
 * doubles, rounded by exact double arithmetic: scale to the format's ulp, rint, scale
 * back), and hand-picked values at every boundary: ties, the largest finite values, the
 * subnormal range, NaN payloads, signed zeros, and values where rounding through fp32
 * first (double rounding) would land on the other neighbour. Also harness/core/calibration.h's
 * significand rounding (the calibration runs' hot loop, integer arithmetic on the bits)
 * against the libm formula it replaces, bit for bit.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "harness/core/calibration.h"
#include "harness/core/half.h"
#include "tests/test_util.h"

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- the reference: exact rounding by double arithmetic ---- */

typedef struct {
    const char *name;
    int mbits;        /* mantissa bits */
    int emin;         /* exponent of the smallest normal */
    double max_finite;
} fmt;

static const fmt F16 = {"fp16", 10, -14, 65504.0};
static const fmt BF16 = {"bf16", 7, -126, 0x1.fep127};

/* x (finite) rounded to nearest-even in format f, as a double (+-inf on overflow). Every
 * step is exact in double: x / ulp and r * ulp only scale by a power of two (the results
 * stay normal doubles), and rint rounds to the nearest integer, ties to even, in the
 * default rounding mode. */
static double ref_round(double x, const fmt *f)
{
    if (x == 0.0)
        return x;
    int e;
    frexp(fabs(x), &e); /* |x| = m 2^e, m in [0.5, 1): floor(log2 |x|) = e - 1 */
    int q = e - 1 < f->emin ? f->emin : e - 1;
    double ulp = ldexp(1.0, q - f->mbits);
    double r = rint(x / ulp) * ulp;
    if (fabs(r) > f->max_finite)
        return copysign(INFINITY, x);
    return r;
}

/* ---- fp16 ---- */

/* fp16 bits h decoded by formula: (-1)^s 2^(e-15) (1 + m/1024), subnormals m 2^-24 */
static double f16_formula(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double mag = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                                  : ldexp(1024 + m, e - 25);
    return s ? -mag : mag;
}

START_TEST(every_f16_pattern_widens_exactly_and_round_trips)
{
    for (uint32_t b = 0; b < 65536; b++) {
        const uint16_t h = (uint16_t)b;
        const float f = ck_f16_to_f32(h);
        const double want = f16_formula(h);
        const uint16_t back = ck_f32_to_f16(f);
        if (isnan(want)) {
            REQUIRE(isnan(f), "0x%04x: NaN widened to %g", b, (double)f);
            /* payload kept, quiet bit set */
            REQUIRE((f32_bits(f) & 0x7fffffu) == (((b & 0x3ffu) << 13) | 0x400000u),
                          "0x%04x: NaN widened to bits 0x%08x", b, f32_bits(f));
            REQUIRE(back == (h | 0x0200u), "0x%04x: NaN came back as 0x%04x", b, back);
            continue;
        }
        REQUIRE((double)f == want && !signbit(f) == !signbit(want),
                      "0x%04x: widened to %a, want %a", b, (double)f, want);
        REQUIRE(back == h, "0x%04x: round trip gave 0x%04x", b, back);
        REQUIRE(ck_f64_to_f16((double)f) == h, "0x%04x: double round trip", b);
    }
}
END_TEST

typedef struct {
    const char *desc;
    double v;
    uint16_t want; /* fp16 bits */
} f16_row;

static const f16_row f16_rows[] = {
    {"one", 1.0, 0x3c00},
    {"1 + 2^-11 is a tie, to even (1.0)", 1.0 + 0x1p-11, 0x3c00},
    {"1 + 3 2^-11 is a tie, to even (1 + 2^-9)", 1.0 + 3 * 0x1p-11, 0x3c02},
    {"just above the tie rounds up", 1.0 + 0x1p-11 + 0x1p-23, 0x3c01},
    {"largest finite 65504", 65504.0, 0x7bff},
    {"65519.99 rounds down to 65504", 65519.99, 0x7bff},
    {"65520 is the tie above 65504, to even: infinity", 65520.0, 0x7c00},
    {"-65520 is -infinity", -65520.0, 0xfc00},
    {"1e6 overflows", 1e6, 0x7c00},
    {"smallest normal 2^-14", 0x1p-14, 0x0400},
    {"largest subnormal", 0x3ffp-24, 0x03ff},
    {"between largest subnormal and smallest normal: tie to even (normal)",
     0x7ffp-25, 0x0400},
    {"smallest subnormal 2^-24", 0x1p-24, 0x0001},
    {"2^-25 is the tie between 0 and 2^-24, to even: 0", 0x1p-25, 0x0000},
    {"-2^-25 is -0", -0x1p-25, 0x8000},
    {"just above 2^-25 rounds up to 2^-24", 0x1.000002p-25, 0x0001},
    {"3 2^-26 rounds to 2^-24", 3 * 0x1p-26, 0x0001},
    {"3 2^-25 is a tie between 2^-24 and 2^-23, to even: 2^-23", 3 * 0x1p-25, 0x0002},
    {"1e-8 flushes to zero", 1e-8, 0x0000},
    {"negative zero", -0.0, 0x8000},
    {"-1.5", -1.5, 0xbe00},
    {"infinity", INFINITY, 0x7c00},
    {"-infinity", -INFINITY, 0xfc00},
};

START_TEST(f32_to_f16_boundaries)
{
    const f16_row *r = &f16_rows[_i];
    const float f = (float)r->v; /* exact except for 65519.99 and 1e-8 */
    uint16_t got = ck_f32_to_f16(f);
    ck_assert_msg(got == r->want, "%s: fp32 %a -> 0x%04x, want 0x%04x", r->desc, (double)f,
                  got, r->want);
    if ((double)f == r->v) {
        got = ck_f64_to_f16(r->v);
        ck_assert_msg(got == r->want, "%s: fp64 %a -> 0x%04x, want 0x%04x", r->desc, r->v,
                      got, r->want);
    }
}
END_TEST

START_TEST(f16_nan_keeps_its_payload_quietly)
{
    /* fp32 signalling NaN with payload 0x12345 in the top bits -> top 10 bits, quiet */
    const uint32_t snan = 0x7f800000u | (0x123u << 13) | 0x0abcu;
    uint16_t h = ck_f32_to_f16(f32_of(snan));
    ck_assert_msg(h == (0x7c00u | 0x0200u | 0x123u), "sNaN -> 0x%04x", h);
    /* a payload only in the low bits must stay NaN, never become infinity */
    h = ck_f32_to_f16(f32_of(0xff800001u));
    ck_assert_msg(h == 0xfe00u, "low-payload -NaN -> 0x%04x", h);
    /* fp64 NaN: top payload bits, quiet bit set */
    uint64_t dn = UINT64_C(0x7ff0000000000001) | (UINT64_C(0x155) << 42);
    double d;
    memcpy(&d, &dn, sizeof d);
    h = ck_f64_to_f16(d);
    ck_assert_msg(h == (0x7e00u | 0x155u), "fp64 NaN -> 0x%04x", h);
    ck_assert(isnan(ck_f16_to_f32(h)));
}
END_TEST

/* ---- bf16 ---- */

START_TEST(every_bf16_pattern_widens_exactly_and_round_trips)
{
    for (uint32_t b = 0; b < 65536; b++) {
        const uint16_t h = (uint16_t)b;
        const float f = ck_bf16_to_f32(h);
        const uint16_t back = ck_f32_to_bf16(f);
        const bool nan = (b & 0x7f80u) == 0x7f80u && (b & 0x7fu);
        if (nan) {
            REQUIRE(isnan(f) && f32_bits(f) == ((b << 16) | 0x400000u),
                          "0x%04x: NaN widened to 0x%08x", b, f32_bits(f));
            REQUIRE(back == (h | 0x0040u), "0x%04x: NaN came back as 0x%04x", b, back);
            continue;
        }
        REQUIRE(f32_bits(f) == b << 16, "0x%04x: widened to 0x%08x", b, f32_bits(f));
        REQUIRE(back == h, "0x%04x: round trip gave 0x%04x", b, back);
        REQUIRE(ck_f64_to_bf16((double)f) == h, "0x%04x: double round trip", b);
    }
}
END_TEST

typedef struct {
    const char *desc;
    uint32_t f32;  /* the input's fp32 bits */
    uint16_t want; /* bf16 bits */
} bf16_row;

static const bf16_row bf16_rows[] = {
    {"one", 0x3f800000u, 0x3f80},
    {"1 + 2^-8 is a tie, to even (1.0)", 0x3f808000u, 0x3f80},
    {"1 + 3 2^-8 is a tie, to even (1 + 2^-6)", 0x3f818000u, 0x3f82},
    {"just above the tie rounds up", 0x3f808001u, 0x3f81},
    {"just below the tie rounds down", 0x3f807fffu, 0x3f80},
    {"largest finite bf16 (~3.3895e38)", 0x7f7f0000u, 0x7f7f},
    {"just below the tie above it stays finite", 0x7f7f7fffu, 0x7f7f},
    {"the tie above the largest finite goes to even: infinity", 0x7f7f8000u, 0x7f80},
    {"3.4e38 is above that tie: infinity", 0x7f7fc99eu, 0x7f80},
    {"FLT_MAX rounds to infinity", 0x7f7fffffu, 0x7f80},
    {"-FLT_MAX rounds to -infinity", 0xff7fffffu, 0xff80},
    {"infinity", 0x7f800000u, 0x7f80},
    {"negative zero", 0x80000000u, 0x8000},
    {"smallest fp32 subnormal 2^-149 is below half of 2^-133: +0", 0x00000001u, 0x0000},
    {"2^-134 is the tie between 0 and 2^-133, to even: 0", 0x00008000u, 0x0000},
    {"just above 2^-134 rounds to 2^-133", 0x00008001u, 0x0001},
    {"largest fp32 subnormal rounds up to the smallest normal", 0x007fffffu, 0x0080},
    {"quiet NaN keeps its top payload", 0x7fc12345u, 0x7fc1},
    {"signalling NaN is quieted, payload kept", 0x7fa12345u, 0x7fe1},
    {"NaN with only low payload stays NaN (not infinity)", 0x7f800001u, 0x7fc0},
    {"-NaN with only low payload stays -NaN", 0xff80ffffu, 0xffc0},
};

START_TEST(f32_to_bf16_boundaries)
{
    const bf16_row *r = &bf16_rows[_i];
    const float f = f32_of(r->f32);
    uint16_t got = ck_f32_to_bf16(f);
    ck_assert_msg(got == r->want, "%s: 0x%08x -> 0x%04x, want 0x%04x", r->desc, r->f32, got,
                  r->want);
    if (!isnan(f)) {
        got = ck_f64_to_bf16((double)f);
        ck_assert_msg(got == r->want, "%s (from fp64): 0x%08x -> 0x%04x, want 0x%04x", r->desc,
                      r->f32, got, r->want);
    }
}
END_TEST

/* ---- rounding once from double ---- */

START_TEST(f64_rounds_once_not_through_f32)
{
    /* 1 + 2^-11 + 2^-40: above the fp16 tie 1 + 2^-11, so it rounds up to 1 + 2^-10. Through
     * fp32 it first becomes 1 + 2^-11 exactly (2^-40 is below half an fp32 ulp), a tie,
     * which then rounds to even: 1.0. */
    const double v16 = 1.0 + 0x1p-11 + 0x1p-40;
    ck_assert_uint_eq(ck_f32_to_f16((float)v16), 0x3c00);
    ck_assert_uint_eq(ck_f64_to_f16(v16), 0x3c01);
    ck_assert_uint_eq(ck_f64_to_f16(-v16), 0xbc01);
    /* the same below a tie: 1 + 3 2^-11 - 2^-40 is below the tie, rounds down to 1 + 2^-10;
     * through fp32 it becomes the tie and goes to even, 1 + 2^-9 */
    const double w16 = 1.0 + 3 * 0x1p-11 - 0x1p-40;
    ck_assert_uint_eq(ck_f32_to_f16((float)w16), 0x3c02);
    ck_assert_uint_eq(ck_f64_to_f16(w16), 0x3c01);
    /* in the subnormal range: 2^-25 + 2^-60 is above the 0 / 2^-24 tie */
    ck_assert_uint_eq(ck_f32_to_f16((float)(0x1p-25 + 0x1p-60)), 0x0000);
    ck_assert_uint_eq(ck_f64_to_f16(0x1p-25 + 0x1p-60), 0x0001);
    /* at the top: 65520 - 2^-30 is below the 65504 / inf tie: finite; through fp32 it
     * becomes 65520 and overflows */
    ck_assert_uint_eq(ck_f32_to_f16((float)(65520.0 - 0x1p-30)), 0x7c00);
    ck_assert_uint_eq(ck_f64_to_f16(65520.0 - 0x1p-30), 0x7bff);
    /* bf16: 1 + 2^-8 + 2^-40 -> 1 + 2^-7 directly, 1.0 through fp32 */
    const double vb = 1.0 + 0x1p-8 + 0x1p-40;
    ck_assert_uint_eq(ck_f32_to_bf16((float)vb), 0x3f80);
    ck_assert_uint_eq(ck_f64_to_bf16(vb), 0x3f81);
    /* bf16 overflow: just below the tie above the largest finite value stays finite */
    ck_assert_uint_eq(ck_f64_to_bf16(0x1.ffp127 - 0x1p90), 0x7f7f);
    ck_assert_uint_eq(ck_f32_to_bf16((float)(0x1.ffp127 - 0x1p90)), 0x7f80);
    /* a double far beyond fp32's range, and a double subnormal */
    ck_assert_uint_eq(ck_f64_to_bf16(1e300), 0x7f80);
    ck_assert_uint_eq(ck_f64_to_f16(-1e300), 0xfc00);
    ck_assert_uint_eq(ck_f64_to_bf16(-4.9e-324), 0x8000);
    ck_assert_uint_eq(ck_f64_to_f16(4.9e-324), 0x0000);
}
END_TEST

/* ---- against the reference ---- */

static void check_against_ref(const char *what, double x, uint16_t got, const fmt *f)
{
    const double want = ref_round(x, f);
    const double have = f == &F16 ? (double)ck_f16_to_f32(got) : (double)ck_bf16_to_f32(got);
    REQUIRE(have == want && !signbit(have) == !signbit(want),
                  "%s %s: %a -> 0x%04x (%a), want %a", what, f->name, x, got, have, want);
}

START_TEST(f32_sample_matches_exact_rounding)
{
    /* every 1021st fp32 bit pattern (1021 is prime: the sample walks every exponent and
     * every residue of the low mantissa bits), NaNs skipped */
    long n = 0;
    for (uint64_t b = 0; b <= 0xffffffffu; b += 1021) {
        const float f = f32_of((uint32_t)b);
        if (isnan(f))
            continue;
        check_against_ref("fp32", (double)f, ck_f32_to_f16(f), &F16);
        check_against_ref("fp32", (double)f, ck_f32_to_bf16(f), &BF16);
        n++;
    }
    ck_assert_int_gt(n, 4000000);
}
END_TEST

/* splitmix64: a fixed, portable sequence of 64-bit words */
static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

START_TEST(f64_sample_matches_exact_rounding)
{
    uint64_t s = 12345;
    for (int i = 0; i < 1000000; i++) {
        const uint64_t w = splitmix(&s);
        /* random sign and mantissa; exponents spread over both formats' ranges and past
         * them; every 4th value is put near a tie of the fp16 grid (the low bits then
         * decide) */
        const int e = (int)(w >> 56) % 320 - 160;
        double x = ldexp(1.0 + (double)(w & ((UINT64_C(1) << 52) - 1)) * 0x1p-52, e);
        if ((w >> 54) & 1)
            x = -x;
        if (i % 4 == 0) {
            const double g = ldexp(1.0, (int)((w >> 40) % 40) - 24);
            x = (floor(x / g) + 0.5) * g + ldexp((double)((int)(w % 7) - 3), -60);
        }
        if (!isfinite(x))
            continue;
        check_against_ref("fp64", x, ck_f64_to_f16(x), &F16);
        check_against_ref("fp64", x, ck_f64_to_bf16(x), &BF16);
    }
}
END_TEST

/* ---- classification and ck_round_to_dtype ---- */

typedef struct {
    double v;
    ck_dtype dt;
    ck_cast_class want;
} class_row;

static const class_row class_rows[] = {
    {1.0, CK_F16, CK_CAST_OK},
    {0.0, CK_F16, CK_CAST_OK},
    {-0.0, CK_BF16, CK_CAST_OK},
    {INFINITY, CK_F16, CK_CAST_OK},
    {NAN, CK_BF16, CK_CAST_OK},
    {65504.0, CK_F16, CK_CAST_OK},
    {65519.0, CK_F16, CK_CAST_OK},
    {65520.0, CK_F16, CK_CAST_OVERFLOW},
    {-1e5, CK_F16, CK_CAST_OVERFLOW},
    {0x1p-14, CK_F16, CK_CAST_OK},
    {1e-6, CK_F16, CK_CAST_SUBNORMAL},
    {3 * 0x1p-26, CK_F16, CK_CAST_SUBNORMAL},
    {0x1p-25, CK_F16, CK_CAST_FLUSHED},
    {-1e-8, CK_F16, CK_CAST_FLUSHED},
    {0x1.ffcp-15, CK_F16, CK_CAST_OK}, /* rounds up to the smallest normal */
    {3.38e38, CK_BF16, CK_CAST_OK},
    {3.4e38, CK_BF16, CK_CAST_OVERFLOW},
    {1e-39, CK_BF16, CK_CAST_SUBNORMAL},
    {1e-41, CK_BF16, CK_CAST_FLUSHED},
    {1e-30, CK_BF16, CK_CAST_OK},
    {1e39, CK_F32, CK_CAST_OVERFLOW},
    {1e-40, CK_F32, CK_CAST_SUBNORMAL},
    {1e-46, CK_F32, CK_CAST_FLUSHED},
    {1e-30, CK_F32, CK_CAST_OK},
    {1e-310, CK_F64, CK_CAST_SUBNORMAL},
    {1e300, CK_F64, CK_CAST_OK},
    {1e-30, CK_I32, CK_CAST_OK},
};

START_TEST(cast_classification)
{
    const class_row *r = &class_rows[_i];
    ck_cast_class got = ck_cast_classify(r->v, r->dt);
    ck_assert_msg(got == r->want, "%a to %s: class %d, want %d", r->v, ck_dtype_name(r->dt),
                  (int)got, (int)r->want);
}
END_TEST

START_TEST(round_to_dtype_rounds_once)
{
    ck_assert(ck_round_to_dtype(1.0 + 0x1p-11 + 0x1p-40, CK_F16) == 1.0 + 0x1p-10);
    ck_assert(ck_round_to_dtype(1.0 + 0x1p-8 + 0x1p-40, CK_BF16) == 1.0 + 0x1p-7);
    ck_assert(ck_round_to_dtype(1.0 + 0x1p-40, CK_F32) == 1.0);
    ck_assert(ck_round_to_dtype(1.0 + 0x1p-40, CK_F64) == 1.0 + 0x1p-40);
    ck_assert(isinf(ck_round_to_dtype(1e5, CK_F16)));
    ck_assert(isnan(ck_round_to_dtype(NAN, CK_BF16)));
}
END_TEST

/* The formula calibration.h replaced (three libm calls): the oracle for its bit trick. */
static double round_significand_libm(double x, int bits)
{
    if (x == 0.0 || !isfinite(x))
        return x;
    int ex;
    double m = frexp(x, &ex);
    return ldexp(nearbyint(ldexp(m, bits)), ex - bits);
}

static void assert_same_rounding(double x, int bits)
{
    double got = ck_round_significand(x, bits), want = round_significand_libm(x, bits);
    uint64_t g, w;
    memcpy(&g, &got, sizeof g);
    memcpy(&w, &want, sizeof w);
    ck_assert_msg(g == w || (isnan(got) && isnan(want)),
                  "round %a to %d bits: %a, the libm formula gives %a", x, bits, got, want);
}

START_TEST(calibration_rounding_matches_the_libm_formula)
{
    static const int bit_counts[] = {11, 8, 1, 24, 52};
    uint64_t st = 0x9E3779B97F4A7C15ull;
    for (int bi = 0; bi < 5; bi++) {
        const int bits = bit_counts[bi];
        /* every float exponent (subnormals included) with random significands, both signs,
         * and the same values times a factor near 1, as the dither makes them */
        for (uint32_t e = 0; e < 255; e++)
            for (int k = 0; k < 512; k++) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t u = (e << 23) | (uint32_t)(st >> 41) | (uint32_t)(k & 1) << 31;
                double x = (double)f32_of(u);
                assert_same_rounding(x, bits);
                assert_same_rounding(x * (1.0 + 0x1p-11 * ((double)(st >> 11) * 0x1p-53 * 2 - 1)),
                                     bits);
            }
        /* exact ties (to even, both parities), a significand of all ones (the carry into
         * the exponent), the largest double (rounds up to inf), subnormal doubles */
        for (int k = 0; k < 64; k++) {
            double one_up = ldexp(1.0 + ldexp((double)k, 1 - bits), k - 30);
            assert_same_rounding(one_up + ldexp(1.0, k - 30 - bits), bits);
            assert_same_rounding(-(one_up + ldexp(1.0, k - 30 - bits)), bits);
            assert_same_rounding(nextafter(ldexp(1.0, k), 0.0), bits);
        }
        const double edges[] = {DBL_MAX, -DBL_MAX, DBL_MIN, 0x1p-1070, -0x1.8p-1060, 0.0, -0.0,
                                INFINITY, -INFINITY, 1.0, FLT_MAX, FLT_TRUE_MIN};
        for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++)
            assert_same_rounding(edges[k], bits);
        ck_assert(isnan(ck_round_significand(NAN, bits)));
    }
}
END_TEST

Suite *suite_half(void)
{
    Suite *s = suite_create("half");
    TCase *tc = tcase_create("fp16");
    tcase_add_test(tc, every_f16_pattern_widens_exactly_and_round_trips);
    tcase_add_loop_test(tc, f32_to_f16_boundaries, 0, COUNT(f16_rows));
    tcase_add_test(tc, f16_nan_keeps_its_payload_quietly);
    suite_add_tcase(s, tc);

    tc = tcase_create("bf16");
    tcase_add_test(tc, every_bf16_pattern_widens_exactly_and_round_trips);
    tcase_add_loop_test(tc, f32_to_bf16_boundaries, 0, COUNT(bf16_rows));
    suite_add_tcase(s, tc);

    tc = tcase_create("rounding");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, f64_rounds_once_not_through_f32);
    tcase_add_test(tc, f32_sample_matches_exact_rounding);
    tcase_add_test(tc, f64_sample_matches_exact_rounding);
    tcase_add_loop_test(tc, cast_classification, 0, COUNT(class_rows));
    tcase_add_test(tc, round_to_dtype_rounds_once);
    tcase_add_test(tc, calibration_rounding_matches_the_libm_formula);
    suite_add_tcase(s, tc);
    return s;
}
