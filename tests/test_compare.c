/*
 * Tensor comparison on crafted tensors: signed zeros, subnormals, ULP distance across
 * zero, NaN and infinities, the exact tolerance boundary, first bad index, relative L2
 * with a zero reference, and the fp64, fp16, bf16 and integer variants.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "harness/core/metrics.h"

#define U64MAX UINT64_MAX

/* ---- fp32: one row per crafted case ---- */

typedef struct {
    const char *desc;
    int n;
    float a[4], ref[4];
    double rtol, atol;
    ck_verdict verdict;
    bool bitwise;
    uint64_t max_ulp;
    int64_t n_outside, first_bad;
} f32_row;

static const f32_row f32_rows[] = {
    {"identical", 3, {1.0f, -2.5f, 3e-3f}, {1.0f, -2.5f, 3e-3f}, 0, 0,
     CK_VERDICT_IDENTICAL, true, 0, 0, -1},
    {"-0.0 vs +0.0 is close, not identical, 0 ULP", 2, {-0.0f, 1.0f}, {0.0f, 1.0f}, 0, 0,
     CK_VERDICT_CLOSE, false, 0, 0, -1},
    {"smallest subnormals of opposite sign are 2 ULP apart", 1, {0x1p-149f}, {-0x1p-149f}, 0, 0,
     CK_VERDICT_MISMATCH, false, 2, 1, 0},
    {"1.0 vs its successor is 1 ULP, within rtol", 1, {0x1.000002p0f}, {1.0f}, 1e-6, 0,
     CK_VERDICT_CLOSE, false, 1, 0, -1},
    {"1.0 vs -1.0 counts both magnitudes", 1, {1.0f}, {-1.0f}, 0, 0, CK_VERDICT_MISMATCH,
     false, 2u * 0x3f800000u, 1, 0},
    {"subnormals 256 ULP apart within atol", 2, {0x1p-140f, 0.0f}, {0x1.8p-140f, 0.0f}, 0,
     1e-30, CK_VERDICT_CLOSE, false, 256, 0, -1},
    {"largest subnormal vs smallest normal is 1 ULP", 1, {0x1.fffffcp-127f}, {0x1p-126f}, 0, 0,
     CK_VERDICT_MISMATCH, false, 1, 1, 0},
    {"NaN vs NaN at the same place, same bits", 2, {1.0f, NAN}, {1.0f, NAN}, 0, 0,
     CK_VERDICT_IDENTICAL, true, 0, 0, -1},
    {"NaN vs NaN at the same place, other element close", 2, {NAN, 1.0f}, {NAN, 0x1.000002p0f},
     1e-6, 0, CK_VERDICT_CLOSE, false, 1, 0, -1},
    {"NaN vs number is outside", 3, {1.0f, 2.0f, NAN}, {1.0f, 2.0f, 3.0f}, 1, 1,
     CK_VERDICT_MISMATCH, false, U64MAX, 1, 2},
    {"number vs NaN is outside", 2, {1.0f, 2.0f}, {NAN, 2.0f}, 1, 1, CK_VERDICT_MISMATCH,
     false, U64MAX, 1, 0},
    {"+Inf vs +Inf passes", 2, {INFINITY, 0.0f}, {INFINITY, -0.0f}, 0, 0, CK_VERDICT_CLOSE,
     false, 0, 0, -1},
    {"+Inf vs -Inf is outside", 2, {0.0f, INFINITY}, {0.0f, -INFINITY}, 1, 1,
     CK_VERDICT_MISMATCH, false, U64MAX, 1, 1},
    {"Inf vs FLT_MAX is outside although 1 bit pattern apart", 1, {INFINITY}, {FLT_MAX}, 1, 1,
     CK_VERDICT_MISMATCH, false, U64MAX, 1, 0},
    {"NaN vs Inf is outside", 1, {NAN}, {INFINITY}, 1, 1, CK_VERDICT_MISMATCH, false, U64MAX, 1,
     0},
    {"exactly on the line |a-ref| == atol + rtol*|ref| passes", 1, {1.75f}, {1.0f}, 0.5, 0.25,
     CK_VERDICT_CLOSE, false, 0x600000, 0, -1},
    {"one ULP over the line fails", 1, {0x1.c00002p0f}, {1.0f}, 0.5, 0.25, CK_VERDICT_MISMATCH,
     false, 0x600001, 1, 0},
    {"first bad is the first element outside", 4, {1.0f, 2.0f, 3.0f, 4.0f},
     {1.0f, 2.0f, 3.5f, 5.0f}, 0, 0.1, CK_VERDICT_MISMATCH, false, 0x200000, 2, 2},
};

