/*
 * The engine end to end: segment planning, activation accounting, plain vs checkpointed
 * bitwise identity for every shipped case, every canary caught with the tensor that shows
 * it, RNG and batchnorm policies, and determinism of the report numbers.
 */
#include "harness/engine/memory_plan.h"
#include <check.h>
#include <math.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/verify/judge.h"
#include "harness/verify/run_case.h"
#include "backends/backend.h"
#include "backends/registry.h"
#include "harness/verify/gradcheck.h"
#include "harness/model/plan.h"
#include "harness/engine/train.h"
#include "harness/core/philox.h"
#include "harness/core/rng.h"
#include "harness/core/half.h"
#include "reports/report.h"
#include "tests/test_util.h"

/* ---------------------------------------------------------------------------------------
 * Helpers
 * --------------------------------------------------------------------------------------- */

static void run(tu_built_case *bc, ck_result *res)
{
    ck_backend *b = tu_cpu_backend();
    ck_error err;
    ck_status st = ck_run_case(b, &bc->g, CK_F32, res, &err);
    ck_assert_msg(st == CK_OK, "%s: %s", bc->cs.name, err.msg);
    b->destroy(b);
}

static const ck_tensor_result *find_tensor(const ck_result *r, const char *name,
                                           ck_tensor_kind kind, int step)
{
    for (int i = 0; i < r->n_tensors; i++)
        if (strcmp(r->tensors[i].name, name) == 0 && r->tensors[i].kind == kind &&
            r->tensors[i].step == step)
            return &r->tensors[i];
    return NULL;
}

static int layer_index(const ck_graph *g, const char *name)
{
    for (int i = 0; i < g->n; i++)
        if (strcmp(g->nodes[i].spec->name, name) == 0)
            return i;
    return -1;
}

/* ---------------------------------------------------------------------------------------
 * Planning
 * --------------------------------------------------------------------------------------- */

static const char *skip_case =
    "{\"name\": \"skip\", \"input\": {\"shape\": [2, 3, 8, 8]},"
    " \"layers\": ["
    "  {\"name\": \"c1\", \"op\": \"conv2d\", \"filters\": 4, \"kernel\": 3, \"padding\": \"same\"},"
    "  {\"name\": \"r1\", \"op\": \"relu\"},"
    "  {\"name\": \"c2\", \"op\": \"conv2d\", \"filters\": 4, \"kernel\": 3, \"padding\": \"same\"},"
    "  {\"name\": \"r2\", \"op\": \"relu\"},"
    "  {\"name\": \"sum\", \"op\": \"add\", \"inputs\": [\"r2\", \"r1\"]},"
    "  {\"name\": \"c3\", \"op\": \"conv2d\", \"filters\": 2, \"kernel\": 1}"
    " ],"
    " \"loss\": {\"op\": \"mean\"},"
    " \"checkpoint\": {\"segments\": [[\"c1\", \"c2\"], [\"r2\", \"sum\"]]}}";

