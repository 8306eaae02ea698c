/*
 * The bisect story: where and why two runs part, as readable lines (report.h). Printed by
 * `bisect` and `run --bisect` after the summary; the JSON report holds the same findings
 * and the same cause sentences (ck_bisect_cause_text words bisect's typed causes).
 */
#include "reports/report.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "harness/verify/findings.h"

static const char *layer_name(const ck_graph *g, int i)
{
    return i >= 0 && i < g->n ? g->nodes[i].spec->name : "?";
}

static const char *op_name(const ck_graph *g, int i)
{
    return i >= 0 && i < g->n ? g->nodes[i].spec->op_name : "?";
}

/* A layer's random draw, for the RNG cause: "attention dropout" or the op's name, and
 * whether it draws a mask or noise. */
static const char *draw_owner(const ck_graph *g, int i)
{
    if (i < 0 || i >= g->n)
        return "?";
    return g->nodes[i].op.kind == CK_OP_ATTENTION ? "attention dropout" : g->nodes[i].spec->op_name;
}

static const char *draw_word(const ck_graph *g, int i)
{
    return i >= 0 && i < g->n && !g->nodes[i].draw_uniform ? "noise" : "mask";
}

/* Causes of the noise floor and the recomputation (the first half of the kinds). */
static bool floor_or_recompute_text(const ck_graph *g, const ck_bisect_cause *c, char *buf,
                                    size_t n)
{
    switch (c->kind) {
    case CK_CAUSE_NONDETERMINISTIC_LAYER:
        snprintf(buf, n,
                 "%s `%s` is nondeterministic: its output%s differs between two plain runs "
                 "at step %d (max_abs %.3g, %" PRId64 " of %" PRId64 " elements)",
                 op_name(g, c->layer), layer_name(g, c->layer), c->in_backward ? " gradient" : "",
                 c->step, c->max_abs, c->count, c->total);
        return true;
    case CK_CAUSE_NONDETERMINISTIC_UPDATE:
        snprintf(buf, n, "two plain runs differ from step %d on, but no layer output or output "
                         "gradient does: the parameter-gradient reductions or the update are "
                         "nondeterministic (cause unknown)",
                 c->step);
        return true;
    case CK_CAUSE_WITHIN_NOISE_FLOOR:
        snprintf(buf, n, "every difference between the plain and checkpointed runs is within "
                         "the noise floor (at most %.0fx the plain-vs-plain difference): not "
                         "caused by checkpointing",
                 c->factor);
        return true;
    case CK_CAUSE_RNG_REDRAW:
        snprintf(buf, n,
                 "%s `%s` drew a different %s on recomputation (rng policy `%s`): %" PRId64
                 " of %" PRId64 " %s elements differ",
                 draw_owner(g, c->layer), layer_name(g, c->layer), draw_word(g, c->layer),
                 ck_rng_policy_name(c->rng), c->count, c->total, draw_word(g, c->layer));
        return true;
    case CK_CAUSE_RECOMPUTE_DTYPE:
        snprintf(buf, n, "recomputed segment ran in %s, original in %s: `%s` (%s) first differs "
                         "(max_abs %.3g)",
                 ck_dtype_name(c->dtype), ck_dtype_name(c->orig_dtype), layer_name(g, c->layer),
                 op_name(g, c->layer), c->max_abs);
        return true;
    case CK_CAUSE_RECOMPUTE_DIFFERS:
        snprintf(buf, n, "%s `%s`: its recomputed output differs from its original output at step "
                         "%d (max_abs %.3g, %" PRId64 " of %" PRId64 " elements): cause unknown",
                 op_name(g, c->layer), layer_name(g, c->layer), c->step, c->max_abs, c->count,
                 c->total);
        return true;
    default:
        return false;
    }
}

/* The cause's other layers after its sentence: all of them up to CK_CAUSE_NAMED layers,
 * else the first CK_CAUSE_NAMED - 2 others and a count. */
static void append_layers(const ck_graph *g, const ck_bisect_cause *c, char *buf, size_t n)
{
    if (c->n_layers <= 1)
        return;
    size_t k = strlen(buf);
    int others = c->n_layers - 1;
    int named = c->n_layers <= CK_CAUSE_NAMED ? others : CK_CAUSE_NAMED - 2;
    if (named > CK_CAUSE_MAX_LAYERS - 1)
        named = CK_CAUSE_MAX_LAYERS - 1;
    for (int i = 1; i <= named && k < n; i++) {
        const char *sep = i == 1 ? "; the same in " : i == named && named == others ? " and " : ", ";
        k += (size_t)snprintf(buf + k, n - k, "%s`%s`", sep, layer_name(g, c->layers[i]));
    }
    if (k < n && named < others)
        k += (size_t)snprintf(buf + k, n - k, " and %d more like it", others - named);
    if (k < n)
        snprintf(buf + k, n - k, " (%d layers)", c->n_layers);
}

static void cause_sentence(const ck_graph *g, const ck_bisect_cause *c, char *buf, size_t n);

void ck_bisect_cause_text(const ck_graph *g, const ck_bisect_cause *c, char *buf, size_t n)
{
    if (!floor_or_recompute_text(g, c, buf, n))
        cause_sentence(g, c, buf, n);
    append_layers(g, c, buf, n);
}

