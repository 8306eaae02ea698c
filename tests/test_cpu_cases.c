/*
 * Whole shipped cases on the fast CPU backend (backends/cpu, docs/cpu-backend.md):
 *  - 1 thread vs 2 threads and the portable path vs this machine's SIMD path: bitwise
 *    identical records (results do not depend on the number of threads);
 *  - plain vs checkpointed meeting every expectation, within the cross-backend tolerance
 *    of `ref` (ck_compare_backends);
 *  - the whole-case float64 gradient check.
 * No timing is asserted anywhere.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/backend.h"
#include "backends/registry.h"
#include "harness/engine/train.h"
#include "harness/verify/gradcheck.h"
#include "harness/verify/judge.h"
#include "harness/verify/result.h"
#include "harness/verify/run_case.h"
#include "tests/test_util.h"

static ck_backend *make_cpu(int threads, const char *isa)
{
    ck_backend *b = NULL;
    ck_error err = {{0}};
    ck_assert_msg(ck_backend_cpu_create_with(&b, threads, isa, &err) == CK_OK, "cpu: %s",
                  err.msg);
    return b;
}


static const char *const shipped[] = {
    "canary_autocast_drop.json", "canary_bn_update.json",   "canary_dropout_stateful.json",
    "canary_no_saving.json",     "cnn_bn.json",             "conv1d_seq.json",
    "fp16_underflow_dynamic.json", "fp16_underflow_noscale.json", "mlp_dropout.json",
    "resnet_concat.json",        "unet3d_bn.json",              "gpt_decoder.json",
    "llama_blocks.json",         "canary_gpt_stateful.json",    "unet3d_groupnorm.json",
};

static const ck_dtype run_dtypes[] = {CK_F32, CK_F16, CK_BF16};

static void assert_records_identical(const char *what, const ck_record *a, const ck_record *b)
{
    ck_assert_int_eq(a->n, b->n);
    for (int s = 0; s < a->steps; s++)
        ck_assert_msg(memcmp(&a->losses[s], &b->losses[s], sizeof(double)) == 0,
                      "%s: loss of step %d differs", what, s);
    for (int k = 0; k < a->n; k++) {
        ck_assert_str_eq(a->e[k].name, b->e[k].name);
        const size_t bytes =
            (size_t)ck_shape_numel(&a->e[k].shape) * ck_dtype_size(a->e[k].dtype);
        ck_assert_msg(memcmp(a->e[k].data, b->e[k].data, bytes) == 0,
                      "%s: %s (step %d) differs bitwise", what, a->e[k].name, a->e[k].step);
    }
}

/* 1 vs 2 threads, and the portable path vs this machine's SIMD path: the same bits */
START_TEST(test_case_thread_and_isa_invariance)
{
    tu_built_case bc;
    tu_build_file(&bc, shipped[_i]);
    ck_backend *one = make_cpu(1, NULL), *two = make_cpu(2, NULL),
               *portable = make_cpu(2, "portable");
    for (int d = 0; d < COUNT(run_dtypes); d++) {
        ck_record r1, r2, rp;
        ck_error err = {{0}};
        ck_assert_msg(ck_train(one, &bc.g, NULL, run_dtypes[d], NULL, &r1, &err) == CK_OK,
                      "%s", err.msg);
        ck_assert_msg(ck_train(two, &bc.g, NULL, run_dtypes[d], NULL, &r2, &err) == CK_OK,
                      "%s", err.msg);
        ck_assert_msg(ck_train(portable, &bc.g, NULL, run_dtypes[d], NULL, &rp, &err) == CK_OK,
                      "%s", err.msg);
        char what[160];
        snprintf(what, sizeof what, "%s %s: 1 vs 2 threads", shipped[_i],
                 ck_dtype_name(run_dtypes[d]));
        assert_records_identical(what, &r1, &r2);
        snprintf(what, sizeof what, "%s %s: portable vs SIMD", shipped[_i],
                 ck_dtype_name(run_dtypes[d]));
        assert_records_identical(what, &rp, &r2);
        ck_record_free(&r1);
        ck_record_free(&r2);
        ck_record_free(&rp);
    }
    one->destroy(one);
    two->destroy(two);
    portable->destroy(portable);
    tu_free_built(&bc);
}
END_TEST

/* every expectation met on cpu (plain vs checkpointed bitwise identical where the case
 * expects it), and within the cross-backend tolerance of ref */
START_TEST(test_case_expectations_and_vs_ref)
{
    tu_built_case bc;
    tu_build_file(&bc, shipped[_i]);
    ck_backend *cpu = make_cpu(2, NULL);
    ck_backend *ref = NULL;
    ck_error err = {{0}};
    ck_assert(ck_backend_create("ref", NULL, &ref, &err) == CK_OK);
    for (int d = 0; d < COUNT(run_dtypes); d++) {
        ck_result res;
        memset(&res, 0, sizeof res);
        ck_assert_msg(ck_run_case(cpu, &bc.g, run_dtypes[d], &res, &err) == CK_OK, "%s",
                      err.msg);
        ck_assert_msg(ck_compare_backends(cpu, ref, &bc.g, run_dtypes[d], &res, &err) == CK_OK,
                      "%s", err.msg);
        ck_assert_msg(res.expect_met, "%s %s on cpu: verdict %d does not meet the expectation",
                      shipped[_i], ck_dtype_name(run_dtypes[d]), (int)res.verdict);
        ck_assert_msg(res.vs_backend_verdict != CK_VERDICT_MISMATCH,
                      "%s %s: cpu vs ref outside the cross-backend tolerance at %s",
                      shipped[_i], ck_dtype_name(run_dtypes[d]),
                      res.vs_backend_first >= 0 ? res.vs_backend[res.vs_backend_first].name
                                                : "?");
        ck_result_free(&res);
    }
    cpu->destroy(cpu);
    ref->destroy(ref);
    tu_free_built(&bc);
}
END_TEST

/* the whole-case float64 gradient check through the cpu backend */
START_TEST(test_case_gradcheck)
{
    const char *names[] = {"mlp_dropout.json", "conv1d_seq.json", "unet3d_bn.json"};
    tu_built_case bc;
    tu_build_file(&bc, names[_i]);
    ck_backend *cpu = make_cpu(2, NULL);
    ck_gradcheck_opts o;
    ck_gradcheck_opts_default(&o);
    o.max_samples = 8;
    ck_gradcheck_entry *e = NULL;
    int n = 0;
    ck_error err = {{0}};
    ck_assert_msg(ck_gradcheck_case(cpu, &bc.g, &o, &e, &n, &err) == CK_OK, "%s", err.msg);
    for (int i = 0; i < n; i++)
        ck_assert_msg(e[i].failed == 0, "%s: %s: %lld elements outside tolerance", names[_i],
                      e[i].name, (long long)e[i].failed);
    free(e);
    cpu->destroy(cpu);
    tu_free_built(&bc);
}
END_TEST


Suite *suite_cpu_cases(void)
{
    Suite *s = suite_create("cpu_cases");
    TCase *c = tcase_create("cases");
    tcase_set_timeout(c, 600);
    tcase_add_loop_test(c, test_case_thread_and_isa_invariance, 0, COUNT(shipped));
    tcase_add_loop_test(c, test_case_expectations_and_vs_ref, 0, COUNT(shipped));
    tcase_add_loop_test(c, test_case_gradcheck, 0, 3);
    suite_add_tcase(s, c);
    return s;
}
