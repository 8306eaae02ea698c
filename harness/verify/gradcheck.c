/*
 * Gradient checks against float64 central differences: per op (ck_gradcheck_op) here;
 * per case in gradcheck_case.c. See gradcheck.h for the method and thresholds.
 */
#include "harness/verify/gradcheck.h"

#include "harness/model/op_def.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ck_gradcheck_opts_default(ck_gradcheck_opts *o)
{
    o->eps = 1e-6;
    o->atol = 1e-5;
    o->rtol = 1e-3;
    o->max_samples = 64;
}

/* ---------------------------------------------------------------------------------------
 * Sampling and bookkeeping shared with gradcheck_case.c
 * --------------------------------------------------------------------------------------- */

int64_t ck_gradcheck_sample_index(uint64_t seed, uint32_t tensor_slot, int64_t numel,
                                  int max_samples, int64_t k)
{
    if (numel <= max_samples)
        return k;
    /* evenly spaced strata with a random offset in each: covers the whole tensor */
    ck_rng_stream s = ck_rng_keyed(seed, tensor_slot, CK_PURPOSE_TEST, 1);
    int64_t lo = numel * k / max_samples, hi = numel * (k + 1) / max_samples;
    int64_t span = hi - lo;
    return lo + (int64_t)((uint64_t)ck_rng_u32(&s, (uint64_t)k) * (uint64_t)span >> 32);
}

void ck_gradcheck_entry_add(ck_gradcheck_entry *e, const ck_gradcheck_opts *o, int64_t index,
                            double analytic, double numeric)
{
    double diff = fabs(analytic - numeric);
    double allowed = o->atol + o->rtol * fabs(numeric);
    double denom = fmax(fmax(fabs(analytic), fabs(numeric)), 1e-12);
    double rel = diff / denom;
    bool bad = !(diff <= allowed); /* NaN fails */
    double excess = diff - allowed;
    double worst_excess = fabs(e->worst_analytic - e->worst_numeric) -
                          (o->atol + o->rtol * fabs(e->worst_numeric));
    if (e->checked == 0 || excess > worst_excess || isnan(diff)) {
        e->worst_index = index;
        e->worst_analytic = analytic;
        e->worst_numeric = numeric;
    }
    e->checked++;
    if (bad)
        e->failed++;
    if (diff > e->max_abs_err || isnan(diff))
        e->max_abs_err = diff;
    if (rel > e->max_rel_err || isnan(rel))
        e->max_rel_err = rel;
    double of_tol = allowed > 0.0 ? diff / allowed : (diff > 0.0 ? INFINITY : 0.0);
    if (of_tol > e->max_of_tol || isnan(of_tol))
        e->max_of_tol = of_tol;
}

/* ---------------------------------------------------------------------------------------
 * Per-op check
 * --------------------------------------------------------------------------------------- */

typedef struct {
    ck_tensor t;
    double *host; /* mirror of t for perturbation */
} gc_buf;

static ck_status gc_alloc(ck_backend *b, gc_buf *g, const char *name, ck_dtype dt,
                          const ck_shape *shape, ck_error *err)
{
    memset(g, 0, sizeof *g);
    g->t.name = name;
    g->t.dtype = dt;
    g->t.shape = *shape;
    int64_t n;
    if (!ck_shape_numel_checked(shape, 8, &n))
        return ck_fail(err, CK_ERR_INPUT, "gradcheck: bad shape for %s", name);
    ck_status st = b->alloc(b, (size_t)n * ck_dtype_size(dt), &g->t.data, err);
    if (st != CK_OK)
        return st;
    g->host = calloc((size_t)n, sizeof(double));
    if (!g->host)
        return ck_fail(err, CK_ERR_NOMEM, "gradcheck: out of memory");
    return CK_OK;
}

static void gc_release(ck_backend *b, gc_buf *g)
{
    if (g->t.data)
        b->free(b, g->t.data);
    free(g->host);
    memset(g, 0, sizeof *g);
}

/* Uploads the host mirror (doubles) into the tensor, converting to i64 when needed. */
static ck_status gc_push(ck_backend *b, gc_buf *g, ck_error *err)
{
    if (g->t.dtype == CK_F64)
        return b->upload(b, &g->t, g->host, err);
    int64_t n = ck_shape_numel(&g->t.shape);
    int64_t *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp)
        return ck_fail(err, CK_ERR_NOMEM, "gradcheck: out of memory");
    if (g->t.dtype == CK_I32) /* token ids (embedding) */
        for (int64_t i = 0; i < n; i++)
            ((int32_t *)tmp)[i] = (int32_t)g->host[i];
    else
        for (int64_t i = 0; i < n; i++)
            tmp[i] = (int64_t)g->host[i];
    ck_status st = b->upload(b, &g->t, tmp, err);
    free(tmp);
    return st;
}

