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

/* Mismatches first, then close, then identical; within a verdict more elements outside,
 * then a larger max_abs; ties keep reference order. */
static int worse_first(const void *x, const void *y)
{
    const ck_pair *a = *(const ck_pair *const *)x, *b = *(const ck_pair *const *)y;
    if (a->verdict != b->verdict)
        return a->verdict > b->verdict ? -1 : 1;
    if (a->m.n_outside != b->m.n_outside)
        return a->m.n_outside > b->m.n_outside ? -1 : 1;
    if (a->m.max_abs != b->m.max_abs)
        return a->m.max_abs > b->m.max_abs ? -1 : 1;
    return (a->index_ref > b->index_ref) - (a->index_ref < b->index_ref);
}

static const char *fmt_ulp(uint64_t u, char *buf, size_t n)
{
    if (u == UINT64_MAX)
        snprintf(buf, n, "nonfinite");
    else
        snprintf(buf, n, "%" PRIu64, u);
    return buf;
}

static void print_summary(const ck_set_comparison *c, const ck_tensorset *a,
                          const ck_tensorset *ref, const ck_compare_cmd_opts *o)
{
    int n_cmp = 0;
    const ck_pair **rows = malloc(((size_t)c->n + 1) * sizeof *rows);
    if (!rows) {
        printf("(tensor table left out: out of memory)\n");
    } else {
        for (int i = 0; i < c->n; i++)
            if (c->p[i].kind == CK_PAIR_COMPARED)
                rows[n_cmp++] = &c->p[i];
        qsort(rows, (size_t)n_cmp, sizeof *rows, worse_first);
    }
    int shown =
        !rows || o->quiet ? 0 : (o->max_rows < 0 || o->max_rows > n_cmp ? n_cmp : o->max_rows);
    if (!o->quiet)
        printf("compare %s (a) against %s (ref): %d and %d tensors\n", o->a, o->ref, a->n, ref->n);
    if (shown > 0) {
        int name_w = 4;
        for (int i = 0; i < shown; i++) {
            int len = (int)strlen(rows[i]->name);
            if (len > name_w)
                name_w = len < 40 ? len : 40;
        }
        printf("%-*s  %-5s  %-9s  %10s  %10s  %10s  %s\n", name_w, "name", "dtype", "verdict",
               "max_abs", "max_rel", "max_ulp", "outside/numel");
        for (int i = 0; i < shown; i++) {
            const ck_pair *p = rows[i];
            char u[32];
            printf("%-*s  %-5s  %-9s  %10.3e  %10.3e  %10s  %" PRId64 "/%" PRId64 "\n", name_w,
                   p->name, ck_file_dtype_name(ref->t[p->index_ref].dtype),
                   ck_verdict_name(p->verdict), p->m.max_abs, p->m.max_rel,
                   fmt_ulp(p->m.max_ulp, u, sizeof u), p->m.n_outside, p->m.numel);
        }
        if (shown < n_cmp)
            printf("... %d more tensors\n", n_cmp - shown);
    }
    free(rows);
    for (int i = 0; i < c->n; i++) {
        char line[1024];
        ck_pair_describe(&c->p[i], a, ref, line, sizeof line);
        if (line[0])
            printf("%s\n", line);
    }
    printf("%s %s: %d compared (identical %d, close %d, mismatch %d); missing %d, extra %d, "
           "shape %d, dtype %d\n",
           c->pass ? "PASS" : "FAIL", ck_verdict_name(c->verdict),
           c->counts[0] + c->counts[1] + c->counts[2], c->counts[CK_VERDICT_IDENTICAL],
           c->counts[CK_VERDICT_CLOSE], c->counts[CK_VERDICT_MISMATCH],
           c->n_problems[CK_PAIR_MISSING], c->n_problems[CK_PAIR_EXTRA],
           c->n_problems[CK_PAIR_SHAPE], c->n_problems[CK_PAIR_DTYPE]);
}

static ck_status write_report(const ck_set_comparison *c, const ck_tensorset *a,
                              const ck_tensorset *ref, const ck_compare_cmd_opts *o, ck_error *err)
{
    ck_compare_meta meta = {CK_VERSION, o->a, o->ref, o->map, o->tolerances};
    cJSON *root = ck_compare_to_json(c, a, ref, &meta);
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory building the report", o->report);
    ck_atomic_file af;
    ck_status st = ck_atomic_open(&af, o->report, err);
    if (st == CK_OK) {
        ck_atomic_write(&af, text, strlen(text));
        ck_atomic_write(&af, "\n", 1);
        st = ck_atomic_commit(&af, err);
    }
    cJSON_free(text);
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
    print_summary(&cmp, &a, &ref, o);
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
