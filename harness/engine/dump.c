/* Tensor dumps and their manifest (see dump.h). */
#include "harness/engine/dump.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "harness/io/files.h"
#include "harness/io/json_build.h"
#include "harness/io/safetensors.h"

ck_status ck_dump_tensors(const char *path, int n, const ck_named_tensor *t, ck_error *err)
{
    return ck_safetensors_write(path, n, t, err);
}

ck_status ck_manifest_init(ck_manifest *m, const char *case_name, ck_error *err)
{
    char num[32];
    memset(m, 0, sizeof *m);
    cJSON *root = cJSON_CreateObject();
    snprintf(num, sizeof num, "%d", CK_MANIFEST_SCHEMA_VERSION);
    cJSON *files = NULL;
    if (!root || !cJSON_AddStringToObject(root, "schema", CK_MANIFEST_SCHEMA) ||
        !cJSON_AddRawToObject(root, "schema_version", num) ||
        !(case_name ? cJSON_AddStringToObject(root, "case", case_name)
                    : cJSON_AddNullToObject(root, "case")) ||
        !(files = cJSON_AddArrayToObject(root, "files"))) {
        cJSON_Delete(root);
        return ck_fail(err, CK_ERR_NOMEM, "out of memory building the dump manifest");
    }
    m->root = root;
    m->files = files;
    return CK_OK;
}

ck_status ck_manifest_add(ck_manifest *m, const char *file, const char *run, int step,
                          const char *kind, int n, const ck_named_tensor *t, ck_error *err)
{
    char num[32];
    cJSON *e = cJSON_CreateObject(), *list = NULL;
    bool ok = e && m->files;
    ok = ok && cJSON_AddStringToObject(e, "file", file);
    ok = ok && cJSON_AddStringToObject(e, "run", run);
    snprintf(num, sizeof num, "%d", step);
    ok =
        ok && (step >= 0 ? cJSON_AddRawToObject(e, "step", num) : cJSON_AddNullToObject(e, "step"));
    ok = ok && cJSON_AddStringToObject(e, "kind", kind);
    ok = ok && (list = cJSON_AddArrayToObject(e, "tensors"));
    for (int i = 0; ok && i < n; i++) {
        cJSON *te = cJSON_CreateObject(), *shape = NULL;
        ok = te && cJSON_AddItemToArray(list, te);
        if (!ok) {
            cJSON_Delete(te);
            break;
        }
        ok = cJSON_AddStringToObject(te, "name", t[i].name) &&
             cJSON_AddStringToObject(te, "dtype", ck_file_dtype_name(t[i].dtype)) &&
             (shape = cJSON_AddArrayToObject(te, "shape"));
        for (int d = 0; ok && d < t[i].shape.ndim && d < CK_MAX_DIMS; d++) {
            snprintf(num, sizeof num, "%" PRId64, t[i].shape.dim[d]);
            cJSON *v = cJSON_CreateRaw(num);
            ok = v && cJSON_AddItemToArray(shape, v);
            if (!ok)
                cJSON_Delete(v);
        }
    }
    if (ok && cJSON_AddItemToArray(m->files, e))
        return CK_OK;
    cJSON_Delete(e);
    return ck_fail(err, CK_ERR_NOMEM, "out of memory building the dump manifest");
}

ck_status ck_manifest_write(const ck_manifest *m, const char *path, ck_error *err)
{
    return ck_json_write_file(m->root, path, "dump manifest", err);
}

void ck_manifest_free(ck_manifest *m)
{
    cJSON_Delete(m->root);
    m->root = m->files = NULL;
}

/* ---------------------------------------------------------------------------------------
 * What a run writes (run --dump)
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
ck_status ck_dump_step(const ck_dump_spec *d, const ck_record *rec, int from, int step,
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
ck_status ck_dump_init(const ck_dump_spec *d, ck_model *m, ck_error *err)
{
    ck_record tmp;
    memset(&tmp, 0, sizeof tmp);
    ck_status st = CK_OK;
    for (int i = 0; i < m->g->n && st == CK_OK; i++) {
        for (int p = 0; p < m->g->nodes[i].n_params && st == CK_OK; p++)
            st = ck_record_tensor(&tmp, m->b, &m->layers[i].param[p], CK_KIND_PARAM, -1, err);
        for (int k = 0; k < m->g->nodes[i].n_buffers && st == CK_OK; k++)
            st = ck_record_tensor(&tmp, m->b, &m->layers[i].buffer[k], CK_KIND_BUFFER, -1, err);
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

/* The random draws of a layer's original forward, on the host: dropout and attention masks
 * as the keep scale (0 or 1 / (1 - rate)), noise as the fp32 N(0, 1) draws. */
