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

ck_status ck_act_observe(void *user, const ck_exec_event_info *ev, ck_error *err)
{
    ck_act_dumper *a = user;
    if (ev->ev == CK_EVENT_FORWARD && !ev->recompute) {
        ck_status st = ck_record_add(&a->acts, a->g->nodes[ev->layer].spec->name, CK_KIND_PARAM,
                                  ev->step, ev->tensor->dtype, &ev->tensor->shape, NULL, a->b,
                                  ev->tensor, err);
        if (st != CK_OK)
            return st;
    }
    return a->inner ? a->inner(a->inner_user, ev, err) : CK_OK;
}

ck_status ck_dump_activations(const ck_dump_spec *d, ck_act_dumper *a, int step, ck_error *err)
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