START_TEST(plan_keeps_outputs_that_cross_a_segment_boundary)
{
    tu_built_case bc;
    tu_build_text(&bc, skip_case);
    ck_plan p;
    ck_error err;
    ck_assert_msg(ck_plan_build(&bc.g, &p, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_eq(p.n_segments, 2);
    /* c1 feeds r1 only (inside): dropped. r1 feeds c2 (inside) and sum (outside): kept.
     * c2 is the segment's output: kept. r2 feeds sum (inside): dropped. sum feeds c3: kept. */
    ck_assert(p.dropped[0]);
    ck_assert(!p.dropped[1]);
    ck_assert(!p.dropped[2]);
    ck_assert(p.dropped[3]);
    ck_assert(!p.dropped[4]);
    ck_assert(!p.dropped[5]);
    ck_assert_int_eq(p.segment_of[5], -1);
    ck_assert_int_eq(p.n_dropped, 2);
    ck_plan_free(&p);

    ck_result r;
    run(&bc, &r);
    ck_assert_msg(r.verdict == CK_VERDICT_IDENTICAL, "skip across segments: verdict %s",
                  ck_verdict_name(r.verdict));
    ck_assert_int_eq(r.ckpt.recomputed_layers, 5);
    ck_result_free(&r);
    tu_free_built(&bc);
}
END_TEST

START_TEST(plan_every_and_sqrt_split_evenly)
{
    static const char *fmt =
        "{\"name\": \"chain\", \"input\": {\"shape\": [2, 4]}, \"layers\": ["
        "{\"name\": \"l0\", \"op\": \"linear\", \"units\": 4}, {\"name\": \"a0\", \"op\": \"tanh\"},"
        "{\"name\": \"l1\", \"op\": \"linear\", \"units\": 4}, {\"name\": \"a1\", \"op\": \"tanh\"},"
        "{\"name\": \"l2\", \"op\": \"linear\", \"units\": 4}, {\"name\": \"a2\", \"op\": \"tanh\"},"
        "{\"name\": \"l3\", \"op\": \"linear\", \"units\": 4}], %s}";
    char text[2048];
    struct {
        const char *desc, *ckpt;
        int n;
        int seg[4][2];
    } rows[] = {
        {"every 3", "\"checkpoint\": {\"every\": 3}", 3, {{0, 2}, {3, 5}, {6, 6}}},
        {"sqrt of 7 = 3 segments", "\"checkpoint\": {\"policy\": \"sqrt\"}", 3, {{0, 1}, {2, 3}, {4, 6}}},
        {"default is sqrt", "\"seed\": 1", 3, {{0, 1}, {2, 3}, {4, 6}}},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        snprintf(text, sizeof text, fmt, rows[r].ckpt);
        tu_built_case bc;
        tu_build_text(&bc, text);
        ck_plan p;
        ck_error err;
        ck_assert_msg(ck_plan_build(&bc.g, &p, &err) == CK_OK, "%s: %s", rows[r].desc, err.msg);
        ck_assert_msg(p.n_segments == rows[r].n, "%s: %d segments", rows[r].desc, p.n_segments);
        for (int s = 0; s < p.n_segments; s++)
            ck_assert_msg(p.segments[s].first == rows[r].seg[s][0] &&
                              p.segments[s].last == rows[r].seg[s][1],
                          "%s: segment %d is [%d, %d]", rows[r].desc, s, p.segments[s].first,
                          p.segments[s].last);
        ck_plan_free(&p);
        tu_free_built(&bc);
    }
}
END_TEST

/* ---------------------------------------------------------------------------------------
 * Activation accounting, computed by hand
 * --------------------------------------------------------------------------------------- */

START_TEST(peak_activation_bytes_match_a_hand_count)
{
    /* input (4, 8) -> l0 linear 16 -> r0 relu -> l1 linear 16 -> r1 relu -> l2 linear 2, fp32:
     * every hidden output and its gradient is 256 B, l2's output and gradient 32 B. Kept for
     * backward: what a backward reads (liveness.h): linear reads its input, relu its output,
     * so each relu runs in place in its linear's buffer and l0, l1 are never stored twice.
     * Each relu's backward is fused into its consumer's (executor.c, relu_fuse_source):
     * l2's backward writes dl1 (dr1 with r1's mask applied) over r1's buffer once dW2 has
     * read r1, and l1's writes dl0 over r0's, so no relu's output gradient is a tensor.
     * plain: forward r0 (in l0's buffer) 256, r1 (in l1's) 512, l2 544; loss gradient 576
     *   (peak), l2 freed (nothing reads it) 544; backward l2, dl1 over r1 -> 544, frees dl2
     *   -> 512; backward r1 done; backward l1, dl0 over r0 -> 512, frees dl1 -> 256; ... -> 0.
     * checkpointed, segment [l0, l1]: r0 freed after l1's forward (recomputed), forward
     *   288 (r1, l2); loss gradient 320, l2 freed -> 288; backward l2, dl1 over r1 -> 256;
     *   recompute l0/r0 512, l1 768 (peak) and freed (no backward reads it) -> 512; backward
     *   l1, dl0 over r0 -> 512; ... -> 0. */
    static const char *text =
        "{\"name\": \"tiny\", \"input\": {\"shape\": [4, 8]}, \"layers\": ["
        "{\"name\": \"l0\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"r0\", \"op\": \"relu\"},"
        "{\"name\": \"l1\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"r1\", \"op\": \"relu\"},"
        "{\"name\": \"l2\", \"op\": \"linear\", \"units\": 2}],"
        "\"checkpoint\": {\"segments\": [[\"l0\", \"l1\"]]}}";
    tu_built_case bc;
    tu_build_text(&bc, text);
    ck_result r;
    run(&bc, &r);
    ck_assert_int_eq(r.plain.peak_activation_bytes, 576);
    ck_assert_int_eq(r.ckpt.peak_activation_bytes, 768);
    ck_assert_int_eq(r.ckpt.recomputed_layers, 3);
    ck_assert_int_eq(r.plain.recomputed_layers, 0);
    ck_assert(r.verdict == CK_VERDICT_IDENTICAL);
    ck_result_free(&r);
    tu_free_built(&bc);
}
END_TEST


START_TEST(residual_add_hands_its_gradient_buffer_to_both_inputs)
{
    /* input (4, 8) -> l0 linear 16 -> f1 linear 16 -> f2 linear 16 -> res add(l0, f2) ->
     * head linear 2, fp32: hidden tensors 256 B, head's 32 B. res passes dy unchanged to
     * l0 and f2; f2 has no other consumer and l0's other consumer (f1) runs its backward
     * after f2's, so both gradients are dres's own buffer (liveness.h: add_shares_gradient),
 * made +0 + dres by add's kernel (ck_op_grads.din0_fresh).
     * A linear's backward writes its input's gradient over its input's buffer when the
     * input has no gradient yet and nothing later reads it (ck_backward_dx_over_input).
     * plain: forward l0 256, f1 512, f2 768, res in f2's buffer, head 800; loss gradient
     *   832 (peak), head freed 800; backward head, dres over res's buffer -> 800 (a buffer
     *   of its own would make 1056), dhead freed 768; backward res: dl0 = df2 = dres's
     *   buffer, 768 (two new gradients would make 1280); backward f2, df1 over f1's buffer
     *   768; backward f1 adds into dl0 (which exists already) ... -> 0.
     * checkpointed, segment [f1, f2]: forward 544 (f1 dropped); loss gradient, head freed
     *   544; backward head, dres over res -> 512; backward res shares: 512; recompute f1,
     *   f2 1024 (peak), f2 freed 768; backward f2, df1 over f1 768; ... -> 0. */
    static const char *text =
        "{\"name\": \"residual\", \"input\": {\"shape\": [4, 8]}, \"layers\": ["
        "{\"name\": \"l0\", \"op\": \"linear\", \"units\": 16},"
        "{\"name\": \"f1\", \"op\": \"linear\", \"units\": 16},"
        "{\"name\": \"f2\", \"op\": \"linear\", \"units\": 16},"
        "{\"name\": \"res\", \"op\": \"add\", \"inputs\": [\"l0\", \"f2\"]},"
        "{\"name\": \"head\", \"op\": \"linear\", \"units\": 2}],"
        "\"checkpoint\": {\"segments\": [[\"f1\", \"f2\"]]}, \"train\": {\"steps\": 2}}";
    tu_built_case bc;
    tu_build_text(&bc, text);
    ck_result r;
    run(&bc, &r);
    ck_assert_int_eq(r.plain.peak_activation_bytes, 832);
    ck_assert_int_eq(r.ckpt.peak_activation_bytes, 1024);
    ck_assert(r.verdict == CK_VERDICT_IDENTICAL);
    ck_result_free(&r);
    tu_free_built(&bc);
}
END_TEST

START_TEST(chained_adds_share_a_gradient_buffer_only_between_two_layers)
{
    /* input (2, 4, 6) -> fc1, fc2, fc3 linear 5 (each reads the input), s = fc1 + fc2,
     * t = s + fc3, mean loss, fp32: every hidden tensor 2*4*5*4 = 160 B. t hands dt's
     * buffer to s and fc3; s's gradient is then that shared buffer, so s must not hand it
     * on: doing so made one buffer of four owners, freed by fc3's backward while fc1's and
     * fc2's still read it ("free(): invalid pointer"; ASan: use after free). s gives fc1 and
     * fc2 one new buffer between them. The peaks are the forward's three linear outputs
     * (plain 480 B) and, checkpointed, the recomputed segment beside fc3's output (640 B);
     * `plan` predicts both. */
    static const char *text =
        "{\"name\": \"adds\", \"input\": {\"shape\": [2, 4, 6]}, \"layers\": ["
        "{\"name\": \"fc1\", \"op\": \"linear\", \"inputs\": \"input\", \"units\": 5},"
        "{\"name\": \"fc2\", \"op\": \"linear\", \"inputs\": \"input\", \"units\": 5},"
        "{\"name\": \"fc3\", \"op\": \"linear\", \"inputs\": \"input\", \"units\": 5},"
        "{\"name\": \"s\", \"op\": \"add\", \"inputs\": [\"fc1\", \"fc2\"]},"
        "{\"name\": \"t\", \"op\": \"add\", \"inputs\": [\"s\", \"fc3\"]}],"
        "\"loss\": {\"op\": \"mean\"}, \"checkpoint\": {\"segments\": [[\"fc1\", \"s\"]]},"
        "\"train\": {\"steps\": 2}}";
    tu_built_case bc;
    tu_build_text(&bc, text);
    ck_result r;
    run(&bc, &r);
    ck_assert(r.verdict == CK_VERDICT_IDENTICAL);
    ck_assert_int_eq(r.plain.peak_activation_bytes, 480);
    ck_assert_int_eq(r.ckpt.peak_activation_bytes, 640);
    ck_result_free(&r);
    tu_free_built(&bc);
}
END_TEST

START_TEST(norm_statistics_dropped_inside_a_segment_are_freed_before_the_peak)
{
    /* input (4, 8) -> l0 linear 16 -> ln layernorm -> l1 linear 16 -> wide linear 64 ->
     * act relu -> head linear 2, fp32, segment [l0, l1]: l0 and ln are dropped after the
     * segment's forward, and so are ln's saved statistics (mean and invstd per sample,
     * 2 x 4 floats = 32 B). Outputs and gradients: l0, ln, l1 256 B; wide, act 1024 B;
     * head 32 B. The peak comes after the segment, before its recomputation, so statistics
     * kept alive by mistake would raise it.
     * Relu runs in place in wide's buffer (linear reads its input, relu its output).
     * Act's backward is fused into head's (executor.c, relu_fuse_source): head's backward
     * writes dwide (dact with act's mask applied) over act's buffer once dW has read it.
     * checkpointed: forward l0 256, ln 256 + 32 -> 544, l0 freed (recomputed) 288, l1 544,
     *   ln and its statistics freed -> 256, wide 1280 (act in place), head 1312; loss
     *   gradient 1344 (peak), head freed -> 1312; backward head, dwide over act -> 1312,
     *   frees dhead -> 1280; backward wide, dl1 over l1 (its last outside reader) -> 1280,
     *   frees dwide -> 256; recompute l0, ln + statistics -> 800 (l1 recomputed and freed);
     *   backward l1 + dln 1056 -> 544; backward ln + dl0 800; ... -> 0.
     * plain: forward 1856 (ln's statistics kept: its backward reads them), loss gradient
     *   1888 (peak), head freed -> 1856; backward head, dwide over act -> 1856. */
    static const char *text =
        "{\"name\": \"norm_peak\", \"input\": {\"shape\": [4, 8]}, \"layers\": ["
        "{\"name\": \"l0\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"ln\", \"op\": \"layernorm\"},"
        "{\"name\": \"l1\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"wide\", \"op\": \"linear\", \"units\": 64},"
        "{\"name\": \"act\", \"op\": \"relu\"}, {\"name\": \"head\", \"op\": \"linear\", \"units\": 2}],"
        "\"checkpoint\": {\"segments\": [[\"l0\", \"l1\"]]}, \"train\": {\"steps\": 1}}";
    tu_built_case bc;
    tu_build_text(&bc, text);
    ck_result r;
    run(&bc, &r);
    ck_assert_int_eq(r.plain.peak_activation_bytes, 1888);
    ck_assert_int_eq(r.ckpt.peak_activation_bytes, 1344);
    ck_assert_int_eq(r.ckpt.recomputed_layers, 3);
    ck_assert(r.verdict == CK_VERDICT_IDENTICAL);
    ck_result_free(&r);
    tu_free_built(&bc);
}
END_TEST

/* ---------------------------------------------------------------------------------------
 * The live-bytes trace (alloc.h)
 * --------------------------------------------------------------------------------------- */

static const char *tiny_case =
    "{\"name\": \"tiny\", \"input\": {\"shape\": [4, 8]}, \"layers\": ["
    "{\"name\": \"l0\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"r0\", \"op\": \"relu\"},"
    "{\"name\": \"l1\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"r1\", \"op\": \"relu\"},"
    "{\"name\": \"l2\", \"op\": \"linear\", \"units\": 2}],"
    "\"checkpoint\": {\"segments\": [[\"l0\", \"l1\"]]}, \"train\": {\"steps\": 1}}";

/* Trains the tiny case once (plan NULL = plain) with a trace of `cap` events. */
static void trace_tiny(bool checkpointed, ck_alloc_event *ev, int cap, ck_alloc_trace *t)
{
    tu_built_case bc;
    tu_build_text(&bc, tiny_case);
    ck_plan plan;
    ck_error err;
    ck_assert_msg(ck_plan_build(&bc.g, &plan, &err) == CK_OK, "%s", err.msg);
    ck_alloc_trace_init(t, ev, cap);
    ck_run_hooks hooks = {.event_log = t};
    ck_backend *b = tu_cpu_backend();
    ck_record rec;
    ck_status st = ck_train(b, &bc.g, checkpointed ? &plan : NULL, CK_F32, &hooks, &rec, &err);
    ck_assert_msg(st == CK_OK, "%s", err.msg);
    ck_assert_int_eq(rec.peak_activation_bytes, checkpointed ? 768 : 576);
    ck_record_free(&rec);
    b->destroy(b);
    ck_plan_free(&plan);
    tu_free_built(&bc);
}

/* The index of the n-th (0-based) mark `tag`, or -1. */
static int find_mark(const ck_alloc_trace *t, const char *tag, int nth)
{
    for (int i = 0; i < t->n; i++)
        if (t->events[i].kind == CK_ALLOC_EV_MARK && strcmp(t->events[i].tag, tag) == 0 &&
            nth-- == 0)
            return i;
    return -1;
}

static int64_t max_live(const ck_alloc_trace *t, int from, int to)
{
    int64_t m = 0;
    for (int i = from; i < to; i++)
        if (t->events[i].live_bytes > m)
            m = t->events[i].live_bytes;
    return m;
}

START_TEST(live_bytes_trace_shows_the_forward_peak_and_the_recomputation)
{
    /* the hand count of peak_activation_bytes_match_a_hand_count, event by event */
    static ck_alloc_event ev[256];
    ck_alloc_trace t;
    trace_tiny(true, ev, 256, &t);
    ck_assert_int_eq(t.lost, 0);
    int fwd = find_mark(&t, CK_MARK_FORWARD_END, 0);
    int rec = find_mark(&t, CK_MARK_RECOMPUTE_END, 0);
    int end = find_mark(&t, CK_MARK_STEP_END, 0);
    ck_assert_msg(fwd > 0 && rec > fwd && end > rec, "marks at %d, %d, %d", fwd, rec, end);
    ck_assert_int_eq(find_mark(&t, CK_MARK_RECOMPUTE_END, 1), -1); /* one segment */
    /* forward: l0 256 (r0 runs in its buffer), l1 512 (the forward peak), r0 freed after
     * its last consumer (the segment recomputes it) -> 256, r1 in l1's buffer, l2 288 */
    ck_assert_str_eq(t.events[0].tag, "l0:out");
    ck_assert_int_eq(t.events[0].kind, CK_ALLOC_EV_ALLOC);
    ck_assert_int_eq(t.events[0].bytes, 256);
    ck_assert_int_eq(max_live(&t, 0, fwd), 512);
    ck_assert_int_eq(t.events[1].live_bytes, 512);
    ck_assert_str_eq(t.events[2].tag, "r0:out");
    ck_assert_int_eq(t.events[2].kind, CK_ALLOC_EV_FREE);
    ck_assert_int_eq(t.events[2].live_bytes, 256);
    ck_assert_int_eq(t.events[fwd].live_bytes, 288);
    /* up to the recomputation's end memory never went above 768 (l1 recomputed beside r0
     * and dl1; l2's backward wrote dl1 over r1's buffer, so it is not the peak); the
     * recomputation makes l0/r0 and l1 again and frees l1 (no backward reads it): r0 and
     * dl1 are live, 512; l1's backward writes dl0 over r0 and allocates nothing */
    ck_assert_int_eq(max_live(&t, fwd, rec), 768);
    ck_assert_int_eq(t.events[rec].live_bytes, 512);
    ck_assert_str_eq(t.events[rec - 1].tag, "l1:out");
    ck_assert_int_eq(t.events[rec - 1].kind, CK_ALLOC_EV_FREE);
    ck_assert_int_eq(max_live(&t, rec, end), 512);
    ck_assert_int_eq(t.events[end].live_bytes, 0);
    for (int i = 0; i < t.n; i++)
        ck_assert_int_eq(t.events[i].index, i);

    /* plain: no recomputation; forward r0, r1 (each in its linear's buffer) and l2: 544 */
    trace_tiny(false, ev, 256, &t);
    fwd = find_mark(&t, CK_MARK_FORWARD_END, 0);
    ck_assert_int_eq(t.events[fwd].live_bytes, 544);
    ck_assert_int_eq(max_live(&t, 0, fwd), 544);
    ck_assert_int_eq(find_mark(&t, CK_MARK_RECOMPUTE_END, 0), -1);
}
END_TEST

START_TEST(live_bytes_trace_keeps_the_first_events_and_counts_the_rest)
{
    ck_alloc_event ev[4];
    ck_alloc_trace t;
    trace_tiny(true, ev, 4, &t);
    ck_assert_int_eq(t.n, 4);
    ck_assert_int_gt(t.lost, 10);
    ck_assert_str_eq(ev[0].tag, "l0:out");
    ck_assert_str_eq(ev[2].tag, "r0:out"); /* freed after its last consumer (recomputed) */
    ck_assert_int_eq(ev[2].kind, CK_ALLOC_EV_FREE);
    ck_assert_int_eq(ev[3].index, 3);
    ck_alloc_trace_init(&t, NULL, 8); /* no buffer: everything is counted as lost */
    ck_assert_int_eq(t.capacity, 0);
}
END_TEST

/* ---------------------------------------------------------------------------------------
 * Data: cross-entropy class targets
 * --------------------------------------------------------------------------------------- */

START_TEST(cross_entropy_targets_are_golden_for_a_fixed_seed)
{
    /* target element i is word i of the target stream (Philox block i / 4, word i % 4,
     * counter (block, layer 0xFFFFFFFF, purpose 3 << 24 | step), key = seed), mapped into
     * [0, 5) by multiply-shift (cases/README.md) */
    static const char *text =
        "{\"name\": \"ce\", \"seed\": 1234, \"input\": {\"shape\": [12, 3]}, \"layers\": ["
        "{\"name\": \"fc\", \"op\": \"linear\", \"units\": 5}], \"loss\": {\"op\": \"cross_entropy\"}}";
    static const int32_t golden[2][12] = {{0, 4, 1, 4, 3, 0, 3, 0, 4, 3, 3, 4},
                                          {0, 2, 3, 2, 0, 1, 1, 0, 4, 3, 3, 0}};
    tu_built_case bc;
    tu_build_text(&bc, text);
    ck_backend *b = tu_cpu_backend();
    for (int step = 0; step < 2; step++) {
        ck_tensor in, tg;
        ck_error err;
        ck_assert_msg(ck_make_data(b, &bc.g, CK_F32, step, &in, &tg, &err) == CK_OK, "%s",
                      err.msg);
        ck_assert_int_eq(tg.dtype, CK_I32);
        ck_assert_int_eq(ck_shape_numel(&tg.shape), 12);
        const int32_t *got = tg.data;
        for (int i = 0; i < 12; i++) {
            ck_philox_ctr c = {{(uint32_t)(i / 4), 0, 0xFFFFFFFFu,
                                ((uint32_t)CK_PURPOSE_TARGET << 24) | (uint32_t)step}};
            ck_philox_key k = {{1234u, 0u}};
            uint32_t word = ck_philox4x32_10(c, k).v[i % 4];
            int32_t want = (int32_t)(((uint64_t)word * 5u) >> 32);
            ck_assert_msg(got[i] == want && got[i] == golden[step][i],
                          "step %d target %d: %d, want %d (golden %d)", step, i, got[i], want,
                          golden[step][i]);
        }
        ck_free_data(b, &in, &tg);
    }
    b->destroy(b);
    tu_free_built(&bc);
}
END_TEST

/* ---------------------------------------------------------------------------------------
 * Shipped cases
 * --------------------------------------------------------------------------------------- */

static int list_cases(char names[][256], int max)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/cases", tu_root());
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < max) {
        size_t len = strlen(de->d_name);
        if (len > 5 && strcmp(de->d_name + len - 5, ".json") == 0)
            snprintf(names[n++], 256, "%s", de->d_name);
    }
    closedir(d);
    return n;
}