START_TEST(f32_crafted_rows)
{
    const f32_row *row = &f32_rows[_i];
    ck_metrics m;
    ck_verdict v = ck_compare(CK_F32, row->n, row->a, row->ref, row->rtol, row->atol, &m);
    ck_assert_msg(v == row->verdict, "%s: verdict %s, want %s", row->desc, ck_verdict_name(v),
                  ck_verdict_name(row->verdict));
    ck_assert_msg(m.bitwise == row->bitwise, "%s: bitwise %d", row->desc, m.bitwise);
    ck_assert_msg(m.max_ulp == row->max_ulp, "%s: max_ulp %llu, want %llu", row->desc,
                  (unsigned long long)m.max_ulp, (unsigned long long)row->max_ulp);
    ck_assert_msg(m.n_outside == row->n_outside, "%s: n_outside %lld, want %lld", row->desc,
                  (long long)m.n_outside, (long long)row->n_outside);
    ck_assert_msg(m.first_bad == row->first_bad, "%s: first_bad %lld, want %lld", row->desc,
                  (long long)m.first_bad, (long long)row->first_bad);
    ck_assert_msg(m.numel == row->n, "%s: numel %lld", row->desc, (long long)m.numel);
}
END_TEST

/* ---- fp32: metric values ---- */

START_TEST(f32_metrics_have_exact_values)
{
    const float a[] = {1.0f, 2.0f, 3.0f, 4.0f};
    const float ref[] = {1.0f, 2.0f, 3.5f, 5.0f};
    ck_metrics m;
    ck_compare(CK_F32, 4, a, ref, 0, 0, &m);
    ck_assert_double_eq(m.max_abs, 1.0);
    ck_assert_double_eq(m.max_rel, 1.0 / 5.0); /* larger than 0.5 / 3.5 */
    /* ||(0, 0, -0.5, -1)|| / ||(1, 2, 3.5, 5)|| */
    double want = sqrt(0.25 + 1.0) / sqrt(1.0 + 4.0 + 12.25 + 25.0);
    ck_assert_double_eq_tol(m.rel_l2, want, 1e-15);
    ck_assert_int_eq(m.nan_a + m.nan_ref + m.inf_a + m.inf_ref, 0);
}
END_TEST

START_TEST(non_finite_pairs_are_counted_and_left_out_of_norms)
{
    const float a[] = {NAN, 1.5f, INFINITY, NAN};
    const float ref[] = {NAN, 1.0f, INFINITY, 2.0f};
    ck_metrics m;
    ck_verdict v = ck_compare(CK_F32, 4, a, ref, 0, 1, &m);
    ck_assert_int_eq(v, CK_VERDICT_MISMATCH);
    ck_assert_int_eq(m.nan_a, 2);
    ck_assert_int_eq(m.nan_ref, 1);
    ck_assert_int_eq(m.inf_a, 1);
    ck_assert_int_eq(m.inf_ref, 1);
    ck_assert_int_eq(m.n_outside, 1);
    ck_assert_int_eq(m.first_bad, 3);
    ck_assert_double_eq(m.max_abs, 0.5);
    ck_assert_double_eq(m.max_rel, 0.5);
    ck_assert_double_eq(m.rel_l2, 0.5);
}
END_TEST

START_TEST(rel_l2_with_zero_reference)
{
    const float zeros[] = {0.0f, 0.0f};
    const float negzeros[] = {-0.0f, 0.0f};
    const float tiny[] = {0.0f, 0x1p-149f};
    ck_metrics m;
    ck_compare(CK_F32, 2, negzeros, zeros, 0, 0, &m);
    ck_assert_double_eq(m.rel_l2, 0.0);
    ck_assert_double_eq(m.max_rel, 0.0); /* ref == 0 everywhere: no relative error */
    ck_compare(CK_F32, 2, tiny, zeros, 0, 0, &m);
    ck_assert(isinf(m.rel_l2) && m.rel_l2 > 0);
    ck_assert_double_eq(m.max_rel, 0.0);
    ck_assert_double_eq(m.max_abs, 0x1p-149);
}
END_TEST

