/*
 * Bisect: noise floor, segment search, layer localisation, causes, and the value-level
 * recompute check (see bisect.h for the method).
 */
#include "harness/verify/bisect.h"
#include "harness/verify/training.h"

#include "harness/core/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A checkpointed difference counts as noise when it is no larger than this many times the
 * difference between two plain runs: one plain-vs-plain sample underestimates the spread
 * of a nondeterministic reduction, and twice its max_abs still tells noise (same order)
 * from a real divergence (orders larger). */
#define CK_NOISE_FLOOR_FACTOR 2.0

/* =======================================================================================
 * The recorder: an executor observer that copies and compares layer tensors
 * ======================================================================================= */

typedef struct {
    void *data;
    ck_dtype dtype;
    ck_shape shape;
} host_copy;

typedef struct recorder recorder;

/* What localisation saw in each layer (bisect's per-layer marks, one byte per layer). */
enum {
    MARK_FIRST_DIFF = 1,     /* the first recomputed output of its segment that differs */
    MARK_DTYPE = 2,          /* ... recomputed in another dtype than the original */
    MARK_RNG = 4,            /* its dropout/noise draws differ on recomputation */
    MARK_STATE = 8,          /* a buffer changed during recomputation */
    MARK_STATE_COUNTED = 16, /* ... with num_batches_tracked counted again */
};

struct recorder {
    ck_backend *b;
    const ck_graph *g;
    int step;   /* only this step; -1: every step */
    int lo, hi; /* layer window, inclusive */
    int dlo;    /* output gradients are kept/compared for layers dlo..hi */
    const ck_plan *plan; /* check_recompute keeps originals only of layers in its segments */
    bool keep_forward;  /* keep forward outputs (the reference of a forward comparison) */
    bool keep_douts;    /* keep output gradients (the reference of a backward comparison) */
    bool check_recompute; /* compare recomputed outputs with this run's originals */
    const recorder *ref;  /* compare forward outputs / output gradients with this run's */

    host_copy *fwd;    /* per layer: the latest original forward output */
    ck_fwd_args *fwd_args;
    host_copy *dout;   /* per layer */
    host_copy (*buf)[3]; /* per layer: buffers after the original forward */

    /* findings */
    ck_layer_finding first_fwd_diff;  /* vs ref, forward order */
    ck_layer_finding first_dout_diff; /* vs ref, backward order */
    int n_checks, cap_checks;
    ck_recompute_check *checks;
    int state_layer;
    char state_buffer[32];
    ck_metrics state_m;
    int64_t nbt_orig, nbt_recomp;
    unsigned char *marks; /* per layer (bisect's localisation); NULL: not kept */
};

static void copy_free(host_copy *c)
{
    free(c->data);
    memset(c, 0, sizeof *c);
}

static ck_status copy_tensor(ck_backend *b, const ck_tensor *t, host_copy *c, ck_error *err)
{
    size_t bytes = ck_tensor_bytes(t);
    if (!c->data || ck_dtype_size(c->dtype) * (size_t)ck_shape_numel(&c->shape) != bytes) {
        free(c->data);
        c->data = malloc(bytes ? bytes : 1);
        if (!c->data)
            return ck_fail(err, CK_ERR_NOMEM, "out of host memory recording %s (%zu bytes)",
                           t->name ? t->name : "a tensor", bytes);
    }
    c->dtype = t->dtype;
    c->shape = t->shape;
    return b->download(b, t, c->data, err);
}

static double load_double(ck_dtype dt, const void *data, int64_t i)
{
    switch (dt) {
    case CK_F64: return ((const double *)data)[i];
    case CK_F32: return ((const float *)data)[i];
    case CK_F16: return ck_f16_to_f32(((const uint16_t *)data)[i]);
    case CK_BF16: return ck_bf16_to_f32(((const uint16_t *)data)[i]);
    default: return NAN;
    }
}

/* Compares a live tensor with a host copy (the copy is the reference). */
static ck_status compare_live(recorder *r, const ck_tensor *t, const host_copy *ref,
                              ck_metrics *m, ck_verdict *v, ck_error *err)
{
    host_copy cur;
    memset(&cur, 0, sizeof cur);
    ck_status st = copy_tensor(r->b, t, &cur, err);
    if (st != CK_OK) {
        copy_free(&cur);
        return st;
    }
    if (cur.dtype != ref->dtype || !ck_shape_equal(&cur.shape, &ref->shape)) {
        /* a recomputation in another dtype: compare the values as doubles */
        memset(m, 0, sizeof *m);
        m->numel = ck_shape_numel(&ref->shape);
        m->first_bad = 0;
        m->n_outside = m->numel;
        *v = CK_VERDICT_MISMATCH;
        if (ck_shape_equal(&cur.shape, &ref->shape) && ck_dtype_is_float(cur.dtype) &&
            ck_dtype_is_float(ref->dtype)) {
            int64_t n = m->numel;
            double *a = malloc((size_t)n * sizeof *a), *bb = malloc((size_t)n * sizeof *bb);
            if (a && bb) {
                for (int64_t i = 0; i < n; i++) {
                    a[i] = load_double(cur.dtype, cur.data, i);
                    bb[i] = load_double(ref->dtype, ref->data, i);
                }
                ck_compare(CK_F64, n, a, bb, 0.0, 0.0, m);
                m->bitwise = false;
            }
            free(a);
            free(bb);
        }
    } else {
        *v = ck_compare(cur.dtype, ck_shape_numel(&cur.shape), cur.data, ref->data,
                        r->g->cs->rtol, r->g->cs->atol, m);
    }
    copy_free(&cur);
    return CK_OK;
}

