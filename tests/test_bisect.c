/*
 * Bisect: each canary localised to its layer and cause, the segment search finding the one
 * segment at fault among several that mismatch, every segment that diverges on its own
 * and every BatchNorm of a model that updates its statistics again, a noise floor that
 * explains a whole difference (a test-only backend whose add reduces in an order that
 * changes from call to call), and --verify-recompute catching a recomputation that differs
 * while every gradient agrees, and two segments that diverge only when both are
 * checkpointed found as one set of both.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/registry.h"
#include "harness/verify/judge.h"
#include "harness/verify/run_case.h"
#include "backends/backend.h"
#include "harness/verify/bisect.h"
#include "reports/report.h"
#include "tests/test_util.h"

static void run_and_bisect(ck_backend *b, tu_built_case *bc, ck_result *r)
{
    ck_error err;
    ck_assert_msg(ck_run_case(b, &bc->g, CK_F32, r, &err) == CK_OK, "%s", err.msg);
    ck_bisect_opts o = {.noise_floor = true, .localise = true};
    ck_assert_msg(ck_bisect(b, &bc->g, CK_F32, &o, r, &err) == CK_OK, "%s", err.msg);
    ck_assert(r->bisect != NULL);
}

static const char *name_of(const tu_built_case *bc, int layer)
{
    return layer >= 0 ? bc->g.nodes[layer].spec->name : "(none)";
}

/* Whether a cause of this kind is there and its sentence (as reports/ words it) holds a
 * and b. */
static bool has_cause(const tu_built_case *bc, const ck_bisect_result *br, ck_cause_kind kind,
                      const char *a, const char *b)
{
    for (int i = 0; i < br->n_causes; i++) {
        char line[CK_BISECT_LINE];
        ck_bisect_cause_text(&bc->g, &br->causes[i], line, sizeof line);
        if (br->causes[i].kind == kind && strstr(line, a) && (!b || strstr(line, b)))
            return true;
    }
    return false;
}

static void dump_causes(const tu_built_case *bc, const ck_bisect_result *br)
{
    for (int i = 0; i < br->n_causes; i++) {
        char line[CK_BISECT_LINE];
        ck_bisect_cause_text(&bc->g, &br->causes[i], line, sizeof line);
        fprintf(stderr, "cause %d: %s\n", (int)br->causes[i].kind, line);
    }
}

/* ---------------------------------------------------------------------------------------
 * Canaries
 * --------------------------------------------------------------------------------------- */