static ck_status record_random(ck_act_dumper *a, const ck_exec_event_info *ev, ck_error *err)
{
    const ck_node *nd = &a->g->nodes[ev->layer];
    const int64_t n = nd->draw_elems;
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory dumping the draws of %s",
                       nd->spec->name);
    const ck_rng_stream *rng = &ev->args->rng;
    const uint32_t thr = ck_dropout_threshold(nd->op.rate);
    const float keep = (float)(1.0 / (1.0 - nd->op.rate));
    for (int64_t i = 0; i < n; i++)
        v[i] = nd->draw_uniform ? (ck_rng_u32(rng, (uint64_t)i) >= thr ? keep : 0.0f)
                                : ck_rng_normal_f32(rng, (uint64_t)i);
    ck_shape shape = nd->out_shape;
    if (nd->op.kind == CK_OP_ATTENTION) {
        /* (N, heads, Lq, Lk) */
        const int64_t Lq = nd->out_shape.dim[1];
        shape.ndim = 4;
        shape.dim[0] = nd->out_shape.dim[0];
        shape.dim[1] = nd->op.heads;
        shape.dim[2] = Lq;
        shape.dim[3] = n / (shape.dim[0] * nd->op.heads * Lq);
    }
    char name[160];
    snprintf(name, sizeof name, "%s.%s", nd->spec->name, nd->draw_uniform ? "mask" : "noise");
    ck_status st = ck_record_add(&a->random, name, CK_KIND_PARAM, ev->step, CK_F32, &shape, v,
                                 NULL, NULL, err);
    free(v);
    return st;
}

ck_status ck_act_observe(void *user, const ck_exec_event_info *ev, ck_error *err)
{
    ck_act_dumper *a = user;
    ck_status st = CK_OK;
    const ck_node *nd = &a->g->nodes[ev->layer];
    if (ev->ev == CK_EVENT_FORWARD && !ev->recompute) {
        if (a->activations &&
            (st = ck_record_add(&a->acts, nd->spec->name, CK_KIND_PARAM, ev->step,
                                ev->tensor->dtype, &ev->tensor->shape, NULL, a->b, ev->tensor,
                                err)) != CK_OK)
            return st;
        if (nd->draw_elems > 0 && ev->args && (st = record_random(a, ev, err)) != CK_OK)
            return st;
    }
    if (ev->ev == CK_EVENT_BACKWARD && a->activation_grads && ev->tensor &&
        (st = ck_record_add(&a->grads, nd->spec->name, CK_KIND_GRAD, ev->step, ev->tensor->dtype,
                            &ev->tensor->shape, NULL, a->b, ev->tensor, err)) != CK_OK)
        return st;
    return a->inner ? a->inner(a->inner_user, ev, err) : CK_OK;
}

static ck_status dump_record(const ck_dump_spec *d, ck_record *r, int step, const char *file,
                             const char *kind, ck_error *err)
{
    ck_named_tensor *t = calloc((size_t)r->n + 1, sizeof *t);
    if (!t)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory dumping %s", file);
    for (int k = 0; k < r->n; k++)
        t[k] = (ck_named_tensor){.name = r->e[k].name,
                                 .dtype = ck_file_dtype_from_ck(r->e[k].dtype),
                                 .shape = r->e[k].shape, .data = r->e[k].data};
    char sub[32];
    snprintf(sub, sizeof sub, "step_%04d", step);
    ck_status st = dump_file(d, sub, step, file, kind, r->n, t, err);
    free(t);
    ck_record_free(r);
    return st;
}

ck_status ck_dump_activations(const ck_dump_spec *d, ck_act_dumper *a, int step, ck_error *err)
{
    ck_status st = dump_record(d, &a->acts, step, "activations", "activation", err);
    if (st == CK_OK)
        st = dump_record(d, &a->grads, step, "activation_grads", "activation_grad", err);
    if (st == CK_OK)
        st = dump_record(d, &a->random, step, "random", "random", err);
    return st;
}