/* How many elements of a dropout/noise draw differ between two streams. */
static int64_t rng_draws_differ(const ck_node *nd, const ck_rng_stream *a, const ck_rng_stream *b)
{
    if (memcmp(a, b, sizeof *a) == 0)
        return 0;
    int64_t n = nd->draw_elems, differ = 0;
    if (nd->draw_uniform) {
        uint32_t thr = ck_dropout_threshold(nd->op.rate);
        for (int64_t i = 0; i < n; i++)
            differ += (ck_rng_u32(a, (uint64_t)i) < thr) != (ck_rng_u32(b, (uint64_t)i) < thr);
    } else {
        for (int64_t i = 0; i < n; i++) {
            float x = ck_rng_normal_f32(a, (uint64_t)i), y = ck_rng_normal_f32(b, (uint64_t)i);
            differ += memcmp(&x, &y, sizeof x) != 0;
        }
    }
    return differ;
}

static ck_status push_check(recorder *r, const ck_recompute_check *c, ck_error *err)
{
    if (r->n_checks == r->cap_checks) {
        int cap = r->cap_checks ? 2 * r->cap_checks : 32;
        ck_recompute_check *nc = realloc(r->checks, (size_t)cap * sizeof *nc);
        if (!nc)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory recording recompute checks");
        r->checks = nc;
        r->cap_checks = cap;
    }
    r->checks[r->n_checks++] = *c;
    return CK_OK;
}

static const ck_tensor *io_buffer(const ck_op_io *io, int k)
{
    return k == 0 ? io->running_mean : k == 1 ? io->running_var : io->num_batches_tracked;
}

static const char *buffer_suffix(int k)
{
    return k == 0 ? "running_mean" : k == 1 ? "running_var" : "num_batches_tracked";
}

static int64_t nbt_value(const host_copy *c)
{
    return c->data && c->dtype == CK_I64 ? *(const int64_t *)c->data : -1;
}

static ck_status on_forward(recorder *r, const ck_exec_event_info *ev, ck_error *err)
{
    int i = ev->layer;
    const ck_node *nd = &r->g->nodes[i];
    ck_status st = CK_OK;
    bool recomputed_later = r->check_recompute && r->plan && r->plan->segment_of[i] >= 0;
    if (!ev->recompute) {
        if ((r->keep_forward || recomputed_later) &&
            (st = copy_tensor(r->b, ev->tensor, &r->fwd[i], err)) != CK_OK)
            return st;
        r->fwd_args[i] = *ev->args;
        if (r->ref && r->ref->fwd[i].data && r->first_fwd_diff.layer < 0) {
            ck_metrics m;
            ck_verdict v;
            if ((st = compare_live(r, ev->tensor, &r->ref->fwd[i], &m, &v, err)) != CK_OK)
                return st;
            if (v != CK_VERDICT_IDENTICAL)
                r->first_fwd_diff = (ck_layer_finding){.layer = i, .step = ev->step, .m = m,
                                                       .verdict = v};
        }
        if (recomputed_later)
            for (int k = 0; k < 3; k++)
                if (io_buffer(ev->io, k) &&
                    (st = copy_tensor(r->b, io_buffer(ev->io, k), &r->buf[i][k], err)) != CK_OK)
                    return st;
        return CK_OK;
    }
    if (!r->check_recompute || !r->fwd[i].data)
        return CK_OK;
    ck_recompute_check c = {.layer = i, .step = ev->step, .orig_dtype = r->fwd[i].dtype,
                            .recomp_dtype = ev->tensor->dtype, .rng_differs = -1};
    if ((st = compare_live(r, ev->tensor, &r->fwd[i], &c.m, &c.verdict, err)) != CK_OK)
        return st;
    if (nd->draw_elems > 0)
        c.rng_differs = rng_draws_differ(nd, &r->fwd_args[i].rng, &ev->args->rng);
    if ((st = push_check(r, &c, err)) != CK_OK)
        return st;
    copy_free(&r->fwd[i]); /* compared: memory back */
    for (int k = 0; k < 3; k++) {
        if (!r->buf[i][k].data || !io_buffer(ev->io, k))
            continue;
        ck_metrics m;
        ck_verdict v;
        if ((st = compare_live(r, io_buffer(ev->io, k), &r->buf[i][k], &m, &v, err)) != CK_OK)
            return st;
        if (v != CK_VERDICT_IDENTICAL && r->marks) {
            r->marks[i] |= MARK_STATE;
            host_copy now;
            memset(&now, 0, sizeof now);
            int64_t before = nbt_value(&r->buf[i][2]), after = -1;
            if (ev->io->num_batches_tracked &&
                copy_tensor(r->b, ev->io->num_batches_tracked, &now, err) == CK_OK)
                after = nbt_value(&now);
            copy_free(&now);
            if (before >= 0 && after >= 0)
                r->marks[i] |= MARK_STATE_COUNTED;
        }
        if (v != CK_VERDICT_IDENTICAL && (r->state_layer < 0 || i < r->state_layer)) {
            r->state_layer = i;
            snprintf(r->state_buffer, sizeof r->state_buffer, "%s", buffer_suffix(k));
            r->state_m = m;
            host_copy now;
            memset(&now, 0, sizeof now);
            r->nbt_orig = nbt_value(&r->buf[i][2]);
            r->nbt_recomp = -1;
            if (ev->io->num_batches_tracked &&
                copy_tensor(r->b, ev->io->num_batches_tracked, &now, err) == CK_OK)
                r->nbt_recomp = nbt_value(&now);
            copy_free(&now);
        }
    }
    for (int k = 0; k < 3; k++)
        copy_free(&r->buf[i][k]);
    return CK_OK;
}

static ck_status on_backward(recorder *r, const ck_exec_event_info *ev, ck_error *err)
{
    int i = ev->layer;
    ck_status st;
    if (r->keep_douts && (st = copy_tensor(r->b, ev->tensor, &r->dout[i], err)) != CK_OK)
        return st;
    if (r->ref && r->ref->dout[i].data && r->first_dout_diff.layer < 0) {
        ck_metrics m;
        ck_verdict v;
        if ((st = compare_live(r, ev->tensor, &r->ref->dout[i], &m, &v, err)) != CK_OK)
            return st;
        if (v != CK_VERDICT_IDENTICAL)
            r->first_dout_diff = (ck_layer_finding){.layer = i, .step = ev->step, .m = m,
                                                    .verdict = v};
    }
    return CK_OK;
}

