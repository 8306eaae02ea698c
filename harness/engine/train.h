/*
 * Training: one run of a case on a backend, plain or checkpointed, recording every
 * step's loss, gradients, buffers and parameters (records.h). Judging two runs is the
 * verify layer's (harness/verify/judge.h).
 *
 * Step order (both runs): data ← seed stream; zero grads; forward; loss; backward
 * (recomputing segments in the checkpointed run); record loss, buffers, grads; optimizer
 * update; record params.
 */
#ifndef CK_TRAIN_H
#define CK_TRAIN_H

#include "harness/engine/executor.h"
#include "harness/engine/records.h"
#include "harness/engine/dump.h"

struct ck_dump_spec;

typedef struct {
    ck_exec_observer observer; /* passed to the executor of every run; may be NULL */
    void *observer_user;
    const struct ck_dump_spec *dump; /* NULL: no dump (dump.h) */
    ck_alloc_trace *event_log; /* every step's allocator events and marks; may be NULL */
    /* The precision judgement's calibration run: an fp32 run whose input, targets and
     * linear/conv weights are rounded to this low dtype (fp16/bf16) before every step's
     * forward, as a low-precision run casts them; CK_F32: none. */
    ck_dtype round_to;
    double perturb_rel;    /* with round_to: executor.h's calibration dither; 0: none */
    /* The precision judgement's fp32 runs: skip the optimizer update at every step where
     * this (the low-precision run's per-step record, `steps` entries) says its loss scaler
     * skipped, so both runs take the same updates; NULL: none. */
    const ck_scale_step *skip_like;
    uint64_t perturb_seed;
    /* What an error calls this run ("calibration", "fp32 reference", ...; the engine adds
     * " run"); NULL: "plain" or "checkpointed" by the plan. */
    const char *run_name;
    /* The record keeps the current step's loss, loss scale and wall time only (one entry,
     * `steps` 1): a reference run judged step by step needs no history, and long runs stay
     * within memory (32 bytes per step otherwise). */
    bool latest_step_only;
    /* executor.h's own_gradient_buffers: no gradient buffer reused (tests compare) */
    bool own_gradient_buffers;
    /* executor.h's keep_activation_grads: the observer reads every layer's output gradient */
    bool keep_activation_grads;
} ck_run_hooks;

/* No inf or NaN among n values (fp32/fp64; other dtypes count as finite). */
bool ck_all_finite(ck_dtype dt, int64_t n, const void *data);

/* Trains g's case once on b in dtype; plan NULL = plain. Fills rec (free with
 * ck_record_free). */
ck_status ck_train(ck_backend *b, const ck_graph *g, const ck_plan *plan, ck_dtype dtype,
                   const ck_run_hooks *hooks, ck_record *rec, ck_error *err);

/* The same run one step at a time, so that several runs can advance in lockstep and be
 * judged step by step with bounded memory (verify/run_case.c): begin (model, executor,
 * dump), step (appends that step's entries to rec; the caller may drop them with
 * ck_record_drop_entries between steps), end (peak memory, counts, wall time into rec),
 * free (always, also after a failure of step). ck_train is begin, every step, end, free. */
typedef struct {
    ck_backend *b;
    const ck_graph *g;
    const ck_plan *plan;
    ck_dtype dtype;
    ck_record *rec;
    const struct ck_dump_spec *dump;
    ck_model model;
    bool model_made;
    ck_exec ex;
    ck_act_dumper acts;
    double scale, t0, busy_s;
    int clean_steps;
    int64_t updates;
    ck_dtype round_to;                /* calibration run: hooks->round_to (else CK_F32) */
    const ck_scale_step *skip_like;   /* hooks->skip_like */
    char run_name[64];                /* what an error calls this run (hooks->run_name) */
    bool latest_step_only;            /* hooks->latest_step_only */
} ck_trainer;

ck_status ck_trainer_begin(ck_trainer *t, ck_backend *b, const ck_graph *g, const ck_plan *plan,
                           ck_dtype dtype, const ck_run_hooks *hooks, ck_record *rec,
                           ck_error *err);
ck_status ck_trainer_step(ck_trainer *t, int step, ck_error *err);
void ck_trainer_end(ck_trainer *t);
void ck_trainer_free(ck_trainer *t);

/* Draws a step's model input and loss target on the host and uploads them into tensors
 * allocated here (free with ck_free_data). */
ck_status ck_make_data(ck_backend *b, const ck_graph *g, ck_dtype dtype, int step,
                       ck_tensor *input, ck_tensor *target, ck_error *err);
void ck_free_data(ck_backend *b, ck_tensor *input, ck_tensor *target);

#endif
