/*
 * How plain-equivalence was established, for every writer: the text lines, the JSON
 * `equivalence` section (only when it was established segment by segment, so reports of
 * the ordinary comparison keep their shape), and the plain peak the memory lines print.
 */
#include "reports/report.h"

#include <stdio.h>
#include <string.h>

static const char *node_name(const ck_result *r, int i)
{
    if (r->g && r->g->nodes && i >= 0 && i < r->g->n && r->g->nodes[i].spec)
        return r->g->nodes[i].spec->name;
    return "?";
}

bool ck_report_segmentwise(const ck_result *r)
{
    return r->equivalence == CK_EQUIVALENCE_SEGMENTS;
}

int64_t ck_report_plain_peak(const ck_result *r)
{
    return ck_report_segmentwise(r) ? r->plain_predicted_peak_bytes
                                    : r->plain.peak_activation_bytes;
}

const char *ck_report_segmentwise_reason_name(ck_segmentwise_reason why)
{
    return why == CK_SEGMENTWISE_PLAIN_OVER_LIMIT ? "plain over memory limit" : "requested";
}

int64_t ck_report_largest_segment_run_peak(const ck_result *r)
{
    int64_t m = 0;
    for (int k = 0; k < r->n_segment_runs; k++)
        if (r->segment_runs[k].peak_activation_bytes > m)
            m = r->segment_runs[k].peak_activation_bytes;
    return m;
}

void ck_report_equivalence_line(const ck_result *r, char *buf, size_t n)
{
    buf[0] = '\0';
    if (!ck_report_segmentwise(r))
        return;
    char pp[32], lim[32], big[32];
    ck_format_bytes(r->plain_predicted_peak_bytes, pp, sizeof pp);
    ck_format_bytes(ck_report_largest_segment_run_peak(r), big, sizeof big);
    if (r->segmentwise_reason == CK_SEGMENTWISE_PLAIN_OVER_LIMIT)
        snprintf(buf, n,
                 "plain run not run: predicted %lld bytes (%s) of activations, over the "
                 "memory limit of %lld bytes (%s); plain-equivalence established segment by "
                 "segment: %d runs each keeping one segment's activations (largest peak %s) "
                 "against the checkpointed run",
                 (long long)r->plain_predicted_peak_bytes, pp, (long long)r->memory_limit_bytes,
                 ck_format_bytes(r->memory_limit_bytes, lim, sizeof lim), r->n_segment_runs,
                 big);
    else
        snprintf(buf, n,
                 "plain run not run (--plain segment-by-segment; predicted %s): "
                 "plain-equivalence established segment by segment: %d runs each keeping "
                 "one segment's activations (largest peak %s) against the checkpointed run",
                 pp, r->n_segment_runs, big);
}

/* Prints text wrapped at 80 columns, continuation lines indented by four. */
static void print_wrapped(FILE *f, const char *text)
{
    const int width = 80;
    const char *p = text;
    int indent = 0;
    while (*p) {
        int room = width - indent, len = (int)strlen(p);
        int cut = len;
        if (len > room) {
            cut = room;
            while (cut > 0 && p[cut] != ' ')
                cut--;
            if (cut == 0)
                cut = room;
        }
        fprintf(f, "%*s%.*s\n", indent, "", cut, p);
        p += cut;
        while (*p == ' ')
            p++;
        indent = 4;
    }
}

void ck_report_print_segment_runs(FILE *f, const ck_result *r)
{
    if (!ck_report_segmentwise(r))
        return;
    char line[CK_REPORT_LINE_MAX];
    ck_report_equivalence_line(r, line, sizeof line);
    print_wrapped(f, line);
    for (int k = 0; k < r->n_segment_runs; k++) {
        const ck_segment_run *sr = &r->segment_runs[k];
        const ck_segment *seg = sr->segment >= 0 && sr->segment < r->n_segments
                                    ? &r->segments[sr->segment]
                                    : NULL;
        char peak[32], first[160] = "";
        if (sr->first_step >= 0)
            snprintf(first, sizeof first, ", first %s %s at step %d",
                     ck_tensor_kind_name(sr->first_kind), sr->first_name, sr->first_step);
        snprintf(line, sizeof line, "  %s [%s .. %s]: %s, peak %s (predicted %lld B, "
                 "measured %lld B), %lld tensors%s%s",
                 sr->label, seg ? node_name(r, seg->first) : "?",
                 seg ? node_name(r, seg->last) : "?", ck_verdict_name(sr->verdict),
                 ck_format_bytes(sr->peak_activation_bytes, peak, sizeof peak),
                 (long long)sr->predicted_peak_bytes, (long long)sr->peak_activation_bytes,
                 (long long)sr->tensors_judged, first,
                 k == r->shown_segment_run ? " (rows below)" : "");
        print_wrapped(f, line);
    }
}

void ck_report_equivalence_from_json(const cJSON *report, char *buf, size_t n)
{
    buf[0] = '\0';
    const cJSON *eq = report ? cJSON_GetObjectItemCaseSensitive(report, "equivalence") : NULL;
    if (!cJSON_IsObject(eq))
        return;
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(eq, "reason");
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(eq, "plain_predicted_peak_bytes");
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(eq, "runs");
    double largest = 0;
    const cJSON *run;
    cJSON_ArrayForEach(run, runs) {
        const cJSON *peak = cJSON_GetObjectItemCaseSensitive(run, "peak_activation_bytes");
        if (cJSON_IsNumber(peak) && peak->valuedouble > largest)
            largest = peak->valuedouble;
    }
    char pb[32], lb[32];
    snprintf(buf, n,
             "plain-equivalence established segment by segment (%s): plain run not run "
             "(predicted %s), %d runs each keeping one segment's activations against the "
             "checkpointed run, the largest peak %s",
             cJSON_IsString(reason) && strcmp(reason->valuestring, "plain_over_memory_limit") == 0
                 ? "the plain run is predicted not to fit the memory limit"
                 : "--plain segment-by-segment",
             ck_format_bytes(cJSON_IsNumber(pp) ? (int64_t)pp->valuedouble : 0, pb, sizeof pb),
             cJSON_GetArraySize(runs), ck_format_bytes((int64_t)largest, lb, sizeof lb));
}
