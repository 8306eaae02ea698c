/*
 * The typed result as bytes (result_wire.h). One visitor per type walks the fields in a
 * fixed order and either writes them or reads them back, so the two directions cannot
 * disagree; reading also checks every enum and index against the graph and the arrays.
 */
#include "harness/verify/result_wire.h"

#include <stdlib.h>
#include <string.h>

/* Upper bounds on counts read back; far beyond any case the harness runs. */
#define MAX_TENSORS ((int64_t)1 << 26)
#define MAX_STEPS ((int64_t)1 << 24)

typedef struct {
    bool reading;
    ck_wire_out *w;
    ck_wire_in *r;
    const ck_graph *g;
    int steps; /* the case's steps, for step indexes */
} wio;

/* ---- primitives: write *v, or read into *v ---- */

static void io_i64(wio *x, int64_t *v, const char *what)
{
    if (x->reading)
        *v = ck_wire_get_i64(x->r, what);
    else
        ck_wire_put_i64(x->w, *v);
}

/* A count of values or an element index: in [lo, 2^53], so that the sums and products the
 * reports form of a few of them cannot overflow. */
#define CK_WIRE_MAX_COUNT ((int64_t)1 << 53)
static void io_count(wio *x, int64_t *v, int64_t lo, const char *what)
{
    if (x->reading)
        *v = ck_wire_get_range(x->r, lo, CK_WIRE_MAX_COUNT, what);
    else
        ck_wire_put_i64(x->w, *v);
}

static void io_u64(wio *x, uint64_t *v, const char *what)
{
    int64_t t = (int64_t)*v;
    io_i64(x, &t, what);
    *v = (uint64_t)t;
}

/* An int in [lo, hi]. */
static void io_int(wio *x, int *v, int lo, int hi, const char *what)
{
    if (x->reading)
        *v = (int)ck_wire_get_range(x->r, lo, hi, what);
    else
        ck_wire_put_i64(x->w, *v);
}

static void io_f64(wio *x, double *v, const char *what)
{
    if (x->reading)
        *v = ck_wire_get_f64(x->r, what);
    else
        ck_wire_put_f64(x->w, *v);
}

static void io_bool(wio *x, bool *v, const char *what)
{
    if (x->reading)
        *v = ck_wire_get_bool(x->r, what);
    else
        ck_wire_put_u8(x->w, *v ? 1 : 0);
}

static void io_chars(wio *x, char *buf, size_t cap, const char *what)
{
    if (x->reading)
        ck_wire_get_str_to(x->r, buf, cap, what);
    else
        ck_wire_put_str(x->w, buf);
}

/* An enum stored in an int-sized field: values 0..n-1. */
#define IO_ENUM(x, field, n, what)                                                            \
    do {                                                                                       \
        int io_enum_v = (int)(field);                                                          \
        io_int((x), &io_enum_v, 0, (n)-1, (what));                                             \
        (field) = io_enum_v;                                                                   \
    } while (0)

static void io_layer(wio *x, int *layer, bool none_ok, const char *what)
{
    io_int(x, layer, none_ok ? -1 : 0, x->g->n - 1, what);
}

static void io_step(wio *x, int *step, bool none_ok, const char *what)
{
    io_int(x, step, none_ok ? -1 : 0, x->steps > 0 ? x->steps - 1 : 0, what);
}

/* An array count; reading allocates n elements of size (zeroed), at least min_bytes of
 * encoding each. Returns false when reading failed. */
static bool io_array(wio *x, void **arr, int *n, int64_t max, size_t size, size_t min_bytes,
                     const char *what)
{
    if (!x->reading) {
        ck_wire_put_i64(x->w, *n);
        return true;
    }
    *n = (int)ck_wire_get_count(x->r, max, min_bytes, what);
    if (x->r->failed)
        return false;
    *arr = calloc((size_t)(*n > 0 ? *n : 1), size);
    if (!*arr) {
        ck_wire_fail(x->r, what, "out of memory");
        return false;
    }
    return true;
}

