/* `ckpt-harness plan`: predicted peak activation bytes of each run (cmd_plan.h). */
#include "harness/cli/cmd_plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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

/* One row of the table: a label and its bytes. */
typedef struct {
    char label[160]; /* "segment 12 [<63 chars> .. <63 chars>] peak" fits */
    int64_t bytes;
} plan_row;

/* The widest label that still keeps a row within 80 columns ("  " label " " 14 digits
 * " bytes (" up to 8 characters of MiB " MiB)"), and the narrowest the column gets. */
enum { LABEL_MAX_WIDTH = 43, LABEL_MIN_WIDTH = 34, TEXT_WIDTH = 80 };

/* A label wider than the column on lines of its own, wrapped at spaces (layer names hold
 * none, so a name is never split), continuation lines indented. */
static void print_wrapped_label(const char *label)
{
    const int first_indent = 2, next_indent = 6;
    int indent = first_indent, used = 0;
    const char *p = label;
    while (*p) {
        size_t word = strcspn(p, " ");
        if (used > 0 && indent + used + 1 + (int)word > TEXT_WIDTH) {
            printf("\n");
            indent = next_indent;
            used = 0;
        }
        if (used == 0)
            printf("%*s", indent, "");
        else
            printf(" "), used++;
        printf("%.*s", (int)word, p);
        used += (int)word;
        p += word;
        while (*p == ' ')
            p++;
    }
    printf("\n");
}

/* The rows as a table whose byte column starts where the longest label that fits ends;
 * a longer label (long layer names, as ONNX module paths are) goes above its numbers. */
static void print_rows(const plan_row *rows, int n)
{
    int width = LABEL_MIN_WIDTH;
    for (int i = 0; i < n; i++) {
        int len = (int)strlen(rows[i].label);
        if (len > width && len <= LABEL_MAX_WIDTH)
            width = len;
    }
    for (int i = 0; i < n; i++) {
        const char *label = rows[i].label;
        if ((int)strlen(label) > width) {
            print_wrapped_label(label);
            label = "";
        }
        printf("  %-*s %14lld bytes (%.2f MiB)\n", width, label, (long long)rows[i].bytes,
               (double)rows[i].bytes / (1024.0 * 1024.0));
    }
}

static void add_row(plan_row *rows, int *n, int64_t bytes, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_row(plan_row *rows, int *n, int64_t bytes, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rows[*n].label, sizeof rows[*n].label, fmt, ap);
    va_end(ap);
    rows[(*n)++].bytes = bytes;
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
    plan_row *rows = calloc(4 + 2 * (size_t)cp.n_segments, sizeof *rows);
    if (!rows) {
        ck_memory_prediction_free(&pp);
        ck_memory_prediction_free(&cp);
        ck_cli_error("out of memory");
        return CK_EXIT_USAGE;
    }
    int n = 0;
    add_row(rows, &n, pp.peak_bytes, "plain peak");
    add_row(rows, &n, pp.forward_end_bytes, "plain held for backward");
    add_row(rows, &n, cp.peak_bytes, "checkpointed peak");
    add_row(rows, &n, cp.forward_end_bytes, "checkpointed held for backward");
    for (int s = 0; s < cp.n_segments; s++)
        add_row(rows, &n, cp.segment_peak[s], "segment %d [%s .. %s] peak", s,
                g->nodes[plan->segments[s].first].spec->name,
                g->nodes[plan->segments[s].last].spec->name);
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
            add_row(rows, &n, kp.peak_bytes, "run keeping segment %d peak", s);
            ck_memory_prediction_free(&kp);
        }
        ck_plan_free(&keep);
    }
    if (rc == CK_EXIT_PASS) {
        printf("%s %s: predicted peak activation bytes\n", g->cs->name, ck_dtype_name(dt));
        print_rows(rows, n);
    }
    free(rows);
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