static void cause_sentence(const ck_graph *g, const ck_bisect_cause *c, char *buf, size_t n)
{
    switch (c->kind) {
    case CK_CAUSE_STATE_UPDATED:
        snprintf(buf, n, "%s `%s` %s updated during recomputation (num_batches_tracked %" PRId64
                         " vs %" PRId64 ", batchnorm_recompute `%s`)",
                 op_name(g, c->layer), layer_name(g, c->layer), c->buffer, c->nbt_recomp,
                 c->nbt_orig, ck_bn_policy_name(c->bn));
        return;
    case CK_CAUSE_STATE_CHANGED:
        snprintf(buf, n, "%s `%s` %s changed during recomputation (max_abs %.3g)",
                 op_name(g, c->layer), layer_name(g, c->layer), c->buffer, c->max_abs);
        return;
    case CK_CAUSE_FILTER_DROPPED_GRADIENT:
        snprintf(buf, n, "segment [%s .. %s] passed no gradient to its %s input `%s` at step %d: "
                         "policies.recompute_filter `fp32_only` keeps only fp32 tensors in a "
                         "checkpoint's gradient, so every layer before the segment lost its "
                         "gradient",
                 layer_name(g, c->layer), layer_name(g, c->last_layer), ck_dtype_name(c->dtype),
                 c->source_layer >= 0 ? layer_name(g, c->source_layer) : "(the model input)",
                 c->step);
        return;
    case CK_CAUSE_BACKWARD_DIFFERS:
        snprintf(buf, n, "no recomputed output and no buffer differs, but the output gradient "
                         "of `%s` (%s) differs first in backward order at step %d (max_abs %.3g): "
                         "cause unknown",
                 layer_name(g, c->layer), op_name(g, c->layer), c->step, c->max_abs);
        return;
    case CK_CAUSE_UNLOCALISED:
        snprintf(buf, n, "the runs part at step %d, but no recomputed output, buffer or output "
                         "gradient in the culprit segments differs: cause unknown",
                 c->step);
        return;
    case CK_CAUSE_LOSS_SCALER:
        snprintf(buf, n, "the loss scaler decided differently at step %d: plain scale %g%s, "
                         "checkpointed %g%s (%" PRId64 " step%s differ)",
                 c->step, c->scale_plain, c->skipped_plain ? " (skipped)" : "", c->scale_ckpt,
                 c->skipped_ckpt ? " (skipped)" : "", c->count, c->count == 1 ? "" : "s");
        return;
    default:
        snprintf(buf, n, "unknown cause");
        return;
    }
}

/* Segment s as "2 [l2 .. d2]". */
static void print_segment(FILE *f, const ck_result *res, int s)
{
    fprintf(f, "%d [%s .. %s]", s, layer_name(res->g, res->segments[s].first),
            layer_name(res->g, res->segments[s].last));
}

/* The culprit segments of independent set `set` (all of them when set is -1), joined by
 * ", ". */
static void print_set(FILE *f, const ck_result *res, int set)
{
    const ck_bisect_result *br = res->bisect;
    int shown = 0;
    for (int s = 0; s < br->n_segments && s < res->n_segments; s++) {
        if (!br->culprit[s] || (set >= 0 && br->culprit_set && br->culprit_set[s] != set))
            continue;
        fputs(shown++ ? ", " : " ", f);
        print_segment(f, res, s);
    }
}

/* The segment search's finding: one set ("needs segment 2 [..]"), or each independent set
 * on its own line, up to CK_CAUSE_NAMED of them. */
static void print_sets(FILE *f, const ck_result *res)
{
    const ck_bisect_result *br = res->bisect;
    int runs = br->search_runs, n = br->culprit_set ? br->n_culprit_sets : 1;
    fprintf(f, "  segment search (%d checkpointed run%s): ", runs, runs == 1 ? "" : "s");
    if (n <= 1) {
        int members = 0;
        for (int s = 0; s < br->n_segments; s++)
            members += br->culprit[s];
        fprintf(f, "the divergence needs segment%s", members > 1 ? "s" : "");
        print_set(f, res, -1);
        fputs(br->culprit_set ? "; no other segment diverges\n" : "\n", f);
        return;
    }
    fprintf(f, "each diverges on its own:\n");
    int shown = n <= CK_CAUSE_NAMED ? n : CK_CAUSE_NAMED - 1;
    for (int k = 0; k < shown; k++) {
        int members = 0;
        for (int s = 0; s < br->n_segments; s++)
            members += br->culprit[s] && br->culprit_set[s] == k;
        fprintf(f, "    segment%s", members > 1 ? "s" : "");
        print_set(f, res, k);
        fputs(members > 1 ? " together\n" : "\n", f);
    }
    if (shown < n)
        fprintf(f, "    and %d more like it\n", n - shown);
    if (br->sets_capped)
        fprintf(f, "    and more: the search stopped after %d\n", n);
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
        print_sets(f, res);
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
    for (int i = 0; i < br->n_causes; i++) {
        char line[CK_BISECT_LINE];
        ck_bisect_cause_text(g, &br->causes[i], line, sizeof line);
        fprintf(f, "  cause: %s\n", line);
    }
    if (br->n_causes == 0)
        fprintf(f, "  no divergence to explain\n");
}
