/*
 * `ckpt-harness gradcheck`: every backward of a case against float64 central differences,
 * the whole case and each layer (commands.h).
 */
#include "harness/cli/commands.h"

#include <stdio.h>

#include "harness/cli/messages.h"
#include <stdlib.h>
#include <string.h>

#include "harness/cli/backend_choice.h"
#include "harness/cli/case_files.h"
#include "harness/core/text.h"
#include "harness/io/files.h"
#include "harness/io/json_build.h"
#include "harness/verify/gradcheck.h"
#include "reports/run_set.h"

/* --report: {"schema": "ckpt-harness/gradcheck", "cases": [{name, file, pass, entries: [...]}]} */
static void add_entry_json(ck_json_builder *jb, cJSON *arr, const char *layer, const char *op,
                           const ck_gradcheck_entry *e)
{
    cJSON *o = ck_json_add_object(jb, arr, NULL);
    ck_json_add_string(jb, o, "layer", layer);
    ck_json_add_string(jb, o, "op", op);
    ck_json_add_string(jb, o, "tensor", e->name);
    if (e->not_checkable[0])
        ck_json_add_string(jb, o, "not_checkable", e->not_checkable);
    ck_json_add_int(jb, o, "checked", e->checked);
    ck_json_add_int(jb, o, "failed", e->failed);
    ck_json_add_real(jb, o, "max_abs_err", e->max_abs_err);
    ck_json_add_real(jb, o, "max_rel_err", e->max_rel_err);
    if (e->failed) {
        ck_json_add_int(jb, o, "worst_index", e->worst_index);
        ck_json_add_real(jb, o, "worst_analytic", e->worst_analytic);
        ck_json_add_real(jb, o, "worst_numeric", e->worst_numeric);
    }
}

static bool quiet_mode;

static void print_entry(const char *layer, const char *op, const ck_gradcheck_entry *e)
{
    if (quiet_mode)
        return;
    /* "of tol": the largest |a - n| / (atol + rtol |n|), so 0.03 reads "used 3% of the
     * tolerance" where a relative error of two tiny numbers would read 1 and "ok" */
    char where[64];
    if (layer[0] == '(') /* "(whole case)": its op is the loss, named in the tensor rows */
        snprintf(where, sizeof where, "%s", layer);
    else
        snprintf(where, sizeof where, "%s (%s)", layer, op);
    if (e->not_checkable[0]) {
        printf("  %-27s %-18s %7s  not checkable by finite differences: %s\n", where, e->name,
               "-", e->not_checkable);
        return;
    }
    printf("  %-27s %-18s %7lld %9.3e %8.2g  %s\n", where, e->name, (long long)e->checked,
           e->max_abs_err, e->max_of_tol, e->failed ? "FAIL" : "ok");
    if (e->failed)
        printf("    %lld of %lld elements outside tolerance; worst at flat index %lld: "
               "analytic %.9g, numeric %.9g\n",
               (long long)e->failed, (long long)e->checked, (long long)e->worst_index,
               e->worst_analytic, e->worst_numeric);
}

/* No pass that compares nothing: a case whose every gradient is not checkable by finite
 * differences (ck_gradcheck_not_smooth) fails, saying so. */
static bool compared_something(bool had_error, int64_t compared, char *first_fail, size_t n)
{
    if (had_error || compared > 0)
        return true;
    snprintf(first_fail, n, "no gradient of the case can be checked by finite differences");
    if (!quiet_mode)
        printf("  %s\n", first_fail);
    return false;
}

