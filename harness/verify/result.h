/*
 * The outcome of running one case: what the report writers (reports/) print.
 * Filled by run_case.c and judge.c (bisect.c adds its findings); owned by the caller,
 * freed with ck_result_free.
 */
#ifndef CK_RESULT_H
#define CK_RESULT_H

#include "harness/core/metrics.h"
#include "harness/engine/records.h"
#include "harness/model/graph.h"
#include "harness/model/plan.h"
#include "harness/verify/findings.h"
#include "harness/verify/precision_judge.h"
#include "harness/verify/vacuity.h"


typedef struct {
    const char *label;     /* "plain", "checkpointed" */
    int steps;
    double *losses;        /* steps entries */
    int64_t peak_activation_bytes;
    bool predicted;            /* the two below hold the plan's prediction (memory_plan.h) */
    int64_t predicted_peak_bytes;      /* equal to peak_activation_bytes (tested) */
    int64_t held_for_backward_bytes;   /* live after the forward: what backward will read */
    int64_t recomputed_layers; /* layer forwards run as recomputation, over all steps */
    double wall_time_s;    /* excluded from determinism checks */
    double *step_wall_s;   /* steps entries; excluded from determinism checks */
    double *train_wall_s;  /* steps entries: the training part of each step_wall_s */
    ck_mem_trace mem;      /* live activation bytes over the run (engine/alloc.h) */
    ck_scale_step *scales; /* steps entries */
    int64_t recomputed_other_dtype; /* recomputations run in fp32 while the forward ran low */
    int first_other_dtype_layer;    /* the first such layer, or -1 */
    ck_vacuity vacuity;             /* whether this run's gradients carry information */
    ck_act_nonfinite act_nonfinite; /* NaN/Inf in layer outputs and output gradients */
} ck_run_summary;

/* run --precision-check: whether the judgement against fp32 gates the result. */
typedef enum {
    CK_PRECISION_CHECK_FAIL = 0, /* default: a failed judgement fails the case */
    CK_PRECISION_CHECK_WARN,     /* judged and reported, never fails the case */
    CK_PRECISION_CHECK_OFF       /* no fp32 reference run at all */
} ck_precision_check;

const char *ck_precision_check_name(ck_precision_check m); /* "fail", "warn", "off" */


/* Non-finite values one run produced (judge.c ck_judge_nonfinite): over every step, the
 * loss and the gradients (which decide "all non-finite"), and every tensor holding one. */
typedef struct {
    int64_t loss_values, loss_nan, loss_inf;
    int64_t grad_values, grad_nan, grad_inf;
    int64_t other_nan, other_inf; /* parameters and buffers */
    int64_t skipped_step_grads;   /* NaN/Inf gradient values on steps the loss scaler skipped
                                     (the overflow it exists to absorb: no failure) */
    int tensors;                  /* tensors (any kind, any step) holding a NaN or an Inf */
    ck_act_nonfinite act;         /* layer outputs and output gradients (act_finite.h): a
                                     NaN a later op dropped is still counted here */
    bool all_loss;                /* every loss value is NaN or Inf */
    bool all_grads;               /* every gradient value is NaN or Inf */
} ck_nonfinite_counts;

/* How plain-equivalence was established (run_plan.h, segmentwise.h). */
typedef enum {
    CK_EQUIVALENCE_PLAIN = 0, /* the plain run against the checkpointed run */
    CK_EQUIVALENCE_SEGMENTS   /* segment by segment: for each segment a run keeping only that
                                 segment's forward activations, against the checkpointed run */
} ck_equivalence;

/* Why plain-equivalence was established segment by segment. */
typedef enum {
    CK_SEGMENTWISE_REQUESTED = 0,  /* run --plain segment-by-segment */
    CK_SEGMENTWISE_PLAIN_OVER_LIMIT /* the plain run is predicted not to fit --memory-limit */
} ck_segmentwise_reason;

/* One run of segment-by-segment equivalence: segment `segment` keeps its forward
 * activations (is not recomputed), every other segment is checkpointed; judged against the
 * fully checkpointed run over every step. */
typedef struct {
    int segment;                   /* index into ck_result.segments */
    char label[32];                /* "segment 2 kept" (run summaries point here) */
    int64_t peak_activation_bytes; /* measured */
    int64_t predicted_peak_bytes;  /* the plan's prediction (memory_plan.h) */
    int64_t recomputed_layers;
    double wall_time_s;            /* excluded from determinism checks */
    ck_verdict verdict;            /* worst over every step */
    int64_t tensors_judged, counts[3]; /* identical, close, mismatch */
    int first_step;                /* the first tensor at or beyond the verdict: its step, -1 */
    ck_tensor_kind first_kind;
    char first_name[96];           /* and its name */
    int scale_mismatches;          /* steps whose loss scale or skip decision differ */
} ck_segment_run;

