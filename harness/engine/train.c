/* Training runs, recording and the plain-vs-checkpointed comparison (see runner.h). */
#include "harness/engine/train.h"

#include <math.h>

#include "harness/engine/dump.h"
#include "harness/io/files.h"
#include "harness/core/half.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------------------------------
 * Data
 * --------------------------------------------------------------------------------------- */

static ck_status alloc_plain_tensor(ck_backend *b, ck_tensor *t, const char *name, ck_dtype dt,
                                    const ck_shape *shape, ck_error *err)
{
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = dt;
    t->shape = *shape;
    int64_t n;
    if (!ck_shape_numel_checked(shape, ck_dtype_size(dt), &n))
        return ck_fail(err, CK_ERR_INPUT, "%s: shape too large", name);
    return b->alloc(b, (size_t)n * ck_dtype_size(dt), &t->data, err);
}

ck_status ck_make_data(ck_backend *b, const ck_graph *g, ck_dtype dtype, int step,
                       ck_tensor *input, ck_tensor *target, ck_error *err)
{
    const ck_case *c = g->cs;
    double *host = NULL;
    memset(input, 0, sizeof *input);
    memset(target, 0, sizeof *target);
    ck_status st = alloc_plain_tensor(b, input, "input", dtype, &g->input_shape, err);
    if (st != CK_OK)
        goto fail;
    int64_t n = ck_shape_numel(&g->input_shape);
    int64_t nt = c->loss == CK_LOSS_MSE || c->loss == CK_LOSS_CROSS_ENTROPY
                     ? ck_shape_numel(&g->target_shape)
                     : 0;
    host = malloc((size_t)(n > nt ? n : nt) * sizeof *host);
    if (!host) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory drawing the input");
        goto fail;
    }
    ck_rng_stream s = ck_rng_keyed(c->seed, CK_RNG_NO_LAYER, CK_PURPOSE_INPUT, (uint32_t)step);
    for (int64_t i = 0; i < n; i++)
        host[i] = c->input_dist == CK_DIST_NORMAL ? ck_rng_normal_f64(&s, (uint64_t)i)
                                                  : ck_rng_uniform_f64(&s, (uint64_t)i);
    if ((st = ck_upload_f64(b, input, host, err)) != CK_OK)
        goto fail;

    ck_rng_stream ts = ck_rng_keyed(c->seed, CK_RNG_NO_LAYER, CK_PURPOSE_TARGET, (uint32_t)step);
    if (c->loss == CK_LOSS_MSE) {
        if ((st = alloc_plain_tensor(b, target, "target", dtype, &g->target_shape, err)) != CK_OK)
            goto fail;
        for (int64_t i = 0; i < nt; i++)
            host[i] = ck_rng_uniform_f64(&ts, (uint64_t)i);
        st = ck_upload_f64(b, target, host, err);
    } else if (c->loss == CK_LOSS_CROSS_ENTROPY) {
        if ((st = alloc_plain_tensor(b, target, "target", CK_I32, &g->target_shape, err)) != CK_OK)
            goto fail;
        uint32_t classes = (uint32_t)g->output_shape.dim[1];
        for (int64_t i = 0; i < nt; i++)
            host[i] = (double)ck_rng_below(&ts, (uint64_t)i, classes);
        st = ck_upload_f64(b, target, host, err);
    }
    if (st != CK_OK)
        goto fail;
    free(host);
    return CK_OK;
fail:
    free(host);
    ck_free_data(b, input, target);
    return st;
}

void ck_free_data(ck_backend *b, ck_tensor *input, ck_tensor *target)
{
    if (input->data)
        b->free(b, input->data);
    if (target->data)
        b->free(b, target->data);
    input->data = target->data = NULL;
}

/* ---------------------------------------------------------------------------------------
 * Recording
 * --------------------------------------------------------------------------------------- */