START_TEST(every_shipped_case_meets_its_expectation)
{
    char names[64][256];
    int n = list_cases(names, 64);
    ck_assert_int_ge(n, 8);
    int non_canary = 0;
    for (int i = 0; i < n; i++) {
        tu_built_case bc;
        tu_build_file(&bc, names[i]);
        ck_result r;
        run(&bc, &r);
        ck_assert_msg(r.pass, "%s: did not meet its expectation (verdict %s, saving %.3f)",
                      names[i], ck_verdict_name(r.verdict), r.memory_saving);
        if (bc.cs.expect == CK_EXPECT_IDENTICAL) {
            non_canary++;
            ck_assert_msg(r.verdict == CK_VERDICT_IDENTICAL && r.first_divergence == -1,
                          "%s: plain and checkpointed differ", names[i]);
            ck_assert_msg(r.ckpt.recomputed_layers > 0, "%s: nothing was recomputed", names[i]);
        }
        ck_result_free(&r);
        tu_free_built(&bc);
    }
    ck_assert_int_ge(non_canary, 5);
}
END_TEST

START_TEST(unet_checkpointing_lowers_measured_peak)
{
    tu_built_case bc;
    tu_build_file(&bc, "unet3d_bn.json");
    ck_result r;
    run(&bc, &r);
    ck_assert_int_gt(r.plain.peak_activation_bytes, 0);
    ck_assert_msg(r.ckpt.peak_activation_bytes < r.plain.peak_activation_bytes,
                  "checkpointed peak %lld not below plain %lld",
                  (long long)r.ckpt.peak_activation_bytes, (long long)r.plain.peak_activation_bytes);
    ck_assert(r.memory_met);
    ck_assert(r.memory_saving >= bc.cs.min_memory_saving);
    ck_result_free(&r);
    tu_free_built(&bc);
}
END_TEST

