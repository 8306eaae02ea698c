/*
 * run --dump and --init: a dump read back bit for bit, a run reproduced bit for bit from its
 * own dumped initial weights, and every weight-file mismatch refused with the file and the
 * tensor named.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/verify/judge.h"
#include "harness/verify/run_case.h"
#include "backends/backend.h"
#include "harness/io/tensorload.h"
#include "harness/engine/dump.h"
#include "harness/engine/train.h"
#include "reports/report.h"
#include "tests/test_util.h"

static const char *case_text =
    "{\"name\": \"small\", \"seed\": 5, \"input\": {\"shape\": [4, 2, 8, 8]}, \"layers\": ["
    "{\"name\": \"c1\", \"op\": \"conv2d\", \"filters\": 3, \"kernel\": 3, \"padding\": \"same\"},"
    "{\"name\": \"bn\", \"op\": \"batchnorm\"}, {\"name\": \"r\", \"op\": \"relu\"},"
    "{\"name\": \"f\", \"op\": \"flatten\"}, {\"name\": \"fc\", \"op\": \"linear\", \"units\": 3}],"
    "\"loss\": {\"op\": \"cross_entropy\"}, \"checkpoint\": {\"segments\": [[\"c1\", \"r\"]]},"
    "\"train\": {\"steps\": 2, \"optimizer\": \"adam\", \"lr\": 0.01}, \"expect\": \"identical\"}";

typedef struct {
    tu_built_case bc;
    ck_backend *b;
    char dir[256];
} fixture;

static void setup(fixture *f)
{
    tu_build_named(&f->bc, case_text, "small.json");
    f->b = tu_cpu_backend();
    snprintf(f->dir, sizeof f->dir, "/tmp/ck_dump_test_%d", (int)getpid());
}

static void teardown(fixture *f)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    ck_assert_int_eq(system(cmd), 0);
    f->b->destroy(f->b);
    tu_free_built(&f->bc);
}

static char *report_text(fixture *f, const ck_case_run_opts *opts)
{
    ck_result r;
    ck_error err;
    ck_assert_msg(ck_run_case_ex(f->b, &f->bc.g, CK_F32, opts, &r, &err) == CK_OK, "%s", err.msg);
    ck_assert(r.verdict == CK_VERDICT_IDENTICAL);
    ck_report_meta meta = {.tool_version = "t", .case_path = "x", .include_wall_time = false};
    /* the report names the weights file a run started from; compare everything else */
    char *init_from = f->bc.cs.init_from;
    f->bc.cs.init_from = NULL;
    char *s = ck_report_json_string(&r, &meta);
    f->bc.cs.init_from = init_from;
    ck_result_free(&r);
    return s;
}

