/* `ckpt-harness plan`: predicted peak activation bytes of each run (cmd_plan.h). */
#include "harness/cli/cmd_plan.h"

#include <stdio.h>
#include <string.h>

#include "harness/cli/cli_options.h"
#include "harness/cli/messages.h"
#include "harness/engine/memory_plan.h"
#include "harness/model/case.h"
#include "harness/model/graph.h"
#include "harness/model/plan.h"
#include "harness/verify/segmentwise.h"

static const char usage_plan[] =
    "usage: ckpt-harness plan CASE.json [--dtype LIST]\n"
    "\n"
    "Prints, for each dtype, the predicted peak activation bytes of the plain and the\n"
    "checkpointed run, the bytes each holds for backward after its forward, and the peak\n"
    "of each checkpoint segment (its recomputation and backward). Nothing is allocated:\n"
    "the executor's schedule of allocations and frees is run without a backend, so the\n"
    "numbers equal the peaks a run measures (the report's peak_activation_bytes).\n"
    "Last, the peak of each run segment by segment (run --plain segment-by-segment):\n"
    "the run keeping that segment's activations, the other segments checkpointed.\n"
    "\n"
    "  --dtype LIST   fp32, fp16, bf16, comma-separated (default: the case's precision)\n";

static void print_bytes(const char *label, int64_t bytes)
{
    printf("  %-34s %14lld bytes (%.2f MiB)\n", label, (long long)bytes,
           (double)bytes / (1024.0 * 1024.0));
}

static int plan_dtype(const ck_graph *g, const ck_plan *plan, ck_dtype dt)
{
    ck_error err;
    ck_memory_prediction pp, cp;
    if (ck_predict_memory(g, NULL, dt, &pp, &err) != CK_OK) {
        ck_cli_error(err.msg);
        return CK_EXIT_USAGE;
    }
    if (ck_predict_memory(g, plan, dt, &cp, &err) != CK_OK) {
        ck_memory_prediction_free(&pp);
        ck_cli_error(err.msg);
        return CK_EXIT_USAGE;
    }
    printf("%s %s: predicted peak activation bytes\n", g->cs->name, ck_dtype_name(dt));
    print_bytes("plain peak", pp.peak_bytes);
    print_bytes("plain held for backward", pp.forward_end_bytes);
    print_bytes("checkpointed peak", cp.peak_bytes);
    print_bytes("checkpointed held for backward", cp.forward_end_bytes);
    for (int s = 0; s < cp.n_segments; s++) {
        char label[96];
        snprintf(label, sizeof label, "segment %d [%s .. %s] peak", s,
                 g->nodes[plan->segments[s].first].spec->name,
                 g->nodes[plan->segments[s].last].spec->name);
        print_bytes(label, cp.segment_peak[s]);
    }
    int rc = CK_EXIT_PASS;
    for (int s = 0; s < cp.n_segments && rc == CK_EXIT_PASS; s++) {
        ck_plan keep;
        ck_memory_prediction kp;
        if (ck_segmentwise_plan(g, plan, s, &keep, &err) != CK_OK) {
            ck_cli_error(err.msg);
            rc = CK_EXIT_USAGE;
            break;
        }
        if (ck_predict_memory(g, &keep, dt, &kp, &err) != CK_OK) {
            ck_cli_error(err.msg);
            rc = CK_EXIT_USAGE;
        } else {
            char label[64];
            snprintf(label, sizeof label, "run keeping segment %d peak", s);
            print_bytes(label, kp.peak_bytes);
            ck_memory_prediction_free(&kp);
        }
        ck_plan_free(&keep);
    }
    ck_memory_prediction_free(&pp);
    ck_memory_prediction_free(&cp);
    return rc;
}

/* Parses "fp32,fp16" into dts; false on an unknown name. */
static bool parse_dtypes(char *list, ck_dtype *dts, int *n)
{
    *n = 0;
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        if (*n == 8 || !ck_dtype_parse(tok, &dts[*n]) ||
            (dts[*n] != CK_F32 && dts[*n] != CK_F16 && dts[*n] != CK_BF16))
            return false;
        (*n)++;
    }
    return *n > 0;
}

int ck_main_plan(int argc, char **argv)
{
    const char *path = NULL;
    char dlist[256] = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return fputs(usage_plan, stdout), CK_EXIT_PASS;
        if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            snprintf(dlist, sizeof dlist, "%s", argv[++i]);
        } else if (argv[i][0] == '-' || path) {
            ck_cli_errorf("plan: unexpected argument '%s' (see 'ckpt-harness plan --help')",
                          argv[i]);
            return CK_EXIT_USAGE;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        ck_cli_error("plan: no case file given (see 'ckpt-harness plan --help')");
        return CK_EXIT_USAGE;
    }
    ck_case cs;
    ck_graph g;
    ck_plan plan;
    ck_error err;
    if (ck_case_load(path, &cs, &err) != CK_OK) {
        ck_cli_error(err.msg);
        return CK_EXIT_USAGE;
    }
    int rc = CK_EXIT_USAGE;
    ck_dtype dts[8];
    int n = 0;
    if (dlist[0] && !parse_dtypes(dlist, dts, &n)) {
        ck_cli_errorf("plan: --dtype %s: expected fp32, fp16 or bf16, comma-separated", dlist);
        goto done_case;
    }
    if (!dlist[0])
        for (n = 0; n < cs.n_precisions && n < 8; n++)
            dts[n] = cs.precisions[n];
    if (ck_graph_build(&cs, &g, &err) != CK_OK) {
        ck_cli_error(err.msg);
        goto done_case;
    }
    if (ck_plan_build(&g, &plan, &err) != CK_OK) {
        ck_cli_error(err.msg);
        goto done_graph;
    }
    rc = CK_EXIT_PASS;
    for (int k = 0; k < n && rc == CK_EXIT_PASS; k++)
        rc = plan_dtype(&g, &plan, dts[k]);
    ck_plan_free(&plan);
done_graph:
    ck_graph_free(&g);
done_case:
    ck_case_free(&cs);
    return rc;
}
