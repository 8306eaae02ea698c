/* Which forward tensors a run keeps and for how long (see liveness.h). */
#include "harness/engine/liveness.h"

#include <stdlib.h>
#include <string.h>

#include "harness/model/op_def.h"

static int segment_of(const ck_plan *plan, int i)
{
    return plan ? plan->segment_of[i] : -1;
}

/* Whether consumer c of src recomputes src itself: both lie in the same segment. */
static bool recomputed_together(const ck_plan *plan, int src, int c)
{
    return segment_of(plan, src) >= 0 && segment_of(plan, src) == segment_of(plan, c);
}

static void mark_consumers(const ck_graph *g, const ck_plan *plan, ck_liveness *lv)
{
    for (int c = 0; c < g->n; c++) {
        const ck_node *nd = &g->nodes[c];
        bool reads_inputs = (lv->reads[c] & CK_BWD_READS_INPUTS) != 0;
        for (int j = 0; j < nd->n_in; j++) {
            int src = nd->in[j];
            if (src < 0)
                continue;
            if (lv->first_consumer[src] < 0 || c < lv->first_consumer[src])
                lv->first_consumer[src] = c;
            if (recomputed_together(plan, src, c)) {
                /* recomputed with its consumer: kept past the segment's forward only when
                   the consumer's backward reads it, during the recomputation */
                if (c > lv->last_segment_consumer[src])
                    lv->last_segment_consumer[src] = c;
                if (reads_inputs)
                    lv->needed_in_recompute[src] = true;
            } else if (reads_inputs || segment_of(plan, c) >= 0) {
                /* read by the consumer's backward, or an input its segment recomputes from */
                lv->kept_after_forward[src] = true;
            }
        }
    }
}

/* A checkpointed run: when is the kept output of a segment's layer src, read from outside
 * its segment, last needed? Its own segment recomputes it before any backward of that
 * segment reads it, so only its outside consumers count: the backward of one that reads its
 * inputs, or the recomputation of another segment holding one. Backward runs from the last
 * layer down; a segment's recomputation runs just before the backward of its last layer. In
 * that order the last need is the one with the smallest key, 2c for consumer c's backward,
 * 2 * last + 1 for the recomputation of a segment ending at `last`; the output is freed
 * right after it (the backward of c, or the recomputed forward of that segment's highest
 * consumer of src). */
static void mark_outside_release(const ck_graph *g, const ck_plan *plan, ck_liveness *lv)
{
    for (int src = 0; plan && src < g->n; src++) {
        int s = plan->segment_of[src];
        if (s < 0)
            continue;
        int best_key = -1, best_layer = -1;
        for (int c = src + 1; c < g->n; c++) {
            const ck_node *nd = &g->nodes[c];
            bool consumes = false;
            for (int j = 0; j < nd->n_in; j++)
                consumes = consumes || nd->in[j] == src;
            int sc = plan->segment_of[c];
            if (!consumes || sc == s)
                continue;
            int key = -1, layer = c;
            if (lv->reads[c] & CK_BWD_READS_INPUTS)
                key = 2 * c;
            else if (sc >= 0)
                key = 2 * plan->segments[sc].last + 1;
            if (key < 0)
                continue;
            /* the same segment's recomputation: free after its highest consumer of src */
            if (best_key < 0 || key < best_key || (key == best_key && layer > best_layer)) {
                best_key = key;
                best_layer = layer;
            }
        }
        if (best_key < 0)
            continue;
        if (best_key % 2 == 0)
            lv->release_after_backward[src] = best_layer;
        else
            lv->release_after_recompute[src] = best_layer;
    }
}

/* A two-input add i = a + b (a < b, distinct layers) passes dy unchanged to both inputs.
 * Their gradients can be one buffer, dy's own, as long as nothing writes to it while both
 * are still read: b has no consumer but i (so nothing adds to its gradient), and every other
 * consumer of a comes before b (so it adds to a's gradient after b's backward, which is the
 * last reader of b's, has run; b's own backward, were b a consumer of a, would not). */
