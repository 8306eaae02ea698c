/*
 * Bisect: where and why do two runs part?
 *
 *  - Noise floor: the plain configuration is run twice. If the two plain runs differ, the
 *    case is nondeterministic regardless of checkpointing; the first nondeterministic layer
 *    is localised and the checkpointed run is judged against that floor.
 *  - Segment search: over which segments are checkpointed (binary narrowing, then removing
 *    one segment at a time, then a confirming run), the smallest set whose checkpointing
 *    alone makes the runs diverge.
 *  - Layer localisation at the first divergent step: forward (the first layer whose
 *    recomputed output differs from its original output, value by value), backward (the
 *    first layer, in backward order, whose output gradient differs from the plain run's),
 *    state (buffers after the original forward vs after the recomputation) and the RNG
 *    streams the original and recomputed forwards drew.
 *  - Causes: readable sentences with the evidence; unknown causes are reported as such.
 *
 * Recording trades time for memory: it is confined to the culprit segments and to one
 * step, and originals are freed as soon as they have been compared.
 */
#ifndef CK_BISECT_H
#define CK_BISECT_H

#include <stdio.h>

#include "harness/engine/train.h"

#define CK_BISECT_LINE 512
#define CK_BISECT_MAX_CAUSES 8

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
    bool *culprit;            /* per segment: in the smallest diverging set */
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
    char causes[CK_BISECT_MAX_CAUSES][CK_BISECT_LINE];
};

typedef struct {
    bool noise_floor;  /* run plain twice */
    bool localise;     /* segment search and layer localisation when the runs diverge */
} ck_bisect_opts;

/* Runs the analysis for a case whose ordinary comparison is in res (from ck_run_case);
 * attaches the result to res->bisect and, with a noise floor, may relax res's verdict to
 * `close` when every difference is within the floor. */
ck_status ck_bisect(ck_backend *b, const ck_graph *g, ck_dtype dtype, const ck_bisect_opts *o,
                    ck_result *res, ck_error *err);
void ck_bisect_result_free(ck_bisect_result *br);

/* The readable story on stdout. */
void ck_bisect_print_story(FILE *f, const ck_result *res);

/* Trains the checkpointed configuration keeping the originals of recomputed outputs and
 * comparing them value by value with the recomputed ones (--verify-recompute): fills
 * res->recompute_checks. A recomputation that differs fails the case on its own. */
ck_status ck_verify_recompute(ck_backend *b, const ck_graph *g, ck_dtype dtype, ck_result *res,
                              ck_error *err);

#endif
