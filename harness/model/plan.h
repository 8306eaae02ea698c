/*
 * Segment planning: which layers the checkpointed run recomputes, and which layer outputs
 * it drops after a segment's forward.
 *
 * Segments are contiguous, inclusive layer ranges in topological order. A layer's output
 * is dropped after its segment's forward when every consumer lies inside the same segment
 * (and it is not the model output); outputs that cross a segment boundary (skip
 * connections, the segment's own output) are kept. Backward reaching a segment's last
 * layer recomputes the whole segment from its saved inputs, as torch.utils.checkpoint does.
 */
#ifndef CK_PLAN_H
#define CK_PLAN_H

#include "harness/model/graph.h"

typedef struct {
    int first, last; /* inclusive layer indices */
} ck_segment;

typedef struct {
    int n_segments;
    ck_segment *segments;
    int *segment_of; /* per layer: its segment index, or -1 */
    bool *dropped;   /* per layer: output dropped after its segment's forward */
    int n_dropped;
} ck_plan;

/* Resolves the case's checkpoint spec (segments / every k / sqrt) against the graph. */
ck_status ck_plan_build(const ck_graph *g, ck_plan *p, ck_error *err);
/* The same, keeping only the segments whose `enabled` entry is true (bisect's search over
 * which segments are checkpointed); enabled has one entry per segment of the full plan. */
ck_status ck_plan_build_subset(const ck_graph *g, const bool *enabled, ck_plan *p,
                               ck_error *err);
void ck_plan_free(ck_plan *p);

#endif
