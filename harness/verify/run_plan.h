/*
 * The run plan: which trainings one case x dtype needs, decided in one place from the
 * case, the options and the backends, and the execution that returns the typed result.
 *
 *   always            plain and checkpointed, in lockstep (run_case.h)
 *   fp16/bf16         the fp32 reference and the calibration runs (unless the precision
 *                     check is off; no calibration under an explicit tolerance override)
 *   verify_recompute  the checkpointed run again, keeping originals (bisect.h)
 *   against           the plain run on this backend and on the other one (judge.h)
 *   noise_floor       bisect without localisation: its plain reference, plain again, and
 *                     a recorded pair when the two differ (bisect.h)
 *   bisect            the noise floor, then segment search and layer localisation: always
 *                     (the bisect command) or when the ordinary comparison mismatches
 *                     (run --bisect)
 *
 *   segmentwise       instead of the plain run: plain-equivalence segment by segment
 *                     (segmentwise.h), asked for (--plain segment-by-segment) or chosen when
 *                     a memory limit is set and the plain run is predicted not to fit it
 *                     while the checkpointed run and every segment run do (ck_run_plan_fit)
 *
 * The plan is data, so the CLI and its tests can ask what will run before anything does.
 */
#ifndef CK_RUN_PLAN_H
#define CK_RUN_PLAN_H

#include "harness/verify/bisect.h"
#include "harness/verify/run_case.h"
#include "harness/verify/training.h"

/* How plain-equivalence is to be established (run --plain). */
typedef enum {
    CK_PLAIN_RUN = 0,         /* the plain run, unless a memory limit rules it out */
    CK_PLAIN_SEGMENTWISE      /* segment by segment, whatever the memory */
} ck_plain_mode;

/* What the user asked for. */
typedef struct {
    ck_case_run_opts run;   /* dumps, progress, the precision check and its override */
    bool verify_recompute;  /* --verify-recompute */
    bool noise_floor;       /* --noise-floor, or a nondeterministic algorithm policy */
    bool bisect;            /* --bisect: localise when the case mismatches */
    bool force_bisect;      /* the bisect command: localise whatever the comparison says */
    ck_plain_mode plain;    /* --plain run|segment-by-segment */
    int64_t memory_limit;   /* > 0: activation bytes a training may need (--memory-limit) */
} ck_run_request;

/* When bisect localises. */
typedef enum {
    CK_LOCALISE_NEVER = 0,
    CK_LOCALISE_ALWAYS,
    CK_LOCALISE_IF_MISMATCH /* the verdict is a mismatch, or not identical where the case
                               expects identical */
} ck_localise_when;

/* The stages of one case x dtype, in the order they run. */
typedef enum {
    CK_STAGE_PLAIN_VS_CHECKPOINTED = 0,
    CK_STAGE_VS_FP32,
    CK_STAGE_VERIFY_RECOMPUTE,
    CK_STAGE_VS_BACKEND,
    CK_STAGE_BISECT,
    CK_STAGE_KINDS
} ck_stage;

typedef struct {
    ck_dtype dtype;
    bool stage[CK_STAGE_KINDS]; /* which stages are planned (BISECT: may still not run when
                                   it only localises on a mismatch and there is none) */
    int calibration_runs;       /* with VS_FP32 */
    ck_localise_when bisect;    /* when the bisect stage runs (it measures the noise floor
                                   first, then localises as `localise` says) */
    ck_localise_when localise;  /* segment search and layer localisation */
    /* the trainings the fixed stages take; bisect's search adds a number that depends on
     * where the runs part */
    ck_training_log fixed;
    int keeps;                  /* a ck_keeps_steps: why every step's tensors are kept */
    bool too_long;              /* keeps them over more than CK_FULL_RECORD_STEPS steps: the
                                   plan must not run (memory grows with the steps) */
    /* plain-equivalence segment by segment instead of the plain run (segmentwise.h): then
     * the fixed trainings are the checkpointed run and one SEGMENT_KEPT run per segment,
     * the fp32 references train checkpointed, and --verify-recompute rides along them */
    bool segmentwise;
    ck_segmentwise_reason segmentwise_reason;
    /* ck_run_plan_fit's predictions (activation bytes, memory_plan.h), in the plan's dtype */
    bool fitted;
    int64_t plain_peak, ckpt_peak, fp32_plain_peak, fp32_ckpt_peak; /* fp32: low dtypes only */
    int64_t largest_segment_run_peak;
    int largest_segment_run;    /* the segment whose run needs it */
    /* ck_run_plan_fit: the plan must not run; `refusal` names what does not fit or what
     * cannot run without the plain run */
    bool refused;
    char refusal[320];
} ck_run_plan;

/* Why a plan keeps every step's tensors (it then cannot run past CK_FULL_RECORD_STEPS
 * steps, judge.h): the first of these the plan contains, or CK_KEEPS_NONE. */
typedef enum {
    CK_KEEPS_NONE = 0,
    CK_KEEPS_BISECT,            /* the bisect command */
    CK_KEEPS_BISECT_ON_MISMATCH,/* run --bisect */
    CK_KEEPS_NOISE_FLOOR,
    CK_KEEPS_VERIFY_RECOMPUTE
} ck_keeps_steps;

void ck_run_plan_make(const ck_case *c, ck_dtype dtype, const ck_run_request *rq,
                      bool against, ck_run_plan *p);
ck_keeps_steps ck_run_request_keeps_steps(const ck_run_request *rq);

/* Predicts every training's peak (memory_plan.h: exact, nothing allocated) against
 * rq->memory_limit and decides between the plain run and segment by segment: the plain
 * run (and, with the fp32 judgement, the fp32 plain run) when it fits; else segment by
 * segment when the checkpointed run and every segment run fit; else the plan is refused.
 * `limit_what` names the limit in a refusal ("the --memory-limit"). Also refuses segment by
 * segment together with a stage that needs the plain run (--against, bisect, a noise
 * floor, dumps). Runs the predictions only when a limit is set or segment by segment is
 * asked for. */
ck_status ck_run_plan_fit(ck_run_plan *p, const ck_graph *g, const ck_run_request *rq,
                          const char *limit_what, ck_error *err);

/* Told before each stage runs and after it succeeded (the CLI prints "dump: ..." and
 * "bisecting" from these); may be NULL. */
typedef void (*ck_stage_fn)(void *user, ck_stage stage, bool done);

typedef struct {
    ck_result res;          /* free with ck_result_free */
    ck_training_log log;    /* the trainings that ran */
    bool bisected;          /* the bisect stage ran */
} ck_run_outcome;

/* Runs the plan on b (and `against` for the cross-backend stage) into out. On failure
 * out->res holds what was judged before (free it all the same). */
ck_status ck_run_plan_execute(const ck_run_plan *p, const ck_run_request *rq, ck_backend *b,
                              ck_backend *against, const ck_graph *g, ck_stage_fn on_stage,
                              void *user, ck_run_outcome *out, ck_error *err);

#endif
