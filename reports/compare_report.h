/*
 * The `compare` report (schema in reports/SCHEMA.md, "compare report"): the JSON tree,
 * the summary table and one line per failing pair.
 */
#ifndef CK_COMPARE_REPORT_H
#define CK_COMPARE_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "harness/compare/selection.h"
#include "harness/compare/sets.h"

#define CK_COMPARE_SCHEMA "ckpt-harness/compare"
#define CK_COMPARE_SCHEMA_VERSION 2

typedef struct {
    const char *tool_version;
    const char *path_a, *path_ref;     /* as the user named them */
    const char *map_path, *tol_path;   /* NULL when not given */
    /* optional (zero: none) */
    bool paired_single;                /* two single-tensor operands paired by position */
    const ck_compare_selection *sel;   /* --include / --exclude / --expect-mismatch */
    const int *expect_hits;            /* per sel->expect: mismatching tensors matched */
} ck_compare_meta;

/* The report tree; NULL when out of memory. */
cJSON *ck_compare_to_json(const ck_set_comparison *c, const ck_tensorset *a,
                          const ck_tensorset *ref, const ck_compare_meta *meta);

/* One readable line per failing pair (mismatch or problem), into buf; "" for others. */
void ck_pair_describe(const ck_pair *p, const ck_tensorset *a, const ck_tensorset *ref, char *buf,
                      size_t n);

/* "compare A (a) against REF (ref): n and m tensors", up to max_rows tensor rows worst
 * first (-1: all; none when quiet), one line per failing pair, and the closing line
 * "PASS|FAIL <verdict>: N compared (...); missing ..., extra ..., shape ..., dtype ...".
 * meta (may be NULL) adds the pairing note, expected mismatches and unmet expectations. */
void ck_compare_print_summary(FILE *f, const ck_set_comparison *c, const ck_tensorset *a,
                              const ck_tensorset *ref, const char *path_a, const char *path_ref,
                              bool quiet, int max_rows, const ck_compare_meta *meta);

#endif