static ck_status recorder_observe(void *user, const ck_exec_event_info *ev, ck_error *err)
{
    recorder *r = user;
    if ((r->step >= 0 && ev->step != r->step) || ev->layer > r->hi)
        return CK_OK;
    if (ev->ev == CK_EVENT_FORWARD)
        return ev->layer >= r->lo ? on_forward(r, ev, err) : CK_OK;
    return ev->layer >= r->dlo ? on_backward(r, ev, err) : CK_OK;
}

static ck_status recorder_init(recorder *r, ck_backend *b, const ck_graph *g, int step, int lo,
                               int hi, ck_error *err)
{
    memset(r, 0, sizeof *r);
    r->b = b;
    r->g = g;
    r->step = step;
    r->lo = lo;
    r->dlo = lo;
    r->hi = hi;
    r->first_fwd_diff.layer = r->first_dout_diff.layer = -1;
    r->state_layer = -1;
    r->nbt_orig = r->nbt_recomp = -1;
    r->fwd = calloc((size_t)g->n, sizeof *r->fwd);
    r->fwd_args = calloc((size_t)g->n, sizeof *r->fwd_args);
    r->dout = calloc((size_t)g->n, sizeof *r->dout);
    r->buf = calloc((size_t)g->n, sizeof *r->buf);
    if (!r->fwd || !r->fwd_args || !r->dout || !r->buf)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory creating a recorder");
    return CK_OK;
}

static void recorder_free(recorder *r)
{
    for (int i = 0; r->g && i < r->g->n; i++) {
        if (r->fwd)
            copy_free(&r->fwd[i]);
        if (r->dout)
            copy_free(&r->dout[i]);
        for (int k = 0; r->buf && k < 3; k++)
            copy_free(&r->buf[i][k]);
    }
    free(r->fwd);
    free(r->fwd_args);
    free(r->dout);
    free(r->buf);
    free(r->checks);
    memset(r, 0, sizeof *r);
}

/* Where bisect's trainings run: backend, graph, dtype, the log that counts them, and
 * where their progress goes (ck_bisect_opts). */
typedef struct {
    ck_backend *b;
    const ck_graph *g;
    ck_dtype dtype;
    ck_training_log *log;
    ck_progress_fn progress;
    void *progress_user;
    int *trainings; /* bisect's trainings so far (numbers them in the progress) */
} bisect_env;

/* One bisect training's executor observer: its recorder (may be NULL) and its progress. */
typedef struct {
    recorder *r;
    const bisect_env *e;
    ck_progress_info info;
    char label[48];
} bisect_observer;

static ck_status bisect_observe(void *user, const ck_exec_event_info *ev, ck_error *err)
{
    bisect_observer *o = user;
    if (o->e->progress) {
        ck_progress_advance(&o->info, ev);
        o->e->progress(o->e->progress_user, &o->info);
    }
    return o->r ? recorder_observe(o->r, ev, err) : CK_OK;
}

/* One training of the bisection; what: its role in the progress line ("plain", "search"). */
static ck_status train_observed(const bisect_env *e, ck_training_kind kind, const ck_plan *plan,
                                recorder *r, ck_record *rec, const char *what, ck_error *err)
{
    bisect_observer o = {.r = r, .e = e};
    int k = e->trainings ? ++*e->trainings : 0;
    snprintf(o.label, sizeof o.label, "bisect %d %s", k, what);
    /* one training at a time, as many as the search needs: the case's own lockstep work
     * is done, so its share stays 1 (the ETA counts the cases still to run) */
    o.info = (ck_progress_info){.run = 0, .n_runs = 1, .run_label = o.label,
                                .steps = e->g->cs->steps, .n_layers = e->g->n, .fraction = 1.0};
    bool observed = r || e->progress;
    ck_run_hooks hooks = {.observer = observed ? bisect_observe : NULL,
                          .observer_user = observed ? &o : NULL,
                          .keep_activation_grads = r != NULL}; /* the recorder reads them */
    ck_training t = {.kind = kind, .b = e->b, .g = e->g, .plan = plan, .dtype = e->dtype,
                     .hooks = &hooks, .log = e->log};
    return ck_training_run(&t, rec, err);
}

/* =======================================================================================
 * Judgements
 * ======================================================================================= */

static bool tensor_within_floor(const ck_tensor_result *c, const ck_tensor_result *f)
{
    if (c->verdict == CK_VERDICT_IDENTICAL)
        return true;
    if (!f || f->verdict == CK_VERDICT_IDENTICAL || c->m.max_ulp == UINT64_MAX)
        return false;
    return c->m.max_abs <= CK_NOISE_FLOOR_FACTOR * f->m.max_abs;
}

/* Whether a comparison counts as a divergence for this case (its expect decides whether
 * any bit counts), ignoring differences within the noise floor. */
static bool diverges(const ck_case *c, const ck_result *cmp, const ck_bisect_result *br)
{
    for (int k = 0; k < cmp->n_tensors; k++) {
        const ck_tensor_result *t = &cmp->tensors[k];
        bool counts = ck_case_expect(c, cmp->dtype) == CK_EXPECT_IDENTICAL ? t->verdict != CK_VERDICT_IDENTICAL
                                                       : t->verdict == CK_VERDICT_MISMATCH;
        if (!counts)
            continue;
        const ck_tensor_result *f = br && br->noise_floor_measured && k < br->n_floor
                                        ? &br->floor[k]
                                        : NULL;
        if (!tensor_within_floor(t, f))
            return true;
    }
    return false;
}

static int first_divergent_step(const ck_case *c, const ck_result *cmp, const ck_bisect_result *br)
{
    for (int k = 0; k < cmp->n_tensors; k++) {
        const ck_tensor_result *t = &cmp->tensors[k];
        if (t->verdict == CK_VERDICT_IDENTICAL)
            continue;
        if (ck_case_expect(c, cmp->dtype) != CK_EXPECT_IDENTICAL && t->verdict != CK_VERDICT_MISMATCH)
            continue;
        const ck_tensor_result *f = br && br->noise_floor_measured && k < br->n_floor
                                        ? &br->floor[k]
                                        : NULL;
        if (!tensor_within_floor(t, f))
            return t->step;
    }
    return -1;
}