/* A nullable array of n elements: a presence flag, then the elements. */
static bool io_present(wio *x, const void *p, const char *what)
{
    bool here = p != NULL;
    io_bool(x, &here, what);
    return here && !(x->reading && x->r->failed);
}

/* ---- composite types ---- */

static void io_shape(wio *x, ck_shape *s)
{
    io_int(x, &s->ndim, 0, CK_MAX_DIMS, "shape.ndim");
    for (int d = 0; d < s->ndim; d++)
        io_i64(x, &s->dim[d], "shape.dim");
    int64_t numel;
    if (x->reading && !x->r->failed && !ck_shape_numel_checked(s, 0, &numel))
        ck_wire_fail(x->r, "shape", "a dimension below 1 or too many elements");
}

static void io_metrics(wio *x, ck_metrics *m, const ck_shape *shape)
{
    io_i64(x, &m->numel, "metrics.numel");
    io_bool(x, &m->bitwise, "metrics.bitwise");
    io_f64(x, &m->max_abs, "metrics.max_abs");
    io_f64(x, &m->max_rel, "metrics.max_rel");
    io_f64(x, &m->rel_l2, "metrics.rel_l2");
    io_u64(x, &m->max_ulp, "metrics.max_ulp");
    io_f64(x, &m->max_ratio, "metrics.max_ratio");
    io_i64(x, &m->n_outside, "metrics.n_outside");
    io_i64(x, &m->first_bad, "metrics.first_bad");
    io_i64(x, &m->nan_a, "metrics.nan_a");
    io_i64(x, &m->nan_ref, "metrics.nan_ref");
    io_i64(x, &m->inf_a, "metrics.inf_a");
    io_i64(x, &m->inf_ref, "metrics.inf_ref");
    if (!x->reading || x->r->failed)
        return;
    /* a tensor's first bad element lies inside it; a finding without a shape (zeroed when
     * nothing was found) is only read through its own numel */
    bool outside = shape && m->first_bad >= ck_shape_numel(shape);
    if (m->numel < 0 || m->first_bad < -1 || outside)
        ck_wire_fail(x->r, "metrics", "an element count or index out of range");
}

static void io_cast_count(wio *x, int64_t *v, int64_t most, const char *what)
{
    if (x->reading)
        *v = ck_wire_get_range(x->r, -1, most, what);
    else
        ck_wire_put_i64(x->w, *v);
}

static void io_tensor(wio *x, ck_tensor_result *t)
{
    if (x->reading)
        t->name = ck_wire_get_str(x->r, 4096, NULL, "tensor.name");
    else
        ck_wire_put_str(x->w, t->name);
    if (x->reading && !x->r->failed && !t->name)
        ck_wire_fail(x->r, "tensor.name", "missing");
    IO_ENUM(x, t->kind, CK_KIND_BUFFER + 1, "tensor.kind");
    io_step(x, &t->step, false, "tensor.step");
    IO_ENUM(x, t->dtype, CK_DTYPE_COUNT, "tensor.dtype");
    io_shape(x, &t->shape);
    io_metrics(x, &t->m, &t->shape);
    IO_ENUM(x, t->verdict, CK_VERDICT_MISMATCH + 1, "tensor.verdict");
    io_f64(x, &t->rtol, "tensor.rtol");
    io_f64(x, &t->atol, "tensor.atol");
    io_f64(x, &t->rel_l2_limit, "tensor.rel_l2_limit");
    /* counts of the tensor's own elements (-1: not measured), at most 2^36 each so that a
     * report's sums over every tensor (MAX_TENSORS of them) cannot overflow */
    int64_t numel = 0;
    if (!(x->reading && x->r->failed))
        ck_shape_numel_checked(&t->shape, 0, &numel);
    int64_t most = numel < ((int64_t)1 << 36) ? numel : ((int64_t)1 << 36);
    io_cast_count(x, &t->cast_overflow, most, "tensor.cast_overflow");
    io_cast_count(x, &t->cast_flushed, most, "tensor.cast_flushed");
    io_cast_count(x, &t->cast_subnormal, most, "tensor.cast_subnormal");
    IO_ENUM(x, t->bound_source, CK_BOUND_SKIPPED + 1, "tensor.bound_source");
    io_f64(x, &t->error, "tensor.error");
    io_f64(x, &t->bound, "tensor.bound");
    io_f64(x, &t->spread, "tensor.spread");
}

