/*
 * Run records: host copies of every tensor a run compares, in comparison order
 * (records.h).
 */
#include "harness/engine/records.h"

#include <stdlib.h>
#include <string.h>

const char *ck_tensor_kind_name(ck_tensor_kind k)
{
    switch (k) {
    case CK_KIND_LOSS: return "loss";
    case CK_KIND_GRAD: return "grad";
    case CK_KIND_PARAM: return "param";
    case CK_KIND_BUFFER: return "buffer";
    }
    return "?";
}


ck_status ck_record_add(ck_record *rec, const char *name, ck_tensor_kind kind, int step,
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
    /* a dropped step's buffer in this slot is reused when it is big enough */
    void *kept = rec->n < rec->kept ? e->data : NULL;
    size_t kept_cap = kept ? e->data_cap : 0;
    memset(e, 0, sizeof *e);
    size_t bytes = (size_t)ck_shape_numel(shape) * ck_dtype_size(dt);
    size_t need = bytes ? bytes : 1;
    if (kept && kept_cap < need) {
        free(kept);
        kept = NULL;
    }
    e->name = strdup(name);
    e->data = kept ? kept : malloc(need);
    e->data_cap = kept ? kept_cap : need;
    if (!e->name || !e->data) {
        free(e->name);
        free(e->data);
        e->name = NULL;
        e->data = NULL;
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

ck_status ck_record_tensor(ck_record *rec, ck_backend *b, const ck_tensor *t,
                               ck_tensor_kind kind, int step, ck_error *err)
{
    return ck_record_add(rec, t->name, kind, step, t->dtype, &t->shape, NULL, b, t, err);
}

/* After backward: loss, buffers (as the forward left them), grads in backward order. */
ck_status ck_record_after_backward(ck_record *rec, ck_model *m, int step, double loss,
                                       ck_error *err)
{
    ck_shape scalar;
    memset(&scalar, 0, sizeof scalar);
    ck_status st = ck_record_add(rec, "loss", CK_KIND_LOSS, step, CK_F64, &scalar, &loss, NULL,
                              NULL, err);
    const ck_graph *g = m->g;
    for (int i = 0; i < g->n && st == CK_OK; i++)
        for (int k = 0; k < g->nodes[i].n_buffers && st == CK_OK; k++)
            st = ck_record_tensor(rec, m->b, &m->layers[i].buffer[k], CK_KIND_BUFFER, step, err);
    for (int i = g->n - 1; i >= 0 && st == CK_OK; i--)
        for (int p = 0; p < g->nodes[i].n_params && st == CK_OK; p++)
            st = ck_record_tensor(rec, m->b, &m->layers[i].grad[p], CK_KIND_GRAD, step, err);
    return st;
}

ck_status ck_record_params(ck_record *rec, ck_model *m, int step, ck_error *err)
{
    ck_status st = CK_OK;
    for (int i = 0; i < m->g->n && st == CK_OK; i++)
        for (int p = 0; p < m->g->nodes[i].n_params && st == CK_OK; p++)
            st = ck_record_tensor(rec, m->b, &m->layers[i].param[p], CK_KIND_PARAM, step, err);
    return st;
}

void ck_record_drop_entries(ck_record *rec)
{
    for (int i = 0; i < rec->n; i++) {
        free(rec->e[i].name);
        rec->e[i].name = NULL;
    }
    if (rec->n > rec->kept)
        rec->kept = rec->n;
    rec->n = 0; /* the entry array and its buffers are reused by the next step */
}

void ck_record_free(ck_record *rec)
{
    for (int i = 0; i < rec->n; i++)
        free(rec->e[i].name);
    for (int i = 0; i < (rec->n > rec->kept ? rec->n : rec->kept); i++)
        free(rec->e[i].data);
    free(rec->e);
    free(rec->losses);
    free(rec->scales);
    free(rec->step_wall_s);
    free(rec->train_wall_s);
    memset(rec, 0, sizeof *rec);
}
