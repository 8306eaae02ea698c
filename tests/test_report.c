/*
 * Report writers on a hand-built result: the JSON fields read back with cJSON, non-finite
 * and big-integer encoding, byte-identical re-rendering, the atomic writer (no temporary
 * file left, clean failure in a missing directory), and the text summary's order.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/verify/result.h"
#include "reports/report.h"

/* ---- a tiny case: enc1 -> fc1, one segment over both, two steps ---- */

#define BIG_COUNT INT64_C(9007199254740993) /* 2^53 + 1: not representable as a double */

typedef struct {
    ck_layer_spec layers[2];
    ck_node nodes[2];
    ck_case cs;
    ck_graph g;
    ck_result r;
} fixture;

static char *dup_str(const char *s)
{
    char *d = strdup(s);
    ck_assert_ptr_nonnull(d);
    return d;
}

/* Fills tensors[i] by really comparing a against ref, so metrics are what ck_compare
 * gives, not numbers made up to suit the writer. */
static void set_tensor(ck_tensor_result *t, const char *name, ck_tensor_kind kind, int step,
                       int ndim, const int64_t *dims, const float *a, const float *ref)
{
    t->name = dup_str(name);
    t->kind = kind;
    t->step = step;
    t->dtype = CK_F32;
    t->shape = ck_shape_make(ndim, dims);
    t->verdict = ck_compare(CK_F32, ck_shape_numel(&t->shape), a, ref, 1.3e-6, 1e-5, &t->m);
}

/* A failing result: one mismatching gradient with a NaN, one close one, memory not saved. */
static void fixture_init(fixture *fx)
{
    memset(fx, 0, sizeof *fx);
    fx->layers[0].name = "enc1";
    fx->layers[0].op_name = "conv2d";
    fx->layers[1].name = "fc1";
    fx->layers[1].op_name = "linear";

    ck_case *cs = &fx->cs;
    cs->path = "cases/tiny.json";
    cs->name = "tiny";
    cs->description = "two layers, \"quoted\"";
    cs->seed = UINT64_MAX;
    cs->n_layers = 2;
    cs->layers = fx->layers;
    cs->loss = CK_LOSS_MEAN;
    cs->ckpt_kind = CK_CKPT_EVERY;
    cs->ckpt_every = 2;
    cs->steps = 2;
    cs->optimizer.kind = CK_OPT_SGD;
    cs->optimizer.lr = 0.1;
    cs->rng = CK_RNG_COUNTER;
    cs->bn = CK_BN_SKIP;
    cs->rtol = 1.3e-6;
    cs->atol = 1e-5;
    cs->has_min_memory_saving = true;
    cs->min_memory_saving = 0.3;
    cs->expect = CK_EXPECT_CLOSE;
    cs->expect_memory_met = true;

    fx->nodes[0].spec = &fx->layers[0];
    fx->nodes[1].spec = &fx->layers[1];
    fx->g.cs = cs;
    fx->g.n = 2;
    fx->g.nodes = fx->nodes;

    ck_result *r = &fx->r;
    r->cs = cs;
    r->g = &fx->g;
    snprintf(r->backend, sizeof r->backend, "cpu");
    snprintf(r->backend_device, sizeof r->backend_device, "host");
    snprintf(r->backend_versions, sizeof r->backend_versions, "c11");
    r->dtype = CK_F32;

    r->n_segments = 1;
    r->segments = malloc(sizeof *r->segments);
    ck_assert_ptr_nonnull(r->segments);
    r->segments[0].first = 0;
    r->segments[0].last = 1;

    r->plain.label = "plain";
    r->ckpt.label = "checkpointed";
    r->plain.steps = r->ckpt.steps = 2;
    r->plain.losses = malloc(2 * sizeof(double));
    r->ckpt.losses = malloc(2 * sizeof(double));
    ck_assert_ptr_nonnull(r->plain.losses);
    ck_assert_ptr_nonnull(r->ckpt.losses);
    r->plain.losses[0] = r->ckpt.losses[0] = 0.1;
    r->plain.losses[1] = -INFINITY;
    r->ckpt.losses[1] = NAN;
    r->plain.peak_activation_bytes = r->ckpt.peak_activation_bytes = 1048576;
    r->ckpt.recomputed_layers = BIG_COUNT;
    r->plain.wall_time_s = 0.25;
    r->ckpt.wall_time_s = 0.5;

    r->n_tensors = 3;
    r->tensors = calloc(3, sizeof *r->tensors);
    ck_assert_ptr_nonnull(r->tensors);
    static const float loss = 0.1f;
    set_tensor(&r->tensors[0], "loss", CK_KIND_LOSS, 0, 0, NULL, &loss, &loss);
    static const int64_t d4[] = {4};
    static const float ca[] = {1.0f, 2.0f, 3.0f, 4.0f};
    static const float cr[] = {1.0f, 2.0f, 3.0f, 0x1.000002p2f};
    set_tensor(&r->tensors[1], "fc1.weight", CK_KIND_GRAD, 0, 1, d4, ca, cr);
    static const int64_t d23[] = {2, 3};
    static const float ma[] = {0, 0, 0, 0, NAN, 0.03125f};
    static const float mr[] = {0, 0, 0, 0, 1.0f, 0.0f};
    set_tensor(&r->tensors[2], "enc1.weight", CK_KIND_GRAD, 0, 2, d23, ma, mr);
    ck_assert_int_eq(r->tensors[0].verdict, CK_VERDICT_IDENTICAL);
    ck_assert_int_eq(r->tensors[1].verdict, CK_VERDICT_CLOSE);
    ck_assert_int_eq(r->tensors[2].verdict, CK_VERDICT_MISMATCH);
    r->first_divergence = 1;

    r->memory_saving = 0.0;
    r->memory_met = false;
    r->verdict = CK_VERDICT_MISMATCH;
    r->expect_met = false;
    r->memory_expectation_met = false;
    r->pass = false;
}