/* A tensor list and the index into it that names one entry (-1: none). */
static void io_tensors(wio *x, ck_tensor_result **t, int *n, const char *what)
{
    if (!io_array(x, (void **)t, n, MAX_TENSORS, sizeof **t, 16, what))
        return;
    for (int k = 0; k < *n && !(x->reading && x->r->failed); k++)
        io_tensor(x, &(*t)[k]);
}

/* An index into an n-entry array, -1 for none. A section that did not run (used: false)
 * keeps its zeroed index, which no writer reads. */
static void io_index(wio *x, int *idx, int n, bool used, const char *what)
{
    io_int(x, idx, -1, used || n > 0 ? n - 1 : 0, what);
}

static void io_vacuity(wio *x, ck_vacuity *v)
{
    io_i64(x, &v->elements, "vacuity.elements");
    io_i64(x, &v->zero, "vacuity.zero");
    io_i64(x, &v->subnormal, "vacuity.subnormal");
    io_i64(x, &v->flushed, "vacuity.flushed");
    io_bool(x, &v->vacuous, "vacuity.vacuous");
    IO_ENUM(x, v->reason, CK_VACUITY_REASONS, "vacuity.reason");
    io_int(x, &v->step, 0, x->steps, "vacuity.step");
    io_int(x, &v->skipped, 0, x->steps, "vacuity.skipped");
}

static void io_mem_trace(wio *x, ck_mem_trace *m)
{
    io_int(x, &m->n, 0, CK_MEM_TRACE_MAX, "mem.n");
    io_i64(x, &m->stride, "mem.stride");
    io_i64(x, &m->events, "mem.events");
    for (int i = 0; i < m->n; i++) {
        io_i64(x, &m->pt[i].event, "mem.event");
        io_i64(x, &m->pt[i].bytes, "mem.bytes");
    }
}

/* A per-step array of doubles (nullable). */
static void io_step_doubles(wio *x, double **v, int steps, const char *what)
{
    if (!io_present(x, *v, what))
        return;
    if (x->reading && !(*v = calloc((size_t)(steps > 0 ? steps : 1), sizeof **v))) {
        ck_wire_fail(x->r, what, "out of memory");
        return;
    }
    for (int s = 0; s < steps; s++)
        io_f64(x, &(*v)[s], what);
}

