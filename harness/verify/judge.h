/*
 * Judging run records into a ck_result: plain vs checkpointed (the case's tolerance), a
 * low-precision run vs fp32 (the precision tolerances), one backend vs another (--against),
 * and whether the verdicts meet the case's expectations.
 */
#ifndef CK_JUDGE_H
#define CK_JUDGE_H

#include "harness/engine/train.h"
#include "harness/verify/result.h"
#include "harness/verify/training.h"

/* Compares two records entry by entry (ckpt against the plain reference) into res's
 * tensors, first_divergence and verdict, with the case's tolerance. */
ck_status ck_compare_records(const ck_graph *g, const ck_record *plain, const ck_record *ckpt,
                             ck_result *res, ck_error *err);

/* Judges a low-precision plain record (dtype `low`) against the fp32 plain record with the
 * precision judgement (precision_judge.h: bounds calibrated from `calib`, the fp32 run from
 * inputs rounded to `low` and rounding-sized perturbations at every op, n_calib of them; the case's tolerances where it wrote them; ov
 * where given), and per tensor how many values overflowed, flushed to zero or were
 * subnormal in the low dtype. Fills res->vs_fp32*. */
ck_status ck_compare_vs_fp32(const ck_graph *g, ck_dtype low, const ck_record *fp32,
                             const ck_record *calib, int n_calib, const ck_record *lowrec,
                             const ck_precision_override *ov, ck_result *res, ck_error *err);

/* The cross-backend check (--against): trains the plain configuration on `ref` too and
 * compares b's plain run with it, tensor by tensor, by relative L2 error: at most 1e-5 in
 * fp32 (reduction orders differ), 1e-2 in fp16, 5e-2 in bf16 (the precision.md rounding
 * points are shared, the accumulation order is not). Fills res->vs_backend*; a mismatch
 * fails the case. */
ck_status ck_compare_backends(ck_backend *b, ck_backend *ref, const ck_graph *g, ck_dtype dtype,
                              ck_result *res, ck_error *err);
/* The same, counting its two trainings (this backend's plain run, the other backend's) in
 * log (may be NULL). */
ck_status ck_compare_backends_ex(ck_backend *b, ck_backend *ref, const ck_graph *g,
                                 ck_dtype dtype, ck_training_log *log, ck_result *res,
                                 ck_error *err);

/* Runs up to this many steps keep every step's tensor results; longer runs keep step 0, the
 * first divergent step and the last step (plus verdict counts over every step), so memory
 * and report size stay bounded however many steps a case trains (README, SCHEMA.md). */
#define CK_FULL_RECORD_STEPS 100

/* Judging two runs step by step as they train in lockstep (run_case.c): each step's
 * entries are compared, counted, and kept or dropped by the rule above. */
/* Under a relative-L2 bound (the cross-backend check), a gradient whose norm is below this
 * fraction of its step's gradient norm G is judged by ||a - ref|| <= bound x G. */
#define CK_NOISE_OF_STEP 1e-3

typedef struct {
    ck_dtype low_vs_fp32;   /* CK_F16/CK_BF16: the precision tolerances and cast counts */
    double rel_l2_limit;    /* > 0: every non-identical tensor judged by relative L2 alone */
    bool keep_all;          /* the run has at most CK_FULL_RECORD_STEPS steps */
    int last_step;
    ck_verdict diverged_at; /* the verdict that marks "the first divergent step" */
    ck_tensor_result *t;    /* kept results, owned until moved into a result */
    int n, cap;
    int first;              /* index into t of the first tensor at diverged_at or worse, -1 */
    ck_verdict worst;       /* over every step */
    int64_t judged, counts[3];
    int first_divergent_step;
    int retained[3], n_retained; /* the kept steps when not keep_all */
    ck_nonfinite_counts nonfinite[2]; /* the reference's and the other run's, every step */
} ck_step_judge;

