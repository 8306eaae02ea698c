/*
 * `ckpt-harness compare A REF`: loads both sides (safetensors, .npy, .npz or a directory
 * of them), matches names, compares (setcompare.h), prints a summary worst first and
 * optionally writes the JSON report atomically.
 */
#include "harness/cli/cmd_compare.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cli/commands.h"
#include "harness/compare/sets.h"
#include "harness/io/files.h"
#include "harness/io/json_build.h"
#include "harness/io/tensorload.h"
#include "reports/compare_report.h"

static ck_status write_report(const ck_set_comparison *c, const ck_tensorset *a,
                              const ck_tensorset *ref, const ck_compare_cmd_opts *o, ck_error *err)
{
    ck_compare_meta meta = {CK_VERSION, o->a, o->ref, o->map, o->tolerances};
    cJSON *root = ck_compare_to_json(c, a, ref, &meta);
    ck_status st = ck_json_write_file(root, o->report, "report", err);
    cJSON_Delete(root);
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
    ck_tensorset_init(&a);
    ck_tensorset_init(&ref);
    ck_tolerances_init(&tol);
    ck_name_map_init(&map);
    memset(&cmp, 0, sizeof cmp);

    tol.cli.has_rtol = o->has_rtol;
    tol.cli.rtol = o->rtol;
    tol.cli.has_atol = o->has_atol;
    tol.cli.atol = o->atol;
    if (o->tolerances && ck_tolerances_load(&tol, o->tolerances, &err) != CK_OK)
        goto fail;
    if (o->map && ck_name_map_load(&map, o->map, &err) != CK_OK)
        goto fail;
    if (ck_tensorset_load(o->a, &a, &err) != CK_OK ||
        ck_tensorset_load(o->ref, &ref, &err) != CK_OK)
        goto fail;
    if (ck_compare_sets(&a, &ref, o->map ? &map : NULL, &tol, &cmp, &err) != CK_OK)
        goto fail;
    ck_compare_print_summary(stdout, &cmp, &a, &ref, o->a, o->ref, o->quiet, o->max_rows);
    if (o->report) {
        if (write_report(&cmp, &a, &ref, o, &err) != CK_OK)
            goto fail;
        if (!o->quiet)
            printf("report: %s\n", o->report);
    }
    rc = cmp.pass ? CK_EXIT_PASS : CK_EXIT_FAIL;
    goto done;
fail:
    fflush(stdout);
    fprintf(stderr, "ckpt-harness: %s\n", err.msg);
    rc = CK_EXIT_USAGE;
done:
    ck_set_comparison_free(&cmp);
    ck_tensorset_free(&a);
    ck_tensorset_free(&ref);
    ck_tolerances_free(&tol);
    ck_name_map_free(&map);
    return rc;
}