START_TEST(dropout_canary_is_caught_in_the_gradients_before_the_dropout)
{
    tu_built_case bc;
    tu_build_file(&bc, "canary_dropout_stateful.json");
    ck_assert(bc.cs.rng == CK_RNG_STATEFUL);
    ck_result r;
    run(&bc, &r);
    ck_assert(r.verdict == CK_VERDICT_MISMATCH);
    ck_assert(r.pass); /* expect: mismatch */
    /* the loss of step 0 comes from the original forward: identical */
    const ck_tensor_result *loss0 = find_tensor(&r, "loss", CK_KIND_LOSS, 0);
    ck_assert(loss0 && loss0->verdict == CK_VERDICT_IDENTICAL);
    /* the first divergence is a step-0 gradient of a layer upstream of a recomputed dropout
     * or inside its segment (whose recomputed inputs carry the new mask) */
    ck_assert_int_ge(r.first_divergence, 0);
    const ck_tensor_result *fd = &r.tensors[r.first_divergence];
    ck_assert_int_eq(fd->step, 0);
    ck_assert(fd->kind == CK_KIND_GRAD);
    int last_dropout = -1;
    for (int i = 0; i < bc.g.n; i++)
        if (bc.g.nodes[i].op.kind == CK_OP_DROPOUT)
            last_dropout = i;
    char layer[128];
    snprintf(layer, sizeof layer, "%s", fd->name);
    *strchr(layer, '.') = '\0';
    int li = layer_index(&bc.g, layer);
    int limit = last_dropout;
    for (int k = 0; k < r.n_segments; k++)
        if (r.segments[k].first <= last_dropout && last_dropout <= r.segments[k].last)
            limit = r.segments[k].last;
    ck_assert_msg(li >= 0 && li <= limit, "first divergence %s is not upstream of a dropout",
                  fd->name);
    ck_result_free(&r);
    tu_free_built(&bc);
}
END_TEST

START_TEST(dropout_under_stash_and_counter_is_identical)
{
    ck_rng_policy policies[] = {CK_RNG_STASH, CK_RNG_COUNTER};
    for (int k = 0; k < 2; k++) {
        tu_built_case bc;
        tu_build_file(&bc, "canary_dropout_stateful.json");
        bc.cs.rng = policies[k];
        ck_result r;
        run(&bc, &r);
        ck_assert_msg(r.verdict == CK_VERDICT_IDENTICAL, "rng %s: verdict %s",
                      ck_rng_policy_name(policies[k]), ck_verdict_name(r.verdict));
        ck_result_free(&r);
        tu_free_built(&bc);
    }
}
END_TEST

START_TEST(stash_replays_a_dropout_in_the_middle_of_a_segment)
{
    /* the stash is taken at the segment's entry: a dropout followed by more layers of the
     * same segment (here drop1 before l1, and two dropouts in the second segment) replays
     * its mask only if nothing was drawn between the entry and the stash */
    static const char *text =
        "{\"name\": \"stash_mid\", \"seed\": 7, \"input\": {\"shape\": [4, 8]}, \"layers\": ["
        "{\"name\": \"l0\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"drop0\", \"op\": \"dropout\", \"rate\": 0.5},"
        "{\"name\": \"l1\", \"op\": \"linear\", \"units\": 16}, {\"name\": \"drop1\", \"op\": \"dropout\", \"rate\": 0.5},"
        "{\"name\": \"drop2\", \"op\": \"dropout\", \"rate\": 0.25}, {\"name\": \"l2\", \"op\": \"linear\", \"units\": 2}],"
        "\"checkpoint\": {\"segments\": [[\"l0\", \"l1\"], [\"drop1\", \"l2\"]]},"
        "\"train\": {\"steps\": 2, \"optimizer\": \"sgd\", \"lr\": 0.1}}";
    ck_rng_policy policies[] = {CK_RNG_STASH, CK_RNG_STATEFUL};
    for (int k = 0; k < 2; k++) {
        tu_built_case bc;
        tu_build_text(&bc, text);
        bc.cs.rng = policies[k];
        ck_result r;
        run(&bc, &r);
        ck_verdict want = policies[k] == CK_RNG_STASH ? CK_VERDICT_IDENTICAL : CK_VERDICT_MISMATCH;
        ck_assert_msg(r.verdict == want, "rng %s: verdict %s", ck_rng_policy_name(policies[k]),
                      ck_verdict_name(r.verdict));
        ck_result_free(&r);
        tu_free_built(&bc);
    }
}
END_TEST

START_TEST(batchnorm_canary_shows_in_running_stats_not_gradients)
{
    tu_built_case bc;
    tu_build_file(&bc, "canary_bn_update.json");
    ck_assert(bc.cs.bn == CK_BN_UPDATE);
    ck_result r;
    run(&bc, &r);
    ck_assert(r.verdict == CK_VERDICT_MISMATCH);
    ck_assert(r.pass);
    const ck_tensor_result *fd = &r.tensors[r.first_divergence];
    ck_assert_msg(fd->kind == CK_KIND_BUFFER && fd->step == 0 &&
                      strstr(fd->name, ".running_mean") != NULL,
                  "first divergence is %s (%s)", fd->name, ck_tensor_kind_name(fd->kind));
    /* every step-0 gradient is bitwise identical: losses and gradients alone miss it */
    int bn_mismatch = 0;
    for (int i = 0; i < r.n_tensors; i++) {
        const ck_tensor_result *t = &r.tensors[i];
        if (t->step == 0 && (t->kind == CK_KIND_GRAD || t->kind == CK_KIND_LOSS))
            ck_assert_msg(t->verdict == CK_VERDICT_IDENTICAL, "step-0 %s differs", t->name);
        if (t->step == 0 && t->kind == CK_KIND_BUFFER && t->verdict == CK_VERDICT_MISMATCH)
            bn_mismatch++;
    }
    /* running_mean, running_var and num_batches_tracked of the recomputed batchnorm */
    ck_assert_int_ge(bn_mismatch, 3);
    char nbt[160];
    snprintf(nbt, sizeof nbt, "%.*s.num_batches_tracked", (int)(strchr(fd->name, '.') - fd->name),
             fd->name);
    const ck_tensor_result *t = find_tensor(&r, nbt, CK_KIND_BUFFER, 0);
    ck_assert_msg(t && t->verdict == CK_VERDICT_MISMATCH, "%s not flagged", nbt);
    ck_result_free(&r);
    tu_free_built(&bc);
}
END_TEST

