/*
 * Mixed precision end to end: plain vs checkpointed bitwise identical in fp16 and bf16 for
 * every shipped non-canary case, the autocast `drop` canary caught with its cause, dynamic
 * loss scaling skipping exactly the steps whose gradients overflowed, fp16 underflow shown
 * by the flushed-to-zero counts, loss-scale decisions that differ failing on their own, and
 * the case-file keys of the precision features.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/verify/judge.h"
#include "harness/verify/run_case.h"
#include "backends/backend.h"
#include "harness/verify/bisect.h"
#include "reports/report.h"
#include "tests/test_util.h"

static const ck_tensor_result *find(const ck_tensor_result *t, int n, const char *name,
                                    ck_tensor_kind kind, int step)
{
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0 && t[i].kind == kind && t[i].step == step)
            return &t[i];
    return NULL;
}

/* ---------------------------------------------------------------------------------------
 * Invariant 2 in fp16 and bf16
 * --------------------------------------------------------------------------------------- */

START_TEST(every_non_canary_case_is_bitwise_identical_in_fp16_and_bf16)
{
    ck_backend *b = tu_cpu_backend();
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/cases", tu_root());
    DIR *d = opendir(dir);
    ck_assert(d);
    struct dirent *de;
    int checked = 0;
    const ck_dtype dts[] = {CK_F16, CK_BF16};
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".json") != 0 ||
            strncmp(de->d_name, "canary_", 7) == 0)
            continue;
        tu_built_case bc;
        tu_build_file(&bc, de->d_name);
        for (int k = 0; k < 2; k++) {
            ck_result r;
            ck_error err;
            ck_assert_msg(ck_run_case(b, &bc.g, dts[k], &r, &err) == CK_OK, "%s", err.msg);
            ck_assert_msg(r.verdict == CK_VERDICT_IDENTICAL, "%s in %s: plain and checkpointed "
                          "differ (first divergence %d)", de->d_name, ck_dtype_name(dts[k]),
                          r.first_divergence);
            ck_assert_msg(r.scale_mismatches == 0, "%s: loss-scale decisions differ", de->d_name);
            ck_assert(r.has_vs_fp32);
            checked++;
            ck_result_free(&r);
        }
        tu_free_built(&bc);
    }
    closedir(d);
    ck_assert_int_ge(checked, 14);
    b->destroy(b);
}
END_TEST

/* Casts in fp16 and bf16 runs (cases/README.md, `cast`): the value is rounded to the cast's
 * dtype and stored in the run's, the same in both runs, so plain and checkpointed stay
 * bitwise identical; the fp32 reference rounds at the same casts, so the judgement against
 * it passes a healthy model (round trips to float16 and bfloat16, a float16 -> bfloat16
 * chain: tests/fixtures/torch/cases/cast_ops.json) and compares real numbers. */
