/*
 * The precision judgement (harness/verify/precision_judge.h), vacuity
 * (harness/verify/vacuity.h) and the linear/conv init schemes: table-free unit tests on
 * hand-made records, then end to end on small cases.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/engine/train.h"
#include "harness/model/case.h"
#include "harness/verify/precision_cause.h"
#include "harness/verify/precision_judge.h"
#include "harness/verify/run_case.h"
#include "harness/verify/vacuity.h"
#include "reports/report.h"
#include "tests/test_util.h"

/* Why a run or a result is vacuous, as the reports word it. */
static const char *vacuity_text(const ck_vacuity *v)
{
    static char buf[CK_REPORT_LINE_MAX];
    ck_report_vacuity_text(v, buf, sizeof buf);
    return buf;
}

static const char *vacuous_reason(const ck_result *r)
{
    static char buf[CK_REPORT_LINE_MAX];
    ck_report_vacuous_reason(r, buf, sizeof buf);
    return buf;
}

static ck_record_entry entry(const char *name, ck_tensor_kind kind, int step, float *data,
                             int64_t n)
{
    ck_record_entry e;
    memset(&e, 0, sizeof e);
    e.name = (char *)name;
    e.kind = kind;
    e.step = step;
    e.dtype = CK_F32;
    e.shape = ck_shape_make(1, &n);
    e.data = data;
    return e;
}

static ck_case no_tolerance_case(void)
{
    ck_case c;
    memset(&c, 0, sizeof c);
    c.rtol = 1.3e-6;
    c.atol = 1e-5;
    c.fp16_rtol = 1e-3;
    c.fp16_atol = 1e-5;
    c.bf16_rtol = 1.6e-2;
    c.bf16_atol = 1e-5;
    c.fp16_rel_l2 = c.bf16_rel_l2 = -1.0;
    return c;
}

START_TEST(calibrated_bound_is_k_times_the_spread_or_the_floor)
{
    ck_case c = no_tolerance_case();
    float ref[4] = {1.0f, -2.0f, 3.0f, 4.0f};
    float cal[4] = {1.01f, -2.0f, 3.0f, 4.0f};  /* spread 0.01 / ||ref|| = 1.8e-3 */
    float ok[4] = {1.05f, -2.0f, 3.0f, 4.0f};   /* 5x the spread: within K = 8 */
    float bad[4] = {1.2f, -2.0f, 3.0f, 4.0f};   /* 20x: outside */
    ck_record_entry r = entry("fc.weight", CK_KIND_GRAD, 0, ref, 4);
    ck_record_entry ce = entry("fc.weight", CK_KIND_GRAD, 0, cal, 4);
    const ck_record_entry *cals[1] = {&ce};
    ck_record_entry a = entry("fc.weight", CK_KIND_GRAD, 0, ok, 4);
    ck_tensor_result tr;
    memset(&tr, 0, sizeof tr);
    ck_precision_judge_tensor(&c, CK_BF16, &r, cals, 1, &a, 5.0, 0.0, NULL, &tr);
    /* bf16: u = 2^-8 = 0.0039 > spread 0.0018: the floor sets the bound */
    ck_assert_int_eq(tr.bound_source, CK_BOUND_CALIBRATED);
    ck_assert_double_eq_tol(tr.bound, 8.0 / 256.0, 1e-12);
    ck_assert_int_eq(tr.verdict, CK_VERDICT_CLOSE);
    ck_precision_judge_tensor(&c, CK_F16, &r, cals, 1, &a, 5.0, 0.0, NULL, &tr);
    double norm = sqrt(1.0 + 4.0 + 9.0 + 16.0);
    ck_assert_double_eq_tol(tr.spread, 0.01 / norm, 1e-7);
    ck_assert_double_eq_tol(tr.bound, CK_PRECISION_K * 0.01 / norm, 1e-7);
    ck_assert_int_eq(tr.verdict, CK_VERDICT_CLOSE);
    a.data = bad;
    ck_precision_judge_tensor(&c, CK_F16, &r, cals, 1, &a, 5.0, 0.0, NULL, &tr);
    ck_assert_int_eq(tr.verdict, CK_VERDICT_MISMATCH);
    ck_assert_double_eq_tol(tr.error, 0.2 / norm, 1e-7);
    /* after an update (a parameter, or a later step) K is CK_PRECISION_K_UPDATED */
    ck_record_entry r1 = entry("fc.weight", CK_KIND_PARAM, 0, ref, 4);
    ck_record_entry c1 = entry("fc.weight", CK_KIND_PARAM, 0, cal, 4);
    const ck_record_entry *cals1[1] = {&c1};
    ck_precision_judge_tensor(&c, CK_F16, &r1, cals1, 1, &a, 5.0, 0.0, NULL, &tr);
    ck_assert_double_eq_tol(tr.bound, CK_PRECISION_K_UPDATED * 0.01 / norm, 1e-7);
    ck_assert_int_eq(tr.verdict, CK_VERDICT_CLOSE);
}
END_TEST