static void io_summary(wio *x, ck_run_summary *s, const char *label)
{
    if (x->reading) /* writing leaves the result as it is */
        s->label = label;
    io_int(x, &s->steps, x->steps, x->steps, "run.steps");
    if (x->reading && x->r->failed)
        return;
    io_step_doubles(x, &s->losses, s->steps, "run.losses");
    io_i64(x, &s->peak_activation_bytes, "run.peak_activation_bytes");
    io_bool(x, &s->predicted, "run.predicted");
    io_i64(x, &s->predicted_peak_bytes, "run.predicted_peak_bytes");
    io_i64(x, &s->held_for_backward_bytes, "run.held_for_backward_bytes");
    io_i64(x, &s->recomputed_layers, "run.recomputed_layers");
    io_f64(x, &s->wall_time_s, "run.wall_time_s");
    io_step_doubles(x, &s->step_wall_s, s->steps, "run.step_wall_s");
    io_step_doubles(x, &s->train_wall_s, s->steps, "run.train_wall_s");
    io_mem_trace(x, &s->mem);
    if (io_present(x, s->scales, "run.scales")) {
        if (x->reading &&
            !(s->scales = calloc((size_t)(s->steps > 0 ? s->steps : 1), sizeof *s->scales)))
            ck_wire_fail(x->r, "run.scales", "out of memory");
        for (int k = 0; k < s->steps && s->scales; k++) {
            io_f64(x, &s->scales[k].scale, "run.scale");
            io_bool(x, &s->scales[k].skipped, "run.skipped");
        }
    }
    io_count(x, &s->recomputed_other_dtype, 0, "run.recomputed_other_dtype");
    io_layer(x, &s->first_other_dtype_layer, true, "run.first_other_dtype_layer");
    if (x->reading && s->recomputed_other_dtype > 0 && s->first_other_dtype_layer < 0)
        ck_wire_fail(x->r, "run.first_other_dtype_layer", "none for a count above 0");
    io_vacuity(x, &s->vacuity);
    ck_act_nonfinite *a = &s->act_nonfinite;
    io_count(x, &a->nan, 0, "run.act_nonfinite.nan");
    io_count(x, &a->inf, 0, "run.act_nonfinite.inf");
    io_count(x, &a->excused, 0, "run.act_nonfinite.excused");
    io_int(x, &a->layers, 0, x->g->n, "run.act_nonfinite.layers");
    io_layer(x, &a->first.layer, true, "run.act_nonfinite.first.layer");
    io_int(x, &a->first.step, -1, 1 << 30, "run.act_nonfinite.first.step");
    io_bool(x, &a->first.backward, "run.act_nonfinite.first.backward");
    io_bool(x, &a->first.recompute, "run.act_nonfinite.first.recompute");
    io_count(x, &a->first.index, -1, "run.act_nonfinite.first.index");
    io_bool(x, &a->first.nan, "run.act_nonfinite.first.nan");
}

static void io_finding(wio *x, ck_layer_finding *f, const char *what)
{
    io_layer(x, &f->layer, true, what);
    io_int(x, &f->step, -1, x->steps, what);
    io_metrics(x, &f->m, NULL);
    IO_ENUM(x, f->verdict, CK_VERDICT_MISMATCH + 1, what);
}

static void io_check(wio *x, ck_recompute_check *c, bool none_ok)
{
    io_layer(x, &c->layer, none_ok, "recompute_check.layer");
    io_int(x, &c->step, -1, x->steps, "recompute_check.step");
    IO_ENUM(x, c->orig_dtype, CK_DTYPE_COUNT, "recompute_check.orig_dtype");
    IO_ENUM(x, c->recomp_dtype, CK_DTYPE_COUNT, "recompute_check.recomp_dtype");
    io_metrics(x, &c->m, NULL);
    IO_ENUM(x, c->verdict, CK_VERDICT_MISMATCH + 1, "recompute_check.verdict");
    io_i64(x, &c->rng_differs, "recompute_check.rng_differs");
}

static void io_cause(wio *x, ck_bisect_cause *c)
{
    IO_ENUM(x, c->kind, CK_CAUSE_KINDS, "cause.kind");
    io_layer(x, &c->layer, true, "cause.layer");
    io_int(x, &c->n_layers, 0, x->g->n, "cause.n_layers");
    for (int i = 0; i < c->n_layers && i < CK_CAUSE_MAX_LAYERS; i++)
        io_layer(x, &c->layers[i], false, "cause.layers");
    io_layer(x, &c->last_layer, true, "cause.last_layer");
    io_layer(x, &c->source_layer, true, "cause.source_layer");
    io_int(x, &c->step, -1, x->steps, "cause.step");
    IO_ENUM(x, c->dtype, CK_DTYPE_COUNT, "cause.dtype");
    IO_ENUM(x, c->orig_dtype, CK_DTYPE_COUNT, "cause.orig_dtype");
    io_bool(x, &c->in_backward, "cause.in_backward");
    io_f64(x, &c->max_abs, "cause.max_abs");
    io_i64(x, &c->count, "cause.count");
    io_i64(x, &c->total, "cause.total");
    io_chars(x, c->buffer, sizeof c->buffer, "cause.buffer");
    io_i64(x, &c->nbt_recomp, "cause.nbt_recomp");
    io_i64(x, &c->nbt_orig, "cause.nbt_orig");
    IO_ENUM(x, c->rng, CK_RNG_STASH + 1, "cause.rng");
    IO_ENUM(x, c->bn, CK_BN_UPDATE + 1, "cause.bn");
    io_f64(x, &c->factor, "cause.factor");
    io_f64(x, &c->scale_plain, "cause.scale_plain");
    io_f64(x, &c->scale_ckpt, "cause.scale_ckpt");
    io_bool(x, &c->skipped_plain, "cause.skipped_plain");
    io_bool(x, &c->skipped_ckpt, "cause.skipped_ckpt");
}

