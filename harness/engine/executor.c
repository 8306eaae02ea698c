/* Forward, loss, backward and segment recomputation with activation accounting. */
#include "harness/engine/executor.h"

#include <math.h>
#include "backends/registry.h"
#include "harness/model/op_def.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *make_name(const char *layer, const char *what)
{
    size_t n = strlen(layer) + strlen(what) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s:%s", layer, what);
    return s;
}

ck_status ck_exec_create(ck_exec *e, const ck_exec_config *cfg, ck_error *err)
{
    memset(e, 0, sizeof *e);
    e->cfg = *cfg;
    e->dtype = cfg->model->dtype;
    e->first_other_dtype_layer = -1;
    ck_act_alloc_init(&e->act, cfg->dry_run ? NULL : cfg->b);
    e->act.event_log = cfg->event_log;
    int n = cfg->g->n;
    ck_status st = ck_liveness_build(cfg->g, cfg->plan, &e->live, err);
    if (st != CK_OK) {
        ck_exec_free(e);
        return st;
    }
    e->out = calloc((size_t)n, sizeof *e->out);
    e->dout = calloc((size_t)n, sizeof *e->dout);
    e->saved = calloc((size_t)n, sizeof *e->saved);
    e->grad_shared_with = malloc((size_t)(n > 0 ? n : 1) * sizeof *e->grad_shared_with);
    e->grad_inside = malloc((size_t)(n > 0 ? n : 1) * sizeof *e->grad_inside);
    e->grad_holds = malloc((size_t)(n > 0 ? n : 1) * sizeof *e->grad_holds);
    e->relu_done = calloc((size_t)(n > 0 ? n : 1), sizeof *e->relu_done);
    e->out_inside = malloc((size_t)(n > 0 ? n : 1) * sizeof *e->out_inside);
    e->args = calloc((size_t)n, sizeof *e->args);
    e->master_params = calloc((size_t)n, sizeof *e->master_params);
    e->stash = calloc((size_t)(cfg->plan ? cfg->plan->n_segments : 0) + 1, sizeof *e->stash);
    e->segment_peak =
        calloc((size_t)(cfg->plan ? cfg->plan->n_segments : 0) + 1, sizeof *e->segment_peak);
    if (!e->out || !e->dout || !e->saved || !e->args || !e->stash || !e->master_params ||
        !e->segment_peak || !e->grad_shared_with || !e->grad_inside || !e->grad_holds ||
        !e->relu_done || !e->out_inside)
        goto nomem;
    if (ck_act_finite_init(&e->finite, n, err) != CK_OK) {
        ck_exec_free(e);
        return CK_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        const ck_node *nd = &cfg->g->nodes[i];
        const char *ln = nd->spec->name;
        e->grad_shared_with[i] = -1;
        e->grad_inside[i] = e->grad_holds[i] = e->out_inside[i] = -1;
        e->out[i].name = make_name(ln, "out");
        e->out[i].dtype = e->dtype;
        e->out[i].shape = nd->out_shape;
        e->dout[i].name = make_name(ln, "grad");
        e->dout[i].dtype = e->dtype;
        e->dout[i].shape = nd->out_shape;
        e->saved[i].name = make_name(ln, "saved");
        e->saved[i].dtype = cfg->model->master_dtype; /* statistics stay wide (precision.md) */
        e->saved[i].shape = nd->saved_shape;
        if (!e->out[i].name || !e->dout[i].name || !e->saved[i].name)
            goto nomem;
    }
    return CK_OK;
nomem:
    ck_exec_free(e);
    return ck_fail(err, CK_ERR_NOMEM, "out of memory creating the executor");
}

/* Frees layer i's gradient; a buffer shared with another layer's gradient (a two-input
 * add's inputs) is freed with the last of the two. */
static void free_grad(ck_exec *e, int i)
{
    int holder = e->grad_inside[i];
    if (holder >= 0) { /* i's gradient lives inside the holder's buffer: freed together */
        e->grad_inside[i] = e->grad_holds[holder] = -1;
        e->dout[i].data = NULL;
        ck_act_free_tensor(&e->act, &e->dout[holder]);
        return;
    }
    if (e->grad_holds[i] >= 0) /* still holds another layer's gradient: freed with that */
        return;
    int other = e->grad_shared_with[i];
    if (other >= 0) {
        e->grad_shared_with[i] = e->grad_shared_with[other] = -1;
        if (e->dout[other].data == e->dout[i].data) {
            e->dout[i].data = NULL; /* the other layer owns the buffer now */
            return;
        }
    }
    ck_act_free_tensor(&e->act, &e->dout[i]);
}

static void release_all(ck_exec *e)
{
    for (int i = 0; i < e->cfg.g->n; i++) {
        if (e->out_inside[i] >= 0) { /* inside a later layer's buffer: freed with that */
            e->out[i].data = NULL;
            e->out_inside[i] = -1;
        }
        ck_act_free_tensor(&e->act, &e->out[i]);
        free_grad(e, i);
        ck_act_free_tensor(&e->act, &e->saved[i]);
        e->relu_done[i] = false;
    }
}

void ck_exec_free(ck_exec *e)
{
    if (e->out && e->dout && e->saved && e->grad_shared_with && e->grad_inside && e->grad_holds &&
        e->relu_done && e->out_inside)
        release_all(e);
    for (int i = 0; e->cfg.g && i < e->cfg.g->n; i++) {
        if (e->out)
            free((char *)e->out[i].name);
        if (e->dout)
            free((char *)e->dout[i].name);
        if (e->saved)
            free((char *)e->saved[i].name);
    }
    free(e->out);
    free(e->dout);
    free(e->saved);
    free(e->grad_shared_with);
    free(e->grad_inside);
    free(e->grad_holds);
    free(e->relu_done);
    free(e->out_inside);
    free(e->args);
    free(e->master_params);
    free(e->stash);
    ck_act_finite_free(&e->finite);
    free(e->segment_peak);
    ck_liveness_free(&e->live);
    memset(e, 0, sizeof *e);
}

/* ---------------------------------------------------------------------------------------
 * Forward of one layer
 * --------------------------------------------------------------------------------------- */

static bool op_draws_random(const ck_node *nd)
{
    return nd->draw_elems > 0;
}

/* The stream a dropout/noise layer draws from under the RNG policy; advances the global
 * stream for stateful/stash. */
static ck_rng_stream draw_stream(ck_exec *e, int layer, int step)
{
    const ck_node *nd = &e->cfg.g->nodes[layer];
    ck_rng_purpose purpose = nd->draw_uniform ? CK_PURPOSE_DROPOUT : CK_PURPOSE_NOISE;
    if (e->cfg.rng == CK_RNG_COUNTER)
        return ck_rng_keyed(e->cfg.seed, (uint32_t)layer, purpose, (uint32_t)step);
    ck_rng_stream s = ck_rng_keyed(e->cfg.seed, CK_RNG_NO_LAYER, CK_PURPOSE_GLOBAL, 0);
    s.offset = e->global_offset;
    uint64_t n = (uint64_t)nd->draw_elems;
    e->global_offset += nd->draw_uniform ? ck_rng_uniform_words(n) : ck_rng_normal_words(n);
    return s;
}

