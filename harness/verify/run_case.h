/*
 * One case end to end on one backend and dtype: trains it plain and checkpointed from
 * identical weights and data, runs the fp32 reference of a low-precision case, and judges
 * the records into a ck_result (judge.h).
 */
#ifndef CK_RUN_CASE_H
#define CK_RUN_CASE_H

#include "harness/verify/result.h"
#include "harness/verify/training.h"

/* Progress of a case, called by the engine at every layer's forward and backward of each
 * training that advances in lockstep: the plain (run 0) and checkpointed (run 1) runs and,
 * for a low-precision case, its fp32 reference (run 2) and calibration runs (3 on). They
 * train step by step in turn (step 0 of every run, then step 1, ...), so `fraction` is the
 * share of all their work done so far; it never goes back. The caller renders it (the
 * library never prints). */
typedef struct {
    int run, n_runs;       /* which of the n_runs lockstep trainings */
    const char *run_label; /* "plain", "checkpointed", "fp32 reference", "calibration 2/3" */
    int step, steps;
    int layer, n_layers;
    bool backward, recompute;
    double fraction;       /* of every lockstep training's layer passes, 0..1 */
} ck_progress_info;
typedef void (*ck_progress_fn)(void *user, const ck_progress_info *p);
/* Moves p to the executor event ev of its training (step, layer, pass) and raises
 * p->fraction to the share of lockstep work that event completes (never lowers it). */
void ck_progress_advance(ck_progress_info *p, const ck_exec_event_info *ev);

typedef struct {
    const char *dump_dir;  /* write the plain and checkpointed runs' tensors here; NULL: no */
    bool dump_activations;
    ck_precision_check precision_check; /* fail (default), warn, off (no fp32 runs) */
    ck_precision_override precision_override; /* run --rtol/--atol/--rel-l2 */
    bool dump_activation_grads; /* every layer's output gradient per step too */
    bool dump_optimizer;        /* the optimizer state after every step too */
    ck_progress_fn progress; /* NULL: none */
    void *progress_user;
    ck_training_log *log;    /* counts the trainings; NULL: not counted */
} ck_case_run_opts;

/* Plain and checkpointed runs of the case, compared into res (free with ck_result_free).
 * A low-precision case also runs fp32 twice: the reference, and the calibration run from
 * inputs and weights rounded to the low dtype (precision_judge.h). */
ck_status ck_run_case(ck_backend *b, const ck_graph *g, ck_dtype dtype, ck_result *res,
                      ck_error *err);
/* The same, with dumps (opts may be NULL). */
ck_status ck_run_case_ex(ck_backend *b, const ck_graph *g, ck_dtype dtype,
                         const ck_case_run_opts *opts, ck_result *res, ck_error *err);

/* The backend's identity, copied into res (shared by every way a case is run). */
void ck_result_describe_backend(ck_backend *b, ck_result *res);

#endif
