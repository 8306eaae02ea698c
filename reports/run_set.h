/*
 * The outcome of a whole command as a list of items, one per case x dtype (x backend), in
 * the serial run's order: what the JUnit, HTML, GitHub and summary writers read. `run`
 * fills it as cases finish; `merge` fills it from the summary.json files of several report
 * folders, so every writer gives the same output for a serial run and for merged shards.
 * Each item that ran carries its JSON report (schema ckpt-harness/report): the writers read
 * facts from there, never from engine state.
 */
#ifndef CK_RUN_SET_H
#define CK_RUN_SET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "harness/core/status.h"

#define CK_SUMMARY_SCHEMA "ckpt-harness/summary"
#define CK_SUMMARY_SCHEMA_VERSION 1

typedef enum { CK_ITEM_PASS = 0, CK_ITEM_FAIL, CK_ITEM_ERROR, CK_ITEM_SKIPPED } ck_item_status;

typedef struct {
    int index;            /* position in the serial run's case x dtype matrix */
    char *case_name;
    char *case_file;      /* as the user named it */
    char *dtype;          /* "fp32"; "-" for a case file that did not load */
    char *backend;        /* "cpu" */
    ck_item_status status;
    char *message;        /* errors and skips: why; failures: the first failure line */
    char *report_file;    /* the report's file name inside the report folder, or NULL */
    cJSON *report;        /* the JSON report (owned), NULL when none was made */
    double time_s;        /* wall time; 0 under --reproducible */
} ck_run_item;

typedef struct {
    char *command;        /* "run", "bisect", "gradcheck", "compare" */
    ck_run_item *items;
    int n, cap;
    bool reproducible;    /* times are 0 and no host or clock is written */
    /* the whole case x dtype matrix and this set's part of it, written to summary.json so
     * that merge can refuse shards that do not cover it; matrix_size 0: not known */
    int matrix_size, shard, shards;
} ck_run_set;

/* Appends a copy of it (strings copied, report taken over) and returns the new item. */
ck_run_item *ck_run_set_add(ck_run_set *s, const ck_run_item *it, ck_error *err);
void ck_run_set_free(ck_run_set *s);
/* Orders items by index (stable). Fails on two items with the same index. */
ck_status ck_run_set_sort(ck_run_set *s, ck_error *err);
void ck_run_set_counts(const ck_run_set *s, int counts[4]);
/* 0 all passed (skips included), 1 a failure, 2 an error. */
int ck_run_set_exit_code(const ck_run_set *s);

const char *ck_item_status_name(ck_item_status st);
bool ck_item_status_parse(const char *name, ck_item_status *out);

/* The item's one-line story: "mismatch (expected identical): first divergence grad
 * fc1.weight at step 0". */
void ck_item_summary_line(const ck_run_item *it, char *buf, size_t n);
/* The bisect cause of the item's report (bisect.causes: the first, and how many more), or ""
 * when it was not bisected or found none. */
void ck_item_cause_line(const ck_run_item *it, char *buf, size_t n);
/* The summary line, and "; cause: <the cause>" when there is one: what the JUnit failure
 * message, the GitHub annotation and step summary say of a failing item. */
void ck_item_failure_line(const ck_run_item *it, char *buf, size_t n);

/* Up to max tensors of the item's report, worst first (verdict, then bound_ratio):
 * indexes into report.tensors; returns how many. */
int ck_item_worst_tensors(const ck_run_item *it, int *idx, int max);

/* summary.json: every item (no reports inlined: each names its report file). */
cJSON *ck_run_set_summary_json(const ck_run_set *s);
ck_status ck_run_set_write_summary(const ck_run_set *s, const char *path, ck_error *err);

/* "12 passed, 1 failed, 0 errors, 2 skipped" */
void ck_run_set_totals_line(const ck_run_set *s, char *buf, size_t n);

/* ---- writers (one file each) ---- */

/* JUnit XML (junit.c): one testsuite named after the command, one testcase per item. */
ck_status ck_junit_write(const ck_run_set *s, const char *path, ck_error *err);
char *ck_junit_string(const ck_run_set *s);

/* GitHub Actions (github.c): ::error / ::warning workflow commands on f pointing at each
 * failing case file, and a Markdown summary appended to summary_path. */
void ck_github_annotate(FILE *f, const ck_run_set *s);
ck_status ck_github_step_summary(const ck_run_set *s, const char *summary_path, ck_error *err);

/* The HTML page (html.c): self-contained, inline SVG, no scripts from anywhere. */
ck_status ck_html_write(const ck_run_set *s, const char *path, ck_error *err);
char *ck_html_string(const ck_run_set *s);

#endif