START_TEST(batchnorm_under_skip_is_identical)
{
    tu_built_case bc;
    tu_build_file(&bc, "canary_bn_update.json");
    bc.cs.bn = CK_BN_SKIP;
    ck_result r;
    run(&bc, &r);
    ck_assert_msg(r.verdict == CK_VERDICT_IDENTICAL, "verdict %s", ck_verdict_name(r.verdict));
    ck_result_free(&r);
    tu_free_built(&bc);
}
END_TEST

START_TEST(no_saving_canary_fails_on_memory_alone)
{
    tu_built_case bc;
    tu_build_file(&bc, "canary_no_saving.json");
    ck_result r;
    run(&bc, &r);
    ck_assert(r.verdict == CK_VERDICT_IDENTICAL);
    ck_assert(!r.memory_met);
    ck_assert(r.memory_saving < bc.cs.min_memory_saving);
    ck_assert(r.pass); /* expect_memory: unmet */
    char msg[512];
    ck_report_memory_message(&r, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "requires at least") != NULL, "memory message: %s", msg);
    ck_result_free(&r);
    tu_free_built(&bc);
}
END_TEST

START_TEST(same_case_twice_gives_byte_identical_reports)
{
    tu_built_case bc;
    tu_build_file(&bc, "unet3d_bn.json");
    ck_result r1, r2;
    run(&bc, &r1);
    run(&bc, &r2);
    ck_report_meta meta = {.tool_version = "test", .case_path = "x", .include_wall_time = false};
    char *a = ck_report_json_string(&r1, &meta);
    char *b = ck_report_json_string(&r2, &meta);
    ck_assert(a && b);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    ck_result_free(&r1);
    ck_result_free(&r2);
    tu_free_built(&bc);
}
END_TEST

/* `plan` (memory_plan.h) predicts the measured peak exactly: every shipped case, plain and
 * checkpointed, in every dtype, against the peak its full training measures. */
START_TEST(predicted_peak_equals_the_measured_peak_on_every_shipped_case)
{
    char names[64][256];
    int n = list_cases(names, 64);
    ck_assert_int_gt(n, 10);
    ck_backend *b = tu_cpu_backend();
    const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16};
    ck_error err;
    for (int i = 0; i < n; i++) {
        tu_built_case bc;
        tu_build_file(&bc, names[i]);
        ck_plan plan;
        ck_assert_msg(ck_plan_build(&bc.g, &plan, &err) == CK_OK, "%s", err.msg);
        for (int d = 0; d < 3; d++) {
            for (int ck = 0; ck < 2; ck++) {
                const ck_plan *pl = ck ? &plan : NULL;
                ck_memory_prediction pred;
                ck_assert_msg(ck_predict_memory(&bc.g, pl, dts[d], &pred, &err) == CK_OK,
                              "%s: %s", names[i], err.msg);
                ck_record rec;
                ck_status st = ck_train(b, &bc.g, pl, dts[d], NULL, &rec, &err);
                ck_assert_msg(st == CK_OK, "%s: %s", names[i], err.msg);
                ck_assert_msg(pred.peak_bytes == rec.peak_activation_bytes && pred.peak_bytes > 0,
                              "%s %s %s: predicted %lld bytes, measured %lld", names[i],
                              ck_dtype_name(dts[d]), ck ? "checkpointed" : "plain",
                              (long long)pred.peak_bytes, (long long)rec.peak_activation_bytes);
                ck_assert_int_eq(pred.n_segments, ck ? plan.n_segments : 0);
                ck_record_free(&rec);
                ck_memory_prediction_free(&pred);
            }
        }
        ck_plan_free(&plan);
        tu_free_built(&bc);
    }
    b->destroy(b);
}
END_TEST

START_TEST(gradcheck_passes_for_every_shipped_case)
{
    char names[64][256];
    int n = list_cases(names, 64);
    ck_backend *b = tu_cpu_backend();
    ck_error err;
    ck_gradcheck_opts o;
    ck_gradcheck_opts_default(&o);
    o.max_samples = 16;
    for (int i = 0; i < n; i++) {
        tu_built_case bc;
        tu_build_file(&bc, names[i]);
        ck_gradcheck_entry *e = NULL;
        int ne = 0;
        ck_status st = ck_gradcheck_case(b, &bc.g, &o, &e, &ne, &err);
        ck_assert_msg(st == CK_OK, "%s: %s", names[i], err.msg);
        for (int k = 0; k < ne; k++)
            ck_assert_msg(e[k].failed == 0,
                          "%s: %s: %lld of %lld outside, worst analytic %.9g numeric %.9g",
                          names[i], e[k].name, (long long)e[k].failed, (long long)e[k].checked,
                          e[k].worst_analytic, e[k].worst_numeric);
        free(e);
        for (int l = 0; l < bc.g.n; l++) {
            ck_gradcheck_result res;
            st = ck_gradcheck_layer(b, &bc.g, l, &o, &res, &err);
            ck_assert_msg(st == CK_OK, "%s: %s", names[i], err.msg);
            for (int k = 0; k < res.n; k++)
                ck_assert_msg(res.e[k].failed == 0, "%s: layer %s: %s max rel %.3g", names[i],
                              bc.g.nodes[l].spec->name, res.e[k].name, res.e[k].max_rel_err);
        }
        tu_free_built(&bc);
    }
    b->destroy(b);
}
END_TEST

/* The precision judgement's calibration runs round every activation and activation gradient
 * on the backend (backend.h's calibration_round): no byte more moves through the host than
 * in the same fp32 run without calibration. */
static ck_status (*real_download)(ck_backend *, const ck_tensor *, void *, ck_error *);
static ck_status (*real_upload)(ck_backend *, ck_tensor *, const void *, ck_error *);
static int64_t host_bytes;

static ck_status counting_download(ck_backend *b, const ck_tensor *t, void *h, ck_error *e)
{
    host_bytes += (int64_t)ck_tensor_bytes(t);
    return real_download(b, t, h, e);
}

static ck_status counting_upload(ck_backend *b, ck_tensor *t, const void *h, ck_error *e)
{
    host_bytes += (int64_t)ck_tensor_bytes(t);
    return real_upload(b, t, h, e);
}

START_TEST(calibration_rounding_moves_no_tensor_through_the_host)
{
    tu_built_case bc;
    tu_build_file(&bc, "cnn_bn.json");
    ck_backend *b = NULL;
    ck_error err = {{0}};
    ck_assert(ck_backend_create("ref", NULL, &b, &err) == CK_OK);
    real_download = b->download;
    real_upload = b->upload;
    b->download = counting_download;
    b->upload = counting_upload;
    int64_t bytes[2];
    for (int cal = 0; cal < 2; cal++) {
        ck_run_hooks h = {.round_to = cal ? CK_F16 : CK_F32, .perturb_rel = cal ? 1e-3 : 0.0,
                          .perturb_seed = 5};
        ck_record rec;
        host_bytes = 0;
        ck_assert_msg(ck_train(b, &bc.g, NULL, CK_F32, &h, &rec, &err) == CK_OK, "%s", err.msg);
        bytes[cal] = host_bytes;
        ck_record_free(&rec);
    }
    ck_assert_msg(bytes[1] == bytes[0],
                  "a calibration run moved %lld bytes through the host, the plain fp32 run %lld",
                  (long long)bytes[1], (long long)bytes[0]);
    b->destroy(b);
    tu_free_built(&bc);
}
END_TEST

