/*
 * What bisect and --verify-recompute find, as plain data for the result (result.h) and
 * the report writers: the noise floor, the segment search, the first layers whose
 * recomputed output or output gradient differs, and the causes as typed records (the
 * report writers word them: reports/bisect_story.c).
 */
#ifndef CK_FINDINGS_H
#define CK_FINDINGS_H

#include <stdbool.h>
#include <stdint.h>

#include "harness/core/metrics.h"
#include "harness/core/tensor.h"
#include "harness/model/case.h"
#include "harness/verify/tensor_result.h"

typedef struct ck_bisect_result ck_bisect_result;

#define CK_BISECT_MAX_CAUSES 8
/* Layers one cause keeps by name (layers[]); past it they are counted (n_layers). */
#define CK_CAUSE_MAX_LAYERS 32
/* Independent culprit sets the segment search looks for before it stops. */
#define CK_BISECT_MAX_SETS 16

/* Why two runs part, as bisect found it. Each kind says which fields of ck_bisect_cause
 * it fills; the others keep their defaults (-1 for indexes, 0 otherwise). */
typedef enum {
    CK_CAUSE_NONDETERMINISTIC_LAYER = 0, /* layer's output (in_backward: output gradient)
                                            differs between two plain runs: step, max_abs,
                                            count of total elements */
    CK_CAUSE_NONDETERMINISTIC_UPDATE,    /* two plain runs differ from step on, in no layer
                                            output or output gradient (cause unknown) */
    CK_CAUSE_WITHIN_NOISE_FLOOR,         /* every difference within factor x the floor */
    CK_CAUSE_RNG_REDRAW,                 /* layer drew another mask/noise on recomputation
                                            under rng policy: count of total draws differ */
    CK_CAUSE_RECOMPUTE_DTYPE,            /* the recomputation ran in dtype, the original in
                                            orig_dtype; layer differs first (max_abs) */
    CK_CAUSE_RECOMPUTE_DIFFERS,          /* layer's recomputed output differs from its
                                            original at step (max_abs, count of total):
                                            cause unknown */
    CK_CAUSE_STATE_UPDATED,              /* layer's buffer updated during recomputation
                                            (num_batches_tracked nbt_recomp vs nbt_orig,
                                            batchnorm policy bn) */
    CK_CAUSE_STATE_CHANGED,              /* layer's buffer changed during recomputation
                                            (max_abs) */
    CK_CAUSE_FILTER_DROPPED_GRADIENT,    /* segment [layer .. last_layer] passed no gradient
                                            to its dtype input source_layer (-1: the model
                                            input) at step: recompute_filter fp32_only */
    CK_CAUSE_BACKWARD_DIFFERS,           /* no recomputed output or buffer differs, but
                                            layer's output gradient does first at step
                                            (max_abs): cause unknown */
    CK_CAUSE_UNLOCALISED,                /* the runs part at step, nothing recorded in the
                                            culprit segments differs: cause unknown */
    CK_CAUSE_LOSS_SCALER,                /* the loss scaler decided differently at step:
                                            scale_plain/skipped_plain vs scale_ckpt/
                                            skipped_ckpt, count steps differ */
    CK_CAUSE_KINDS
} ck_cause_kind;

/* A cause may hold for several layers: every dropout that drew again, every BatchNorm
 * updated twice, the first differing layer of every culprit segment. layers[0] is `layer`;
 * n_layers counts them all, the first CK_CAUSE_MAX_LAYERS in topological order kept by
 * index (0: the cause names `layer` alone, or none). */
typedef struct {
    ck_cause_kind kind;
    int layer;              /* the layer named first, -1 none */
    int n_layers;
    int layers[CK_CAUSE_MAX_LAYERS];
    int last_layer;         /* a segment's last layer, -1 none */
    int source_layer;       /* the producer of a segment's input, -1 the model input / none */
    int step;
    ck_dtype dtype, orig_dtype;
    bool in_backward;
    double max_abs;
    int64_t count, total;
    char buffer[32];        /* "running_mean", "running_var", "num_batches_tracked" */
    int64_t nbt_recomp, nbt_orig;
    ck_rng_policy rng;
    ck_bn_policy bn;
    double factor;          /* the noise-floor factor */
    double scale_plain, scale_ckpt;
    bool skipped_plain, skipped_ckpt;
} ck_bisect_cause;

typedef struct {
    int layer; /* -1: none found */
    int step;
    ck_metrics m;
    ck_verdict verdict;
} ck_layer_finding;

/* One recomputed layer output compared with its original (--verify-recompute, bisect). */
typedef struct ck_recompute_check {
    int layer, step;
    ck_dtype orig_dtype, recomp_dtype;
    ck_metrics m;
    ck_verdict verdict;
    int64_t rng_differs; /* dropout/noise: elements whose draw differs; -1 when no RNG */
} ck_recompute_check;

struct ck_bisect_result {
    /* noise floor: plain run again vs plain */
    bool noise_floor_measured;
    int n_floor;
    ck_tensor_result *floor;  /* per recorded tensor, same order as ck_result.tensors */
    ck_verdict floor_verdict; /* worst over floor */
    ck_layer_finding nondet;  /* first layer whose output differs between two plain runs */
    bool nondet_in_backward;  /* found in output gradients rather than outputs */
    bool within_noise_floor;  /* every checkpointed difference is within the floor */

    /* segment search */
    bool searched;
    int n_segments;           /* segments of the full plan */
    bool *culprit;            /* per segment: in one of the independent culprit sets */
    int *culprit_set;         /* per segment: which set (0 the first found), -1 none */
    int n_culprit_sets;       /* independent sets: each diverges on its own, each minimal */
    bool sets_capped;         /* the search stopped at CK_BISECT_MAX_SETS sets while the
                                 remaining segments still diverged */
    int search_runs;          /* checkpointed runs the search took */

    /* layer localisation */
    int step;                 /* the step localised; -1 when the runs never diverge */
    ck_layer_finding forward; /* first recomputed output differing from its original */
    ck_layer_finding backward;/* first output gradient (backward order) differing from plain */
    int state_layer;          /* first layer whose buffers changed during recomputation */
    char state_buffer[32];    /* which buffer */
    ck_metrics state_m;
    int64_t nbt_orig, nbt_recomp; /* batchnorm num_batches_tracked after each, -1 if none */
    ck_recompute_check rng;   /* forward culprit's RNG evidence (layer -1 when none) */
    ck_dtype forward_orig_dtype, forward_recomp_dtype;

    int n_causes;
    ck_bisect_cause causes[CK_BISECT_MAX_CAUSES];
};

void ck_bisect_result_free(ck_bisect_result *br);

#endif
