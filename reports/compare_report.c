/*
 * The `compare` report: one readable line per failing pair, the summary table worst first,
 * and the JSON report (compare_report.h).
 */
#include "reports/compare_report.h"

#include "harness/core/text.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/io/json_build.h"
#include "reports/report.h"

/* ---------------------------------------------------------------------------------- */
/* Text                                                                                */
/* ---------------------------------------------------------------------------------- */

void ck_pair_describe(const ck_pair *p, const ck_tensorset *a, const ck_tensorset *ref, char *buf,
                      size_t n)
{
    char s1[160], s2[160];
    const ck_named_tensor *ta = p->index_a >= 0 ? &a->t[p->index_a] : NULL;
    const ck_named_tensor *tr = p->index_ref >= 0 ? &ref->t[p->index_ref] : NULL;
    buf[0] = '\0';
    switch (p->kind) {
    case CK_PAIR_COMPARED:
        if (p->verdict != CK_VERDICT_MISMATCH)
            return;
        {
            char idx[160] = "";
            if (p->m.first_bad >= 0 && tr->shape.ndim > 0) {
                int64_t ix[CK_MAX_DIMS];
                ck_shape sh = tr->shape;
                ck_shape_unflatten(&sh, p->m.first_bad, ix);
                ck_shape at = ck_shape_make(sh.ndim, ix);
                snprintf(idx, sizeof idx, ", first at %s", ck_shape_str(&at, s1, sizeof s1));
            }
            if (ck_file_dtype_is_float(tr->dtype))
                snprintf(buf, n,
                         "%s: %s (%s): max_abs %.3g, %" PRId64 " of %" PRId64
                         " elements outside rtol %g, atol %g%s",
                         p->expected ? "expected mismatch" : "mismatch",
                         p->name, ck_file_dtype_name(tr->dtype), p->m.max_abs, p->m.n_outside,
                         p->m.numel, p->rtol, p->atol, idx);
            else
                snprintf(buf, n,
                         "%s: %s (%s, compared exactly): %" PRId64 " of %" PRId64
                         " elements differ, by up to %" PRIu64 "%s",
                         p->expected ? "expected mismatch" : "mismatch",
                         p->name, ck_file_dtype_name(tr->dtype), p->m.n_outside, p->m.numel,
                         p->m.max_ulp, idx);
        }
        return;
    case CK_PAIR_MISSING:
        snprintf(buf, n, "missing: %s (in %s) has no counterpart in a", p->name,
                 ref->file[p->index_ref]);
        return;
    case CK_PAIR_EXTRA:
        if (strcmp(p->name, p->name_a) != 0)
            snprintf(buf, n, "extra: %s (mapped to %s, in %s) has no counterpart in ref", p->name_a,
                     p->name, a->file[p->index_a]);
        else
            snprintf(buf, n, "extra: %s (in %s) has no counterpart in ref", p->name_a,
                     a->file[p->index_a]);
        return;
    case CK_PAIR_SHAPE:
        snprintf(buf, n, "shape: %s is %s in a, %s in ref", p->name,
                 ck_shape_str(&ta->shape, s1, sizeof s1), ck_shape_str(&tr->shape, s2, sizeof s2));
        return;
    case CK_PAIR_DTYPE:
        snprintf(buf, n, "dtype: %s is %s in a, %s in ref", p->name, ck_file_dtype_name(ta->dtype),
                 ck_file_dtype_name(tr->dtype));
        return;
    }
}

/* ---------------------------------------------------------------------------------- */
/* JSON                                                                                */
/* ---------------------------------------------------------------------------------- */

static void add_shape(ck_json_builder *b, cJSON *parent, const char *key, const ck_shape *s)
{
    cJSON *arr = ck_json_add_array(b, parent, key);
    for (int d = 0; d < s->ndim && d < CK_MAX_DIMS; d++)
        ck_json_add_int(b, arr, NULL, s->dim[d]);
}