/* The activation scan (act_finite.h): NaN and Inf told apart in every activation dtype, the
 * first one's index kept; output gradients of a skipped step excused, outputs never. */
START_TEST(activation_scan_counts_nan_and_inf_per_dtype_and_excuses_skipped_gradients)
{
    int64_t nan, inf, first;
    bool first_nan;
    const uint32_t f32[] = {0x3f800000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f7fffffu};
    ck_count_nonfinite(CK_F32, 5, f32, &nan, &inf, &first, &first_nan);
    ck_assert(nan == 1 && inf == 2 && first == 1 && !first_nan);
    const uint16_t f16[] = {0x7bffu, 0x7e00u, 0xfc00u, 0x3c00u}; /* 65504, NaN, -Inf, 1 */
    ck_count_nonfinite(CK_F16, 4, f16, &nan, &inf, &first, &first_nan);
    ck_assert(nan == 1 && inf == 1 && first == 1 && first_nan);
    const uint16_t bf16[] = {0x7f7fu, 0x7f80u, 0x7fc1u}; /* max, Inf, NaN */
    ck_count_nonfinite(CK_BF16, 3, bf16, &nan, &inf, &first, &first_nan);
    ck_assert(nan == 1 && inf == 1 && first == 1 && !first_nan);
    const uint64_t f64[] = {0x3ff0000000000000ull, 0x7ff8000000000000ull};
    ck_count_nonfinite(CK_F64, 2, f64, &nan, &inf, &first, &first_nan);
    ck_assert(nan == 1 && inf == 0 && first == 1 && first_nan);
    ck_count_nonfinite(CK_F32, 1, f32, &nan, &inf, &first, &first_nan);
    ck_assert(nan == 0 && inf == 0 && first == -1);

    ck_act_finite f;
    ck_error err = {{0}};
    ck_assert(ck_act_finite_init(&f, 3, &err) == CK_OK);
    /* step 0: an Inf in layer 2's output gradient, the scaler skips: excused */
    ck_act_finite_add(&f, 2, 0, true, false, CK_F32, 5, f32);
    ck_act_finite_end_step(&f, true);
    ck_assert(f.total.nan + f.total.inf == 0 && f.total.excused == 3 && f.total.first.layer < 0);
    /* step 1: layer 1's output holds them (skipped or not, a forward value counts) */
    ck_act_finite_add(&f, 1, 1, false, false, CK_F16, 4, f16);
    ck_act_finite_add(&f, 2, 1, true, false, CK_F32, 5, f32);
    ck_act_finite_end_step(&f, true);
    ck_assert(f.total.nan == 1 && f.total.inf == 1 && f.total.layers == 1);
    ck_assert(f.total.first.layer == 1 && f.total.first.step == 1 && !f.total.first.backward &&
              f.total.first.index == 1 && f.total.first.nan);
    /* step 2: not skipped, so layer 2's output gradient counts too */
    ck_act_finite_add(&f, 2, 2, true, false, CK_F32, 5, f32);
    ck_act_finite_end_step(&f, false);
    ck_assert(f.total.nan == 2 && f.total.inf == 3 && f.total.layers == 2 && f.total.excused == 6);
    ck_assert(f.total.first.layer == 1);
    ck_act_finite_free(&f);
}
END_TEST


/* ---------------------------------------------------------------------------------------
 * Gradient buffers reused (dx over x, din0_fresh, shared add gradients, a concat's first
 * input's gradient inside the concat's): no bit changes
 * --------------------------------------------------------------------------------------- */

/* Hashes (FNV-1a) of every layer's complete output gradient, in backward order, with the
 * layer's index. */
typedef struct {
    ck_backend *b;
    uint64_t h[512];
    int layer[512];
    int n;
} grad_hashes;

static ck_status hash_output_gradient(void *user, const ck_exec_event_info *ev, ck_error *err)
{
    grad_hashes *gh = user;
    if (ev->ev != CK_EVENT_BACKWARD || gh->n >= 512)
        return CK_OK;
    size_t bytes = ck_tensor_bytes(ev->tensor);
    unsigned char *host = malloc(bytes ? bytes : 1);
    ck_assert(host != NULL);
    ck_status st = gh->b->download(gh->b, ev->tensor, host, err);
    uint64_t h = 1469598103934665603ull;
    for (size_t k = 0; st == CK_OK && k < bytes; k++)
        h = (h ^ host[k]) * 1099511628211ull;
    free(host);
    gh->layer[gh->n] = ev->layer;
    gh->h[gh->n++] = h;
    return st;
}

static int64_t train_hashing(const tu_built_case *bc, const ck_plan *plan, ck_dtype dt,
                             bool own, grad_hashes *gh, ck_record *rec)
{
    ck_backend *b = tu_cpu_backend();
    memset(gh, 0, sizeof *gh);
    gh->b = b;
    ck_run_hooks hooks = {.observer = hash_output_gradient, .observer_user = gh,
                          .own_gradient_buffers = own};
    ck_error err;
    ck_status st = ck_train(b, &bc->g, plan, dt, &hooks, rec, &err);
    ck_assert_msg(st == CK_OK, "%s", err.msg);
    b->destroy(b);
    return rec->peak_activation_bytes;
}

/* Every output gradient the run with reused buffers has, against the run with its own
 * buffers: the same bits, in the same order; the only ones missing are those of relus whose
 * backward was fused into their consumer's (their output gradient is never a tensor), and
 * the number of those is returned. */
static int compare_output_gradients(const tu_built_case *bc, const grad_hashes *mine,
                                    const grad_hashes *own, const char *run, ck_dtype dt)
{
    int k = 0, fused = 0;
    for (int o = 0; o < own->n; o++) {
        if (k < mine->n && mine->layer[k] == own->layer[o]) {
            ck_assert_msg(mine->h[k] == own->h[o], "%s %s: output gradient of %s differs", run,
                          ck_dtype_name(dt), bc->g.nodes[own->layer[o]].spec->name);
            k++;
            continue;
        }
        ck_assert_msg(bc->g.nodes[own->layer[o]].op.kind == CK_OP_RELU,
                      "%s %s: no output gradient of %s", run, ck_dtype_name(dt),
                      bc->g.nodes[own->layer[o]].spec->name);
        fused++;
    }
    ck_assert_int_eq(k, mine->n);
    return fused;
}

/* Trains bc plain and checkpointed in fp32, fp16 and bf16 with and without reused gradient
 * buffers: every output gradient present in both, every loss, gradient and parameter must
 * have the same bits; `fused` relus per run have no output gradient of their own. */
static void reuse_changes_no_bit(const char *text, int fused_relus, bool peak_below)
{
    tu_built_case bc;
    tu_build_text(&bc, text);
    ck_plan plan;
    ck_error err;
    ck_assert_msg(ck_plan_build(&bc.g, &plan, &err) == CK_OK, "%s", err.msg);
    static const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16};
    for (int d = 0; d < 3; d++)
        for (int ck = 0; ck < 2; ck++) {
            static grad_hashes mine, own;
            ck_record rm, ro;
            int64_t peak = train_hashing(&bc, ck ? &plan : NULL, dts[d], false, &mine, &rm);
            int64_t own_peak = train_hashing(&bc, ck ? &plan : NULL, dts[d], true, &own, &ro);
            const char *run = ck ? "checkpointed" : "plain";
            ck_assert_msg(peak_below && !ck ? peak < own_peak : peak <= own_peak,
                          "%s %s: peak %lld, %lld with own buffers", run,
                          ck_dtype_name(dts[d]), (long long)peak, (long long)own_peak);
            ck_assert_int_gt(mine.n, 10);
            int fused = compare_output_gradients(&bc, &mine, &own, run, dts[d]);
            /* two steps: each step fuses the same relus */
            ck_assert_msg(fused == 2 * fused_relus, "%s %s: %d relu backwards fused, want %d",
                          run, ck_dtype_name(dts[d]), fused, 2 * fused_relus);
            ck_assert_int_eq(rm.n, ro.n);
            for (int k = 0; k < rm.n; k++)
                ck_assert_msg(memcmp(rm.e[k].data, ro.e[k].data,
                                     (size_t)ck_shape_numel(&rm.e[k].shape) *
                                         ck_dtype_size(rm.e[k].dtype)) == 0,
                              "%s %s: %s differs", run, ck_dtype_name(dts[d]), rm.e[k].name);
            for (int k = 0; k < rm.steps; k++)
                ck_assert(memcmp(&rm.losses[k], &ro.losses[k], sizeof(double)) == 0);
            ck_record_free(&rm);
            ck_record_free(&ro);
        }
    ck_plan_free(&plan);
    tu_free_built(&bc);
}