START_TEST(dump_reads_back_bit_for_bit)
{
    fixture f;
    setup(&f);
    ck_case_run_opts opts = {.dump_dir = f.dir, .dump_activations = true};
    free(report_text(&f, &opts));
    ck_record rec;
    ck_error err;
    ck_assert(ck_train(f.b, &f.bc.g, NULL, CK_F32, NULL, &rec, &err) == CK_OK);
    int checked = 0;
    for (int k = 0; k < rec.n; k++) {
        const ck_record_entry *e = &rec.e[k];
        const char *file = e->kind == CK_KIND_GRAD ? "grads" : e->kind == CK_KIND_PARAM ? "params"
                           : e->kind == CK_KIND_BUFFER ? "buffers" : "loss";
        char path[512];
        snprintf(path, sizeof path, "%s/plain/step_%04d/%s.safetensors", f.dir, e->step, file);
        ck_tensorset set;
        ck_assert_msg(ck_tensorset_load(path, &set, &err) == CK_OK, "%s", err.msg);
        const ck_named_tensor *t = ck_tensorset_find(&set, e->name);
        ck_assert_msg(t != NULL, "%s not in %s", e->name, path);
        ck_assert(ck_shape_equal(&t->shape, &e->shape));
        ck_assert_int_eq(ck_named_tensor_bytes(t), (size_t)ck_shape_numel(&e->shape) * ck_dtype_size(e->dtype));
        ck_assert_msg(memcmp(t->data, e->data, ck_named_tensor_bytes(t)) == 0, "%s differs", e->name);
        ck_tensorset_free(&set);
        checked++;
    }
    ck_assert_int_ge(checked, 20);
    char path[512];
    snprintf(path, sizeof path, "%s/checkpointed/step_0001/activations.safetensors", f.dir);
    ck_tensorset acts;
    ck_assert_msg(ck_tensorset_load(path, &acts, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_eq(acts.n, 5); /* one output per layer */
    ck_tensorset_free(&acts);
    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    ck_assert_int_eq(access(path, R_OK), 0);
    ck_record_free(&rec);
    teardown(&f);
}
END_TEST

START_TEST(init_from_dumped_weights_reproduces_the_run)
{
    fixture f;
    setup(&f);
    ck_case_run_opts opts = {.dump_dir = f.dir};
    char *seeded = report_text(&f, &opts);
    char path[512];
    snprintf(path, sizeof path, "%s/plain/init/weights.safetensors", f.dir);
    f.bc.cs.init_from = strdup(path);
    f.bc.cs.seed = 5; /* data and dropout still follow the seed: only the weights come from the file */
    char *loaded = report_text(&f, NULL);
    ck_assert_str_eq(seeded, loaded);
    free(seeded);
    free(loaded);
    teardown(&f);
}
END_TEST

/* Writes a weights file with one tensor changed, dropped or added, and loads it. */
static void expect_init_error(fixture *f, const char *drop, const char *reshape, bool add_extra,
                              const char *want1, const char *want2)
{
    free(f->bc.cs.init_from);
    f->bc.cs.init_from = NULL;
    ck_case_run_opts opts = {.dump_dir = f->dir};
    free(report_text(f, &opts));
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s/plain/init/weights.safetensors", f->dir);
    snprintf(dst, sizeof dst, "%s/edited.safetensors", f->dir);
    ck_tensorset set;
    ck_error err;
    ck_assert(ck_tensorset_load(src, &set, &err) == CK_OK);
    ck_named_tensor out[32];
    int n = 0;
    float extra[2] = {1, 2};
    for (int k = 0; k < set.n; k++) {
        if (drop && strcmp(set.t[k].name, drop) == 0)
            continue;
        out[n] = set.t[k];
        if (reshape && strcmp(set.t[k].name, reshape) == 0) {
            out[n].shape.ndim = 1;
            out[n].shape.dim[0] = ck_shape_numel(&set.t[k].shape);
        }
        n++;
    }
    if (add_extra)
        out[n++] = (ck_named_tensor){.name = "fc.weights", .dtype = CK_FT_F32,
                                     .shape = {.ndim = 1, .dim = {2}}, .data = extra};
    ck_assert_msg(ck_dump_tensors(dst, n, out, &err) == CK_OK, "%s", err.msg);
    ck_tensorset_free(&set);
    free(f->bc.cs.init_from);
    f->bc.cs.init_from = strdup(dst);
    ck_result r;
    ck_status st = ck_run_case(f->b, &f->bc.g, CK_F32, &r, &err);
    ck_assert_int_eq(st, CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "edited.safetensors") && strstr(err.msg, want1) &&
                      strstr(err.msg, want2),
                  "message: %s", err.msg);
    ck_assert_msg(strchr(err.msg, '\n') == NULL, "not one line: %s", err.msg);
    ck_result_free(&r);
}

START_TEST(init_refuses_missing_reshaped_and_unknown_tensors)
{
    fixture f;
    setup(&f);
    expect_init_error(&f, "bn.running_var", NULL, false, "no tensor `bn.running_var`", "[3]");
    expect_init_error(&f, NULL, "c1.weight", false, "`c1.weight` has shape [54]", "[3, 2, 3, 3]");
    expect_init_error(&f, NULL, NULL, true, "`fc.weights` matches no parameter or buffer", "small");
    teardown(&f);
}
END_TEST

Suite *suite_dump_init(void)
{
    Suite *s = suite_create("dump_init");
    TCase *tc = tcase_create("dump_init");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, dump_reads_back_bit_for_bit);
    tcase_add_test(tc, init_from_dumped_weights_reproduces_the_run);
    tcase_add_test(tc, init_refuses_missing_reshaped_and_unknown_tensors);
    suite_add_tcase(s, tc);
    return s;
}