static void add_side(ck_json_builder *b, cJSON *root, const char *key, const char *path,
                     const ck_tensorset *s)
{
    cJSON *o = ck_json_add_object(b, root, key);
    ck_json_add_string(b, o, "path", path);
    ck_json_add_int(b, o, "tensors", s->n);
}

static void add_patterns(ck_json_builder *b, cJSON *parent, const char *key,
                         const char *const *pat, int n)
{
    cJSON *arr = ck_json_add_array(b, parent, key);
    for (int i = 0; i < n; i++)
        ck_json_add_string(b, arr, NULL, pat[i]);
}

/* "paired_single" and "selection" (reports/SCHEMA.md, compare report version 2) */
static void add_selection(ck_json_builder *b, cJSON *root, const ck_set_comparison *c,
                          const ck_compare_meta *meta)
{
    const ck_compare_selection *sel = meta ? meta->sel : NULL;
    static const ck_compare_selection none = {0};
    if (!sel)
        sel = &none;
    ck_json_add_bool(b, root, "paired_single", meta && meta->paired_single);
    cJSON *o = ck_json_add_object(b, root, "selection");
    add_patterns(b, o, "include", sel->include, sel->n_include);
    add_patterns(b, o, "exclude", sel->exclude, sel->n_exclude);
    cJSON *ex = ck_json_add_array(b, o, "expect_mismatch");
    for (int k = 0; k < sel->n_expect; k++) {
        cJSON *e = ck_json_add_object(b, ex, NULL);
        int hits = meta && meta->expect_hits ? meta->expect_hits[k] : 0;
        ck_json_add_string(b, e, "pattern", sel->expect[k]);
        ck_json_add_int(b, e, "matched", hits);
        ck_json_add_bool(b, e, "met", hits > 0);
    }
    (void)c;
}

