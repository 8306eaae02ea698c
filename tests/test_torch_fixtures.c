/*
 * Truth from outside: the CPU reference backend against PyTorch. Each case in
 * tests/fixtures/torch/cases/ is trained on the reference backend in fp32 (the plain run)
 * and its step-0 loss, gradients and (for multi-step cases) parameters after the first
 * optimizer step are compared with <case>.expected.safetensors, which
 * tests/fixtures/torch/gen_torch_fixtures.py wrote from PyTorch (float64) on the harness's
 * own initial weights, data and dropout masks (README.md there). PyTorch is not needed here.
 *
 * Rule, per tensor t of the fixture (documented in tests/fixtures/torch/README.md):
 *   ||ours - torch||_2 <= 1e-5 * ||torch||_2, or, when t is mathematically ~0
 *   (||torch|| < 1e-6 * G, G the L2 norm of all of the step's gradients in the fixture),
 *   ||ours - torch||_2 <= 1e-5 * G.
 * Every tensor of the fixture must exist in our run with its shape, every parameter of our
 * run must have a fixture gradient, and the fixture's gradients must not all be zero.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/engine/train.h"
#include "harness/io/tensorload.h"
#include "harness/io/tensorset.h"
#include "tests/test_util.h"

#define REL_L2_TOL 1e-5
#define ZERO_FRACTION 1e-6

static int list_fixture_cases(char names[][256], int max)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/torch/cases", tu_root());
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < max) {
        size_t len = strlen(de->d_name);
        if (len > 5 && strcmp(de->d_name + len - 5, ".json") == 0) {
            snprintf(names[n], 256, "%.*s", (int)(len - 5), de->d_name);
            n++;
        }
    }
    closedir(d);
    return n;
}

/* element i of a fixture tensor (fp32 or fp64) */
static double fx_get(const ck_named_tensor *t, int64_t i)
{
    if (t->dtype == CK_FT_F64)
        return ((const double *)t->data)[i];
    float f;
    memcpy(&f, (const char *)t->data + 4 * i, 4);
    return f;
}

static double ours_get(const ck_record_entry *e, int64_t i)
{
    return e->dtype == CK_F64 ? ((const double *)e->data)[i] : ((const float *)e->data)[i];
}

static const ck_record_entry *find_entry(const ck_record *r, ck_tensor_kind kind, const char *name)
{
    for (int k = 0; k < r->n; k++)
        if (r->e[k].kind == kind && r->e[k].step == 0 &&
            (kind == CK_KIND_LOSS || strcmp(r->e[k].name, name) == 0))
            return &r->e[k];
    return NULL;
}

static void check_case(const char *name)
{
    char path[12288], rel[12288];
    snprintf(path, sizeof path, "%s/tests/fixtures/torch/%s.expected.safetensors", tu_root(), name);
    ck_tensorset fx;
    ck_error err = {{0}};
    ck_assert_msg(ck_tensorset_load(path, &fx, &err) == CK_OK, "%s", err.msg);

    tu_built_case bc;
    snprintf(rel, sizeof rel, "%s/tests/fixtures/torch/cases/%s.json", tu_root(), name);
    ck_assert_msg(ck_case_load(rel, &bc.cs, &err) == CK_OK, "%s", err.msg);
    ck_assert_msg(ck_graph_build(&bc.cs, &bc.g, &err) == CK_OK, "%s", err.msg);
    ck_backend *b = tu_cpu_backend();
    ck_record rec;
    ck_assert_msg(ck_train(b, &bc.g, NULL, CK_F32, NULL, &rec, &err) == CK_OK, "%s", err.msg);

    /* G: the norm of all of the fixture's gradients */
    double G2 = 0.0;
    int n_grads = 0;
    for (int k = 0; k < fx.n; k++) {
        if (strncmp(fx.t[k].name, "grad.", 5) != 0)
            continue;
        n_grads++;
        for (int64_t i = 0; i < ck_shape_numel(&fx.t[k].shape); i++)
            G2 += fx_get(&fx.t[k], i) * fx_get(&fx.t[k], i);
    }
    const double G = sqrt(G2);
    ck_assert_msg(G > 0.0, "%s: the fixture's gradients are all zero", name);

    int checked = 0;
    for (int k = 0; k < fx.n; k++) {
        const ck_named_tensor *t = &fx.t[k];
        ck_tensor_kind kind;
        const char *tname;
        if (strcmp(t->name, "loss") == 0) {
            kind = CK_KIND_LOSS;
            tname = "loss";
        } else if (strncmp(t->name, "grad.", 5) == 0) {
            kind = CK_KIND_GRAD;
            tname = t->name + 5;
        } else if (strncmp(t->name, "param.", 6) == 0) {
            kind = CK_KIND_PARAM;
            tname = t->name + 6;
        } else {
            ck_abort_msg("%s: unexpected fixture tensor %s", name, t->name);
            return;
        }
        const ck_record_entry *e = find_entry(&rec, kind, tname);
        ck_assert_msg(e != NULL, "%s: %s is not in our run", name, t->name);
        const int64_t n = ck_shape_numel(&t->shape);
        ck_assert_msg(ck_shape_numel(&e->shape) == n, "%s: %s has %lld elements, ours %lld", name,
                      t->name, (long long)n, (long long)ck_shape_numel(&e->shape));
        double d2 = 0.0, r2 = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const double want = fx_get(t, i), got = ours_get(e, i);
            d2 += (got - want) * (got - want);
            r2 += want * want;
        }
        const double dn = sqrt(d2), rn = sqrt(r2);
        const bool zero = kind == CK_KIND_GRAD && rn < ZERO_FRACTION * G;
        const double allowed = REL_L2_TOL * (zero ? G : rn);
        ck_assert_msg(dn <= allowed,
                      "%s: %s differs from PyTorch: ||ours - torch|| = %.3g, allowed %.3g "
                      "(relative L2 %.3g%s)",
                      name, t->name, dn, allowed, rn > 0 ? dn / rn : INFINITY,
                      zero ? "; judged against the gradient norm" : "");
        checked++;
    }
    /* every parameter of ours has a fixture gradient */
    int ours_grads = 0;
    for (int k = 0; k < rec.n; k++)
        ours_grads += rec.e[k].kind == CK_KIND_GRAD && rec.e[k].step == 0;
    ck_assert_msg(ours_grads == n_grads, "%s: our run has %d gradients, the fixture %d", name,
                  ours_grads, n_grads);
    ck_assert_int_gt(checked, 2);

    ck_record_free(&rec);
    b->destroy(b);
    tu_free_built(&bc);
    ck_tensorset_free(&fx);
}