static const ck_report_meta no_time = {.tool_version = "0.1.0-test", .case_path = NULL, .include_wall_time = false};

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static cJSON *render(const ck_result *r, const ck_report_meta *meta)
{
    char *text = ck_report_json_string(r, meta);
    ck_assert_ptr_nonnull(text);
    cJSON *root = cJSON_Parse(text);
    ck_assert_msg(root != NULL, "report is not valid JSON:\n%s", text);
    free(text);
    return root;
}

static cJSON *at(const cJSON *obj, const char *path)
{
    /* "a.b.c": object members only; arrays are indexed by the caller. */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *cur = obj;
    for (char *save = NULL, *key = strtok_r(buf, ".", &save); key; key = strtok_r(NULL, ".", &save)) {
        cur = cJSON_GetObjectItemCaseSensitive(cur, key);
        ck_assert_msg(cur != NULL, "missing %s (at %s)", path, key);
    }
    return (cJSON *)cur;
}

/* ---- JSON content ---- */

START_TEST(json_has_schema_config_and_verdicts)
{
    fixture fx;
    fixture_init(&fx);
    cJSON *root = render(&fx.r, &no_time);

    ck_assert_str_eq(at(root, "schema")->valuestring, "ckpt-harness/report");
    ck_assert_int_eq(at(root, "schema_version")->valueint, CK_REPORT_SCHEMA_VERSION);
    ck_assert_str_eq(at(root, "tool.version")->valuestring, "0.1.0-test");
    ck_assert_str_eq(at(root, "case.name")->valuestring, "tiny");
    ck_assert_str_eq(at(root, "case.file")->valuestring, "cases/tiny.json");
    ck_assert_str_eq(at(root, "case.description")->valuestring, "two layers, \"quoted\"");
    ck_assert_str_eq(at(root, "backend.name")->valuestring, "cpu");
    ck_assert_str_eq(at(root, "dtype")->valuestring, "fp32");
    ck_assert_str_eq(at(root, "config.checkpoint.spec")->valuestring, "every");
    ck_assert_int_eq(at(root, "config.checkpoint.every")->valueint, 2);
    cJSON *seg = cJSON_GetArrayItem(at(root, "config.checkpoint.segments"), 0);
    ck_assert_int_eq(cJSON_GetArraySize(at(seg, "layers")), 2);
    ck_assert_str_eq(cJSON_GetArrayItem(at(seg, "layers"), 1)->valuestring, "fc1");
    /* doubles round-trip exactly */
    ck_assert(at(root, "config.tolerance.rtol")->valuedouble == 1.3e-6);
    ck_assert(at(root, "config.min_memory_saving")->valuedouble == 0.3);

    cJSON *tensors = at(root, "tensors");
    ck_assert_int_eq(cJSON_GetArraySize(tensors), 3);
    cJSON *t2 = cJSON_GetArrayItem(tensors, 2);
    ck_assert_str_eq(at(t2, "name")->valuestring, "enc1.weight");
    ck_assert_str_eq(at(t2, "kind")->valuestring, "grad");
    ck_assert_str_eq(at(t2, "verdict")->valuestring, "mismatch");
    ck_assert(at(t2, "metrics.max_abs")->valuedouble == 0.03125);
    ck_assert_int_eq(at(t2, "metrics.n_outside")->valueint, 2);
    ck_assert_int_eq(at(t2, "metrics.nan.a")->valueint, 1);
    ck_assert_int_eq(at(t2, "metrics.nan.ref")->valueint, 0);
    /* flat index 4 of a (2, 3) tensor */
    cJSON *fb = at(t2, "metrics.first_bad_index");
    ck_assert_int_eq(cJSON_GetArraySize(fb), 2);
    ck_assert_int_eq(cJSON_GetArrayItem(fb, 0)->valueint, 1);
    ck_assert_int_eq(cJSON_GetArrayItem(fb, 1)->valueint, 1);
    ck_assert(cJSON_IsNull(at(cJSON_GetArrayItem(tensors, 1), "metrics.first_bad_index")));

    ck_assert_int_eq(at(root, "first_divergence.step")->valueint, 0);
    ck_assert_str_eq(at(root, "first_divergence.name")->valuestring, "fc1.weight");
    ck_assert_str_eq(at(root, "first_divergence.verdict")->valuestring, "close");
    ck_assert_int_eq(at(root, "summary.mismatch")->valueint, 1);
    ck_assert_int_eq(at(root, "summary.close")->valueint, 1);
    ck_assert_str_eq(at(root, "verdict")->valuestring, "mismatch");
    ck_assert(cJSON_IsFalse(at(root, "expect_met")));
    ck_assert_str_eq(at(root, "status")->valuestring, "fail");

    cJSON *fails = at(root, "failures");
    ck_assert_int_eq(cJSON_GetArraySize(fails), 2);
    const char *f0 = cJSON_GetArrayItem(fails, 0)->valuestring;
    ck_assert_msg(starts_with(f0, "mismatch: 1 of 3 tensors outside tolerance; first divergence "
                                  "at step 0: grad fc1.weight"),
                  "failure line: %s", f0);
    ck_assert_ptr_nonnull(strstr(f0, "first mismatch at step 0: grad enc1.weight"));
    ck_assert_ptr_nonnull(strstr(f0, "first at [1, 1]"));
    const char *f1 = cJSON_GetArrayItem(fails, 1)->valuestring;
    ck_assert_str_eq(f1, "memory: checkpointing saved 0.0% of peak activation memory (plain "
                         "1.00 MiB, checkpointed 1.00 MiB); the case requires at least 30.0%");
    ck_assert(cJSON_IsFalse(at(root, "memory.met")));
    ck_assert_str_eq(at(root, "memory.message")->valuestring, f1 + strlen("memory: "));
    cJSON_Delete(root);
    ck_result_free(&fx.r);
}
END_TEST

