/*
 * The one way the verify layer starts a training run: every run a judgement, a bisection
 * or a recompute check needs goes through here, named by what it is for, so a run plan
 * (run_plan.h) and its tests can say exactly which trainings took place.
 */
#ifndef CK_TRAINING_H
#define CK_TRAINING_H

#include "harness/engine/train.h"

/* What a training run is for. */
typedef enum {
    CK_TRAINING_PLAIN = 0,       /* the plain run judged against the checkpointed one */
    CK_TRAINING_CHECKPOINTED,    /* the checkpointed run */
    CK_TRAINING_FP32_REFERENCE,  /* a low-precision case's fp32 plain run */
    CK_TRAINING_CALIBRATION,     /* fp32 from inputs rounded to the low dtype (precision_judge.h) */
    CK_TRAINING_OTHER_BACKEND,   /* the plain run on the --against backend */
    CK_TRAINING_RECOMPUTE_CHECK, /* checkpointed, keeping originals (--verify-recompute) */
    CK_TRAINING_NOISE_FLOOR,     /* plain again, and the recorded pair that localises noise */
    CK_TRAINING_BISECT,          /* bisect's plain reference, segment search and localisation */
    CK_TRAINING_SEGMENT_KEPT,    /* segment by segment: one segment keeps its activations, the
                                    others are checkpointed (segmentwise.h) */
    CK_TRAINING_KINDS
} ck_training_kind;

/* "plain", "checkpointed", "fp32 reference", "calibration", "other backend",
 * "recompute check", "noise floor", "bisect", "segment kept". */
const char *ck_training_kind_name(ck_training_kind k);

/* How many trainings of each kind ran (filled by every call below that is given one). */
typedef struct {
    int count[CK_TRAINING_KINDS];
} ck_training_log;

int ck_training_log_total(const ck_training_log *log);

typedef struct {
    ck_training_kind kind;
    ck_backend *b;
    const ck_graph *g;
    const ck_plan *plan;        /* NULL: plain */
    ck_dtype dtype;
    const ck_run_hooks *hooks;  /* NULL: none */
    ck_training_log *log;       /* NULL: not counted */
} ck_training;

/* One whole run into rec (free with ck_record_free). */
ck_status ck_training_run(const ck_training *t, ck_record *rec, ck_error *err);

/* The same run one step at a time, for runs that advance in lockstep (ck_trainer_step,
 * ck_trainer_end, ck_trainer_free as train.h says). */
ck_status ck_training_begin(const ck_training *t, ck_trainer *tr, ck_record *rec, ck_error *err);

#endif