int ck_cmd_gradcheck(const ck_gradcheck_cmd_opts *o)
{
    ck_error err;
    ck_loaded_case *lc = NULL;
    int n = 0;
    int rc = ck_cli_load_cases(o->paths, o->n_paths, NULL, &lc, &n);
    if (rc != CK_EXIT_PASS)
        return rc;
    /* every output checked before the first check runs: writable and no input */
    if ((o->report && ck_output_file_check(o->report, "--report", &err) != CK_OK) ||
        (o->junit && ck_output_file_check(o->junit, "--junit", &err) != CK_OK)) {
        ck_cli_error(err.msg);
        ck_cli_free_cases(lc, n);
        return CK_EXIT_USAGE;
    }
    ck_backend *b = NULL;
    if (!ck_cli_create_backend(o->backend, o->device, o->algo, o->threads, &b)) {
        ck_cli_free_cases(lc, n);
        return CK_EXIT_USAGE;
    }
    for (int i = 0; i < n; i++) {
        if (ck_cli_check_supported(b, &lc[i].g, CK_F64) != CK_EXIT_PASS) {
            b->destroy(b);
            ck_cli_free_cases(lc, n);
            return CK_EXIT_USAGE;
        }
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

    quiet_mode = o->quiet;
    ck_json_builder jb = {false};
    cJSON *root = cJSON_CreateObject();
    ck_json_add_string(&jb, root, "schema", "ckpt-harness/gradcheck");
    ck_json_add_int(&jb, root, "schema_version", 1);
    cJSON *opts = ck_json_add_object(&jb, root, "options");
    ck_json_add_real(&jb, opts, "eps", go.eps);
    ck_json_add_real(&jb, opts, "atol", go.atol);
    ck_json_add_real(&jb, opts, "rtol", go.rtol);
    ck_json_add_int(&jb, opts, "samples", go.max_samples);
    cJSON *jcases = ck_json_add_array(&jb, root, "cases");
    ck_run_set set = {.reproducible = true};
    set.command = strdup("gradcheck");
    int failed_cases = 0, errors = 0;
    for (int i = 0; i < n; i++) {
        const ck_graph *g = &lc[i].g;
        bool ok = true, had_error = false;
        int64_t compared = 0;
        char first_fail[CK_ERROR_MAX + 64] = "";
        cJSON *jc = ck_json_add_object(&jb, jcases, NULL);
        ck_json_add_string(&jb, jc, "name", g->cs->name);
        ck_json_add_string(&jb, jc, "file", g->cs->path);
        cJSON *jentries = ck_json_add_array(&jb, jc, "entries");
        char shown_path[1024];
        ck_text_escape(g->cs->path, shown_path, sizeof shown_path);
        const char *shown = shown_path, *slash = strrchr(shown_path, '/');
        if (strlen(g->cs->name) + strlen(shown_path) + 4 > 80 && slash) /* as progress does */
            shown = slash + 1;
        if (!o->quiet)
            printf("%s (%s):\n  float64 central differences (eps %g), |a - n| <= %g + %g |n|,\n"
                   "  up to %d elements per tensor\n", g->cs->name, shown, go.eps, go.atol,
                   go.rtol, go.max_samples);
        if (!o->quiet)
            printf("  %-27s %-18s %7s %9s %8s\n", "layer (op)", "tensor", "checked",
                   "max_abs", "of tol");
        if (!o->ops_only) {
            ck_gradcheck_entry *entries = NULL;
            int ne = 0;
            if (ck_gradcheck_case(b, g, &go, &entries, &ne, &err) != CK_OK) {
                ck_cli_error(err.msg);
                errors++;
                free(entries);
                ck_run_item it = {.index = i, .case_name = g->cs->name, .case_file = g->cs->path,
                                  .dtype = "fp64", .backend = (char *)(o->backend ? o->backend : "cpu"),
                                  .status = CK_ITEM_ERROR, .message = err.msg};
                ck_run_set_add(&set, &it, &err);
                continue;
            }
            for (int k = 0; k < ne; k++) {
                print_entry("(whole case)", ck_loss_kind_name(g->cs->loss), &entries[k]);
                add_entry_json(&jb, jentries, "(whole case)", ck_loss_kind_name(g->cs->loss), &entries[k]);
                if (entries[k].failed && !first_fail[0])
                    snprintf(first_fail, sizeof first_fail, "(whole case) %s: %lld of %lld elements "
                             "outside tolerance", entries[k].name, (long long)entries[k].failed,
                             (long long)entries[k].checked);
                ok = ok && entries[k].failed == 0;
                compared += entries[k].checked;
            }
            free(entries);
        }
        if (!o->whole_only) {
            for (int l = 0; l < g->n; l++) {
                ck_gradcheck_result r;
                if (ck_gradcheck_layer(b, g, l, &go, &r, &err) != CK_OK) {
                    ck_cli_error(err.msg);
                    errors++;
                    ok = false;
                    had_error = true;
                    snprintf(first_fail, sizeof first_fail, "%s", err.msg);
                    break;
                }
                for (int k = 0; k < r.n; k++) {
                    print_entry(g->nodes[l].spec->name, g->nodes[l].spec->op_name, &r.e[k]);
                    add_entry_json(&jb, jentries, g->nodes[l].spec->name, g->nodes[l].spec->op_name,
                                   &r.e[k]);
                    if (r.e[k].failed && !first_fail[0])
                        snprintf(first_fail, sizeof first_fail, "layer %s, %s: %lld of %lld elements "
                                 "outside tolerance", g->nodes[l].spec->name, r.e[k].name,
                                 (long long)r.e[k].failed, (long long)r.e[k].checked);
                    compared += r.e[k].checked;
                }
                ok = ok && r.ok;
            }
        }
        ok = ok && compared_something(had_error, compared, first_fail, sizeof first_fail);
        printf(o->quiet ? "%s %s\n" : "%s %s\n\n", ok ? "PASS" : "FAIL", g->cs->name);
        failed_cases += !ok;
        ck_json_add_bool(&jb, jc, "pass", ok);
        ck_run_item it = {.index = i, .case_name = g->cs->name, .case_file = g->cs->path,
                          .dtype = "fp64", .backend = (char *)(o->backend ? o->backend : "cpu"),
                          .status = had_error ? CK_ITEM_ERROR : ok ? CK_ITEM_PASS : CK_ITEM_FAIL,
                          .message = first_fail[0] ? first_fail : NULL};
        if (!ck_run_set_add(&set, &it, &err))
            errors++;
    }
    printf("gradcheck: %d passed, %d failed\n", n - failed_cases, failed_cases);
    if (o->report && (jb.failed || ck_json_write_file(root, o->report, "report", &err) != CK_OK)) {
        fprintf(stderr, "ckpt-harness: --report: %s\n", jb.failed ? "out of memory" : err.msg);
        errors++;
    }
    if (o->junit && (!set.command || ck_junit_write(&set, o->junit, &err) != CK_OK)) {
        fprintf(stderr, "ckpt-harness: --junit: %s\n", set.command ? err.msg : "out of memory");
        errors++;
    }
    cJSON_Delete(root);
    ck_run_set_free(&set);
    b->destroy(b);
    ck_cli_free_cases(lc, n);
    return errors ? CK_EXIT_USAGE : failed_cases ? CK_EXIT_FAIL : CK_EXIT_PASS;
}