/* The calibration run's rounding of one tensor (executor.h: round_bits, perturb_rel), done
 * by the backend where the tensor lives (backend.h's calibration_round). */
static ck_status perturb_tensor(ck_exec *e, ck_tensor *t, int layer, int step, uint32_t which,
                                ck_error *err)
{
    if (e->cfg.round_bits <= 0 || t->dtype != CK_F32 || !t->data || e->cfg.dry_run)
        return CK_OK;
    ck_rng_stream s = ck_rng_keyed(e->cfg.perturb_seed, (uint32_t)layer, CK_PURPOSE_CALIBRATION,
                                   ((uint32_t)step << 1) | which);
    return e->cfg.b->calibration_round(e->cfg.b, t, e->cfg.round_bits, e->cfg.perturb_rel, &s,
                                       err);
}

/* Scans layer i's freshly produced output (backward false) or its complete output gradient
 * once for NaN/Inf (act_finite.h): where it lives when the backend can count there
 * (CK_PROC_COUNT_NONFINITE), else through a host copy. */
static ck_status check_finite(ck_exec *e, int i, int step, const ck_tensor *t, bool backward,
                              bool recompute, ck_error *err)
{
    if (!t->data || e->cfg.dry_run) /* a dry run (plan) computes nothing */
        return CK_OK;
    ck_act_finite *f = &e->finite;
    union {
        void *p;
        ck_count_nonfinite_fn count;
    } where = {ck_backend_proc(e->cfg.b, CK_PROC_COUNT_NONFINITE)};
    if (where.p) { /* counted where the tensor lives: no host copy */
        int64_t nan, inf, first;
        bool first_nan;
        ck_status st = where.count(e->cfg.b, t, &nan, &inf, &first, &first_nan, err);
        if (st == CK_OK)
            ck_act_finite_record(f, i, step, backward, recompute, nan, inf, first, first_nan);
        return st;
    }
    size_t bytes = ck_tensor_bytes(t);
    if (bytes > f->scratch_bytes) {
        void *p = realloc(f->scratch, bytes);
        if (!p)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory checking %s for NaN/Inf", t->name);
        f->scratch = p;
        f->scratch_bytes = bytes;
    }
    ck_status st = e->cfg.b->download(e->cfg.b, t, f->scratch, err);
    if (st == CK_OK)
        ck_act_finite_add(f, i, step, backward, recompute, t->dtype, ck_shape_numel(&t->shape),
                          f->scratch);
    return st;
}

/* Whether the backend's backward of this op writes parameter gradients fresh
 * (ck_op_grads.dparams_fresh, capability CK_PROC_PARAMS_FRESH). */
static bool params_fresh(ck_exec *e, ck_op_kind kind)
{
    union {
        void *p;
        ck_params_fresh_fn fresh;
    } u = {ck_backend_proc(e->cfg.b, CK_PROC_PARAMS_FRESH)};
    return u.p && u.fresh(e->cfg.b, kind);
}

/* Element-wise ops whose kernels (ref, cpu, cuda) read element k of every input before
 * writing element k of the output, so the output may take over an input's buffer. */
static bool runs_in_place(ck_op_kind kind)
{
    return kind == CK_OP_RELU || kind == CK_OP_ADD || kind == CK_OP_DROPOUT ||
           kind == CK_OP_GAUSSIAN_NOISE;
}

/* The input whose buffer layer i's output takes over, or -1: an input of the output's dtype
 * and shape, named once, that would be freed right after this forward anyway (liveness.h),
 * so the op is not stored twice (a relu after a conv, a dropout, a residual add). */
static int in_place_source(const ck_exec *e, int i, bool recompute, ck_dtype want)
{
    const ck_node *nd = &e->cfg.g->nodes[i];
    const ck_liveness *lv = &e->live;
    if (!runs_in_place(nd->op.kind) || e->out[i].data)
        return -1;
    for (int j = 0; j < nd->n_in; j++) {
        int src = nd->in[j];
        bool once = src >= 0;
        for (int k = 0; once && k < nd->n_in; k++)
            once = k == j || nd->in[k] != src;
        if (!once || !e->out[src].data || e->out[src].dtype != want ||
            !ck_shape_equal(&e->out[src].shape, &nd->out_shape))
            continue;
        bool last_use;
        if (!recompute) {
            last_use = e->cfg.g->nodes[src].last_consumer == i && !lv->kept_after_forward[src];
        } else {
            const ck_plan *plan = e->cfg.plan;
            last_use = plan->segment_of[src] == plan->segment_of[i] &&
                       lv->last_segment_consumer[src] == i && !lv->needed_in_recompute[src];
        }
        if (last_use)
            return src;
    }
    return -1;
}

static int concat_inside_target(const ck_exec *e, int i, bool recompute);
static ck_status place_inside_concat(ck_exec *e, int i, int cat, ck_error *err);
static ck_status concat_forward_inside(ck_exec *e, int i, const ck_op_io *io, ck_error *err);

static ck_status forward_layer(ck_exec *e, int i, int step, const ck_tensor *input,
                               bool recompute, ck_error *err)
{
    const ck_node *nd = &e->cfg.g->nodes[i];
    ck_status st;
    /* autocast_recompute `drop`: the recomputation forgets the low dtype and runs in fp32 on
     * the fp32 master weights, as a recompute that lost its autocast state does */
    bool low = e->dtype == CK_F16 || e->dtype == CK_BF16;
    bool drop = recompute && low && e->cfg.autocast == CK_AUTOCAST_DROP;
    ck_dtype want = drop ? CK_F32 : e->dtype;
    if (e->out[i].data && e->out[i].dtype != want)
        ck_act_free_tensor(&e->act, &e->out[i]);
    e->out[i].dtype = want;
    int inside = concat_inside_target(e, i, recompute);
    if (inside >= 0 && (st = place_inside_concat(e, i, inside, err)) != CK_OK)
        goto fail;
    int shared = inside >= 0 ? -1 : in_place_source(e, i, recompute, want);
    ck_tensor shared_in; /* the input as the kernel sees it, its buffer now the output's */
    if (shared >= 0) {
        shared_in = e->out[shared];
        e->out[i].data = shared_in.data; /* ownership moves: no allocation, no free */
        e->out[shared].data = NULL;
    }
    if (!e->out[i].data && (st = ck_act_alloc_tensor(&e->act, &e->out[i], err)) != CK_OK)
        goto fail;
    if (nd->has_saved && !e->saved[i].data &&
        (st = ck_act_alloc_tensor(&e->act, &e->saved[i], err)) != CK_OK)
        goto fail;

    ck_op_io io;
    memset(&io, 0, sizeof io);
    io.n_in = nd->n_in;
    for (int j = 0; j < nd->n_in; j++) {
        int src = nd->in[j];
        io.in[j] = src < 0 ? input : src == shared ? &shared_in : &e->out[src];
        if (!io.in[j]->data) {
            st = ck_fail(err, CK_ERR_INTERNAL, "input %s of layer %s is not live",
                         src < 0 ? "(the model input)" : e->cfg.g->nodes[src].spec->name,
                         nd->spec->name);
            goto fail;
        }
    }
    io.out = &e->out[i];
    io.saved = nd->has_saved ? &e->saved[i] : NULL;
    e->master_params[i] = drop;
    if (drop) {
        e->recomputed_other_dtype++;
        if (e->first_other_dtype_layer < 0)
            e->first_other_dtype_layer = i;
    }
    if (!e->cfg.dry_run)
        ck_model_bind(e->cfg.model, i, drop, &io, NULL);

    ck_fwd_args *a = &e->args[i];
    memset(a, 0, sizeof *a);
    a->recompute = recompute;
    a->update_running_stats = !e->cfg.freeze_buffers && !nd->op.eval &&
                              (!recompute || e->cfg.bn == CK_BN_UPDATE);
    if (op_draws_random(nd))
        a->rng = draw_stream(e, i, step);

    /* a concat whose first input was written inside its buffer moves it into place */
    bool holds_first = nd->n_in > 0 && nd->in[0] >= 0 && e->out_inside[nd->in[0]] == i;
    if (holds_first && (st = concat_forward_inside(e, i, &io, err)) != CK_OK)
        goto fail;
    if (e->cfg.dry_run)
        return CK_OK;
    if ((!holds_first && (st = e->cfg.b->forward(e->cfg.b, &nd->op, a, &io, err)) != CK_OK) ||
        (st = perturb_tensor(e, &e->out[i], i, step, 0, err)) != CK_OK ||
        (st = check_finite(e, i, step, &e->out[i], false, recompute, err)) != CK_OK)
        goto fail;
    if (e->cfg.observer) {
        ck_exec_event_info ev = {.ev = CK_EVENT_FORWARD, .layer = i, .step = step,
                                 .recompute = recompute, .tensor = &e->out[i], .io = &io,
                                 .args = a};
        if ((st = e->cfg.observer(e->cfg.observer_user, &ev, err)) != CK_OK)
            goto fail;
    }
    return CK_OK;
fail:
    ck_error_prefix(err, "layer %s (%s)%s", nd->spec->name, nd->spec->op_name,
                    recompute ? " during recomputation" : "");
    return st;
}