/* Compares two records (b against the reference a) into a scratch result. */
static ck_status compare_runs(const ck_graph *g, ck_dtype dtype, const ck_record *ref,
                              const ck_record *other, ck_result *out, ck_error *err)
{
    memset(out, 0, sizeof *out);
    out->cs = g->cs;
    out->g = g;
    out->dtype = dtype;
    return ck_compare_records(g, ref, other, out, err);
}

/* =======================================================================================
 * Noise floor
 * ======================================================================================= */

static ck_status measure_noise_floor(const bisect_env *e, const ck_record *plain,
                                     ck_bisect_result *br, ck_error *err)
{
    ck_backend *b = e->b;
    const ck_graph *g = e->g;
    ck_dtype dtype = e->dtype;
    ck_record again;
    ck_result cmp;
    memset(&cmp, 0, sizeof cmp);
    ck_status st = train_observed(e, CK_TRAINING_NOISE_FLOOR, NULL, NULL, &again,
                                  "plain again", err);
    if (st == CK_OK)
        st = compare_runs(g, dtype, plain, &again, &cmp, err);
    ck_record_free(&again);
    if (st != CK_OK) {
        ck_result_free(&cmp);
        return st;
    }
    br->noise_floor_measured = true;
    br->n_floor = cmp.n_tensors;
    br->floor = cmp.tensors;
    br->floor_verdict = cmp.verdict;
    cmp.tensors = NULL;
    cmp.n_tensors = 0;
    int step = cmp.first_divergence >= 0 ? br->floor[cmp.first_divergence].step : -1;
    ck_result_free(&cmp);
    if (step < 0)
        return CK_OK;

    /* localise the first nondeterministic layer: two recorded plain runs at that step */
    recorder ra, rb;
    ck_record r1, r2;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    if ((st = recorder_init(&ra, b, g, step, 0, g->n - 1, err)) != CK_OK ||
        (st = recorder_init(&rb, b, g, step, 0, g->n - 1, err)) != CK_OK)
        goto out;
    ra.keep_forward = ra.keep_douts = true;
    rb.ref = &ra;
    if ((st = train_observed(e, CK_TRAINING_NOISE_FLOOR, NULL, &ra, &r1, "noise floor", err)) !=
            CK_OK ||
        (st = train_observed(e, CK_TRAINING_NOISE_FLOOR, NULL, &rb, &r2, "noise floor", err)) !=
            CK_OK)
        goto out;
    if (rb.first_fwd_diff.layer >= 0) {
        br->nondet = rb.first_fwd_diff;
    } else if (rb.first_dout_diff.layer >= 0) {
        br->nondet = rb.first_dout_diff;
        br->nondet_in_backward = true;
    } else {
        br->nondet.step = step; /* the difference is in parameter gradients or the update */
    }
out:
    recorder_free(&ra);
    recorder_free(&rb);
    ck_record_free(&r1);
    ck_record_free(&r2);
    return st;
}

/* =======================================================================================
 * Segment search
 * ======================================================================================= */

typedef struct {
    const bisect_env *e;
    const ck_graph *g;
    ck_dtype dtype;
    const ck_record *plain;
    ck_bisect_result *br;
    int runs;
} search_ctx;

static ck_status subset_diverges(search_ctx *s, const bool *enabled, bool *out, ck_error *err)
{
    ck_plan plan;
    ck_record rec;
    ck_result cmp;
    memset(&rec, 0, sizeof rec);
    memset(&cmp, 0, sizeof cmp);
    ck_status st = ck_plan_build_subset(s->g, enabled, &plan, err);
    if (st != CK_OK)
        return st;
    s->runs++;
    if ((st = train_observed(s->e, CK_TRAINING_BISECT, &plan, NULL, &rec, "search",
                             err)) == CK_OK &&
        (st = compare_runs(s->g, s->dtype, s->plain, &rec, &cmp, err)) == CK_OK)
        *out = diverges(s->g->cs, &cmp, s->br);
    ck_result_free(&cmp);
    ck_record_free(&rec);
    ck_plan_free(&plan);
    return st;
}

/* Narrows the set of checkpointed segments (known to diverge): halves while one half alone
 * diverges (when `narrow`), then drops segments one by one while the rest still diverges
 * (a 1-minimal set), then confirms the final set with one more run. */
static ck_status search_segments(search_ctx *s, int k, bool *set, bool narrow, ck_error *err)
{
    bool *trial = calloc((size_t)k + 1, sizeof *trial);
    if (!trial)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory searching segments");
    ck_status st = CK_OK;
    bool d = false;
    for (; narrow;) {
        int members[4096], m = 0;
        for (int i = 0; i < k && m < 4096; i++)
            if (set[i])
                members[m++] = i;
        if (m <= 1)
            break;
        bool narrowed = false;
        for (int half = 0; half < 2 && !narrowed; half++) {
            memset(trial, 0, (size_t)k * sizeof *trial);
            int from = half ? m / 2 : 0, to = half ? m : m / 2;
            for (int j = from; j < to; j++)
                trial[members[j]] = true;
            if ((st = subset_diverges(s, trial, &d, err)) != CK_OK)
                goto out;
            if (d) {
                memcpy(set, trial, (size_t)k * sizeof *set);
                narrowed = true;
            }
        }
        if (!narrowed)
            break;
    }
    for (int i = 0; i < k; i++) {
        if (!set[i])
            continue;
        int members = 0;
        for (int j = 0; j < k; j++)
            members += set[j];
        if (members <= 1)
            break;
        memcpy(trial, set, (size_t)k * sizeof *trial);
        trial[i] = false;
        if ((st = subset_diverges(s, trial, &d, err)) != CK_OK)
            goto out;
        if (d)
            set[i] = false;
    }
    if ((st = subset_diverges(s, set, &d, err)) != CK_OK)
        goto out;
    if (!d)
        st = ck_fail(err, CK_ERR_INTERNAL, "segment search: the final set does not reproduce the "
                                           "divergence (the case is nondeterministic beyond its "
                                           "noise floor)");
out:
    free(trial);
    return st;
}