START_TEST(json_encodes_non_finite_and_big_integers)
{
    fixture fx;
    fixture_init(&fx);
    char *text = ck_report_json_string(&fx.r, &no_time);
    ck_assert_ptr_nonnull(text);
    cJSON *root = cJSON_Parse(text);
    ck_assert_ptr_nonnull(root);

    cJSON *cl = at(root, "runs.checkpointed.losses");
    ck_assert_str_eq(cJSON_GetArrayItem(cl, 1)->valuestring, "NaN");
    ck_assert(cJSON_GetArrayItem(cl, 0)->valuedouble == 0.1);
    ck_assert_str_eq(cJSON_GetArrayItem(at(root, "runs.plain.losses"), 1)->valuestring,
                     "-Infinity");
    cJSON *t2 = cJSON_GetArrayItem(at(root, "tensors"), 2);
    /* an unmatched NaN: max_ulp is UINT64_MAX, written exactly */
    ck_assert(cJSON_IsNumber(at(t2, "metrics.max_ulp")));
    ck_assert_ptr_nonnull(strstr(text, "\"max_ulp\":\t18446744073709551615"));
    ck_assert_ptr_nonnull(strstr(text, "\"seed\":\t18446744073709551615"));
    /* 2^53 + 1 would print as ...992 through a double */
    ck_assert_ptr_nonnull(strstr(text, "\"recomputed_layers\":\t9007199254740993"));
    ck_assert_ptr_null(strstr(text, "wall_time_s"));
    cJSON_Delete(root);
    free(text);
    ck_result_free(&fx.r);
}
END_TEST