/* Frees what a segment does not keep, right after its forward: the outputs used only inside
 * it (freed already after their last consumer) and every saved tensor (the recomputation
 * makes them again). */
static void drop_segment_internals(ck_exec *e, const ck_segment *seg)
{
    for (int k = seg->first; k <= seg->last; k++) {
        if (e->cfg.plan->dropped[k])
            ck_act_free_tensor(&e->act, &e->out[k]);
        ck_act_free_tensor(&e->act, &e->saved[k]);
    }
}

/* Whether input j of node nd is the first occurrence of its producer in the input list
 * (add(x, x) names x twice; it is freed once). */
static bool first_mention(const ck_node *nd, int j)
{
    for (int k = 0; k < j; k++)
        if (nd->in[k] == nd->in[j])
            return false;
    return true;
}

/* After layer i's forward (not a recomputation): frees every input whose last forward
 * consumer i is and that nothing later reads (liveness.h), its own output when nobody
 * consumes it and nothing reads it, and its saved tensor when its backward does not read it. */
static void free_after_forward(ck_exec *e, int i)
{
    const ck_node *nd = &e->cfg.g->nodes[i];
    const ck_liveness *lv = &e->live;
    for (int j = 0; j < nd->n_in; j++) {
        int src = nd->in[j];
        if (src >= 0 && first_mention(nd, j) && e->cfg.g->nodes[src].last_consumer == i &&
            !lv->kept_after_forward[src])
            ck_act_free_tensor(&e->act, &e->out[src]);
    }
    if (nd->n_consumers == 0 && !lv->kept_after_forward[i])
        ck_act_free_tensor(&e->act, &e->out[i]);
    if (!(lv->reads[i] & CK_BWD_READS_SAVED))
        ck_act_free_tensor(&e->act, &e->saved[i]);
}

/* The same inside the recomputation of segment s: only the segment's own consumers count
 * (the consumers after it have run their backward). */
static void free_after_recompute(ck_exec *e, int i, int s)
{
    const ck_node *nd = &e->cfg.g->nodes[i];
    const ck_liveness *lv = &e->live;
    const ck_plan *plan = e->cfg.plan;
    for (int j = 0; j < nd->n_in; j++) {
        int src = nd->in[j];
        if (src >= 0 && first_mention(nd, j) && plan->segment_of[src] == s &&
            lv->last_segment_consumer[src] == i && !lv->needed_in_recompute[src])
            ck_act_free_tensor(&e->act, &e->out[src]);
        /* kept for this segment's recomputation by an earlier segment that recomputes it */
        if (src >= 0 && first_mention(nd, j) && lv->release_after_recompute[src] == i)
            ck_act_free_tensor(&e->act, &e->out[src]);
    }
    if (lv->last_segment_consumer[i] < 0 && !lv->needed_in_recompute[i])
        ck_act_free_tensor(&e->act, &e->out[i]);
    if (!(lv->reads[i] & CK_BWD_READS_SAVED))
        ck_act_free_tensor(&e->act, &e->saved[i]);
}


/* Runs a segment forward again from its kept inputs, before its backward. */
static ck_status recompute_segment(ck_exec *e, int s, int step, const ck_tensor *input,
                                   ck_error *err)
{
    const ck_segment *seg = &e->cfg.plan->segments[s];
    uint64_t resume = e->global_offset;
    /* an output of the segment still live (kept for the loss, or for a backward after the
       segment, all of which have run) is written again by its recomputation before anything
       reads it: freed now, it does not sit beside the layers recomputed before it, and an
       in-place layer can take over its input's buffer instead */
    for (int k = seg->first; k <= seg->last; k++)
        ck_act_free_tensor(&e->act, &e->out[k]);
    if (e->cfg.rng == CK_RNG_STASH)
        e->global_offset = e->stash[s]; /* replay the draws made by the original forward */
    for (int k = seg->first; k <= seg->last; k++) {
        ck_status st = forward_layer(e, k, step, input, true, err);
        if (st != CK_OK)
            return st;
        free_after_recompute(e, k, s);
        e->recomputed_layers++;
    }
    if (e->cfg.rng == CK_RNG_STASH)
        e->global_offset = resume; /* like preserve_rng_state: the stream outside is untouched */
    ck_act_alloc_mark(&e->act, CK_MARK_RECOMPUTE_END);
    return CK_OK;
}

/* ---------------------------------------------------------------------------------------
 * Backward of one layer
 * --------------------------------------------------------------------------------------- */

static ck_status ensure_grad(ck_exec *e, int i, ck_error *err)
{
    if (e->dout[i].data)
        return CK_OK;
    ck_status st = ck_act_alloc_tensor(&e->act, &e->dout[i], err);
    if (st == CK_OK && !e->cfg.dry_run)
        st = e->cfg.b->zero(e->cfg.b, &e->dout[i], err);
    return st;
}

/* Whether layer i's backward writes its input's first gradient as if into zeros (din0_fresh,
 * ck_backward_dx_fresh in backend.h) instead of having the buffer zeroed: not in a run with
 * its own gradient buffers, the reference the buffer reuse is tested against. */