void ck_step_judge_init(ck_step_judge *j, const ck_case *c, ck_dtype low_vs_fp32,
                        double rel_l2_limit, ck_verdict diverged_at);
/* Judges step `step` of rec against ref (both holding that step's entries only). */
ck_status ck_step_judge_add(ck_step_judge *j, const ck_graph *g, const ck_record *ref,
                            const ck_record *rec, int step, ck_error *err);
void ck_step_judge_free(ck_step_judge *j);
/* Adds step `step`'s results t[0..n) to j->nonfinite (ck_step_judge_add does it). */
void ck_step_judge_count_nonfinite(ck_step_judge *j, const ck_record *ref, const ck_record *rec,
                                   int step, const ck_tensor_result *t, int n);

/* Judging a low-precision run against fp32 step by step as the runs train in lockstep
 * (run_case.c), so neither run keeps its tensors: each step's entries of the fp32 run, the
 * calibration runs and the low-precision run are judged (precision_judge.h) and dropped.
 * Runs of at most CK_FULL_RECORD_STEPS steps keep every row; longer ones keep the rows of
 * step 0, the first mismatching step and the last step, plus each tensor's worst row over
 * every step: at most 4 rows per recorded tensor, whatever the number of steps. */
typedef struct {
    ck_dtype low;
    int n_calib;
    const ck_precision_override *ov;
    bool keep_all;
    int last_step;
    ck_tensor_result *t; /* kept rows */
    int *pos;            /* each kept row's place among its step's entries */
    int n, cap;
    ck_verdict verdict;  /* over every step */
    int first_step;      /* the first step with a mismatch, -1 */
    int64_t judged, flushed_grads;
    ck_tensor_result *tw; /* long runs: per place in a step's entries, the worst row */
    double *tw_w;
    bool *tw_mm;
    int n_tw;
} ck_lowp_judge;

void ck_lowp_judge_init(ck_lowp_judge *j, const ck_case *c, ck_dtype low, int n_calib,
                        const ck_precision_override *ov);
/* Judges step `step`: fp32, calib[0..n_calib) and low hold that step's entries. */
ck_status ck_lowp_judge_add(ck_lowp_judge *j, const ck_graph *g, const ck_record *fp32,
                            const ck_record *calib, const ck_record *low, int step,
                            ck_error *err);
/* Moves the kept rows into res (vs_fp32*, has_vs_fp32, the first mismatch and the worst). */
ck_status ck_lowp_judge_finish(ck_lowp_judge *j, ck_result *res, ck_error *err);
void ck_lowp_judge_free(ck_lowp_judge *j);

/* Moves a record's per-run facts (losses, scales, peak memory, recomputation counts, wall
 * time) into a run summary of the result; the record keeps its entries. */
void ck_fill_summary(ck_run_summary *s, const char *label, ck_record *rec);

/* Whether a verdict meets a case's expectation (identical: bitwise; close: nothing outside
 * tolerance; mismatch: something outside). */
bool ck_expectation_met(ck_expect e, ck_verdict v);
/* Counts the NaN and Inf values of both runs from the compared tensors (loss, gradients,
 * parameters, buffers) into res->nonfinite_plain/ckpt, unless res->nonfinite_counted says
 * they were counted step by step, and sets res->nonfinite_failed when either run's loss or
 * gradients are non-finite throughout (such a run trained nothing, and two runs that agree
 * on NaN prove nothing about checkpointing), or when any value is NaN/Inf and the case does
 * not say expect_nonfinite. Gradients of a step the loss scaler skipped are counted, not
 * failed. */
void ck_judge_nonfinite(ck_result *res);

/* Sets expect_met, memory_expectation_met and pass from the verdict, memory_met, any
 * recompute mismatches (which make the verdict a mismatch), the precision judgement (as
 * precision_check says) and vacuity (the runs' vacuity measures: res->vacuous). */
void ck_result_judge(ck_result *res);

#endif
