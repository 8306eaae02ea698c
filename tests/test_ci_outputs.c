/*
 * The pieces behind the CI outputs: SHA-256 against the FIPS 180-4 / NIST vectors, the
 * bounded memory trace (peak kept, bound held), the bound ratio of the metrics, and the
 * JUnit / summary / HTML writers on a hand-made set of items (escaping, counts, order).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/metrics.h"
#include "harness/core/sha256.h"
#include "harness/engine/alloc.h"
#include "reports/run_set.h"

START_TEST(sha256_known_vectors)
{
    char hex[65];
    ck_sha256_hex("", 0, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    ck_sha256_hex("abc", 3, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 448 bits */
    ck_sha256_hex(two, strlen(two), hex);
    ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* a million 'a', fed in uneven pieces across block boundaries */
    ck_sha256_ctx c;
    ck_sha256_init(&c);
    char as[1000];
    memset(as, 'a', sizeof as);
    size_t left = 1000000, k = 0;
    while (left) {
        size_t n = 1 + (k++ * 37) % 997;
        if (n > left)
            n = left;
        ck_sha256_update(&c, as, n);
        left -= n;
    }
    ck_sha256_final_hex(&c, hex);
    ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

START_TEST(mem_trace_is_bounded_and_keeps_the_peak)
{
    ck_mem_trace t = {.stride = 1};
    int64_t live = 0, peak = 0, peak_event = -1;
    for (int64_t e = 0; e < 100000; e++) {
        live += (e % 7 == 3) ? -3 : 2; /* a slow climb with dips */
        if (e == 61234)
            live += 5000; /* one spike */
        if (e == 61235)
            live -= 5000;
        if (live > peak) {
            peak = live;
            peak_event = e;
        }
        ck_mem_trace_add(&t, live);
    }
    ck_assert_int_le(t.n, CK_MEM_TRACE_MAX);
    ck_assert_int_gt(t.n, CK_MEM_TRACE_MAX / 4);
    ck_assert_int_eq(t.events, 100000);
    int64_t best = 0, best_event = -1;
    for (int i = 0; i < t.n; i++) {
        if (i > 0)
            ck_assert_int_gt(t.pt[i].event, t.pt[i - 1].event);
        if (t.pt[i].bytes > best) {
            best = t.pt[i].bytes;
            best_event = t.pt[i].event;
        }
    }
    ck_assert_int_eq(best, peak);
    ck_assert_int_eq(best_event, peak_event);
}
END_TEST

START_TEST(bound_ratio_is_error_over_bound)
{
    float a[3] = {1.0f, 2.5f, -4.0f}, r[3] = {1.0f, 2.0f, -4.0f};
    ck_metrics m;
    ck_verdict v = ck_compare(CK_F32, 3, a, r, 0.1, 0.05, &m);
    ck_assert_int_eq(v, CK_VERDICT_MISMATCH);
    /* element 1: |2.5 - 2| / (0.05 + 0.1 * 2) = 0.5 / 0.25 = 2 */
    ck_assert(fabs(m.max_ratio - 2.0) < 1e-12);
    ck_compare(CK_F32, 3, r, r, 0.1, 0.05, &m);
    ck_assert(m.max_ratio == 0.0);
    ck_compare(CK_F32, 3, a, r, 0.0, 0.0, &m);
    ck_assert(isinf(m.max_ratio));
}
END_TEST

static void add(ck_run_set *s, int index, const char *name, ck_item_status st, const char *msg)
{
    ck_error err;
    ck_run_item it = {.index = index, .case_name = (char *)name, .case_file = "cases/x.json",
                      .dtype = "fp32", .backend = "cpu", .status = st, .message = (char *)msg};
    ck_assert_ptr_nonnull(ck_run_set_add(s, &it, &err));
}

START_TEST(junit_escapes_counts_and_orders)
{
    ck_run_set s = {.reproducible = true};
    s.command = strdup("run");
    add(&s, 2, "c<&>\"'", CK_ITEM_FAIL, "bad \"quote\" & <tag>\x01");
    add(&s, 0, "a", CK_ITEM_PASS, NULL);
    add(&s, 3, "d", CK_ITEM_SKIPPED, "no fp16 conv");
    add(&s, 1, "b", CK_ITEM_ERROR, "did not load");
    ck_error err;
    ck_assert_int_eq(ck_run_set_sort(&s, &err), CK_OK);
    ck_assert_str_eq(s.items[0].case_name, "a");
    ck_assert_str_eq(s.items[3].case_name, "d");
    ck_assert_int_eq(ck_run_set_exit_code(&s), 2);
    char *x = ck_junit_string(&s);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(strstr(x, "tests=\"4\" failures=\"1\" errors=\"1\" skipped=\"1\""));
    ck_assert_ptr_nonnull(strstr(x, "name=\"c&lt;&amp;&gt;&quot;&#39; [fp32]\""));
    /* a control character XML refuses is replaced by U+FFFD, visibly */
    ck_assert_ptr_nonnull(strstr(x, "message=\"bad &quot;quote&quot; &amp; &lt;tag&gt;\xef\xbf\xbd\""));
    ck_assert_ptr_null(strchr(x, '\x01'));
    ck_assert_ptr_nonnull(strstr(x, "<skipped message=\"no fp16 conv\"/>"));
    ck_assert(strstr(x, "name=\"a [fp32]\"") < strstr(x, "name=\"b [fp32]\""));
    free(x);
    char *h = ck_html_string(&s);
    ck_assert_ptr_nonnull(h);
    ck_assert_ptr_nonnull(strstr(h, "1 passed, 1 failed, 1 errors, 1 skipped"));
    ck_assert_ptr_null(strstr(h, "<script"));
    free(h);
    add(&s, 1, "b again", CK_ITEM_PASS, NULL);
    ck_assert_int_ne(ck_run_set_sort(&s, &err), CK_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "appears twice"));
    ck_run_set_free(&s);
}
END_TEST

Suite *suite_ci_outputs(void)
{
    Suite *s = suite_create("ci_outputs");
    TCase *tc = tcase_create("ci_outputs");
    tcase_add_test(tc, sha256_known_vectors);
    tcase_add_test(tc, mem_trace_is_bounded_and_keeps_the_peak);
    tcase_add_test(tc, bound_ratio_is_error_over_bound);
    tcase_add_test(tc, junit_escapes_counts_and_orders);
    suite_add_tcase(s, tc);
    return s;
}