START_TEST(noise_tensors_are_judged_against_the_step_gradient_norm)
{
    ck_case c = no_tolerance_case();
    float ref[2] = {1e-9f, -1e-9f}; /* a mathematically zero gradient: rounding noise */
    float cal[2] = {-2e-9f, 1e-9f};
    float low[2] = {3e-4f, -2e-4f};
    ck_record_entry r = entry("conv.bias", CK_KIND_GRAD, 0, ref, 2);
    ck_record_entry ce = entry("conv.bias", CK_KIND_GRAD, 0, cal, 2);
    ck_record_entry a = entry("conv.bias", CK_KIND_GRAD, 0, low, 2);
    const ck_record_entry *cals[1] = {&ce};
    ck_tensor_result tr;
    memset(&tr, 0, sizeof tr);
    ck_precision_judge_tensor(&c, CK_BF16, &r, cals, 1, &a, 1.0, 0.0, NULL, &tr);
    ck_assert_int_eq(tr.bound_source, CK_BOUND_NORM_RELATIVE);
    ck_assert_int_eq(tr.verdict, CK_VERDICT_CLOSE); /* 3.6e-4 of G <= 8 * 2^-8 */
    ck_precision_judge_tensor(&c, CK_BF16, &r, cals, 1, &a, 1e-3, 0.0, NULL, &tr);
    ck_assert_int_eq(tr.verdict, CK_VERDICT_MISMATCH); /* 0.36 of a small step norm */
}
END_TEST

START_TEST(unmatched_non_finite_values_fail_and_overrides_replace_the_bound)
{
    ck_case c = no_tolerance_case();
    float ref[2] = {1.0f, 2.0f}, low[2] = {1.0f, INFINITY};
    ck_record_entry r = entry("w", CK_KIND_GRAD, 0, ref, 2), a = entry("w", CK_KIND_GRAD, 0, low, 2);
    ck_tensor_result tr;
    memset(&tr, 0, sizeof tr);
    ck_precision_judge_tensor(&c, CK_F16, &r, NULL, 0, &a, 1.0, 0.0, NULL, &tr);
    ck_assert_int_eq(tr.verdict, CK_VERDICT_MISMATCH);
    float near[2] = {1.0f, 2.1f};
    a.data = near;
    ck_precision_override ov = {.set = true, .rtol = 0.0, .atol = 0.0, .rel_l2 = 0.1};
    ck_precision_judge_tensor(&c, CK_F16, &r, NULL, 0, &a, 1.0, 0.0, &ov, &tr);
    ck_assert_int_eq(tr.bound_source, CK_BOUND_OVERRIDE);
    ck_assert_int_eq(tr.verdict, CK_VERDICT_CLOSE);
    ov.rel_l2 = 0.01;
    ck_precision_judge_tensor(&c, CK_F16, &r, NULL, 0, &a, 1.0, 0.0, &ov, &tr);
    ck_assert_int_eq(tr.verdict, CK_VERDICT_MISMATCH);
    c.has_fp16_tol = true;
    c.fp16_rel_l2 = 0.5;
    ck_precision_judge_tensor(&c, CK_F16, &r, NULL, 0, &a, 1.0, 0.0, NULL, &tr);
    ck_assert_int_eq(tr.bound_source, CK_BOUND_CASE);
    ck_assert_int_eq(tr.verdict, CK_VERDICT_CLOSE);
}
END_TEST