static bool writes_dx_fresh(const ck_exec *e, int i)
{
    return !e->cfg.own_gradient_buffers && ck_backward_dx_fresh(e->cfg.g->nodes[i].op.kind);
}

/* Sets g->din[j] to input src's gradient buffer for layer i's backward: ensure_grad's, or,
 * where a ck_backward_dx_fresh layer (backend.h) gives its input the first gradient, a new
 * buffer left as it is, which the kernel writes as if it were zeroed (writes_dx_fresh): the
 * same bits without the zero pass. */
static ck_status input_grad_buffer(ck_exec *e, int i, int j, int src, ck_op_grads *g,
                                   ck_error *err)
{
    if (j == 0 && !e->dout[src].data && writes_dx_fresh(e, i)) {
        CK_TRY(ck_act_alloc_tensor(&e->act, &e->dout[src], err));
        g->din0_fresh = true;
    } else {
        CK_TRY(ensure_grad(e, src, err));
    }
    g->din[j] = &e->dout[src];
    return CK_OK;
}

/* The canary policies.recompute_filter "fp32_only" (a checkpoint wrapper that tracks only
 * fp32 tensors): in a checkpointed run, layer i of a segment passes no gradient to an input
 * src from outside its segment when that input is fp16/bf16. */
static bool filtered_input(const ck_exec *e, int i, int src)
{
    const ck_plan *plan = e->cfg.plan;
    if (!plan || !e->cfg.g->cs->recompute_fp32_only)
        return false;
    int s = plan->segment_of[i];
    if (s < 0 || src >= plan->segments[s].first)
        return false;
    if (e->out[src].dtype != CK_F16 && e->out[src].dtype != CK_BF16)
        return false;
    return true;
}

/* Replaces, in io, every tensor the op's backward does not read by a copy without data
 * (into the caller's hidden_* storage); fails when a tensor it reads is not live. */
static ck_status hide_unread(ck_op_io *io, unsigned reads, ck_tensor *hidden_in,
                             ck_tensor *hidden_out, ck_tensor *hidden_saved, ck_error *err)
{
    for (int j = 0; j < io->n_in; j++) {
        if (reads & CK_BWD_READS_INPUTS) {
            if (!io->in[j]->data)
                return ck_fail(err, CK_ERR_INTERNAL, "input %s is not live for backward",
                               io->in[j]->name ? io->in[j]->name : "(the model input)");
            continue;
        }
        hidden_in[j] = *io->in[j];
        hidden_in[j].data = NULL;
        io->in[j] = &hidden_in[j];
    }
    if (reads & CK_BWD_READS_OUTPUT) {
        if (!io->out->data)
            return ck_fail(err, CK_ERR_INTERNAL, "output %s is not live for backward",
                           io->out->name);
    } else {
        *hidden_out = *io->out;
        hidden_out->data = NULL;
        io->out = hidden_out;
    }
    if (io->saved && (reads & CK_BWD_READS_SAVED)) {
        if (!io->saved->data)
            return ck_fail(err, CK_ERR_INTERNAL, "saved tensor %s is not live for backward",
                           io->saved->name);
    } else if (io->saved) {
        *hidden_saved = *io->saved;
        hidden_saved->data = NULL;
        io->saved = hidden_saved;
    }
    return CK_OK;
}

/* The input whose gradient layer i's backward writes into its own output gradient's buffer,
 * or -1: an element-wise activation (ck_backward_writes_fresh, backend.h) whose input gets
 * its first gradient contribution here (no buffer yet) in the output gradient's dtype and
 * shape. That buffer is dead after this backward anyway, so the input's gradient is not a
 * third tensor beside the output and its gradient; the kernel starts every element at +0,
 * so the bits are those of a zeroed buffer. */
static int fresh_grad_source(const ck_exec *e, int i)
{
    const ck_node *nd = &e->cfg.g->nodes[i];
    /* a one-input add adds a constant (broadcast kernels, which do not take the flag) */
    if (!ck_backward_writes_fresh(nd->op.kind) || nd->n_in != 1 || nd->op.kind == CK_OP_ADD ||
        e->cfg.own_gradient_buffers)
        return -1;
    int src = nd->in[0];
    if (src < 0 || e->grad_shared_with[i] >= 0 || e->grad_inside[i] >= 0 ||
        filtered_input(e, i, src) || e->dout[src].data ||
        e->dout[src].dtype != e->dout[i].dtype ||
        !ck_shape_equal(&e->dout[src].shape, &e->dout[i].shape))
        return -1;
    return src;
}

/* Whether layer i, a two-input add (liveness.h: add_shares_gradient), hands its output
 * gradient's buffer to both inputs as their gradients (dx_a = dx_b = dy, made +0 + dy by the
 * kernel, ck_op_grads.din0_fresh): neither has a gradient yet, both have its dtype and
 * shape, no run rounds gradients in place (the calibration run, which would round the
 * shared buffer twice), and i's own gradient is not already one buffer with another
 * layer's (a chain of adds, t = s + c with s = a + b: grad_shared_with pairs layers, and
 * a buffer of four owners would be freed while three still read it). */
static bool shares_add_gradient(const ck_exec *e, int i)
{
    const ck_node *nd = &e->cfg.g->nodes[i];
    if (!e->live.add_shares_gradient[i] || e->cfg.round_bits > 0 ||
        e->grad_shared_with[i] >= 0 || e->grad_inside[i] >= 0 || e->cfg.own_gradient_buffers)
        return false;
    for (int j = 0; j < 2; j++) {
        int src = nd->in[j];
        if (filtered_input(e, i, src) || e->dout[src].data ||
            e->dout[src].dtype != e->dout[i].dtype ||
            !ck_shape_equal(&e->dout[src].shape, &e->dout[i].shape))
            return false;
    }
    return true;
}

/* Whether layer src's output is freed right after layer i's backward (i consumes it): every
 * consumer's backward has then run, and no later backward reads it — its own does not read
 * its output, or (the kept copy of a segment's output read from outside the segment) this
 * is the last of its outside uses (liveness.h). */
static bool input_dies_after_backward(const ck_exec *e, int i, int src)
{
    const ck_liveness *lv = &e->live;
    bool outside_rule = (lv->release_after_backward[src] >= 0 ||
                         lv->release_after_recompute[src] >= 0) &&
                        e->cfg.plan->segment_of[i] != e->cfg.plan->segment_of[src];
    return outside_rule ? lv->release_after_backward[src] == i
                        : lv->first_consumer[src] == i && !(lv->reads[src] & CK_BWD_READS_OUTPUT);
}

/* The input whose gradient layer i's backward writes over that input's own buffer, or -1:
 * a linear or convolution (ck_backward_dx_over_input, backend.h) whose input gets its first
 * gradient here (no buffer yet) in the input's own dtype and shape, and whose buffer dies
 * with this backward anyway (input_dies_after_backward). The backward then runs as two
 * calls: the weight and bias gradients first, reading the input; then the buffer is zeroed
 * and the input gradient, which does not read the input, is accumulated into it — the bits
 * of a fresh zeroed gradient, without a buffer of its own beside the input. */
