/*
 * The model graph: per-op shape inference (ck_op_infer), parameter/buffer/saved specs
 * (ck_op_state_specs) and draws (ck_op_draw_specs), each looked up in the op's definition
 * row (op_def.h, harness/model/ops/<family>.c), and the graph a case turns into
 * (ck_graph_build: resolved padding, output and target shapes, consumers).
 */
#include "harness/model/graph.h"
#include "harness/model/op_def.h"
#include "harness/model/op_rules.h"

#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ */
/* An op's rules: its definition row (op_def.h)                                          */
/* ------------------------------------------------------------------------------------ */

/* The input count against the row: one message per kind of rule. */
static ck_status check_input_count(const ck_op_def *def, const ck_op_params *op, int n_in,
                                   ck_error *err)
{
    const char *name = ck_op_display_name(op);
    if (ck_op_inputs_ok(op->kind, n_in))
        return CK_OK;
    if (ck_op_takes_many_inputs(op->kind))
        return ck_fail(err, CK_ERR_INPUT, "%s needs %d to %d inputs, got %d", name,
                       def->min_inputs, def->max_inputs, n_in);
    if (def->max_inputs > 1)
        return ck_fail(err, CK_ERR_INPUT, "%s takes %s inputs, got %d", name,
                       def->inputs_rule ? def->inputs_rule : "exactly 2", n_in);
    return ck_fail(err, CK_ERR_INPUT, "%s takes exactly one input, got %d", name, n_in);
}

ck_status ck_op_infer(ck_op_params *op, int n_in, const ck_shape *in, ck_shape *out,
                      ck_error *err)
{
    char s[128];
    const ck_op_def *def = ck_op_def_of(op->kind);
    if (!def)
        return ck_fail(err, CK_ERR_INTERNAL, "unknown op kind %d", (int)op->kind);
    CK_TRY(check_input_count(def, op, n_in, err));
    for (int i = 0; i < n_in; i++)
        if (in[i].ndim < 1 || !ck_shape_numel_checked(&in[i], 8, NULL))
            return ck_fail(err, CK_ERR_INPUT, "input %d has an invalid shape %s", i,
                           ck_shape_str(&in[i], s, sizeof s));
    for (int d = 0; d < CK_MAX_SPATIAL; d++)
        op->pad_lo[d] = op->pad_hi[d] = 0;

    ck_shape y = in[0];
    if (def->infer)
        CK_TRY(def->infer(op, n_in, in, &y, err));
    if (!ck_shape_numel_checked(&y, 8, NULL))
        return ck_fail(err, CK_ERR_INPUT, "output shape %s is too large",
                       ck_shape_str(&y, s, sizeof s));
    *out = y;
    return CK_OK;
}

void ck_op_state_specs(ck_node *node, const ck_shape *in0)
{
    node->n_params = 0;
    node->n_buffers = 0;
    node->has_saved = false;
    memset(&node->saved_shape, 0, sizeof node->saved_shape);
    const ck_op_def *def = ck_op_def_of(node->op.kind);
    if (def && def->state)
        def->state(node, in0);
}

void ck_op_draw_specs(ck_node *node, const ck_shape *in)
{
    node->draw_elems = 0;
    node->draw_uniform = false;
    const ck_op_def *def = ck_op_def_of(node->op.kind);
    if (def && def->draws)
        def->draws(node, in);
}

/* ------------------------------------------------------------------------------------ */
/* The graph                                                                             */
/* ------------------------------------------------------------------------------------ */

static ck_status check_state_sizes(const ck_node *node, ck_error *err)
{
    char s[128];
    for (int p = 0; p < node->n_params; p++)
        if (!ck_shape_numel_checked(&node->params[p].shape, 8, NULL))
            return ck_fail(err, CK_ERR_INPUT, "%s shape %s is too large", node->params[p].suffix,
                           ck_shape_str(&node->params[p].shape, s, sizeof s));
    return CK_OK;
}

