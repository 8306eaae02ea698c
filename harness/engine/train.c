/* Training runs: data, the step loop, loss scaling (see train.h). */
#include "harness/engine/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/registry.h"
#include "harness/core/half.h"
#include "harness/engine/dump.h"

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

/* Rounds n doubles to dtype `to` (no-op for fp32 and wider: the upload rounds to fp32). */
static void round_host(double *v, int64_t n, ck_dtype to)
{
    if (to != CK_F16 && to != CK_BF16)
        return;
    for (int64_t i = 0; i < n; i++)
        v[i] = ck_round_to_dtype(v[i], to);
}

/* One draw of n host doubles: element i is a pure function of (stream, i), so the draw is
 * cut into chunks that a CPU backend's threads fill in any order (CK_PROC_HOST_PARALLEL),
 * the same values as one loop. */
typedef enum { DRAW_UNIFORM, DRAW_NORMAL, DRAW_BELOW } draw_kind;

#define DRAW_CHUNK 16384 /* elements per task (a multiple of the RNG's lane groups) */

typedef struct {
    draw_kind kind;
    const ck_rng_stream *s;
    int64_t n;
    uint32_t below;   /* DRAW_BELOW: integers in [0, below) */
    ck_dtype round_to; /* uniform and normal draws: rounded to this dtype (round_host) */
    double *out;
    ck_dtype to; /* then converted to the tensor's dtype into typed (ck_convert_from_f64) */
    void *typed;
} draw_job;

static void draw_task(void *vctx, int64_t task)
{
    const draw_job *j = vctx;
    const int64_t lo = task * DRAW_CHUNK, n = j->n - lo < DRAW_CHUNK ? j->n - lo : DRAW_CHUNK;
    double *out = j->out + lo;
    switch (j->kind) {
    case DRAW_UNIFORM: ck_rng_uniform_f64_span(j->s, (uint64_t)lo, n, out); break;
    case DRAW_NORMAL: ck_rng_normal_f64_span(j->s, (uint64_t)lo, n, out); break;
    case DRAW_BELOW:
        for (int64_t k = 0; k < n; k++)
            out[k] = (double)ck_rng_below(j->s, (uint64_t)(lo + k), j->below);
        break;
    }
    if (j->kind != DRAW_BELOW)
        round_host(out, n, j->round_to);
    ck_convert_from_f64(j->to, (char *)j->typed + (size_t)lo * ck_dtype_size(j->to), out, n);
}

static void draw(ck_backend *b, const draw_job *j)
{
    union {
        void *p;
        ck_host_parallel_fn parallel;
    } u = {ck_backend_proc(b, CK_PROC_HOST_PARALLEL)};
    const int64_t tasks = (j->n + DRAW_CHUNK - 1) / DRAW_CHUNK;
    if (u.parallel && tasks > 1) {
        u.parallel(b, tasks, draw_task, (void *)j);
        return;
    }
    for (int64_t t = 0; t < tasks; t++)
        draw_task((void *)j, t);
}