START_TEST(reused_gradient_buffers_change_no_bit)
{
    /* input (4, 2, 8, 8): c1 conv 4 + relu, c2 conv 4, cat(c2, r1) 8 channels (c2's
     * gradient moves inside cat's: 4 x 256 floats of r1's part, 4 KiB, below it), up
     * conv_transpose 2 x 2 stride 2 (its input cat dies with its backward: dx over x),
     * c3 conv 4 on up + r3 relu + c4 conv (r3's backward fused into c4's), flatten, fc
     * linear 16 + gelu (tanh) + fc2 linear 16 + silu (fresh), res add(gelu, act) + rr relu +
     * head linear 2 (rr's backward fused into head's) + out relu (its backward fused into
     * the loss gradient). r1 feeds c2 and cat: its backward is not fused. Every layer's
     * output gradient, every loss, gradient and parameter must have the same bits with
     * every gradient in a buffer of its own. */
    static const char *text =
        "{\"name\": \"reuse\", \"input\": {\"shape\": [4, 2, 8, 8]}, \"layers\": ["
        "{\"name\": \"c1\", \"op\": \"conv2d\", \"filters\": 4, \"kernel\": 3, \"padding\": \"same\"},"
        "{\"name\": \"r1\", \"op\": \"relu\"},"
        "{\"name\": \"c2\", \"op\": \"conv2d\", \"filters\": 4, \"kernel\": 3, \"padding\": \"same\"},"
        "{\"name\": \"cat\", \"op\": \"concat\", \"inputs\": [\"c2\", \"r1\"]},"
        "{\"name\": \"up\", \"op\": \"conv_transpose2d\", \"filters\": 2, \"kernel\": 2, \"stride\": 2},"
        "{\"name\": \"c3\", \"op\": \"conv2d\", \"filters\": 2, \"kernel\": 3, \"stride\": 4, \"padding\": \"same\"},"
        "{\"name\": \"r3\", \"op\": \"relu\"},"
        "{\"name\": \"c4\", \"op\": \"conv2d\", \"filters\": 2, \"kernel\": 3, \"padding\": \"same\"},"
        "{\"name\": \"flat\", \"op\": \"flatten\"},"
        "{\"name\": \"fc\", \"op\": \"linear\", \"units\": 16},"
        "{\"name\": \"gelu\", \"op\": \"gelu\", \"approximate\": \"tanh\"},"
        "{\"name\": \"fc2\", \"op\": \"linear\", \"units\": 16},"
        "{\"name\": \"act\", \"op\": \"silu\"},"
        "{\"name\": \"res\", \"op\": \"add\", \"inputs\": [\"gelu\", \"act\"]},"
        "{\"name\": \"rr\", \"op\": \"relu\"},"
        "{\"name\": \"head\", \"op\": \"linear\", \"units\": 2},"
        "{\"name\": \"out\", \"op\": \"relu\"}],"
        "\"loss\": {\"op\": \"mean\"},"
        "\"checkpoint\": {\"segments\": [[\"c2\", \"up\"], [\"r3\", \"c4\"], [\"fc2\", \"rr\"]]},"
        "\"train\": {\"steps\": 2}}";
    /* the plain run's peak is at cat's backward, which no longer holds cat's input
     * gradients beside its output gradient; the checkpointed one's is elsewhere */
    reuse_changes_no_bit(text, 3, true);
}
END_TEST

START_TEST(relu_backward_is_fused_only_where_nothing_else_reads)
{
    /* Where a relu's backward must stay its own: r1's output feeds two layers (l2 and the
     * add), r2's input feeds two (r2 and the add's other side through l3); a segment
     * boundary between l4's relu and its consumer (r4 kept, read from outside its segment:
     * fused, its segment recomputes it), and an mse loss on a relu (fused). */
    static const char *text =
        "{\"name\": \"no_fuse\", \"input\": {\"shape\": [3, 12]}, \"layers\": ["
        "{\"name\": \"l1\", \"op\": \"linear\", \"units\": 12},"
        "{\"name\": \"r1\", \"op\": \"relu\"},"
        "{\"name\": \"l2\", \"op\": \"linear\", \"units\": 12},"
        "{\"name\": \"a1\", \"op\": \"add\", \"inputs\": [\"l2\", \"r1\"]},"
        "{\"name\": \"l3\", \"op\": \"linear\", \"units\": 12},"
        "{\"name\": \"r2\", \"op\": \"relu\"},"
        "{\"name\": \"l5\", \"op\": \"linear\", \"units\": 12, \"inputs\": [\"l3\"]},"
        "{\"name\": \"a2\", \"op\": \"add\", \"inputs\": [\"r2\", \"l5\"]},"
        "{\"name\": \"l4\", \"op\": \"linear\", \"units\": 12},"
        "{\"name\": \"r4\", \"op\": \"relu\"},"
        "{\"name\": \"l6\", \"op\": \"linear\", \"units\": 6},"
        "{\"name\": \"r6\", \"op\": \"relu\"}],"
        "\"loss\": {\"op\": \"mse\"},"
        "\"checkpoint\": {\"segments\": [[\"l4\", \"r4\"]]},"
        "\"train\": {\"steps\": 2}}";
    /* fused: r4 (into l6) and r6 (into the loss); not r1 (two consumers), not r2 (its
     * input l3 has two consumers) */
    reuse_changes_no_bit(text, 2, false);
}
END_TEST

/* The forward move of a concat's first input from the end of the concat's buffer into
 * place (ck_exec_concat_forward_move) plus the copy of the other input, against the concat
 * kernel's forward, on the cpu and ref backends in fp32, fp16 and bf16, with -0, NaN,
 * infinities and subnormals, over 3 rows whose parts move in 1, 1 and 2 pieces. */
START_TEST(concat_forward_move_has_the_concat_kernels_bits)
{
    static const double vals[] = {-0.0, 0.0, 1.5, -2.25, 1e-40, -1e-42, 6e-8, -3e-5,
                                  INFINITY, -INFINITY, NAN, 65504.0, 1e30, -7.0, 0.1, -0.3};
    enum { A = 16, B = 4, S = A + B, ROWS = 3 }; /* y (3, 20): input 0 (3, 16), 1 (3, 4) */
    static const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16};
    ck_error err;
    ck_backend *bes[2] = {tu_cpu_backend(), NULL};
    ck_assert_msg(ck_backend_create("ref", NULL, &bes[1], &err) == CK_OK, "%s", err.msg);
    for (int bi = 0; bi < 2; bi++)
        for (int d = 0; d < 3; d++) {
            ck_backend *b = bes[bi];
            const ck_dtype dt = dts[d];
            const size_t es = ck_dtype_size(dt);
            double v0[ROWS * A], v1[ROWS * B];
            for (int k = 0; k < ROWS * A; k++)
                v0[k] = vals[k % 16] * (k % 3 ? 1.0 : -1.0);
            for (int k = 0; k < ROWS * B; k++)
                v1[k] = vals[(k + 5) % 16];
            unsigned char h0[ROWS * A * 8], h1[ROWS * B * 8], want[ROWS * S * 8], have[ROWS * S * 8];
            ck_convert_from_f64(dt, h0, v0, ROWS * A);
            ck_convert_from_f64(dt, h1, v1, ROWS * B);
            ck_tensor y = {"y", dt, {2, {ROWS, S}}, NULL}, moved = {"moved", dt, {2, {ROWS, S}}, NULL};
            ck_tensor x0 = {"x0", dt, {2, {ROWS, A}}, NULL}, x1 = {"x1", dt, {2, {ROWS, B}}, NULL};
            ck_assert(b->alloc(b, (size_t)(ROWS * S) * es, &y.data, &err) == CK_OK);
            ck_assert(b->alloc(b, (size_t)(ROWS * S) * es, &moved.data, &err) == CK_OK);
            ck_assert(b->alloc(b, (size_t)(ROWS * A) * es, &x0.data, &err) == CK_OK);
            ck_assert(b->alloc(b, (size_t)(ROWS * B) * es, &x1.data, &err) == CK_OK);
            ck_assert(b->upload(b, &x0, h0, &err) == CK_OK && b->upload(b, &x1, h1, &err) == CK_OK);
            ck_op_params op;
            ck_op_params_default(&op, CK_OP_CONCAT, 0);
            op.dim = 1;
            ck_op_io io = {.n_in = 2, .in = {&x0, &x1}, .out = &y};
            ck_fwd_args args;
            memset(&args, 0, sizeof args);
            ck_assert_msg(b->forward(b, &op, &args, &io, &err) == CK_OK, "%s", err.msg);
            /* input 0 written at the end of the buffer, then moved into place; input 1's
             * parts copied after each part (as the executor's concat_forward_inside does) */
            ck_tensor tail = {"tail", dt, {2, {ROWS, A}},
                              (char *)moved.data + (size_t)(ROWS * B) * es};
            ck_assert(b->upload(b, &tail, h0, &err) == CK_OK);
            ck_assert_msg(ck_exec_concat_forward_move(b, &moved, ROWS, A, S, &err) == CK_OK,
                          "%s", err.msg);
            for (int n = 0; n < ROWS; n++) {
                ck_tensor dst = {"dst", dt, {1, {B}}, (char *)moved.data + (size_t)(n * S + A) * es};
                ck_tensor src = {"src", dt, {1, {B}}, (char *)x1.data + (size_t)(n * B) * es};
                ck_assert(b->convert(b, &dst, &src, 1.0, false, &err) == CK_OK);
            }
            ck_assert(b->download(b, &y, want, &err) == CK_OK);
            ck_assert(b->download(b, &moved, have, &err) == CK_OK);
            ck_assert_msg(memcmp(want, have, (size_t)(ROWS * S) * es) == 0, "%s %s: bits differ",
                          b->name, ck_dtype_name(dt));
            b->free(b, y.data);
            b->free(b, moved.data);
            b->free(b, x0.data);
            b->free(b, x1.data);
        }
    bes[0]->destroy(bes[0]);
    bes[1]->destroy(bes[1]);
}
END_TEST