START_TEST(empty_tensors_are_identical)
{
    ck_metrics m;
    memset(&m, 0xab, sizeof m);
    ck_verdict v = ck_compare(CK_F32, 0, NULL, NULL, 0, 0, &m);
    ck_assert_int_eq(v, CK_VERDICT_IDENTICAL);
    ck_assert(m.bitwise);
    ck_assert_int_eq(m.numel, 0);
    ck_assert_int_eq(m.n_outside, 0);
    ck_assert_int_eq(m.first_bad, -1);
    ck_assert_uint_eq(m.max_ulp, 0);
    ck_assert_double_eq(m.rel_l2, 0.0);
}
END_TEST

/* ---- fp64 ---- */

typedef struct {
    const char *desc;
    int n;
    double a[3], ref[3];
    double rtol, atol;
    ck_verdict verdict;
    uint64_t max_ulp;
    int64_t n_outside, first_bad;
} f64_row;

static const f64_row f64_rows[] = {
    {"identical", 2, {1.0, -3.25}, {1.0, -3.25}, 0, 0, CK_VERDICT_IDENTICAL, 0, 0, -1},
    {"-0.0 vs +0.0", 1, {-0.0}, {0.0}, 0, 0, CK_VERDICT_CLOSE, 0, 0, -1},
    {"smallest subnormals across zero", 1, {0x1p-1074}, {-0x1p-1074}, 0, 0,
     CK_VERDICT_MISMATCH, 2, 1, 0},
    {"1.0 vs successor", 1, {0x1.0000000000001p0}, {1.0}, 1e-15, 0, CK_VERDICT_CLOSE, 1, 0, -1},
    {"-DBL_MAX vs DBL_MAX: overflowing difference is outside", 1, {-DBL_MAX}, {DBL_MAX}, 1, 0,
     CK_VERDICT_MISMATCH, 2 * UINT64_C(0x7fefffffffffffff), 1, 0},
    {"NaN vs number", 2, {0.5, NAN}, {0.5, 0.5}, 1, 1, CK_VERDICT_MISMATCH, U64MAX, 1, 1},
    {"-Inf vs -Inf", 1, {-INFINITY}, {-INFINITY}, 0, 0, CK_VERDICT_IDENTICAL, 0, 0, -1},
    {"on the line passes", 1, {1.75}, {1.0}, 0.5, 0.25, CK_VERDICT_CLOSE, UINT64_C(0xc000000000000),
     0, -1},
    {"one ULP over fails", 1, {0x1.c000000000001p0}, {1.0}, 0.5, 0.25, CK_VERDICT_MISMATCH,
     UINT64_C(0xc000000000001), 1, 0},
};

START_TEST(f64_crafted_rows)
{
    const f64_row *row = &f64_rows[_i];
    ck_metrics m;
    ck_verdict v = ck_compare(CK_F64, row->n, row->a, row->ref, row->rtol, row->atol, &m);
    ck_assert_msg(v == row->verdict, "%s: verdict %s, want %s", row->desc, ck_verdict_name(v),
                  ck_verdict_name(row->verdict));
    ck_assert_msg(m.max_ulp == row->max_ulp, "%s: max_ulp %llu, want %llu", row->desc,
                  (unsigned long long)m.max_ulp, (unsigned long long)row->max_ulp);
    ck_assert_msg(m.n_outside == row->n_outside, "%s: n_outside %lld", row->desc,
                  (long long)m.n_outside);
    ck_assert_msg(m.first_bad == row->first_bad, "%s: first_bad %lld", row->desc,
                  (long long)m.first_bad);
}
END_TEST

START_TEST(f64_overflowing_differences_give_infinite_norm)
{
    const double a[] = {-DBL_MAX, -DBL_MAX, 1.0};
    const double ref[] = {DBL_MAX, DBL_MAX, 1.0};
    ck_metrics m;
    ck_compare(CK_F64, 3, a, ref, 0, 0, &m);
    ck_assert(isinf(m.max_abs));
    ck_assert(isinf(m.rel_l2) && m.rel_l2 > 0); /* not NaN from inf / inf */
    ck_assert_int_eq(m.n_outside, 2);
}
END_TEST