static ck_status make_data(ck_backend *b, const ck_graph *g, ck_dtype dtype, ck_dtype round_to,
                           int step, ck_tensor *input, ck_tensor *target, ck_error *err)
{
    const ck_case *c = g->cs;
    double *host = NULL;
    void *typed = NULL;
    memset(input, 0, sizeof *input);
    memset(target, 0, sizeof *target);
    const bool tokens = c->input_dist == CK_DIST_TOKENS;
    ck_status st = alloc_plain_tensor(b, input, "input", tokens ? CK_I32 : dtype,
                                      &g->input_shape, err);
    if (st != CK_OK)
        goto fail;
    int64_t n = ck_shape_numel(&g->input_shape);
    int64_t nt = c->loss == CK_LOSS_MSE || c->loss == CK_LOSS_CROSS_ENTROPY
                     ? ck_shape_numel(&g->target_shape)
                     : 0;
    host = malloc((size_t)(n > nt ? n : nt) * sizeof *host);
    /* the draws converted to the tensors' dtypes (at most 8 bytes an element) */
    typed = malloc((size_t)(n > nt ? n : nt) * sizeof *host + 1);
    if (!host || !typed) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory drawing the input");
        goto fail;
    }
    ck_rng_stream s = ck_rng_keyed(c->seed, CK_RNG_NO_LAYER, CK_PURPOSE_INPUT, (uint32_t)step);
    /* token ids are integers the low-precision run never casts: rounding them would
     * calibrate on other tokens, or on ids outside the vocabulary */
    draw(b, &(draw_job){.kind = tokens ? DRAW_BELOW
                                : c->input_dist != CK_DIST_NORMAL ? DRAW_UNIFORM
                                                                  : DRAW_NORMAL,
                        .s = &s, .n = n, .below = (uint32_t)c->input_vocab,
                        .round_to = round_to, .out = host, .to = input->dtype,
                        .typed = typed});
    if ((st = b->upload(b, input, typed, err)) != CK_OK)
        goto fail;

    ck_rng_stream ts = ck_rng_keyed(c->seed, CK_RNG_NO_LAYER, CK_PURPOSE_TARGET, (uint32_t)step);
    if (c->loss == CK_LOSS_MSE) {
        if ((st = alloc_plain_tensor(b, target, "target", dtype, &g->target_shape, err)) != CK_OK)
            goto fail;
        draw(b, &(draw_job){.kind = DRAW_UNIFORM, .s = &ts, .n = nt, .round_to = round_to,
                            .out = host, .to = target->dtype, .typed = typed});
        st = b->upload(b, target, typed, err);
    } else if (c->loss == CK_LOSS_CROSS_ENTROPY) {
        if ((st = alloc_plain_tensor(b, target, "target", CK_I32, &g->target_shape, err)) != CK_OK)
            goto fail;
        uint32_t classes = (uint32_t)g->output_shape.dim[g->loss_spec.class_dim];
        draw(b, &(draw_job){.kind = DRAW_BELOW, .s = &ts, .n = nt, .below = classes,
                            .out = host, .to = CK_I32, .typed = typed});
        st = b->upload(b, target, typed, err);
    }
    if (st != CK_OK)
        goto fail;
    free(host);
    free(typed);
    return CK_OK;
fail:
    free(host);
    free(typed);
    ck_free_data(b, input, target);
    return st;
}