static ck_status infer_target(const ck_case *c, ck_graph *g, ck_error *err)
{
    char s[128];
    const ck_shape *y = &g->output_shape;
    memset(&g->target_shape, 0, sizeof g->target_shape);
    g->loss_spec.kind = c->loss;
    g->loss_spec.class_dim = 1;
    g->loss_spec.has_ignore = c->loss_has_ignore;
    g->loss_spec.ignore_index = c->loss_ignore_index;
    g->loss_spec.label_smoothing = c->loss_label_smoothing;
    switch (c->loss) {
    case CK_LOSS_MEAN:
    case CK_LOSS_SUM:
        return CK_OK; /* no target: ndim 0 */
    case CK_LOSS_MSE:
        g->target_shape = *y;
        return CK_OK;
    case CK_LOSS_CROSS_ENTROPY:
        if (c->loss_class_dim != 1 || c->loss_has_ignore) {
            int cd = c->loss_class_dim < 0 ? y->ndim + c->loss_class_dim : c->loss_class_dim;
            if (y->ndim < 2 || cd < 0 || cd >= y->ndim)
                return ck_fail(err, CK_ERR_INPUT,
                               "%s: loss.class_dim: %d is out of range for the output %s", c->path,
                               c->loss_class_dim, ck_shape_str(y, s, sizeof s));
            if (y->dim[cd] < 2 || y->dim[cd] > INT32_MAX)
                return ck_fail(err, CK_ERR_INPUT,
                               "%s: loss.class_dim: cross_entropy needs 2 to %d classes in dim %d "
                               "of the output, got %s",
                               c->path, INT32_MAX, cd, ck_shape_str(y, s, sizeof s));
            g->loss_spec.class_dim = cd;
            g->target_shape.ndim = y->ndim - 1;
            for (int d = 0, t = 0; d < y->ndim; d++)
                if (d != cd)
                    g->target_shape.dim[t++] = y->dim[d];
            return CK_OK;
        }
        if (y->ndim < 2)
            return ck_fail(err, CK_ERR_INPUT,
                           "%s: loss.op: cross_entropy needs an output of rank >= 2 (N, C, ...), "
                           "got %s",
                           c->path, ck_shape_str(y, s, sizeof s));
        if (y->dim[1] < 2 || y->dim[1] > INT32_MAX)
            return ck_fail(err, CK_ERR_INPUT,
                           "%s: loss.op: cross_entropy needs 2 to %d classes in dim 1 of the "
                           "output, got %s",
                           c->path, INT32_MAX, ck_shape_str(y, s, sizeof s));
        g->target_shape.ndim = y->ndim - 1;
        g->target_shape.dim[0] = y->dim[0];
        for (int d = 2; d < y->ndim; d++)
            g->target_shape.dim[d - 1] = y->dim[d];
        return CK_OK;
    case CK_LOSS_KIND_COUNT:
    default:
        break;
    }
    return ck_fail(err, CK_ERR_INTERNAL, "%s: unknown loss kind %d", c->path, (int)c->loss);
}

/* Whether pattern matches a tensor the runs record: "loss", and per layer its parameters
 * (as grad: and param:) and buffers (as buffer:), bare or qualified by kind. */
static bool pattern_matches_any(const ck_graph *g, const char *pattern)
{
    if (fnmatch(pattern, "loss", 0) == 0 || fnmatch(pattern, "loss:loss", 0) == 0)
        return true;
    for (int i = 0; i < g->n; i++) {
        const ck_node *node = &g->nodes[i];
        for (int k = 0; k < node->n_params + node->n_buffers; k++) {
            bool is_param = k < node->n_params;
            const char *suffix = is_param ? node->params[k].suffix
                                          : node->buffers[k - node->n_params].suffix;
            char name[256], q[300];
            snprintf(name, sizeof name, "%s.%s", node->spec->name, suffix);
            if (fnmatch(pattern, name, 0) == 0)
                return true;
            static const char *const kinds[] = {"grad", "param", "buffer"};
            for (int m = is_param ? 0 : 2; m < (is_param ? 2 : 3); m++) {
                snprintf(q, sizeof q, "%s:%s", kinds[m], name);
                if (fnmatch(pattern, q, 0) == 0)
                    return true;
            }
        }
    }
    return false;
}

/* ------------------------------------------------------------------------------------ */
/* Shared parameters ("share")                                                           */
/* ------------------------------------------------------------------------------------ */

static int param_slot(const ck_node *node, const char *suffix, size_t n)
{
    for (int p = 0; p < node->n_params; p++)
        if (strlen(node->params[p].suffix) == n && strncmp(node->params[p].suffix, suffix, n) == 0)
            return p;
    return -1;
}