START_TEST(casts_stay_identical_and_pass_the_judgement_in_fp16_and_bf16)
{
    ck_backend *b = tu_cpu_backend();
    char path[1024], *text = NULL;
    snprintf(path, sizeof path, "%s/tests/fixtures/torch/cases/cast_ops.json", tu_root());
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s", path);
    text = calloc(1, 1 << 16);
    ck_assert(text && fread(text, 1, (1 << 16) - 1, f) > 0);
    fclose(f);
    tu_built_case bc;
    tu_build_named(&bc, text, path);
    free(text);
    const ck_dtype dts[] = {CK_F16, CK_BF16};
    for (int k = 0; k < 2; k++) {
        ck_result r;
        ck_error err;
        ck_assert_msg(ck_run_case(b, &bc.g, dts[k], &r, &err) == CK_OK, "%s", err.msg);
        ck_assert_msg(r.verdict == CK_VERDICT_IDENTICAL, "cast_ops in %s: plain and "
                      "checkpointed differ", ck_dtype_name(dts[k]));
        ck_assert(r.has_vs_fp32);
        ck_assert_msg(r.vs_fp32_verdict != CK_VERDICT_MISMATCH, "cast_ops in %s: judged a "
                      "mismatch against fp32", ck_dtype_name(dts[k]));
        ck_assert_int_gt(r.vs_fp32_judged, 0);
        ck_result_free(&r);
    }
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

/* ---------------------------------------------------------------------------------------
 * autocast_recompute drop
 * --------------------------------------------------------------------------------------- */

START_TEST(autocast_drop_canary_is_caught_with_its_cause)
{
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_file(&bc, "canary_autocast_drop.json");
    ck_assert(bc.cs.autocast == CK_AUTOCAST_DROP);
    ck_result r;
    ck_error err;
    ck_assert(ck_run_case(b, &bc.g, CK_F16, &r, &err) == CK_OK);
    ck_assert(r.verdict == CK_VERDICT_MISMATCH);
    ck_assert(r.pass);
    ck_assert_int_gt(r.ckpt.recomputed_other_dtype, 0);
    ck_assert_int_eq(r.plain.recomputed_other_dtype, 0);
    ck_bisect_opts o = {.noise_floor = true, .localise = true};
    ck_assert_msg(ck_bisect(b, &bc.g, CK_F16, &o, &r, &err) == CK_OK, "%s", err.msg);
    bool found = false;
    for (int i = 0; i < r.bisect->n_causes; i++) {
        char line[CK_BISECT_LINE];
        ck_bisect_cause_text(&bc.g, &r.bisect->causes[i], line, sizeof line);
        found = found || (r.bisect->causes[i].kind == CK_CAUSE_RECOMPUTE_DTYPE &&
                          strstr(line, "recomputed segment ran in fp32, original in fp16"));
    }
    ck_assert_msg(found, "no dtype cause");
    ck_result_free(&r);
    /* in fp32 the policy has nothing to drop: identical, as the case expects there */
    ck_assert(ck_run_case(b, &bc.g, CK_F32, &r, &err) == CK_OK);
    ck_assert(r.verdict == CK_VERDICT_IDENTICAL && r.pass);
    ck_result_free(&r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

/* ---------------------------------------------------------------------------------------
 * Dynamic loss scaling: sum loss, so dL/dy = 1 and the scaled gradient is the scale itself.
 * 2^16 rounds to inf in fp16 (max 65504): step 0 overflows and is skipped, the scale halves;
 * with growth_interval 2 it doubles back after two clean steps and overflows again.
 * --------------------------------------------------------------------------------------- */

static const char *overflow_case =
    "{\"name\": \"overflow\", \"seed\": 2, \"precision\": \"fp16\","
    " \"input\": {\"shape\": [2, 4]}, \"layers\": ["
    "{\"name\": \"fc\", \"op\": \"linear\", \"units\": 3}, {\"name\": \"t\", \"op\": \"tanh\"}],"
    " \"loss\": {\"op\": \"sum\"},"
    " \"train\": {\"steps\": 6, \"optimizer\": \"sgd\", \"lr\": 0.01, \"loss_scale\": \"dynamic\","
    " \"growth_interval\": 2}}";

START_TEST(dynamic_scaling_skips_exactly_the_overflowing_steps)
{
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_text(&bc, overflow_case);
    ck_record rec;
    ck_error err;
    ck_assert_msg(ck_train(b, &bc.g, NULL, CK_F16, NULL, &rec, &err) == CK_OK, "%s", err.msg);
    const double want_scale[6] = {65536, 32768, 32768, 65536, 32768, 32768};
    const bool want_skip[6] = {true, false, false, true, false, false};
    for (int s = 0; s < 6; s++) {
        ck_assert_msg(rec.scales[s].scale == want_scale[s], "step %d: scale %g, want %g", s,
                      rec.scales[s].scale, want_scale[s]);
        /* skipped iff some recorded gradient of that step is not finite */
        bool finite = true;
        for (int k = 0; k < rec.n; k++)
            if (rec.e[k].step == s && rec.e[k].kind == CK_KIND_GRAD)
                finite = finite && ck_all_finite(rec.e[k].dtype, ck_shape_numel(&rec.e[k].shape),
                                                 rec.e[k].data);
        ck_assert_msg(rec.scales[s].skipped == want_skip[s] && rec.scales[s].skipped == !finite,
                      "step %d: skipped %d, finite %d", s, rec.scales[s].skipped, finite);
    }
    /* a skipped step leaves the parameters as they were */
    const ck_record_entry *w0 = NULL, *w3 = NULL, *w2 = NULL;
    for (int k = 0; k < rec.n; k++) {
        if (rec.e[k].kind != CK_KIND_PARAM || strcmp(rec.e[k].name, "fc.weight") != 0)
            continue;
        if (rec.e[k].step == 0)
            w0 = &rec.e[k];
        if (rec.e[k].step == 2)
            w2 = &rec.e[k];
        if (rec.e[k].step == 3)
            w3 = &rec.e[k];
    }
    ck_assert(w0 && w2 && w3);
    ck_assert_int_eq(memcmp(w2->data, w3->data, 12 * sizeof(float)), 0);
    ck_assert_int_ne(memcmp(w0->data, w2->data, 12 * sizeof(float)), 0);
    ck_record_free(&rec);

    /* the same skips in both runs: no loss-scale mismatch */
    ck_result r;
    ck_assert(ck_run_case(b, &bc.g, CK_F16, &r, &err) == CK_OK);
    ck_assert_int_eq(r.scale_mismatches, 0);
    ck_assert(r.plain.scales[0].skipped && r.ckpt.scales[0].skipped);
    ck_result_free(&r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

/* A skipped step is no optimizer step: Adam's bias correction counts applied updates only,
 * so the first applied update after a skip moves every weight by lr (|m_hat / sqrt(v_hat)|
 * is 1 at t = 1), as PyTorch's GradScaler + Adam do. */
START_TEST(skipped_steps_do_not_advance_adam)
{
    static const char *adam_case =
        "{\"name\": \"overflow_adam\", \"seed\": 2, \"precision\": \"fp16\","
        " \"input\": {\"shape\": [2, 4]}, \"layers\": ["
        "{\"name\": \"fc\", \"op\": \"linear\", \"units\": 3}, {\"name\": \"t\", \"op\": \"tanh\"}],"
        " \"loss\": {\"op\": \"sum\"},"
        " \"train\": {\"steps\": 2, \"optimizer\": \"adam\", \"lr\": 0.01,"
        " \"loss_scale\": \"dynamic\"}}";
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_text(&bc, adam_case);
    ck_record rec;
    ck_error err;
    ck_assert_msg(ck_train(b, &bc.g, NULL, CK_F16, NULL, &rec, &err) == CK_OK, "%s", err.msg);
    ck_assert(rec.scales[0].skipped && !rec.scales[1].skipped);
    const ck_record_entry *w[2] = {NULL, NULL}; /* fc.weight after steps 0 and 1 */
    for (int k = 0; k < rec.n; k++)
        if (rec.e[k].kind == CK_KIND_PARAM && strcmp(rec.e[k].name, "fc.weight") == 0 &&
            rec.e[k].step < 2)
            w[rec.e[k].step] = &rec.e[k];
    ck_assert(w[0] && w[1]);
    for (int i = 0; i < 12; i++) {
        double d = fabs((double)((const float *)w[1]->data)[i] - ((const float *)w[0]->data)[i]);
        ck_assert_msg(d > 0.0099 && d < 0.0101, "element %d moved by %g, want lr = 0.01", i, d);
    }
    ck_record_free(&rec);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

START_TEST(differing_scale_decisions_are_a_mismatch_of_their_own)
{
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_text(&bc, overflow_case);
    ck_result r;
    ck_error err;
    ck_assert(ck_run_case(b, &bc.g, CK_F16, &r, &err) == CK_OK);
    ck_assert(r.verdict == CK_VERDICT_IDENTICAL && r.expect_met);
    /* as if the checkpointed run had not overflowed at step 0 */
    r.ckpt.scales[0].skipped = false;
    r.scale_mismatches = 1;
    r.first_scale_mismatch = 0;
    ck_result_judge(&r);
    ck_assert(r.verdict == CK_VERDICT_MISMATCH);
    ck_assert(!r.expect_met && !r.pass);
    char lines[CK_REPORT_MAX_FAILURES][CK_REPORT_LINE_MAX];
    int n = ck_report_failures(&r, lines, CK_REPORT_MAX_FAILURES);
    bool found = false;
    for (int i = 0; i < n; i++)
        found = found || strncmp(lines[i], "loss scale: 1 step where", 24) == 0;
    ck_assert_msg(found, "no loss-scale failure line");
    /* bisect names it as a cause of its own */
    ck_bisect_opts o = {.noise_floor = true, .localise = true};
    ck_assert_msg(ck_bisect(b, &bc.g, CK_F16, &o, &r, &err) == CK_OK, "%s", err.msg);
    found = false;
    for (int i = 0; i < r.bisect->n_causes; i++) {
        char line[CK_BISECT_LINE];
        ck_bisect_cause_text(&bc.g, &r.bisect->causes[i], line, sizeof line);
        found = found || (r.bisect->causes[i].kind == CK_CAUSE_LOSS_SCALER &&
                          strstr(line, "loss scaler decided differently at step 0"));
    }
    ck_assert_msg(found, "no loss-scaler cause");
    ck_result_free(&r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

/* ---------------------------------------------------------------------------------------
 * Underflow
 * --------------------------------------------------------------------------------------- */

START_TEST(fp16_underflow_shows_in_flushed_counts_and_dynamic_scaling_prevents_it)
{
    ck_backend *b = tu_cpu_backend();
    const char *files[2] = {"fp16_underflow_noscale.json", "fp16_underflow_dynamic.json"};
    for (int k = 0; k < 2; k++) {
        tu_built_case bc;
        tu_build_file(&bc, files[k]);
        ck_result r;
        ck_error err;
        ck_assert(ck_run_case(b, &bc.g, CK_F16, &r, &err) == CK_OK);
        ck_assert(r.verdict == CK_VERDICT_IDENTICAL);
        ck_assert(r.pass);
        const ck_tensor_result *g0 = find(r.vs_fp32, r.n_vs_fp32, "fc0.weight", CK_KIND_GRAD, 0);
        ck_assert(g0 != NULL);
        if (k == 0) {
            ck_assert_int_eq(g0->cast_flushed, g0->m.numel); /* every gradient lost */
            ck_assert(g0->verdict == CK_VERDICT_MISMATCH);
            ck_assert(r.vs_fp32_verdict == CK_VERDICT_MISMATCH);
        } else {
            ck_assert_int_le(g0->cast_flushed, g0->m.numel / 100);
            ck_assert(g0->verdict == CK_VERDICT_CLOSE);
            ck_assert(r.vs_fp32_verdict != CK_VERDICT_MISMATCH);
            ck_assert(r.plain.scales[0].scale == 65536.0);
        }
        ck_result_free(&r);
        tu_free_built(&bc);
    }
    b->destroy(b);
}
END_TEST

/* ---------------------------------------------------------------------------------------
 * Case keys
 * --------------------------------------------------------------------------------------- */

static const struct {
    const char *desc, *extra, *want;
} bad_rows[] = {
    {"unknown precision", "\"precision\": \"fp8\"", "precision"},
    {"precision listed twice", "\"precision\": [\"fp16\", \"fp16\"]", "precision[1]"},
    {"scale value without scaling", "\"train\": {\"loss_scale_value\": 8}", "train.loss_scale_value"},
    {"growth interval without dynamic", "\"train\": {\"loss_scale\": \"static\", \"growth_interval\": 3}",
     "train.growth_interval"},
    {"bad autocast policy", "\"policies\": {\"autocast_recompute\": \"keep\"}", "policies.autocast_recompute"},
    {"bad per-dtype expect", "\"expect\": {\"fp64\": \"identical\"}", "expect"},
    {"identical is no precision expectation", "\"expect_precision\": \"identical\"", "expect_precision"},
    {"negative rel_l2", "\"tolerance\": {\"fp16\": {\"rel_l2\": -1}}", "tolerance.fp16.rel_l2"},
    {"unknown tolerance key", "\"tolerance\": {\"fp16\": {\"rtl\": 1}}", "tolerance.fp16"},
};

START_TEST(bad_precision_keys_name_their_json_path)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"name\": \"x\", \"input\": {\"shape\": [2, 3]}, \"layers\": [{\"name\": \"a\", "
             "\"op\": \"relu\"}], %s}",
             bad_rows[_i].extra);
    ck_case c;
    ck_error err;
    ck_assert_msg(ck_case_parse(text, strlen(text), "p.json", &c, &err) == CK_ERR_INPUT,
                  "%s: accepted", bad_rows[_i].desc);
    ck_assert_msg(strncmp(err.msg, "p.json: ", 8) == 0 && strstr(err.msg, bad_rows[_i].want),
                  "%s: %s", bad_rows[_i].desc, err.msg);
}
END_TEST

START_TEST(precision_keys_parse_with_defaults_and_patterns)
{
    const char *text =
        "{\"name\": \"x\", \"input\": {\"shape\": [2, 3]}, \"layers\": [{\"name\": \"a\", "
        "\"op\": \"linear\", \"units\": 2}], \"precision\": [\"fp32\", \"bf16\"],"
        " \"train\": {\"loss_scale\": \"dynamic\"},"
        " \"expect\": {\"bf16\": \"mismatch\"}, \"expect_precision\": {\"fp16\": \"mismatch\"},"
        " \"tolerance\": {\"bf16\": {\"rel_l2\": 0.05}, \"tensors\": {\"grad:a.*\": {\"atol\": 0.5}}}}";
    ck_case c;
    ck_error err;
    ck_assert_msg(ck_case_parse(text, strlen(text), "p.json", &c, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_eq(c.n_precisions, 2);
    ck_assert(c.precisions[0] == CK_F32 && c.precisions[1] == CK_BF16);
    ck_assert(c.loss_scale == CK_SCALE_DYNAMIC);
    ck_assert(c.loss_scale_value == 65536.0 && c.growth_interval == 2000);
    ck_assert(ck_case_expect(&c, CK_BF16) == CK_EXPECT_MISMATCH);
    ck_assert(ck_case_expect(&c, CK_F32) == CK_EXPECT_CLOSE);
    ck_assert(ck_case_expect_vs_fp32(&c, CK_F16) == CK_EXPECT_MISMATCH);
    ck_assert(ck_case_expect_vs_fp32(&c, CK_BF16) == CK_EXPECT_CLOSE);
    double rtol, atol, l2;
    bool from_case;
    ck_case_precision_tolerance(&c, CK_BF16, "grad", "a.weight", &rtol, &atol, &l2, &from_case);
    ck_assert(atol == 0.5 && l2 < 0 && from_case);
    ck_case_precision_tolerance(&c, CK_BF16, "param", "a.weight", &rtol, &atol, &l2, &from_case);
    ck_assert(rtol == 1.6e-2 && atol == 1e-5 && l2 == 0.05 && from_case);
    /* no tolerance.fp16 in this case: the calibrated default judges fp16 */
    ck_case_precision_tolerance(&c, CK_F16, "param", "a.weight", &rtol, &atol, &l2, &from_case);
    ck_assert(rtol == 1e-3 && atol == 1e-5 && l2 < 0 && !from_case);
    ck_case_free(&c);
}
END_TEST

/* ---------------------------------------------------------------------------------------
 * Judging
 * --------------------------------------------------------------------------------------- */

START_TEST(expectations_accept_exactly_their_verdicts)
{
    static const struct {
        ck_expect e;
        bool met[3]; /* identical, close, mismatch */
    } rows[] = {
        {CK_EXPECT_IDENTICAL, {true, false, false}},
        {CK_EXPECT_CLOSE, {true, true, false}},
        {CK_EXPECT_MISMATCH, {false, false, true}},
    };
    ck_verdict v[3] = {CK_VERDICT_IDENTICAL, CK_VERDICT_CLOSE, CK_VERDICT_MISMATCH};
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 3; k++)
            ck_assert_msg(ck_expectation_met(rows[r].e, v[k]) == rows[r].met[k],
                          "expect %d, verdict %s", (int)rows[r].e, ck_verdict_name(v[k]));
}
END_TEST

/* One fp32 gradient of 100 ones in each record, the low one with element 7 set to bad. */
static ck_verdict judge_vs_fp32_with(float bad)
{
    static const char *text =
        "{\"name\": \"j\", \"input\": {\"shape\": [2, 4]}, \"layers\": ["
        "{\"name\": \"fc\", \"op\": \"linear\", \"units\": 2}],"
        "\"tolerance\": {\"fp16\": {\"rel_l2\": 0.01}}}";
    tu_built_case bc;
    tu_build_text(&bc, text);
    float a[100], b[100];
    for (int i = 0; i < 100; i++)
        a[i] = b[i] = 1.0f;
    b[7] = bad;
    ck_shape shape = SHAPE(100);
    ck_record f32, low;
    memset(&f32, 0, sizeof f32);
    memset(&low, 0, sizeof low);
    ck_error err;
    ck_assert(ck_record_add(&f32, "fc.weight", CK_KIND_GRAD, 0, CK_F32, &shape, a, NULL, NULL,
                            &err) == CK_OK);
    ck_assert(ck_record_add(&low, "fc.weight", CK_KIND_GRAD, 0, CK_F32, &shape, b, NULL, NULL,
                            &err) == CK_OK);
    low.steps = 1;
    low.scales = calloc(1, sizeof *low.scales);
    ck_assert_ptr_nonnull(low.scales);
    low.scales[0].scale = 1.0;
    ck_result res;
    memset(&res, 0, sizeof res);
    ck_assert_msg(ck_compare_vs_fp32(&bc.g, CK_F16, &f32, NULL, 0, &low, NULL, &res, &err) == CK_OK, "%s",
                  err.msg);
    ck_assert_int_eq(res.n_vs_fp32, 1);
    ck_verdict v = res.vs_fp32[0].verdict;
    ck_assert_int_eq(v, res.vs_fp32_verdict);
    ck_result_free(&res);
    ck_record_free(&f32);
    ck_record_free(&low);
    tu_free_built(&bc);
    return v;
}

START_TEST(relative_l2_criterion_never_passes_an_unmatched_nan)
{
    /* 1.001 in one of 100 elements: relative L2 1e-4, within 0.01 */
    ck_assert_int_eq(judge_vs_fp32_with(1.001f), CK_VERDICT_CLOSE);
    /* a NaN (or an infinity) where fp32 has a number leaves the finite elements' relative L2
     * at 0, but is a mismatch */
    ck_assert_int_eq(judge_vs_fp32_with(NAN), CK_VERDICT_MISMATCH);
    ck_assert_int_eq(judge_vs_fp32_with(INFINITY), CK_VERDICT_MISMATCH);
}
END_TEST

/* A low-precision run over CK_FULL_RECORD_STEPS steps is judged against fp32 step by step
 * (the fp32 and calibration runs train in lockstep) and keeps a bounded few rows: step 0's,
 * the last step's, the first mismatching step's and each tensor's worst; the verdict and
 * the counts cover every step. Before, every step's rows were kept (3,000 fp16 steps took
 * 164 MB and wrote a 19.5 MB report). */
START_TEST(long_low_precision_runs_keep_a_bounded_few_rows)
{
    static const char *text =
        "{\"name\": \"long_lowp\", \"input\": {\"shape\": [4, 8]}, \"loss\": {\"op\": \"mse\"},"
        " \"train\": {\"steps\": 240}, \"layers\": ["
        "{\"name\": \"fc1\", \"op\": \"linear\", \"units\": 8}, {\"name\": \"act\", \"op\": \"relu\"},"
        "{\"name\": \"fc2\", \"op\": \"linear\", \"units\": 4}]}";
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_text(&bc, text);
    ck_result r;
    ck_error err;
    ck_assert_msg(ck_run_case(b, &bc.g, CK_F16, &r, &err) == CK_OK, "%s", err.msg);
    ck_assert(r.has_vs_fp32);
    /* per step: the loss, 4 gradients and 4 parameters */
    const int per_step = 9;
    ck_assert_int_eq(r.vs_fp32_judged, 240 * per_step);
    ck_assert_int_le(r.n_vs_fp32, 4 * per_step);
    ck_assert_int_ge(r.n_vs_fp32, 2 * per_step); /* steps 0 and 239 at least */
    int first_step = -1;
    for (int k = 0; k < r.n_vs_fp32; k++)
        if (r.vs_fp32[k].verdict == CK_VERDICT_MISMATCH && first_step < 0)
            first_step = r.vs_fp32[k].step;
    for (int k = 1; k < r.n_vs_fp32; k++)
        ck_assert_msg(r.vs_fp32[k].step >= r.vs_fp32[k - 1].step, "rows in step order");
    ck_assert_int_eq(r.vs_fp32[0].step, 0);
    ck_assert_int_eq(r.vs_fp32[r.n_vs_fp32 - 1].step, 239);
    if (r.vs_fp32_verdict == CK_VERDICT_MISMATCH) {
        ck_assert_int_ge(r.vs_fp32_first, 0);
        ck_assert_int_eq(r.vs_fp32[r.vs_fp32_first].step, first_step);
    }
    ck_assert_int_ge(r.vs_fp32_worst, 0);
    ck_result_free(&r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

Suite *suite_precision(void)
{
    Suite *s = suite_create("precision");
    TCase *tc = tcase_create("runs");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, every_non_canary_case_is_bitwise_identical_in_fp16_and_bf16);
    tcase_add_test(tc, casts_stay_identical_and_pass_the_judgement_in_fp16_and_bf16);
    tcase_add_test(tc, autocast_drop_canary_is_caught_with_its_cause);
    tcase_add_test(tc, long_low_precision_runs_keep_a_bounded_few_rows);
    tcase_add_test(tc, dynamic_scaling_skips_exactly_the_overflowing_steps);
    tcase_add_test(tc, skipped_steps_do_not_advance_adam);
    tcase_add_test(tc, differing_scale_decisions_are_a_mismatch_of_their_own);
    tcase_add_test(tc, fp16_underflow_shows_in_flushed_counts_and_dynamic_scaling_prevents_it);
    suite_add_tcase(s, tc);
    tc = tcase_create("case keys");
    tcase_add_loop_test(tc, bad_precision_keys_name_their_json_path, 0,
                        (int)(sizeof bad_rows / sizeof bad_rows[0]));
    tcase_add_test(tc, precision_keys_parse_with_defaults_and_patterns);
    tcase_add_test(tc, expectations_accept_exactly_their_verdicts);
    tcase_add_test(tc, relative_l2_criterion_never_passes_an_unmatched_nan);
    suite_add_tcase(s, tc);
    return s;
}
