/*
 * `ckpt-harness compare A REF`: loads both sides (safetensors, .npy, .npz or a directory
 * of them), matches names, compares (setcompare.h), prints a summary worst first and
 * optionally writes the JSON report atomically.
 */
#include "harness/cli/cmd_compare.h"

#include <inttypes.h>
#include <stdio.h>

#include "harness/cli/messages.h"
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness/cli/commands.h"
#include "harness/compare/selection.h"
#include "harness/compare/sets.h"
#include "harness/io/files.h"
#include "harness/io/json_build.h"
#include "harness/io/tensorload.h"
#include "reports/compare_report.h"
#include "reports/run_set.h"

/* --junit: the comparison is one testcase, A against REF. */
static ck_status write_junit(const ck_set_comparison *c, const ck_compare_cmd_opts *o,
                             ck_error *err)
{
    char name[1024], msg[512];
    snprintf(name, sizeof name, "%s vs %s", o->a, o->ref);
    int problems = 0;
    for (int k = 1; k < 5; k++)
        problems += c->n_problems[k];
    snprintf(msg, sizeof msg, "%s: %d identical, %d close, %d mismatching, %d missing/extra/shape/"
             "dtype problems", ck_verdict_name(c->verdict), c->counts[CK_VERDICT_IDENTICAL],
             c->counts[CK_VERDICT_CLOSE], c->counts[CK_VERDICT_MISMATCH], problems);
    ck_run_set set = {.reproducible = true};
    ck_run_item it = {.index = 0, .case_name = name, .case_file = (char *)o->a, .dtype = "-",
                      .backend = "files", .status = c->pass ? CK_ITEM_PASS : CK_ITEM_FAIL,
                      .message = msg};
    ck_status st = CK_ERR_NOMEM;
    if ((set.command = strdup("compare")) && ck_run_set_add(&set, &it, err))
        st = ck_junit_write(&set, o->junit, err);
    else if (!set.command)
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
    ck_run_set_free(&set);
    return st;
}

static ck_status write_report(const ck_set_comparison *c, const ck_tensorset *a,
                              const ck_tensorset *ref, const ck_compare_cmd_opts *o,
                              const ck_compare_meta *meta, ck_error *err)
{
    (void)o;
    cJSON *root = ck_compare_to_json(c, a, ref, meta);
    ck_status st = ck_json_write_file(root, o->report, "report", err);
    cJSON_Delete(root);
    return st;
}

/* Loads an operand: a file or directory, or FILE:NAME (one tensor of FILE, which may be a
 * directory too) when the whole operand names nothing on disk but the part before its last
 * ':' does. */
static ck_status load_operand(const char *arg, ck_tensorset *s, ck_error *err)
{
    struct stat sb;
    const char *colon = strrchr(arg, ':');
    if (stat(arg, &sb) == 0 || !colon || colon == arg || !colon[1])
        return ck_tensorset_load(arg, s, err);
    size_t len = (size_t)(colon - arg);
    char *file = malloc(len + 1);
    if (!file)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    memcpy(file, arg, len);
    file[len] = '\0';
    ck_status st;
    if (stat(file, &sb) != 0) {
        free(file);
        return ck_tensorset_load(arg, s, err); /* its own "cannot open" message */
    }
    st = ck_tensorset_load(file, s, err);
    if (st == CK_OK) {
        int i = ck_tensorset_index(s, colon + 1);
        if (i < 0) {
            st = ck_fail(err, CK_ERR_INPUT, "%s: no tensor named \"%.200s\" (it holds %d)", file,
                         colon + 1, s->n);
        } else {
            /* keep only tensor i; the set still owns every name and block */
            s->t[0] = s->t[i];
            s->file[0] = s->file[i];
            s->n = 1;
        }
    }
    free(file);
    return st;
}

int ck_cmd_compare(const ck_compare_cmd_opts *o)
{
    ck_error err;
    ck_tensorset a, ref;
    ck_tolerances tol;
    ck_name_map map;
    ck_set_comparison cmp;
    int rc = CK_EXIT_USAGE;
    int *expect_hits = NULL;
    ck_tensorset_init(&a);
    ck_tensorset_init(&ref);
    ck_tolerances_init(&tol);
    ck_name_map_init(&map);
    memset(&cmp, 0, sizeof cmp);

    /* the report path is checked before anything is read, and again once every input file
     * (those inside folders too) is known: it may replace none of them */
    const char *inputs[4] = {o->a, o->ref, o->tolerances, o->map};
    for (int i = 0; i < 4; i++)
        if (inputs[i] && ck_input_register(inputs[i], &err) != CK_OK)
            goto fail;
    if ((o->report && ck_output_file_check(o->report, "--report", &err) != CK_OK) ||
        (o->junit && ck_output_file_check(o->junit, "--junit", &err) != CK_OK))
        goto fail;

    tol.cli.has_rtol = o->has_rtol;
    tol.cli.rtol = o->rtol;
    tol.cli.has_atol = o->has_atol;
    tol.cli.atol = o->atol;
    tol.cli.has_rel_l2 = o->has_rel_l2;
    tol.cli.rel_l2 = o->rel_l2;
    tol.cross_dtype = o->cross_dtype;
    if (o->tolerances && ck_tolerances_load(&tol, o->tolerances, &err) != CK_OK)
        goto fail;
    if (o->map && ck_name_map_load(&map, o->map, &err) != CK_OK)
        goto fail;
    if (load_operand(o->a, &a, &err) != CK_OK || load_operand(o->ref, &ref, &err) != CK_OK)
        goto fail;
    if ((o->report && ck_output_file_check(o->report, "--report", &err) != CK_OK) ||
        (o->junit && ck_output_file_check(o->junit, "--junit", &err) != CK_OK))
        goto fail;
    /* two single tensors are the same quantity whatever their file names say */
    bool paired_single = a.n == 1 && ref.n == 1;
    if (paired_single && ck_name_map_single(&map, a.t[0].name, ref.t[0].name, &err) != CK_OK)
        goto fail;
    if (ck_compare_sets(&a, &ref, o->map || paired_single ? &map : NULL, &tol, &cmp, &err) != CK_OK)
        goto fail;
    ck_compare_selection sel = {o->n_include, o->n_exclude, o->n_expect,
                                o->include, o->exclude, o->expect};
    expect_hits = calloc((size_t)o->n_expect + 1, sizeof *expect_hits);
    if (!expect_hits) {
        ck_fail(&err, CK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    ck_compare_apply_selection(&cmp, &sel, expect_hits);
    ck_compare_meta meta = {CK_VERSION, o->a, o->ref, o->map, o->tolerances,
                            paired_single, &sel, expect_hits};
    ck_compare_print_summary(stdout, &cmp, &a, &ref, o->a, o->ref, o->quiet, o->max_rows, &meta);
    if (o->report) {
        if (write_report(&cmp, &a, &ref, o, &meta, &err) != CK_OK)
            goto fail;
        if (!o->quiet)
            printf("report: %s\n", o->report);
    }
    if (o->junit) {
        if (write_junit(&cmp, o, &err) != CK_OK)
            goto fail;
        if (!o->quiet)
            printf("junit: %s\n", o->junit);
    }
    rc = cmp.pass ? CK_EXIT_PASS : CK_EXIT_FAIL;
    goto done;
fail:
    ck_cli_error(err.msg);
    rc = CK_EXIT_USAGE;
done:
    ck_set_comparison_free(&cmp);
    ck_tensorset_free(&a);
    ck_tensorset_free(&ref);
    ck_tolerances_free(&tol);
    ck_name_map_free(&map);
    free(expect_hits);
    return rc;
}
