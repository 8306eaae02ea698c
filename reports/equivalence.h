/*
 * How plain-equivalence was established (harness/verify/segmentwise.h), for the report
 * writers: text lines, the JSON `equivalence` section (reports/SCHEMA.md), and the plain
 * peak the memory lines print (the prediction when the plain run did not run).
 */
#ifndef CK_REPORT_EQUIVALENCE_H
#define CK_REPORT_EQUIVALENCE_H

#include <stdio.h>

#include "harness/io/json_build.h"
#include "reports/report.h"

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
/* The `equivalence` section; nothing for the ordinary comparison. */
void ck_report_add_equivalence_json(ck_json_builder *b, cJSON *root, const ck_result *r,
                                    bool include_wall_time);

/* The same from a report's JSON tree, one sentence (JUnit, HTML); empty for the ordinary
 * comparison. */
void ck_report_equivalence_from_json(const cJSON *report, char *buf, size_t n);

#endif