/* "the JSON path of layer i's share": layers[3] (head).share or ...share.bias */
static void share_path(const ck_case *c, int i, int k, char *buf, size_t n)
{
    const ck_layer_spec *L = &c->layers[i];
    snprintf(buf, n, "%s: layers[%d] (%s).share%s%s", c->path ? c->path : "(case)", i, L->name,
             L->share_object ? "." : "", L->share_object ? L->shares[k].suffix : "");
}

/* The owner (layer, slot in its written params) of share k of layer i, checked. */
static ck_status share_target(const ck_case *c, const ck_graph *g, int i, int k, int *lj,
                              int *lq, ck_error *err)
{
    char where[CK_JPATH_MAX + 64], a[128], b[128];
    const ck_share_spec *sh = &c->layers[i].shares[k];
    const ck_node *self = &g->nodes[i];
    share_path(c, i, k, where, sizeof where);
    if (param_slot(self, sh->suffix, strlen(sh->suffix)) < 0)
        return ck_fail(err, CK_ERR_INPUT, "%s: layer %s (%s) has no parameter `%s` to share",
                       where, self->spec->name, self->spec->op_name, sh->suffix);
    const char *dot = strrchr(sh->target, '.');
    size_t nl = (size_t)(dot - sh->target);
    int j = -1;
    for (int t = 0; t < g->n && j < 0; t++)
        if (strlen(c->layers[t].name) == nl && strncmp(c->layers[t].name, sh->target, nl) == 0)
            j = t;
    if (j < 0)
        return ck_fail(err, CK_ERR_INPUT, "%s: \"%s\" names no layer of the case (no layer is "
                                          "called \"%.*s\")",
                       where, sh->target, (int)nl, sh->target);
    const ck_node *own = &g->nodes[j];
    int q = param_slot(own, dot + 1, strlen(dot + 1));
    if (q < 0) {
        bool buffer = false;
        for (int k2 = 0; k2 < own->n_buffers; k2++)
            buffer = buffer || strcmp(own->buffers[k2].suffix, dot + 1) == 0;
        return ck_fail(err, CK_ERR_INPUT, "%s: layer %s (%s) has %s `%s`%s", where,
                       own->spec->name, own->spec->op_name,
                       buffer ? "a buffer" : "no parameter", dot + 1,
                       buffer ? ": only parameters (weight, bias) can be shared" : "");
    }
    int p = param_slot(self, sh->suffix, strlen(sh->suffix));
    if (j == i && q == p)
        return ck_fail(err, CK_ERR_INPUT, "%s: \"%s\" is a parameter of this layer itself", where,
                       sh->target);
    if (!ck_shape_equal(&self->params[p].shape, &own->params[q].shape))
        return ck_fail(err, CK_ERR_INPUT,
                       "%s: %s.%s is %s but %s is %s: a shared parameter has one shape (a tied "
                       "output head is a linear layer with units = vocab and bias false on "
                       "the embedding's units)",
                       where, self->spec->name, sh->suffix,
                       ck_shape_str(&self->params[p].shape, a, sizeof a), sh->target,
                       ck_shape_str(&own->params[q].shape, b, sizeof b));
    *lj = j;
    *lq = q;
    return CK_OK;
}

/* Resolves every share to its root owner (a share of a share is the root's), refuses a
 * cycle, then moves shared slots out of params[] into shares[] (owner slots renumbered). */