cJSON *ck_compare_to_json(const ck_set_comparison *c, const ck_tensorset *a,
                          const ck_tensorset *ref, const ck_compare_meta *meta)
{
    ck_json_builder b = {false};
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    ck_json_add_string(&b, root, "schema", CK_COMPARE_SCHEMA);
    ck_json_add_int(&b, root, "schema_version", CK_COMPARE_SCHEMA_VERSION);
    cJSON *tool = ck_json_add_object(&b, root, "tool");
    ck_json_add_string(&b, tool, "name", "ckpt-harness");
    ck_json_add_string(&b, tool, "version",
                       meta && meta->tool_version ? meta->tool_version : "unknown");
    add_side(&b, root, "a", meta ? meta->path_a : NULL, a);
    add_side(&b, root, "ref", meta ? meta->path_ref : NULL, ref);
    ck_json_add_string(&b, root, "map", meta ? meta->map_path : NULL);
    ck_json_add_string(&b, root, "tolerances", meta ? meta->tol_path : NULL);

    cJSON *tensors = ck_json_add_array(&b, root, "tensors");
    cJSON *problems = ck_json_add_array(&b, root, "problems");
    for (int i = 0; i < c->n && !b.failed; i++) {
        const ck_pair *p = &c->p[i];
        const ck_named_tensor *ta = p->index_a >= 0 ? &a->t[p->index_a] : NULL;
        const ck_named_tensor *tr = p->index_ref >= 0 ? &ref->t[p->index_ref] : NULL;
        cJSON *o = ck_json_add_object(&b, p->kind == CK_PAIR_COMPARED ? tensors : problems, NULL);
        if (p->kind != CK_PAIR_COMPARED)
            ck_json_add_string(&b, o, "kind", ck_pair_kind_name(p->kind));
        ck_json_add_string(&b, o, "name", p->name);
        ck_json_add_string(&b, o, "name_a", p->name_a);
        ck_json_add_string(&b, o, "file_a", ta ? a->file[p->index_a] : NULL);
        ck_json_add_string(&b, o, "file_ref", tr ? ref->file[p->index_ref] : NULL);
        if (p->kind == CK_PAIR_COMPARED) {
            ck_json_add_string(&b, o, "dtype", ck_file_dtype_name(tr->dtype));
            add_shape(&b, o, "shape", &tr->shape);
            ck_json_add_real(&b, o, "rtol", p->rtol);
            ck_json_add_real(&b, o, "atol", p->atol);
            if (p->rel_l2_limit >= 0.0)
                ck_json_add_real(&b, o, "rel_l2_limit", p->rel_l2_limit);
            if (p->cross_dtype)
                ck_json_add_string(&b, o, "dtype_a", ck_file_dtype_name(ta->dtype));
            ck_json_add_string(&b, o, "verdict", ck_verdict_name(p->verdict));
            ck_json_add_bool(&b, o, "expected_mismatch", p->expected);
            if (!b.failed)
                ck_json_attach(&b, o, "metrics", ck_report_metrics_json(&p->m, &tr->shape));
            continue;
        }
        if (ta) {
            ck_json_add_string(&b, o, "dtype_a", ck_file_dtype_name(ta->dtype));
            add_shape(&b, o, "shape_a", &ta->shape);
        }
        if (tr) {
            ck_json_add_string(&b, o, "dtype_ref", ck_file_dtype_name(tr->dtype));
            add_shape(&b, o, "shape_ref", &tr->shape);
        }
    }

    cJSON *sum = ck_json_add_object(&b, root, "summary");
    ck_json_add_int(&b, sum, "compared", c->counts[0] + c->counts[1] + c->counts[2]);
    ck_json_add_int(&b, sum, "identical", c->counts[CK_VERDICT_IDENTICAL]);
    ck_json_add_int(&b, sum, "close", c->counts[CK_VERDICT_CLOSE]);
    ck_json_add_int(&b, sum, "mismatch", c->counts[CK_VERDICT_MISMATCH]);
    for (int k = CK_PAIR_MISSING; k <= CK_PAIR_DTYPE; k++)
        ck_json_add_int(&b, sum, ck_pair_kind_name((ck_pair_kind)k), c->n_problems[k]);
    ck_json_add_int(&b, sum, "expected_mismatch", c->n_expected);
    add_selection(&b, root, c, meta);
    ck_json_add_string(&b, root, "verdict", ck_verdict_name(c->verdict));
    ck_json_add_string(&b, root, "status", c->pass ? "pass" : "fail");
    cJSON *fl = ck_json_add_array(&b, root, "failures");
    for (int i = 0; i < c->n && !b.failed; i++) {
        char line[1024];
        ck_pair_describe(&c->p[i], a, ref, line, sizeof line);
        if (line[0])
            ck_json_add_string(&b, fl, NULL, line);
    }
    if (b.failed) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* ---------------------------------------------------------------------------------- */
/* Summary                                                                             */
/* ---------------------------------------------------------------------------------- */

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

void ck_compare_print_summary(FILE *f, const ck_set_comparison *c, const ck_tensorset *a,
                              const ck_tensorset *ref, const char *path_a, const char *path_ref,
                              bool quiet, int max_rows, const ck_compare_meta *meta)
{
    int n_cmp = 0;
    const ck_pair **rows = malloc(((size_t)c->n + 1) * sizeof *rows);
    if (!rows) {
        fprintf(f, "(tensor table left out: out of memory)\n");
    } else {
        for (int i = 0; i < c->n; i++)
            if (c->p[i].kind == CK_PAIR_COMPARED)
                rows[n_cmp++] = &c->p[i];
        qsort(rows, (size_t)n_cmp, sizeof *rows, worse_first);
    }
    int shown =
        !rows || quiet ? 0 : (max_rows < 0 || max_rows > n_cmp ? n_cmp : max_rows);
    if (!quiet) {
        /* every user string reaches the terminal through the one escaper (core/text.h) */
        char sa[1024], sr[1024];
        fprintf(f, "compare %s (a) against %s (ref): %d and %d tensors\n",
                ck_text_escape(path_a, sa, sizeof sa), ck_text_escape(path_ref, sr, sizeof sr),
                a->n, ref->n);
    }
    if (meta && meta->paired_single && a->n == 1 && ref->n == 1) {
        char na[256], nr[256];
        fprintf(f, "paired by position: both operands hold one tensor, so a's \"%s\" is compared "
                   "with ref's \"%s\" whatever their names\n",
                ck_text_escape(a->t[0].name, na, sizeof na),
                ck_text_escape(ref->t[0].name, nr, sizeof nr));
    }
    if (shown > 0) {
        int name_w = 4;
        for (int i = 0; i < shown; i++) {
            char nm[256];
            int len = (int)strlen(ck_text_escape(rows[i]->name, nm, sizeof nm));
            if (len > name_w)
                name_w = len < 40 ? len : 40;
        }
        fprintf(f, "%-*s  %-5s  %-9s  %10s  %10s  %10s  %s\n", name_w, "name", "dtype", "verdict",
               "max_abs", "max_rel", "max_ulp", "outside/numel");
        for (int i = 0; i < shown; i++) {
            const ck_pair *p = rows[i];
            char u[32], nm[256];
            fprintf(f, "%-*s  %-5s  %-9s  %10.3e  %10.3e  %10s  %" PRId64 "/%" PRId64 "%s\n", name_w,
                   ck_text_escape(p->name, nm, sizeof nm), ck_file_dtype_name(ref->t[p->index_ref].dtype),
                   ck_verdict_name(p->verdict), p->m.max_abs, p->m.max_rel,
                   fmt_ulp(p->m.max_ulp, u, sizeof u), p->m.n_outside, p->m.numel,
                   p->expected ? "  (expected)" : "");
        }
        if (shown < n_cmp)
            fprintf(f, "... %d more tensors\n", n_cmp - shown);
    }
    free(rows);
    for (int i = 0; i < c->n; i++) {
        char line[1024], shown_line[2048];
        /* --quiet: only what fails; a mismatch --expect-mismatch asked for is not a failure */
        if (quiet && c->p[i].kind == CK_PAIR_COMPARED && c->p[i].expected)
            continue;
        ck_pair_describe(&c->p[i], a, ref, line, sizeof line);
        if (line[0])
            fprintf(f, "%s\n", ck_text_escape(line, shown_line, sizeof shown_line));
    }
    const ck_compare_selection *sel = meta ? meta->sel : NULL;
    for (int k = 0; sel && meta->expect_hits && k < sel->n_expect; k++) {
        if (meta->expect_hits[k] == 0)
            fprintf(f, "expected mismatch not found: --expect-mismatch '%s' matches no mismatching "
                       "tensor\n", sel->expect[k]);
        else
            fprintf(f, "expected mismatch present: '%s' matches %d mismatching tensor%s\n",
                    sel->expect[k], meta->expect_hits[k], meta->expect_hits[k] == 1 ? "" : "s");
    }
    if (sel && (sel->n_include || sel->n_exclude))
        fprintf(f, "selection: %d tensor%s kept by --include/--exclude%s\n", c->n,
                c->n == 1 ? "" : "s", c->n ? "" : ": nothing compared");
    char exp[48] = "";
    if (c->n_expected)
        snprintf(exp, sizeof exp, ", %d of them expected", c->n_expected);
    fprintf(f, "%s %s: %d compared (identical %d, close %d, mismatch %d%s); missing %d, extra %d, "
           "shape %d, dtype %d\n",
           c->pass ? "PASS" : "FAIL", ck_verdict_name(c->verdict),
           c->counts[0] + c->counts[1] + c->counts[2], c->counts[CK_VERDICT_IDENTICAL],
           c->counts[CK_VERDICT_CLOSE], c->counts[CK_VERDICT_MISMATCH],
           exp,
           c->n_problems[CK_PAIR_MISSING], c->n_problems[CK_PAIR_EXTRA],
           c->n_problems[CK_PAIR_SHAPE], c->n_problems[CK_PAIR_DTYPE]);
}