static void io_bisect_search(wio *x, ck_bisect_result *br)
{
    io_bool(x, &br->searched, "bisect.searched");
    if (!io_array(x, (void **)&br->culprit, &br->n_segments, x->g->n, sizeof *br->culprit, 1,
                  "bisect.n_segments"))
        return;
    for (int s = 0; s < br->n_segments; s++)
        io_bool(x, &br->culprit[s], "bisect.culprit");
    if (io_present(x, br->culprit_set, "bisect.culprit_set")) {
        if (x->reading && !(br->culprit_set = calloc((size_t)br->n_segments + 1,
                                                     sizeof *br->culprit_set))) {
            ck_wire_fail(x->r, "bisect.culprit_set", "out of memory");
            return;
        }
        for (int s = 0; s < br->n_segments; s++)
            io_int(x, &br->culprit_set[s], -1, CK_BISECT_MAX_SETS - 1, "bisect.culprit_set");
    }
    io_int(x, &br->n_culprit_sets, 0, CK_BISECT_MAX_SETS, "bisect.n_culprit_sets");
    io_bool(x, &br->sets_capped, "bisect.sets_capped");
    io_int(x, &br->search_runs, 0, 1 << 30, "bisect.search_runs");
}

static void io_bisect(wio *x, ck_bisect_result *br)
{
    io_bool(x, &br->noise_floor_measured, "bisect.noise_floor_measured");
    io_tensors(x, &br->floor, &br->n_floor, "bisect.floor");
    IO_ENUM(x, br->floor_verdict, CK_VERDICT_MISMATCH + 1, "bisect.floor_verdict");
    io_finding(x, &br->nondet, "bisect.nondet");
    io_bool(x, &br->nondet_in_backward, "bisect.nondet_in_backward");
    io_bool(x, &br->within_noise_floor, "bisect.within_noise_floor");
    io_bisect_search(x, br);
    io_int(x, &br->step, -1, x->steps, "bisect.step");
    io_finding(x, &br->forward, "bisect.forward");
    io_finding(x, &br->backward, "bisect.backward");
    io_layer(x, &br->state_layer, true, "bisect.state_layer");
    io_chars(x, br->state_buffer, sizeof br->state_buffer, "bisect.state_buffer");
    io_metrics(x, &br->state_m, NULL);
    io_i64(x, &br->nbt_orig, "bisect.nbt_orig");
    io_i64(x, &br->nbt_recomp, "bisect.nbt_recomp");
    io_check(x, &br->rng, true);
    IO_ENUM(x, br->forward_orig_dtype, CK_DTYPE_COUNT, "bisect.forward_orig_dtype");
    IO_ENUM(x, br->forward_recomp_dtype, CK_DTYPE_COUNT, "bisect.forward_recomp_dtype");
    io_int(x, &br->n_causes, 0, CK_BISECT_MAX_CAUSES, "bisect.n_causes");
    for (int i = 0; i < br->n_causes; i++)
        io_cause(x, &br->causes[i]);
}