ck_status ck_make_data(ck_backend *b, const ck_graph *g, ck_dtype dtype, int step,
                       ck_tensor *input, ck_tensor *target, ck_error *err)
{
    return make_data(b, g, dtype, CK_F32, step, input, target, err);
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

ck_status ck_trainer_begin(ck_trainer *t, ck_backend *b, const ck_graph *g, const ck_plan *plan,
                           ck_dtype dtype, const ck_run_hooks *hooks, ck_record *rec,
                           ck_error *err)
{
    const ck_case *c = g->cs;
    memset(t, 0, sizeof *t);
    memset(rec, 0, sizeof *rec);
    t->b = b;
    t->g = g;
    t->plan = plan;
    t->dtype = dtype;
    t->rec = rec;
    t->t0 = now_s();
    snprintf(t->run_name, sizeof t->run_name, "%s",
             hooks && hooks->run_name ? hooks->run_name : plan ? "checkpointed" : "plain");
    t->dump = hooks ? hooks->dump : NULL;
    const ck_dump_spec *dump = t->dump;
    t->acts = (ck_act_dumper){.inner = hooks ? hooks->observer : NULL,
                              .inner_user = hooks ? hooks->observer_user : NULL, .b = b, .g = g,
                              .activations = dump && dump->activations,
                              .activation_grads = dump && dump->activation_grads};
    t->latest_step_only = hooks && hooks->latest_step_only;
    rec->steps = t->latest_step_only ? 1 : c->steps;
    rec->losses = calloc((size_t)rec->steps, sizeof *rec->losses);
    rec->scales = calloc((size_t)rec->steps, sizeof *rec->scales);
    rec->step_wall_s = calloc((size_t)rec->steps, sizeof *rec->step_wall_s);
    rec->train_wall_s = calloc((size_t)rec->steps, sizeof *rec->train_wall_s);
    ck_status st = CK_OK;
    if (!rec->losses || !rec->scales || !rec->step_wall_s || !rec->train_wall_s) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = ck_model_create(&t->model, b, g, dtype, err)) != CK_OK)
        goto fail;
    t->model_made = true;
    if ((st = ck_model_init(&t->model, c->seed, err)) != CK_OK)
        goto fail;
    /* the precision judgement's calibration runs (fp32 only): see train.h */
    ck_dtype round_to = hooks && dtype == CK_F32 ? hooks->round_to : CK_F32;
    t->round_to = round_to;
    t->skip_like = hooks ? hooks->skip_like : NULL;
    if (dump && (st = ck_dump_init(dump, &t->model, err)) != CK_OK)
        goto fail;
    ck_exec_config cfg = {
        .b = b, .g = g, .model = &t->model, .plan = plan, .seed = c->seed, .rng = c->rng,
        .bn = c->bn, .autocast = c->autocast, .freeze_buffers = false,
        .observer = hooks ? hooks->observer : NULL,
        .observer_user = hooks ? hooks->observer_user : NULL,
        .event_log = hooks ? hooks->event_log : NULL,
        .round_bits = round_to == CK_F16 ? 11 : round_to == CK_BF16 ? 8 : 0,
        .perturb_rel = round_to != CK_F32 && hooks ? hooks->perturb_rel : 0.0,
        .perturb_seed = hooks ? hooks->perturb_seed : 0,
        .own_gradient_buffers = hooks && hooks->own_gradient_buffers,
        .keep_activation_grads = (hooks && hooks->keep_activation_grads) ||
                                 (dump && dump->activation_grads),
    };
    if (dump) { /* masks and noise always; activations and their gradients on request */
        cfg.observer = ck_act_observe;
        cfg.observer_user = &t->acts;
    }
    if ((st = ck_exec_create(&t->ex, &cfg, err)) != CK_OK)
        goto fail;
    t->scale = c->loss_scale == CK_SCALE_NONE ? 1.0 : c->loss_scale_value;
    t->busy_s = now_s() - t->t0;
    return CK_OK;
fail:
    ck_error_prefix(err, "%s: %s run", c->path, t->run_name);
    ck_trainer_free(t);
    return st;
}

