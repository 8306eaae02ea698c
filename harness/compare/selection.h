/*
 * What a `compare` looks at and which differences it expects: --include / --exclude name
 * patterns and --expect-mismatch patterns, applied to a finished set comparison.
 *
 * Patterns are fnmatch(3) shell patterns (`grad.*`, `buffer.*num_batches_tracked`) tried
 * against a pair's name (the reference's name; A's name after the name map for extras).
 * A pair is kept when it matches some --include (or none is given) and no --exclude.
 * Among the kept pairs, a compared tensor whose verdict is a mismatch and whose name
 * matches an --expect-mismatch pattern is an expected mismatch: it does not fail the
 * comparison. Every --expect-mismatch pattern must match at least one mismatching tensor,
 * or the comparison fails: CI can assert that a known difference (BatchNorm's second
 * running-statistics update on recomputation) is still there, or gone after a fix.
 * Problems (missing, extra, shape, dtype) are never excused by --expect-mismatch. An
 * --include/--exclude that keeps no tensor fails: a comparison of nothing is no pass.
 */
#ifndef CK_COMPARE_SELECTION_H
#define CK_COMPARE_SELECTION_H

#include "harness/compare/sets.h"

typedef struct {
    int n_include, n_exclude, n_expect;
    const char **include, **exclude, **expect; /* patterns; not owned */
} ck_compare_selection;

/* Drops the pairs the selection leaves out, marks expected mismatches, counts how many
 * mismatching tensors each expect pattern matched (expect_hits[n_expect], may be NULL
 * when n_expect is 0) and recomputes the counts, the verdict and pass. */
void ck_compare_apply_selection(ck_set_comparison *c, const ck_compare_selection *sel,
                                int *expect_hits);

/* Recomputes counts, n_problems, verdict and pass from the pairs (expected mismatches
 * count as mismatches but do not fail). */
void ck_set_comparison_recount(ck_set_comparison *c);

#endif