static void io_nonfinite(wio *x, ck_nonfinite_counts *c)
{
    io_count(x, &c->loss_values, 0, "nonfinite.loss_values");
    io_count(x, &c->loss_nan, 0, "nonfinite.loss_nan");
    io_count(x, &c->loss_inf, 0, "nonfinite.loss_inf");
    io_count(x, &c->grad_values, 0, "nonfinite.grad_values");
    io_count(x, &c->grad_nan, 0, "nonfinite.grad_nan");
    io_count(x, &c->grad_inf, 0, "nonfinite.grad_inf");
    io_count(x, &c->other_nan, 0, "nonfinite.other_nan");
    io_count(x, &c->other_inf, 0, "nonfinite.other_inf");
    io_int(x, &c->tensors, 0, 1 << 30, "nonfinite.tensors");
    io_bool(x, &c->all_loss, "nonfinite.all_loss");
    io_bool(x, &c->all_grads, "nonfinite.all_grads");
}

static void io_algo(wio *x, ck_algo_record *a)
{
    io_chars(x, a->layer, sizeof a->layer, "algo.layer");
    io_chars(x, a->op, sizeof a->op, "algo.op");
    io_chars(x, a->pass, sizeof a->pass, "algo.pass");
    io_chars(x, a->dtype, sizeof a->dtype, "algo.dtype");
    io_chars(x, a->engine, sizeof a->engine, "algo.engine");
    io_int(x, &a->algo, -1, 1 << 20, "algo.algo");
    io_bool(x, &a->deterministic, "algo.deterministic");
    io_chars(x, a->math, sizeof a->math, "algo.math");
    io_i64(x, &a->workspace_bytes, "algo.workspace_bytes");
    io_f64(x, &a->time_ms, "algo.time_ms");
    io_chars(x, a->chosen_by, sizeof a->chosen_by, "algo.chosen_by");
    io_i64(x, &a->calls, "algo.calls");
    io_bool(x, &a->changed, "algo.changed");
}

/* ---- the result ---- */

static void io_identity(wio *x, ck_result *r)
{
    io_chars(x, r->backend, sizeof r->backend, "backend");
    io_chars(x, r->backend_device, sizeof r->backend_device, "backend_device");
    io_chars(x, r->backend_versions, sizeof r->backend_versions, "backend_versions");
    io_int(x, &r->backend_threads, 0, 1 << 20, "backend_threads");
    io_chars(x, r->backend_isa, sizeof r->backend_isa, "backend_isa");
    IO_ENUM(x, r->dtype, CK_DTYPE_COUNT, "dtype");
    if (!io_array(x, (void **)&r->segments, &r->n_segments, x->g->n, sizeof *r->segments, 16,
                  "segments"))
        return;
    for (int s = 0; s < r->n_segments; s++) {
        io_layer(x, &r->segments[s].first, false, "segment.first");
        io_layer(x, &r->segments[s].last, false, "segment.last");
        if (x->reading && r->segments[s].last < r->segments[s].first)
            ck_wire_fail(x->r, "segment", "ends before it starts");
    }
}

static void io_main_judgement(wio *x, ck_result *r)
{
    io_tensors(x, &r->tensors, &r->n_tensors, "tensors");
    io_index(x, &r->first_divergence, r->n_tensors, true, "first_divergence");
    io_i64(x, &r->tensors_judged, "tensors_judged");
    for (int k = 0; k < 3; k++)
        io_i64(x, &r->judged_counts[k], "judged_counts");
    io_int(x, &r->n_retained_steps, 0, 3, "n_retained_steps");
    for (int k = 0; k < 3; k++)
        io_int(x, &r->retained_steps[k], 0, x->steps > 0 ? x->steps - 1 : 0, "retained_steps");
    io_f64(x, &r->memory_saving, "memory_saving");
    io_bool(x, &r->memory_met, "memory_met");
    IO_ENUM(x, r->verdict, CK_VERDICT_MISMATCH + 1, "verdict");
    io_bool(x, &r->expect_met, "expect_met");
    io_bool(x, &r->memory_expectation_met, "memory_expectation_met");
    io_bool(x, &r->pass, "pass");
    io_bool(x, &r->vacuous, "vacuous");
}