START_TEST(json_renders_identical_bytes_twice)
{
    fixture fx1, fx2;
    fixture_init(&fx1);
    fixture_init(&fx2);
    fx2.r.plain.wall_time_s = 99.0; /* only wall time differs */
    char *a = ck_report_json_string(&fx1.r, &no_time);
    char *b = ck_report_json_string(&fx2.r, &no_time);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(a, b);

    ck_report_meta timed = {.tool_version = "0.1.0-test", .case_path = "elsewhere/tiny.json",
                            .include_wall_time = true};
    cJSON *root = render(&fx1.r, &timed);
    ck_assert(at(root, "runs.plain.wall_time_s")->valuedouble == 0.25);
    ck_assert_str_eq(at(root, "case.file")->valuestring, "elsewhere/tiny.json");
    cJSON_Delete(root);
    free(a);
    free(b);
    ck_result_free(&fx1.r);
    ck_result_free(&fx2.r);
}
END_TEST

START_TEST(json_of_a_passing_case_has_no_failures)
{
    fixture fx;
    fixture_init(&fx);
    ck_result *r = &fx.r;
    r->tensors[1].verdict = r->tensors[2].verdict = CK_VERDICT_IDENTICAL;
    r->verdict = CK_VERDICT_IDENTICAL;
    r->first_divergence = -1;
    r->memory_saving = 0.5;
    r->ckpt.peak_activation_bytes = 524288;
    r->memory_met = r->expect_met = r->memory_expectation_met = r->pass = true;
    fx.cs.has_min_memory_saving = false;
    cJSON *root = render(r, &no_time);
    ck_assert(cJSON_IsNull(at(root, "first_divergence")));
    ck_assert(cJSON_IsNull(at(root, "config.min_memory_saving")));
    ck_assert_int_eq(cJSON_GetArraySize(at(root, "failures")), 0);
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(at(root, "memory"), "message"));
    ck_assert_str_eq(at(root, "status")->valuestring, "pass");
    ck_assert(at(root, "memory.saving")->valuedouble == 0.5);
    cJSON_Delete(root);
    ck_result_free(r);
}
END_TEST

START_TEST(expected_mismatch_that_was_identical_says_so)
{
    fixture fx;
    fixture_init(&fx);
    ck_result *r = &fx.r;
    fx.cs.expect = CK_EXPECT_MISMATCH;
    r->verdict = CK_VERDICT_IDENTICAL;
    r->memory_met = r->memory_expectation_met = true;
    char lines[CK_REPORT_MAX_FAILURES][CK_REPORT_LINE_MAX];
    ck_assert_int_eq(ck_report_failures(r, lines, CK_REPORT_MAX_FAILURES), 1);
    ck_assert_str_eq(lines[0], "expected mismatch but runs were identical");
    ck_result_free(r);
}
END_TEST

