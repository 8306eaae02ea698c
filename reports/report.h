/*
 * Report writers: the JSON report (schema in reports/SCHEMA.md) and the text summary.
 *
 * Both read a finished ck_result and never change it. In every comparison "a" is the
 * checkpointed run and "ref" the plain run. Output is a pure function of the result and
 * the meta (wall times aside, and those can be left out), so two runs of the same case
 * give byte-identical reports.
 */
#ifndef CK_REPORT_H
#define CK_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "harness/verify/result.h"
#include "harness/core/status.h"

#define CK_REPORT_SCHEMA "ckpt-harness/report"
#define CK_REPORT_SCHEMA_VERSION 2
/* A report whose plain-equivalence was established segment by segment: runs.plain and
 * memory.plain_peak_bytes are null there (no plain run), which version 2 does not allow. */
#define CK_REPORT_SCHEMA_VERSION_SEGMENTWISE 3

/* Where a report came from (the `run` section, SCHEMA.md "Run metadata"). NULL strings
 * are written as null; host and started_utc are left out under reproducible. */
typedef struct {
    const char *git_commit;   /* the commit the program was built from */
    bool cuda;                /* the CUDA module was built */
    const char *compiler;     /* e.g. "cc 12.2.0" */
    const char *cflags;
    const char *host;
    const char *started_utc;  /* "2026-11-30T06:32:08Z" */
    const char *command_line;
    const char *case_sha256;  /* of the case file */
    const char *init_path;    /* --init / init.from, or NULL */
    const char *init_sha256;  /* of that file (a directory: NULL) */
    bool reproducible;        /* leave host, start time and wall times out */
} ck_run_metadata;

typedef struct {
    const char *tool_version; /* e.g. "0.1.0"; NULL writes "unknown" */
    const char *case_path;    /* the case file as the user named it; NULL: r->cs->path */
    bool include_wall_time;   /* false leaves wall_time_s out (tests compare bytes) */
    const ck_run_metadata *run; /* NULL: no `run` section */
} ck_report_meta;

/* ---- JSON (report_json.c) ---- */

/* Builds the report tree; NULL when out of memory. The caller frees it with cJSON_Delete. */
cJSON *ck_report_to_json(const ck_result *r, const ck_report_meta *meta);

/* The "metrics" object of one tensor comparison, exactly as the report writes it (shape
 * turns first_bad into first_bad_index); NULL when out of memory. Also used by the
 * `compare` report (reports/compare_report.c). The caller frees it with cJSON_Delete. */
cJSON *ck_report_metrics_json(const ck_metrics *m, const ck_shape *shape);

/* The report as formatted JSON text (no trailing newline), malloc'd; NULL when out of
 * memory. The caller frees it with free(). */
char *ck_report_json_string(const ck_result *r, const ck_report_meta *meta);

/* Writes the report (the text above plus a newline) to path atomically: a temporary file
 * `<path>.tmp.<pid>` in the same directory is written, flushed, fsync'd and renamed over
 * path, so a reader sees the old report or the new one, never half of one. Creates no
 * directories. On failure the temporary file is removed and CK_ERR_IO (or CK_ERR_NOMEM)
 * is returned with a message naming path. */
ck_status ck_report_write_json(const ck_result *r, const ck_report_meta *meta, const char *path,
                               ck_error *err);

/* ---- Text (report_text.c) ---- */

/* A header line (case, backend, dtype, verdict, PASS/FAIL, memory), then up to max_rows
 * tensor rows worst first (mismatch, close, identical; then more elements outside, then
 * larger max_abs; ties keep the runner's order), then one line per failure. max_rows < 0
 * prints every row. */
void ck_report_print_summary(FILE *f, const ck_result *r, int max_rows);

/* One line for --quiet: "PASS unet3d_bn fp32  identical  memory 1.23 MiB -> 0.80 MiB (saving 35.0%)". */
void ck_report_print_oneline(FILE *f, const ck_result *r);

/* ---- The bisect story (bisect_story.c) ---- */