/* Records a found set as the next independent set (br->n_culprit_sets counts them). */
static void take_set(ck_bisect_result *br, int k, const bool *set)
{
    for (int i = 0; i < k; i++)
        if (set[i])
            br->culprit_set[i] = br->n_culprit_sets;
    br->n_culprit_sets++;
}

/* Finds independent culprit sets among `members`, whose checkpointing is known to diverge:
 * a single segment is one; otherwise each half that diverges on its own is searched the
 * same way, and when neither half does, the members need each other and are minimised
 * into one set. Takes at least one set (unless the cap is reached). */
static ck_status split_search(search_ctx *s, int k, const bool *members, ck_error *err)
{
    ck_bisect_result *br = s->br;
    if (br->n_culprit_sets >= CK_BISECT_MAX_SETS) {
        br->sets_capped = true;
        return CK_OK;
    }
    int m = 0;
    for (int i = 0; i < k; i++)
        m += members[i];
    bool *half = calloc(2 * ((size_t)k + 1), sizeof *half);
    if (!half)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory searching segments");
    ck_status st = CK_OK;
    if (m == 1) {
        take_set(br, k, members);
        goto out;
    }
    bool d[2] = {false, false};
    for (int h = 0, seen = 0; h < 2; h++) {
        bool *hs = half + (size_t)h * ((size_t)k + 1);
        seen = 0;
        for (int i = 0; i < k; i++)
            if (members[i])
                hs[i] = h ? seen++ >= m / 2 : seen++ < m / 2;
        if ((st = subset_diverges(s, hs, &d[h], err)) != CK_OK)
            goto out;
    }
    for (int h = 0; h < 2 && st == CK_OK; h++)
        if (d[h])
            st = split_search(s, k, half + (size_t)h * ((size_t)k + 1), err);
    if (st == CK_OK && !d[0] && !d[1]) {
        memcpy(half, members, (size_t)k * sizeof *half);
        if ((st = search_segments(s, k, half, false, err)) == CK_OK)
            take_set(br, k, half);
    }
out:
    free(half);
    return st;
}

/* After the first set: while checkpointing every segment in no set yet still diverges, the
 * independent sets among them. Ends with one run that diverges no more (or at the cap). */
static ck_status search_other_sets(search_ctx *s, int k, ck_error *err)
{
    ck_bisect_result *br = s->br;
    bool *rest = calloc((size_t)k + 1, sizeof *rest);
    if (!rest)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory searching segments");
    ck_status st = CK_OK;
    while (!br->sets_capped) {
        int m = 0;
        for (int i = 0; i < k; i++)
            m += rest[i] = br->culprit_set[i] < 0;
        bool d = false;
        if (m == 0 || (st = subset_diverges(s, rest, &d, err)) != CK_OK || !d)
            break;
        if (br->n_culprit_sets >= CK_BISECT_MAX_SETS) {
            br->sets_capped = true;
            break;
        }
        if ((st = split_search(s, k, rest, err)) != CK_OK)
            break;
    }
    free(rest);
    return st;
}

/* =======================================================================================
 * Layer localisation
 * ======================================================================================= */

/* Records one segment of the culprit plan at br->step: its recomputed outputs and buffers
 * against their originals, and output gradients from its inputs' producers on against the
 * plain run's. Memory: one copy of the segment's outputs and gradients. */
static ck_status localise_layers(const bisect_env *e, const ck_plan *plan,
                                 const ck_segment *seg, ck_bisect_result *br,
                                 unsigned char *marks, ck_error *err)
{
    ck_backend *b = e->b;
    const ck_graph *g = e->g;
    recorder rp, rc;
    ck_record p, c;
    memset(&p, 0, sizeof p);
    memset(&c, 0, sizeof c);
    memset(&rp, 0, sizeof rp);
    memset(&rc, 0, sizeof rc);
    ck_status st;
    int dlo = seg->first;
    for (int k = seg->first; k <= seg->last; k++)
        for (int j = 0; j < g->nodes[k].n_in; j++)
            if (g->nodes[k].in[j] >= 0 && g->nodes[k].in[j] < dlo)
                dlo = g->nodes[k].in[j];
    if ((st = recorder_init(&rp, b, g, br->step, seg->first, seg->last, err)) != CK_OK ||
        (st = recorder_init(&rc, b, g, br->step, seg->first, seg->last, err)) != CK_OK)
        goto out;
    rp.dlo = rc.dlo = dlo;
    rp.keep_douts = true;
    rc.check_recompute = true;
    rc.plan = plan;
    rc.ref = &rp;
    rc.marks = marks;
    if ((st = train_observed(e, CK_TRAINING_BISECT, NULL, &rp, &p, "locate plain", err)) !=
            CK_OK ||
        (st = train_observed(e, CK_TRAINING_BISECT, plan, &rc, &c, "locate ckpt",
                             err)) != CK_OK)
        goto out;
    /* the first recomputed layer (topological order) whose output differs */
    bool first = true;
    for (int k = 0; k < rc.n_checks; k++) {
        const ck_recompute_check *ck = &rc.checks[k];
        if (ck->rng_differs > 0)
            marks[ck->layer] |= MARK_RNG;
        if (ck->verdict == CK_VERDICT_IDENTICAL)
            continue;
        if (first)
            marks[ck->layer] |= MARK_FIRST_DIFF |
                                (ck->orig_dtype != ck->recomp_dtype ? MARK_DTYPE : 0);
        first = false;
        if (br->forward.layer < 0 || ck->layer < br->forward.layer) {
            br->forward = (ck_layer_finding){.layer = ck->layer, .step = ck->step, .m = ck->m,
                                             .verdict = ck->verdict};
            br->forward_orig_dtype = ck->orig_dtype;
            br->forward_recomp_dtype = ck->recomp_dtype;
            br->rng = *ck;
            if (ck->rng_differs < 0)
                br->rng.layer = -1;
        }
    }
    br->backward = rc.first_dout_diff;
    br->state_layer = rc.state_layer;
    snprintf(br->state_buffer, sizeof br->state_buffer, "%s", rc.state_buffer);
    br->state_m = rc.state_m;
    br->nbt_orig = rc.nbt_orig;
    br->nbt_recomp = rc.nbt_recomp;
out:
    recorder_free(&rp);
    recorder_free(&rc);
    ck_record_free(&p);
    ck_record_free(&c);
    return st;
}