/* ---- the atomic writer ---- */

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

START_TEST(write_json_is_atomic_and_leaves_no_temp_file)
{
    fixture fx;
    fixture_init(&fx);
    char dir[] = "/tmp/ck_report_test_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/tiny.json", dir);
    ck_error err = {{0}};
    /* twice: the second write replaces the first */
    ck_assert_int_eq(ck_report_write_json(&fx.r, &no_time, path, &err), CK_OK);
    ck_assert_int_eq(ck_report_write_json(&fx.r, &no_time, path, &err), CK_OK);
    ck_assert_int_eq(count_entries(dir), 1);

    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *want = ck_report_json_string(&fx.r, &no_time);
    ck_assert_uint_eq(n, strlen(want) + 1);
    ck_assert(memcmp(buf, want, n - 1) == 0 && buf[n - 1] == '\n');
    free(want);

    unlink(path);
    rmdir(dir);
    ck_result_free(&fx.r);
}
END_TEST

START_TEST(write_json_into_missing_directory_fails_cleanly)
{
    fixture fx;
    fixture_init(&fx);
    char dir[] = "/tmp/ck_report_test_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/missing/tiny.json", dir);
    ck_error err = {{0}};
    ck_assert_int_eq(ck_report_write_json(&fx.r, &no_time, path, &err), CK_ERR_IO);
    ck_assert_msg(strstr(err.msg, path) != NULL, "message does not name the path: %s", err.msg);
    ck_assert_msg(strstr(err.msg, strerror(ENOENT)) != NULL, "no reason: %s", err.msg);
    ck_assert_int_eq(count_entries(dir), 0);
    rmdir(dir);
    ck_result_free(&fx.r);
}
END_TEST

/* ---- text ---- */

/* Prints into a tmpfile and reads it back (open_memstream would do, but GCC 12's
 * -Wdangling-pointer misreads the address of its buffer pointer). */
static char *capture_summary(const ck_result *r, int max_rows, bool oneline)
{
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    if (oneline)
        ck_report_print_oneline(f, r);
    else
        ck_report_print_summary(f, r, max_rows);
    long len = ftell(f);
    ck_assert_int_ge(len, 0);
    rewind(f);
    char *out = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(out);
    ck_assert_uint_eq(fread(out, 1, (size_t)len, f), (size_t)len);
    out[len] = '\0';
    fclose(f);
    return out;
}

START_TEST(summary_puts_the_mismatch_row_first)
{
    fixture fx;
    fixture_init(&fx);
    char *out = capture_summary(&fx.r, 10, false);
    ck_assert_msg(starts_with(out, "case tiny: FAIL, verdict mismatch (cpu, fp32)\n"
                                   "memory: plain 1.00 MiB, checkpointed 1.00 MiB (saving 0.0%)\n"),
                  "header: %s", out);
    char *table = strstr(out, "\nstep ");
    ck_assert_msg(table != NULL, "no table header:\n%s", out);
    char *row1 = strchr(table + 1, '\n') + 1;
    char *row2 = strchr(row1, '\n') + 1;
    char *row3 = strchr(row2, '\n') + 1;
    ck_assert_msg(starts_with(row1, "   0 grad   enc1.weight mismatch"), "row 1: %s", row1);
    size_t row1_len = strcspn(row1, "\n");
    ck_assert_msg(strncmp(row1 + row1_len - 8, " inf 2/6", 8) == 0, "row 1: %s", row1);
    ck_assert_msg(starts_with(row2, "   0 grad   fc1.weight  close"), "row 2: %s", row2);
    ck_assert_msg(starts_with(row3, "   0 loss   loss        identical"), "row 3: %s", row3);
    ck_assert_ptr_nonnull(strstr(out, "\nFAIL mismatch: 1 of 3 tensors"));
    ck_assert_ptr_nonnull(strstr(out, "\nFAIL memory: checkpointing saved 0.0%"));

    /* the same result prints the same bytes */
    char *again = capture_summary(&fx.r, 10, false);
    ck_assert_str_eq(out, again);
    free(again);
    free(out);

    out = capture_summary(&fx.r, 1, false);
    ck_assert_ptr_nonnull(strstr(out, "enc1.weight"));
    ck_assert_ptr_null(strstr(out, "  fc1.weight"));
    ck_assert_ptr_nonnull(strstr(out, "\n... 2 more tensors\n"));
    free(out);
    ck_result_free(&fx.r);
}
END_TEST

