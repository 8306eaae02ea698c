/*
 * Gradient checks of a whole case and of each layer as it sits in its case, against
 * float64 central differences (method and thresholds in gradcheck.h).
 */
#include "harness/verify/gradcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/engine/train.h"

const char *ck_gradcheck_not_smooth(const ck_node *node)
{
    if (node->op.kind != CK_OP_CAST)
        return NULL;
    if (node->op.cast_to == CK_F16 || node->op.cast_from == CK_F16)
        return "a cast to or from float16 rounds: its derivative is 0 almost everywhere";
    if (node->op.cast_to == CK_BF16 || node->op.cast_from == CK_BF16)
        return "a cast to or from bfloat16 rounds: its derivative is 0 almost everywhere";
    return NULL;
}

ck_status ck_gradcheck_layer(ck_backend *b, const ck_graph *g, int layer,
                             const ck_gradcheck_opts *opts, ck_gradcheck_result *res,
                             ck_error *err)
{
    const char *why = ck_gradcheck_not_smooth(&g->nodes[layer]);
    if (why) { /* a rounding: nothing a finite difference could judge (gradcheck.h) */
        memset(res, 0, sizeof *res);
        res->n = 1;
        res->ok = true;
        snprintf(res->e[0].name, sizeof res->e[0].name, "in0");
        snprintf(res->e[0].not_checkable, sizeof res->e[0].not_checkable, "%s", why);
        return CK_OK;
    }
    /* the layer on its own: a parameter it shares (ck_param_share) is one of its own here,
     * weight before bias as the op defines them */
    ck_node alone = g->nodes[layer];
    for (int k = 0; k < alone.n_shares && alone.n_params < 2; k++) {
        const ck_param_share *sh = &alone.shares[k];
        ck_param_spec ps = g->nodes[sh->layer].params[sh->slot];
        ps.suffix = sh->suffix;
        if (strcmp(sh->suffix, "weight") == 0 && alone.n_params == 1) {
            alone.params[1] = alone.params[0];
            alone.params[0] = ps;
            alone.n_params = 2;
        } else {
            alone.params[alone.n_params++] = ps;
        }
    }
    alone.n_shares = 0;
    const ck_node *nd = &alone;
    ck_shape in_shapes[CK_MAX_INPUTS];
    for (int j = 0; j < nd->n_in; j++)
        in_shapes[j] = nd->in[j] < 0 ? g->input_shape : g->nodes[nd->in[j]].out_shape;
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    ck_rng_purpose purpose = nd->draw_uniform ? CK_PURPOSE_DROPOUT : CK_PURPOSE_NOISE;
    args.rng = ck_rng_keyed(g->cs->seed, (uint32_t)layer, purpose, 0);
    ck_status st = ck_gradcheck_op(b, nd, in_shapes, &args, g->cs->seed ^ (uint64_t)layer, opts,
                                   res, err);
    if (st != CK_OK)
        ck_error_prefix(err, "%s: gradcheck of layer %s", g->cs->path, nd->spec->name);
    return st;
}

/* The first rounding cast (ck_gradcheck_not_smooth) on a path from layer i to the loss, or
 * -1: the layers after i in topological order that read i, and theirs. */
static int rounding_cast_after(const ck_graph *g, int i, int *memo)
{
    if (memo[i] != -2)
        return memo[i];
    int found = ck_gradcheck_not_smooth(&g->nodes[i]) ? i : -1;
    for (int c = i + 1; c < g->n && found < 0; c++)
        for (int j = 0; j < g->nodes[c].n_in && found < 0; j++)
            if (g->nodes[c].in[j] == i)
                found = rounding_cast_after(g, c, memo);
    memo[i] = found;
    return found;
}

typedef struct {
    ck_backend *b;
    const ck_graph *g;
    ck_exec *ex;
    ck_tensor input, target;
} case_ctx;

static ck_status case_loss(case_ctx *c, bool backward, double *loss, ck_error *err)
{
    return ck_exec_step(c->ex, 0, &c->input, c->target.data ? &c->target : NULL, c->g->cs->loss,
                        1.0, backward, loss, err);
}

