/*
 * Allocation-failure sweep, as cJSON's own tests do it: the library's malloc,
 * calloc, realloc and strdup are wrapped at link time (-Wl,--wrap=..., see the Makefile's
 * oom-sweep target) and cJSON's allocations are routed through the same wrapper with
 * cJSON_InitHooks. Each scenario first runs cleanly to count its allocations, then once per
 * allocation with exactly that one failing. Every run must either succeed with the clean
 * run's output or fail with one non-empty line, write no file (not even a temporary one)
 * and, under AddressSanitizer (make check-asan), leak nothing.
 *
 * Scenarios: the case parser (and graph build) on shipped cases, the tensor readers
 * (safetensors, .npy, .npz, a directory), the strict JSON readers (tolerance file, name
 * map), the run report writer and the compare report writer.
 *
 * Usage: build/oom_sweep ROOT   (ROOT: the source tree, for cases/ and tests/fixtures/)
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "backends/registry.h"
#include "harness/compare/namemap.h"
#include "harness/compare/sets.h"
#include "harness/compare/tolerances.h"
#include "harness/io/files.h"
#include "harness/io/json_build.h"
#include "harness/io/tensorload.h"
#include "harness/model/case.h"
#include "harness/model/graph.h"
#include "harness/verify/run_case.h"
#include "reports/compare_report.h"
#include "reports/report.h"

/* ---- the failing allocator ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);

static long g_fail_at = -1; /* the allocation (0-based) that fails; -1: none */
static long g_count;        /* allocations so far in this attempt */

static bool fail_now(void)
{
    if (g_fail_at == -1)
        return false;
    return g_count++ == g_fail_at; /* -2 only counts */
}

void *__wrap_malloc(size_t n)
{
    return fail_now() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t m)
{
    return fail_now() ? NULL : __real_calloc(n, m);
}