/* =======================================================================================
 * Causes
 * ======================================================================================= */

/* A cause with every index field at "none"; the caller fills what its kind names. */
static ck_bisect_cause *add_cause(ck_bisect_result *br, ck_cause_kind kind)
{
    if (br->n_causes >= CK_BISECT_MAX_CAUSES)
        return NULL;
    ck_bisect_cause *c = &br->causes[br->n_causes++];
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->layer = c->last_layer = c->source_layer = c->step = -1;
    c->nbt_recomp = c->nbt_orig = -1;
    return c;
}

/* Elements that differ: those outside the tolerance, or every element when the
 * comparison was bitwise (no element counts as outside). */
static int64_t differing(const ck_metrics *m)
{
    return m->n_outside ? m->n_outside : m->numel;
}

static void explain_noise(const ck_graph *g, ck_bisect_result *br)
{
    ck_bisect_cause *c;
    if (br->nondet.layer >= 0 && (c = add_cause(br, CK_CAUSE_NONDETERMINISTIC_LAYER))) {
        c->layer = br->nondet.layer;
        c->in_backward = br->nondet_in_backward;
        c->step = br->nondet.step;
        c->max_abs = br->nondet.m.max_abs;
        c->count = differing(&br->nondet.m);
        c->total = br->nondet.m.numel;
    } else if (br->nondet.layer < 0 && (c = add_cause(br, CK_CAUSE_NONDETERMINISTIC_UPDATE))) {
        c->step = br->nondet.step;
    }
    if (br->within_noise_floor && (c = add_cause(br, CK_CAUSE_WITHIN_NOISE_FLOOR)))
        c->factor = CK_NOISE_FLOOR_FACTOR;
}

/* The cause's layers: `layer` first, then every other layer whose marks hold all of `want`
 * and none of `unless`, in topological order. */
static void cause_layers(const ck_graph *g, const unsigned char *marks, unsigned want,
                         unsigned unless, ck_bisect_cause *c)
{
    c->n_layers = 1;
    c->layers[0] = c->layer;
    for (int i = 0; marks && i < g->n; i++) {
        if (i == c->layer || (marks[i] & want) != want || (marks[i] & unless))
            continue;
        if (c->n_layers < CK_CAUSE_MAX_LAYERS)
            c->layers[c->n_layers] = i;
        c->n_layers++;
    }
}

/* The forward culprit and the state change, when localisation found them; each names every
 * layer of the culprit segments where the same thing happened. */
static void explain_recompute(const ck_graph *g, const unsigned char *marks,
                              ck_bisect_result *br)
{
    const ck_case *cs = g->cs;
    ck_bisect_cause *c;
    int f = br->forward.layer;
    if (f >= 0 && br->rng.layer == f && br->rng.rng_differs > 0) {
        if ((c = add_cause(br, CK_CAUSE_RNG_REDRAW))) {
            c->layer = f;
            c->rng = cs->rng;
            c->count = br->rng.rng_differs;
            c->total = g->nodes[f].draw_elems;
            cause_layers(g, marks, MARK_RNG, 0, c);
        }
    } else if (f >= 0 && br->forward_orig_dtype != br->forward_recomp_dtype) {
        if ((c = add_cause(br, CK_CAUSE_RECOMPUTE_DTYPE))) {
            c->layer = f;
            c->dtype = br->forward_recomp_dtype;
            c->orig_dtype = br->forward_orig_dtype;
            c->max_abs = br->forward.m.max_abs;
            cause_layers(g, marks, MARK_FIRST_DIFF | MARK_DTYPE, 0, c);
        }
    } else if (f >= 0 && br->state_layer < 0) {
        if ((c = add_cause(br, CK_CAUSE_RECOMPUTE_DIFFERS))) {
            c->layer = f;
            c->step = br->forward.step;
            c->max_abs = br->forward.m.max_abs;
            c->count = differing(&br->forward.m);
            c->total = br->forward.m.numel;
            cause_layers(g, marks, MARK_FIRST_DIFF, MARK_DTYPE | MARK_RNG | MARK_STATE, c);
        }
    }
    if (br->state_layer >= 0) {
        bool counted = br->nbt_orig >= 0 && br->nbt_recomp >= 0;
        if ((c = add_cause(br, counted ? CK_CAUSE_STATE_UPDATED : CK_CAUSE_STATE_CHANGED))) {
            c->layer = br->state_layer;
            snprintf(c->buffer, sizeof c->buffer, "%s", br->state_buffer);
            c->nbt_recomp = counted ? br->nbt_recomp : -1;
            c->nbt_orig = counted ? br->nbt_orig : -1;
            c->bn = cs->bn;
            c->max_abs = counted ? 0.0 : br->state_m.max_abs;
            cause_layers(g, marks, MARK_STATE | (counted ? MARK_STATE_COUNTED : 0),
                         counted ? 0 : MARK_STATE_COUNTED, c);
        }
    }
}

