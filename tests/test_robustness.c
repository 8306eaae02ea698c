/*
 * Reliability: the one input opener, the atomic writer's refusals and signal
 * cleanup, the strict JSON syntax gate, the terminal escaper and the non-finite judgement.
 */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/core/status.h"
#include "harness/core/text.h"
#include "harness/io/files.h"
#include "harness/io/json_strict.h"
#include "harness/io/json_syntax.h"
#include "harness/io/tensorload.h"
#include "harness/model/case.h"
#include "harness/verify/judge.h"
#include "harness/verify/run_case.h"
#include "reports/report.h"
#include "test_util.h"

static char tmpdir[256];

static void mk_tmp(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ck_robust_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmp(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
    ck_inputs_reset();
}

static const char *in_tmp(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* A FIFO is refused at once by every reader (alarm: a hang fails the test, not CI). */
START_TEST(fifo_inputs_refused_without_blocking)
{
    const char *fifo = in_tmp("f.json");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    alarm(10);
    ck_error err;
    char *text = NULL;
    size_t len = 0;
    ck_assert_int_eq(ck_read_file(fifo, 1 << 20, &text, &len, &err), CK_ERR_IO);
    ck_assert_msg(strstr(err.msg, "not a regular file (a FIFO)"), "%s", err.msg);
    void *p;
    ck_assert_int_eq(ck_map_file(fifo, &p, &len, &err), CK_ERR_IO);
    ck_case c;
    ck_assert_int_ne(ck_case_load(fifo, &c, &err), CK_OK);
    const char *st = in_tmp("t.safetensors");
    ck_assert_int_eq(mkfifo(st, 0600), 0);
    ck_tensorset ts;
    ck_assert_int_ne(ck_tensorset_load(st, &ts, &err), CK_OK);
    ck_assert_int_ne(ck_tensorset_load(tmpdir, &ts, &err), CK_OK); /* a folder holding it */
    ck_assert_msg(strstr(err.msg, "not a regular file"), "%s", err.msg);
    alarm(0);
}
END_TEST

START_TEST(writer_refuses_non_regular_and_inputs)
{
    ck_error err;
    ck_atomic_file af;
    const char *fifo = in_tmp("out.fifo");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_int_eq(ck_atomic_open(&af, fifo, &err), CK_ERR_IO);
    ck_assert_msg(strstr(err.msg, "a FIFO; refusing to replace it"), "%s", err.msg);
    struct stat sb;
    ck_assert(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode));
    ck_assert_int_eq(ck_atomic_open(&af, "/dev/null", &err), CK_ERR_IO);
    ck_assert_msg(strstr(err.msg, "character device"), "%s", err.msg);
    ck_assert_int_eq(ck_atomic_open(&af, tmpdir, &err), CK_ERR_IO);
    ck_assert_int_ne(ck_write_text_atomic(in_tmp("nodir/x.json"), "{}", &err), CK_OK);

    /* an input read with tracking on is never replaced; a file not read may be */
    const char *in = in_tmp("in.json");
    write_text(in, "{\"a\": 1}");
    ck_inputs_track(true);
    char *text = NULL;
    size_t len = 0;
    ck_assert_int_eq(ck_read_file(in, 1 << 20, &text, &len, &err), CK_OK);
    free(text);
    ck_inputs_track(false);
    ck_assert_int_eq(ck_write_text_atomic(in, "{}", &err), CK_ERR_IO);
    ck_assert_msg(strstr(err.msg, "is an input of this run"), "%s", err.msg);
    ck_assert_int_eq(ck_read_file(in, 1 << 20, &text, &len, &err), CK_OK);
    ck_assert_str_eq(text, "{\"a\": 1}");
    free(text);
    ck_assert_int_eq(ck_write_text_atomic(in_tmp("other.json"), "{}", &err), CK_OK);
    /* a hard link to an input is the input */
    ck_assert_int_eq(link(in, in_tmp("alias.json")), 0);
    ck_assert_int_eq(ck_write_text_atomic(in_tmp("alias.json"), "{}", &err), CK_ERR_IO);
}
END_TEST

START_TEST(output_dir_check_refuses_non_empty)
{
    ck_error err;
    ck_assert_int_eq(ck_output_dir_check(in_tmp("missing"), "--dump", &err), CK_OK);
    ck_assert_int_eq(ck_output_dir_check(tmpdir, "--dump", &err), CK_OK); /* empty */
    write_text(in_tmp("stale"), "x");
    ck_assert_int_ne(ck_output_dir_check(tmpdir, "--dump", &err), CK_OK);
    ck_assert_msg(strstr(err.msg, "not empty"), "%s", err.msg);
    ck_assert_int_ne(ck_output_dir_check("", "--dump", &err), CK_OK);
    ck_assert_int_ne(ck_output_file_check("", "--report", &err), CK_OK);
}
END_TEST

/* the signal handler's cleanup removes the temporary file of an open atomic write */
START_TEST(signal_cleanup_removes_temporary_files)
{
    ck_error err;
    ck_atomic_file af;
    const char *out = in_tmp("r.json");
    ck_assert_int_eq(ck_atomic_open(&af, out, &err), CK_OK);
    ck_atomic_write(&af, "half", 4);
    ck_assert_int_eq(access(af.tmp, F_OK), 0);
    ck_atomic_cleanup_on_signal();
    ck_assert_int_ne(access(af.tmp, F_OK), 0);
    ck_atomic_abort(&af);
    ck_assert_int_ne(access(out, F_OK), 0);
    /* after a commit nothing is left registered: cleanup touches nothing */
    ck_assert_int_eq(ck_write_text_atomic(out, "{}", &err), CK_OK);
    ck_atomic_cleanup_on_signal();
    ck_assert_int_eq(access(out, F_OK), 0);
}
END_TEST

static const struct {
    const char *text;
    bool ok;
    const char *why;
} syntax_rows[] = {
    {"{\"a\": [1, -0.5, 2e10, 0, true, false, null, \"\\u00e9\\ud83d\\ude00\"]}", true, NULL},
    {"007", false, "leading zero"},
    {"[3.]", false, "decimal point"},
    {"[.5]", false, "malformed"},
    {"[+1]", false, "malformed"},
    {"[1e]", false, "exponent"},
    {"\x01{}", false, "malformed"},
    {"\xef\xbb\xbf{}", false, "malformed"}, /* a byte-order mark */
    {"{\"a\": \"x\ty\"}", false, "raw control character"},
    {"{\"a\": \"\\u0000\"}", false, "\\u0000"},
    {"{\"a\": \"\\ud800\"}", false, "surrogate"},
    {"{\"a\": \"\\udc00\"}", false, "surrogate"},
    {"{\"a\": \"\xc0\xaf\"}", false, "UTF-8"},
    {"{\"a\": \"\xed\xa0\x80\"}", false, "UTF-8"},
    {"{\"a\": \"\\x\"}", false, "escape"},
    {"{} x", false, "unexpected text"},
    {"{\"a\" 1}", false, "malformed"},
    {"[1,]", false, "malformed"},
    {"tru", false, "malformed"},
    {"\"abc", false, "unterminated"},
};

START_TEST(json_syntax_gate)
{
    size_t off;
    const char *why;
    bool ok = ck_json_syntax_ok(syntax_rows[_i].text, strlen(syntax_rows[_i].text), &off, &why);
    ck_assert_msg(ok == syntax_rows[_i].ok, "row %d: %s", _i, syntax_rows[_i].text);
    if (!ok)
        ck_assert_msg(strstr(why, syntax_rows[_i].why), "row %d: %s", _i, why);
    /* the strict parser (tensor headers, tolerance files) and the case parser agree */
    cJSON *root = NULL;
    ck_error err;
    ck_status st = ck_json_parse_strict(syntax_rows[_i].text, strlen(syntax_rows[_i].text), "f",
                                        NULL, &root, &err);
    ck_assert_int_eq(st == CK_OK, syntax_rows[_i].ok);
    cJSON_Delete(root);
}
END_TEST

START_TEST(deep_nesting_is_refused_not_recursed)
{
    size_t n = 100000;
    char *s = malloc(n);
    ck_assert_ptr_nonnull(s);
    memset(s, '[', n);
    size_t off;
    const char *why;
    ck_assert(!ck_json_syntax_ok(s, n, &off, &why));
    ck_assert_msg(strstr(why, "nested too deeply"), "%s", why);
    free(s);
}
END_TEST

START_TEST(escaper)
{
    char out[64];
    ck_assert_str_eq(ck_text_escape("plain é ok", out, sizeof out), "plain é ok");
    ck_assert_str_eq(ck_text_escape("a\x1b[2J\nb\tc\r", out, sizeof out), "a\\e[2J\\nb\\tc\\r");
    ck_assert_str_eq(ck_text_escape("\x7f\xc2\x9b|\xff", out, sizeof out), "\\x7f\\x9b|\\xff");
    ck_assert_str_eq(ck_text_escape(NULL, out, sizeof out), "");
    char small[8];
    ck_assert_str_eq(ck_text_escape("0123456789", small, sizeof small), "0123...");
    ck_assert(ck_text_needs_escape("x\ny"));
    ck_assert(!ck_text_needs_escape("enc1.weight"));
    ck_error err;
    ck_status st = ck_fail(&err, CK_ERR_INPUT, "%s: bad", "a\nb\x1b");
    ck_error_one_line(&err, st);
    ck_assert_str_eq(err.msg, "a\\nb\\e: bad");
}
END_TEST

static ck_tensor_result nf_tensor(ck_tensor_kind kind, int64_t numel, int64_t nan_plain,
                                  int64_t inf_plain)
{
    ck_tensor_result t;
    memset(&t, 0, sizeof t);
    t.kind = kind;
    t.m.numel = numel;
    t.m.nan_ref = nan_plain;
    t.m.inf_ref = inf_plain;
    t.m.nan_a = nan_plain;
    t.m.inf_a = inf_plain;
    return t;
}

START_TEST(nonfinite_judgement)
{
    ck_tensor_result ts[4];
    ck_result r;
    memset(&r, 0, sizeof r);
    r.tensors = ts;
    r.n_tensors = 4;
    /* partial, on a step the loss scaler skipped: counted, not failed */
    ck_scale_step skipped[1] = {{.scale = 65536.0, .skipped = true}}, taken[1] = {{1.0, false}};
    r.plain.scales = r.ckpt.scales = skipped;
    r.plain.steps = r.ckpt.steps = 1;
    ts[0] = nf_tensor(CK_KIND_LOSS, 1, 0, 0);
    ts[1] = nf_tensor(CK_KIND_GRAD, 10, 2, 1);
    ts[2] = nf_tensor(CK_KIND_LOSS, 1, 0, 0);
    ts[3] = nf_tensor(CK_KIND_PARAM, 10, 0, 0);
    ck_judge_nonfinite(&r);
    ck_assert(!r.nonfinite_failed);
    ck_assert_int_eq(r.nonfinite_plain.grad_nan, 2);
    ck_assert_int_eq(r.nonfinite_plain.grad_inf, 1);
    ck_assert_int_eq(r.nonfinite_plain.skipped_step_grads, 3);
    ck_assert_int_eq(r.nonfinite_ckpt.tensors, 1);
    /* the same on a step that was taken: any NaN/Inf fails, unless the case expects it */
    r.plain.scales = r.ckpt.scales = taken;
    ck_judge_nonfinite(&r);
    ck_assert(r.nonfinite_failed && !r.nonfinite_plain.all_grads);
    ck_case expecting;
    memset(&expecting, 0, sizeof expecting);
    expecting.expect_nonfinite = true;
    r.cs = &expecting;
    ck_judge_nonfinite(&r);
    ck_assert(!r.nonfinite_failed);
    /* a NaN weight fails whatever the loss and gradients did */
    r.cs = NULL;
    ts[1] = nf_tensor(CK_KIND_GRAD, 10, 0, 0);
    ts[3] = nf_tensor(CK_KIND_PARAM, 10, 1, 0);
    ck_judge_nonfinite(&r);
    ck_assert(r.nonfinite_failed);
    ts[3] = nf_tensor(CK_KIND_PARAM, 10, 0, 0);
    /* every loss non-finite: failed */
    ts[0] = nf_tensor(CK_KIND_LOSS, 1, 1, 0);
    ts[2] = nf_tensor(CK_KIND_LOSS, 1, 0, 1);
    ck_judge_nonfinite(&r);
    ck_assert(r.nonfinite_failed && r.nonfinite_plain.all_loss);
    /* every gradient non-finite: failed */
    ts[0] = nf_tensor(CK_KIND_LOSS, 1, 0, 0);
    ts[2] = nf_tensor(CK_KIND_LOSS, 1, 0, 0);
    ts[1] = nf_tensor(CK_KIND_GRAD, 10, 4, 6);
    ck_judge_nonfinite(&r);
    ck_assert(r.nonfinite_failed && r.nonfinite_plain.all_grads && !r.nonfinite_plain.all_loss);
}
END_TEST

/* A long run keeps the tensor rows of step 0, the first divergent step and the last step,
 * counts every step, and writes a report whose size does not grow with the steps. */
static size_t long_run(int steps, const char *rng, ck_result *res)
{
    char text[512];
    snprintf(text, sizeof text,
             "{\"name\": \"long\", \"input\": {\"shape\": [2, 3]}, \"train\": {\"steps\": %d},"
             " \"policies\": {\"rng\": \"%s\"}, \"expect\": \"close\", \"layers\": "
             "[{\"name\": \"fc\", \"op\": \"linear\", \"units\": 4}, {\"name\": \"drop\", "
             "\"op\": \"dropout\", \"rate\": 0.5}, {\"name\": \"fc2\", \"op\": \"linear\", "
             "\"units\": 2}], \"checkpoint\": {\"segments\": [[\"fc\", \"drop\"]]}}",
             steps, rng);
    ck_case c;
    ck_graph g;
    ck_error err;
    ck_assert_msg(ck_case_parse(text, strlen(text), "long.json", &c, &err) == CK_OK, "%s", err.msg);
    ck_assert_msg(ck_graph_build(&c, &g, &err) == CK_OK, "%s", err.msg);
    ck_backend *b = tu_cpu_backend();
    ck_assert_msg(ck_run_case(b, &g, CK_F32, res, &err) == CK_OK, "%s", err.msg);
    ck_report_meta meta = {.tool_version = "t", .case_path = "long.json"};
    char *json = ck_report_json_string(res, &meta);
    ck_assert_ptr_nonnull(json);
    size_t len = strlen(json);
    free(json);
    res->cs = NULL; /* the case goes; the counts stay */
    res->g = NULL;
    b->destroy(b);
    ck_graph_free(&g);
    ck_case_free(&c);
    return len;
}

START_TEST(long_runs_keep_bounded_records)
{
    ck_result r;
    size_t short_len = long_run(CK_FULL_RECORD_STEPS, "counter", &r);
    int per_step = r.n_tensors / CK_FULL_RECORD_STEPS;
    ck_assert_int_gt(per_step, 0);
    ck_assert_int_eq(r.n_retained_steps, 0); /* up to the limit: every step */
    ck_result_free(&r);
    size_t long_len = long_run(20 * CK_FULL_RECORD_STEPS, "counter", &r);
    ck_assert_int_eq(r.n_retained_steps, 2);
    ck_assert_int_eq(r.retained_steps[0], 0);
    ck_assert_int_eq(r.retained_steps[1], 20 * CK_FULL_RECORD_STEPS - 1);
    ck_assert_int_eq(r.n_tensors, 2 * per_step);
    ck_assert_int_eq(r.tensors_judged, (int64_t)20 * CK_FULL_RECORD_STEPS * per_step);
    ck_assert_int_eq(r.judged_counts[0] + r.judged_counts[1] + r.judged_counts[2], r.tensors_judged);
    ck_assert_msg(long_len < short_len, "report of 20x the steps: %zu bytes vs %zu", long_len,
                  short_len);
    ck_result_free(&r);
    /* stateful RNG: the runs part at once; that step is kept and first_divergence points in */
    long_run(3 * CK_FULL_RECORD_STEPS, "stateful", &r);
    ck_assert_int_eq(r.verdict, CK_VERDICT_MISMATCH);
    ck_assert_int_ge(r.first_divergence, 0);
    ck_assert_int_lt(r.first_divergence, r.n_tensors);
    ck_assert_int_ne(r.tensors[r.first_divergence].verdict, CK_VERDICT_IDENTICAL);
    ck_result_free(&r);
}
END_TEST

Suite *suite_robustness(void)
{
    Suite *s = suite_create("robustness");
    TCase *tc = tcase_create("files");
    tcase_add_checked_fixture(tc, mk_tmp, rm_tmp);
    tcase_add_test(tc, fifo_inputs_refused_without_blocking);
    tcase_add_test(tc, writer_refuses_non_regular_and_inputs);
    tcase_add_test(tc, output_dir_check_refuses_non_empty);
    tcase_add_test(tc, signal_cleanup_removes_temporary_files);
    suite_add_tcase(s, tc);
    TCase *tj = tcase_create("text");
    tcase_add_loop_test(tj, json_syntax_gate, 0, (int)(sizeof syntax_rows / sizeof syntax_rows[0]));
    tcase_add_test(tj, deep_nesting_is_refused_not_recursed);
    tcase_add_test(tj, escaper);
    tcase_add_test(tj, nonfinite_judgement);
    tcase_add_test(tj, long_runs_keep_bounded_records);
    suite_add_tcase(s, tj);
    return s;
}