/* ---- fp16 and bf16, given as bit patterns ---- */

typedef struct {
    const char *desc;
    ck_dtype dt;
    int n;
    uint16_t a[2], ref[2];
    double rtol, atol;
    ck_verdict verdict;
    uint64_t max_ulp;
    int64_t n_outside;
    double max_abs; /* < 0: not checked (a non-finite pair) */
} half_row;

static const half_row half_rows[] = {
    {"fp16 1.0 vs successor", CK_F16, 1, {0x3c01}, {0x3c00}, 0, 0, CK_VERDICT_MISMATCH, 1, 1,
     0x1p-10},
    {"fp16 -0 vs +0", CK_F16, 1, {0x8000}, {0x0000}, 0, 0, CK_VERDICT_CLOSE, 0, 0, 0.0},
    {"fp16 smallest subnormals across zero", CK_F16, 1, {0x0001}, {0x8001}, 0, 1e-6,
     CK_VERDICT_CLOSE, 2, 0, 0x1p-23},
    {"fp16 largest subnormal vs smallest normal", CK_F16, 1, {0x03ff}, {0x0400}, 0, 0,
     CK_VERDICT_MISMATCH, 1, 1, 0x1p-24},
    {"fp16 decodes 1/3 exactly", CK_F16, 1, {0x3555}, {0x0000}, 0, 1, CK_VERDICT_CLOSE, 0x3555,
     0, 0.333251953125},
    {"fp16 decodes the largest finite value", CK_F16, 1, {0x7bff}, {0x0000}, 0, 1e5,
     CK_VERDICT_CLOSE, 0x7bff, 0, 65504.0},
    {"fp16 max vs Inf is outside", CK_F16, 1, {0x7bff}, {0x7c00}, 1, 1, CK_VERDICT_MISMATCH,
     U64MAX, 1, -1},
    {"fp16 NaN vs NaN with other payload", CK_F16, 2, {0x7e00, 0x3c00}, {0x7e01, 0x3c00}, 0, 0,
     CK_VERDICT_CLOSE, 0, 0, 0.0},
    {"bf16 1.0 vs successor", CK_BF16, 1, {0x3f81}, {0x3f80}, 0, 0, CK_VERDICT_MISMATCH, 1, 1,
     0x1p-7},
    {"bf16 smallest subnormals across zero", CK_BF16, 1, {0x0001}, {0x8001}, 0, 0,
     CK_VERDICT_MISMATCH, 2, 1, 0x1p-132},
    {"bf16 +Inf vs -Inf", CK_BF16, 1, {0x7f80}, {0xff80}, 1, 1, CK_VERDICT_MISMATCH, U64MAX, 1,
     -1},
    {"bf16 NaN vs the same NaN", CK_BF16, 1, {0x7fc0}, {0x7fc0}, 0, 0, CK_VERDICT_IDENTICAL, 0,
     0, 0.0},
};

START_TEST(half_crafted_rows)
{
    const half_row *row = &half_rows[_i];
    ck_metrics m;
    ck_verdict v = ck_compare(row->dt, row->n, row->a, row->ref, row->rtol, row->atol, &m);
    ck_assert_msg(v == row->verdict, "%s: verdict %s, want %s", row->desc, ck_verdict_name(v),
                  ck_verdict_name(row->verdict));
    ck_assert_msg(m.max_ulp == row->max_ulp, "%s: max_ulp %llu, want %llu", row->desc,
                  (unsigned long long)m.max_ulp, (unsigned long long)row->max_ulp);
    ck_assert_msg(m.n_outside == row->n_outside, "%s: n_outside %lld", row->desc,
                  (long long)m.n_outside);
    if (row->max_abs >= 0)
        ck_assert_msg(m.max_abs == row->max_abs, "%s: max_abs %.17g, want %.17g", row->desc,
                      m.max_abs, row->max_abs);
}
END_TEST

/* ---- integers ---- */

