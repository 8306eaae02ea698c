/*
 * Plain-equivalence segment by segment (harness/verify/segmentwise.h, run --plain
 * segment-by-segment and the run plan's choice under --memory-limit).
 *
 * Every shipped case gets the same verdict and outcome as the ordinary plain-vs-checkpointed
 * comparison: the BatchNorm-update and stateful-RNG canaries are caught (mismatch), healthy
 * cases pass; each segment run's measured peak is its prediction; the trainings that ran are
 * the ones the plan lists; --verify-recompute checks the same recomputed outputs as the
 * ordinary check, one segment per run; the plan replaces a plain run that does not fit the
 * limit and refuses what fits neither way.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/verify/run_plan.h"
#include "harness/verify/segmentwise.h"
#include "tests/test_util.h"

/* Plans (fitted to rq's limit), runs and checks that the plan's trainings ran. */
static ck_status plan_fit_run(ck_backend *b, const tu_built_case *bc, ck_dtype dtype,
                              ck_run_request *rq, ck_run_plan *p, ck_run_outcome *oc,
                              ck_error *err)
{
    ck_run_plan_make(&bc->cs, dtype, rq, false, p);
    ck_status st = ck_run_plan_fit(p, &bc->g, rq, "the limit is", err);
    if (st != CK_OK)
        return st;
    st = ck_run_plan_execute(p, rq, b, NULL, &bc->g, NULL, NULL, oc, err);
    if (st == CK_OK)
        for (int k = 0; k < CK_TRAINING_KINDS; k++)
            ck_assert_msg(p->fixed.count[k] == oc->log.count[k], "%s: %s: planned %d, ran %d",
                          bc->cs.name, ck_training_kind_name((ck_training_kind)k),
                          p->fixed.count[k], oc->log.count[k]);
    return st;
}

static void run_ok(ck_backend *b, const tu_built_case *bc, ck_dtype dtype, ck_run_request *rq,
                   ck_run_plan *p, ck_run_outcome *oc)
{
    ck_error err;
    ck_assert_msg(plan_fit_run(b, bc, dtype, rq, p, oc, &err) == CK_OK, "%s: %s", bc->cs.name,
                  err.msg);
}

/* Every shipped case in fp32 (and a few in fp16/bf16): the verdict, expectation and outcome
 * of the ordinary comparison, every segment run's peak as predicted, the plain run absent. */