static void io_extras(wio *x, ck_result *r)
{
    if (io_present(x, r->bisect, "bisect")) {
        if (x->reading && !(r->bisect = calloc(1, sizeof *r->bisect)))
            ck_wire_fail(x->r, "bisect", "out of memory");
        else
            io_bisect(x, r->bisect);
    }
    io_bool(x, &r->verified_recompute, "verified_recompute");
    if (io_array(x, (void **)&r->recompute_checks, &r->n_recompute_checks, MAX_TENSORS,
                 sizeof *r->recompute_checks, 16, "recompute_checks"))
        for (int k = 0; k < r->n_recompute_checks && !(x->reading && x->r->failed); k++)
            io_check(x, &r->recompute_checks[k], false);
    io_int(x, &r->recompute_mismatches, 0, r->n_recompute_checks, "recompute_mismatches");
    io_int(x, &r->scale_mismatches, 0, x->steps, "scale_mismatches");
    io_step(x, &r->first_scale_mismatch, true, "first_scale_mismatch");
}

/* How plain-equivalence was established, and segment by segment each run's facts. */
static void io_equivalence(wio *x, ck_result *r)
{
    IO_ENUM(x, r->equivalence, CK_EQUIVALENCE_SEGMENTS + 1, "equivalence");
    if (r->equivalence != CK_EQUIVALENCE_SEGMENTS)
        return;
    IO_ENUM(x, r->segmentwise_reason, CK_SEGMENTWISE_PLAIN_OVER_LIMIT + 1, "segmentwise_reason");
    io_i64(x, &r->memory_limit_bytes, "memory_limit_bytes");
    io_i64(x, &r->plain_predicted_peak_bytes, "plain_predicted_peak_bytes");
    if (io_array(x, (void **)&r->segment_runs, &r->n_segment_runs, r->n_segments,
                 sizeof *r->segment_runs, 16, "segment_runs"))
        for (int k = 0; k < r->n_segment_runs && !(x->reading && x->r->failed); k++) {
            ck_segment_run *sr = &r->segment_runs[k];
            io_int(x, &sr->segment, 0, r->n_segments - 1, "segment_run.segment");
            io_chars(x, sr->label, sizeof sr->label, "segment_run.label");
            io_i64(x, &sr->peak_activation_bytes, "segment_run.peak");
            io_i64(x, &sr->predicted_peak_bytes, "segment_run.predicted");
            io_i64(x, &sr->recomputed_layers, "segment_run.recomputed_layers");
            io_f64(x, &sr->wall_time_s, "segment_run.wall_time_s");
            IO_ENUM(x, sr->verdict, CK_VERDICT_MISMATCH + 1, "segment_run.verdict");
            io_i64(x, &sr->tensors_judged, "segment_run.tensors_judged");
            for (int c = 0; c < 3; c++)
                io_i64(x, &sr->counts[c], "segment_run.counts");
            io_step(x, &sr->first_step, true, "segment_run.first_step");
            IO_ENUM(x, sr->first_kind, CK_KIND_BUFFER + 1, "segment_run.first_kind");
            io_chars(x, sr->first_name, sizeof sr->first_name, "segment_run.first_name");
            io_int(x, &sr->scale_mismatches, 0, x->steps, "segment_run.scale_mismatches");
        }
    io_int(x, &r->shown_segment_run, 0, r->n_segment_runs > 0 ? r->n_segment_runs - 1 : 0,
           "shown_segment_run");
    if (x->reading && !x->r->failed && r->n_segment_runs > 0)
        r->plain.label = r->segment_runs[r->shown_segment_run].label;
}