static void explain(const ck_graph *g, ck_dtype dtype, const ck_plan *full,
                    const unsigned char *marks, ck_bisect_result *br)
{
    const ck_case *cs = g->cs;
    ck_bisect_cause *c;
    if (br->noise_floor_measured && br->floor_verdict != CK_VERDICT_IDENTICAL)
        explain_noise(g, br);
    if (br->step < 0)
        return;
    explain_recompute(g, marks, br);
    /* the float32-only filter: the first culprit segment's low-dtype input lost its gradient */
    int fseg = -1;
    for (int s = 0; cs->recompute_fp32_only && (dtype == CK_F16 || dtype == CK_BF16) && full &&
                    s < full->n_segments && s < br->n_segments && fseg < 0; s++)
        if (br->culprit[s] && full->segments[s].first > 0)
            fseg = s;
    if (br->forward.layer >= 0 || br->state_layer >= 0 || br->within_noise_floor)
        return;
    if (fseg >= 0) {
        if ((c = add_cause(br, CK_CAUSE_FILTER_DROPPED_GRADIENT))) {
            c->layer = full->segments[fseg].first;
            c->last_layer = full->segments[fseg].last;
            c->source_layer = g->nodes[c->layer].in[0];
            c->dtype = dtype;
            c->step = br->step;
        }
    } else if (br->backward.layer >= 0) {
        if ((c = add_cause(br, CK_CAUSE_BACKWARD_DIFFERS))) {
            c->layer = br->backward.layer;
            c->step = br->backward.step;
            c->max_abs = br->backward.m.max_abs;
        }
    } else if ((c = add_cause(br, CK_CAUSE_UNLOCALISED))) {
        c->step = br->step;
    }
}

/* The loss scaler's differing decision, from the ordinary comparison. */
static void explain_scaler(const ck_result *res, ck_bisect_result *br)
{
    ck_bisect_cause *c;
    if (res->scale_mismatches <= 0 || !res->plain.scales || !res->ckpt.scales ||
        !(c = add_cause(br, CK_CAUSE_LOSS_SCALER)))
        return;
    int s = res->first_scale_mismatch;
    c->step = s;
    c->scale_plain = res->plain.scales[s].scale;
    c->skipped_plain = res->plain.scales[s].skipped;
    c->scale_ckpt = res->ckpt.scales[s].scale;
    c->skipped_ckpt = res->ckpt.scales[s].skipped;
    c->count = res->scale_mismatches;
}

/* =======================================================================================
 * Entry points
 * ======================================================================================= */


ck_status ck_bisect(ck_backend *b, const ck_graph *g, ck_dtype dtype, const ck_bisect_opts *o,
                    ck_result *res, ck_error *err)
{
    ck_bisect_result *br = calloc(1, sizeof *br);
    if (!br)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    br->step = -1;
    br->forward.layer = br->backward.layer = br->nondet.layer = br->state_layer = -1;
    br->rng.layer = -1;
    br->nbt_orig = br->nbt_recomp = -1;
    ck_record plain;
    memset(&plain, 0, sizeof plain);
    ck_plan full;
    memset(&full, 0, sizeof full);
    unsigned char *marks = NULL; /* per layer: what localisation saw (MARK_*) */
    ck_status st = ck_plan_build(g, &full, err);
    if (st != CK_OK)
        goto out;
    br->n_segments = full.n_segments;
    br->culprit = calloc((size_t)full.n_segments + 1, sizeof *br->culprit);
    br->culprit_set = malloc(((size_t)full.n_segments + 1) * sizeof *br->culprit_set);
    marks = calloc((size_t)g->n + 1, 1);
    if (!br->culprit || !br->culprit_set || !marks) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int s = 0; s < full.n_segments; s++)
        br->culprit_set[s] = -1;
    int trainings = 0;
    bisect_env env = {.b = b, .g = g, .dtype = dtype, .log = o->log, .progress = o->progress,
                      .progress_user = o->progress_user, .trainings = &trainings};
    if ((st = train_observed(&env, CK_TRAINING_BISECT, NULL, NULL, &plain, "plain", err)) != CK_OK)
        goto out;

    if (o->noise_floor) {
        if ((st = measure_noise_floor(&env, &plain, br, err)) != CK_OK)
            goto out;
        bool all_within = true;
        for (int k = 0; k < res->n_tensors && k < br->n_floor; k++)
            all_within = all_within && tensor_within_floor(&res->tensors[k], &br->floor[k]);
        br->within_noise_floor = br->floor_verdict != CK_VERDICT_IDENTICAL && all_within;
    }

    if (o->localise && diverges(g->cs, res, br)) {
        for (int s = 0; s < full.n_segments; s++)
            br->culprit[s] = true;
        search_ctx sc = {.e = &env, .g = g, .dtype = dtype, .plain = &plain, .br = br};
        if (full.n_segments > 1 &&
            (st = search_segments(&sc, full.n_segments, br->culprit, true, err)) != CK_OK)
            goto out;
        take_set(br, full.n_segments, br->culprit);
        /* every other segment, or set of segments, that diverges on its own */
        if (full.n_segments > 1 && (st = search_other_sets(&sc, full.n_segments, err)) != CK_OK)
            goto out;
        for (int s = 0; s < full.n_segments; s++)
            br->culprit[s] = br->culprit_set[s] >= 0;
        br->searched = true;
        br->search_runs = sc.runs;

        /* localise at the first divergent step of the culprit set, one segment at a time */
        ck_plan culprit_plan;
        if ((st = ck_plan_build_subset(g, br->culprit, &culprit_plan, err)) != CK_OK)
            goto out;
        ck_record rec;
        ck_result cmp;
        memset(&cmp, 0, sizeof cmp);
        st = train_observed(&env, CK_TRAINING_BISECT, &culprit_plan, NULL, &rec, "culprits",
                            err);
        if (st == CK_OK)
            st = compare_runs(g, dtype, &plain, &rec, &cmp, err);
        ck_record_free(&rec);
        if (st == CK_OK)
            br->step = first_divergent_step(g->cs, &cmp, br);
        ck_result_free(&cmp);
        for (int s = 0; st == CK_OK && br->step >= 0 && s < culprit_plan.n_segments; s++) {
            const ck_segment *seg = &culprit_plan.segments[s];
            ck_bisect_result part = *br;
            part.forward.layer = part.backward.layer = part.state_layer = -1;
            part.rng.layer = -1;
            st = localise_layers(&env, &culprit_plan, seg, &part, marks, err);
            if (st != CK_OK)
                break;
            if (part.forward.layer >= 0 && br->forward.layer < 0) {
                br->forward = part.forward;
                br->rng = part.rng;
                br->forward_orig_dtype = part.forward_orig_dtype;
                br->forward_recomp_dtype = part.forward_recomp_dtype;
            }
            if (part.state_layer >= 0 && br->state_layer < 0) {
                br->state_layer = part.state_layer;
                memcpy(br->state_buffer, part.state_buffer, sizeof br->state_buffer);
                br->state_m = part.state_m;
                br->nbt_orig = part.nbt_orig;
                br->nbt_recomp = part.nbt_recomp;
            }
            if (part.backward.layer >= 0 &&
                (br->backward.layer < 0 || part.backward.layer > br->backward.layer))
                br->backward = part.backward;
            /* on to the next segment: every layer of the same cause is named */
        }
        ck_plan_free(&culprit_plan);
        if (st != CK_OK)
            goto out;
    }
    explain(g, dtype, &full, marks, br);
    explain_scaler(res, br);
    if (br->within_noise_floor && res->verdict == CK_VERDICT_MISMATCH) {
        /* the measured differences are noise: judge the case against the floor */
        res->verdict = CK_VERDICT_CLOSE;
        ck_result_judge(res);
    }