static int dx_over_input_source(const ck_exec *e, int i)
{
    const ck_node *nd = &e->cfg.g->nodes[i];
    if (!ck_backward_dx_over_input(nd->op.kind) || nd->n_in != 1 || e->cfg.own_gradient_buffers)
        return -1;
    int src = nd->in[0];
    if (src < 0 || e->grad_shared_with[src] >= 0 || filtered_input(e, i, src) ||
        e->dout[src].data || !e->out[src].data || e->out[src].dtype != e->dout[src].dtype ||
        !ck_shape_equal(&e->out[src].shape, &e->dout[src].shape) ||
        !input_dies_after_backward(e, i, src))
        return -1;
    return src;
}

/* The first of a split backward's two calls (dx over its input, or a fused relu): the
 * weight and bias gradients, which read the input, with no input gradient requested. */
static ck_status backward_weight_grads(ck_exec *e, int i, ck_op_io *io, ck_op_grads *g,
                                       ck_error *err)
{
    ck_backend *b = e->cfg.b;
    g->din[0] = NULL;
    if (e->cfg.dry_run || (!g->dweight && !g->dbias))
        return CK_OK;
    return b->backward(b, &e->cfg.g->nodes[i].op, &e->args[i], io, g, err);
}

/* The second call: only the input gradient, into din, with x as the input the kernel sees
 * (its data NULL when the input gradient must not read it). */
static ck_status backward_input_grad(ck_exec *e, int i, const ck_op_io *io, const ck_op_grads *g,
                                     const ck_tensor *x, ck_tensor *din, bool relu_over,
                                     ck_error *err)
{
    ck_backend *b = e->cfg.b;
    ck_op_io dx_io = *io;
    dx_io.in[0] = x;
    ck_op_grads dx_g = *g;
    dx_g.din[0] = din;
    dx_g.dweight = dx_g.dbias = NULL;
    dx_g.dparams_fresh = false;
    dx_g.din0_relu_over_input = relu_over;
    return b->backward(b, &e->cfg.g->nodes[i].op, &e->args[i], &dx_io, &dx_g, err);
}

/* The two calls of a backward whose input gradient takes over its input's buffer
 * (dx_over_input_source): weight and bias gradients with the input, then the input's buffer,
 * zeroed (or written as if zeroed, din0_fresh), as its gradient, with the input hidden (the
 * input gradient does not read it). */
static ck_status backward_dx_over_input(ck_exec *e, int i, int src, ck_op_io *io,
                                        ck_op_grads *g, ck_error *err)
{
    ck_status st = backward_weight_grads(e, i, io, g, err);
    if (st != CK_OK)
        return st;
    /* ownership moves: the input's buffer is its gradient now (no allocation, no free) */
    e->dout[src].data = e->out[src].data;
    e->out[src].data = NULL;
    if (e->cfg.dry_run)
        return CK_OK;
    g->din0_fresh = writes_dx_fresh(e, i); /* else the buffer is zeroed */
    if (!g->din0_fresh && (st = e->cfg.b->zero(e->cfg.b, &e->dout[src], err)) != CK_OK)
        return st;
    ck_tensor hidden_x = *io->in[0];
    hidden_x.data = NULL;
    return backward_input_grad(e, i, io, g, &hidden_x, &e->dout[src], false, err);
}

/* Whether relu r's backward can be fused into the backward that produces its output
 * gradient (its one consumer's input gradient, or the loss gradient), which then writes the
 * relu's input gradient over r's output buffer (backend.h: ck_op_grads.din0_relu_over_input,
 * loss_backward's relu_over): r reads one layer p, of which r is the only consumer, so p's
 * gradient gets nothing else; neither r's nor p's gradient has a buffer yet or shares one; the
 * relu's output is live in the gradients' dtype and shape; and no run needs r's output
 * gradient as a tensor of its own (own_gradient_buffers, an observer reading it,
 * keep_activation_grads, or the calibration run, which rounds every output gradient). The
 * relu's backward is then skipped (relu_done); its output gradient's NaN/Inf scan reads the
 * relu input's gradient instead: the same non-finite elements, where r <= 0 an Inf counted as
 * NaN. */
static bool relu_fusable(const ck_exec *e, int r)
{
    const ck_graph *g = e->cfg.g;
    if (e->cfg.own_gradient_buffers || e->cfg.keep_activation_grads || e->cfg.round_bits > 0 ||
        r < 0)
        return false;
    const ck_node *nr = &g->nodes[r];
    if (nr->op.kind != CK_OP_RELU || nr->n_in != 1 || nr->in[0] < 0)
        return false;
    int p = nr->in[0];
    /* p's and r's single consumers are implied by the gradients without buffers here and
       by relu_fuse_source's rule (every other consumer's backward runs before the fused
       one); required anyway, so a change elsewhere cannot widen the fusion */
    return g->nodes[p].n_consumers == 1 && !filtered_input(e, r, p) && !e->dout[p].data &&
           !e->dout[r].data && e->grad_shared_with[p] < 0 && e->grad_inside[p] < 0 &&
           e->grad_holds[p] < 0 && e->grad_shared_with[r] < 0 && e->grad_inside[r] < 0 &&
           e->grad_holds[r] < 0 && e->out[r].data && e->out[r].dtype == e->dout[p].dtype &&
           e->dout[r].dtype == e->dout[p].dtype &&
           ck_shape_equal(&e->out[r].shape, &e->dout[p].shape);
}

/* The relu whose backward layer i's backward does (relu_fusable), or -1: i is a linear or
 * convolution (ck_backward_relu_over_input) with one input, the relu's output, of which i
 * is the only consumer and after whose backward that buffer would die (no later backward
 * but the relu's own reads it; a kept segment output read from outside its segment: i is
 * its last outside reader, and its own segment recomputes it). */
static int relu_fuse_source(const ck_exec *e, int i)
{
    const ck_node *nd = &e->cfg.g->nodes[i];
    if (!ck_backward_relu_over_input(nd->op.kind) || nd->n_in != 1)
        return -1;
    int r = nd->in[0];
    if (r < 0 || e->cfg.g->nodes[r].n_consumers != 1 || filtered_input(e, i, r) ||
        !relu_fusable(e, r))
        return -1;
    const ck_liveness *lv = &e->live;
    bool outside_rule = (lv->release_after_backward[r] >= 0 ||
                         lv->release_after_recompute[r] >= 0) &&
                        e->cfg.plan->segment_of[i] != e->cfg.plan->segment_of[r];
    bool dies = outside_rule ? lv->release_after_backward[r] == i : lv->first_consumer[r] == i;
    return dies ? r : -1;
}

/* Gives relu r's output buffer to the relu input's gradient (ownership moves: no
 * allocation, no free) and marks r's backward done; returns r's output as the kernel sees
 * it (its data the buffer). */
static ck_tensor relu_output_to_input_grad(ck_exec *e, int r)
{
    int p = e->cfg.g->nodes[r].in[0];
    ck_tensor y = e->out[r];
    e->dout[p].data = y.data;
    e->out[r].data = NULL;
    e->relu_done[r] = true;
    return y;
}