static void mark_shared_add_gradients(const ck_graph *g, ck_liveness *lv)
{
    for (int i = 0; i < g->n; i++) {
        const ck_node *nd = &g->nodes[i];
        if (nd->op.kind != CK_OP_ADD || nd->n_in != 2 || nd->in[0] < 0 || nd->in[1] < 0 ||
            nd->in[0] == nd->in[1])
            continue;
        int a = nd->in[0] < nd->in[1] ? nd->in[0] : nd->in[1];
        int b = nd->in[0] < nd->in[1] ? nd->in[1] : nd->in[0];
        if (g->nodes[b].n_consumers != 1)
            continue;
        bool ok = true;
        for (int c = b; ok && c < g->n; c++) {
            if (c == i)
                continue;
            for (int j = 0; j < g->nodes[c].n_in; j++)
                ok = ok && g->nodes[c].in[j] != a;
        }
        lv->add_shares_gradient[i] = ok;
    }
}

ck_status ck_liveness_build(const ck_graph *g, const ck_plan *plan, ck_liveness *lv,
                            ck_error *err)
{
    memset(lv, 0, sizeof *lv);
    int n = g->n;
    size_t m = (size_t)(n > 0 ? n : 1);
    lv->n = n;
    lv->reads = calloc(m, sizeof *lv->reads);
    lv->kept_after_forward = calloc(m, sizeof *lv->kept_after_forward);
    lv->needed_in_recompute = calloc(m, sizeof *lv->needed_in_recompute);
    lv->last_segment_consumer = malloc(m * sizeof *lv->last_segment_consumer);
    lv->first_consumer = malloc(m * sizeof *lv->first_consumer);
    lv->release_after_backward = malloc(m * sizeof *lv->release_after_backward);
    lv->release_after_recompute = malloc(m * sizeof *lv->release_after_recompute);
    lv->add_shares_gradient = calloc(m, sizeof *lv->add_shares_gradient);
    if (!lv->add_shares_gradient ||!lv->reads || !lv->kept_after_forward || !lv->needed_in_recompute ||
        !lv->last_segment_consumer || !lv->first_consumer || !lv->release_after_backward ||
        !lv->release_after_recompute) {
        ck_liveness_free(lv);
        return ck_fail(err, CK_ERR_NOMEM, "out of memory planning activation lifetimes");
    }
    for (int i = 0; i < n; i++) {
        const ck_op_def *def = ck_op_def_of(g->nodes[i].op.kind);
        if (!def) {
            ck_liveness_free(lv);
            return ck_fail(err, CK_ERR_INTERNAL, "layer %s: op kind %d has no definition",
                           g->nodes[i].spec->name, (int)g->nodes[i].op.kind);
        }
        lv->reads[i] = def->backward_reads;
        lv->last_segment_consumer[i] = -1;
        lv->first_consumer[i] = -1;
        lv->release_after_backward[i] = -1;
        lv->release_after_recompute[i] = -1;
        bool reads_output = (def->backward_reads & CK_BWD_READS_OUTPUT) != 0;
        /* the loss reads the model output; a layer whose backward reads its own output
           keeps it unless its segment recomputes it */
        lv->kept_after_forward[i] = i == n - 1 || (reads_output && segment_of(plan, i) < 0);
        lv->needed_in_recompute[i] = reads_output;
    }
    mark_consumers(g, plan, lv);
    mark_outside_release(g, plan, lv);
    mark_shared_add_gradients(g, lv);
    return CK_OK;
}

void ck_liveness_free(ck_liveness *lv)
{
    free(lv->reads);
    free(lv->kept_after_forward);
    free(lv->needed_in_recompute);
    free(lv->last_segment_consumer);
    free(lv->first_consumer);
    free(lv->release_after_backward);
    free(lv->release_after_recompute);
    free(lv->add_shares_gradient);
    memset(lv, 0, sizeof *lv);
}
