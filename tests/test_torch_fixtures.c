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
 *
 * cast_values.safetensors (gen_cast_values.py) pins the cast op value by value: PyTorch's
 * x.half().float(), x.bfloat16().float() and x.half().bfloat16().float() with their
 * gradients on rounding ties, overflow, subnormals and NaN, bit for bit.
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

/* ---- cast, value by value (tests/fixtures/torch/gen_cast_values.py) ---- */

/* The chains of cast_values.safetensors as the case's cast layers: {to, from} each. */
static const struct {
    const char *name;
    int n;
    int to_from[3][2];
} cast_chains[] = {
    {"f16", 2, {{CK_F16, CK_F32}, {CK_F32, CK_F16}}},
    {"bf16", 2, {{CK_BF16, CK_F32}, {CK_F32, CK_BF16}}},
    {"f16_bf16", 3, {{CK_F16, CK_F32}, {CK_BF16, CK_F16}, {CK_F32, CK_BF16}}},
};

static const ck_named_tensor *cast_fx(const ck_tensorset *fx, const char *chain, const char *what)
{
    char name[64];
    snprintf(name, sizeof name, "%s%s%s", chain, chain[0] ? "." : "", what);
    const ck_named_tensor *t = ck_tensorset_find(fx, name);
    ck_assert_msg(t && t->dtype == CK_FT_F32, "cast_values: no float32 tensor %s", name);
    return t;
}

/* The forward of the chain and its backward (in reverse) on the fast CPU backend in fp32,
 * against PyTorch's every value: the forward bit for bit (signed zeros, +-inf, NaN where
 * PyTorch has NaN), the gradient by value (a gradient accumulates into a zeroed buffer, so
 * -0 arrives as +0, as the harness's every gradient does). */
START_TEST(cast_matches_pytorch_value_for_value)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/torch/cast_values.safetensors", tu_root());
    ck_tensorset fx;
    ck_error err;
    ck_assert_msg(ck_tensorset_load(path, &fx, &err) == CK_OK, "%s", err.msg);
    const ck_named_tensor *x = cast_fx(&fx, "", "x"), *dy = cast_fx(&fx, "", "dy");
    const int64_t n = ck_shape_numel(&x->shape);
    double *xv = malloc((size_t)n * sizeof *xv), *dyv = malloc((size_t)n * sizeof *dyv);
    ck_assert(xv && dyv);
    for (int64_t i = 0; i < n; i++) {
        xv[i] = fx_get(x, i);
        dyv[i] = fx_get(dy, i);
    }
    tu_cpu_setup();
    for (size_t c = 0; c < sizeof cast_chains / sizeof cast_chains[0]; c++) {
        const int k = cast_chains[c].n;
        ck_tensor *t[4], *g[4];
        t[0] = tu_tensor_of("x", CK_F32, SHAPE(n), xv);
        for (int j = 0; j < k; j++) {
            t[j + 1] = tu_tensor_new("y", CK_F32, SHAPE(n));
            g[j] = tu_tensor_new("dx", CK_F32, SHAPE(n));
        }
        g[k] = tu_tensor_of("dy", CK_F32, SHAPE(n), dyv);
        ck_op_params op[3];
        ck_fwd_args a;
        memset(&a, 0, sizeof a);
        for (int j = 0; j < k; j++) {
            ck_op_params_default(&op[j], CK_OP_CAST, 0);
            op[j].cast_to = cast_chains[c].to_from[j][0];
            op[j].cast_from = cast_chains[c].to_from[j][1];
            ck_op_io io = {.n_in = 1, .in = {t[j]}, .out = t[j + 1]};
            tu_forward_ok(cast_chains[c].name, &op[j], &a, &io);
        }
        for (int j = k - 1; j >= 0; j--) {
            ck_op_io io = {.n_in = 1, .in = {t[j]}, .out = t[j + 1]};
            ck_op_grads gr = {.dout = g[j + 1], .din = {g[j]}};
            tu_backward_ok(cast_chains[c].name, &op[j], &a, &io, &gr);
        }
        const ck_named_tensor *wy = cast_fx(&fx, cast_chains[c].name, "y");
        const ck_named_tensor *wdx = cast_fx(&fx, cast_chains[c].name, "dx");
        int changed = 0;
        for (int64_t i = 0; i < n; i++) {
            const float y = ((const float *)t[k]->data)[i], dx = ((const float *)g[0]->data)[i];
            float want_y, want_dx;
            memcpy(&want_y, (const char *)wy->data + 4 * i, 4);
            memcpy(&want_dx, (const char *)wdx->data + 4 * i, 4);
            ck_assert_msg(isnan(want_y) ? isnan(y) : memcmp(&y, &want_y, 4) == 0,
                          "%s: y[%lld] of x %.9g: %.9g, PyTorch %.9g", cast_chains[c].name,
                          (long long)i, xv[i], y, want_y);
            ck_assert_msg(dx == want_dx, "%s: dx[%lld] of dy %.9g: %.9g, PyTorch %.9g",
                          cast_chains[c].name, (long long)i, dyv[i], dx, want_dx);
            changed += (y != (float)xv[i] && !isnan(y)) + (dx != (float)dyv[i]);
        }
        /* the fixture exercises rounding in both directions (not a copy) */
        ck_assert_msg(changed > n / 2, "%s: only %d values rounded", cast_chains[c].name, changed);
        for (int j = 0; j <= k; j++) {
            tu_tensor_free(t[j]);
            tu_tensor_free(g[j]);
        }
    }
    tu_cpu_teardown();
    free(xv);
    free(dyv);
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
    tcase_add_test(tc, cast_matches_pytorch_value_for_value);
    suite_add_tcase(s, tc);
    return s;
}