/* The two calls of a backward that does its input relu's backward too (relu_fuse_source):
 * weight and bias gradients with the input, then the input gradient with the relu's mask
 * applied, written over the relu's output (din0_relu_over_input). */
static ck_status backward_relu_fused(ck_exec *e, int i, int r, ck_op_io *io, ck_op_grads *g,
                                     ck_error *err)
{
    ck_status st = backward_weight_grads(e, i, io, g, err);
    if (st != CK_OK)
        return st;
    ck_tensor y = relu_output_to_input_grad(e, r);
    if (e->cfg.dry_run)
        return CK_OK;
    return backward_input_grad(e, i, io, g, &y, &e->dout[e->cfg.g->nodes[r].in[0]], true, err);
}

/* A concat's first input's gradient inside the concat's output gradient buffer. */
#define CONCAT_MOVE_ALIGN 256 /* bytes: the view starts where a device allocation may */
#define CONCAT_MOVE_MAX_CHUNKS 64

typedef struct {
    int64_t outer; /* product of the dims before the concat dim */
    int64_t a, s;  /* elements per outer index: the first input's, the output's */
} concat_layout;

/* The number of non-overlapping moves that bring the first input's parts of a concat's
 * output gradient to the buffer's end (concat_move_front), or -1 when there are none. */
static int64_t concat_move_chunks(const concat_layout *l)
{
    int64_t b = l->s - l->a, chunks = 0;
    if (l->outer < 1 || l->a < 1 || b < 1)
        return -1;
    for (int64_t n = 0; n < l->outer; n++) {
        int64_t shift = (l->outer - n) * b; /* how far sample n's part moves up */
        chunks += (l->a + shift - 1) / shift;
        if (chunks > CONCAT_MOVE_MAX_CHUNKS)
            return -1;
    }
    return chunks;
}

static concat_layout concat_layout_of(const ck_exec *e, int i)
{
    const ck_node *nd = &e->cfg.g->nodes[i];
    concat_layout l = {1, 0, 0};
    for (int d = 0; d < nd->op.dim && d < nd->out_shape.ndim; d++)
        l.outer *= nd->out_shape.dim[d];
    if (l.outer > 0) {
        l.a = ck_shape_numel(&e->cfg.g->nodes[nd->in[0]].out_shape) / l.outer;
        l.s = ck_shape_numel(&nd->out_shape) / l.outer;
    }
    return l;
}

/* The first input of a concat i whose gradient can live inside i's output gradient buffer
 * (concat_move_front), or -1: it gets its first gradient here, in the output gradient's
 * dtype, it is named once, i's own gradient is a buffer of its own (not shared, not inside
 * another), no run rounds gradients in place, and the moves are few and leave the part at
 * an offset every backend's allocations are aligned to. */
static int concat_front_source(const ck_exec *e, int i)
{
    const ck_node *nd = &e->cfg.g->nodes[i];
    if (nd->op.kind != CK_OP_CONCAT || nd->n_in < 2 || e->cfg.round_bits > 0 ||
        e->cfg.own_gradient_buffers)
        return -1;
    int src = nd->in[0];
    for (int j = 1; j < nd->n_in; j++)
        if (nd->in[j] == src)
            return -1;
    if (src < 0 || e->grad_shared_with[i] >= 0 || e->grad_inside[i] >= 0 ||
        e->grad_holds[i] >= 0 || filtered_input(e, i, src) || e->dout[src].data ||
        e->dout[src].dtype != e->dout[i].dtype)
        return -1;
    concat_layout l = concat_layout_of(e, i);
    size_t offset = (size_t)(l.outer * (l.s - l.a)) * ck_dtype_size(e->dout[i].dtype);
    if (concat_move_chunks(&l) < 0 || offset % CONCAT_MOVE_ALIGN != 0)
        return -1;
    return src;
}

/* elements [first, first + n) of t's buffer as a 1-D tensor */
static ck_tensor flat_view(const ck_tensor *t, int64_t first, int64_t n)
{
    ck_tensor v = *t;
    v.shape.ndim = 1;
    v.shape.dim[0] = n;
    v.data = (char *)t->data + (size_t)first * ck_dtype_size(t->dtype);
    return v;
}

ck_status ck_exec_concat_grad_move(ck_backend *b, const ck_tensor *dy, int64_t outer,
                                   int64_t a, int64_t s, ck_error *err)
{
    const int64_t base = outer * (s - a);
    for (int64_t n = outer - 1; n >= 0; n--) {
        int64_t from = n * s, to = base + n * a, shift = to - from;
        for (int64_t hi = a; hi > 0; hi -= shift) {
            int64_t lo = hi > shift ? hi - shift : 0;
            ck_tensor dst = flat_view(dy, to + lo, hi - lo), part = flat_view(dy, from + lo, hi - lo);
            ck_status st = b->zero(b, &dst, err);
            if (st == CK_OK)
                st = b->convert(b, &dst, &part, 1.0, true, err);
            if (st != CK_OK)
                return st;
        }
    }
    return CK_OK;
}

/* After concat i's backward gave every other input its gradient: the first input's parts
 * of dy move to the end of dy's buffer (ck_exec_concat_grad_move), which becomes src's
 * gradient (grad_inside), freed with i's. */
static ck_status concat_move_front(ck_exec *e, int i, int src, ck_error *err)
{
    concat_layout l = concat_layout_of(e, i);
    const ck_tensor *dy = &e->dout[i];
    ck_status st = CK_OK;
    if (!e->cfg.dry_run)
        st = ck_exec_concat_grad_move(e->cfg.b, dy, l.outer, l.a, l.s, err);
    if (st != CK_OK)
        return st;
    e->dout[src].data = (char *)dy->data + (size_t)(l.outer * (l.s - l.a)) * ck_dtype_size(dy->dtype);
    e->grad_inside[src] = i;
    e->grad_holds[i] = src;
    return CK_OK;
}

/* The concat inside whose output buffer layer i's output is written, or -1 (a forward or a
 * recomputation): i is the first input of the next layer, a concat, and is named there
 * once; that concat is i's only consumer and nothing reads i's output after it (liveness.h:
 * not kept after its forward; in a recomputation, the segment's last consumer of it and not
 * needed by the segment's backward); the concat's buffer is not live yet (it gets i's
 * dtype, the one both run in), and the moves that bring i's parts into place are few
 * and leave i's part at an offset every backend's allocations are aligned to. The concat's
 * buffer is then allocated at i's forward instead of beside it (a concat after an upsample
 * does not hold the upsample's output and its own at once), i's output is the buffer's end,
 * and the concat's forward moves i's parts down into place and copies the other inputs
 * (concat_forward_inside). */