START_TEST(vacuity_counts_zero_gradients_and_dead_losses)
{
    float zeros[100] = {0}, alive[100];
    for (int i = 0; i < 100; i++)
        alive[i] = (float)(i + 1) * 1e-6f;
    double losses[1] = {0.5};
    ck_scale_step scales[1] = {{.scale = 1.0, .skipped = false}};
    ck_record_entry e = entry("fc.weight", CK_KIND_GRAD, 0, zeros, 100);
    ck_record rec;
    memset(&rec, 0, sizeof rec);
    rec.n = 1;
    rec.e = &e;
    rec.steps = 1;
    rec.losses = losses;
    rec.scales = scales;
    ck_vacuity v;
    ck_vacuity_measure(&rec, CK_F32, &v);
    ck_assert(v.vacuous);
    ck_assert_int_eq(v.zero, 100);
    ck_assert_ptr_nonnull(strstr(vacuity_text(&v), "100.00% of 100 gradient elements"));
    e.data = alive;
    ck_vacuity_measure(&rec, CK_F32, &v);
    ck_assert(!v.vacuous);
    ck_assert_int_eq(v.zero, 0);
    /* fp32 reads the counts off the bits: -0 is a zero; the smallest and largest
     * subnormals (either sign) are subnormal; FLT_MIN, NaN and infinities are neither */
    float mixed[100];
    memcpy(mixed, alive, sizeof mixed);
    mixed[0] = -0.0f;
    mixed[1] = 0x1p-149f;
    mixed[2] = -0x1.fffffcp-127f;
    mixed[3] = FLT_MIN;
    mixed[4] = NAN;
    mixed[5] = -INFINITY;
    /* and past the blocks of 64 the count goes element by element */
    mixed[96] = -0.0f;
    mixed[97] = 0x1p-149f;
    mixed[98] = FLT_MIN;
    mixed[99] = NAN;
    e.data = mixed;
    ck_vacuity_measure(&rec, CK_F32, &v);
    ck_assert_int_eq(v.zero, 2);
    ck_assert_int_eq(v.subnormal, 3);
    e.data = alive;
    /* fp16: |g * scale| below 2^-14 was subnormal in the low dtype */
    ck_vacuity_measure(&rec, CK_F16, &v);
    ck_assert_int_eq(v.subnormal, 61); /* 1e-6 .. 6.1e-5 */
    ck_assert(!v.vacuous);
    losses[0] = 0.0;
    ck_vacuity_measure(&rec, CK_F32, &v);
    ck_assert(v.vacuous);
    ck_assert_ptr_nonnull(strstr(vacuity_text(&v), "exactly 0"));
    losses[0] = NAN;
    ck_vacuity_measure(&rec, CK_F32, &v);
    ck_assert(v.vacuous);
    ck_assert_ptr_nonnull(strstr(vacuity_text(&v), "not finite"));
}
END_TEST

/* The std of a linear layer's initial weight under each init scheme. */
static double weight_std(const char *init, double *mean_out)
{
    char json[512];
    snprintf(json, sizeof json,
             "{\"name\": \"i\", \"input\": {\"shape\": [2, 256]}, \"layers\": [{\"name\": \"fc\", "
             "\"op\": \"linear\", \"units\": 128, \"init\": \"%s\"}]}", init);
    ck_case c;
    ck_graph g;
    ck_error err;
    ck_assert_msg(ck_case_parse(json, strlen(json), "t.json", &c, &err) == CK_OK, "%s", err.msg);
    ck_assert_msg(ck_graph_build(&c, &g, &err) == CK_OK, "%s", err.msg);
    ck_backend *b = tu_cpu_backend();
    ck_model m;
    ck_assert(ck_model_create(&m, b, &g, CK_F32, &err) == CK_OK);
    ck_assert(ck_model_init(&m, 7, &err) == CK_OK);
    const float *w = m.layers[0].param[0].data;
    const float *bias = m.layers[0].param[1].data;
    double s = 0.0, ss = 0.0;
    int64_t n = 128 * 256;
    for (int64_t i = 0; i < n; i++) {
        s += w[i];
        ss += (double)w[i] * w[i];
    }
    double bs = 0.0;
    for (int i = 0; i < 128; i++)
        bs += fabs(bias[i]);
    *mean_out = bs; /* the biases' total magnitude */
    ck_model_free(&m);
    b->destroy(b);
    ck_graph_free(&g);
    ck_case_free(&c);
    return sqrt(ss / (double)n - (s / (double)n) * (s / (double)n));
}

START_TEST(init_schemes_draw_their_documented_spreads)
{
    double bias;
    ck_assert_double_eq_tol(weight_std("torch_default", &bias), 1.0 / sqrt(3.0 * 256.0), 2e-3);
    ck_assert(bias > 0.0);
    ck_assert_double_eq_tol(weight_std("kaiming_normal", &bias), sqrt(2.0 / 256.0), 2e-3);
    ck_assert(bias == 0.0);
    ck_assert_double_eq_tol(weight_std("kaiming_uniform", &bias), sqrt(2.0 / 256.0), 2e-3);
    ck_assert_double_eq_tol(weight_std("xavier_uniform", &bias), sqrt(2.0 / 384.0), 2e-3);
    ck_assert_double_eq_tol(weight_std("xavier_normal", &bias), sqrt(2.0 / 384.0), 2e-3);
    ck_assert(weight_std("zeros", &bias) == 0.0);
    ck_assert(bias == 0.0);
}
END_TEST