typedef struct {
    const ck_case *cs;
    const ck_graph *g;
    char backend[32];
    char backend_device[128];
    char backend_versions[256];
    int backend_threads;   /* ck_backend_info.threads: 0 when the backend has none */
    char backend_isa[32];  /* ck_backend_info.isa */
    ck_dtype dtype;

    int n_segments;
    ck_segment *segments; /* resolved checkpoint segments */

    ck_run_summary plain, ckpt; /* segment by segment: `plain` summarises the segment run
                                   whose comparison `tensors` holds (shown_segment_run) */

    /* how plain-equivalence was established; CK_EQUIVALENCE_SEGMENTS fills the rest */
    ck_equivalence equivalence;
    ck_segmentwise_reason segmentwise_reason;
    int64_t memory_limit_bytes;         /* PLAIN_OVER_LIMIT: the limit; else 0 */
    int64_t plain_predicted_peak_bytes; /* the plain run that was not run: its prediction */
    int n_segment_runs;                 /* one per segment, in segment order */
    ck_segment_run *segment_runs;       /* owned */
    int shown_segment_run;              /* the first run with the worst verdict */

    int n_tensors;
    ck_tensor_result *tensors; /* in comparison order: per step loss, buffers, grads
                                  (backward order), params */
    int first_divergence;      /* index into tensors of the first non-identical, or -1 */
    /* long runs (more than CK_FULL_RECORD_STEPS steps, judge.h) keep the tensor results of
     * a few steps only: n_retained_steps > 0 lists them; the counts cover every step */
    int64_t tensors_judged;    /* tensor results judged over every step */
    int64_t judged_counts[3];  /* of those: identical, close, mismatch */
    int n_retained_steps;      /* 0: tensors holds every step */
    int retained_steps[3];

    double memory_saving;      /* 1 - ckpt_peak / plain_peak */
    bool memory_met;           /* saving >= min_memory_saving (true when none set) */
    ck_verdict verdict;        /* worst tensor verdict */
    bool expect_met;           /* verdict agrees with the case's expect */
    bool memory_expectation_met; /* memory_met == cs->expect_memory_met */
    bool pass;                 /* expect_met && memory_expectation_met && (vs_fp32_expect_met
                                  unless precision_check is warn/off) && the cross-backend
                                  check (when run) is not a mismatch && vacuous ==
                                  cs->expect_vacuous */
    bool vacuous;              /* a run's gradients carry no information (vacuity.h): the
                               plain run's reason when it is vacuous, else the
                               checkpointed run's (reports/ words them) */

    ck_bisect_result *bisect;  /* owned; NULL unless bisect or a noise floor ran */
    bool verified_recompute;   /* --verify-recompute ran */
    int n_recompute_checks;
    struct ck_recompute_check *recompute_checks; /* owned; every recomputed layer output */
    int recompute_mismatches;  /* checks whose recomputed output differs from the original */

    /* mixed precision (harness/precision.md) */
    int scale_mismatches;      /* steps whose loss scale or skip decision differ between runs */
    int first_scale_mismatch;  /* that step, or -1 */
    bool has_vs_fp32;          /* a low-precision run judged against the fp32 plain run */
    int n_vs_fp32;
    ck_tensor_result *vs_fp32; /* low plain (a) vs fp32 plain (ref), record order */
    ck_verdict vs_fp32_verdict;
    int vs_fp32_first;         /* first tensor outside tolerance, or -1 */
    bool vs_fp32_expect_met;   /* vs_fp32_verdict agrees with the case's expect_precision */
    ck_precision_check precision_check; /* how the judgement above gates the result */
    bool vs_fp32_calibrated;   /* a calibration run took part (precision_judge.h) */
    int vs_fp32_worst;         /* the row with the largest error / bound, or -1 */
    int64_t vs_fp32_judged;    /* rows judged over every step (more than n_vs_fp32 in long
                                  runs, which keep a bounded few: judge.h ck_lowp_judge) */
    int64_t vs_fp32_flushed_grads; /* gradient values flushed to zero in the low dtype */

    /* non-finite results (judge.c): a run whose loss or gradients are all NaN/Inf fails */
    ck_nonfinite_counts nonfinite_plain, nonfinite_ckpt;
    bool nonfinite_failed;     /* all NaN/Inf, or any NaN/Inf the case does not expect */
    bool nonfinite_counted;    /* the counts were taken step by step over every step (long
                                  runs keep few tensors); else ck_judge_nonfinite counts tensors */

    /* backends */
    char algo_policy[16];      /* "deterministic" / "fastest"; empty on the CPU */
    int n_algos;
    ck_algo_record *algos;     /* what ran, per layer and pass */
    bool has_device_memory;    /* the backend reports its own device memory (CUDA) */
    ck_device_memory device_memory; /* over the whole case: every run together */
    bool has_vs_backend;       /* --against: this backend's plain run vs the reference's */
    char vs_backend_name[32];  /* the reference backend */
    int n_vs_backend;
    ck_tensor_result *vs_backend;
    ck_verdict vs_backend_verdict;
    int vs_backend_first;      /* first tensor outside tolerance, or -1 */
} ck_result;

void ck_result_free(ck_result *r);

#endif