ck_status ck_gradcheck_case(ck_backend *b, const ck_graph *g, const ck_gradcheck_opts *opts,
                            ck_gradcheck_entry **entries, int *n_entries, ck_error *err)
{
    ck_gradcheck_opts o;
    if (opts)
        o = *opts;
    else
        ck_gradcheck_opts_default(&o);
    *entries = NULL;
    *n_entries = 0;

    int n_params = 0;
    for (int i = 0; i < g->n; i++)
        n_params += g->nodes[i].n_params;
    ck_gradcheck_entry *ent = calloc((size_t)n_params + 1, sizeof *ent);
    if (!ent)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");

    ck_model model;
    ck_exec ex;
    case_ctx c;
    double *param_host = NULL, *grad_host = NULL;
    int *memo = NULL;
    memset(&ex, 0, sizeof ex);
    memset(&c, 0, sizeof c);
    ck_status st = ck_model_create(&model, b, g, CK_F64, err);
    if (st != CK_OK) {
        free(ent);
        return st;
    }
    ck_exec_config cfg = {.b = b, .g = g, .model = &model, .plan = NULL, .seed = g->cs->seed,
                          .rng = CK_RNG_COUNTER, .bn = CK_BN_SKIP, .freeze_buffers = true};
    c.b = b;
    c.g = g;
    c.ex = &ex;
    if ((st = ck_model_init(&model, g->cs->seed, err)) != CK_OK ||
        (st = ck_exec_create(&ex, &cfg, err)) != CK_OK ||
        (st = ck_make_data(b, g, CK_F64, 0, &c.input, &c.target, err)) != CK_OK ||
        (st = ck_model_zero_grads(&model, err)) != CK_OK)
        goto out;
    double loss0;
    if ((st = case_loss(&c, true, &loss0, err)) != CK_OK)
        goto out;

    memo = malloc((size_t)g->n * sizeof *memo);
    if (!memo) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < g->n; i++)
        memo[i] = -2;
    int k = 0;
    for (int i = 0; i < g->n; i++) {
        const int cast = rounding_cast_after(g, i, memo);
        for (int p = 0; p < g->nodes[i].n_params; p++, k++) {
            ck_tensor *param = &model.layers[i].param[p];
            ck_gradcheck_entry *e = &ent[k];
            snprintf(e->name, sizeof e->name, "%s", param->name);
            if (cast >= 0) {
                snprintf(e->not_checkable, sizeof e->not_checkable,
                         "its gradient passes layer %s: %s", g->nodes[cast].spec->name,
                         ck_gradcheck_not_smooth(&g->nodes[cast]));
                continue;
            }
            int64_t n = ck_shape_numel(&param->shape);
            free(param_host);
            free(grad_host);
            param_host = malloc((size_t)n * sizeof *param_host);
            grad_host = malloc((size_t)n * sizeof *grad_host);
            if (!param_host || !grad_host) {
                st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
                goto out;
            }
            if ((st = b->download(b, param, param_host, err)) != CK_OK ||
                (st = b->download(b, &model.layers[i].grad[p], grad_host, err)) != CK_OK)
                goto out;
            int64_t samples = n <= o.max_samples ? n : o.max_samples;
            for (int64_t s = 0; s < samples; s++) {
                int64_t idx = ck_gradcheck_sample_index(g->cs->seed, (uint32_t)k, n,
                                                        o.max_samples, s);
                double v = param_host[idx], lp = 0, lm = 0;
                param_host[idx] = v + o.eps;
                if ((st = b->upload(b, param, param_host, err)) == CK_OK)
                    st = case_loss(&c, false, &lp, err);
                param_host[idx] = v - o.eps;
                if (st == CK_OK && (st = b->upload(b, param, param_host, err)) == CK_OK)
                    st = case_loss(&c, false, &lm, err);
                param_host[idx] = v;
                if (st == CK_OK)
                    st = b->upload(b, param, param_host, err);
                if (st != CK_OK)
                    goto out;
                ck_gradcheck_entry_add(e, &o, idx, grad_host[idx], (lp - lm) / (2.0 * o.eps));
            }
        }
    }
    *entries = ent;
    *n_entries = n_params;
    ent = NULL;
out:
    free(memo);
    free(param_host);
    free(grad_host);
    free(ent);
    ck_free_data(b, &c.input, &c.target);
    ck_exec_free(&ex);
    ck_model_free(&model);
    if (st != CK_OK)
        ck_error_prefix(err, "%s: gradcheck", g->cs->path);
    return st;
}
