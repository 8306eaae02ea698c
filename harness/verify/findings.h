/*
 * What bisect and --verify-recompute find, as plain data for the result (result.h) and
 * the report writers: the noise floor, the segment search, the first layers whose
 * recomputed output or output gradient differs, and the causes as sentences.
 */
#ifndef CK_FINDINGS_H
#define CK_FINDINGS_H

#include <stdbool.h>
#include <stdint.h>

#include "harness/core/metrics.h"
#include "harness/core/tensor.h"
#include "harness/verify/tensor_result.h"

typedef struct ck_bisect_result ck_bisect_result;

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

void ck_bisect_result_free(ck_bisect_result *br);

#endif
