/*
 * The op table (tests/backend_ops.h) against every registered backend that can be created
 * here, beside the reference backend `ref`: per row forward, backward, the low-precision
 * rule and both gradchecks (on `ref` itself: the rule and the float64 gradcheck); then what
 * the backends share beyond the ops (dropout masks, losses, optimizers, convert, the
 * calibration rounding, determinism), and the record keys of the whole table. A backend
 * that cannot be created here (cuda without a GPU or its module) is named on stdout and
 * not counted as passed; tests/gpu/test_gpu.c runs the same table on the GPU.
 *
 * CK_OP_FILTER=TEXT runs only the rows whose description contains TEXT; CK_OP_BACKEND=NAME
 * only that backend; CK_OP_VERBOSE=1 prints every comparison.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/registry.h"
#include "tests/backend_ops.h"

static bool wanted_backend(const char *name)
{
    const char *only = getenv("CK_OP_BACKEND");
    return !only || !only[0] || strcmp(only, name) == 0;
}

/* Creates backend i of the registry; NULL (with a line saying why) when it cannot run here. */
static ck_backend *create_at(int i, bool say_why)
{
    const char *name = ck_backend_name_at(i);
    char why[256];
    if (!wanted_backend(name))
        return NULL;
    if (!ck_backend_available(name, why, sizeof why)) {
        if (say_why)
            printf("backend_ops: %s not run here: %s\n", name, why);
        return NULL;
    }
    ck_backend *b = NULL;
    ck_error err = {{0}};
    if (ck_backend_create(name, NULL, &b, &err) != CK_OK) {
        printf("backend_ops: %s not run here: %s\n", name, err.msg);
        return NULL;
    }
    return b;
}

static FILE *verbose_out(void)
{
    const char *v = getenv("CK_OP_VERBOSE");
    return v && v[0] && strcmp(v, "0") != 0 ? stdout : NULL;
}

START_TEST(every_backend_runs_the_row_like_ref)
{
    int n;
    const bo_row *r = &bo_rows(&n)[_i];
    if (!bo_row_matches(r, getenv("CK_OP_FILTER")))
        return;
    ck_backend *ref = NULL;
    ck_error err = {{0}};
    ck_assert_msg(ck_backend_create("ref", NULL, &ref, &err) == CK_OK, "%s", err.msg);
    int ran = 0;
    for (int i = 0; i < ck_backend_count(); i++) {
        const bool self = strcmp(ck_backend_name_at(i), "ref") == 0;
        ck_backend *b = self ? (wanted_backend("ref") ? ref : NULL) : create_at(i, _i == 0);
        if (!b)
            continue;
        bo_ctx c;
        bo_ctx_init(&c, ref, b, verbose_out());
        c.print_passes = c.out != NULL;
        bo_run_row(&c, _i, BO_RUN_ALL);
        if (!self)
            b->destroy(b);
        ck_assert_msg(c.fail == 0, "%s: %d failed, first: %s", r->desc, c.fail, c.first_failure);
        ran += c.pass;
    }
    ref->destroy(ref);
    ck_assert_msg(ran > 0 || getenv("CK_OP_BACKEND"), "%s: nothing compared", r->desc);
}
END_TEST

START_TEST(every_backend_shares_refs_numerics_beyond_the_ops)
{
    ck_backend *ref = NULL;
    ck_error err = {{0}};
    ck_assert_msg(ck_backend_create("ref", NULL, &ref, &err) == CK_OK, "%s", err.msg);
    for (int i = 0; i < ck_backend_count(); i++) {
        if (strcmp(ck_backend_name_at(i), "ref") == 0)
            continue;
        ck_backend *b = create_at(i, true);
        if (!b)
            continue;
        bo_ctx c;
        bo_ctx_init(&c, ref, b, verbose_out());
        c.print_passes = c.out != NULL;
        bo_run_dropout_masks(&c);
        bo_run_losses(&c);
        bo_run_optimizers(&c);
        bo_run_convert(&c);
        bo_run_calibration_round(&c);
        bo_run_determinism(&c);
        b->destroy(b);
        ck_assert_msg(c.fail == 0, "%d failed, first: %s", c.fail, c.first_failure);
        ck_assert_int_gt(c.pass, 50);
    }
    ref->destroy(ref);
}
END_TEST

/* The CUDA backend files each algorithm choice under (layer from the weight's name, pass,
 * dtype) and pins it: two rows sharing a key would be reported as "changed". Every row in
 * fp32, one ledger. */
START_TEST(record_keys_belong_to_one_row_each)
{
    ck_backend *ref = NULL, *cpu = NULL;
    ck_error err = {{0}};
    ck_assert(ck_backend_create("ref", NULL, &ref, &err) == CK_OK);
    ck_assert(ck_backend_create("cpu", NULL, &cpu, &err) == CK_OK);
    bo_ctx *c = malloc(sizeof *c);
    ck_assert_ptr_nonnull(c);
    bo_ctx_init(c, ref, cpu, NULL);
    int n;
    bo_rows(&n);
    for (int k = 0; k < n; k++) {
        bo_run_variant(c, k, bo_dtypes_of(CK_F32), "fp32", -1);
        bo_run_variant(c, k, bo_dtypes_of(CK_F32), "fp32", -1); /* the same row again: fine */
    }
    ck_assert_msg(c->fail == 0, "%d failed, first: %s", c->fail, c->first_failure);
    ck_assert_int_ge(c->ledger.n, 15);
    free(c);
    cpu->destroy(cpu);
    ref->destroy(ref);
}
END_TEST

/* Every op kind of the catalogue has a row. */
START_TEST(every_op_kind_has_a_row)
{
    int n;
    const bo_row *rows = bo_rows(&n);
    for (int k = 0; k < CK_OP_KIND_COUNT; k++) {
        bool found = false;
        for (int i = 0; i < n && !found; i++)
            found = (int)rows[i].op.kind == k;
        ck_assert_msg(found, "op %s has no row in the op table (tests/backend_ops.c)",
                      ck_op_kind_name((ck_op_kind)k));
    }
}
END_TEST

Suite *suite_backend_ops(void)
{
    Suite *s = suite_create("backend_ops");
    int n;
    bo_rows(&n);
    TCase *t = tcase_create("table");
    tcase_set_timeout(t, 300);
    tcase_add_loop_test(t, every_backend_runs_the_row_like_ref, 0, n);
    tcase_add_test(t, record_keys_belong_to_one_row_each);
    tcase_add_test(t, every_op_kind_has_a_row);
    suite_add_tcase(s, t);
    TCase *b = tcase_create("beyond_ops");
    tcase_set_timeout(b, 300);
    tcase_add_test(b, every_backend_shares_refs_numerics_beyond_the_ops);
    suite_add_tcase(s, b);
    return s;
}
