/*
 * Bisect: where and why do two runs part?
 *
 *  - Noise floor: the plain configuration is run twice. If the two plain runs differ, the
 *    case is nondeterministic regardless of checkpointing; the first nondeterministic layer
 *    is localised and the checkpointed run is judged against that floor.
 *  - Segment search: over which segments are checkpointed (binary narrowing, then removing
 *    one segment at a time, then a confirming run), the smallest set whose checkpointing
 *    alone makes the runs diverge; then, while checkpointing every segment in no set yet
 *    still diverges, the independent sets among those (halving, each diverging half
 *    searched on its own, halves that diverge only together minimised into one set), up
 *    to CK_BISECT_MAX_SETS sets.
 *  - Localisation covers every culprit segment, so a cause names every layer where it
 *    holds (each dropout that drew again, each BatchNorm updated twice).
 *  - Layer localisation at the first divergent step: forward (the first layer whose
 *    recomputed output differs from its original output, value by value), backward (the
 *    first layer, in backward order, whose output gradient differs from the plain run's),
 *    state (buffers after the original forward vs after the recomputation) and the RNG
 *    streams the original and recomputed forwards drew.
 *  - Causes: typed records with the evidence (findings.h), worded by reports/; unknown
 *    causes are reported as such.
 *
 * Recording trades time for memory: it is confined to the culprit segments and to one
 * step, and originals are freed as soon as they have been compared.
 */
#ifndef CK_BISECT_H
#define CK_BISECT_H

#include "harness/verify/judge.h"
#include "harness/verify/run_case.h"
#include "harness/engine/train.h"
#include "harness/verify/result.h"
#include "harness/verify/training.h"

typedef struct {
    bool noise_floor;  /* run plain twice */
    bool localise;     /* segment search and layer localisation when the runs diverge */
    ck_training_log *log; /* counts the trainings; NULL: not counted */
    /* each training's step and layer, as run_case's progress (NULL: none); run_label is
     * "bisect N <its role>" (plain, search, locate ckpt, ...); fraction stays 1: how many
     * trainings the search takes is not known in advance */
    ck_progress_fn progress;
    void *progress_user;
} ck_bisect_opts;

/* Runs the analysis for a case whose ordinary comparison is in res (from ck_run_case);
 * attaches the result to res->bisect and, with a noise floor, may relax res's verdict to
 * `close` when every difference is within the floor. */
ck_status ck_bisect(ck_backend *b, const ck_graph *g, ck_dtype dtype, const ck_bisect_opts *o,
                    ck_result *res, ck_error *err);

/* Trains the checkpointed configuration keeping the originals of recomputed outputs and
 * comparing them value by value with the recomputed ones (--verify-recompute): fills
 * res->recompute_checks. A recomputation that differs fails the case on its own. */
ck_status ck_verify_recompute(ck_backend *b, const ck_graph *g, ck_dtype dtype, ck_result *res,
                              ck_error *err);
/* The same, counting its training in log (may be NULL). */
ck_status ck_verify_recompute_ex(ck_backend *b, const ck_graph *g, ck_dtype dtype,
                                 ck_training_log *log, ck_result *res, ck_error *err);

/* A value-level recompute check of one segment riding along a training (segment by
 * segment, segmentwise.h): during the forward the original outputs of that segment's layers
 * are copied to the host, compared value by value with their recomputation in backward and
 * freed once compared, every step; so the host holds one segment's outputs at a time. The
 * training's plan must checkpoint that segment. */
typedef struct ck_recompute_watch ck_recompute_watch;

ck_status ck_recompute_watch_new(ck_backend *b, const ck_graph *g, const ck_plan *full,
                                 int segment, ck_recompute_watch **out, ck_error *err);
/* The executor observer (ck_exec_observer) of the watched training; user is the watch. */
ck_status ck_recompute_watch_observe(void *user, const ck_exec_event_info *ev, ck_error *err);
/* Appends the watch's checks to res->recompute_checks (counting mismatches). */
ck_status ck_recompute_watch_take(ck_recompute_watch *w, ck_result *res, ck_error *err);
void ck_recompute_watch_free(ck_recompute_watch *w);

#endif
