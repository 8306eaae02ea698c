/* Segment planning: resolve the checkpoint spec, mark the outputs a segment may drop. */
#include "harness/model/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static ck_status resolve_segments(const ck_graph *g, ck_plan *p, ck_error *err)
{
    const ck_case *c = g->cs;
    int n = g->n;
    switch (c->ckpt_kind) {
    case CK_CKPT_SEGMENTS:
        p->n_segments = c->n_segments;
        break;
    case CK_CKPT_EVERY:
        if (c->ckpt_every < 1)
            return ck_fail(err, CK_ERR_INPUT, "%s: checkpoint.every: must be >= 1", c->path);
        p->n_segments = (n + c->ckpt_every - 1) / c->ckpt_every;
        break;
    case CK_CKPT_SQRT:
        p->n_segments = (int)ceil(sqrt((double)n));
        if (p->n_segments > n)
            p->n_segments = n;
        break;
    }
    p->segments = calloc((size_t)(p->n_segments > 0 ? p->n_segments : 1), sizeof *p->segments);
    if (!p->segments)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory planning segments");
    for (int s = 0; s < p->n_segments; s++) {
        ck_segment *seg = &p->segments[s];
        switch (c->ckpt_kind) {
        case CK_CKPT_SEGMENTS:
            seg->first = c->segments[s][0];
            seg->last = c->segments[s][1];
            break;
        case CK_CKPT_EVERY:
            seg->first = s * c->ckpt_every;
            seg->last = seg->first + c->ckpt_every - 1 < n ? seg->first + c->ckpt_every - 1 : n - 1;
            break;
        case CK_CKPT_SQRT: /* as even as possible: [s n / k, (s + 1) n / k) */
            seg->first = (int)((int64_t)s * n / p->n_segments);
            seg->last = (int)((int64_t)(s + 1) * n / p->n_segments) - 1;
            break;
        }
        if (seg->first < 0 || seg->last >= n || seg->first > seg->last ||
            (s > 0 && seg->first <= p->segments[s - 1].last))
            return ck_fail(err, CK_ERR_INPUT, "%s: checkpoint: segment %d [%d, %d] is invalid",
                           c->path, s, seg->first, seg->last);
    }
    return CK_OK;
}

/* Marks segment membership and the outputs each segment may drop. */
static void mark_segments(const ck_graph *g, ck_plan *p)
{
    for (int i = 0; i < g->n; i++) {
        p->segment_of[i] = -1;
        p->dropped[i] = false;
    }
    p->n_dropped = 0;
    for (int s = 0; s < p->n_segments; s++) {
        const ck_segment *seg = &p->segments[s];
        for (int k = seg->first; k <= seg->last; k++) {
            p->segment_of[k] = s;
            /* last_consumer == n is the loss: the model output is always kept */
            p->dropped[k] = g->nodes[k].last_consumer <= seg->last && g->nodes[k].n_consumers > 0;
            p->n_dropped += p->dropped[k];
        }
    }
}

ck_status ck_plan_build_subset(const ck_graph *g, const bool *enabled, ck_plan *p,
                               ck_error *err)
{
    ck_status st = ck_plan_build(g, p, err);
    if (st != CK_OK)
        return st;
    int kept = 0;
    for (int s = 0; s < p->n_segments; s++)
        if (enabled[s])
            p->segments[kept++] = p->segments[s];
    p->n_segments = kept;
    mark_segments(g, p);
    return CK_OK;
}

ck_status ck_plan_build(const ck_graph *g, ck_plan *p, ck_error *err)
{
    memset(p, 0, sizeof *p);
    ck_status st = CK_ERR_NOMEM;
    int n = g->n;
    p->segment_of = malloc((size_t)n * sizeof *p->segment_of);
    p->dropped = calloc((size_t)n, sizeof *p->dropped);
    if (!p->segment_of || !p->dropped) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory planning segments");
        goto fail;
    }
    if ((st = resolve_segments(g, p, err)) != CK_OK)
        goto fail;
    mark_segments(g, p);
    return CK_OK;
fail:
    ck_plan_free(p);
    return st;
}

void ck_plan_free(ck_plan *p)
{
    free(p->segments);
    free(p->segment_of);
    free(p->dropped);
    memset(p, 0, sizeof *p);
}