START_TEST(segment_by_segment_judges_every_case_like_plain_vs_checkpointed)
{
    static const struct {
        const char *file;
        ck_dtype dtype;
    } rows[] = {
        {"canary_bn_update.json", CK_F32},      {"canary_dropout_stateful.json", CK_F32},
        {"canary_gpt_stateful.json", CK_F32},   {"canary_recompute_filter.json", CK_F32},
        {"canary_no_saving.json", CK_F32},      {"cnn_bn.json", CK_F32},
        {"conv1d_seq.json", CK_F32},            {"gpt_decoder.json", CK_F32},
        {"llama_blocks.json", CK_F32},          {"mlp_dropout.json", CK_F32},
        {"resnet_concat.json", CK_F32},         {"unet3d_bn.json", CK_F32},
        {"unet3d_groupnorm.json", CK_F32},      {"mlp_dropout.json", CK_F16},
        {"unet3d_bn.json", CK_BF16},            {"canary_bn_update.json", CK_F16},
    };
    ck_backend *b = tu_cpu_backend();
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        tu_built_case bc;
        tu_build_file(&bc, rows[i].file);
        char desc[96];
        snprintf(desc, sizeof desc, "%s %s", rows[i].file, ck_dtype_name(rows[i].dtype));
        ck_run_request plain_rq = {0}, seg_rq = {.plain = CK_PLAIN_SEGMENTWISE};
        ck_run_plan pp, sp;
        ck_run_outcome po, so;
        run_ok(b, &bc, rows[i].dtype, &plain_rq, &pp, &po);
        run_ok(b, &bc, rows[i].dtype, &seg_rq, &sp, &so);
        const ck_result *pr = &po.res, *sr = &so.res;
        ck_assert_msg(pr->equivalence == CK_EQUIVALENCE_PLAIN && !pp.segmentwise, "%s", desc);
        ck_assert_msg(sr->equivalence == CK_EQUIVALENCE_SEGMENTS && sp.segmentwise &&
                          sr->segmentwise_reason == CK_SEGMENTWISE_REQUESTED,
                      "%s: not segment by segment", desc);
        ck_assert_msg(so.log.count[CK_TRAINING_PLAIN] == 0, "%s: a plain run ran", desc);
        ck_assert_msg(sr->verdict == pr->verdict, "%s: verdict %s, plain vs checkpointed %s",
                      desc, ck_verdict_name(sr->verdict), ck_verdict_name(pr->verdict));
        ck_assert_msg(sr->expect_met == pr->expect_met && sr->pass == pr->pass,
                      "%s: outcome (expect met %d pass %d) differs from plain vs checkpointed "
                      "(%d %d)", desc, sr->expect_met, sr->pass, pr->expect_met, pr->pass);
        ck_assert_msg(sr->n_segment_runs == pr->n_segments && sr->n_segment_runs > 0, "%s", desc);
        for (int k = 0; k < sr->n_segment_runs; k++) {
            const ck_segment_run *r = &sr->segment_runs[k];
            ck_assert_msg(r->segment == k && r->peak_activation_bytes == r->predicted_peak_bytes,
                          "%s: segment %d kept: measured %lld, predicted %lld", desc, k,
                          (long long)r->peak_activation_bytes, (long long)r->predicted_peak_bytes);
            ck_assert_msg(r->verdict <= sr->verdict, "%s: run %d worse than the result", desc, k);
        }
        ck_assert_msg(sr->plain_predicted_peak_bytes == pr->plain.peak_activation_bytes,
                      "%s: the plain prediction is the plain run's measured peak", desc);
        ck_assert_msg(sr->ckpt.peak_activation_bytes == pr->ckpt.peak_activation_bytes &&
                          sr->memory_saving == pr->memory_saving,
                      "%s: checkpointed peak or saving", desc);
        if (pr->verdict != CK_VERDICT_IDENTICAL) { /* it names a tensor, as the ordinary one */
            ck_assert_msg(sr->first_divergence >= 0, "%s: no first divergence", desc);
            ck_assert_msg(sr->tensors[sr->first_divergence].kind ==
                              pr->tensors[pr->first_divergence].kind,
                          "%s: first divergence %s, plain vs checkpointed %s", desc,
                          sr->tensors[sr->first_divergence].name,
                          pr->tensors[pr->first_divergence].name);
        }
        ck_result_free(&po.res);
        ck_result_free(&so.res);
        tu_free_built(&bc);
    }
    b->destroy(b);
}
END_TEST

/* --verify-recompute segment by segment checks what the ordinary check checks, with no
 * training of its own; a recomputation that draws a new dropout mask is caught. */
START_TEST(recompute_check_rides_along_the_segment_runs)
{
    static const char *const files[] = {"mlp_dropout.json", "canary_dropout_stateful.json",
                                        "unet3d_groupnorm.json"};
    ck_backend *b = tu_cpu_backend();
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        tu_built_case bc;
        tu_build_file(&bc, files[i]);
        ck_run_request plain_rq = {.verify_recompute = true},
                       seg_rq = {.verify_recompute = true, .plain = CK_PLAIN_SEGMENTWISE};
        ck_run_plan pp, sp;
        ck_run_outcome po, so;
        run_ok(b, &bc, CK_F32, &plain_rq, &pp, &po);
        run_ok(b, &bc, CK_F32, &seg_rq, &sp, &so);
        ck_assert_msg(so.log.count[CK_TRAINING_RECOMPUTE_CHECK] == 0, "%s", files[i]);
        ck_assert_msg(so.res.verified_recompute && so.res.n_recompute_checks > 0, "%s", files[i]);
        ck_assert_msg(so.res.n_recompute_checks == po.res.n_recompute_checks &&
                          so.res.recompute_mismatches == po.res.recompute_mismatches,
                      "%s: %d checks, %d differ; the ordinary check: %d, %d", files[i],
                      so.res.n_recompute_checks, so.res.recompute_mismatches,
                      po.res.n_recompute_checks, po.res.recompute_mismatches);
        bool canary = strncmp(files[i], "canary_", 7) == 0;
        ck_assert_msg((so.res.recompute_mismatches > 0) == canary, "%s: %d differ", files[i],
                      so.res.recompute_mismatches);
        ck_result_free(&po.res);
        ck_result_free(&so.res);
        tu_free_built(&bc);
    }
    b->destroy(b);
}
END_TEST

/* Under a limit the plain run exceeds while the checkpointed runs fit, the plan goes segment
 * by segment by itself; a limit below what a segment run or the checkpointed run needs is
 * refused before anything runs; so is a stage that needs the plain run. */