static void io_precision(wio *x, ck_result *r)
{
    io_bool(x, &r->has_vs_fp32, "has_vs_fp32");
    io_tensors(x, &r->vs_fp32, &r->n_vs_fp32, "vs_fp32");
    IO_ENUM(x, r->vs_fp32_verdict, CK_VERDICT_MISMATCH + 1, "vs_fp32_verdict");
    io_index(x, &r->vs_fp32_first, r->n_vs_fp32, r->has_vs_fp32, "vs_fp32_first");
    io_bool(x, &r->vs_fp32_expect_met, "vs_fp32_expect_met");
    IO_ENUM(x, r->precision_check, CK_PRECISION_CHECK_OFF + 1, "precision_check");
    io_bool(x, &r->vs_fp32_calibrated, "vs_fp32_calibrated");
    io_index(x, &r->vs_fp32_worst, r->n_vs_fp32, r->has_vs_fp32, "vs_fp32_worst");
    io_nonfinite(x, &r->nonfinite_plain);
    io_nonfinite(x, &r->nonfinite_ckpt);
    if (x->reading) { /* the activation counts travel once, with the run summaries */
        r->nonfinite_plain.act = r->plain.act_nonfinite;
        r->nonfinite_ckpt.act = r->ckpt.act_nonfinite;
    }
    io_bool(x, &r->nonfinite_failed, "nonfinite_failed");
}

static void io_backends(wio *x, ck_result *r)
{
    io_chars(x, r->algo_policy, sizeof r->algo_policy, "algo_policy");
    if (io_array(x, (void **)&r->algos, &r->n_algos, MAX_TENSORS, sizeof *r->algos, 16, "algos"))
        for (int k = 0; k < r->n_algos && !(x->reading && x->r->failed); k++)
            io_algo(x, &r->algos[k]);
    io_bool(x, &r->has_device_memory, "has_device_memory");
    io_i64(x, &r->device_memory.pool_peak_bytes, "device_memory.pool_peak_bytes");
    io_i64(x, &r->device_memory.workspace_peak_bytes, "device_memory.workspace_peak_bytes");
    io_i64(x, &r->device_memory.scratch_peak_bytes, "device_memory.scratch_peak_bytes");
    io_bool(x, &r->has_vs_backend, "has_vs_backend");
    io_chars(x, r->vs_backend_name, sizeof r->vs_backend_name, "vs_backend_name");
    io_tensors(x, &r->vs_backend, &r->n_vs_backend, "vs_backend");
    IO_ENUM(x, r->vs_backend_verdict, CK_VERDICT_MISMATCH + 1, "vs_backend_verdict");
    io_index(x, &r->vs_backend_first, r->n_vs_backend, r->has_vs_backend, "vs_backend_first");
}

static void io_result(wio *x, ck_result *r)
{
    io_identity(x, r);
    io_summary(x, &r->plain, "plain");
    io_summary(x, &r->ckpt, "checkpointed");
    io_main_judgement(x, r);
    io_extras(x, r);
    io_equivalence(x, r);
    io_precision(x, r);
    io_backends(x, r);
}

void ck_result_encode(const ck_result *r, ck_wire_out *w)
{
    /* the visitor only reads the result when writing */
    wio x = {.reading = false, .w = w, .g = r->g, .steps = r->cs->steps};
    ck_wire_put_bytes(w, CK_RESULT_WIRE_MAGIC, 8);
    ck_wire_put_u32(w, CK_RESULT_WIRE_VERSION);
    io_result(&x, (ck_result *)r);
}

ck_status ck_result_decode(ck_wire_in *r, const ck_graph *g, ck_result *res, ck_error *err)
{
    memset(res, 0, sizeof *res);
    res->cs = g->cs;
    res->g = g;
    char magic[8];
    ck_wire_get_bytes(r, magic, sizeof magic, "magic");
    if (!r->failed && memcmp(magic, CK_RESULT_WIRE_MAGIC, 8) != 0)
        ck_wire_fail(r, "magic", "not an encoded result");
    uint32_t version = ck_wire_get_u32(r, "version");
    if (!r->failed && version != CK_RESULT_WIRE_VERSION)
        ck_wire_fail(r, "version", "not the version this program writes");
    if (!r->failed && (g->cs->steps < 0 || g->cs->steps > MAX_STEPS))
        ck_wire_fail(r, "steps", "out of range");
    wio x = {.reading = true, .r = r, .g = g, .steps = g->cs->steps};
    if (!r->failed)
        io_result(&x, res);
    if (r->failed)
        return ck_fail(err, CK_ERR_INPUT, "encoded result: %s", r->why);
    return CK_OK;
}
