/*
 * Comparing two named tensor sets, as `ckpt-harness compare` does: names matched (after
 * mapping A's names through a name map), each pair compared with ck_compare under its
 * resolved tolerance, and what cannot be compared (a name on one side only, different
 * shapes or dtypes) listed as a problem. The JSON report is documented in
 * reports/SCHEMA.md ("compare report"); it is a pure function of the inputs.
 */
#ifndef CK_SETCOMPARE_H
#define CK_SETCOMPARE_H

#include <cjson/cJSON.h>

#include "harness/core/metrics.h"
#include "harness/compare/namemap.h"
#include "harness/io/tensorset.h"
#include "harness/compare/tolerances.h"


typedef enum {
    CK_PAIR_COMPARED = 0, /* both sides, same shape and dtype: metrics and verdict */
    CK_PAIR_MISSING,      /* in the reference only */
    CK_PAIR_EXTRA,        /* in A only */
    CK_PAIR_SHAPE,        /* shapes differ */
    CK_PAIR_DTYPE         /* dtypes differ (shapes may too) */
} ck_pair_kind;

const char *
ck_pair_kind_name(ck_pair_kind k); /* "compared", "missing", "extra", "shape", "dtype" */

typedef struct {
    ck_pair_kind kind;
    char *name;            /* the reference's name (A's name mapped, for extras) */
    const char *name_a;    /* A's own name; NULL when missing */
    int index_a, index_ref; /* into the sets; -1 when absent */
    double rtol, atol;     /* CK_PAIR_COMPARED */
    ck_metrics m;
    ck_verdict verdict;    /* CK_PAIR_COMPARED; MISMATCH for problems */
    bool expected;         /* a mismatch named by --expect-mismatch (selection.h) */
} ck_pair;

typedef struct {
    int n;
    ck_pair *p; /* reference order (compared and problems), then extras in A's order */
    int counts[3];            /* per verdict, over compared pairs */
    int n_problems[5];        /* per ck_pair_kind (index 0 unused) */
    ck_verdict verdict;       /* worst; MISMATCH when there is any problem */
    bool pass;                /* verdict is identical or close (selection.h: or every
                                 mismatch expected, and every expectation met) */
    int n_expected;           /* mismatches excused by --expect-mismatch (selection.h) */
    int n_expect_unmet;       /* --expect-mismatch patterns that matched no mismatch */
} ck_set_comparison;

/* Compares a (under test) against ref. map may be NULL. Fails (CK_ERR_INPUT) when the
 * map sends two of A's names to one name. */
ck_status ck_compare_sets(const ck_tensorset *a, const ck_tensorset *ref, const ck_name_map *map,
                          const ck_tolerances *tol, ck_set_comparison *out, ck_error *err);
void ck_set_comparison_free(ck_set_comparison *c);

#endif