typedef struct {
    ck_backend *b;
    const ck_node *node;
    ck_fwd_args args;
    ck_op_io io;
    gc_buf out, proj;
    double *out_host;
} gc_ctx;

/* L = sum(forward(...) * r) */
static ck_status gc_objective(gc_ctx *c, double *L, ck_error *err)
{
    ck_status st = c->b->forward(c->b, &c->node->op, &c->args, &c->io, err);
    if (st != CK_OK)
        return st;
    st = c->b->download(c->b, &c->out.t, c->out_host, err);
    if (st != CK_OK)
        return st;
    int64_t n = ck_shape_numel(&c->out.t.shape);
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++)
        acc += c->out_host[i] * c->proj.host[i];
    *L = acc;
    return CK_OK;
}

static void gc_fill(gc_buf *g, uint64_t seed, uint32_t slot, bool normal)
{
    ck_rng_stream s = ck_rng_keyed(seed, slot, CK_PURPOSE_TEST, 0);
    int64_t n = ck_shape_numel(&g->t.shape);
    for (int64_t i = 0; i < n; i++)
        g->host[i] = normal ? ck_rng_normal_f64(&s, (uint64_t)i)
                            : 2.0 * ck_rng_uniform_f64(&s, (uint64_t)i) - 1.0;
}

/* Checks one tensor (an input or a parameter) by central differences. */
static ck_status gc_check_tensor(gc_ctx *c, gc_buf *x, const double *analytic, uint32_t slot,
                                 uint64_t seed, const ck_gradcheck_opts *o,
                                 ck_gradcheck_entry *e, ck_error *err)
{
    int64_t n = ck_shape_numel(&x->t.shape);
    int64_t samples = n <= o->max_samples ? n : o->max_samples;
    for (int64_t k = 0; k < samples; k++) {
        int64_t i = ck_gradcheck_sample_index(seed, slot, n, o->max_samples, k);
        double v = x->host[i], lp, lm;
        x->host[i] = v + o->eps;
        ck_status st = gc_push(c->b, x, err);
        if (st == CK_OK)
            st = gc_objective(c, &lp, err);
        x->host[i] = v - o->eps;
        if (st == CK_OK)
            st = gc_push(c->b, x, err);
        if (st == CK_OK)
            st = gc_objective(c, &lm, err);
        x->host[i] = v;
        if (st == CK_OK)
            st = gc_push(c->b, x, err);
        if (st != CK_OK)
            return st;
        ck_gradcheck_entry_add(e, o, i, analytic[i], (lp - lm) / (2.0 * o->eps));
    }
    return CK_OK;
}

static const char *const gc_in_names[CK_MAX_INPUTS] = {"in0", "in1", "in2", "in3",
                                                       "in4", "in5", "in6", "in7"};

/* Every tensor one op's check holds. */
typedef struct {
    gc_buf in[CK_MAX_INPUTS], din[CK_MAX_INPUTS], par[2], dpar[2], buf[3], saved, dout;
} gc_tensors;

static void gc_tensors_release(ck_backend *b, gc_tensors *t, gc_ctx *c)
{
    for (int i = 0; i < CK_MAX_INPUTS; i++) {
        gc_release(b, &t->in[i]);
        gc_release(b, &t->din[i]);
    }
    for (int p = 0; p < 2; p++) {
        gc_release(b, &t->par[p]);
        gc_release(b, &t->dpar[p]);
    }
    for (int k = 0; k < 3; k++)
        gc_release(b, &t->buf[k]);
    gc_release(b, &t->saved);
    gc_release(b, &t->dout);
    gc_release(b, &c->out);
    gc_release(b, &c->proj);
    free(c->out_host);
}