START_TEST(integers_compare_exactly)
{
    const int32_t a32[] = {1, 2, 3}, r32[] = {1, 2, 4};
    ck_metrics m;
    /* any tolerance: integers have none */
    ck_assert_int_eq(ck_compare(CK_I32, 3, a32, r32, 1.0, 10.0, &m), CK_VERDICT_MISMATCH);
    ck_assert_int_eq(m.n_outside, 1);
    ck_assert_int_eq(m.first_bad, 2);
    ck_assert_double_eq(m.max_abs, 1.0);
    ck_assert_double_eq(m.max_rel, 0.25);
    ck_assert_uint_eq(m.max_ulp, 1);
    ck_assert_int_eq(ck_compare(CK_I32, 2, a32, r32, 0, 0, &m), CK_VERDICT_IDENTICAL);

    /* above 2^53 a double cannot tell these apart; the comparison still must */
    const int64_t a64[] = {INT64_C(1) << 62, 7}, r64[] = {(INT64_C(1) << 62) + 1, 7};
    ck_assert_int_eq(ck_compare(CK_I64, 2, a64, r64, 0, 0, &m), CK_VERDICT_MISMATCH);
    ck_assert_int_eq(m.n_outside, 1);
    ck_assert_int_eq(m.first_bad, 0);
    ck_assert_uint_eq(m.max_ulp, 1);

    const int64_t lo[] = {INT64_MIN}, hi[] = {INT64_MAX};
    ck_compare(CK_I64, 1, lo, hi, 0, 0, &m);
    ck_assert_uint_eq(m.max_ulp, UINT64_MAX); /* the true distance, 2^64 - 1 */
    ck_assert_int_eq(m.n_outside, 1);
}
END_TEST

/* ---- the scalar helpers ---- */

/* Bitwise-equal tensors skip the element loop (only the NaN and infinity counts are
 * taken). The same values with one +0 turned into -0 are no longer bitwise equal, so they
 * go through the loop: every metric but `bitwise` and the verdict must come out the same,
 * in every float dtype and with every kind of value in the tensor. */
static void expect_same_metrics(const ck_metrics *fast, const ck_metrics *slow)
{
    ck_assert(fast->bitwise && !slow->bitwise);
    ck_assert_int_eq(fast->numel, slow->numel);
    ck_assert(fast->max_abs == slow->max_abs && fast->max_rel == slow->max_rel);
    ck_assert(fast->rel_l2 == slow->rel_l2 && fast->max_ratio == slow->max_ratio);
    ck_assert_uint_eq(fast->max_ulp, slow->max_ulp);
    ck_assert_int_eq(fast->n_outside, slow->n_outside);
    ck_assert_int_eq(fast->first_bad, slow->first_bad);
    ck_assert_int_eq(fast->nan_a, slow->nan_a);
    ck_assert_int_eq(fast->nan_ref, slow->nan_ref);
    ck_assert_int_eq(fast->inf_a, slow->inf_a);
    ck_assert_int_eq(fast->inf_ref, slow->inf_ref);
}

START_TEST(bitwise_path_matches_the_element_loop)
{
    const float f32[] = {0.0f, 1.5f, NAN, -INFINITY, 0x1p-149f, -FLT_MAX, INFINITY, -NAN, 3.0f};
    /* 73 elements: fp32 is counted in blocks of 64 and then one by one */
    enum { n = 73 };
    float a32[n], b32[n];
    for (int i = 0; i < n; i++)
        a32[i] = b32[i] = f32[i % 9];
    ck_metrics fast, slow;
    ck_assert_int_eq(ck_compare(CK_F32, n, a32, b32, 1e-5, 1e-8, &fast), CK_VERDICT_IDENTICAL);
    ck_assert_int_eq(fast.nan_a, 2 * 8); /* two in the nine values, two of them past 64 */
    ck_assert_int_eq(fast.inf_a, 2 * 8);
    b32[0] = -0.0f;
    ck_assert_int_eq(ck_compare(CK_F32, n, a32, b32, 1e-5, 1e-8, &slow), CK_VERDICT_CLOSE);
    expect_same_metrics(&fast, &slow);

    const double f64[] = {0.0, -DBL_MAX, NAN, INFINITY, 0x1p-1074, 2.0};
    double a64[6], b64[6];
    memcpy(a64, f64, sizeof a64);
    memcpy(b64, f64, sizeof b64);
    ck_assert_int_eq(ck_compare(CK_F64, 6, a64, b64, 0, 0, &fast), CK_VERDICT_IDENTICAL);
    b64[0] = -0.0;
    ck_assert_int_eq(ck_compare(CK_F64, 6, a64, b64, 0, 0, &slow), CK_VERDICT_CLOSE);
    expect_same_metrics(&fast, &slow);
    ck_assert_int_eq(fast.nan_a, 1);
    ck_assert_int_eq(fast.inf_a, 1);

    /* fp16 and bf16 bit patterns: +0, 1.0, NaN, -Inf, the smallest subnormal */
    const uint16_t h16[] = {0x0000, 0x3c00, 0x7e01, 0xfc00, 0x0001};
    const uint16_t b16[] = {0x0000, 0x3f80, 0x7fc1, 0xff80, 0x0001};
    for (int d = 0; d < 2; d++) {
        uint16_t a[5], b[5];
        memcpy(a, d ? b16 : h16, sizeof a);
        memcpy(b, d ? b16 : h16, sizeof b);
        const ck_dtype dt = d ? CK_BF16 : CK_F16;
        ck_assert_int_eq(ck_compare(dt, 5, a, b, 0, 0, &fast), CK_VERDICT_IDENTICAL);
        b[0] = 0x8000;
        ck_assert_int_eq(ck_compare(dt, 5, a, b, 0, 0, &slow), CK_VERDICT_CLOSE);
        expect_same_metrics(&fast, &slow);
        ck_assert_int_eq(fast.nan_a, 1);
        ck_assert_int_eq(fast.inf_ref, 1);
    }
}
END_TEST