START_TEST(dropout_canary_is_bisected_to_the_dropout_and_its_mask)
{
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_file(&bc, "canary_dropout_stateful.json");
    ck_result r;
    run_and_bisect(b, &bc, &r);
    const ck_bisect_result *br = r.bisect;
    ck_assert(br->noise_floor_measured && br->floor_verdict == CK_VERDICT_IDENTICAL);
    ck_assert_int_eq(br->step, 0);
    ck_assert_msg(br->forward.layer >= 0 &&
                      bc.g.nodes[br->forward.layer].op.kind == CK_OP_DROPOUT,
                  "forward culprit %s", name_of(&bc, br->forward.layer));
    ck_assert_int_eq(br->rng.layer, br->forward.layer);
    ck_assert_int_gt(br->rng.rng_differs, 0);
    char want[128];
    snprintf(want, sizeof want, "dropout `%s` drew a different mask on recomputation",
             name_of(&bc, br->forward.layer));
    if (!has_cause(&bc, br, CK_CAUSE_RNG_REDRAW, want, "rng policy `stateful`"))
        dump_causes(&bc, br);
    ck_assert(has_cause(&bc, br, CK_CAUSE_RNG_REDRAW, want, "rng policy `stateful`"));
    ck_assert_int_eq(br->causes[0].layer, br->forward.layer);
    ck_assert(br->causes[0].rng == CK_RNG_STATEFUL);
    ck_result_free(&r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

START_TEST(batchnorm_canary_is_bisected_to_the_running_statistics)
{
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_file(&bc, "canary_bn_update.json");
    ck_result r;
    run_and_bisect(b, &bc, &r);
    const ck_bisect_result *br = r.bisect;
    ck_assert_int_eq(br->step, 0);
    ck_assert_int_eq(br->forward.layer, -1); /* every recomputed output equals its original */
    ck_assert_msg(br->state_layer >= 0 && bc.g.nodes[br->state_layer].op.kind == CK_OP_BATCHNORM,
                  "state culprit %s", name_of(&bc, br->state_layer));
    ck_assert_str_eq(br->state_buffer, "running_mean");
    ck_assert_int_eq(br->nbt_orig, 1);
    ck_assert_int_eq(br->nbt_recomp, 2);
    char want[160];
    snprintf(want, sizeof want, "`%s` running_mean updated during recomputation",
             name_of(&bc, br->state_layer));
    if (!has_cause(&bc, br, CK_CAUSE_STATE_UPDATED, want, "num_batches_tracked 2 vs 1"))
        dump_causes(&bc, br);
    ck_assert(has_cause(&bc, br, CK_CAUSE_STATE_UPDATED, want, "num_batches_tracked 2 vs 1"));
    ck_result_free(&r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

START_TEST(identical_case_has_nothing_to_explain)
{
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_file(&bc, "unet3d_bn.json");
    ck_result r;
    run_and_bisect(b, &bc, &r);
    ck_assert_int_eq(r.bisect->step, -1);
    ck_assert(!r.bisect->searched);
    ck_assert_int_eq(r.bisect->n_causes, 0);
    ck_assert(r.verdict == CK_VERDICT_IDENTICAL);
    ck_result_free(&r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

/* ---------------------------------------------------------------------------------------
 * Segment search: four segments, all mismatching in their gradients, one at fault
 * --------------------------------------------------------------------------------------- */

static const char *four_segments =
    "{\"name\": \"four\", \"seed\": 3, \"input\": {\"shape\": [4, 8]}, \"layers\": ["
    "{\"name\": \"l0\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"a0\", \"op\": \"tanh\"},"
    "{\"name\": \"l1\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"a1\", \"op\": \"tanh\"},"
    "{\"name\": \"l2\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"d2\", \"op\": \"dropout\", \"rate\": 0.5},"
    "{\"name\": \"l3\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"a3\", \"op\": \"tanh\"},"
    "{\"name\": \"out\", \"op\": \"linear\", \"units\": 2}],"
    "\"loss\": {\"op\": \"mse\"},"
    "\"checkpoint\": {\"segments\": [[\"l0\", \"a0\"], [\"l1\", \"a1\"], [\"l2\", \"d2\"], [\"l3\", \"a3\"]]},"
    "\"policies\": {\"rng\": \"stateful\"}, \"expect\": \"identical\"}";

START_TEST(segment_search_finds_the_one_segment_at_fault)
{
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_text(&bc, four_segments);
    ck_result r;
    run_and_bisect(b, &bc, &r);
    /* the gradients of layers in segments 0, 1 and 2 all mismatch ... */
    int mismatching_segments = 0;
    for (int s = 0; s < r.n_segments; s++) {
        bool any = false;
        for (int k = 0; k < r.n_tensors; k++) {
            const ck_tensor_result *t = &r.tensors[k];
            if (t->kind != CK_KIND_GRAD || t->verdict != CK_VERDICT_MISMATCH)
                continue;
            for (int l = r.segments[s].first; l <= r.segments[s].last; l++) {
                size_t n = strlen(bc.g.nodes[l].spec->name);
                any = any || (strncmp(t->name, bc.g.nodes[l].spec->name, n) == 0 && t->name[n] == '.');
            }
        }
        mismatching_segments += any;
    }
    ck_assert_int_ge(mismatching_segments, 2);
    /* ... but only segment 2 (the dropout's) is at fault */
    const ck_bisect_result *br = r.bisect;
    ck_assert(br->searched);
    ck_assert_int_eq(br->n_segments, 4);
    for (int s = 0; s < 4; s++)
        ck_assert_msg(br->culprit[s] == (s == 2), "segment %d culprit %d", s, br->culprit[s]);
    ck_assert_int_ge(br->search_runs, 3); /* narrowing, minimisation, confirmation */
    ck_assert_str_eq(name_of(&bc, br->forward.layer), "d2");
    ck_result_free(&r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST


/* ---------------------------------------------------------------------------------------
 * Every culprit: two segments that each diverge on their own, and seven BatchNorms that
 * all update their statistics again
 * --------------------------------------------------------------------------------------- */

static const char *two_culprits =
    "{\"name\": \"two\", \"seed\": 5, \"input\": {\"shape\": [4, 8]}, \"layers\": ["
    "{\"name\": \"l0\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"a0\", \"op\": \"tanh\"},"
    "{\"name\": \"l1\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"a1\", \"op\": \"tanh\"},"
    "{\"name\": \"l2\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"d2\", \"op\": \"dropout\", \"rate\": 0.5},"
    "{\"name\": \"l3\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"a3\", \"op\": \"tanh\"},"
    "{\"name\": \"l4\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"d4\", \"op\": \"dropout\", \"rate\": 0.5},"
    "{\"name\": \"out\", \"op\": \"linear\", \"units\": 2}],"
    "\"loss\": {\"op\": \"mse\"},"
    "\"checkpoint\": {\"segments\": [[\"l0\", \"a0\"], [\"l1\", \"a1\"], [\"l2\", \"d2\"], [\"l3\", \"a3\"], [\"l4\", \"d4\"]]},"
    "\"policies\": {\"rng\": \"stateful\"}, \"expect\": \"identical\"}";

/* The story as text. */
static char *story_of(const ck_result *r)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert(f != NULL);
    ck_bisect_print_story(f, r);
    fclose(f);
    return buf;
}

START_TEST(segment_search_reports_every_segment_that_diverges_on_its_own)
{
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_text(&bc, two_culprits);
    ck_result r;
    run_and_bisect(b, &bc, &r);
    const ck_bisect_result *br = r.bisect;
    ck_assert(br->searched);
    ck_assert_int_eq(br->n_segments, 5);
    ck_assert_int_eq(br->n_culprit_sets, 2);
    ck_assert(!br->sets_capped);
    for (int s = 0; s < 5; s++) {
        int want = s == 2 || s == 4 ? (s == 2 ? 0 : 1) : -1;
        ck_assert_msg(br->culprit[s] == (want >= 0) && br->culprit_set[s] == want,
                      "segment %d: culprit %d set %d", s, br->culprit[s], br->culprit_set[s]);
    }
    /* one cause for both dropouts, naming each */
    ck_assert(has_cause(&bc, br, CK_CAUSE_RNG_REDRAW, "dropout `d2` drew a different mask",
                        "the same in `d4` (2 layers)"));
    char *story = story_of(&r);
    ck_assert_msg(strstr(story, "each diverges on its own:\n    segment 2 [l2 .. d2]\n"
                                "    segment 4 [l4 .. d4]\n") != NULL, "%s", story);
    free(story);
    ck_result_free(&r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

/* eighteen segments of linear + dropout under the stateful rng: every one diverges */
START_TEST(segment_search_stops_at_its_cap_and_says_so)
{
    char json[8192];
    size_t k = (size_t)snprintf(json, sizeof json, "{\"name\": \"many\", \"seed\": 4, \"input\": "
                                                    "{\"shape\": [2, 8]}, \"layers\": [");
    for (int i = 0; i < 18; i++)
        k += (size_t)snprintf(json + k, sizeof json - k,
                              "%s{\"name\": \"l%d\", \"op\": \"linear\", \"units\": 8}, "
                              "{\"name\": \"d%d\", \"op\": \"dropout\", \"rate\": 0.5}",
                              i ? ", " : "", i, i);
    k += (size_t)snprintf(json + k, sizeof json - k, ", {\"name\": \"out\", \"op\": \"linear\", "
                                                      "\"units\": 2}], \"loss\": {\"op\": \"mse\"}, "
                                                      "\"train\": {\"steps\": 1}, "
                                                      "\"checkpoint\": {\"segments\": [");
    for (int i = 0; i < 18; i++)
        k += (size_t)snprintf(json + k, sizeof json - k, "%s[\"l%d\", \"d%d\"]", i ? ", " : "", i, i);
    snprintf(json + k, sizeof json - k, "]}, \"policies\": {\"rng\": \"stateful\"}, "
                                        "\"expect\": \"identical\"}");
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_text(&bc, json);
    ck_result r;
    run_and_bisect(b, &bc, &r);
    const ck_bisect_result *br = r.bisect;
    ck_assert_int_eq(br->n_culprit_sets, CK_BISECT_MAX_SETS);
    ck_assert(br->sets_capped);
    char *story = story_of(&r);
    ck_assert_msg(strstr(story, "    and 9 more like it\n    and more: the search stopped after 16\n"),
                  "%s", story);
    free(story);
    if (!has_cause(&bc, br, CK_CAUSE_RNG_REDRAW, "`d6` and 9 more like it (16 layers)", NULL))
        dump_causes(&bc, br);
    ck_assert(has_cause(&bc, br, CK_CAUSE_RNG_REDRAW, "`d6` and 9 more like it (16 layers)", NULL));
    ck_result_free(&r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

/* conv + batchnorm + relu seven times, the first four in one segment, the other three in a
 * second */
static void seven_batchnorms(char *json, size_t cap)
{
    size_t k = (size_t)snprintf(json, cap, "{\"name\": \"bn7\", \"seed\": 2, \"input\": {\"shape\": "
                                           "[2, 3, 6, 6]}, \"layers\": [");
    for (int i = 0; i < 7; i++)
        k += (size_t)snprintf(json + k, cap - k,
                              "%s{\"name\": \"c%d\", \"op\": \"conv2d\", \"filters\": 4, \"kernel\": 3,"
                              " \"padding\": \"same\"}, {\"name\": \"bn%d\", \"op\": \"batchnorm\"},"
                              " {\"name\": \"r%d\", \"op\": \"relu\"}",
                              i ? ", " : "", i, i, i);
    snprintf(json + k, cap - k,
             ", {\"name\": \"flat\", \"op\": \"flatten\"}, {\"name\": \"fc\", \"op\": \"linear\", "
             "\"units\": 3}], \"loss\": {\"op\": \"cross_entropy\"}, \"checkpoint\": {\"segments\": "
             "[[\"c0\", \"r3\"], [\"c4\", \"r6\"]]}, \"train\": {\"steps\": 1}, "
             "\"policies\": {\"batchnorm_recompute\": \"update\"}, \"expect\": \"identical\"}");
}

START_TEST(every_batchnorm_updated_twice_is_named)
{
    ck_backend *b = tu_cpu_backend();
    char json[4096];
    seven_batchnorms(json, sizeof json);
    tu_built_case bc;
    tu_build_text(&bc, json);
    ck_result r;
    run_and_bisect(b, &bc, &r);
    const ck_bisect_result *br = r.bisect;
    ck_assert_int_eq(br->n_culprit_sets, 2); /* each segment updates its own BatchNorms */
    const ck_bisect_cause *c = NULL;
    for (int i = 0; i < br->n_causes; i++)
        if (br->causes[i].kind == CK_CAUSE_STATE_UPDATED)
            c = &br->causes[i];
    if (!c)
        dump_causes(&bc, br);
    ck_assert(c != NULL);
    ck_assert_int_eq(c->n_layers, 7);
    for (int i = 0; i < 7; i++) {
        char want[16];
        snprintf(want, sizeof want, "bn%d", i);
        ck_assert_str_eq(name_of(&bc, c->layers[i]), want);
    }
    ck_assert(has_cause(&bc, br, CK_CAUSE_STATE_UPDATED, "batchnorm `bn0` running_mean updated",
                        "; the same in `bn1`, `bn2`, `bn3`, `bn4`, `bn5` and `bn6` (7 layers)"));
    /* past CK_CAUSE_NAMED layers the sentence counts the rest */
    ck_bisect_cause many = *c;
    many.n_layers = 12;
    for (int i = 7; i < 12; i++)
        many.layers[i] = c->layers[i % 7];
    char line[CK_BISECT_LINE];
    ck_bisect_cause_text(&bc.g, &many, line, sizeof line);
    ck_assert_msg(strstr(line, "; the same in `bn1`, `bn2`, `bn3`, `bn4`, `bn5`, `bn6` and 5 more "
                               "like it (12 layers)") != NULL, "%s", line);
    ck_result_free(&r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

/* ---------------------------------------------------------------------------------------
 * Noise floor: a test-only backend whose three-way add changes its summation order on
 * every call, as a GPU reduction with atomics would
 * --------------------------------------------------------------------------------------- */

typedef struct {
    ck_backend *cpu;
    unsigned calls;
} flaky_state;

static ck_status flaky_forward(ck_backend *b, const ck_op_params *op, const ck_fwd_args *args,
                               ck_op_io *io, ck_error *err)
{
    flaky_state *fs = b->impl;
    if (op->kind != CK_OP_ADD || io->n_in != 3 || io->out->dtype != CK_F32)
        return fs->cpu->forward(fs->cpu, op, args, io, err);
    bool reversed = (fs->calls++ & 1) != 0;
    const float *x0 = io->in[0]->data, *x1 = io->in[1]->data, *x2 = io->in[2]->data;
    float *y = io->out->data;
    int64_t n = ck_shape_numel(&io->out->shape);
    for (int64_t i = 0; i < n; i++)
        y[i] = reversed ? (x2[i] + x1[i]) + x0[i] : (x0[i] + x1[i]) + x2[i];
    return CK_OK;
}

#define FORWARD_TO_CPU(fn, ...) ((flaky_state *)b->impl)->cpu->fn(((flaky_state *)b->impl)->cpu, __VA_ARGS__)

static ck_status f_alloc(ck_backend *b, size_t n, void **p, ck_error *e) { return FORWARD_TO_CPU(alloc, n, p, e); }
static void f_free(ck_backend *b, void *p) { FORWARD_TO_CPU(free, p); }
static ck_status f_upload(ck_backend *b, ck_tensor *t, const void *h, ck_error *e) { return FORWARD_TO_CPU(upload, t, h, e); }
static ck_status f_download(ck_backend *b, const ck_tensor *t, void *h, ck_error *e) { return FORWARD_TO_CPU(download, t, h, e); }
static ck_status f_zero(ck_backend *b, ck_tensor *t, ck_error *e) { return FORWARD_TO_CPU(zero, t, e); }
static ck_status f_copy(ck_backend *b, ck_tensor *d, const ck_tensor *s, ck_error *e) { return FORWARD_TO_CPU(copy, d, s, e); }
static bool f_supports(ck_backend *b, const ck_op_params *op, ck_dtype dt) { return FORWARD_TO_CPU(supports, op, dt); }
static ck_status f_backward(ck_backend *b, const ck_op_params *op, const ck_fwd_args *a, const ck_op_io *io, ck_op_grads *g, ck_error *e) { return FORWARD_TO_CPU(backward, op, a, io, g, e); }
static ck_status f_loss_fwd(ck_backend *b, ck_loss_kind k, const ck_tensor *y, const ck_tensor *t, double *l, ck_error *e) { return FORWARD_TO_CPU(loss_forward, k, y, t, l, e); }
static ck_status f_loss_bwd(ck_backend *b, ck_loss_kind k, const ck_tensor *y, const ck_tensor *t, double s, ck_tensor *dy, bool ro, ck_error *e) { return FORWARD_TO_CPU(loss_backward, k, y, t, s, dy, ro, e); }
static ck_status f_optim(ck_backend *b, const ck_optimizer *o, int64_t st, double gs, ck_tensor *p, const ck_tensor *g, ck_tensor *s0, ck_tensor *s1, ck_error *e) { return FORWARD_TO_CPU(optimizer_step, o, st, gs, p, g, s0, s1, e); }
static ck_status f_ce_fwd(ck_backend *b, const ck_loss_spec *k, const ck_tensor *y, const ck_tensor *t, double *l, ck_error *e) { return FORWARD_TO_CPU(ce_forward, k, y, t, l, e); }
static ck_status f_ce_bwd(ck_backend *b, const ck_loss_spec *k, const ck_tensor *y, const ck_tensor *t, double s, ck_tensor *dy, ck_error *e) { return FORWARD_TO_CPU(ce_backward, k, y, t, s, dy, e); }
static bool f_supports_loss(ck_backend *b, const ck_loss_spec *k, ck_dtype dt) { return FORWARD_TO_CPU(supports_loss, k, dt); }
static bool f_supports_optim(ck_backend *b, const ck_optimizer *o, ck_dtype dt) { return FORWARD_TO_CPU(supports_optimizer, o, dt); }
static void f_info(ck_backend *b, ck_backend_info *i) { FORWARD_TO_CPU(info, i); snprintf(i->name, sizeof i->name, "flaky-test"); }
static void f_destroy(ck_backend *b) { flaky_state *fs = b->impl; fs->cpu->destroy(fs->cpu); free(fs); free(b); }

static ck_backend *flaky_backend(void)
{
    ck_error err;
    flaky_state *fs = calloc(1, sizeof *fs);
    ck_backend *b = calloc(1, sizeof *b);
    ck_assert(fs && b && ck_backend_create("cpu", NULL, &fs->cpu, &err) == CK_OK);
    *b = (ck_backend){.name = "flaky-test", .impl = fs, .alloc = f_alloc, .free = f_free,
                      .upload = f_upload, .download = f_download, .zero = f_zero, .copy = f_copy,
                      .supports = f_supports, .forward = flaky_forward, .backward = f_backward,
                      .loss_forward = f_loss_fwd, .loss_backward = f_loss_bwd,
                      .ce_forward = f_ce_fwd, .ce_backward = f_ce_bwd,
                      .supports_loss = f_supports_loss, .optimizer_step = f_optim,
                      .supports_optimizer = f_supports_optim, .info = f_info,
                      .destroy = f_destroy};
    return b;
}

static const char *three_way_add =
    "{\"name\": \"noisy\", \"seed\": 9, \"input\": {\"shape\": [4, 8], \"dist\": \"normal\"}, \"layers\": ["
    "{\"name\": \"l0\", \"op\": \"linear\", \"units\": 16},"
    "{\"name\": \"t\", \"op\": \"tanh\"},"
    "{\"name\": \"s\", \"op\": \"sigmoid\", \"inputs\": [\"l0\"]},"
    "{\"name\": \"sum\", \"op\": \"add\", \"inputs\": [\"l0\", \"t\", \"s\"]},"
    "{\"name\": \"l1\", \"op\": \"linear\", \"units\": 3}],"
    "\"loss\": {\"op\": \"mse\"},"
    "\"checkpoint\": {\"segments\": [[\"l0\", \"sum\"]]}, \"expect\": \"close\"}";

START_TEST(noise_floor_explains_the_whole_difference)
{
    ck_backend *b = flaky_backend();
    tu_built_case bc;
    tu_build_text(&bc, three_way_add);
    ck_result r;
    ck_error err;
    ck_assert_msg(ck_run_case(b, &bc.g, CK_F32, &r, &err) == CK_OK, "%s", err.msg);
    ck_assert_msg(r.verdict != CK_VERDICT_IDENTICAL, "the flaky add made no difference");
    ck_bisect_opts o = {.noise_floor = true, .localise = true};
    ck_assert_msg(ck_bisect(b, &bc.g, CK_F32, &o, &r, &err) == CK_OK, "%s", err.msg);
    const ck_bisect_result *br = r.bisect;
    ck_assert(br->noise_floor_measured);
    ck_assert(br->floor_verdict != CK_VERDICT_IDENTICAL);
    ck_assert_str_eq(name_of(&bc, br->nondet.layer), "sum");
    ck_assert(!br->nondet_in_backward);
    ck_assert(br->within_noise_floor);
    ck_assert(!br->searched); /* nothing left to blame on checkpointing */
    ck_assert(has_cause(&bc, br, CK_CAUSE_NONDETERMINISTIC_LAYER, "`sum` is nondeterministic",
                        "two plain runs"));
    ck_assert(has_cause(&bc, br, CK_CAUSE_WITHIN_NOISE_FLOOR, "within the noise floor",
                        "not caused by checkpointing"));
    ck_assert(r.verdict == CK_VERDICT_CLOSE);
    ck_assert(r.pass);
    ck_result_free(&r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

/* ---------------------------------------------------------------------------------------
 * --verify-recompute: noise on the model output under the stateful policy. The mean loss
 * gives a constant output gradient and noise passes it through, so every gradient and
 * parameter agrees bitwise; only the recomputed output itself differs.
 * --------------------------------------------------------------------------------------- */

static const char *noise_at_output =
    "{\"name\": \"quiet_noise\", \"seed\": 4, \"input\": {\"shape\": [4, 8]}, \"layers\": ["
    "{\"name\": \"l0\", \"op\": \"linear\", \"units\": 8},"
    "{\"name\": \"noise\", \"op\": \"gaussian_noise\", \"stddev\": 0.1}],"
    "\"loss\": {\"op\": \"mean\"},"
    "\"checkpoint\": {\"segments\": [[\"l0\", \"noise\"]]},"
    "\"policies\": {\"rng\": \"%s\"}, \"expect\": \"identical\"}";

START_TEST(verify_recompute_catches_a_difference_gradients_miss)
{
    ck_backend *b = tu_cpu_backend();
    ck_error err;
    const char *policies[] = {"stateful", "counter"};
    for (int k = 0; k < 2; k++) {
        char text[1024];
        snprintf(text, sizeof text, noise_at_output, policies[k]);
        tu_built_case bc;
        tu_build_text(&bc, text);
        ck_result r;
        ck_assert(ck_run_case(b, &bc.g, CK_F32, &r, &err) == CK_OK);
        ck_assert_msg(r.verdict == CK_VERDICT_IDENTICAL, "%s: gradients differ", policies[k]);
        ck_assert_msg(ck_verify_recompute(b, &bc.g, CK_F32, &r, &err) == CK_OK, "%s", err.msg);
        ck_assert_int_eq(r.n_recompute_checks, 2);
        if (k == 0) {
            ck_assert_int_eq(r.recompute_mismatches, 1);
            const ck_recompute_check *c = &r.recompute_checks[1];
            ck_assert_str_eq(name_of(&bc, c->layer), "noise");
            ck_assert(c->verdict == CK_VERDICT_MISMATCH);
            ck_assert_int_eq(c->rng_differs, 32);
            ck_assert(r.verdict == CK_VERDICT_MISMATCH);
            ck_assert(!r.pass);
        } else {
            ck_assert_int_eq(r.recompute_mismatches, 0);
            ck_assert(r.pass);
        }
        ck_result_free(&r);
        tu_free_built(&bc);
    }
    b->destroy(b);
}
END_TEST

/* ---------------------------------------------------------------------------------------
 * Two segments that diverge only together
 * --------------------------------------------------------------------------------------- */

/* Two branches of one shared linear (b_lin shares a_lin's weight and bias) read the same
 * input, each checkpointed on its own, in fp16 with autocast_recompute drop: a recomputed
 * branch runs in fp32, so its backward sees other activations, and the shared parameters'
 * gradient is the sum of both branches'. The branches compute the same thing, so either one
 * recomputed moves that gradient by the same error e, and both by 2e (exactly, in binary):
 * with a tolerance of 1.5e, each segment alone stays within it and only both together
 * leave it. The engine builds this deterministically; the test measures e itself. */
static void build_together(tu_built_case *bc, const char *segments, double atol)
{
    char json[2048];
    snprintf(json, sizeof json,
             "{\"name\": \"together\", \"seed\": 3, \"input\": {\"shape\": [8, 16], "
             "\"dist\": \"normal\"}, \"layers\": ["
             "{\"name\": \"pre\", \"op\": \"tanh\"},"
             "{\"name\": \"a_lin\", \"op\": \"linear\", \"units\": 16, \"inputs\": [\"pre\"]},"
             "{\"name\": \"a_act\", \"op\": \"tanh\"},"
             "{\"name\": \"b_lin\", \"op\": \"linear\", \"units\": 16, \"inputs\": [\"pre\"], "
             "\"share\": {\"weight\": \"a_lin.weight\", \"bias\": \"a_lin.bias\"}},"
             "{\"name\": \"b_act\", \"op\": \"tanh\"},"
             "{\"name\": \"sum\", \"op\": \"add\", \"inputs\": [\"a_act\", \"b_act\"]},"
             "{\"name\": \"head\", \"op\": \"linear\", \"units\": 4}],"
             "\"loss\": {\"op\": \"mse\"}, \"checkpoint\": {\"segments\": %s},"
             "\"train\": {\"steps\": 1, \"optimizer\": \"sgd\", \"lr\": 0.01},"
             "\"policies\": {\"autocast_recompute\": \"drop\"},"
             "\"tolerance\": {\"rtol\": 0, \"atol\": %.17g}, \"expect\": \"close\"}",
             segments, atol);
    tu_build_text(bc, json);
}

/* Runs segments (a checkpoint.segments list) in fp16 at tolerance atol: the verdict, and
 * the largest max_abs of any tensor. */
static ck_verdict run_together(ck_backend *b, const char *segments, double atol,
                               double *worst)
{
    tu_built_case bc;
    build_together(&bc, segments, atol);
    ck_case_run_opts o = {.precision_check = CK_PRECISION_CHECK_OFF};
    ck_result r;
    ck_error err;
    ck_assert_msg(ck_run_case_ex(b, &bc.g, CK_F16, &o, &r, &err) == CK_OK, "%s", err.msg);
    *worst = 0.0;
    for (int k = 0; k < r.n_tensors; k++)
        if (r.tensors[k].m.max_abs > *worst)
            *worst = r.tensors[k].m.max_abs;
    ck_verdict v = r.verdict;
    ck_result_free(&r);
    tu_free_built(&bc);
    return v;
}

START_TEST(two_segments_that_diverge_only_together_are_one_culprit_set)
{
    ck_backend *b = tu_cpu_backend();
    static const char *const seg_a = "[[\"a_lin\", \"a_act\"]]", *const seg_b = "[[\"b_lin\", \"b_act\"]]",
                             *const both = "[[\"a_lin\", \"a_act\"], [\"b_lin\", \"b_act\"]]";
    /* the error each recomputation makes, measured: the same for either branch, twice it
     * for both */
    double ea, eb, e2;
    ck_assert_int_eq(run_together(b, seg_a, 1.0, &ea), CK_VERDICT_CLOSE);
    ck_assert_int_eq(run_together(b, seg_b, 1.0, &eb), CK_VERDICT_CLOSE);
    ck_assert_int_eq(run_together(b, both, 1.0, &e2), CK_VERDICT_CLOSE);
    ck_assert_msg(ea > 0.0 && ea == eb && e2 > 1.9 * ea,
                  "the branches' errors: a %g, b %g, both %g (want a == b > 0, both ~2a)", ea, eb,
                  e2);
    /* at 1.5 times one branch's error: each alone within tolerance, both outside */
    double atol = 1.5 * ea, w;
    ck_assert_int_eq(run_together(b, seg_a, atol, &w), CK_VERDICT_CLOSE);
    ck_assert_int_eq(run_together(b, seg_b, atol, &w), CK_VERDICT_CLOSE);
    ck_assert_int_eq(run_together(b, both, atol, &w), CK_VERDICT_MISMATCH);

    tu_built_case bc;
    build_together(&bc, both, atol);
    ck_case_run_opts o = {.precision_check = CK_PRECISION_CHECK_OFF};
    ck_result r;
    ck_error err;
    ck_assert_msg(ck_run_case_ex(b, &bc.g, CK_F16, &o, &r, &err) == CK_OK, "%s", err.msg);
    ck_bisect_opts bo = {.noise_floor = true, .localise = true};
    ck_assert_msg(ck_bisect(b, &bc.g, CK_F16, &bo, &r, &err) == CK_OK, "%s", err.msg);
    const ck_bisect_result *br = r.bisect;
    ck_assert(br->searched);
    ck_assert_int_eq(br->n_segments, 2);
    /* one set of both segments: neither is blamed alone, and it is not "no segment" */
    ck_assert_int_eq(br->n_culprit_sets, 1);
    ck_assert_msg(br->culprit[0] && br->culprit[1] && br->culprit_set[0] == 0 &&
                      br->culprit_set[1] == 0,
                  "culprits %d %d, sets %d %d", br->culprit[0], br->culprit[1],
                  br->culprit_set[0], br->culprit_set[1]);
    ck_assert_int_eq(br->step, 0);
    if (!has_cause(&bc, br, CK_CAUSE_RECOMPUTE_DTYPE, "`a_lin`", "`b_lin`"))
        dump_causes(&bc, br);
    ck_assert(has_cause(&bc, br, CK_CAUSE_RECOMPUTE_DTYPE, "`a_lin`", "`b_lin`"));
    char *story = story_of(&r);
    ck_assert_msg(strstr(story, "the divergence needs segments 0 [a_lin\n      .. a_act], "
                                "1 [b_lin .. b_act]; no other segment diverges") != NULL ||
                      strstr(story, "the divergence needs segments 0 [a_lin .. a_act], 1 "
                                    "[b_lin .. b_act]") != NULL,
                  "%s", story);
    free(story);
    ck_result_free(&r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

Suite *suite_bisect(void)
{
    Suite *s = suite_create("bisect");
    TCase *tc = tcase_create("bisect");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, dropout_canary_is_bisected_to_the_dropout_and_its_mask);
    tcase_add_test(tc, batchnorm_canary_is_bisected_to_the_running_statistics);
    tcase_add_test(tc, identical_case_has_nothing_to_explain);
    tcase_add_test(tc, segment_search_finds_the_one_segment_at_fault);
    tcase_add_test(tc, segment_search_reports_every_segment_that_diverges_on_its_own);
    tcase_add_test(tc, every_batchnorm_updated_twice_is_named);
    tcase_add_test(tc, segment_search_stops_at_its_cap_and_says_so);
    tcase_add_test(tc, noise_floor_explains_the_whole_difference);
    tcase_add_test(tc, verify_recompute_catches_a_difference_gradients_miss);
    tcase_add_test(tc, two_segments_that_diverge_only_together_are_one_culprit_set);
    suite_add_tcase(s, tc);
    return s;
}