ck_status ck_trainer_step(ck_trainer *t, int step, ck_error *err)
{
    const ck_case *c = t->g->cs;
    ck_backend *b = t->b;
    ck_record *rec = t->rec;
    const ck_dump_spec *dump = t->dump;
    ck_tensor input, target;
    memset(&input, 0, sizeof input);
    memset(&target, 0, sizeof target);
    double loss = 0.0, step_t0 = now_s();
    ck_status st;
    if ((st = make_data(b, t->g, t->dtype, t->round_to, step, &input, &target, err)) != CK_OK ||
        (dump && (st = ck_dump_data(dump, b, &input, &target, step, err)) != CK_OK))
        goto out;
    /* the training (train_wall_s): what a framework's step does, from zeroing the
     * gradients to the optimizer's update; the data draw and the records are the harness's */
    double train_t0 = now_s();
    /* zeroed lazily: each layer's backward writes its gradients fresh or zeroes them first
     * (ck_model_claim_grads), and the ones no backward reached are zeroed after it */
    ck_model_zero_grads_lazy(&t->model);
    if ((st = ck_model_cast_params(&t->model, err)) != CK_OK ||
        (t->round_to != CK_F32 &&
         (st = ck_model_round_cast_params(&t->model, t->round_to, err)) != CK_OK) ||
        (st = ck_exec_step(&t->ex, step, &input, target.data ? &target : NULL, c->loss, t->scale,
                           true, &loss, err)) != CK_OK ||
        (st = ck_model_settle_grads(&t->model, err)) != CK_OK ||
        (st = ck_model_unscale_grads(&t->model, t->scale, err)) != CK_OK)
        goto out;
    double train_s = now_s() - train_t0;
    ck_free_data(b, &input, &target);
    const int at = t->latest_step_only ? 0 : step; /* this step's slot in the per-step arrays */
    rec->losses[at] = loss;
    int first_grad = rec->n;
    if ((st = ck_record_after_backward(rec, &t->model, step, loss, err)) != CK_OK)
        goto out;
    train_t0 = now_s(); /* the loss scaler's scan and the update are training again */
    /* a loss scaler skips a step whose gradients hold inf or NaN (GradScaler) */
    bool finite = true; /* read only under a loss scaler */
    for (int k = first_grad; c->loss_scale != CK_SCALE_NONE && k < rec->n && finite; k++)
        if (rec->e[k].kind == CK_KIND_GRAD)
            finite = ck_all_finite(rec->e[k].dtype, ck_shape_numel(&rec->e[k].shape),
                                   rec->e[k].data);
    bool skip = (c->loss_scale != CK_SCALE_NONE && !finite) ||
                (t->skip_like && t->skip_like[step].skipped);
    rec->scales[at] = (ck_scale_step){.scale = t->scale, .skipped = skip};
    ck_act_finite_end_step(&t->ex.finite, skip);
    /* optimizer steps taken: a skipped step does not count (PyTorch) */
    if (!skip && (st = ck_model_update(&t->model, &c->optimizer, ++t->updates, 1.0, err)) != CK_OK)
        goto out;
    if (c->loss_scale == CK_SCALE_DYNAMIC) {
        if (!finite) {
            t->scale *= 0.5;
            t->clean_steps = 0;
        } else if (++t->clean_steps == c->growth_interval) {
            t->scale *= 2.0;
            t->clean_steps = 0;
        }
    }
    train_s += now_s() - train_t0;
    if ((st = ck_record_params(rec, &t->model, step, err)) != CK_OK)
        goto out;
    if (dump && (st = ck_dump_step(dump, rec, first_grad, step, err)) != CK_OK)
        goto out;
    if (dump && (st = ck_dump_activations(dump, &t->acts, step, err)) != CK_OK)
        goto out;
    if (dump && dump->optimizer_state &&
        (st = ck_dump_optimizer(dump, &t->model, &c->optimizer, step, err)) != CK_OK)
        goto out;
    rec->step_wall_s[at] = now_s() - step_t0;
    rec->train_wall_s[at] = train_s;
out:
    ck_free_data(b, &input, &target);
    t->busy_s += now_s() - step_t0; /* a run's own time, also when runs take turns */
    if (st != CK_OK)
        ck_error_prefix(err, "%s: %s run", c->path, t->run_name);
    return st;
}

void ck_trainer_end(ck_trainer *t)
{
    ck_record *rec = t->rec;
    rec->peak_activation_bytes = t->ex.act.peak_bytes;
    rec->mem = t->ex.act.trace;
    rec->recomputed_layers = t->ex.recomputed_layers;
    rec->recomputed_other_dtype = t->ex.recomputed_other_dtype;
    rec->first_other_dtype_layer = t->ex.first_other_dtype_layer;
    rec->act_nonfinite = t->ex.finite.total;
    rec->wall_time_s = t->busy_s;
}

void ck_trainer_free(ck_trainer *t)
{
    ck_record_free(&t->acts.acts);
    ck_record_free(&t->acts.grads);
    ck_record_free(&t->acts.random);
    ck_exec_free(&t->ex);
    if (t->model_made)
        ck_model_free(&t->model);
    t->model_made = false;
}

ck_status ck_train(ck_backend *b, const ck_graph *g, const ck_plan *plan, ck_dtype dtype,
                   const ck_run_hooks *hooks, ck_record *rec, ck_error *err)
{
    ck_trainer t;
    ck_status st = ck_trainer_begin(&t, b, g, plan, dtype, hooks, rec, err);
    if (st != CK_OK)
        return st;
    for (int step = 0; step < g->cs->steps && st == CK_OK; step++)
        st = ck_trainer_step(&t, step, err);
    if (st == CK_OK)
        ck_trainer_end(&t);
    else
        rec->wall_time_s = t.busy_s;
    ck_trainer_free(&t);
    return st;
}