START_TEST(a_dead_model_is_vacuous_and_fails_unless_expected)
{
    const char *json =
        "{\"name\": \"dead\", \"input\": {\"shape\": [4, 8]}, \"layers\": [{\"name\": \"fc\", "
        "\"op\": \"linear\", \"units\": 8, \"init\": \"zeros\"}, {\"name\": \"r\", \"op\": "
        "\"relu\"}], \"loss\": {\"op\": \"mse\"}, \"checkpoint\": {\"every\": 1}, \"expect\": "
        "\"identical\"}";
    ck_case c;
    ck_graph g;
    ck_error err;
    ck_assert(ck_case_parse(json, strlen(json), "t.json", &c, &err) == CK_OK);
    ck_assert(ck_graph_build(&c, &g, &err) == CK_OK);
    ck_backend *b = tu_cpu_backend();
    ck_result r;
    ck_assert_msg(ck_run_case(b, &g, CK_F32, &r, &err) == CK_OK, "%s", err.msg);
    ck_assert(r.verdict == CK_VERDICT_IDENTICAL); /* bitwise identical, and meaningless */
    ck_assert(r.vacuous);
    ck_assert(!r.pass);
    ck_assert_ptr_nonnull(strstr(vacuous_reason(&r), "plain run"));
    cJSON *j = ck_report_to_json(&r, NULL);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "status")->valuestring, "vacuous");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "vacuous")));
    cJSON_Delete(j);
    char *text = ck_report_json_string(&r, NULL);
    ck_assert_ptr_nonnull(strstr(text, "\"zero_fraction\":\t1"));
    free(text);
    ck_result_free(&r);
    c.expect_vacuous = true;
    ck_assert(ck_run_case(b, &g, CK_F32, &r, &err) == CK_OK);
    ck_assert(r.vacuous && r.pass);
    ck_result_free(&r);
    b->destroy(b);
    ck_graph_free(&g);
    ck_case_free(&c);
}
END_TEST

/* the dominant cause of a low-precision failure: overflow, then a low-dtype reduction,
 * then underflow from 1% of the gradient values, else none */
START_TEST(a_low_precision_failure_names_its_dominant_cause)
{
    ck_case cs;
    memset(&cs, 0, sizeof cs);
    ck_tensor_result rows[2];
    memset(rows, 0, sizeof rows);
    ck_scale_step scales[4];
    memset(scales, 0, sizeof scales);
    static const struct {
        const char *desc;
        int64_t overflow, flushed, subnormal;
        int skipped;
        bool reduction_low, scaled;
        ck_lowp_cause_kind want;
    } cases[] = {
        {"nothing measured", 0, 0, 9, 0, false, false, CK_LOWP_CAUSE_NONE},
        {"1% underflow", 0, 6, 4, 0, false, false, CK_LOWP_CAUSE_UNDERFLOW},
        {"just under 1%", 0, 5, 4, 0, false, true, CK_LOWP_CAUSE_NONE},
        {"a skipped step is overflow", 0, 600, 0, 1, false, true, CK_LOWP_CAUSE_OVERFLOW},
        {"an inf is overflow", 3, 0, 0, 0, true, false, CK_LOWP_CAUSE_OVERFLOW},
        {"a low reduction before underflow", 0, 600, 0, 0, true, false,
         CK_LOWP_CAUSE_LOW_REDUCTION},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_result r;
        memset(&r, 0, sizeof r);
        cs.reduction_low = cases[i].reduction_low;
        cs.loss_scale = cases[i].scaled ? CK_SCALE_DYNAMIC : CK_SCALE_NONE;
        r.cs = &cs;
        r.has_vs_fp32 = true;
        rows[0].cast_overflow = cases[i].overflow;
        r.vs_fp32 = rows;
        r.n_vs_fp32 = 2;
        scales[2].skipped = cases[i].skipped > 0;
        r.plain.scales = scales;
        r.plain.steps = 4;
        r.plain.vacuity = (ck_vacuity){.elements = 1000, .flushed = cases[i].flushed,
                                       .subnormal = cases[i].subnormal};
        ck_lowp_cause c;
        ck_lowp_cause_find(&r, &c);
        ck_assert_msg(c.kind == cases[i].want, "%s: cause %d, want %d", cases[i].desc, c.kind,
                      cases[i].want);
        ck_assert_msg(c.overflowed == cases[i].overflow && c.skipped_steps == cases[i].skipped &&
                          c.steps == 4 && c.loss_scaled == cases[i].scaled,
                      "%s: counts", cases[i].desc);
    }
}
END_TEST

