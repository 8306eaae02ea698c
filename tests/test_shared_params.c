/*
 * Shared parameters ("share", cases/README.md): a tied output head uses the token
 * embedding's weight. The one tensor is named once in the records, updated once per step,
 * its gradient is the sum over both uses (float64 central differences through the whole
 * case), and plain vs checkpointed runs stay bitwise identical in fp32, fp16 and bf16 with
 * the owner outside and the sharer inside a checkpoint segment.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/engine/train.h"
#include "harness/verify/gradcheck.h"
#include "harness/verify/result.h"
#include "harness/verify/run_case.h"
#include "tests/test_util.h"

/* tok (owner, no segment) and head (sharer, in the checkpointed segment ln..head) */
static const char tied_case[] =
    "{\"name\": \"tied\", \"seed\": 5,"
    " \"input\": {\"shape\": [2, 5], \"dist\": \"tokens\", \"vocab\": 7},"
    " \"layers\": ["
    "  {\"name\": \"tok\", \"op\": \"embedding\", \"vocab\": 7, \"units\": 4},"
    "  {\"name\": \"pos\", \"op\": \"positional\"},"
    "  {\"name\": \"ln\", \"op\": \"layernorm\", \"normalized_shape\": 4},"
    "  {\"name\": \"fc\", \"op\": \"linear\", \"units\": 4},"
    "  {\"name\": \"act\", \"op\": \"gelu\"},"
    "  {\"name\": \"head\", \"op\": \"linear\", \"units\": 7, \"bias\": false,"
    "   \"share\": \"tok.weight\"}],"
    " \"loss\": {\"op\": \"cross_entropy\", \"class_dim\": -1},"
    " \"checkpoint\": {\"segments\": [[\"ln\", \"head\"]]},"
    " \"train\": {\"steps\": 2, \"optimizer\": \"sgd\", \"lr\": 0.1},"
    " \"expect\": \"identical\"}";

static const ck_record_entry *find_entry(const ck_record *r, const char *name,
                                         ck_tensor_kind kind, int step, int *count)
{
    const ck_record_entry *hit = NULL;
    *count = 0;
    for (int k = 0; k < r->n; k++)
        if (strcmp(r->e[k].name, name) == 0 && r->e[k].kind == kind && r->e[k].step == step) {
            hit = &r->e[k];
            (*count)++;
        }
    return hit;
}

static double entry_value(const ck_record_entry *e, int64_t i)
{
    return e->dtype == CK_F64 ? ((const double *)e->data)[i] : ((const float *)e->data)[i];
}

START_TEST(tied_weight_is_named_once_and_updated_once)
{
    tu_built_case bc;
    tu_build_text(&bc, tied_case);
    ck_assert_int_eq(bc.g.nodes[5].n_params, 0);
    ck_assert_int_eq(bc.g.nodes[5].n_shares, 1);
    ck_assert_int_eq(bc.g.nodes[5].shares[0].layer, 0);
    ck_record rec;
    ck_error err = {{0}};
    ck_assert_msg(ck_train(tu_cpu, &bc.g, NULL, CK_F32, NULL, &rec, &err) == CK_OK,
                  "%s", err.msg);
    for (int k = 0; k < rec.n; k++)
        ck_assert_msg(strncmp(rec.e[k].name, "head.", 5) != 0, "the record holds %s",
                      rec.e[k].name);
    int n;
    for (int step = 0; step < 2; step++) {
        ck_assert_ptr_nonnull(find_entry(&rec, "tok.weight", CK_KIND_GRAD, step, &n));
        ck_assert_int_eq(n, 1);
        ck_assert_ptr_nonnull(find_entry(&rec, "tok.weight", CK_KIND_PARAM, step, &n));
        ck_assert_int_eq(n, 1);
    }
    /* SGD: the weight after step 1 is the weight after step 0 minus lr times step 1's
     * gradient, once (twice would be off by lr |g|) */
    const ck_record_entry *p0 = find_entry(&rec, "tok.weight", CK_KIND_PARAM, 0, &n);
    const ck_record_entry *p1 = find_entry(&rec, "tok.weight", CK_KIND_PARAM, 1, &n);
    const ck_record_entry *g1 = find_entry(&rec, "tok.weight", CK_KIND_GRAD, 1, &n);
    double gnorm = 0.0;
    for (int64_t i = 0; i < ck_shape_numel(&p0->shape); i++) {
        double want = entry_value(p0, i) - 0.1 * entry_value(g1, i);
        gnorm += fabs(entry_value(g1, i));
        ck_assert_msg(fabs(entry_value(p1, i) - want) <= 1e-6 * fabs(want) + 1e-7,
                      "tok.weight[%lld]: %.9g after the step, want %.9g", (long long)i,
                      entry_value(p1, i), want);
    }
    ck_assert_msg(gnorm > 1e-3, "the tied gradient is ~0 (%g): the test would be vacuous", gnorm);
    ck_record_free(&rec);
    tu_free_built(&bc);
}
END_TEST

/* both uses' contributions, against float64 central differences of the whole case's loss */
START_TEST(tied_gradient_matches_central_differences)
{
    tu_built_case bc;
    tu_build_text(&bc, tied_case);
    ck_gradcheck_entry *ent = NULL;
    int n = 0;
    ck_error err = {{0}};
    ck_assert_msg(ck_gradcheck_case(tu_cpu, &bc.g, NULL, &ent, &n, &err) == CK_OK,
                  "%s", err.msg);
    bool saw_tok = false;
    for (int k = 0; k < n; k++) {
        ck_assert_msg(strncmp(ent[k].name, "head.", 5) != 0, "gradcheck names %s", ent[k].name);
        saw_tok = saw_tok || strcmp(ent[k].name, "tok.weight") == 0;
        ck_assert_msg(ent[k].failed == 0 && ent[k].checked > 0,
                      "%s: %lld of %lld outside, max abs err %g", ent[k].name,
                      (long long)ent[k].failed, (long long)ent[k].checked, ent[k].max_abs_err);
    }
    ck_assert(saw_tok);
    free(ent);
    tu_free_built(&bc);
}
END_TEST

static const ck_dtype dtypes[] = {CK_F32, CK_F16, CK_BF16};

START_TEST(tied_runs_are_bitwise_identical_plain_vs_checkpointed)
{
    tu_built_case bc;
    tu_build_text(&bc, tied_case);
    ck_result res;
    ck_error err = {{0}};
    ck_assert_msg(ck_run_case(tu_cpu, &bc.g, dtypes[_i], &res, &err) == CK_OK, "%s",
                  err.msg);
    ck_assert_msg(res.verdict == CK_VERDICT_IDENTICAL && res.expect_met,
                  "%s: verdict %d, expectation %s", ck_dtype_name(dtypes[_i]), (int)res.verdict,
                  res.expect_met ? "met" : "not met");
    ck_result_free(&res);
    tu_free_built(&bc);
}
END_TEST

Suite *suite_shared_params(void)
{
    Suite *s = suite_create("shared_params");
    TCase *tc = tcase_create("tied_head");
    tcase_add_checked_fixture(tc, tu_cpu_setup, tu_cpu_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, tied_weight_is_named_once_and_updated_once);
    tcase_add_test(tc, tied_gradient_matches_central_differences);
    tcase_add_loop_test(tc, tied_runs_are_bitwise_identical_plain_vs_checkpointed, 0, 3);
    suite_add_tcase(s, tc);
    return s;
}
