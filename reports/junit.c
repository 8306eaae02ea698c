/*
 * JUnit XML (run_set.h) in the shape Jenkins and GitLab read: <testsuites> holding one
 * <testsuite> (the command) with one <testcase> per case x dtype x backend. A failing
 * case has a <failure> whose message is its summary line and whose text lists the worst
 * tensors; a case that could not run has an <error>; an unsupported combination is
 * <skipped>. Attributes are limited to the common schema (tests/junit/junit.xsd).
 */
#include "reports/report.h"
#include "reports/run_set.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/io/files.h"
#include "reports/strbuf.h"

static const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void add_worst(ck_strbuf *b, const ck_run_item *it)
{
    int idx[8];
    int n = ck_item_worst_tensors(it, idx, 8);
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(it->report, "tensors");
    for (int k = 0; k < n; k++) {
        const cJSON *t = cJSON_GetArrayItem(ts, idx[k]);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(t, "metrics");
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(t, "step");
        const cJSON *ma = cJSON_GetObjectItemCaseSensitive(m, "max_abs");
        const cJSON *no = cJSON_GetObjectItemCaseSensitive(m, "n_outside");
        const cJSON *ne = cJSON_GetObjectItemCaseSensitive(m, "numel");
        char line[512];
        snprintf(line, sizeof line, "%-9s %-5s %-32s step %d  max_abs %.3e  outside %.0f of %.0f\n",
                 jstr(t, "verdict") ? jstr(t, "verdict") : "?", jstr(t, "kind") ? jstr(t, "kind") : "?",
                 jstr(t, "name") ? jstr(t, "name") : "?", cJSON_IsNumber(step) ? step->valueint : -1,
                 cJSON_IsNumber(ma) ? ma->valuedouble : NAN, cJSON_IsNumber(no) ? no->valuedouble : 0.0,
                 cJSON_IsNumber(ne) ? ne->valuedouble : 0.0);
        ck_sb_add_xml(b, line);
    }
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(it->report, "failures");
    const cJSON *f;
    cJSON_ArrayForEach(f, fl) {
        if (cJSON_IsString(f)) {
            ck_sb_add_xml(b, f->valuestring);
            ck_sb_add(b, "\n");
        }
    }
    /* bisect's causes, as the text and HTML reports give them */
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(it->report, "bisect");
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(bs, "causes")) {
        if (cJSON_IsString(f)) {
            ck_sb_add(b, "cause: ");
            ck_sb_add_xml(b, f->valuestring);
            ck_sb_add(b, "\n");
        }
    }
}

char *ck_junit_string(const ck_run_set *s)
{
    ck_strbuf b = {0};
    int c[4];
    ck_run_set_counts(s, c);
    double total = 0.0;
    for (int i = 0; i < s->n; i++)
        total += s->items[i].time_s;
    const char *cmd = s->command ? s->command : "run";
    ck_sb_add(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    ck_sb_addf(&b, "<testsuites name=\"ckpt-harness\" tests=\"%d\" failures=\"%d\" errors=\"%d\" "
                   "skipped=\"%d\" time=\"%.3f\">\n", s->n, c[1], c[2], c[3], total);
    ck_sb_add(&b, "  <testsuite name=\"ckpt-harness ");
    ck_sb_add_xml(&b, cmd);
    ck_sb_addf(&b, "\" tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\" time=\"%.3f\">\n",
               s->n, c[1], c[2], c[3], total);
    for (int i = 0; i < s->n; i++) {
        const ck_run_item *it = &s->items[i];
        char line[2048];
        ck_sb_add(&b, "    <testcase classname=\"ckpt-harness.");
        ck_sb_add_xml(&b, cmd);
        ck_sb_add(&b, ".");
        ck_sb_add_xml(&b, it->backend);
        ck_sb_add(&b, "\" name=\"");
        ck_sb_add_xml(&b, it->case_name);
        ck_sb_add(&b, " [");
        ck_sb_add_xml(&b, it->dtype);
        ck_sb_addf(&b, "]\" time=\"%.3f\">\n", it->time_s);
        if (it->status == CK_ITEM_FAIL)
            ck_item_failure_line(it, line, sizeof line);
        else
            ck_item_summary_line(it, line, sizeof line);
        switch (it->status) {
        case CK_ITEM_PASS: break;
        case CK_ITEM_FAIL:
            ck_sb_add(&b, "      <failure type=\"");
            ck_sb_add_xml(&b, it->report ? jstr(it->report, "verdict") : "failed");
            ck_sb_add(&b, "\" message=\"");
            ck_sb_add_xml(&b, line);
            ck_sb_add(&b, "\">");
            add_worst(&b, it);
            ck_sb_add(&b, "</failure>\n");
            break;
        case CK_ITEM_ERROR:
            ck_sb_add(&b, "      <error type=\"error\" message=\"");
            ck_sb_add_xml(&b, line);
            ck_sb_add(&b, "\">");
            ck_sb_add_xml(&b, it->message ? it->message : line);
            ck_sb_add(&b, "</error>\n");
            break;
        case CK_ITEM_SKIPPED:
            ck_sb_add(&b, "      <skipped message=\"");
            ck_sb_add_xml(&b, line);
            ck_sb_add(&b, "\"/>\n");
            break;
        }
        /* no file named when there is none that will still exist (judge
         * --temporary-input without a model source) */
        ck_sb_add(&b, "      <system-out>");
        const char *sep = "";
        if (it->case_file) {
            ck_sb_add(&b, "case file: ");
            ck_sb_add_xml(&b, it->case_file);
            sep = "\n";
        }
        if (it->report_file) {
            ck_sb_add(&b, sep);
            ck_sb_add(&b, "report: ");
            ck_sb_add_xml(&b, it->report_file);
            sep = "\n";
        }
        char eq[CK_REPORT_LINE_MAX];
        ck_report_equivalence_from_json(it->report, eq, sizeof eq);
        if (eq[0]) {
            ck_sb_add(&b, sep);
            ck_sb_add_xml(&b, eq);
        }
        ck_sb_add(&b, "</system-out>\n    </testcase>\n");
    }
    ck_sb_add(&b, "  </testsuite>\n</testsuites>");
    if (b.failed) {
        ck_sb_free(&b);
        return NULL;
    }
    return b.s;
}

ck_status ck_junit_write(const ck_run_set *s, const char *path, ck_error *err)
{
    char *text = ck_junit_string(s);
    if (!text)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory building the JUnit report", path);
    ck_status st = ck_write_text_atomic(path, text, err);
    free(text);
    return st;
}