static ck_status record_add(ck_record *rec, const char *name, ck_tensor_kind kind, int step,
                            ck_dtype dt, const ck_shape *shape, const void *host_src,
                            ck_backend *b, const ck_tensor *dev_src, ck_error *err)
{
    if (rec->n == rec->cap) {
        int cap = rec->cap ? rec->cap * 2 : 64;
        ck_record_entry *ne = realloc(rec->e, (size_t)cap * sizeof *ne);
        if (!ne)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory recording %s", name);
        rec->e = ne;
        rec->cap = cap;
    }
    ck_record_entry *e = &rec->e[rec->n];
    memset(e, 0, sizeof *e);
    size_t bytes = (size_t)ck_shape_numel(shape) * ck_dtype_size(dt);
    e->name = strdup(name);
    e->data = malloc(bytes ? bytes : 1);
    if (!e->name || !e->data) {
        free(e->name);
        free(e->data);
        return ck_fail(err, CK_ERR_NOMEM, "out of memory recording %s", name);
    }
    e->kind = kind;
    e->step = step;
    e->dtype = dt;
    e->shape = *shape;
    rec->n++;
    if (host_src) {
        memcpy(e->data, host_src, bytes);
        return CK_OK;
    }
    ck_status st = b->download(b, dev_src, e->data, err);
    if (st != CK_OK)
        ck_error_prefix(err, "reading %s", name);
    return st;
}

static ck_status record_tensor(ck_record *rec, ck_backend *b, const ck_tensor *t,
                               ck_tensor_kind kind, int step, ck_error *err)
{
    return record_add(rec, t->name, kind, step, t->dtype, &t->shape, NULL, b, t, err);
}

/* After backward: loss, buffers (as the forward left them), grads in backward order. */
static ck_status record_after_backward(ck_record *rec, ck_model *m, int step, double loss,
                                       ck_error *err)
{
    ck_shape scalar;
    memset(&scalar, 0, sizeof scalar);
    ck_status st = record_add(rec, "loss", CK_KIND_LOSS, step, CK_F64, &scalar, &loss, NULL,
                              NULL, err);
    const ck_graph *g = m->g;
    for (int i = 0; i < g->n && st == CK_OK; i++)
        for (int k = 0; k < g->nodes[i].n_buffers && st == CK_OK; k++)
            st = record_tensor(rec, m->b, &m->layers[i].buffer[k], CK_KIND_BUFFER, step, err);
    for (int i = g->n - 1; i >= 0 && st == CK_OK; i--)
        for (int p = 0; p < g->nodes[i].n_params && st == CK_OK; p++)
            st = record_tensor(rec, m->b, &m->layers[i].grad[p], CK_KIND_GRAD, step, err);
    return st;
}

static ck_status record_params(ck_record *rec, ck_model *m, int step, ck_error *err)
{
    ck_status st = CK_OK;
    for (int i = 0; i < m->g->n && st == CK_OK; i++)
        for (int p = 0; p < m->g->nodes[i].n_params && st == CK_OK; p++)
            st = record_tensor(rec, m->b, &m->layers[i].param[p], CK_KIND_PARAM, step, err);
    return st;
}

void ck_record_free(ck_record *rec)
{
    for (int i = 0; i < rec->n; i++) {
        free(rec->e[i].name);
        free(rec->e[i].data);
    }
    free(rec->e);
    free(rec->losses);
    free(rec->scales);
    memset(rec, 0, sizeof *rec);
}

/* ---------------------------------------------------------------------------------------
 * Dumps (run --dump)
 * --------------------------------------------------------------------------------------- */

static const char *kind_file(ck_tensor_kind k)
{
    switch (k) {
    case CK_KIND_LOSS: return "loss";
    case CK_KIND_GRAD: return "grads";
    case CK_KIND_PARAM: return "params";
    case CK_KIND_BUFFER: return "buffers";
    }
    return "other";
}

/* Writes n tensors as <dir>/<label>/<sub>/<file>.safetensors and records it. */
static ck_status dump_file(const ck_dump_spec *d, const char *sub, int step, const char *file,
                           const char *kind, int n, const ck_named_tensor *t, ck_error *err)
{
    if (n == 0)
        return CK_OK;
    char rel[512], dir[4096], path[4096];
    snprintf(rel, sizeof rel, "%s/%s/%s.safetensors", d->label, sub, file);
    snprintf(dir, sizeof dir, "%s/%s/%s", d->dir, d->label, sub);
    snprintf(path, sizeof path, "%s/%s", d->dir, rel);
    ck_status st = ck_mkdir_p(dir, err);
    if (st == CK_OK)
        st = ck_dump_tensors(path, n, t, err);
    if (st == CK_OK)
        st = ck_manifest_add(d->manifest, rel, d->label, step, kind, n, t, err);
    return st;
}

