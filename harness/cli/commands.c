/* The `run`, `gradcheck` and `list` subcommands (see commands.h). */
#include "harness/verify/judge.h"
#include "harness/verify/run_case.h"
#include "harness/cli/commands.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/registry.h"
#include "reports/report.h"
#include "harness/verify/bisect.h"
#include "harness/io/files.h"
#include "harness/verify/gradcheck.h"
#include "harness/model/params.h"
#include "harness/engine/train.h"

/* ---------------------------------------------------------------------------------------
 * Case files
 * --------------------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static ck_status push_path(char ***list, int *n, int *cap, char *path, ck_error *err)
{
    if (!path)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory listing cases");
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        char **nl = realloc(*list, (size_t)nc * sizeof *nl);
        if (!nl) {
            free(path);
            return ck_fail(err, CK_ERR_NOMEM, "out of memory listing cases");
        }
        *list = nl;
        *cap = nc;
    }
    (*list)[(*n)++] = path;
    return CK_OK;
}

ck_status ck_collect_case_files(const char **paths, int n_paths, char ***out, int *n_out,
                                ck_error *err)
{
    char **list = NULL;
    int n = 0, cap = 0;
    ck_status st = CK_OK;
    for (int i = 0; i < n_paths && st == CK_OK; i++) {
        struct stat sb;
        if (stat(paths[i], &sb) != 0) {
            st = ck_fail(err, CK_ERR_IO, "%s: %s", paths[i], strerror(errno));
            break;
        }
        if (!S_ISDIR(sb.st_mode)) {
            st = push_path(&list, &n, &cap, strdup(paths[i]), err);
            continue;
        }
        DIR *d = opendir(paths[i]);
        if (!d) {
            st = ck_fail(err, CK_ERR_IO, "%s: %s", paths[i], strerror(errno));
            break;
        }
        int first = n;
        struct dirent *de;
        while (st == CK_OK && (de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.' || !ends_with(de->d_name, ".json"))
                continue;
            size_t len = strlen(paths[i]) + strlen(de->d_name) + 2;
            char *p = malloc(len);
            if (p)
                snprintf(p, len, "%s%s%s", paths[i], ends_with(paths[i], "/") ? "" : "/",
                         de->d_name);
            st = push_path(&list, &n, &cap, p, err);
        }
        closedir(d);
        if (st == CK_OK && n == first)
            st = ck_fail(err, CK_ERR_INPUT, "%s: no *.json case files in this directory",
                         paths[i]);
        if (st == CK_OK)
            qsort(list + first, (size_t)(n - first), sizeof *list, cmp_str);
    }
    if (st != CK_OK) {
        ck_free_case_files(list, n);
        return st;
    }
    *out = list;
    *n_out = n;
    return CK_OK;
}

void ck_free_case_files(char **files, int n)
{
    for (int i = 0; i < n; i++)
        free(files[i]);
    free(files);
}

typedef struct {
    ck_case cs;
    ck_graph g;
    bool loaded, built;
} loaded_case;

static void free_loaded(loaded_case *lc, int n)
{
    for (int i = 0; i < n; i++) {
        if (lc[i].built)
            ck_graph_free(&lc[i].g);
        if (lc[i].loaded)
            ck_case_free(&lc[i].cs);
    }
    free(lc);
}

/* Loads and builds every case first, so bad input stops the command before any run. */
static int load_cases(const char **paths, int n_paths, const ck_run_opts *ov, loaded_case **out,
                      int *n_out)
{
    ck_error err;
    char **files = NULL;
    int n = 0;
    if (ck_collect_case_files(paths, n_paths, &files, &n, &err) != CK_OK) {
        fprintf(stderr, "ckpt-harness: %s\n", err.msg);
        return CK_EXIT_USAGE;
    }
    loaded_case *lc = calloc((size_t)n + 1, sizeof *lc);
    if (!lc) {
        ck_free_case_files(files, n);
        fprintf(stderr, "ckpt-harness: out of memory\n");
        return CK_EXIT_USAGE;
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (ck_case_load(files[i], &lc[i].cs, &err) != CK_OK) {
            fprintf(stderr, "ckpt-harness: %s\n", err.msg);
            bad++;
            continue;
        }
        lc[i].loaded = true;
        if (ov) {
            if (ov->has_rng)
                lc[i].cs.rng = ov->rng;
            if (ov->has_bn)
                lc[i].cs.bn = ov->bn;
            if (ov->has_steps)
                lc[i].cs.steps = ov->steps;
            if (ov->has_seed)
                lc[i].cs.seed = ov->seed;
            if (ov->init) {
                free(lc[i].cs.init_from);
                if (!(lc[i].cs.init_from = strdup(ov->init))) {
                    fprintf(stderr, "ckpt-harness: out of memory\n");
                    bad++;
                    continue;
                }
            }
        }
        if (ck_graph_build(&lc[i].cs, &lc[i].g, &err) != CK_OK) {
            fprintf(stderr, "ckpt-harness: %s\n", err.msg);
            bad++;
            continue;
        }
        lc[i].built = true;
        if (lc[i].cs.init_from && ck_graph_check_weights(&lc[i].g, lc[i].cs.init_from, &err) != CK_OK) {
            fprintf(stderr, "ckpt-harness: %s: %s\n", lc[i].cs.path, err.msg);
            bad++;
        }
    }
    ck_free_case_files(files, n);
    if (bad) {
        free_loaded(lc, n);
        return CK_EXIT_USAGE;
    }
    *out = lc;
    *n_out = n;
    return CK_EXIT_PASS;
}