ck_status ck_dump_data(const ck_dump_spec *d, ck_backend *b, const ck_tensor *input,
                       const ck_tensor *target, int step, ck_error *err)
{
    ck_record r;
    memset(&r, 0, sizeof r);
    ck_status st = ck_record_add(&r, "input", CK_KIND_PARAM, step, input->dtype, &input->shape,
                                 NULL, b, input, err);
    if (st == CK_OK && target && target->data)
        st = ck_record_add(&r, "target", CK_KIND_PARAM, step, target->dtype, &target->shape,
                           NULL, b, target, err);
    if (st == CK_OK)
        return dump_record(d, &r, step, "data", "data", err);
    ck_record_free(&r);
    return st;
}

ck_status ck_dump_optimizer(const ck_dump_spec *d, ck_model *m, const ck_optimizer *opt,
                            int step, ck_error *err)
{
    const bool uses0 = opt->kind == CK_OPT_MOMENTUM || opt->kind == CK_OPT_ADAM ||
                       opt->kind == CK_OPT_ADAMW;
    const bool uses1 = opt->kind == CK_OPT_ADAM || opt->kind == CK_OPT_ADAMW;
    ck_record r;
    memset(&r, 0, sizeof r);
    ck_status st = CK_OK;
    for (int i = 0; i < m->g->n && st == CK_OK; i++) {
        const ck_node *nd = &m->g->nodes[i];
        for (int p = 0; p < nd->n_params && st == CK_OK; p++) {
            char name[192];
            const ck_tensor *s0 = &m->layers[i].state0[p], *s1 = &m->layers[i].state1[p];
            snprintf(name, sizeof name, "%s.%s.state0", nd->spec->name, nd->params[p].suffix);
            if (uses0 && s0->data)
                st = ck_record_add(&r, name, CK_KIND_PARAM, step, s0->dtype, &s0->shape, NULL,
                                   m->b, s0, err);
            snprintf(name, sizeof name, "%s.%s.state1", nd->spec->name, nd->params[p].suffix);
            if (st == CK_OK && uses1 && s1->data)
                st = ck_record_add(&r, name, CK_KIND_PARAM, step, s1->dtype, &s1->shape, NULL,
                                   m->b, s1, err);
        }
    }
    if (st == CK_OK)
        return dump_record(d, &r, step, "optimizer", "optimizer_state", err);
    ck_record_free(&r);
    return st;
}

/* ---- the manifest's config ---- */