/* The record entries [from, rec->n) of one step, one file per kind. */
static ck_status dump_step(const ck_dump_spec *d, const ck_record *rec, int from, int step,
                           ck_error *err)
{
    char sub[32];
    snprintf(sub, sizeof sub, "step_%04d", step);
    ck_named_tensor *t = calloc((size_t)(rec->n - from) + 1, sizeof *t);
    if (!t)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory dumping step %d", step);
    ck_status st = CK_OK;
    for (int kind = CK_KIND_LOSS; kind <= CK_KIND_BUFFER && st == CK_OK; kind++) {
        int n = 0;
        for (int k = from; k < rec->n; k++) {
            const ck_record_entry *e = &rec->e[k];
            if ((int)e->kind != kind)
                continue;
            t[n].name = e->name;
            t[n].dtype = ck_file_dtype_from_ck(e->dtype);
            t[n].shape = e->shape;
            t[n].data = e->data;
            n++;
        }
        st = dump_file(d, sub, step, kind_file((ck_tensor_kind)kind),
                       ck_tensor_kind_name((ck_tensor_kind)kind), n, t, err);
    }
    free(t);
    return st;
}

/* Parameters and buffers right after initialisation: what `--init` reads back. */
static ck_status dump_init(const ck_dump_spec *d, ck_model *m, ck_error *err)
{
    ck_record tmp;
    memset(&tmp, 0, sizeof tmp);
    ck_status st = CK_OK;
    for (int i = 0; i < m->g->n && st == CK_OK; i++) {
        for (int p = 0; p < m->g->nodes[i].n_params && st == CK_OK; p++)
            st = record_tensor(&tmp, m->b, &m->layers[i].param[p], CK_KIND_PARAM, -1, err);
        for (int k = 0; k < m->g->nodes[i].n_buffers && st == CK_OK; k++)
            st = record_tensor(&tmp, m->b, &m->layers[i].buffer[k], CK_KIND_BUFFER, -1, err);
    }
    ck_named_tensor *t = calloc((size_t)tmp.n + 1, sizeof *t);
    if (st == CK_OK && !t)
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory dumping the initial weights");
    for (int k = 0; st == CK_OK && k < tmp.n; k++)
        t[k] = (ck_named_tensor){.name = tmp.e[k].name, .dtype = ck_file_dtype_from_ck(tmp.e[k].dtype),
                                 .shape = tmp.e[k].shape, .data = tmp.e[k].data};
    /* one file: loading it with --init (or "init": {"from": ...}) restores both */
    if (st == CK_OK)
        st = dump_file(d, "init", -1, "weights", "param", tmp.n, t, err);
    free(t);
    ck_record_free(&tmp);
    return st;
}

/* --dump-activations: an observer that keeps each original forward output of a step and
 * writes them when the step ends; it forwards every event to the caller's observer. */
typedef struct {
    ck_exec_observer inner;
    void *inner_user;
    ck_backend *b;
    const ck_graph *g;
    ck_record acts; /* this step's outputs */
} act_dumper;

static ck_status act_observe(void *user, const ck_exec_event_info *ev, ck_error *err)
{
    act_dumper *a = user;
    if (ev->ev == CK_EVENT_FORWARD && !ev->recompute) {
        ck_status st = record_add(&a->acts, a->g->nodes[ev->layer].spec->name, CK_KIND_PARAM,
                                  ev->step, ev->tensor->dtype, &ev->tensor->shape, NULL, a->b,
                                  ev->tensor, err);
        if (st != CK_OK)
            return st;
    }
    return a->inner ? a->inner(a->inner_user, ev, err) : CK_OK;
}

