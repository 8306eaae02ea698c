/*
 * The bisect story: where and why two runs part, as readable lines (report.h). Printed by
 * `bisect` and `run --bisect` after the summary; the JSON report holds the same findings.
 */
#include "reports/report.h"

#include <stdio.h>

#include "harness/verify/findings.h"

static const char *layer_name(const ck_graph *g, int i)
{
    return i >= 0 && i < g->n ? g->nodes[i].spec->name : "?";
}

void ck_bisect_print_story(FILE *f, const ck_result *res)
{
    const ck_bisect_result *br = res->bisect;
    const ck_graph *g = res->g;
    if (!br)
        return;
    fprintf(f, "bisect %s:\n", g->cs->name);
    if (br->noise_floor_measured)
        fprintf(f, "  noise floor: two plain runs are %s\n",
                br->floor_verdict == CK_VERDICT_IDENTICAL ? "bitwise identical"
                                                          : "NOT identical (nondeterministic)");
    if (br->searched && br->n_segments == 1) {
        fprintf(f, "  segment search: the case has one segment, [%s .. %s]\n",
                layer_name(g, res->segments[0].first), layer_name(g, res->segments[0].last));
    } else if (br->searched) {
        fprintf(f, "  segment search (%d checkpointed run%s): the divergence needs segment%s",
                br->search_runs, br->search_runs == 1 ? "" : "s", "");
        int shown = 0;
        for (int s = 0; s < br->n_segments; s++) {
            if (!br->culprit[s] || s >= res->n_segments)
                continue;
            fprintf(f, "%s %d [%s .. %s]", shown++ ? "," : "", s,
                    layer_name(g, res->segments[s].first), layer_name(g, res->segments[s].last));
        }
        fprintf(f, "\n");
    }
    if (br->step >= 0) {
        fprintf(f, "  first divergent step: %d\n", br->step);
        if (br->forward.layer >= 0)
            fprintf(f, "  forward: `%s` is the first layer whose recomputed output differs from "
                       "its original (max_abs %.3g)\n",
                    layer_name(g, br->forward.layer), br->forward.m.max_abs);
        else
            fprintf(f, "  forward: every recomputed output equals its original\n");
        if (br->backward.layer >= 0)
            fprintf(f, "  backward: `%s` is the first layer (backward order) whose output "
                       "gradient differs from the plain run's (max_abs %.3g)\n",
                    layer_name(g, br->backward.layer), br->backward.m.max_abs);
        if (br->state_layer >= 0)
            fprintf(f, "  state: `%s`.%s changed during recomputation\n",
                    layer_name(g, br->state_layer), br->state_buffer);
    }
    for (int i = 0; i < br->n_causes; i++)
        fprintf(f, "  cause: %s\n", br->causes[i]);
    if (br->n_causes == 0)
        fprintf(f, "  no divergence to explain\n");
}
