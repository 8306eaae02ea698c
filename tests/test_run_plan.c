/*
 * The run plan and the typed result's wire encoding.
 *
 * Plan: the trainings it says it will run are the ones that run (counted by the one
 * training entry), for the default, --verify-recompute, --against, --precision-check off,
 * a tolerance override, a noise floor and --bisect on an identical and a mismatching case.
 * Progress: every training of a low-precision case (fp32 reference, calibration runs) is
 * named, and the fraction of the case's work counts them and never goes back.
 * Wire: a result encoded and decoded renders the same JSON report and text, byte for
 * byte, for plain, low-precision, bisected, cross-backend and recompute-checked runs; every
 * shortened, lengthened or altered encoding is refused with one line.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/registry.h"
#include "harness/verify/result_wire.h"
#include "harness/verify/run_plan.h"
#include "reports/report.h"
#include "tests/test_util.h"

static ck_backend *ref_backend(void)
{
    ck_backend *b = NULL;
    ck_error err;
    ck_assert_msg(ck_backend_create("ref", NULL, &b, &err) == CK_OK, "%s", err.msg);
    return b;
}

static void log_str(const ck_training_log *log, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < CK_TRAINING_KINDS && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s %d; ", ck_training_kind_name((ck_training_kind)i),
                              log->count[i]);
}

/* Plans and runs one case x dtype; the outcome is the caller's to free. */
static void plan_and_run(ck_backend *b, ck_backend *against, const tu_built_case *bc,
                         ck_dtype dtype, const ck_run_request *rq, ck_run_plan *p,
                         ck_run_outcome *oc)
{
    ck_error err;
    ck_run_plan_make(&bc->cs, dtype, rq, against != NULL, p);
    ck_assert_msg(ck_run_plan_fit(p, &bc->g, rq, "the limit is", &err) == CK_OK, "%s", err.msg);
    ck_assert_msg(ck_run_plan_execute(p, rq, b, against, &bc->g, NULL, NULL, oc, &err) == CK_OK,
                  "%s", err.msg);
}

static void assert_fixed_trainings_ran(const char *desc, const ck_run_plan *p,
                                       const ck_run_outcome *oc)
{
    char want[512], got[512];
    log_str(&p->fixed, want, sizeof want);
    log_str(&oc->log, got, sizeof got);
    ck_assert_msg(memcmp(&p->fixed, &oc->log, sizeof oc->log) == 0,
                  "%s: the plan said %s but %s ran", desc, want, got);
}