/* The op's inputs (and their gradients) from the test stream. */
static ck_status gc_setup_inputs(gc_ctx *c, gc_tensors *t, const ck_shape *in_shapes,
                                 uint64_t seed, ck_error *err)
{
    ck_backend *b = c->b;
    const ck_node *node = c->node;
    ck_status st;
    c->io.n_in = node->n_in;
    /* an embedding's input holds token ids: i32 draws in [0, vocab), not differentiated */
    const bool tokens = node->op.kind == CK_OP_EMBEDDING;
    for (int i = 0; i < node->n_in; i++) {
        if (tokens && i == 0) {
            if ((st = gc_alloc(b, &t->in[i], gc_in_names[i], CK_I32, &in_shapes[i], err)) != CK_OK)
                return st;
            ck_rng_stream ts = ck_rng_keyed(seed, 0, CK_PURPOSE_TEST, 1);
            for (int64_t k = 0; k < ck_shape_numel(&in_shapes[i]); k++)
                t->in[i].host[k] = (double)ck_rng_below(&ts, (uint64_t)k, (uint32_t)node->op.vocab);
            if ((st = gc_push(b, &t->in[i], err)) != CK_OK)
                return st;
            c->io.in[i] = &t->in[i].t;
            continue;
        }
        if ((st = gc_alloc(b, &t->in[i], gc_in_names[i], CK_F64, &in_shapes[i], err)) != CK_OK ||
            (st = gc_alloc(b, &t->din[i], gc_in_names[i], CK_F64, &in_shapes[i], err)) != CK_OK)
            return st;
        gc_fill(&t->in[i], seed, (uint32_t)i, true);
        if (ck_op_input_domain(node->op.kind) == CK_DOMAIN_POSITIVE) /* sqrt, log, ... */
            for (int64_t k = 0; k < ck_shape_numel(&in_shapes[i]); k++)
                t->in[i].host[k] = 0.5 + fabs(t->in[i].host[k]);
        if ((st = gc_push(b, &t->in[i], err)) != CK_OK ||
            (st = b->zero(b, &t->din[i].t, err)) != CK_OK)
            return st;
        c->io.in[i] = &t->in[i].t;
    }
    return CK_OK;
}

/* Parameters, buffers, the saved tensor, the output and the projection r. */
static ck_status gc_setup_state(gc_ctx *c, gc_tensors *t, uint64_t seed, ck_error *err)
{
    ck_backend *b = c->b;
    const ck_node *node = c->node;
    ck_status st;
    for (int p = 0; p < node->n_params; p++) {
        const ck_param_spec *ps = &node->params[p];
        if ((st = gc_alloc(b, &t->par[p], ps->suffix, CK_F64, &ps->shape, err)) != CK_OK ||
            (st = gc_alloc(b, &t->dpar[p], ps->suffix, CK_F64, &ps->shape, err)) != CK_OK)
            return st;
        gc_fill(&t->par[p], seed, 16u + (uint32_t)p, false);
        if ((st = gc_push(b, &t->par[p], err)) != CK_OK ||
            (st = b->zero(b, &t->dpar[p].t, err)) != CK_OK)
            return st;
    }
    for (int k = 0; k < node->n_buffers; k++) {
        const ck_param_spec *bs = &node->buffers[k];
        ck_dtype dt = bs->dtype == CK_I64 ? CK_I64 : CK_F64;
        if ((st = gc_alloc(b, &t->buf[k], bs->suffix, dt, &bs->shape, err)) != CK_OK)
            return st;
        int64_t n = ck_shape_numel(&bs->shape);
        for (int64_t i = 0; i < n; i++)
            t->buf[k].host[i] = bs->init == CK_INIT_CONST ? bs->a : 0.0;
        if ((st = gc_push(b, &t->buf[k], err)) != CK_OK)
            return st;
    }
    if (node->has_saved) {
        if ((st = gc_alloc(b, &t->saved, "saved", CK_F64, &node->saved_shape, err)) != CK_OK)
            return st;
        c->io.saved = &t->saved.t;
    }
    if ((st = gc_alloc(b, &c->out, "out", CK_F64, &node->out_shape, err)) != CK_OK ||
        (st = gc_alloc(b, &c->proj, "proj", CK_F64, &node->out_shape, err)) != CK_OK ||
        (st = gc_alloc(b, &t->dout, "dout", CK_F64, &node->out_shape, err)) != CK_OK)
        return st;
    gc_fill(&c->proj, seed, 32u, true);
    c->out_host = malloc((size_t)ck_shape_numel(&node->out_shape) * sizeof(double));
    if (!c->out_host)
        return ck_fail(err, CK_ERR_NOMEM, "gradcheck: out of memory");
    c->io.out = &c->out.t;
    for (int p = 0; p < node->n_params; p++) {
        if (strcmp(node->params[p].suffix, "bias") == 0)
            c->io.bias = &t->par[p].t;
        else
            c->io.weight = &t->par[p].t;
    }
    for (int k = 0; k < node->n_buffers; k++) {
        const char *sfx = node->buffers[k].suffix;
        if (strcmp(sfx, "running_mean") == 0)
            c->io.running_mean = &t->buf[k].t;
        else if (strcmp(sfx, "running_var") == 0)
            c->io.running_var = &t->buf[k].t;
        else if (strcmp(sfx, "num_batches_tracked") == 0)
            c->io.num_batches_tracked = &t->buf[k].t;
        else if (strcmp(sfx, "constant") == 0 || strcmp(sfx, "mask") == 0)
            c->io.constant = &t->buf[k].t;
    }
    return CK_OK;
}