static ck_status dump_activations(const ck_dump_spec *d, act_dumper *a, int step, ck_error *err)
{
    ck_named_tensor *t = calloc((size_t)a->acts.n + 1, sizeof *t);
    if (!t)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory dumping activations");
    for (int k = 0; k < a->acts.n; k++)
        t[k] = (ck_named_tensor){.name = a->acts.e[k].name,
                                 .dtype = ck_file_dtype_from_ck(a->acts.e[k].dtype),
                                 .shape = a->acts.e[k].shape, .data = a->acts.e[k].data};
    char sub[32];
    snprintf(sub, sizeof sub, "step_%04d", step);
    ck_status st = dump_file(d, sub, step, "activations", "activation", a->acts.n, t, err);
    free(t);
    ck_record_free(&a->acts);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * Training
 * --------------------------------------------------------------------------------------- */

bool ck_all_finite(ck_dtype dt, int64_t n, const void *data)
{
    for (int64_t i = 0; i < n; i++) {
        double v = dt == CK_F32 ? ((const float *)data)[i]
                   : dt == CK_F64 ? ((const double *)data)[i]
                                  : 0.0;
        if (!isfinite(v))
            return false;
    }
    return true;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

ck_status ck_train(ck_backend *b, const ck_graph *g, const ck_plan *plan, ck_dtype dtype,
                   const ck_run_hooks *hooks, ck_record *rec, ck_error *err)
{
    const ck_case *c = g->cs;
    ck_model model;
    ck_exec ex;
    ck_tensor input, target;
    memset(rec, 0, sizeof *rec);
    memset(&ex, 0, sizeof ex);
    memset(&input, 0, sizeof input);
    memset(&target, 0, sizeof target);
    double t0 = now_s();

    rec->steps = c->steps;
    rec->losses = calloc((size_t)c->steps, sizeof *rec->losses);
    rec->scales = calloc((size_t)c->steps, sizeof *rec->scales);
    if (!rec->losses || !rec->scales)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    ck_status st = ck_model_create(&model, b, g, dtype, err);
    if (st != CK_OK)
        return st;
    const ck_dump_spec *dump = hooks ? hooks->dump : NULL;
    act_dumper acts = {.inner = hooks ? hooks->observer : NULL,
                       .inner_user = hooks ? hooks->observer_user : NULL, .b = b, .g = g};
    if ((st = ck_model_init(&model, c->seed, err)) != CK_OK)
        goto out;
    if (dump && (st = dump_init(dump, &model, err)) != CK_OK)
        goto out;
    ck_exec_config cfg = {
        .b = b, .g = g, .model = &model, .plan = plan, .seed = c->seed, .rng = c->rng,
        .bn = c->bn, .autocast = c->autocast, .freeze_buffers = false,
        .observer = hooks ? hooks->observer : NULL,
        .observer_user = hooks ? hooks->observer_user : NULL,
    };
    if (dump && dump->activations) {
        cfg.observer = act_observe;
        cfg.observer_user = &acts;
    }
    if ((st = ck_exec_create(&ex, &cfg, err)) != CK_OK)
        goto out;
    double scale = c->loss_scale == CK_SCALE_NONE ? 1.0 : c->loss_scale_value;
    int clean_steps = 0;
    int64_t updates = 0; /* optimizer steps taken: a skipped step does not count (PyTorch) */
    for (int step = 0; step < c->steps; step++) {
        double loss = 0.0;
        if ((st = ck_make_data(b, g, dtype, step, &input, &target, err)) != CK_OK ||
            (st = ck_model_zero_grads(&model, err)) != CK_OK ||
            (st = ck_model_cast_params(&model, err)) != CK_OK ||
            (st = ck_exec_step(&ex, step, &input, target.data ? &target : NULL, c->loss, scale,
                               true, &loss, err)) != CK_OK ||
            (st = ck_model_unscale_grads(&model, scale, err)) != CK_OK)
            goto out;
        ck_free_data(b, &input, &target);
        rec->losses[step] = loss;
        int first_grad = rec->n;
        if ((st = record_after_backward(rec, &model, step, loss, err)) != CK_OK)
            goto out;
        /* a loss scaler skips a step whose gradients hold inf or NaN (GradScaler) */
        bool finite = true;
        for (int k = first_grad; k < rec->n && finite; k++)
            if (rec->e[k].kind == CK_KIND_GRAD)
                finite = ck_all_finite(rec->e[k].dtype, ck_shape_numel(&rec->e[k].shape),
                                       rec->e[k].data);
        bool skip = c->loss_scale != CK_SCALE_NONE && !finite;
        rec->scales[step] = (ck_scale_step){.scale = scale, .skipped = skip};
        if (!skip && (st = ck_model_update(&model, &c->optimizer, ++updates, 1.0, err)) != CK_OK)
            goto out;
        if (c->loss_scale == CK_SCALE_DYNAMIC) {
            if (!finite) {
                scale *= 0.5;
                clean_steps = 0;
            } else if (++clean_steps == c->growth_interval) {
                scale *= 2.0;
                clean_steps = 0;
            }
        }
        if ((st = record_params(rec, &model, step, err)) != CK_OK)
            goto out;
        if (dump && (st = dump_step(dump, rec, first_grad, step, err)) != CK_OK)
            goto out;
        if (dump && dump->activations && (st = dump_activations(dump, &acts, step, err)) != CK_OK)
            goto out;
    }
    rec->peak_activation_bytes = ex.act.peak_bytes;
    rec->recomputed_layers = ex.recomputed_layers;
    rec->recomputed_other_dtype = ex.recomputed_other_dtype;
    rec->first_other_dtype_layer = ex.first_other_dtype_layer;
out:
    ck_record_free(&acts.acts);
    ck_free_data(b, &input, &target);
    ck_exec_free(&ex);
    ck_model_free(&model);
    rec->wall_time_s = now_s() - t0;
    if (st != CK_OK)
        ck_error_prefix(err, "%s: %s run", c->path, plan ? "checkpointed" : "plain");
    return st;
}

/* ---------------------------------------------------------------------------------------
 * Comparison
 * --------------------------------------------------------------------------------------- */

bool ck_expectation_met(ck_expect e, ck_verdict v)
{
    switch (e) {
    case CK_EXPECT_IDENTICAL: return v == CK_VERDICT_IDENTICAL;
    case CK_EXPECT_CLOSE: return v != CK_VERDICT_MISMATCH;
    case CK_EXPECT_MISMATCH: return v == CK_VERDICT_MISMATCH;
    }
    return false;
}

static void fill_summary(ck_run_summary *s, const char *label, ck_record *rec)
{
    s->label = label;
    s->steps = rec->steps;
    s->losses = rec->losses; /* ownership moves to the result */
    rec->losses = NULL;
    s->scales = rec->scales;
    rec->scales = NULL;
    s->peak_activation_bytes = rec->peak_activation_bytes;
    s->recomputed_layers = rec->recomputed_layers;
    s->recomputed_other_dtype = rec->recomputed_other_dtype;
    s->first_other_dtype_layer = rec->first_other_dtype_layer;
    s->wall_time_s = rec->wall_time_s;
}

/* Compares rec against ref entry by entry; low_vs_fp32 selects the precision tolerances
 * (else the case's). */
static ck_status compare_entries(const ck_graph *g, const ck_record *ref, const ck_record *rec,
                                 ck_dtype low_vs_fp32, ck_tensor_result **out, int *n_out,
                                 int *first, ck_verdict *worst, ck_error *err)
{
    const ck_case *c = g->cs;
    if (ref->n != rec->n)
        return ck_fail(err, CK_ERR_INTERNAL, "runs recorded %d and %d tensors", ref->n, rec->n);
    ck_tensor_result *t = calloc((size_t)(ref->n ? ref->n : 1), sizeof *t);
    if (!t)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory comparing runs");
    *out = t;
    *n_out = 0;
    *first = -1;
    *worst = CK_VERDICT_IDENTICAL;
    for (int k = 0; k < ref->n; k++) {
        const ck_record_entry *p = &ref->e[k], *q = &rec->e[k];
        ck_tensor_result *tr = &t[k];
        tr->name = strdup(p->name);
        if (!tr->name)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory comparing runs");
        *n_out = k + 1;
        tr->kind = p->kind;
        tr->step = p->step;
        tr->dtype = p->dtype;
        tr->shape = p->shape;
        tr->cast_overflow = tr->cast_flushed = tr->cast_subnormal = -1;
        if (strcmp(p->name, q->name) != 0 || p->kind != q->kind || p->dtype != q->dtype ||
            !ck_shape_equal(&p->shape, &q->shape))
            return ck_fail(err, CK_ERR_INTERNAL, "runs recorded %s and %s at position %d", p->name,
                           q->name, k);
        tr->rel_l2_limit = -1.0;
        if (low_vs_fp32 == CK_F16 || low_vs_fp32 == CK_BF16) {
            ck_case_precision_tolerance(c, low_vs_fp32, ck_tensor_kind_name(p->kind), p->name,
                                        &tr->rtol, &tr->atol, &tr->rel_l2_limit);
        } else {
            tr->rtol = c->rtol;
            tr->atol = c->atol;
        }
        tr->verdict = ck_compare(p->dtype, ck_shape_numel(&p->shape), q->data, p->data, tr->rtol,
                                 tr->atol, &tr->m);
        if (tr->rel_l2_limit >= 0.0 && tr->verdict != CK_VERDICT_IDENTICAL) {
            /* the norm criterion: the tensor as a whole within rel_l2 of the reference, every
             * non-finite value matched */
            bool ok = tr->m.rel_l2 <= tr->rel_l2_limit && tr->m.max_ulp != UINT64_MAX;
            tr->verdict = ok ? CK_VERDICT_CLOSE : CK_VERDICT_MISMATCH;
        }
        if (tr->verdict != CK_VERDICT_IDENTICAL && *first < 0)
            *first = k;
        if (tr->verdict > *worst)
            *worst = tr->verdict;
    }
    return CK_OK;
}

ck_status ck_compare_records(const ck_graph *g, const ck_record *plain, const ck_record *ckpt,
                             ck_result *res, ck_error *err)
{
    return compare_entries(g, plain, ckpt, CK_F32, &res->tensors, &res->n_tensors,
                           &res->first_divergence, &res->verdict, err);
}

/* Whether layer `name`'s parameters are cast to the low dtype (linear/conv: precision.md). */
static bool param_is_cast(const ck_graph *g, const char *name)
{
    const char *dot = strrchr(name, '.');
    size_t len = dot ? (size_t)(dot - name) : strlen(name);
    for (int i = 0; i < g->n; i++)
        if (strlen(g->nodes[i].spec->name) == len && strncmp(g->nodes[i].spec->name, name, len) == 0)
            return g->nodes[i].op.kind == CK_OP_LINEAR || g->nodes[i].op.kind == CK_OP_CONV;
    return false;
}

/* Where the low dtype went wrong, per tensor. Gradients: inf/NaN (overflow), zero where
 * fp32 is not (flushed), and values that were subnormal in the low dtype before unscaling
 * (|g * scale| below the smallest normal). Cast parameters: the master cast to the low
 * dtype, classified exactly. */
static void cast_stats(const ck_graph *g, ck_dtype low, const ck_record_entry *f32e,
                       const ck_record_entry *lowe, double scale, ck_tensor_result *tr)
{
    if (lowe->dtype != CK_F32)
        return;
    const float *lv = lowe->data, *fv = f32e->data;
    int64_t n = ck_shape_numel(&lowe->shape);
    double min_normal = low == CK_F16 ? 6.103515625e-05 : 1.1754943508222875e-38;
    if (lowe->kind == CK_KIND_GRAD) {
        tr->cast_overflow = tr->cast_flushed = tr->cast_subnormal = 0;
        for (int64_t i = 0; i < n; i++) {
            if (!isfinite(lv[i]))
                tr->cast_overflow++;
            else if (lv[i] == 0.0f && fv[i] != 0.0f)
                tr->cast_flushed++;
            else if (lv[i] != 0.0f && fabs((double)lv[i] * scale) < min_normal)
                tr->cast_subnormal++;
        }
    } else if (lowe->kind == CK_KIND_PARAM && param_is_cast(g, lowe->name)) {
        tr->cast_overflow = tr->cast_flushed = tr->cast_subnormal = 0;
        for (int64_t i = 0; i < n; i++) {
            ck_cast_class k = low == CK_F16 ? ck_f16_classify(lv[i]) : ck_bf16_classify(lv[i]);
            tr->cast_overflow += k == CK_CAST_OVERFLOW;
            tr->cast_flushed += k == CK_CAST_FLUSHED;
            tr->cast_subnormal += k == CK_CAST_SUBNORMAL;
        }
    }
}

ck_status ck_compare_backends(ck_backend *b, ck_backend *ref, const ck_graph *g, ck_dtype dtype,
                              ck_result *res, ck_error *err)
{
    ck_record ours, theirs;
    memset(&ours, 0, sizeof ours);
    memset(&theirs, 0, sizeof theirs);
    ck_status st = ck_train(b, g, NULL, dtype, NULL, &ours, err);
    if (st == CK_OK)
        st = ck_train(ref, g, NULL, dtype, NULL, &theirs, err);
    if (st == CK_OK)
        st = compare_entries(g, &theirs, &ours, CK_F32, &res->vs_backend, &res->n_vs_backend,
                             &res->vs_backend_first, &res->vs_backend_verdict, err);
    if (st == CK_OK) {
        double limit = dtype == CK_F16 ? 1e-2 : dtype == CK_BF16 ? 5e-2 : 1e-5;
        res->vs_backend_verdict = CK_VERDICT_IDENTICAL;
        res->vs_backend_first = -1;
        for (int k = 0; k < res->n_vs_backend; k++) {
            ck_tensor_result *t = &res->vs_backend[k];
            t->rel_l2_limit = limit;
            if (t->verdict != CK_VERDICT_IDENTICAL)
                t->verdict = t->m.rel_l2 <= limit && t->m.max_ulp != UINT64_MAX
                                 ? CK_VERDICT_CLOSE
                                 : CK_VERDICT_MISMATCH;
            if (t->verdict == CK_VERDICT_MISMATCH && res->vs_backend_first < 0)
                res->vs_backend_first = k;
            if (t->verdict > res->vs_backend_verdict)
                res->vs_backend_verdict = t->verdict;
        }
        res->has_vs_backend = true;
        snprintf(res->vs_backend_name, sizeof res->vs_backend_name, "%s", ref->name);
        ck_result_judge(res);
    }
    ck_record_free(&ours);
    ck_record_free(&theirs);
    if (st != CK_OK)
        ck_error_prefix(err, "%s: cross-backend check against %s", g->cs->path, ref->name);
    return st;
}

ck_status ck_compare_vs_fp32(const ck_graph *g, ck_dtype low, const ck_record *fp32,
                             const ck_record *lowrec, ck_result *res, ck_error *err)
{
    ck_status st = compare_entries(g, fp32, lowrec, low, &res->vs_fp32, &res->n_vs_fp32,
                                   &res->vs_fp32_first, &res->vs_fp32_verdict, err);
    if (st != CK_OK)
        return st;
    res->has_vs_fp32 = true;
    res->vs_fp32_first = -1;
    for (int k = 0; k < res->n_vs_fp32; k++) {
        ck_tensor_result *tr = &res->vs_fp32[k];
        if (tr->verdict == CK_VERDICT_MISMATCH && res->vs_fp32_first < 0)
            res->vs_fp32_first = k;
        int step = tr->step < lowrec->steps ? tr->step : 0;
        cast_stats(g, low, &fp32->e[k], &lowrec->e[k], lowrec->scales[step].scale, tr);
    }
    return CK_OK;
}

void ck_result_judge(ck_result *res)
{
    const ck_case *c = res->cs;
    /* a recomputed output that differs from its original is a difference in its own right,
     * even when every gradient happens to agree */
    if (res->recompute_mismatches > 0 || res->scale_mismatches > 0)
        res->verdict = CK_VERDICT_MISMATCH;
    res->expect_met = ck_expectation_met(ck_case_expect(c, res->dtype), res->verdict);
    res->memory_expectation_met = res->memory_met == c->expect_memory_met;
    res->vs_fp32_expect_met = !res->has_vs_fp32 ||
                              ck_expectation_met(ck_case_expect_vs_fp32(c, res->dtype), res->vs_fp32_verdict);
    res->pass = res->expect_met && res->memory_expectation_met && res->vs_fp32_expect_met &&
                (!res->has_vs_backend || res->vs_backend_verdict != CK_VERDICT_MISMATCH);
}

ck_status ck_run_case(ck_backend *b, const ck_graph *g, ck_dtype dtype, ck_result *res,
                      ck_error *err)
{
    return ck_run_case_ex(b, g, dtype, NULL, res, err);
}

ck_status ck_run_case_ex(ck_backend *b, const ck_graph *g, ck_dtype dtype,
                         const ck_case_run_opts *opts, ck_result *res, ck_error *err)
{
    const ck_case *c = g->cs;
    ck_manifest manifest;
    bool dumping = opts && opts->dump_dir;
    memset(&manifest, 0, sizeof manifest);
    ck_record plain, ckpt;
    ck_plan plan;
    memset(res, 0, sizeof *res);
    memset(&plain, 0, sizeof plain);
    memset(&ckpt, 0, sizeof ckpt);
    res->cs = c;
    res->g = g;
    res->dtype = dtype;
    ck_backend_info info;
    b->info(b, &info);
    snprintf(res->backend, sizeof res->backend, "%s", info.name);
    snprintf(res->backend_device, sizeof res->backend_device, "%s", info.device);
    snprintf(res->backend_versions, sizeof res->backend_versions, "%s", info.versions);

    ck_status st = ck_plan_build(g, &plan, err);
    if (st != CK_OK)
        return st;
    res->n_segments = plan.n_segments;
    res->segments = malloc((size_t)(plan.n_segments ? plan.n_segments : 1) * sizeof *res->segments);
    if (!res->segments) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
        goto out;
    }
    memcpy(res->segments, plan.segments, (size_t)plan.n_segments * sizeof *res->segments);

    ck_dump_spec dplain = {0}, dckpt = {0};
    ck_run_hooks hplain = {0}, hckpt = {0};
    if (dumping) {
        if ((st = ck_mkdir_p(opts->dump_dir, err)) != CK_OK ||
            (st = ck_manifest_init(&manifest, c->name, err)) != CK_OK)
            goto out;
        dplain = (ck_dump_spec){.dir = opts->dump_dir, .label = "plain", .manifest = &manifest,
                                .activations = opts->dump_activations};
        dckpt = dplain;
        dckpt.label = "checkpointed";
        hplain.dump = &dplain;
        hckpt.dump = &dckpt;
    }
    if ((st = ck_train(b, g, NULL, dtype, &hplain, &plain, err)) != CK_OK ||
        (st = ck_train(b, g, &plan, dtype, &hckpt, &ckpt, err)) != CK_OK)
        goto out;
    if (dumping) {
        char path[4096];
        snprintf(path, sizeof path, "%s/manifest.json", opts->dump_dir);
        if ((st = ck_manifest_write(&manifest, path, err)) != CK_OK)
            goto out;
    }
    if ((st = ck_compare_records(g, &plain, &ckpt, res, err)) != CK_OK)
        goto out;
    if (dtype == CK_F16 || dtype == CK_BF16) {
        /* the second judgement: how far is low-precision training from fp32 at all? */
        ck_record fp32;
        if ((st = ck_train(b, g, NULL, CK_F32, NULL, &fp32, err)) == CK_OK)
            st = ck_compare_vs_fp32(g, dtype, &fp32, &plain, res, err);
        ck_record_free(&fp32);
        if (st != CK_OK)
            goto out;
    }
    fill_summary(&res->plain, "plain", &plain);
    fill_summary(&res->ckpt, "checkpointed", &ckpt);
    res->first_scale_mismatch = -1;
    for (int s = 0; s < c->steps; s++) {
        if (res->plain.scales[s].scale != res->ckpt.scales[s].scale ||
            res->plain.scales[s].skipped != res->ckpt.scales[s].skipped) {
            res->scale_mismatches++;
            if (res->first_scale_mismatch < 0)
                res->first_scale_mismatch = s;
        }
    }
    int64_t pp = res->plain.peak_activation_bytes, cp = res->ckpt.peak_activation_bytes;
    res->memory_saving = pp > 0 ? 1.0 - (double)cp / (double)pp : 0.0;
    res->memory_met = !c->has_min_memory_saving || res->memory_saving >= c->min_memory_saving;
    ck_result_judge(res);
out:
    if (dumping)
        ck_manifest_free(&manifest);
    ck_record_free(&plain);
    ck_record_free(&ckpt);
    ck_plan_free(&plan);
    return st;
}
