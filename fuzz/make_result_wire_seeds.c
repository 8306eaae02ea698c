/* Writes the seeds of fuzz_result_wire (fuzz/corpus/result_wire/bn_{fp32,fp16,bf16}.bin):
 * the typed result of fuzz_result_wire's built-in case, run on the cpu backend in each dtype
 * and encoded as `run --jobs` workers pass it back. Rerun whenever CK_RESULT_WIRE_VERSION
 * changes (older seeds no longer decode):  make fuzz-seeds-result_wire */
#include <stdio.h>
#include <string.h>
#include "backends/registry.h"
#include "harness/io/wire.h"
#include "harness/model/case.h"
#include "harness/model/graph.h"
#include "harness/verify/run_plan.h"
#include "harness/verify/result_wire.h"
#include "fuzz/result_wire_case.h"
int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_result_wire_seeds OUTDIR\n");
        return 2;
    }
    const char *names[3] = {"fp32", "fp16", "bf16"};
    ck_dtype dts[3] = {CK_F32, CK_F16, CK_BF16};
    for (int d = 0; d < 3; d++) {
        ck_case cs; ck_graph g; ck_error err = {{0}};
        if (ck_case_parse(case_json, strlen(case_json), "fuzz.json", &cs, &err) != CK_OK ||
            ck_graph_build(&cs, &g, &err) != CK_OK) { fprintf(stderr, "%s\n", err.msg); return 1; }
        ck_backend *b = NULL;
        if (ck_backend_create("cpu", NULL, &b, &err) != CK_OK) { fprintf(stderr, "%s\n", err.msg); return 1; }
        ck_run_request rq = {0};
        ck_run_plan p; ck_run_outcome oc;
        ck_run_plan_make(&cs, dts[d], &rq, false, &p);
        if (ck_run_plan_execute(&p, &rq, b, NULL, &g, NULL, NULL, &oc, &err) != CK_OK) { fprintf(stderr, "%s\n", err.msg); return 1; }
        ck_wire_out w; memset(&w, 0, sizeof w);
        ck_result_encode(&oc.res, &w);
        if (w.failed) return 1;
        char path[256]; snprintf(path, sizeof path, "%s/bn_%s.bin", argv[1], names[d]);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(w.buf, 1, w.len, f) != w.len || fclose(f) != 0) {
            fprintf(stderr, "%s: cannot write\n", path);
            return 1;
        }
        printf("%s %zu bytes\n", path, w.len);
    }
    return 0;
}
