/*
 * Which forward tensors the executor keeps, and for how long: computed once per run from
 * the graph, the segment plan and each op's definition row ("what its backward reads",
 * op_def.h), so the executor keeps only what a backward pass will read, as PyTorch's
 * autograd keeps only what each op saved for backward.
 *
 * A layer output lives from its forward until the first of these that applies:
 *  - right after the forward of its last consumer, when nothing later reads it: no
 *    consumer's backward reads its inputs, its own backward does not read its output, it is
 *    not the model output (the loss reads that), and (checkpointed runs) no segment that it
 *    feeds from outside recomputes from it;
 *  - otherwise after the backward of its first consumer (every consumer's backward has then
 *    run), unless its own backward reads it: then after its own backward.
 * In a checkpointed run, the output of a segment's layer that is kept for consumers outside
 * the segment is freed as soon as the last of them needs it (its backward when it reads its
 * inputs, or the recomputation of its segment): its own segment recomputes it anyway
 * before its backward, so it does not wait for that.
 * Inside a recomputed segment the same rule applies to the segment's own consumers only
 * (consumers after the segment have run their backward already). A saved tensor (batch
 * statistics) is freed right after its forward when the op's backward does not read it,
 * and after a segment's forward with the segment's other tensors.
 *
 * The backward pass is handed only what the row declares: an input, output or saved
 * tensor the row does not list reaches the kernel with data NULL, so a wrong row fails
 * loudly in every test instead of reading freed memory.
 */
#ifndef CK_LIVENESS_H
#define CK_LIVENESS_H

#include "harness/model/plan.h"

typedef struct {
    int n;
    unsigned *reads;           /* per layer: its op's ck_backward_reads flags */
    bool *kept_after_forward;  /* per layer: its output outlives its last forward consumer */
    bool *needed_in_recompute; /* per layer in a segment: its output outlives its last
                                  in-segment consumer during that segment's recomputation */
    int *last_segment_consumer; /* per layer in a segment: its last consumer inside the
                                   segment, or -1 */
    int *first_consumer;       /* per layer: its lowest consumer index, or -1 */
    /* per layer of a checkpoint segment whose output is read from outside the segment
       (checkpointed runs): the layer after whose backward, or after whose recomputed
       forward, that kept output is freed (its own segment recomputes it before its
       backward); -1 when the other rule applies */
    int *release_after_backward;
    int *release_after_recompute;
    /* per layer: a two-input add whose inputs may share its output gradient's buffer as
       their gradients (ck_liveness_build: the higher input has no other consumer, and no
       other consumer of the lower one runs its backward before the higher one's) */
    bool *add_shares_gradient;
} ck_liveness;

ck_status ck_liveness_build(const ck_graph *g, const ck_plan *plan, ck_liveness *lv,
                            ck_error *err);
void ck_liveness_free(ck_liveness *lv);

#endif