/* ---------------------------------------------------------------------------------------
 * run
 * --------------------------------------------------------------------------------------- */


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
        snprintf(p, n, "%s%s%s%s%s.json", report, ends_with(report, "/") ? "" : "/", case_name,
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

/* Creates the backend a command asked for; on failure prints one line and returns false. */
static bool create_backend(const char *name, int device, const char *algo, ck_backend **out)
{
    ck_error err;
    *out = NULL;
    name = name ? name : "cpu";
    if (algo && !ck_backend_has_algorithms(name)) {
        fprintf(stderr, "ckpt-harness: --algo applies to --backend cuda (the %s backend has "
                        "one fixed algorithm per op)\n", name);
        return false;
    }
    ck_backend_options bo = {device, algo};
    if (ck_backend_create(name, &bo, out, &err) != CK_OK) {
        fprintf(stderr, "ckpt-harness: %s\n", err.msg);
        return false;
    }
    return true;
}

/* The backend's algorithm records (a capability only the CUDA backend has), for the report. */
static void take_algo_records(ck_backend *b, const char *algo, ck_result *res)
{
    union {
        void *p;
        ck_algo_records_fn f;
    } u = {ck_backend_proc(b, CK_PROC_ALGO_RECORDS)};
    if (!u.p)
        return;
    snprintf(res->algo_policy, sizeof res->algo_policy, "%s", algo ? algo : "deterministic");
    int n = u.f(b, NULL, 0);
    res->algos = calloc((size_t)n + 1, sizeof *res->algos);
    if (!res->algos)
        return;
    res->n_algos = u.f(b, res->algos, n);
    if (res->n_algos > n)
        res->n_algos = n;
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
        snprintf(dump_dir, sizeof dump_dir, "%s%s%s%s%s", o->dump, ends_with(o->dump, "/") ? "" : "/",
                 c->name, several_dtypes ? "." : "", several_dtypes ? ck_dtype_name(dtype) : "");
        ro.dump_dir = dump_dir;
    }
    union {
        void *p;
        ck_algo_records_clear_fn f;
    } clear = {ck_backend_proc(b, CK_PROC_ALGO_RECORDS_CLEAR)};
    if (clear.p)
        clear.f(b);
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
        take_algo_records(b, o->algo, &res);
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
    loaded_case *lc = NULL;
    int n = 0;
    int rc = load_cases(o->paths, o->n_paths, o, &lc, &n);
    if (rc != CK_EXIT_PASS)
        return rc;

    int total = 0;
    for (int i = 0; i < n; i++)
        total += n_cli_dtypes ? n_cli_dtypes : lc[i].cs.n_precisions;
    bool as_dir = false;
    if (o->report) {
        struct stat sb;
        as_dir = ends_with(o->report, "/") || !ends_with(o->report, ".json") ||
                 (stat(o->report, &sb) == 0 && S_ISDIR(sb.st_mode));
        if (!as_dir && n > 1) {
            fprintf(stderr, "ckpt-harness: --report %s: a .json file takes one case; give a "
                            "directory for %d cases\n", o->report, n);
            free_loaded(lc, n);
            return CK_EXIT_USAGE;
        }
        if (as_dir && ck_mkdir_p(o->report, &err) != CK_OK) {
            fprintf(stderr, "ckpt-harness: --report: %s\n", err.msg);
            free_loaded(lc, n);
            return CK_EXIT_USAGE;
        }
    }

    ck_backend *b = NULL, *ref = NULL;
    if (!create_backend(o->backend, o->device, o->algo, &b) ||
        (o->against && !create_backend(o->against, o->device, NULL, &ref))) {
        if (b)
            b->destroy(b);
        free_loaded(lc, n);
        return CK_EXIT_USAGE;
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
    free_loaded(lc, n);
    return errors ? CK_EXIT_USAGE : failed ? CK_EXIT_FAIL : CK_EXIT_PASS;
}

int ck_cmd_bisect(const ck_run_opts *o)
{
    ck_run_opts bo = *o;
    bo.force_bisect = true;
    return ck_cmd_run(&bo);
}

/* ---------------------------------------------------------------------------------------
 * gradcheck
 * --------------------------------------------------------------------------------------- */

static void print_entry(const char *layer, const char *op, const ck_gradcheck_entry *e)
{
    printf("  %-24s %-16s %-24s %7lld %12.3e %12.3e  %s\n", layer, op, e->name,
           (long long)e->checked, e->max_abs_err, e->max_rel_err, e->failed ? "FAIL" : "ok");
    if (e->failed)
        printf("    %lld of %lld elements outside tolerance; worst at flat index %lld: "
               "analytic %.9g, numeric %.9g\n",
               (long long)e->failed, (long long)e->checked, (long long)e->worst_index,
               e->worst_analytic, e->worst_numeric);
}

int ck_cmd_gradcheck(const ck_gradcheck_cmd_opts *o)
{
    ck_error err;
    loaded_case *lc = NULL;
    int n = 0;
    int rc = load_cases(o->paths, o->n_paths, NULL, &lc, &n);
    if (rc != CK_EXIT_PASS)
        return rc;
    ck_backend *b = NULL;
    if (!create_backend(o->backend, o->device, o->algo, &b)) {
        free_loaded(lc, n);
        return CK_EXIT_USAGE;
    }
    ck_gradcheck_opts go;
    ck_gradcheck_opts_default(&go);
    if (o->eps > 0)
        go.eps = o->eps;
    if (o->atol >= 0)
        go.atol = o->atol;
    if (o->rtol >= 0)
        go.rtol = o->rtol;
    if (o->samples > 0)
        go.max_samples = o->samples;

    int failed_cases = 0, errors = 0;
    for (int i = 0; i < n; i++) {
        const ck_graph *g = &lc[i].g;
        bool ok = true;
        printf("%s (%s): float64 central differences, eps %g, |a - n| <= %g + %g |n|, "
               "up to %d elements per tensor\n",
               g->cs->name, g->cs->path, go.eps, go.atol, go.rtol, go.max_samples);
        printf("  %-24s %-16s %-24s %7s %12s %12s\n", "layer", "op", "tensor", "checked",
               "max_abs_err", "max_rel_err");
        if (!o->ops_only) {
            ck_gradcheck_entry *entries = NULL;
            int ne = 0;
            if (ck_gradcheck_case(b, g, &go, &entries, &ne, &err) != CK_OK) {
                fprintf(stderr, "ckpt-harness: %s\n", err.msg);
                errors++;
                free(entries);
                continue;
            }
            for (int k = 0; k < ne; k++) {
                print_entry("(whole case)", ck_loss_kind_name(g->cs->loss), &entries[k]);
                ok = ok && entries[k].failed == 0;
            }
            free(entries);
        }
        if (!o->whole_only) {
            for (int l = 0; l < g->n; l++) {
                ck_gradcheck_result r;
                if (ck_gradcheck_layer(b, g, l, &go, &r, &err) != CK_OK) {
                    fprintf(stderr, "ckpt-harness: %s\n", err.msg);
                    errors++;
                    ok = false;
                    break;
                }
                for (int k = 0; k < r.n; k++)
                    print_entry(g->nodes[l].spec->name, g->nodes[l].spec->op_name, &r.e[k]);
                ok = ok && r.ok;
            }
        }
        printf("%s %s\n\n", ok ? "PASS" : "FAIL", g->cs->name);
        failed_cases += !ok;
    }
    printf("gradcheck: %d passed, %d failed\n", n - failed_cases, failed_cases);
    b->destroy(b);
    free_loaded(lc, n);
    return errors ? CK_EXIT_USAGE : failed_cases ? CK_EXIT_FAIL : CK_EXIT_PASS;
}

/* ---------------------------------------------------------------------------------------
 * list
 * --------------------------------------------------------------------------------------- */

int ck_cmd_list(const char *cases_dir)
{
    int n_ops = 0;
    const ck_op_info *ops = ck_op_catalogue(&n_ops);
    printf("ops (options in a case's layer objects; see cases/README.md):\n");
    for (int i = 0; i < n_ops; i++) {
        printf("  %-16s %s\n", ops[i].name, ops[i].summary);
        if (ops[i].options && ops[i].options[0])
            printf("  %-16s options: %s\n", "", ops[i].options);
    }
    printf("\nlosses: mean, sum, mse, cross_entropy\n");
    printf("optimizers: sgd, momentum, adam\n");
    printf("rng policies: counter (default), stateful, stash\n");
    printf("batchnorm recompute policies: skip (default), update\n");

    const char *dir = cases_dir ? cases_dir : "cases";
    char **files = NULL;
    int n = 0;
    ck_error err;
    if (ck_collect_case_files(&dir, 1, &files, &n, &err) != CK_OK) {
        printf("\nshipped cases: none found (%s)\n", err.msg);
        return CK_EXIT_PASS;
    }
    printf("\ncases in %s:\n", dir);
    for (int i = 0; i < n; i++) {
        ck_case c;
        if (ck_case_load(files[i], &c, &err) != CK_OK) {
            printf("  %-28s (does not load: %s)\n", files[i], err.msg);
            continue;
        }
        /* what the case expects in the dtypes it runs in: "identical", or per dtype
         * "fp32 identical, fp16 mismatch" when they differ */
        char expect[96];
        ck_expect first = ck_case_expect(&c, c.precisions[0]);
        bool all_same = true;
        for (int k = 1; k < c.n_precisions; k++)
            all_same = all_same && ck_case_expect(&c, c.precisions[k]) == first;
        snprintf(expect, sizeof expect, "%s", ck_expect_name(first));
        for (size_t used = 0, k = 0; !all_same && k < (size_t)c.n_precisions; k++)
            used += (size_t)snprintf(expect + used, sizeof expect - used, "%s%s %s",
                                     k ? ", " : "", ck_dtype_name(c.precisions[k]),
                                     ck_expect_name(ck_case_expect(&c, c.precisions[k])));
        printf("  %-28s expect %-9s %s\n", c.name, expect,
               c.description ? c.description : "");
        ck_case_free(&c);
    }
    ck_free_case_files(files, n);
    return CK_EXIT_PASS;
}