static ck_status resolve_shares(const ck_case *c, ck_graph *g, ck_error *err)
{
    int n = g->n, any = 0;
    for (int i = 0; i < n; i++)
        any += c->layers[i].n_shares;
    if (!any)
        return CK_OK;
    int (*to)[2][2] = malloc((size_t)n * sizeof *to); /* [layer][slot] -> (layer, slot) */
    if (!to)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", c->path ? c->path : "(case)");
    ck_status st = CK_OK;
    for (int i = 0; i < n; i++)
        for (int p = 0; p < 2; p++)
            to[i][p][0] = to[i][p][1] = -1;
    for (int i = 0; i < n && st == CK_OK; i++)
        for (int k = 0; k < c->layers[i].n_shares && st == CK_OK; k++) {
            const char *sfx = c->layers[i].shares[k].suffix;
            int p = param_slot(&g->nodes[i], sfx, strlen(sfx)), j = -1, q = -1;
            if ((st = share_target(c, g, i, k, &j, &q, err)) == CK_OK) {
                to[i][p][0] = j;
                to[i][p][1] = q;
            }
        }
    /* roots: follow each chain; more hops than slots is a cycle */
    int (*root)[2][2] = st == CK_OK ? malloc((size_t)n * sizeof *root) : NULL;
    if (st == CK_OK && !root)
        st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", c->path ? c->path : "(case)");
    for (int i = 0; i < n && st == CK_OK; i++)
        for (int p = 0; p < 2 && st == CK_OK; p++) {
            int j = i, q = p, hops = 0;
            while (to[j][q][0] >= 0 && hops <= 2 * n) {
                int nj = to[j][q][0];
                q = to[j][q][1];
                j = nj;
                hops++;
            }
            root[i][p][0] = j;
            root[i][p][1] = q;
            if (hops > 2 * n) {
                char where[CK_JPATH_MAX + 64], chain[512];
                int k = 0;
                while (strcmp(c->layers[i].shares[k].suffix, g->nodes[i].params[p].suffix))
                    k++;
                share_path(c, i, k, where, sizeof where);
                size_t used = (size_t)snprintf(chain, sizeof chain, "%s.%s", c->layers[i].name,
                                               g->nodes[i].params[p].suffix);
                for (int cj = i, cq = p, h = 0; h < 8 && used < sizeof chain; h++) {
                    int nj = to[cj][cq][0];
                    cq = to[cj][cq][1];
                    cj = nj;
                    used += (size_t)snprintf(chain + used, sizeof chain - used, " -> %s.%s",
                                             c->layers[cj].name, g->nodes[cj].params[cq].suffix);
                    if (cj == i && cq == p)
                        break;
                }
                st = ck_fail(err, CK_ERR_INPUT, "%s: the shares form a cycle (%s): one layer "
                                                "must own the parameter",
                             where, chain);
            }
        }
    /* renumber: the slots left in params[] after the shared ones are moved out */
    int (*renum)[2] = st == CK_OK ? malloc((size_t)n * sizeof *renum) : NULL;
    if (st == CK_OK && !renum)
        st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", c->path ? c->path : "(case)");
    for (int i = 0; i < n && st == CK_OK; i++)
        for (int p = 0, kept = 0; p < 2; p++)
            renum[i][p] = p < g->nodes[i].n_params && to[i][p][0] < 0 ? kept++ : -1;
    for (int i = 0; i < n && st == CK_OK; i++) {
        ck_node *node = &g->nodes[i];
        ck_param_spec kept[2];
        int n_kept = 0, skipped = 0;
        node->n_shares = 0;
        for (int p = 0; p < node->n_params; p++) {
            if (to[i][p][0] < 0) {
                node->init_slot_skip[n_kept] = (unsigned char)skipped;
                kept[n_kept++] = node->params[p];
                continue;
            }
            skipped++;
            int rj = root[i][p][0], rq = root[i][p][1];
            node->shares[node->n_shares++] =
                (ck_param_share){.suffix = node->params[p].suffix, .layer = rj,
                                 .slot = renum[rj][rq]};
        }
        for (int p = 0; p < n_kept; p++)
            node->params[p] = kept[p];
        node->n_params = n_kept;
    }
    free(renum);
    free(root);
    free(to);
    return st;
}

