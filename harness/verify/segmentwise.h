/*
 * Plain-equivalence segment by segment: for a model whose plain run does not fit (or on
 * request, run --plain segment-by-segment), the harness never holds the whole plain run.
 * It trains the checkpointed configuration and, for each segment s in turn, a run in which
 * only s keeps its forward activations (the full plan without s: every other segment is
 * still checkpointed, so its peak is at most the checkpointed run's plus what s holds), and
 * compares every step's loss, gradients, parameters and buffers of each such run with the
 * fully checkpointed run. All of them train in lockstep, one step at a time, each judged and
 * its tensors dropped before the next step: each run's activations are released at the end
 * of its step, so activation memory peaks at the largest single run; the runs' models
 * (parameters, gradients, optimizer state) are all held.
 *
 * Why this proves what plain vs checkpointed proves, for deterministic segments, and what
 * it cannot see: docs/memory.md ("Verifying what fits only with checkpointing").
 *
 * A low-precision case's fp32 references train checkpointed and judge the checkpointed run
 * (lowp_refs.h). With --verify-recompute the checkpointed run checks segment 0's
 * recomputation value by value against its own originals, and the run keeping segment s
 * checks segment s+1's: every segment once, the host holding one segment's originals at a
 * time, no extra training.
 */
#ifndef CK_SEGMENTWISE_H
#define CK_SEGMENTWISE_H

#include "harness/verify/result.h"
#include "harness/verify/run_case.h"

typedef struct {
    const ck_case_run_opts *run;  /* progress, the precision check and its override, log;
                                     dumps are not supported (no plain run to dump) */
    ck_segmentwise_reason reason; /* recorded in the result */
    int64_t memory_limit;         /* the limit that chose it, recorded; 0: none */
    bool verify_recompute;
} ck_segmentwise_opts;

/* The plan of the run that keeps segment `keep`: full without that segment. */
ck_status ck_segmentwise_plan(const ck_graph *g, const ck_plan *full, int keep, ck_plan *out,
                              ck_error *err);

/* Runs the case segment by segment into res (free with ck_result_free): res->equivalence is
 * CK_EQUIVALENCE_SEGMENTS, res->segment_runs holds every run's peak and verdict, and
 * res->tensors the comparison of the first run with the worst verdict (shown_segment_run),
 * which res->plain summarises. */
ck_status ck_run_case_segmentwise(ck_backend *b, const ck_graph *g, ck_dtype dtype,
                                  const ck_segmentwise_opts *o, ck_result *res, ck_error *err);

#endif
