/* Training runs: data, the step loop, loss scaling (see train.h). */
#include "harness/engine/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

ck_status ck_make_data(ck_backend *b, const ck_graph *g, ck_dtype dtype, int step,
                       ck_tensor *input, ck_tensor *target, ck_error *err)
{
    const ck_case *c = g->cs;
    double *host = NULL;
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
    if (!host) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory drawing the input");
        goto fail;
    }
    ck_rng_stream s = ck_rng_keyed(c->seed, CK_RNG_NO_LAYER, CK_PURPOSE_INPUT, (uint32_t)step);
    for (int64_t i = 0; i < n; i++)
        host[i] = tokens ? (double)ck_rng_below(&s, (uint64_t)i, (uint32_t)c->input_vocab)
                  : c->input_dist == CK_DIST_NORMAL ? ck_rng_normal_f64(&s, (uint64_t)i)
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
        uint32_t classes = (uint32_t)g->output_shape.dim[g->loss_spec.class_dim];
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
    rec->step_wall_s = calloc((size_t)c->steps, sizeof *rec->step_wall_s);
    if (!rec->losses || !rec->scales || !rec->step_wall_s)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    ck_status st = ck_model_create(&model, b, g, dtype, err);
    if (st != CK_OK)
        return st;
    const ck_dump_spec *dump = hooks ? hooks->dump : NULL;
    ck_act_dumper acts = {.inner = hooks ? hooks->observer : NULL,
                          .inner_user = hooks ? hooks->observer_user : NULL, .b = b, .g = g,
                          .activations = dump && dump->activations,
                          .activation_grads = dump && dump->activation_grads};
    if ((st = ck_model_init(&model, c->seed, err)) != CK_OK)
        goto out;
    if (dump && (st = ck_dump_init(dump, &model, err)) != CK_OK)
        goto out;
    ck_exec_config cfg = {
        .b = b, .g = g, .model = &model, .plan = plan, .seed = c->seed, .rng = c->rng,
        .bn = c->bn, .autocast = c->autocast, .freeze_buffers = false,
        .observer = hooks ? hooks->observer : NULL,
        .observer_user = hooks ? hooks->observer_user : NULL,
    };
    if (dump) { /* masks and noise always; activations and their gradients on request */
        cfg.observer = ck_act_observe;
        cfg.observer_user = &acts;
    }
    if ((st = ck_exec_create(&ex, &cfg, err)) != CK_OK)
        goto out;
    double scale = c->loss_scale == CK_SCALE_NONE ? 1.0 : c->loss_scale_value;
    int clean_steps = 0;
    int64_t updates = 0; /* optimizer steps taken: a skipped step does not count (PyTorch) */
    for (int step = 0; step < c->steps; step++) {
        double loss = 0.0, step_t0 = now_s();
        if ((st = ck_make_data(b, g, dtype, step, &input, &target, err)) != CK_OK ||
            (dump && (st = ck_dump_data(dump, b, &input, &target, step, err)) != CK_OK) ||
            (st = ck_model_zero_grads(&model, err)) != CK_OK ||
            (st = ck_model_cast_params(&model, err)) != CK_OK ||
            (st = ck_exec_step(&ex, step, &input, target.data ? &target : NULL, c->loss, scale,
                               true, &loss, err)) != CK_OK ||
            (st = ck_model_unscale_grads(&model, scale, err)) != CK_OK)
            goto out;
        ck_free_data(b, &input, &target);
        rec->losses[step] = loss;
        int first_grad = rec->n;
        if ((st = ck_record_after_backward(rec, &model, step, loss, err)) != CK_OK)
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
        if ((st = ck_record_params(rec, &model, step, err)) != CK_OK)
            goto out;
        if (dump && (st = ck_dump_step(dump, rec, first_grad, step, err)) != CK_OK)
            goto out;
        if (dump && (st = ck_dump_activations(dump, &acts, step, err)) != CK_OK)
            goto out;
        if (dump && dump->optimizer_state &&
            (st = ck_dump_optimizer(dump, &model, &c->optimizer, step, err)) != CK_OK)
            goto out;
        rec->step_wall_s[step] = now_s() - step_t0;
    }
    rec->peak_activation_bytes = ex.act.peak_bytes;
    rec->mem = ex.act.trace;
    rec->recomputed_layers = ex.recomputed_layers;
    rec->recomputed_other_dtype = ex.recomputed_other_dtype;
    rec->first_other_dtype_layer = ex.first_other_dtype_layer;
out:
    ck_record_free(&acts.acts);
    ck_record_free(&acts.grads);
    ck_record_free(&acts.random);
    ck_free_data(b, &input, &target);
    ck_exec_free(&ex);
    ck_model_free(&model);
    rec->wall_time_s = now_s() - t0;
    if (st != CK_OK)
        ck_error_prefix(err, "%s: %s run", c->path, plan ? "checkpointed" : "plain");
    return st;
}