START_TEST(summary_notes_an_expected_memory_shortfall)
{
    fixture fx;
    fixture_init(&fx);
    ck_result *r = &fx.r;
    fx.cs.expect_memory_met = false; /* a canary of useless checkpointing */
    r->expect_met = r->memory_expectation_met = r->pass = true;
    char *out = capture_summary(r, 0, false);
    ck_assert_ptr_null(strstr(out, "FAIL "));
    ck_assert_msg(strstr(out, "\nnote memory: checkpointing saved 0.0%") != NULL, "%s", out);
    ck_assert_ptr_null(strstr(out, "\nstep ")); /* max_rows 0: no table */
    free(out);
    ck_result_free(r);
}
END_TEST

START_TEST(oneline_states_pass_verdict_and_memory)
{
    fixture fx;
    fixture_init(&fx);
    fx.r.pass = true;
    fx.r.ckpt.peak_activation_bytes = 681574; /* 0.65 MiB */
    fx.r.memory_saving = 1.0 - 681574.0 / 1048576.0;
    char *out = capture_summary(&fx.r, 0, true);
    ck_assert_str_eq(out, "PASS tiny fp32  mismatch  memory 1.00 MiB -> 665.60 KiB (saving 35.0%)\n");
    free(out);
    ck_result_free(&fx.r);
}
END_TEST

START_TEST(result_free_is_safe_twice_and_names_kinds)
{
    fixture fx;
    fixture_init(&fx);
    ck_result_free(&fx.r);
    ck_assert_ptr_null(fx.r.tensors);
    ck_result_free(&fx.r);
    ck_result_free(NULL);
    ck_assert_str_eq(ck_tensor_kind_name(CK_KIND_LOSS), "loss");
    ck_assert_str_eq(ck_tensor_kind_name(CK_KIND_GRAD), "grad");
    ck_assert_str_eq(ck_tensor_kind_name(CK_KIND_PARAM), "param");
    ck_assert_str_eq(ck_tensor_kind_name(CK_KIND_BUFFER), "buffer");
    char b[32];
    ck_assert_str_eq(ck_format_bytes(512, b, sizeof b), "512 B");
    ck_assert_str_eq(ck_format_bytes(1536, b, sizeof b), "1.50 KiB");
    ck_assert_str_eq(ck_format_bytes(INT64_C(3) << 30, b, sizeof b), "3.00 GiB");
}
END_TEST

Suite *suite_report(void)
{
    Suite *s = suite_create("report");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, json_has_schema_config_and_verdicts);
    tcase_add_test(tc, json_encodes_non_finite_and_big_integers);
    tcase_add_test(tc, json_renders_identical_bytes_twice);
    tcase_add_test(tc, json_of_a_passing_case_has_no_failures);
    tcase_add_test(tc, expected_mismatch_that_was_identical_says_so);
    tcase_add_test(tc, write_json_is_atomic_and_leaves_no_temp_file);
    tcase_add_test(tc, write_json_into_missing_directory_fails_cleanly);
    tcase_add_test(tc, summary_puts_the_mismatch_row_first);
    tcase_add_test(tc, summary_notes_an_expected_memory_shortfall);
    tcase_add_test(tc, oneline_states_pass_verdict_and_memory);
    tcase_add_test(tc, result_free_is_safe_twice_and_names_kinds);
    suite_add_tcase(s, tc);
    return s;
}