static int concat_inside_target(const ck_exec *e, int i, bool recompute)
{
    const ck_graph *g = e->cfg.g;
    const ck_liveness *lv = &e->live;
    int cat = i + 1;
    if (e->cfg.own_gradient_buffers || cat >= g->n || g->nodes[cat].op.kind != CK_OP_CONCAT ||
        g->nodes[cat].n_in < 2 || g->nodes[cat].in[0] != i || g->nodes[i].n_consumers != 1 ||
        e->out[cat].data || e->out[i].data)
        return -1;
    /* read after the concat: kept after the forward, or, in a recomputation (both in the
       segment), needed by the segment's backward */
    if (recompute ? e->cfg.plan->segment_of[cat] != e->cfg.plan->segment_of[i] ||
                        lv->last_segment_consumer[i] != cat || lv->needed_in_recompute[i]
                  : lv->kept_after_forward[i])
        return -1;
    for (int j = 1; j < g->nodes[cat].n_in; j++)
        if (g->nodes[cat].in[j] == i)
            return -1;
    concat_layout l = concat_layout_of(e, cat);
    size_t offset = (size_t)(l.outer * (l.s - l.a)) * ck_dtype_size(e->out[i].dtype);
    if (concat_move_chunks(&l) < 0 || offset % CONCAT_MOVE_ALIGN != 0)
        return -1;
    return cat;
}

/* Allocates concat cat's output buffer and makes layer i's output its end (out_inside). */
static ck_status place_inside_concat(ck_exec *e, int i, int cat, ck_error *err)
{
    e->out[cat].dtype = e->out[i].dtype; /* the dtype both run in (a recomputation's too) */
    ck_status st = ck_act_alloc_tensor(&e->act, &e->out[cat], err);
    if (st != CK_OK)
        return st;
    concat_layout l = concat_layout_of(e, cat);
    size_t offset = (size_t)(l.outer * (l.s - l.a)) * ck_dtype_size(e->out[cat].dtype);
    /* a dry run's buffers all stand at one byte: no offset into it */
    e->out[i].data = e->cfg.dry_run ? e->out[cat].data : (char *)e->out[cat].data + offset;
    e->out_inside[i] = cat;
    return CK_OK;
}

ck_status ck_exec_concat_forward_move(ck_backend *b, const ck_tensor *y, int64_t outer,
                                      int64_t a, int64_t s, ck_error *err)
{
    const int64_t base = outer * (s - a);
    for (int64_t n = 0; n < outer; n++) {
        int64_t from = base + n * a, to = n * s, shift = from - to;
        for (int64_t lo = 0; lo < a; lo += shift) { /* down, lowest piece first */
            int64_t hi = lo + shift < a ? lo + shift : a;
            ck_tensor dst = flat_view(y, to + lo, hi - lo), part = flat_view(y, from + lo, hi - lo);
            ck_status st = b->convert(b, &dst, &part, 1.0, false, err);
            if (st != CK_OK)
                return st;
        }
    }
    return CK_OK;
}

/* The forward of a concat i whose first input lies at its buffer's end (concat_inside_target):
 * the first input's parts move down into place (ck_exec_concat_forward_move; each part's
 * destination ends where the next part still lies, so nothing unread is overwritten), the
 * other inputs' parts are copied after them (convert with scale 1: the values the concat
 * kernels copy), and the first input's output, which the moves consumed, is no tensor of
 * its own any more. */
static ck_status concat_forward_inside(ck_exec *e, int i, const ck_op_io *io, ck_error *err)
{
    const ck_node *nd = &e->cfg.g->nodes[i];
    int first = nd->in[0];
    concat_layout l = concat_layout_of(e, i);
    ck_status st = CK_OK;
    if (!e->cfg.dry_run)
        st = ck_exec_concat_forward_move(e->cfg.b, io->out, l.outer, l.a, l.s, err);
    for (int n = 0; st == CK_OK && !e->cfg.dry_run && n < l.outer; n++) {
        int64_t off = n * l.s + l.a;
        for (int j = 1; st == CK_OK && j < nd->n_in; j++) {
            int64_t aj = ck_shape_numel(&io->in[j]->shape) / l.outer;
            ck_tensor dst = flat_view(io->out, off, aj), part = flat_view(io->in[j], n * aj, aj);
            st = e->cfg.b->convert(e->cfg.b, &dst, &part, 1.0, false, err);
            off += aj;
        }
    }
    e->out[first].data = NULL; /* inside i's buffer, moved: nothing to free */
    e->out_inside[first] = -1;
    return st;
}