/* The analytic gradients: one forward, one backward with dout = r, downloaded. */
static ck_status gc_analytic(gc_ctx *c, gc_tensors *t, ck_error *err)
{
    ck_backend *b = c->b;
    const ck_node *node = c->node;
    double L0;
    ck_status st;
    if ((st = gc_objective(c, &L0, err)) != CK_OK)
        return st;
    memcpy(t->dout.host, c->proj.host, (size_t)ck_shape_numel(&node->out_shape) * sizeof(double));
    if ((st = gc_push(b, &t->dout, err)) != CK_OK)
        return st;
    ck_op_grads g;
    memset(&g, 0, sizeof g);
    g.dout = &t->dout.t;
    for (int i = 0; i < node->n_in; i++)
        g.din[i] = t->din[i].t.data ? &t->din[i].t : NULL;
    for (int p = 0; p < node->n_params; p++) {
        if (strcmp(node->params[p].suffix, "bias") == 0)
            g.dbias = &t->dpar[p].t;
        else
            g.dweight = &t->dpar[p].t;
    }
    if ((st = b->backward(b, &node->op, &c->args, &c->io, &g, err)) != CK_OK)
        return st;
    for (int i = 0; i < node->n_in; i++)
        if (t->din[i].t.data && (st = b->download(b, &t->din[i].t, t->din[i].host, err)) != CK_OK)
            return st;
    for (int p = 0; p < node->n_params; p++)
        if ((st = b->download(b, &t->dpar[p].t, t->dpar[p].host, err)) != CK_OK)
            return st;
    return CK_OK;
}

/* Every differentiable input and parameter against central differences. */
static ck_status gc_compare_all(gc_ctx *c, gc_tensors *t, uint64_t seed,
                                const ck_gradcheck_opts *o, ck_gradcheck_result *res,
                                ck_error *err)
{
    const ck_node *node = c->node;
    ck_status st;
    res->ok = true;
    for (int i = 0; i < node->n_in; i++) {
        if (!t->din[i].t.data)
            continue; /* token ids */
        ck_gradcheck_entry *e = &res->e[res->n++];
        snprintf(e->name, sizeof e->name, "%s", gc_in_names[i]);
        if ((st = gc_check_tensor(c, &t->in[i], t->din[i].host, (uint32_t)i, seed, o, e, err)) !=
            CK_OK)
            return st;
        res->ok = res->ok && e->failed == 0;
    }
    for (int p = 0; p < node->n_params; p++) {
        ck_gradcheck_entry *e = &res->e[res->n++];
        snprintf(e->name, sizeof e->name, "%s", node->params[p].suffix);
        if ((st = gc_check_tensor(c, &t->par[p], t->dpar[p].host, 16u + (uint32_t)p, seed, o, e,
                                  err)) != CK_OK)
            return st;
        res->ok = res->ok && e->failed == 0;
    }
    return CK_OK;
}

ck_status ck_gradcheck_op(ck_backend *b, const ck_node *node, const ck_shape *in_shapes,
                          const ck_fwd_args *args, uint64_t seed, const ck_gradcheck_opts *opts,
                          ck_gradcheck_result *res, ck_error *err)
{
    ck_gradcheck_opts o;
    if (opts)
        o = *opts;
    else
        ck_gradcheck_opts_default(&o);
    memset(res, 0, sizeof *res);

    gc_ctx c;
    memset(&c, 0, sizeof c);
    c.b = b;
    c.node = node;
    c.args = *args;
    c.args.update_running_stats = false; /* the objective must not drift between evaluations */
    gc_tensors t;
    memset(&t, 0, sizeof t);
    ck_status st;
    if (node->n_in < 1 || node->n_in > CK_MAX_INPUTS || node->n_params > 2 ||
        node->n_buffers > 3)
        st = ck_fail(err, CK_ERR_INTERNAL, "gradcheck: malformed node");
    else if ((st = gc_setup_inputs(&c, &t, in_shapes, seed, err)) == CK_OK &&
             (st = gc_setup_state(&c, &t, seed, err)) == CK_OK &&
             (st = gc_analytic(&c, &t, err)) == CK_OK)
        st = gc_compare_all(&c, &t, seed, &o, res, err);
    gc_tensors_release(b, &t, &c);
    return st;
}