START_TEST(plan_says_which_trainings_run)
{
    ck_backend *b = tu_cpu_backend(), *ref = ref_backend();
    tu_built_case bc;
    tu_build_file(&bc, "mlp_dropout.json");
    static const struct {
        const char *desc;
        ck_dtype dtype;
        bool verify, against, precision_off, override;
        int plain, ckpt, fp32, calib, other, recompute;
    } rows[] = {
        {"fp32 default", CK_F32, false, false, false, false, 1, 1, 0, 0, 0, 0},
        {"fp16 default: fp32 reference and calibration", CK_F16, false, false, false, false,
         1, 1, 1, CK_PRECISION_CALIB_RUNS, 0, 0},
        {"bf16 --precision-check off: no fp32 run", CK_BF16, false, false, true, false,
         1, 1, 0, 0, 0, 0},
        {"fp16 --rtol: the reference without calibration", CK_F16, false, false, false, true,
         1, 1, 1, 0, 0, 0},
        {"fp32 --verify-recompute", CK_F32, true, false, false, false, 1, 1, 0, 0, 0, 1},
        {"fp32 --against ref: plain again here and on ref", CK_F32, false, true, false, false,
         2, 1, 0, 0, 1, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ck_run_request rq = {.verify_recompute = rows[i].verify};
        rq.run.precision_check = rows[i].precision_off ? CK_PRECISION_CHECK_OFF
                                                       : CK_PRECISION_CHECK_FAIL;
        if (rows[i].override)
            rq.run.precision_override = (ck_precision_override){.set = true, .rtol = 1e-3,
                                                                .atol = 1e-5, .rel_l2 = -1.0};
        ck_run_plan p;
        ck_run_outcome oc;
        plan_and_run(b, rows[i].against ? ref : NULL, &bc, rows[i].dtype, &rq, &p, &oc);
        assert_fixed_trainings_ran(rows[i].desc, &p, &oc);
        const ck_training_log *l = &oc.log;
        ck_assert_msg(l->count[CK_TRAINING_PLAIN] == rows[i].plain &&
                          l->count[CK_TRAINING_CHECKPOINTED] == rows[i].ckpt &&
                          l->count[CK_TRAINING_FP32_REFERENCE] == rows[i].fp32 &&
                          l->count[CK_TRAINING_CALIBRATION] == rows[i].calib &&
                          l->count[CK_TRAINING_OTHER_BACKEND] == rows[i].other &&
                          l->count[CK_TRAINING_RECOMPUTE_CHECK] == rows[i].recompute &&
                          l->count[CK_TRAINING_NOISE_FLOOR] == 0 &&
                          l->count[CK_TRAINING_BISECT] == 0,
                      "%s: unexpected trainings", rows[i].desc);
        ck_assert_msg(!oc.bisected && !oc.res.bisect, "%s: bisect ran", rows[i].desc);
        ck_assert_msg(oc.res.has_vs_fp32 == (rows[i].fp32 > 0), "%s: vs fp32", rows[i].desc);
        ck_assert_msg(oc.res.has_vs_backend == rows[i].against, "%s: vs backend", rows[i].desc);
        ck_assert_msg(oc.res.verified_recompute == rows[i].verify, "%s: verify", rows[i].desc);
        ck_result_free(&oc.res);
    }
    tu_free_built(&bc);
    ref->destroy(ref);
    b->destroy(b);
}
END_TEST

/* Every progress event of a case: which trainings it named and whether the fraction of
 * the case's work ever went back or past 1. */
typedef struct {
    char labels[8][32];
    int n_labels, events, n_runs;
    double last, first_ref;
    bool went_back;
} progress_seen;

static void record_progress(void *user, const ck_progress_info *in)
{
    progress_seen *ps = user;
    ps->events++;
    ps->n_runs = in->n_runs;
    if (in->fraction < ps->last || in->fraction > 1.0)
        ps->went_back = true;
    ps->last = in->fraction;
    int k = 0;
    while (k < ps->n_labels && strcmp(ps->labels[k], in->run_label) != 0)
        k++;
    if (k == ps->n_labels && k < 8) {
        snprintf(ps->labels[k], sizeof ps->labels[k], "%s", in->run_label);
        ps->n_labels++;
        if (strcmp(in->run_label, "fp32 reference") == 0)
            ps->first_ref = in->fraction;
    }
}

START_TEST(progress_names_the_reference_and_calibration_runs)
{
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_file(&bc, "cnn_bn.json");
    static const char *const want[] = {"plain", "checkpointed", "fp32 reference",
                                       "calibration 1/3", "calibration 2/3", "calibration 3/3"};
    for (int low = 0; low < 2; low++) {
        progress_seen ps = {.n_labels = 0};
        ck_case_run_opts ro = {.progress = record_progress, .progress_user = &ps};
        ck_result r;
        ck_error err;
        ck_assert_msg(ck_run_case_ex(b, &bc.g, low ? CK_F16 : CK_F32, &ro, &r, &err) == CK_OK,
                      "%s", err.msg);
        int n = low ? 6 : 2;
        ck_assert_msg(ps.n_labels == n && ps.n_runs == n, "%s: %d runs named, %d said",
                      low ? "fp16" : "fp32", ps.n_labels, ps.n_runs);
        for (int k = 0; k < n; k++)
            ck_assert_msg(strcmp(ps.labels[k], want[k]) == 0, "run %d named \"%s\", want \"%s\"",
                          k, ps.labels[k], want[k]);
        ck_assert_msg(!ps.went_back, "the fraction went back or past 1");
        /* the references take their share: the last event is the end of the last run */
        ck_assert_msg(ps.last > 0.99, "the case ends at fraction %g", ps.last);
        if (low) /* step 0 of the reference starts after two fifths of step 0 */
            ck_assert_msg(ps.first_ref < 0.5 / bc.cs.steps,
                          "the reference starts at %g of %d steps", ps.first_ref, bc.cs.steps);
        ck_result_free(&r);
    }
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

START_TEST(noise_floor_of_a_deterministic_case_is_one_more_plain_run)
{
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_file(&bc, "cnn_bn.json");
    ck_run_request rq = {.noise_floor = true};
    ck_run_plan p;
    ck_run_outcome oc;
    plan_and_run(b, NULL, &bc, CK_F32, &rq, &p, &oc);
    ck_assert(p.stage[CK_STAGE_BISECT] && p.localise == CK_LOCALISE_NEVER);
    /* the two plain runs are identical: no recorded pair to localise noise */
    assert_fixed_trainings_ran("--noise-floor", &p, &oc);
    ck_assert(oc.bisected && oc.res.bisect && oc.res.bisect->noise_floor_measured);
    ck_assert(!oc.res.bisect->searched);
    ck_result_free(&oc.res);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

START_TEST(bisect_on_mismatch_runs_only_where_the_runs_part)
{
    ck_backend *b = tu_cpu_backend();
    static const struct {
        const char *file;
        bool bisects;
    } rows[] = {{"mlp_dropout.json", false}, {"canary_dropout_stateful.json", true}};
    for (size_t i = 0; i < 2; i++) {
        tu_built_case bc;
        tu_build_file(&bc, rows[i].file);
        ck_run_request rq = {.bisect = true};
        ck_run_plan p;
        ck_run_outcome oc;
        plan_and_run(b, NULL, &bc, CK_F32, &rq, &p, &oc);
        ck_assert_msg(oc.bisected == rows[i].bisects, "%s: bisected %d", rows[i].file,
                      oc.bisected);
        if (rows[i].bisects) {
            /* the reference, the segment search or localisation: more than the pair */
            ck_assert_int_ge(oc.log.count[CK_TRAINING_BISECT], 2);
            ck_assert_int_eq(oc.log.count[CK_TRAINING_NOISE_FLOOR], 1);
            ck_assert(oc.res.bisect->n_causes > 0);
        } else {
            assert_fixed_trainings_ran(rows[i].file, &p, &oc);
        }
        ck_result_free(&oc.res);
        tu_free_built(&bc);
    }
    ck_assert(ck_run_request_keeps_steps(&(ck_run_request){.force_bisect = true}) == CK_KEEPS_BISECT);
    ck_assert(ck_run_request_keeps_steps(&(ck_run_request){.verify_recompute = true}) ==
              CK_KEEPS_VERIFY_RECOMPUTE);
    ck_assert(ck_run_request_keeps_steps(&(ck_run_request){0}) == CK_KEEPS_NONE);

    /* bisect keeps every step's tensors: past CK_FULL_RECORD_STEPS steps the plan refuses */
    tu_built_case bc;
    tu_build_file(&bc, "mlp_dropout.json");
    bc.cs.steps = CK_FULL_RECORD_STEPS + 1;
    ck_run_request rq = {.force_bisect = true};
    ck_run_plan p;
    ck_run_plan_make(&bc.cs, CK_F32, &rq, false, &p);
    ck_assert(p.too_long && p.keeps == CK_KEEPS_BISECT);
    ck_run_outcome oc;
    ck_error err;
    ck_assert(ck_run_plan_execute(&p, &rq, b, NULL, &bc.g, NULL, NULL, &oc, &err) == CK_ERR_INPUT);
    ck_assert_msg(strstr(err.msg, "keeps every step's tensors") != NULL, "%s", err.msg);
    ck_assert_int_eq(ck_training_log_total(&oc.log), 0);
    ck_result_free(&oc.res);
    rq.force_bisect = false; /* the ordinary judgement keeps bounded memory */
    ck_run_plan_make(&bc.cs, CK_F32, &rq, false, &p);
    ck_assert(!p.too_long);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

/* ---- the wire encoding ---- */

/* The JSON report and the text summary of a result, as one string. */
static char *rendered(const ck_result *r)
{
    ck_report_meta meta = {.tool_version = "test", .include_wall_time = true};
    char *json = ck_report_json_string(r, &meta);
    ck_assert_ptr_nonnull(json);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    ck_report_print_summary(f, r, -1);
    ck_bisect_print_story(f, r);
    ck_report_print_oneline(f, r);
    fclose(f);
    size_t n = strlen(json) + len + 2;
    char *all = malloc(n);
    ck_assert_ptr_nonnull(all);
    snprintf(all, n, "%s\n%s", json, text);
    free(json);
    free(text);
    return all;
}

static void encode(const ck_result *r, ck_wire_out *w)
{
    memset(w, 0, sizeof *w);
    ck_result_encode(r, w);
    ck_assert(!w->failed);
}

static ck_status decode(const ck_graph *g, const void *p, size_t n, ck_result *out, ck_error *err)
{
    ck_wire_in in;
    ck_wire_in_init(&in, p, n);
    ck_status st = ck_result_decode(&in, g, out, err);
    if (st == CK_OK && !ck_wire_done(&in))
        st = ck_fail(err, CK_ERR_INPUT, "encoded result: %s", in.why);
    return st;
}

/* Encoded and decoded, the result renders byte for byte as before and re-encodes to the
 * same bytes; every prefix and a longer encoding are refused. */
static void assert_round_trip(const char *desc, const ck_graph *g, const ck_result *r)
{
    ck_wire_out w;
    encode(r, &w);
    ck_result back;
    ck_error err;
    ck_assert_msg(decode(g, w.buf, w.len, &back, &err) == CK_OK, "%s: %s", desc, err.msg);
    char *want = rendered(r), *got = rendered(&back);
    ck_assert_msg(strcmp(want, got) == 0, "%s: the decoded result renders differently", desc);
    free(want);
    free(got);
    ck_wire_out again;
    encode(&back, &again);
    ck_assert_msg(again.len == w.len && memcmp(again.buf, w.buf, w.len) == 0,
                  "%s: re-encoding differs", desc);
    free(again.buf);
    ck_result_free(&back);
    size_t stride = w.len / 300 + 1;
    for (size_t cut = 0; cut < w.len; cut += (cut + 64 < w.len ? stride : 1)) {
        ck_result part;
        ck_assert_msg(decode(g, w.buf, cut, &part, &err) != CK_OK,
                      "%s: %zu of %zu bytes accepted", desc, cut, w.len);
        ck_assert_msg(!strchr(err.msg, '\n'), "%s: a message of several lines", desc);
        ck_result_free(&part);
    }
    unsigned char *longer = malloc(w.len + 1);
    memcpy(longer, w.buf, w.len);
    longer[w.len] = 0;
    ck_result extra;
    ck_assert_msg(decode(g, longer, w.len + 1, &extra, &err) != CK_OK && strstr(err.msg, "trailing"),
                  "%s: a trailing byte accepted", desc);
    ck_result_free(&extra);
    free(longer);
    free(w.buf);
}

START_TEST(decoded_results_render_byte_for_byte)
{
    ck_backend *b = tu_cpu_backend(), *ref = ref_backend();
    static const struct {
        const char *file;
        ck_dtype dtype;
        bool force_bisect, against, verify, segmentwise;
    } rows[] = {
        {"canary_dropout_stateful.json", CK_F32, false, false, true, true},
        {"mlp_dropout.json", CK_F16, false, false, false, true},
        {"mlp_dropout.json", CK_F32, false, false, false, false},
        {"mlp_dropout.json", CK_F16, false, true, false, false},
        {"cnn_bn.json", CK_BF16, false, false, true, false},
        {"canary_bn_update.json", CK_F32, true, false, false, false},
        {"canary_dropout_stateful.json", CK_F32, true, false, true, false},
        {"canary_lowp_reduction.json", CK_F16, true, false, false, false},
        {"fp16_underflow_noscale.json", CK_F16, false, false, false, false},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        tu_built_case bc;
        tu_build_file(&bc, rows[i].file);
        ck_run_request rq = {.force_bisect = rows[i].force_bisect,
                             .verify_recompute = rows[i].verify,
                             .plain = rows[i].segmentwise ? CK_PLAIN_SEGMENTWISE : CK_PLAIN_RUN};
        ck_run_plan p;
        ck_run_outcome oc;
        plan_and_run(b, rows[i].against ? ref : NULL, &bc, rows[i].dtype, &rq, &p, &oc);
        char desc[128];
        snprintf(desc, sizeof desc, "%s %s", rows[i].file, ck_dtype_name(rows[i].dtype));
        assert_round_trip(desc, &bc.g, &oc.res);
        ck_result_free(&oc.res);
        tu_free_built(&bc);
    }
    ref->destroy(ref);
    b->destroy(b);
}
END_TEST

/* One altered field must be refused, naming it. */
static void assert_refused(const ck_graph *g, const ck_result *r, const char *field)
{
    ck_wire_out w;
    encode(r, &w);
    ck_result back;
    ck_error err;
    ck_assert_msg(decode(g, w.buf, w.len, &back, &err) != CK_OK, "%s: accepted", field);
    ck_assert_msg(strstr(err.msg, field) != NULL, "%s: the message says \"%s\"", field, err.msg);
    ck_result_free(&back);
    free(w.buf);
}

START_TEST(out_of_range_fields_are_refused)
{
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_file(&bc, "canary_bn_update.json");
    ck_run_request rq = {.force_bisect = true};
    ck_run_plan p;
    ck_run_outcome oc;
    plan_and_run(b, NULL, &bc, CK_F32, &rq, &p, &oc);
    ck_result *r = &oc.res;
    ck_assert(r->bisect && r->bisect->n_causes > 0 && r->n_tensors > 0);

    int saved = r->bisect->causes[0].layer;
    r->bisect->causes[0].layer = bc.g.n; /* beyond the graph */
    assert_refused(&bc.g, r, "cause.layer");
    r->bisect->causes[0].layer = saved;

    saved = r->bisect->culprit_set[0];
    r->bisect->culprit_set[0] = CK_BISECT_MAX_SETS; /* beyond the sets there can be */
    assert_refused(&bc.g, r, "bisect.culprit_set");
    r->bisect->culprit_set[0] = saved;

    saved = r->bisect->causes[0].n_layers;
    r->bisect->causes[0].n_layers = bc.g.n + 1; /* more layers than the graph has */
    assert_refused(&bc.g, r, "cause.n_layers");
    r->bisect->causes[0].n_layers = saved;

    saved = r->first_divergence;
    r->first_divergence = r->n_tensors;
    assert_refused(&bc.g, r, "first_divergence");
    r->first_divergence = saved;

    int64_t fb = r->tensors[0].m.first_bad;
    r->tensors[0].m.first_bad = ck_shape_numel(&r->tensors[0].shape);
    assert_refused(&bc.g, r, "metrics");
    r->tensors[0].m.first_bad = fb;

    ck_verdict v = r->verdict;
    r->verdict = (ck_verdict)7;
    assert_refused(&bc.g, r, "verdict");
    r->verdict = v;

    /* the magic and the version */
    ck_wire_out w;
    encode(r, &w);
    ck_result back;
    ck_error err;
    w.buf[0] ^= 1;
    ck_assert(decode(&bc.g, w.buf, w.len, &back, &err) != CK_OK && strstr(err.msg, "magic"));
    ck_result_free(&back);
    w.buf[0] ^= 1;
    w.buf[8] ^= 1;
    ck_assert(decode(&bc.g, w.buf, w.len, &back, &err) != CK_OK && strstr(err.msg, "version"));
    ck_result_free(&back);
    w.buf[8] ^= 1;
    ck_assert_msg(decode(&bc.g, w.buf, w.len, &back, &err) == CK_OK, "%s", err.msg);
    ck_result_free(&back);
    free(w.buf);

    /* a result decoded against another case's graph (other steps) is refused */
    tu_built_case other;
    tu_build_file(&other, "mlp_dropout.json");
    encode(r, &w);
    ck_assert(decode(&other.g, w.buf, w.len, &back, &err) != CK_OK);
    ck_result_free(&back);
    free(w.buf);
    tu_free_built(&other);

    ck_result_free(r);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

/* every "run" word in an error names the run it was, not "plain" for all of them */
static ck_status refuse_alloc(ck_backend *b, size_t bytes, void **ptr, ck_error *err)
{
    (void)b;
    *ptr = NULL;
    return ck_fail(err, CK_ERR_NOMEM, "out of memory allocating %zu bytes", bytes);
}

START_TEST(an_error_names_the_training_it_came_from)
{
    ck_backend *b = ref_backend();
    tu_built_case bc;
    tu_build_file(&bc, "mlp_dropout.json");
    ck_status (*alloc)(ck_backend *, size_t, void **, ck_error *) = b->alloc;
    b->alloc = refuse_alloc;
    ck_plan plan;
    ck_error err;
    ck_assert_msg(ck_plan_build(&bc.g, &plan, &err) == CK_OK, "%s", err.msg);
    static const struct {
        ck_training_kind kind;
        bool checkpointed;
        ck_dtype round_to;
        const char *want;
    } rows[] = {
        {CK_TRAINING_PLAIN, false, CK_F32, ": plain run: "},
        {CK_TRAINING_CHECKPOINTED, true, CK_F32, ": checkpointed run: "},
        {CK_TRAINING_FP32_REFERENCE, false, CK_F32, ": fp32 reference run: "},
        {CK_TRAINING_CALIBRATION, false, CK_BF16, ": calibration (fp32 rounded to bf16) run: "},
        {CK_TRAINING_NOISE_FLOOR, false, CK_F32, ": noise floor (plain) run: "},
        {CK_TRAINING_BISECT, true, CK_F32, ": bisect (checkpointed) run: "},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ck_run_hooks h = {.round_to = rows[i].round_to};
        ck_training t = {.kind = rows[i].kind, .b = b, .g = &bc.g,
                         .plan = rows[i].checkpointed ? &plan : NULL, .dtype = CK_F32,
                         .hooks = &h};
        ck_record rec;
        ck_assert(ck_training_run(&t, &rec, &err) != CK_OK);
        ck_record_free(&rec);
        ck_assert_msg(strstr(err.msg, rows[i].want) != NULL, "%s: want '%s' in: %s",
                      ck_training_kind_name(rows[i].kind), rows[i].want, err.msg);
    }
    b->alloc = alloc;
    ck_plan_free(&plan);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

Suite *suite_run_plan(void)
{
    Suite *s = suite_create("run_plan");
    TCase *tc = tcase_create("plan");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, plan_says_which_trainings_run);
    tcase_add_test(tc, progress_names_the_reference_and_calibration_runs);
    tcase_add_test(tc, noise_floor_of_a_deterministic_case_is_one_more_plain_run);
    tcase_add_test(tc, bisect_on_mismatch_runs_only_where_the_runs_part);
    tcase_add_test(tc, an_error_names_the_training_it_came_from);
    suite_add_tcase(s, tc);
    TCase *tw = tcase_create("wire");
    tcase_set_timeout(tw, 240);
    tcase_add_test(tw, decoded_results_render_byte_for_byte);
    tcase_add_test(tw, out_of_range_fields_are_refused);
    suite_add_tcase(s, tw);
    return s;
}
