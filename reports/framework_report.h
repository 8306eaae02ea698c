/*
 * Reports of `judge` (a framework's runs judged by the harness): the run report of each
 * item (schema ckpt-harness/report, written by report_json.c) with its `case` and `config`
 * describing the framework's model and configuration and a `framework` section (control,
 * memory, recomputation, ranks, notes), and the text lines that go with the summary.
 */
#ifndef CK_FRAMEWORK_REPORT_H
#define CK_FRAMEWORK_REPORT_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "harness/verify/framework_judge.h"
#include "reports/report.h"

/* The item's report tree; NULL when out of memory. */
cJSON *ck_fw_report_to_json(const ck_fw_input *in, const ck_fw_item *it,
                            const ck_report_meta *meta);

/* The summary of one item: the run summary (report_text.c) with the framework's memory
 * line, the control, the ranks, the failures only the judge knows, and the bisect story;
 * under quiet one line. */
void ck_fw_print_item(FILE *f, const ck_fw_input *in, const ck_fw_item *it, int max_rows,
                      bool quiet);

/* "memory (bytes autograd saved for backward, peak over a step): plain 1.20 MiB,
 * nonreentrant 0.40 MiB (saving 66.7%); 12 module forwards recomputed" */
void ck_fw_memory_line(const ck_fw_input *in, const ck_fw_item *it, char *buf, size_t n);

/* The first line that says why the item failed ("" when it passed). */
void ck_fw_first_failure(const ck_fw_item *it, char *buf, size_t n);

#endif