void *__wrap_realloc(void *p, size_t n)
{
    return fail_now() ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
    if (fail_now())
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = __real_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static void *cjson_malloc(size_t n)
{
    return __wrap_malloc(n);
}

/* ---- scenarios ---- */

typedef struct {
    const char *name;
    const char *arg;
    const char *out;   /* a file the scenario writes, or NULL */
    void *user;
    /* one attempt: CK_OK or a failure with err filled */
    ck_status (*run)(const char *arg, const char *out, void *user, ck_error *err);
} scenario;

static char g_outdir[256];
static int g_failures;

static void problem(const char *name, long at, const char *what)
{
    fprintf(stderr, "oom_sweep: %s: allocation %ld failing: %s\n", name, at, what);
    g_failures++;
}

static ck_status run_case_parse(const char *path, const char *out, void *user, ck_error *err)
{
    ck_case c;
    ck_graph g;
    ck_status st = ck_case_load(path, &c, err);
    if (st != CK_OK)
        return st;
    st = ck_graph_build(&c, &g, err);
    if (st == CK_OK)
        ck_graph_free(&g);
    ck_case_free(&c);
    return st;
}

static ck_status run_tensor_load(const char *path, const char *out, void *user, ck_error *err)
{
    ck_tensorset ts;
    ck_status st = ck_tensorset_load(path, &ts, err);
    if (st == CK_OK)
        ck_tensorset_free(&ts);
    return st;
}

static ck_status run_tolerances(const char *path, const char *out, void *user, ck_error *err)
{
    ck_tolerances t;
    ck_tolerances_init(&t);
    ck_status st = ck_tolerances_load(&t, path, err);
    ck_tolerances_free(&t);
    return st;
}

static ck_status run_name_map(const char *path, const char *out, void *user, ck_error *err)
{
    ck_name_map m;
    ck_name_map_init(&m);
    ck_status st = ck_name_map_load(&m, path, err);
    ck_name_map_free(&m);
    return st;
}

static ck_status run_report(const char *arg, const char *out, void *user, ck_error *err)
{
    ck_report_meta meta = {.tool_version = "sweep", .case_path = arg, .include_wall_time = false};
    return ck_report_write_json(user, &meta, out, err);
}

typedef struct {
    ck_set_comparison *cmp;
    ck_tensorset *a, *ref;
} compare_inputs;

static ck_status run_compare_report(const char *arg, const char *out, void *user, ck_error *err)
{
    compare_inputs *ci = user;
    ck_compare_meta meta = {.tool_version = "sweep", .path_a = "a", .path_ref = "ref"};
    cJSON *root = ck_compare_to_json(ci->cmp, ci->a, ci->ref, &meta);
    if (!root)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory building the report", out);
    ck_status st = ck_json_write_file(root, out, "report", err);
    cJSON_Delete(root);
    return st;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = __real_malloc(1 << 22);
    *len = buf ? fread(buf, 1, 1 << 22, f) : 0;
    fclose(f);
    return buf;
}

static bool outdir_empty(void)
{
    DIR *d = opendir(g_outdir);
    if (!d)
        return false;
    struct dirent *de;
    bool empty = true;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            empty = false;
    closedir(d);
    return empty;
}

static long sweep(const scenario *s)
{
    ck_error err;
    char *want = NULL;
    size_t want_len = 0;
    g_fail_at = -1;
    g_count = 0;
    if (s->out)
        unlink(s->out);
    g_fail_at = -2; /* count without failing */
    g_count = 0;
    ck_status st = s->run(s->arg, s->out, s->user, &err);
    long total = g_count;
    g_fail_at = -1;
    if (total == 0)
        problem(s->name, -1, "no allocation was counted: the link-time wrap is not in effect");
    if (st != CK_OK) {
        problem(s->name, -1, err.msg);
        return 0;
    }
    if (s->out) {
        want = slurp(s->out, &want_len);
        unlink(s->out);
    }
    for (long at = 0; at < total; at++) {
        g_fail_at = at;
        g_count = 0;
        err.msg[0] = '\0';
        st = s->run(s->arg, s->out, s->user, &err);
        g_fail_at = -1;
        if (st != CK_OK) {
            if (!err.msg[0] || strchr(err.msg, '\n'))
                problem(s->name, at, "the message is empty or spans lines");
            if (s->out && !outdir_empty())
                problem(s->name, at, "a file was left behind after the failure");
        } else if (s->out) {
            size_t len = 0;
            char *got = slurp(s->out, &len);
            if (!got || len != want_len || memcmp(got, want, len) != 0)
                problem(s->name, at, "succeeded with different output");
            free(got);
        }
        if (s->out)
            unlink(s->out);
    }
    free(want);
    return total;
}

int main(int argc, char **argv)
{
    const char *root = argc > 1 ? argv[1] : ".";
    cJSON_Hooks hooks = {cjson_malloc, free};
    cJSON_InitHooks(&hooks);
    snprintf(g_outdir, sizeof g_outdir, "/tmp/ck_oom_XXXXXX");
    if (!mkdtemp(g_outdir)) {
        perror("oom_sweep: mkdtemp");
        return 2;
    }
    char out[512], p[8][512];
    snprintf(out, sizeof out, "%s/out.json", g_outdir);

    /* a result to write: the smallest shipped-style case, run once without injection */
    const char *tiny = "{\"name\": \"tiny\", \"input\": {\"shape\": [2, 3]}, \"train\": {\"steps\": 2}, "
                       "\"layers\": [{\"name\": \"fc\", \"op\": \"linear\", \"units\": 2}, "
                       "{\"name\": \"drop\", \"op\": \"dropout\", \"rate\": 0.5}]}";
    ck_case c;
    ck_graph g;
    ck_result res;
    ck_backend *b = NULL;
    ck_error err;
    if (ck_case_parse(tiny, strlen(tiny), "tiny.json", &c, &err) != CK_OK ||
        ck_graph_build(&c, &g, &err) != CK_OK || ck_backend_create("cpu", NULL, &b, &err) != CK_OK ||
        ck_run_case(b, &g, CK_F32, &res, &err) != CK_OK) {
        fprintf(stderr, "oom_sweep: setup: %s\n", err.msg);
        return 2;
    }
    compare_inputs ci;
    ck_tensorset ta, tr;
    ck_tolerances tol;
    ck_set_comparison cmp;
    ck_tolerances_init(&tol);
    snprintf(p[0], sizeof p[0], "%s/tests/fixtures/compare/mismatch.safetensors", root);
    snprintf(p[1], sizeof p[1], "%s/tests/fixtures/compare/ref.safetensors", root);
    if (ck_tensorset_load(p[0], &ta, &err) != CK_OK || ck_tensorset_load(p[1], &tr, &err) != CK_OK ||
        ck_compare_sets(&ta, &tr, NULL, &tol, &cmp, &err) != CK_OK) {
        fprintf(stderr, "oom_sweep: setup: %s\n", err.msg);
        return 2;
    }
    ci = (compare_inputs){&cmp, &ta, &tr};

    snprintf(p[2], sizeof p[2], "%s/cases/mlp_dropout.json", root);
    snprintf(p[3], sizeof p[3], "%s/cases/resnet_concat.json", root);
    snprintf(p[4], sizeof p[4], "%s/tests/fixtures/dir", root);
    snprintf(p[5], sizeof p[5], "%s/tests/fixtures/compare/same.npz", root);
    snprintf(p[6], sizeof p[6], "%s/tests/fixtures/compare/tol_loose_w.json", root);
    snprintf(p[7], sizeof p[7], "%s/tests/fixtures/compare/map.json", root);
    const scenario sc[] = {
        {"case parser: mlp_dropout", p[2], NULL, NULL, run_case_parse},
        {"case parser: resnet_concat", p[3], NULL, NULL, run_case_parse},
        {"tensor reader: safetensors", p[1], NULL, NULL, run_tensor_load},
        {"tensor reader: .npz", p[5], NULL, NULL, run_tensor_load},
        {"tensor reader: directory (.npy, .safetensors, .npz)", p[4], NULL, NULL, run_tensor_load},
        {"strict JSON: tolerance file", p[6], NULL, NULL, run_tolerances},
        {"strict JSON: name map", p[7], NULL, NULL, run_name_map},
        {"run report writer", "tiny.json", out, &res, run_report},
        {"compare report writer", "a", out, &ci, run_compare_report},
    };
    long total = 0;
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
        long n = sweep(&sc[i]);
        printf("oom_sweep: %-52s %6ld allocations, each failed once\n", sc[i].name, n);
        total += n;
    }
    ck_set_comparison_free(&cmp);
    ck_tensorset_free(&ta);
    ck_tensorset_free(&tr);
    ck_tolerances_free(&tol);
    ck_result_free(&res);
    b->destroy(b);
    ck_graph_free(&g);
    ck_case_free(&c);
    rmdir(g_outdir);
    printf("oom_sweep: %ld injected allocation failures, %d problems\n", total, g_failures);
    return g_failures ? 1 : 0;
}