/* "bisect <case>:" and one indented line per finding: noise floor, segment search, first
 * divergent step, forward/backward/state culprits, causes. Nothing when r->bisect is NULL. */
void ck_bisect_print_story(FILE *f, const ck_result *r);

/* One bisect cause (findings.h) as the sentence the story and the JSON report's
 * bisect.causes carry, naming g's layers: a cause of several layers names the first with its
 * evidence, then the others ("; the same in `bn2` and `bn3` (3 layers)"), up to
 * CK_CAUSE_NAMED of them in all, past that "... and N more like it". */
#define CK_BISECT_LINE 1024
#define CK_CAUSE_NAMED 8
void ck_bisect_cause_text(const ck_graph *g, const ck_bisect_cause *c, char *buf, size_t n);

/* ---- Lines shared by both writers (report_text.c) ---- */

/* "pass", "fail" or "vacuous" (the runs' gradients carry no information and the case does
 * not expect that): the report's `status`. */
const char *ck_report_status(const ck_result *r);

#define CK_REPORT_LINE_MAX 512
#define CK_REPORT_MAX_FAILURES 4

/* Fills lines with one readable sentence per reason the case failed (its verdict did not
 * meet expect; its memory saving did not meet what the case expects) and returns how
 * many; 0 when r->pass. */
int ck_report_failures(const ck_result *r, char lines[][CK_REPORT_LINE_MAX], int max_lines);

/* "checkpointing saved 0.0% of peak activation memory (plain 1.20 MiB, checkpointed
 * 1.20 MiB); the case requires at least 30.0%". */
void ck_report_memory_message(const ck_result *r, char *buf, size_t n);
/* What one run's NaN/Inf counts say, on one line ("plain run: loss NaN at every step (3 of
 * 3), gradients: 12 of 12 values NaN (NaN 12, Inf 0) ..."), with the first non-finite
 * activation by layer and tensor name (g may be NULL: layer numbers instead); empty when
 * the run has none. */
void ck_report_nonfinite_message(const char *label, const ck_nonfinite_counts *c,
                                 const ck_graph *g, char *buf, size_t n);

/* "recomputation: 3 of 12 recomputed layer outputs differ from their originals; first:
 * `noise` (gaussian_noise) at step 0, max_abs 0.12". */
void ck_report_recompute_failure(const ck_result *r, char *buf, size_t n);

/* Why one run is vacuous, as a clause ("the loss at step 0 is exactly 0"); empty when it
 * is not. */
void ck_report_vacuity_text(const ck_vacuity *v, char *buf, size_t n);
/* Which run is vacuous and why ("plain run: ..."), empty when neither is: the report's
 * vacuous_reason. */
void ck_report_vacuous_reason(const ck_result *r, char *buf, size_t n);

/* ---- How plain-equivalence was established (equivalence.c): segment by segment
 * (harness/verify/segmentwise.h) or plain against checkpointed ---- */

bool ck_report_segmentwise(const ck_result *r);
/* The plain run's peak: measured, or segment by segment the exact prediction. */
int64_t ck_report_plain_peak(const ck_result *r);
int64_t ck_report_largest_segment_run_peak(const ck_result *r);
const char *ck_report_segmentwise_reason_name(ck_segmentwise_reason why);
/* "plain run not run: predicted ... bytes, over the memory limit of ...; plain-equivalence
 * established segment by segment: ..."; empty for the ordinary comparison. */
void ck_report_equivalence_line(const ck_result *r, char *buf, size_t n);
/* That line and one per segment run (80 columns); nothing for the ordinary comparison. */
void ck_report_print_segment_runs(FILE *f, const ck_result *r);
/* The same from a report's JSON tree, one sentence (JUnit, HTML); empty for the ordinary
 * comparison. */
void ck_report_equivalence_from_json(const cJSON *report, char *buf, size_t n);


/* "512 B", "1.50 KiB", "1.23 MiB", ... (binary units, two decimals). */
char *ck_format_bytes(int64_t bytes, char *buf, size_t n);

#endif