static cJSON *int_array(const int *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

ck_status ck_manifest_describe(ck_manifest *m, const ck_graph *g, const ck_plan *plan,
                               ck_dtype dtype, ck_error *err)
{
    const ck_case *c = g->cs;
    cJSON *cfg = cJSON_CreateObject();
    if (!cfg)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory describing the dump");
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, c->seed);
    cJSON_AddRawToObject(cfg, "seed", seed);
    cJSON_AddStringToObject(cfg, "dtype", ck_dtype_name(dtype));
    cJSON_AddNumberToObject(cfg, "steps", c->steps);
    cJSON *pol = cJSON_AddObjectToObject(cfg, "policies");
    cJSON_AddStringToObject(pol, "rng", ck_rng_policy_name(c->rng));
    cJSON_AddStringToObject(pol, "batchnorm_recompute", ck_bn_policy_name(c->bn));
    cJSON_AddStringToObject(pol, "autocast_recompute", ck_autocast_name(c->autocast));
    cJSON *opt = cJSON_AddObjectToObject(cfg, "optimizer");
    cJSON_AddStringToObject(opt, "kind", ck_optimizer_kind_name(c->optimizer.kind));
    cJSON_AddNumberToObject(opt, "lr", c->optimizer.lr);
    cJSON_AddNumberToObject(opt, "momentum", c->optimizer.momentum);
    cJSON_AddNumberToObject(opt, "beta1", c->optimizer.beta1);
    cJSON_AddNumberToObject(opt, "beta2", c->optimizer.beta2);
    cJSON_AddNumberToObject(opt, "eps", c->optimizer.eps);
    cJSON_AddNumberToObject(opt, "weight_decay", c->optimizer.weight_decay);
    cJSON_AddStringToObject(opt, "loss_scale", ck_loss_scale_name(c->loss_scale));
    cJSON_AddNumberToObject(opt, "loss_scale_value", c->loss_scale_value);
    cJSON *loss = cJSON_AddObjectToObject(cfg, "loss");
    cJSON_AddStringToObject(loss, "op", ck_loss_kind_name(c->loss));
    cJSON_AddNumberToObject(loss, "class_dim", g->loss_spec.class_dim);
    if (g->loss_spec.has_ignore)
        cJSON_AddNumberToObject(loss, "ignore_index", (double)g->loss_spec.ignore_index);
    else
        cJSON_AddNullToObject(loss, "ignore_index");
    if (g->loss_spec.label_smoothing != 0.0) /* written only when set */
        cJSON_AddNumberToObject(loss, "label_smoothing", g->loss_spec.label_smoothing);
    cJSON *in = cJSON_AddObjectToObject(cfg, "input");
    cJSON_AddStringToObject(in, "dist", c->input_dist == CK_DIST_TOKENS   ? "tokens"
                                        : c->input_dist == CK_DIST_NORMAL ? "normal"
                                                                          : "uniform");
    if (c->input_dist == CK_DIST_TOKENS)
        cJSON_AddNumberToObject(in, "vocab", (double)c->input_vocab);
    cJSON *segs = cJSON_AddArrayToObject(cfg, "segments");
    for (int s2 = 0; plan && s2 < plan->n_segments; s2++) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(g->nodes[plan->segments[s2].first].spec->name));
        cJSON_AddItemToArray(pair, cJSON_CreateString(g->nodes[plan->segments[s2].last].spec->name));
        cJSON_AddItemToArray(segs, pair);
    }
    cJSON *layers = cJSON_AddArrayToObject(cfg, "layers");
    for (int i = 0; i < g->n; i++) {
        const ck_node *nd = &g->nodes[i];
        cJSON *l = cJSON_CreateObject();
        cJSON_AddStringToObject(l, "name", nd->spec->name);
        cJSON_AddStringToObject(l, "op", nd->spec->op_name);
        if (nd->op.nsp > 0) {
            cJSON_AddItemToObject(l, "pad_lo", int_array(nd->op.pad_lo, nd->op.nsp));
            cJSON_AddItemToObject(l, "pad_hi", int_array(nd->op.pad_hi, nd->op.nsp));
        }
        if (nd->op.kind == CK_OP_SOFTMAX || nd->op.kind == CK_OP_LOG_SOFTMAX)
            cJSON_AddNumberToObject(l, "dim", nd->op.dim);
        if (nd->op.kind == CK_OP_PERMUTE)
            cJSON_AddItemToObject(l, "dims", int_array(nd->op.perm, nd->op.n_perm));
        /* a parameter this layer uses but does not own: {"weight": "tok.weight"} */
        cJSON *sh = nd->n_shares ? cJSON_AddObjectToObject(l, "shares") : NULL;
        for (int k = 0; sh && k < nd->n_shares; k++) {
            char owner[160];
            const ck_node *own = &g->nodes[nd->shares[k].layer];
            snprintf(owner, sizeof owner, "%s.%s", own->spec->name,
                     own->params[nd->shares[k].slot].suffix);
            cJSON_AddStringToObject(sh, nd->shares[k].suffix, owner);
        }
        cJSON_AddItemToArray(layers, l);
    }
    cJSON_AddItemToObject((cJSON *)m->root, "config", cfg);
    return CK_OK;
}

ck_status ck_dump_case_file(const char *dir, const char *case_path, ck_error *err)
{
    char *text = NULL, path[4096];
    size_t len = 0;
    ck_status st = ck_read_file(case_path, (size_t)64 << 20, &text, &len, err);
    if (st != CK_OK)
        return st;
    snprintf(path, sizeof path, "%s/case.json", dir);
    ck_atomic_file af;
    if ((st = ck_atomic_open(&af, path, err)) == CK_OK) {
        ck_atomic_write(&af, text, len); /* the bytes as they are */
        st = ck_atomic_commit(&af, err);
    }
    free(text);
    return st;
}
