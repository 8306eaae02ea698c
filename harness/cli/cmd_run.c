/*
 * `ckpt-harness run` and `bisect`: every case in every dtype asked for, plain and
 * checkpointed, judged, printed and reported (commands.h).
 */
#include "harness/cli/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness/cli/backend_choice.h"
#include "harness/cli/case_files.h"
#include "backends/registry.h"
#include "harness/io/files.h"
#include "harness/verify/bisect.h"
#include "harness/verify/judge.h"
#include "harness/verify/run_case.h"
#include "reports/report.h"

/* Where a run's report goes: the file itself, or <dir>/<case name>[.<dtype>].json (the
 * dtype is added when the case runs in more than one). */
static char *report_path(const char *report, bool as_dir, const char *case_name,
                         const char *dtype_suffix)
{
    if (!as_dir && !dtype_suffix)
        return strdup(report);
    if (!as_dir) { /* FILE.json for a case run in several dtypes: FILE.<dtype>.json */
        size_t stem = strlen(report) - 5, n = strlen(report) + strlen(dtype_suffix) + 2;
        char *p = malloc(n);
        if (p)
            snprintf(p, n, "%.*s.%s.json", (int)stem, report, dtype_suffix);
        return p;
    }
    size_t n = strlen(report) + strlen(case_name) + (dtype_suffix ? strlen(dtype_suffix) : 0) + 9;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s%s%s%s%s.json", report, ck_cli_ends_with(report, "/") ? "" : "/", case_name,
                 dtype_suffix ? "." : "", dtype_suffix ? dtype_suffix : "");
    return p;
}

/* "--dtype fp32,fp16,bf16" */
static bool parse_dtype_list(const char *s, ck_dtype *out, int *n)
{
    char buf[128];
    if (snprintf(buf, sizeof buf, "%s", s) >= (int)sizeof buf)
        return false;
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        ck_dtype dt;
        if (!ck_dtype_parse(tok, &dt) || (dt != CK_F32 && dt != CK_F16 && dt != CK_BF16) ||
            *n == CK_MAX_PRECISIONS)
            return false;
        for (int k = 0; k < *n; k++)
            if (out[k] == dt)
                return false;
        out[(*n)++] = dt;
    }
    return *n > 0;
}

static int run_one(const ck_run_opts *o, ck_backend *b, ck_backend *ref, const ck_graph *g,
                   ck_dtype dtype, const char *progress, bool as_dir, bool several_dtypes)
{
    const ck_case *c = g->cs;
    ck_error err;
    ck_result res;
    if (!o->quiet)
        fprintf(stderr, "%s %s (%s, %s)\n", progress, c->name, c->path, ck_dtype_name(dtype));
    ck_case_run_opts ro = {.dump_dir = NULL, .dump_activations = o->dump_activations};
    char dump_dir[4096];
    if (o->dump) {
        snprintf(dump_dir, sizeof dump_dir, "%s%s%s%s%s", o->dump, ck_cli_ends_with(o->dump, "/") ? "" : "/",
                 c->name, several_dtypes ? "." : "", several_dtypes ? ck_dtype_name(dtype) : "");
        ro.dump_dir = dump_dir;
    }
    ck_cli_clear_algo_records(b);
    ck_status st = ck_run_case_ex(b, g, dtype, &ro, &res, &err);
    if (st == CK_OK && o->dump && !o->quiet)
        printf("dump: %s/manifest.json\n", dump_dir);
    if (st == CK_OK && o->verify_recompute)
        st = ck_verify_recompute(b, g, dtype, &res, &err);
    if (st == CK_OK && ref)
        st = ck_compare_backends(b, ref, g, dtype, &res, &err);
    /* a nondeterministic algorithm policy: measure the noise it brings before blaming
     * checkpointing */
    bool noise = o->noise_floor || (o->algo && strcmp(o->algo, "fastest") == 0);
    bool mismatching = res.verdict == CK_VERDICT_MISMATCH ||
                       (ck_case_expect(c, dtype) == CK_EXPECT_IDENTICAL && res.verdict != CK_VERDICT_IDENTICAL);
    if (st == CK_OK && (o->force_bisect || noise || (o->bisect && mismatching))) {
        if (!o->quiet && (o->force_bisect || o->bisect))
            fprintf(stderr, "%s %s: bisecting\n", progress, c->name);
        ck_bisect_opts bo = {.noise_floor = true,
                             .localise = o->force_bisect || (o->bisect && mismatching)};
        st = ck_bisect(b, g, dtype, &bo, &res, &err);
    }
    if (st == CK_OK)
        ck_cli_take_algo_records(b, o->algo, &res);
    if (st != CK_OK) {
        fprintf(stderr, "ckpt-harness: %s\n", err.msg);
        ck_result_free(&res);
        return CK_EXIT_USAGE;
    }
    if (o->quiet) {
        ck_report_print_oneline(stdout, &res);
    } else {
        ck_report_print_summary(stdout, &res, o->max_rows);
        ck_bisect_print_story(stdout, &res);
    }
    int rc = res.pass ? CK_EXIT_PASS : CK_EXIT_FAIL;
    if (o->report) {
        char *path = report_path(o->report, as_dir, c->name,
                                 several_dtypes ? ck_dtype_name(dtype) : NULL);
        ck_report_meta meta = {.tool_version = CK_VERSION, .case_path = c->path,
                               .include_wall_time = true};
        if (!path || ck_report_write_json(&res, &meta, path, &err) != CK_OK) {
            fprintf(stderr, "ckpt-harness: %s\n", path ? err.msg : "out of memory");
            rc = CK_EXIT_USAGE;
        } else if (!o->quiet) {
            printf("report: %s\n", path);
        }
        free(path);
    }
    ck_result_free(&res);
    return rc;
}