ck_status ck_graph_build(const ck_case *c, ck_graph *g, ck_error *err)
{
    ck_status st = CK_OK;
    memset(g, 0, sizeof *g);
    const char *path = c->path ? c->path : "(case)";

    if (c->n_layers < 1 || !c->layers) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: layers: the case has no layers", path);
        goto cleanup;
    }
    g->nodes = calloc((size_t)c->n_layers, sizeof *g->nodes);
    if (!g->nodes) {
        st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
        goto cleanup;
    }
    g->cs = c;
    g->n = c->n_layers;
    g->input_shape = c->input_shape;

    for (int i = 0; i < g->n; i++) {
        const ck_layer_spec *L = &c->layers[i];
        ck_node *node = &g->nodes[i];
        ck_shape in_shapes[CK_MAX_INPUTS];
        const char *in_names[CK_MAX_INPUTS];

        node->spec = L;
        node->op = L->op;
        node->op.low_precision_reduction =
            c->reduction_low && L->op.kind == CK_OP_BATCHNORM;
        node->n_in = L->n_in;
        node->last_consumer = -1;
        for (int j = 0; j < L->n_in; j++) {
            int src = L->in[j];
            if (src >= i || src < -1) {
                st = ck_fail(err, CK_ERR_INTERNAL, "%s: layers[%d] (%s): input %d is not earlier",
                             path, i, L->name, j);
                goto cleanup;
            }
            node->in[j] = src;
            in_shapes[j] = src < 0 ? c->input_shape : g->nodes[src].out_shape;
            in_names[j] = src < 0 ? "input" : c->layers[src].name;
        }
        /* token ids (an i32 input) feed embeddings only, and embeddings read only them */
        for (int j = 0; j < L->n_in; j++) {
            const bool tokens = L->in[j] < 0 && c->input_dist == CK_DIST_TOKENS;
            if (tokens && L->op.kind != CK_OP_EMBEDDING) {
                st = ck_fail(err, CK_ERR_INPUT,
                             "%s: layers[%d] (%s): reads the model input, which holds token ids "
                             "(\"dist\": \"tokens\"); only an embedding layer can read them",
                             path, i, L->name);
                goto cleanup;
            }
            if (!tokens && L->op.kind == CK_OP_EMBEDDING) {
                st = ck_fail(err, CK_ERR_INPUT,
                             "%s: layers[%d] (%s): an embedding reads token ids: its input must "
                             "be the model input with \"dist\": \"tokens\"",
                             path, i, L->name);
                goto cleanup;
            }
        }
        /* add/concat first with the input names, which ck_op_infer does not know. */
        if (ck_op_takes_many_inputs(L->op.kind) && L->n_in >= 2 &&
            (st = ck_op_check_join_shapes(&node->op, L->n_in, in_shapes, in_names, err)) != CK_OK) {
            ck_error_prefix(err, "%s: layers[%d] (%s).inputs", path, i, L->name);
            goto cleanup;
        }
        if ((st = ck_op_infer(&node->op, node->n_in, in_shapes, &node->out_shape, err)) !=
            CK_OK) {
            ck_error_prefix(err, "%s: layers[%d] (%s)", path, i, L->name);
            goto cleanup;
        }
        ck_op_state_specs(node, &in_shapes[0]);
        ck_op_draw_specs(node, in_shapes);
        if ((st = check_state_sizes(node, err)) != CK_OK) {
            ck_error_prefix(err, "%s: layers[%d] (%s)", path, i, L->name);
            goto cleanup;
        }
        /* One count per input edge: add(["a", "a"]) reads a twice. */
        for (int j = 0; j < node->n_in; j++) {
            if (node->in[j] < 0)
                continue;
            g->nodes[node->in[j]].n_consumers++;
            g->nodes[node->in[j]].last_consumer = i;
        }
    }
    if ((st = resolve_shares(c, g, err)) != CK_OK)
        goto cleanup;
    g->nodes[g->n - 1].n_consumers++; /* the loss reads the output layer */
    g->nodes[g->n - 1].last_consumer = g->n;

    /* A layer nobody reads gets no gradient and is almost always a wrong `inputs`. */
    for (int i = 0; i < g->n - 1; i++) {
        if (g->nodes[i].n_consumers == 0) {
            st = ck_fail(err, CK_ERR_INPUT,
                         "%s: layers[%d] (%s): output is never used (only the last layer may "
                         "feed nothing but the loss)",
                         path, i, c->layers[i].name);
            goto cleanup;
        }
    }
    g->output_shape = g->nodes[g->n - 1].out_shape;
    if ((st = infer_target(c, g, err)) != CK_OK)
        goto cleanup;
    /* a tolerance pattern that matches nothing is a typo that silently loosens nothing */
    for (int i = 0; i < c->n_tol_patterns; i++) {
        if (!pattern_matches_any(g, c->tol_patterns[i].pattern)) {
            st = ck_fail(err, CK_ERR_INPUT,
                         "%s: tolerance.tensors: pattern \"%s\" matches no tensor of this case "
                         "(names are loss, <layer>.weight, grad:<layer>.weight, ...)",
                         path, c->tol_patterns[i].pattern);
            goto cleanup;
        }
    }
cleanup:
    if (st != CK_OK)
        ck_graph_free(g);
    return st;
}

void ck_graph_free(ck_graph *g)
{
    if (!g)
        return;
    free(g->nodes);
    memset(g, 0, sizeof *g);
}