out:
    free(marks);
    ck_record_free(&plain);
    ck_plan_free(&full);
    if (st != CK_OK) {
        ck_bisect_result_free(br);
        free(br);
        ck_error_prefix(err, "%s: bisect", g->cs->path);
        return st;
    }
    if (res->bisect) {
        ck_bisect_result_free(res->bisect);
        free(res->bisect);
    }
    res->bisect = br;
    return CK_OK;
}

ck_status ck_verify_recompute(ck_backend *b, const ck_graph *g, ck_dtype dtype, ck_result *res,
                              ck_error *err)
{
    return ck_verify_recompute_ex(b, g, dtype, NULL, res, err);
}

ck_status ck_verify_recompute_ex(ck_backend *b, const ck_graph *g, ck_dtype dtype,
                                 ck_training_log *log, ck_result *res, ck_error *err)
{
    bisect_env env = {.b = b, .g = g, .dtype = dtype, .log = log};
    recorder r;
    ck_plan plan;
    ck_record rec;
    memset(&rec, 0, sizeof rec);
    ck_status st = ck_plan_build(g, &plan, err);
    if (st != CK_OK)
        return st;
    if ((st = recorder_init(&r, b, g, -1, 0, g->n - 1, err)) != CK_OK)
        goto out;
    r.check_recompute = true;
    r.plan = &plan;
    if ((st = train_observed(&env, CK_TRAINING_RECOMPUTE_CHECK, &plan, &r, &rec, "recompute check",
                             err)) != CK_OK)
        goto out;
    free(res->recompute_checks);
    res->recompute_checks = r.checks;
    res->n_recompute_checks = r.n_checks;
    r.checks = NULL;
    res->verified_recompute = true;
    res->recompute_mismatches = 0;
    for (int k = 0; k < res->n_recompute_checks; k++)
        res->recompute_mismatches += res->recompute_checks[k].verdict != CK_VERDICT_IDENTICAL;
    ck_result_judge(res);
out:
    recorder_free(&r);
    ck_record_free(&rec);
    ck_plan_free(&plan);
    return st;
}

/* =======================================================================================
 * One segment's recompute check riding along another training (segmentwise.h)
 * ======================================================================================= */

struct ck_recompute_watch {
    recorder r;
    ck_plan plan; /* the watched segment alone: the recorder keeps originals of its layers */
};

ck_status ck_recompute_watch_new(ck_backend *b, const ck_graph *g, const ck_plan *full,
                                 int segment, ck_recompute_watch **out, ck_error *err)
{
    *out = NULL;
    if (segment < 0 || segment >= full->n_segments)
        return ck_fail(err, CK_ERR_INPUT, "recompute check: no segment %d", segment);
    ck_recompute_watch *w = calloc(1, sizeof *w);
    bool *enabled = calloc((size_t)full->n_segments, sizeof *enabled);
    ck_status st = CK_OK;
    if (!w || !enabled) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory creating a recompute check");
        goto fail;
    }
    enabled[segment] = true;
    if ((st = ck_plan_build_subset(g, enabled, &w->plan, err)) != CK_OK ||
        (st = recorder_init(&w->r, b, g, -1, 0, g->n - 1, err)) != CK_OK)
        goto fail;
    w->r.check_recompute = true;
    w->r.plan = &w->plan;
    free(enabled);
    *out = w;
    return CK_OK;
fail:
    free(enabled);
    ck_recompute_watch_free(w);
    return st;
}

ck_status ck_recompute_watch_observe(void *user, const ck_exec_event_info *ev, ck_error *err)
{
    ck_recompute_watch *w = user;
    return recorder_observe(&w->r, ev, err);
}

ck_status ck_recompute_watch_take(ck_recompute_watch *w, ck_result *res, ck_error *err)
{
    int n = res->n_recompute_checks + w->r.n_checks;
    ck_recompute_check *all = realloc(res->recompute_checks, (size_t)(n ? n : 1) * sizeof *all);
    if (!all)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory gathering recompute checks");
    res->recompute_checks = all;
    for (int k = 0; k < w->r.n_checks; k++) {
        all[res->n_recompute_checks++] = w->r.checks[k];
        res->recompute_mismatches += w->r.checks[k].verdict != CK_VERDICT_IDENTICAL;
    }
    w->r.n_checks = 0;
    res->verified_recompute = true;
    return CK_OK;
}

void ck_recompute_watch_free(ck_recompute_watch *w)
{
    if (!w)
        return;
    if (w->r.g)
        recorder_free(&w->r);
    ck_plan_free(&w->plan);
    free(w);
}