int ck_cmd_run(const ck_run_opts *o)
{
    ck_error err;
    ck_dtype cli_dtypes[CK_MAX_PRECISIONS];
    int n_cli_dtypes = 0;
    if (o->dtype && !parse_dtype_list(o->dtype, cli_dtypes, &n_cli_dtypes)) {
        fprintf(stderr, "ckpt-harness: --dtype %s: expected a comma-separated list of fp32, fp16, "
                        "bf16 (each once)\n", o->dtype);
        return CK_EXIT_USAGE;
    }
    ck_loaded_case *lc = NULL;
    int n = 0;
    int rc = ck_cli_load_cases(o->paths, o->n_paths, o, &lc, &n);
    if (rc != CK_EXIT_PASS)
        return rc;

    int total = 0;
    for (int i = 0; i < n; i++)
        total += n_cli_dtypes ? n_cli_dtypes : lc[i].cs.n_precisions;
    bool as_dir = false;
    if (o->report) {
        struct stat sb;
        as_dir = ck_cli_ends_with(o->report, "/") || !ck_cli_ends_with(o->report, ".json") ||
                 (stat(o->report, &sb) == 0 && S_ISDIR(sb.st_mode));
        if (!as_dir && n > 1) {
            fprintf(stderr, "ckpt-harness: --report %s: a .json file takes one case; give a "
                            "directory for %d cases\n", o->report, n);
            ck_cli_free_cases(lc, n);
            return CK_EXIT_USAGE;
        }
        if (as_dir && ck_mkdir_p(o->report, &err) != CK_OK) {
            fprintf(stderr, "ckpt-harness: --report: %s\n", err.msg);
            ck_cli_free_cases(lc, n);
            return CK_EXIT_USAGE;
        }
    }

    ck_backend *b = NULL, *ref = NULL;
    if (!ck_cli_create_backend(o->backend, o->device, o->algo, o->threads, &b) ||
        (o->against &&
         !ck_cli_create_backend(o->against, o->device, NULL,
                                ck_backend_has_threads(o->against) ? o->threads : 0, &ref))) {
        if (b)
            b->destroy(b);
        ck_cli_free_cases(lc, n);
        return CK_EXIT_USAGE;
    }

    for (int i = 0; i < n; i++) {
        const ck_dtype *dts = n_cli_dtypes ? cli_dtypes : lc[i].cs.precisions;
        int nd = n_cli_dtypes ? n_cli_dtypes : lc[i].cs.n_precisions;
        for (int d = 0; d < nd; d++) {
            if (ck_cli_check_supported(b, &lc[i].g, dts[d]) != CK_EXIT_PASS ||
                (ref && ck_cli_check_supported(ref, &lc[i].g, dts[d]) != CK_EXIT_PASS)) {
                b->destroy(b);
                if (ref)
                    ref->destroy(ref);
                ck_cli_free_cases(lc, n);
                return CK_EXIT_USAGE;
            }
        }
    }

    int passed = 0, failed = 0, errors = 0, k = 0;
    for (int i = 0; i < n; i++) {
        const ck_dtype *dts = n_cli_dtypes ? cli_dtypes : lc[i].cs.precisions;
        int nd = n_cli_dtypes ? n_cli_dtypes : lc[i].cs.n_precisions;
        for (int d = 0; d < nd; d++) {
            char progress[32];
            snprintf(progress, sizeof progress, "[%d/%d]", ++k, total);
            if (!o->quiet && k > 1)
                printf("\n");
            int r = run_one(o, b, ref, &lc[i].g, dts[d], progress, as_dir, nd > 1);
            passed += r == CK_EXIT_PASS;
            failed += r == CK_EXIT_FAIL;
            errors += r == CK_EXIT_USAGE;
        }
    }
    if (total > 1 || !o->quiet)
        printf("%d passed, %d failed%s\n", passed, failed, errors ? " (and errors above)" : "");
    b->destroy(b);
    if (ref)
        ref->destroy(ref);
    ck_cli_free_cases(lc, n);
    return errors ? CK_EXIT_USAGE : failed ? CK_EXIT_FAIL : CK_EXIT_PASS;
}

int ck_cmd_bisect(const ck_run_opts *o)
{
    ck_run_opts bo = *o;
    bo.force_bisect = true;
    return ck_cmd_run(&bo);
}