static ck_status backward_layer(ck_exec *e, int i, int step, const ck_tensor *input,
                                ck_error *err)
{
    const ck_node *nd = &e->cfg.g->nodes[i];
    ck_status st = CK_OK;
    if (e->relu_done[i]) { /* done by its consumer's backward or the loss (relu_fusable) */
        e->relu_done[i] = false;
        if ((st = check_finite(e, i, step, &e->dout[nd->in[0]], true, false, err)) != CK_OK)
            goto fail;
        goto done;
    }
    if (!e->dout[i].data) /* the output does not reach the loss: nothing flows back */
        goto done;
    if (e->cfg.observer) {
        ck_exec_event_info ev = {.ev = CK_EVENT_BACKWARD, .layer = i, .step = step,
                                 .tensor = &e->dout[i]};
        if ((st = e->cfg.observer(e->cfg.observer_user, &ev, err)) != CK_OK)
            goto fail;
    }

    ck_op_io io;
    ck_op_grads g;
    ck_tensor hidden_in[CK_MAX_INPUTS], hidden_out, hidden_saved;
    memset(&io, 0, sizeof io);
    memset(&g, 0, sizeof g);
    unsigned reads = e->live.reads[i];
    int fresh = fresh_grad_source(e, i);
    bool share = shares_add_gradient(e, i);
    int fused_relu = relu_fuse_source(e, i);
    int over_input = fused_relu >= 0 ? -1 : dx_over_input_source(e, i);
    int front = concat_front_source(e, i);
    io.n_in = nd->n_in;
    for (int j = 0; j < nd->n_in; j++) {
        int src = nd->in[j];
        io.in[j] = src < 0 ? input : &e->out[src];
        if (src >= 0 && src != fresh && src != over_input && src != front && src != fused_relu &&
            !share && !filtered_input(e, i, src) &&
            (st = input_grad_buffer(e, i, j, src, &g, err)) != CK_OK)
            goto fail;
    }
    io.out = &e->out[i];
    io.saved = nd->has_saved ? &e->saved[i] : NULL;
    /* the kernel sees only what the op's row says its backward reads (liveness.h) */
    if ((st = hide_unread(&io, reads, hidden_in, &hidden_out, &hidden_saved, err)) != CK_OK)
        goto fail;
    g.dout = &e->dout[i];
    if ((st = perturb_tensor(e, &e->dout[i], i, step, 1, err)) != CK_OK ||
        (st = check_finite(e, i, step, &e->dout[i], true, false, err)) != CK_OK)
        goto fail;
    ck_tensor dy_shared; /* the output gradient as the kernel sees it, its buffer now din[0]'s */
    if (fresh >= 0 || share) {
        int src = share ? nd->in[0] : fresh;
        dy_shared = e->dout[i];
        e->dout[src].data = dy_shared.data; /* ownership moves: no allocation, no free */
        e->dout[i].data = NULL;
        g.dout = &dy_shared;
        g.din[0] = &e->dout[src];
        g.din0_fresh = true; /* the kernel makes it +0 + dy: a zeroed gradient's bits */
        if (share) { /* the other input's gradient is the same buffer: nothing to add */
            int other = nd->in[1];
            e->dout[other].data = dy_shared.data;
            e->grad_shared_with[src] = other;
            e->grad_shared_with[other] = src;
            g.din[1] = NULL;
        }
    }
    if (!e->cfg.dry_run) {
        ck_model_bind(e->cfg.model, i, e->master_params[i], &io, &g);
        /* gradients still zero-pending (ck_model_zero_grads_lazy): written fresh where the
         * backend can, else zeroed now */
        if ((st = ck_model_claim_grads(e->cfg.model, i, &g, params_fresh(e, nd->op.kind),
                                       err)) != CK_OK)
            goto fail;
    }
    if (fused_relu >= 0)
        st = backward_relu_fused(e, i, fused_relu, &io, &g, err);
    else if (over_input >= 0)
        st = backward_dx_over_input(e, i, over_input, &io, &g, err);
    else if (!e->cfg.dry_run)
        st = e->cfg.b->backward(e->cfg.b, &nd->op, &e->args[i], &io, &g, err);
    if (st == CK_OK && front >= 0)
        st = concat_move_front(e, i, front, err);
    if (st != CK_OK)
        goto fail;
done:
    /* every consumer's backward has run (they come later in topological order) */
    ck_act_free_tensor(&e->act, &e->out[i]);
    ck_act_free_tensor(&e->act, &e->saved[i]);
    free_grad(e, i);
    /* an input whose first consumer this is: every consumer's backward has run now, and
       only its own backward could still read it */
    for (int j = 0; j < nd->n_in; j++) {
        int src = nd->in[j];
        if (src < 0 || !first_mention(nd, j))
            continue;
        if (input_dies_after_backward(e, i, src))
            ck_act_free_tensor(&e->act, &e->out[src]);
    }
    return CK_OK;
fail:
    ck_error_prefix(err, "backward of layer %s (%s)", nd->spec->name, nd->spec->op_name);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * One step
 * --------------------------------------------------------------------------------------- */


/* cross_entropy over a class dim other than 1, with an ignore_index or with label smoothing
 * runs through the backend's ce_forward / ce_backward (backend.h) */
static bool loss_needs_spec(const ck_graph *g, ck_loss_kind kind)
{
    return kind == CK_LOSS_CROSS_ENTROPY &&
           (g->loss_spec.class_dim != 1 || g->loss_spec.has_ignore ||
            g->loss_spec.label_smoothing != 0.0);
}

static ck_status loss_fwd(ck_backend *b, const ck_graph *g, ck_loss_kind kind, const ck_tensor *y,
                          const ck_tensor *target, double *loss, ck_error *err)
{
    if (!loss_needs_spec(g, kind))
        return b->loss_forward(b, kind, y, target, loss, err);
    return b->ce_forward(b, &g->loss_spec, y, target, loss, err);
}

static ck_status loss_bwd(ck_backend *b, const ck_graph *g, ck_loss_kind kind, const ck_tensor *y,
                          const ck_tensor *target, double scale, ck_tensor *dy, bool relu_over,
                          ck_error *err)
{
    if (!loss_needs_spec(g, kind))
        return b->loss_backward(b, kind, y, target, scale, dy, relu_over, err);
    return b->ce_backward(b, &g->loss_spec, y, target, scale, dy, err);
}

/* The loss gradient, written over the model output's buffer with the relu's backward done
 * when the model output is a relu's (relu_fusable) and the loss gradient's element k reads
 * element k of the output alone (mean, sum, mse: loss_backward's relu_over); else into a
 * buffer of its own. */
static ck_status loss_gradient(ck_exec *e, ck_loss_kind kind, const ck_tensor *target,
                               double scale, ck_error *err)
{
    const ck_graph *g = e->cfg.g;
    int last = g->n - 1;
    bool elementwise = kind == CK_LOSS_MEAN || kind == CK_LOSS_SUM || kind == CK_LOSS_MSE;
    if (elementwise && g->nodes[last].n_consumers == 1 /* the loss */ && relu_fusable(e, last)) {
        ck_tensor y = relu_output_to_input_grad(e, last);
        if (e->cfg.dry_run)
            return CK_OK;
        return loss_bwd(e->cfg.b, g, kind, &y, target, scale, &e->dout[g->nodes[last].in[0]],
                        true, err);
    }
    ck_status st = ck_act_alloc_tensor(&e->act, &e->dout[last], err);
    if (st != CK_OK || e->cfg.dry_run)
        return st;
    return loss_bwd(e->cfg.b, g, kind, &e->out[last], target, scale, &e->dout[last], false, err);
}

ck_status ck_exec_step(ck_exec *e, int step, const ck_tensor *input, const ck_tensor *target,
                       ck_loss_kind loss_kind, double loss_scale, bool backward, double *loss,
                       ck_error *err)
{
    const ck_graph *g = e->cfg.g;
    const ck_plan *plan = e->cfg.plan;
    ck_backend *b = e->cfg.b;
    int n = g->n;
    ck_status st = CK_OK;

    for (int i = 0; i < n; i++) {
        int s = plan ? plan->segment_of[i] : -1;
        if (s >= 0 && plan->segments[s].first == i)
            e->stash[s] = e->global_offset;
        if ((st = forward_layer(e, i, step, input, false, err)) != CK_OK)
            goto out;
        free_after_forward(e, i);
        if (s >= 0 && plan->segments[s].last == i)
            drop_segment_internals(e, &plan->segments[s]);
    }
    ck_act_alloc_mark(&e->act, CK_MARK_FORWARD_END);
    e->forward_end_bytes = e->act.live_bytes;

    if (e->cfg.dry_run)
        *loss = 0.0;
    else if ((st = loss_fwd(b, g, loss_kind, &e->out[n - 1], target, loss, err)) != CK_OK) {
        ck_error_prefix(err, "loss (%s)", ck_loss_kind_name(loss_kind));
        goto out;
    }
    if (!backward)
        goto out;

    if ((st = loss_gradient(e, loss_kind, target, loss_scale, err)) != CK_OK) {
        ck_error_prefix(err, "loss backward (%s)", ck_loss_kind_name(loss_kind));
        goto out;
    }
    if (!(e->live.reads[n - 1] & CK_BWD_READS_OUTPUT)) /* the loss was its last reader */
        ck_act_free_tensor(&e->act, &e->out[n - 1]);
    for (int i = n - 1; i >= 0; i--) {
        int s = plan ? plan->segment_of[i] : -1;
        if (s >= 0 && plan->segments[s].last == i) {
            e->act.window_peak = e->act.live_bytes;
            if ((st = recompute_segment(e, s, step, input, err)) != CK_OK)
                goto out;
        }
        if ((st = backward_layer(e, i, step, input, err)) != CK_OK)
            goto out;
        if (s >= 0 && plan->segments[s].first == i && e->act.window_peak > e->segment_peak[s])
            e->segment_peak[s] = e->act.window_peak;
    }
out:
    release_all(e);
    ck_act_alloc_mark(&e->act, CK_MARK_STEP_END);
    if (st == CK_OK && e->act.live_bytes != 0)
        st = ck_fail(err, CK_ERR_INTERNAL, "executor leaked %lld activation bytes",
                     (long long)e->act.live_bytes);
    return st;
}