START_TEST(plan_replaces_a_plain_run_that_does_not_fit)
{
    ck_backend *b = tu_cpu_backend();
    tu_built_case bc;
    tu_build_file(&bc, "unet3d_groupnorm.json");
    ck_run_request rq0 = {0};
    ck_run_plan p;
    ck_run_plan_make(&bc.cs, CK_F32, &rq0, false, &p);
    ck_error err;
    rq0.plain = CK_PLAIN_SEGMENTWISE; /* predictions only */
    ck_assert(ck_run_plan_fit(&p, &bc.g, &rq0, "the limit is", &err) == CK_OK && p.fitted);
    int64_t plain = p.plain_peak, ckpt = p.ckpt_peak, seg = p.largest_segment_run_peak;
    ck_assert_msg(ckpt <= seg && seg < plain, "ckpt %lld, segment runs %lld, plain %lld",
                  (long long)ckpt, (long long)seg, (long long)plain);

    ck_run_request rq = {.memory_limit = plain};
    ck_run_outcome oc;
    run_ok(b, &bc, CK_F32, &rq, &p, &oc);
    ck_assert_msg(!p.segmentwise && oc.res.equivalence == CK_EQUIVALENCE_PLAIN, "at the limit");
    ck_result_free(&oc.res);

    rq.memory_limit = plain - 1;
    run_ok(b, &bc, CK_F32, &rq, &p, &oc);
    ck_assert_msg(p.segmentwise && p.segmentwise_reason == CK_SEGMENTWISE_PLAIN_OVER_LIMIT,
                  "one byte below the plain peak: not segment by segment");
    ck_assert(oc.res.equivalence == CK_EQUIVALENCE_SEGMENTS &&
              oc.res.memory_limit_bytes == plain - 1 && oc.res.pass);
    for (int k = 0; k < oc.res.n_segment_runs; k++)
        ck_assert(oc.res.segment_runs[k].peak_activation_bytes <= plain - 1);
    ck_result_free(&oc.res);

    /* below the segment runs: the one that does not fit; below the checkpointed run too:
     * the plain run first, as the trainings run */
    static const char *const refusals[] = {"the run keeping segment", "the plain run is"};
    for (int k = 0; k < 2; k++) {
        rq.memory_limit = k == 0 ? seg - 1 : ckpt - 1;
        ck_run_plan_make(&bc.cs, CK_F32, &rq, false, &p);
        ck_assert(ck_run_plan_fit(&p, &bc.g, &rq, "the limit is", &err) == CK_OK);
        ck_assert_msg(p.refused && strstr(p.refusal, refusals[k]) &&
                          strstr(p.refusal, "not run"),
                      "limit %lld: %s", (long long)rq.memory_limit, p.refusal);
        ck_assert(ck_run_plan_execute(&p, &rq, b, NULL, &bc.g, NULL, NULL, &oc, &err) != CK_OK);
        ck_assert(ck_training_log_total(&oc.log) == 0);
        ck_result_free(&oc.res);
    }

    ck_run_request nf = {.plain = CK_PLAIN_SEGMENTWISE, .noise_floor = true};
    ck_run_plan_make(&bc.cs, CK_F32, &nf, false, &p);
    ck_assert(ck_run_plan_fit(&p, &bc.g, &nf, "the limit is", &err) == CK_OK);
    ck_assert_msg(p.refused && strstr(p.refusal, "noise floor"), "%s", p.refusal);
    ck_run_request ag = {.plain = CK_PLAIN_SEGMENTWISE};
    ck_run_plan_make(&bc.cs, CK_F32, &ag, true, &p);
    ck_assert(ck_run_plan_fit(&p, &bc.g, &ag, "the limit is", &err) == CK_OK);
    ck_assert_msg(p.refused && strstr(p.refusal, "--against"), "%s", p.refusal);
    tu_free_built(&bc);
    b->destroy(b);
}
END_TEST

Suite *suite_segmentwise(void)
{
    Suite *s = suite_create("segmentwise");
    TCase *tc = tcase_create("segmentwise");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, segment_by_segment_judges_every_case_like_plain_vs_checkpointed);
    tcase_add_test(tc, recompute_check_rides_along_the_segment_runs);
    tcase_add_test(tc, plan_replaces_a_plain_run_that_does_not_fit);
    suite_add_tcase(s, tc);
    return s;
}
