/*
 * The `compare` subcommand: compares tensors that another framework (or an earlier run's
 * --dump) wrote, with the metrics, tolerances, verdicts, JSON report and exit codes of
 * `run`. main.c parses the arguments into ck_compare_cmd_opts.
 */
#ifndef CK_CMD_COMPARE_H
#define CK_CMD_COMPARE_H

#include <stdbool.h>

typedef struct {
    const char *a;          /* file or directory under test */
    const char *ref;        /* the reference: file or directory */
    bool has_rtol, has_atol;
    double rtol, atol;      /* --rtol / --atol */
    const char *tolerances; /* --tolerances FILE, or NULL */
    const char *map;        /* --map FILE, or NULL */
    const char *report;     /* --report FILE, or NULL */
    int max_rows;           /* summary rows, worst first; -1 all */
    bool quiet;             /* only the closing line (and problems) */
    /* --include / --exclude / --expect-mismatch patterns (harness/compare/selection.h) */
    int n_include, n_exclude, n_expect;
    const char **include, **exclude, **expect;
    const char *junit;      /* --junit FILE, or NULL */
} ck_compare_cmd_opts;

/* Returns the exit code: 0 every tensor identical or close, 1 any mismatch, missing or
 * extra name, shape or dtype difference, 2 bad input (unreadable or malformed file, bad
 * map or tolerance file). An operand that names no file but FILE:NAME with FILE a file is
 * the one tensor NAME of FILE. Two operands of one tensor each are paired whatever their
 * names. */
int ck_cmd_compare(const ck_compare_cmd_opts *o);

#endif