START_TEST(ulp_distance_helpers)
{
    ck_assert_uint_eq(ck_ulp_distance_f32(0.0f, -0.0f), 0);
    ck_assert_uint_eq(ck_ulp_distance_f32(1.0f, nextafterf(1.0f, 2.0f)), 1);
    ck_assert_uint_eq(ck_ulp_distance_f32(nextafterf(1.0f, 2.0f), 1.0f), 1);
    ck_assert_uint_eq(ck_ulp_distance_f32(FLT_TRUE_MIN, -FLT_TRUE_MIN), 2);
    ck_assert_uint_eq(ck_ulp_distance_f32(-1.0f, 1.0f), 2u * 0x3f800000u);
    ck_assert_uint_eq(ck_ulp_distance_f32(NAN, 1.0f), UINT64_MAX);
    ck_assert_uint_eq(ck_ulp_distance_f64(0.0, -0.0), 0);
    ck_assert_uint_eq(ck_ulp_distance_f64(1.0, nextafter(1.0, 0.0)), 1);
    ck_assert_uint_eq(ck_ulp_distance_f64(DBL_TRUE_MIN, -DBL_TRUE_MIN), 2);
    ck_assert_uint_eq(ck_ulp_distance_f64(-DBL_MAX, DBL_MAX), 2 * UINT64_C(0x7fefffffffffffff));
    ck_assert_uint_eq(ck_ulp_distance_f64(1.0, NAN), UINT64_MAX);
}
END_TEST

START_TEST(verdict_names)
{
    ck_assert_str_eq(ck_verdict_name(CK_VERDICT_IDENTICAL), "identical");
    ck_assert_str_eq(ck_verdict_name(CK_VERDICT_CLOSE), "close");
    ck_assert_str_eq(ck_verdict_name(CK_VERDICT_MISMATCH), "mismatch");
}
END_TEST

#define ROWS(t) (int)(sizeof(t) / sizeof((t)[0]))

Suite *suite_compare(void)
{
    Suite *s = suite_create("compare");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, f32_crafted_rows, 0, ROWS(f32_rows));
    tcase_add_test(tc, f32_metrics_have_exact_values);
    tcase_add_test(tc, non_finite_pairs_are_counted_and_left_out_of_norms);
    tcase_add_test(tc, rel_l2_with_zero_reference);
    tcase_add_test(tc, empty_tensors_are_identical);
    tcase_add_loop_test(tc, f64_crafted_rows, 0, ROWS(f64_rows));
    tcase_add_test(tc, f64_overflowing_differences_give_infinite_norm);
    tcase_add_loop_test(tc, half_crafted_rows, 0, ROWS(half_rows));
    tcase_add_test(tc, integers_compare_exactly);
    tcase_add_test(tc, bitwise_path_matches_the_element_loop);
    tcase_add_test(tc, ulp_distance_helpers);
    tcase_add_test(tc, verdict_names);
    suite_add_tcase(s, tc);
    return s;
}
