/*
 * `ckpt-harness gradcheck`: every backward of a case against float64 central differences,
 * the whole case and each layer (commands.h).
 */
#include "harness/cli/commands.h"

#include <stdio.h>
#include <stdlib.h>

#include "harness/cli/backend_choice.h"
#include "harness/cli/case_files.h"
#include "harness/verify/gradcheck.h"

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
    ck_loaded_case *lc = NULL;
    int n = 0;
    int rc = ck_cli_load_cases(o->paths, o->n_paths, NULL, &lc, &n);
    if (rc != CK_EXIT_PASS)
        return rc;
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
    ck_cli_free_cases(lc, n);
    return errors ? CK_EXIT_USAGE : failed_cases ? CK_EXIT_FAIL : CK_EXIT_PASS;
}
