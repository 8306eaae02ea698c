/* --include / --exclude / --expect-mismatch on a set comparison (see selection.h). */
#include "harness/compare/selection.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

static bool any_match(const char *const *pat, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (fnmatch(pat[i], name, 0) == 0)
            return true;
    return false;
}

void ck_set_comparison_recount(ck_set_comparison *c)
{
    memset(c->counts, 0, sizeof c->counts);
    memset(c->n_problems, 0, sizeof c->n_problems);
    c->n_expected = 0;
    c->verdict = CK_VERDICT_IDENTICAL;
    bool unexpected = false;
    for (int i = 0; i < c->n; i++) {
        const ck_pair *p = &c->p[i];
        if (p->kind == CK_PAIR_COMPARED)
            c->counts[p->verdict]++;
        else
            c->n_problems[p->kind]++;
        if (p->verdict > c->verdict)
            c->verdict = p->verdict;
        if (p->verdict == CK_VERDICT_MISMATCH) {
            if (p->kind == CK_PAIR_COMPARED && p->expected)
                c->n_expected++;
            else
                unexpected = true;
        }
    }
    c->pass = !unexpected && c->n_expect_unmet == 0;
}

void ck_compare_apply_selection(ck_set_comparison *c, const ck_compare_selection *sel,
                                int *expect_hits)
{
    int kept = 0;
    for (int i = 0; i < c->n; i++) {
        ck_pair *p = &c->p[i];
        bool keep = (sel->n_include == 0 || any_match(sel->include, sel->n_include, p->name)) &&
                    !any_match(sel->exclude, sel->n_exclude, p->name);
        if (!keep) {
            free(p->name);
            continue;
        }
        c->p[kept++] = *p;
    }
    c->n = kept;
    for (int k = 0; k < sel->n_expect; k++)
        expect_hits[k] = 0;
    for (int i = 0; i < c->n; i++) {
        ck_pair *p = &c->p[i];
        p->expected = false;
        if (p->kind != CK_PAIR_COMPARED || p->verdict != CK_VERDICT_MISMATCH)
            continue;
        for (int k = 0; k < sel->n_expect; k++) {
            if (fnmatch(sel->expect[k], p->name, 0) == 0) {
                p->expected = true;
                expect_hits[k]++;
            }
        }
    }
    c->n_expect_unmet = 0;
    for (int k = 0; k < sel->n_expect; k++)
        c->n_expect_unmet += expect_hits[k] == 0;
    ck_set_comparison_recount(c);
    if ((sel->n_include || sel->n_exclude) && c->n == 0)
        c->pass = false; /* a selection that keeps nothing compares nothing: no pass */
}