/* The distances measured once per tensor (ck_calib_distances_of) give the step's spread S
 * and gradient norm G and every tensor's judgement exactly as measuring them where each is
 * used (ck_step_spread_at, ck_step_grad_norm_at, ck_precision_judge_tensor), bit for bit,
 * through a non-finite value and a parameter entry (not part of S or G) */
START_TEST(distances_measured_once_give_the_same_numbers)
{
    enum { N = 37, E = 3, R = CK_PRECISION_CALIB_RUNS };
    static float v[R + 2][E][N]; /* fp32, the calibration runs, the low run */
    for (int r = 0; r < R + 2; r++)
        for (int k = 0; k < E; k++)
            for (int i = 0; i < N; i++)
                v[r][k][i] = (float)sin(1.0 + i * 0.37 + k) *
                             (1.0f + 1e-3f * (float)cos(r * 7.1 + i));
    v[1][1][4] = INFINITY;
    v[R + 1][2][5] = NAN;
    static const char *names[E] = {"a.weight", "b.weight", "a.weight"};
    const ck_tensor_kind kinds[E] = {CK_KIND_GRAD, CK_KIND_GRAD, CK_KIND_PARAM};
    ck_record_entry e[R + 2][E];
    ck_record rec[R + 2];
    memset(rec, 0, sizeof rec);
    for (int r = 0; r < R + 2; r++) {
        for (int k = 0; k < E; k++)
            e[r][k] = entry(names[k], kinds[k], 1, v[r][k], N);
        rec[r].e = e[r];
        rec[r].n = E;
        rec[r].steps = 2;
    }
    ck_calib_distances dist[E];
    for (int k = 0; k < E; k++) {
        const ck_record_entry *ce[R];
        for (int c = 0; c < R; c++)
            ce[c] = &e[1 + c][k];
        ck_calib_distances_of(&e[0][k], ce, R, kinds[k] == CK_KIND_GRAD, &dist[k]);
    }
    const double s_at = ck_step_spread_at(&rec[0], &rec[1], R, 1);
    const double s_of = ck_step_spread_of(&rec[0], dist, R, 1);
    const double g_at = ck_step_grad_norm_at(&rec[0], 1);
    const double g_of = ck_step_grad_norm_of(&rec[0], dist, 1);
    ck_assert_msg(memcmp(&s_at, &s_of, sizeof s_at) == 0 && s_at > 0.0, "S %a vs %a", s_at, s_of);
    ck_assert_msg(memcmp(&g_at, &g_of, sizeof g_at) == 0 && g_at > 0.0, "G %a vs %a", g_at, g_of);
    ck_case c = no_tolerance_case();
    for (int k = 0; k < E; k++) {
        const ck_record_entry *ce[R];
        for (int cc = 0; cc < R; cc++)
            ce[cc] = &e[1 + cc][k];
        ck_tensor_result a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        ck_precision_judge_tensor(&c, CK_F16, &e[0][k], ce, R, &e[R + 1][k], g_at, s_at, NULL, &a);
        ck_precision_judge_measured(&c, CK_F16, &e[0][k], &dist[k], &e[R + 1][k], g_of, s_of,
                                    NULL, &b);
        ck_assert_msg(a.verdict == b.verdict && a.bound_source == b.bound_source &&
                          memcmp(&a.error, &b.error, sizeof a.error) == 0 &&
                          memcmp(&a.bound, &b.bound, sizeof a.bound) == 0 &&
                          memcmp(&a.spread, &b.spread, sizeof a.spread) == 0,
                      "entry %d: error %a/%a bound %a/%a spread %a/%a", k, a.error, b.error,
                      a.bound, b.bound, a.spread, b.spread);
    }
}
END_TEST

Suite *suite_precision_judge(void)
{
    Suite *s = suite_create("precision_judge");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, calibrated_bound_is_k_times_the_spread_or_the_floor);
    tcase_add_test(tc, distances_measured_once_give_the_same_numbers);
    tcase_add_test(tc, a_low_precision_failure_names_its_dominant_cause);
    tcase_add_test(tc, noise_tensors_are_judged_against_the_step_gradient_norm);
    tcase_add_test(tc, unmatched_non_finite_values_fail_and_overrides_replace_the_bound);
    tcase_add_test(tc, vacuity_counts_zero_gradients_and_dead_losses);
    tcase_add_test(tc, init_schemes_draw_their_documented_spreads);
    tcase_add_test(tc, a_dead_model_is_vacuous_and_fails_unless_expected);
    suite_add_tcase(s, tc);
    return s;
}