START_TEST(reference_backend_matches_pytorch_on_every_fixture)
{
    char names[32][256];
    const int n = list_fixture_cases(names, 32);
    ck_assert_int_ge(n, 5);
    for (int i = 0; i < n; i++)
        check_case(names[i]);
}
END_TEST

/* The comparison can fail: a fixture against a run that differs (another seed). */
START_TEST(a_different_run_is_caught)
{
    char path[12288], rel[12288];
    snprintf(path, sizeof path, "%s/tests/fixtures/torch/unet3d_ops.expected.safetensors",
             tu_root());
    ck_tensorset fx;
    ck_error err = {{0}};
    ck_assert_msg(ck_tensorset_load(path, &fx, &err) == CK_OK, "%s", err.msg);
    tu_built_case bc;
    snprintf(rel, sizeof rel, "%s/tests/fixtures/torch/cases/unet3d_ops.json", tu_root());
    ck_assert_msg(ck_case_load(rel, &bc.cs, &err) == CK_OK, "%s", err.msg);
    bc.cs.seed += 1;
    ck_assert_msg(ck_graph_build(&bc.cs, &bc.g, &err) == CK_OK, "%s", err.msg);
    ck_backend *b = tu_cpu_backend();
    ck_record rec;
    ck_assert_msg(ck_train(b, &bc.g, NULL, CK_F32, NULL, &rec, &err) == CK_OK, "%s", err.msg);
    const ck_named_tensor *t = ck_tensorset_find(&fx, "grad.c1.weight");
    ck_assert_ptr_nonnull(t);
    const ck_record_entry *e = find_entry(&rec, CK_KIND_GRAD, "c1.weight");
    ck_assert_ptr_nonnull(e);
    double d2 = 0.0, r2 = 0.0;
    for (int64_t i = 0; i < ck_shape_numel(&t->shape); i++) {
        d2 += (ours_get(e, i) - fx_get(t, i)) * (ours_get(e, i) - fx_get(t, i));
        r2 += fx_get(t, i) * fx_get(t, i);
    }
    ck_assert_msg(sqrt(d2) > REL_L2_TOL * sqrt(r2), "another seed matched the fixture");
    ck_record_free(&rec);
    b->destroy(b);
    tu_free_built(&bc);
    ck_tensorset_free(&fx);
}
END_TEST

Suite *suite_torch_fixtures(void)
{
    Suite *s = suite_create("torch_fixtures");
    TCase *tc = tcase_create("pytorch");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, reference_backend_matches_pytorch_on_every_fixture);
    tcase_add_test(tc, a_different_run_is_caught);
    suite_add_tcase(s, tc);
    return s;
}
