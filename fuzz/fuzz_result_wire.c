/*
 * libFuzzer target: the typed-result wire reader (harness/verify/result_wire.h) on
 * arbitrary bytes, against the graph of a small built-in case (a CNN with BatchNorm in one
 * checkpoint segment). Errors must be one line; an accepted result must render its JSON
 * report, text summary and bisect story without reading out of bounds, and re-encode to
 * the same bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/model/case.h"
#include "harness/model/graph.h"
#include "harness/verify/result_wire.h"
#include "reports/report.h"

#include "fuzz/result_wire_case.h"

static ck_case cs;
static ck_graph g;
static int ready; /* 1 built, -1 failed */

static void render(const ck_result *r)
{
    ck_report_meta meta = {.tool_version = "fuzz", .include_wall_time = true};
    char *json = ck_report_json_string(r, &meta);
    free(json);
    FILE *f = fopen("/dev/null", "w");
    if (!f)
        return;
    ck_report_print_summary(f, r, -1);
    ck_report_print_oneline(f, r);
    ck_bisect_print_story(f, r);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ck_error err;
    if (!ready)
        ready = ck_case_parse(case_json, strlen(case_json), "fuzz.json", &cs, &err) == CK_OK &&
                        ck_graph_build(&cs, &g, &err) == CK_OK
                    ? 1
                    : -1;
    if (ready < 0)
        abort();
    ck_wire_in in;
    ck_wire_in_init(&in, data, size);
    ck_result r;
    ck_status st = ck_result_decode(&in, &g, &r, &err);
    if (st == CK_OK && !ck_wire_done(&in))
        st = ck_fail(&err, CK_ERR_INPUT, "encoded result: %s", in.why);
    if (st != CK_OK) {
        if (strchr(err.msg, '\n'))
            abort();
        ck_result_free(&r);
        return 0;
    }
    render(&r);
    ck_wire_out w = {0};
    ck_result_encode(&r, &w);
    if (!w.failed && (w.len != size || memcmp(w.buf, data, size) != 0))
        abort();
    free(w.buf);
    ck_result_free(&r);
    return 0;
}