/* The move of a concat's first input's gradient inside the concat's output gradient
 * (ck_exec_concat_grad_move) against the concat kernel adding its part of dy to a zeroed
 * gradient, on the cpu and ref backends in fp32, fp16 and bf16, with -0, NaN, infinities
 * and subnormals, over 3 rows whose parts move in 4, 2 and 2 overlapping chunks. */
START_TEST(concat_gradient_move_has_the_concat_kernels_bits)
{
    static const double vals[] = {-0.0, 0.0, 1.5, -2.25, 1e-40, -1e-42, 6e-8, -3e-5,
                                  INFINITY, -INFINITY, NAN, 65504.0, 1e30, -7.0, 0.1, -0.3};
    enum { A = 16, B = 4, S = A + B, ROWS = 3 }; /* dy (3, 20): input 0 (3, 16), 1 (3, 4) */
    static const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16};
    ck_error err;
    ck_backend *bes[2] = {tu_cpu_backend(), NULL};
    ck_assert_msg(ck_backend_create("ref", NULL, &bes[1], &err) == CK_OK, "%s", err.msg);
    for (int bi = 0; bi < 2; bi++)
        for (int d = 0; d < 3; d++) {
            ck_backend *b = bes[bi];
            const ck_dtype dt = dts[d];
            const size_t es = ck_dtype_size(dt);
            double all[ROWS * S];
            for (int k = 0; k < ROWS * S; k++)
                all[k] = vals[k % 16] * (k % 3 ? 1.0 : -1.0);
            unsigned char host[ROWS * S * 8], want[ROWS * S * 8], have[ROWS * S * 8];
            ck_convert_from_f64(dt, host, all, ROWS * S);
            ck_tensor dy = {"dy", dt, {2, {ROWS, S}}, NULL};
            ck_tensor din0 = {"din0", dt, {2, {ROWS, A}}, NULL}, din1 = {"din1", dt, {2, {ROWS, B}}, NULL};
            ck_assert(b->alloc(b, (size_t)(ROWS * S) * es, &dy.data, &err) == CK_OK);
            ck_assert(b->alloc(b, (size_t)(ROWS * A) * es, &din0.data, &err) == CK_OK);
            ck_assert(b->alloc(b, (size_t)(ROWS * B) * es, &din1.data, &err) == CK_OK);
            ck_assert(b->upload(b, &dy, host, &err) == CK_OK);
            ck_assert(b->zero(b, &din0, &err) == CK_OK && b->zero(b, &din1, &err) == CK_OK);
            ck_op_params op;
            ck_op_params_default(&op, CK_OP_CONCAT, 0);
            op.dim = 1;
            ck_op_io io = {.n_in = 2, .in = {&din0, &din1}, .out = &dy};
            ck_op_grads g = {.dout = &dy, .din = {&din0, &din1}};
            ck_fwd_args args;
            memset(&args, 0, sizeof args);
            ck_assert_msg(b->backward(b, &op, &args, &io, &g, &err) == CK_OK, "%s", err.msg);
            ck_assert_msg(ck_exec_concat_grad_move(b, &dy, ROWS, A, S, &err) == CK_OK, "%s",
                          err.msg);
            ck_assert(b->download(b, &din0, want, &err) == CK_OK);
            ck_assert(b->download(b, &dy, have, &err) == CK_OK);
            ck_assert_msg(memcmp(want, have + (size_t)(ROWS * B) * es, (size_t)(ROWS * A) * es) == 0,
                          "%s %s: bits differ", b->name, ck_dtype_name(dt));
            b->free(b, dy.data);
            b->free(b, din0.data);
            b->free(b, din1.data);
        }
    bes[0]->destroy(bes[0]);
    bes[1]->destroy(bes[1]);
}
END_TEST

Suite *suite_executor(void)
{
    Suite *s = suite_create("executor");
    TCase *tc = tcase_create("plan");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, plan_keeps_outputs_that_cross_a_segment_boundary);
    tcase_add_test(tc, plan_every_and_sqrt_split_evenly);
    tcase_add_test(tc, peak_activation_bytes_match_a_hand_count);
    tcase_add_test(tc, norm_statistics_dropped_inside_a_segment_are_freed_before_the_peak);
    tcase_add_test(tc, residual_add_hands_its_gradient_buffer_to_both_inputs);
    tcase_add_test(tc, chained_adds_share_a_gradient_buffer_only_between_two_layers);
    tcase_add_test(tc, reused_gradient_buffers_change_no_bit);
    tcase_add_test(tc, relu_backward_is_fused_only_where_nothing_else_reads);
    tcase_add_test(tc, concat_gradient_move_has_the_concat_kernels_bits);
    tcase_add_test(tc, concat_forward_move_has_the_concat_kernels_bits);
    tcase_add_test(tc, live_bytes_trace_shows_the_forward_peak_and_the_recomputation);
    tcase_add_test(tc, live_bytes_trace_keeps_the_first_events_and_counts_the_rest);
    tcase_add_test(tc, cross_entropy_targets_are_golden_for_a_fixed_seed);
    tcase_add_test(tc, activation_scan_counts_nan_and_inf_per_dtype_and_excuses_skipped_gradients);
    suite_add_tcase(s, tc);

    tc = tcase_create("cases");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, every_shipped_case_meets_its_expectation);
    tcase_add_test(tc, unet_checkpointing_lowers_measured_peak);
    tcase_add_test(tc, dropout_canary_is_caught_in_the_gradients_before_the_dropout);
    tcase_add_test(tc, dropout_under_stash_and_counter_is_identical);
    tcase_add_test(tc, stash_replays_a_dropout_in_the_middle_of_a_segment);
    tcase_add_test(tc, batchnorm_canary_shows_in_running_stats_not_gradients);
    tcase_add_test(tc, batchnorm_under_skip_is_identical);
    tcase_add_test(tc, no_saving_canary_fails_on_memory_alone);
    tcase_add_test(tc, same_case_twice_gives_byte_identical_reports);
    tcase_add_test(tc, gradcheck_passes_for_every_shipped_case);
    tcase_add_test(tc, calibration_rounding_moves_no_tensor_through_the_host);
    tcase_add_test(tc, predicted_peak_equals_the_measured_peak_on_every_shipped_case);
    suite_add_tcase(s, tc);
    return s;
}
