/* Parameter store: allocation, seeded initialisation, optimizer updates (see model.h). */
#include "harness/model/params.h"

#include "harness/core/half.h"
#include "harness/io/tensorload.h"
#include "harness/io/tensorset.h"
#include "harness/model/op_def.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ck_convert_from_f64(ck_dtype dt, void *dst, const double *src, int64_t n)
{
    switch (dt) {
    case CK_F32:
        for (int64_t i = 0; i < n; i++)
            ((float *)dst)[i] = (float)src[i];
        break;
    case CK_F64:
        memcpy(dst, src, (size_t)n * sizeof(double));
        break;
    case CK_F16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = ck_f64_to_f16(src[i]);
        break;
    case CK_BF16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = ck_f64_to_bf16(src[i]);
        break;
    case CK_I32:
        for (int64_t i = 0; i < n; i++)
            ((int32_t *)dst)[i] = (int32_t)src[i];
        break;
    case CK_I64:
        for (int64_t i = 0; i < n; i++)
            ((int64_t *)dst)[i] = (int64_t)src[i];
        break;
    default:
        break;
    }
}

ck_status ck_upload_f64(ck_backend *b, ck_tensor *t, const double *src, ck_error *err)
{
    int64_t n = ck_shape_numel(&t->shape);
    void *host = malloc((size_t)n * ck_dtype_size(t->dtype) + 1);
    if (!host)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory uploading %s", t->name ? t->name : "?");
    ck_convert_from_f64(t->dtype, host, src, n);
    ck_status st = b->upload(b, t, host, err);
    free(host);
    return st;
}

static char *join_name(const char *layer, const char *suffix)
{
    size_t n = strlen(layer) + strlen(suffix) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s.%s", layer, suffix);
    return s;
}

static ck_status alloc_state_tensor(ck_model *m, ck_tensor *t, const char *layer,
                                    const char *suffix, ck_dtype dt, const ck_shape *shape,
                                    ck_error *err)
{
    t->name = join_name(layer, suffix);
    t->dtype = dt;
    t->shape = *shape;
    if (!t->name)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory naming %s.%s", layer, suffix);
    int64_t n;
    if (!ck_shape_numel_checked(shape, ck_dtype_size(dt), &n))
        return ck_fail(err, CK_ERR_INPUT, "%s: shape too large", t->name);
    ck_status st = m->b->alloc(m->b, (size_t)n * ck_dtype_size(dt), &t->data, err);
    if (st != CK_OK)
        ck_error_prefix(err, "allocating %s", t->name);
    return st;
}

ck_status ck_model_create(ck_model *m, ck_backend *b, const ck_graph *g, ck_dtype dtype,
                          ck_error *err)
{
    memset(m, 0, sizeof *m);
    m->b = b;
    m->g = g;
    m->dtype = dtype;
    m->master_dtype = dtype == CK_F64 ? CK_F64 : CK_F32;
    bool low = dtype == CK_F16 || dtype == CK_BF16;
    m->layers = calloc((size_t)g->n, sizeof *m->layers);
    if (!m->layers)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory creating the model");
    ck_status st = CK_OK;
    for (int i = 0; i < g->n && st == CK_OK; i++) {
        const ck_node *nd = &g->nodes[i];
        const char *ln = nd->spec->name;
        ck_layer_state *ls = &m->layers[i];
        for (int p = 0; p < nd->n_params && st == CK_OK; p++) {
            const ck_param_spec *ps = &nd->params[p];
            char gsfx[64], s0[64], s1[64];
            snprintf(gsfx, sizeof gsfx, "%s", ps->suffix);
            snprintf(s0, sizeof s0, "%s.opt_state0", ps->suffix);
            snprintf(s1, sizeof s1, "%s.opt_state1", ps->suffix);
            ck_dtype md = m->master_dtype;
            st = alloc_state_tensor(m, &ls->param[p], ln, ps->suffix, md, &ps->shape, err);
            if (st == CK_OK)
                st = alloc_state_tensor(m, &ls->grad[p], ln, gsfx, md, &ps->shape, err);
            if (st == CK_OK)
                st = alloc_state_tensor(m, &ls->state0[p], ln, s0, md, &ps->shape, err);
            if (st == CK_OK)
                st = alloc_state_tensor(m, &ls->state1[p], ln, s1, md, &ps->shape, err);
            /* precision.md: linear/conv weights run in the low dtype, norms stay fp32 */
            bool casts = low && ck_op_casts_params(nd->op.kind);
            if (st == CK_OK && casts)
                st = alloc_state_tensor(m, &ls->low_param[p], ln, ps->suffix, dtype, &ps->shape,
                                        err);
            if (st == CK_OK && casts)
                st = alloc_state_tensor(m, &ls->low_grad[p], ln, gsfx, dtype, &ps->shape, err);
        }
        for (int k = 0; k < nd->n_buffers && st == CK_OK; k++) {
            const ck_param_spec *bs = &nd->buffers[k];
            ck_dtype dt = bs->dtype == CK_I64 ? CK_I64 : m->master_dtype;
            st = alloc_state_tensor(m, &ls->buffer[k], ln, bs->suffix, dt, &bs->shape, err);
        }
        /* a shared parameter: this use's own low-dtype copy and gradient, as its own
           parameters have (the owner's may not cast, or may cast to the same values) */
        for (int k = 0; k < nd->n_shares && st == CK_OK; k++) {
            const ck_param_share *sh = &nd->shares[k];
            const ck_shape *shape = &g->nodes[sh->layer].params[sh->slot].shape;
            if (!(low && ck_op_casts_params(nd->op.kind)))
                continue;
            st = alloc_state_tensor(m, &ls->share_low_param[k], ln, sh->suffix, dtype, shape, err);
            if (st == CK_OK)
                st = alloc_state_tensor(m, &ls->share_low_grad[k], ln, sh->suffix, dtype, shape,
                                        err);
        }
    }
    if (st != CK_OK)
        ck_model_free(m);
    return st;
}

static ck_status fill_spec(ck_model *m, ck_tensor *t, const ck_param_spec *ps, uint64_t seed,
                           uint32_t layer, uint32_t slot, ck_error *err)
{
    int64_t n = ck_shape_numel(&t->shape);
    double *v = malloc((size_t)n * sizeof *v + 1);
    if (!v)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory initialising %s", t->name);
    if (ps->init == CK_INIT_UNIFORM) {
        ck_rng_stream s = ck_rng_keyed(seed, layer, CK_PURPOSE_INIT, slot);
        ck_rng_uniform_f64_span(&s, 0, n, v); /* u_i, then a (2 u_i - 1) in place */
        for (int64_t i = 0; i < n; i++)
            v[i] = ps->a * (2.0 * v[i] - 1.0);
    } else if (ps->init == CK_INIT_NORMAL) {
        ck_rng_stream s = ck_rng_keyed(seed, layer, CK_PURPOSE_INIT, slot);
        for (int64_t i = 0; i < n; i++)
            v[i] = ps->a * ck_rng_normal_f64(&s, (uint64_t)i);
    } else {
        for (int64_t i = 0; i < n; i++)
            v[i] = ps->a;
    }
    ck_status st = ck_upload_f64(m->b, t, v, err);
    free(v);
    return st;
}

ck_status ck_model_init(ck_model *m, uint64_t seed, ck_error *err)
{
    ck_status st = CK_OK;
    for (int i = 0; i < m->g->n && st == CK_OK; i++) {
        const ck_node *nd = &m->g->nodes[i];
        ck_layer_state *ls = &m->layers[i];
        for (int p = 0; p < nd->n_params && st == CK_OK; p++) {
            st = fill_spec(m, &ls->param[p], &nd->params[p], seed, (uint32_t)i,
                           (uint32_t)(p + nd->init_slot_skip[p]), err);
            if (st == CK_OK)
                st = m->b->zero(m->b, &ls->state0[p], err);
            if (st == CK_OK)
                st = m->b->zero(m->b, &ls->state1[p], err);
        }
        for (int k = 0; k < nd->n_buffers && st == CK_OK; k++)
            st = fill_spec(m, &ls->buffer[k], &nd->buffers[k], seed, (uint32_t)i, 8u + (uint32_t)k,
                           err);
    }
    if (st == CK_OK && m->g->cs->init_from)
        st = ck_model_load(m, m->g->cs->init_from, err);
    return st;
}

/* Element i of a file tensor as a double (data may be unaligned). */
static bool file_value(const ck_named_tensor *t, int64_t i, double *v)
{
    const unsigned char *p = (const unsigned char *)t->data;
    switch (t->dtype) {
    case CK_FT_F64: { double x; memcpy(&x, p + 8 * i, 8); *v = x; return true; }
    case CK_FT_F32: { float x; memcpy(&x, p + 4 * i, 4); *v = x; return true; }
    case CK_FT_F16: { uint16_t x; memcpy(&x, p + 2 * i, 2); *v = ck_f16_to_f32(x); return true; }
    case CK_FT_BF16: { uint16_t x; memcpy(&x, p + 2 * i, 2); *v = ck_bf16_to_f32(x); return true; }
    case CK_FT_I64: { int64_t x; memcpy(&x, p + 8 * i, 8); *v = (double)x; return true; }
    case CK_FT_I32: { int32_t x; memcpy(&x, p + 4 * i, 4); *v = x; return true; }
    default: return false;
    }
}

/* Checks (and, with m, loads) one parameter or buffer t from set. */
static ck_status load_one(ck_model *m, const ck_tensorset *set, const char *path, ck_tensor *t,
                          bool *used, ck_error *err)
{
    int k = ck_tensorset_index(set, t->name);
    char want[128], got[128];
    if (k < 0)
        return ck_fail(err, CK_ERR_INPUT, "%s: no tensor `%s` (the case's %s, shape %s)", path,
                       t->name, ck_dtype_name(t->dtype), ck_shape_str(&t->shape, want, sizeof want));
    const ck_named_tensor *ft = &set->t[k];
    used[k] = true;
    ck_shape fs = ft->shape;
    /* a 0-d and a 1-element tensor are the same scalar (num_batches_tracked) */
    bool scalar_ok = ck_shape_numel(&t->shape) == 1 && fs.ndim <= 1 &&
                     (fs.ndim == 0 || fs.dim[0] == 1);
    if (!scalar_ok && !ck_shape_equal(&fs, &t->shape))
        return ck_fail(err, CK_ERR_INPUT, "%s: `%s` has shape %s, the case needs %s", set->file[k],
                       t->name, ck_shape_str(&fs, got, sizeof got),
                       ck_shape_str(&t->shape, want, sizeof want));
    bool want_float = ck_dtype_is_float(t->dtype);
    if (want_float != ck_file_dtype_is_float(ft->dtype) ||
        (!want_float && ft->dtype != CK_FT_I64 && ft->dtype != CK_FT_I32))
        return ck_fail(err, CK_ERR_INPUT, "%s: `%s` is %s, the case needs %s", set->file[k],
                       t->name, ck_file_dtype_name(ft->dtype),
                       want_float ? "a float dtype (F64, F32, F16, BF16)" : "an integer (I64, I32)");
    if (!m)
        return CK_OK;
    int64_t n = ck_shape_numel(&t->shape);
    double *v = malloc((size_t)n * sizeof *v + 1);
    if (!v)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory loading %s", t->name);
    for (int64_t i = 0; i < n; i++)
        file_value(ft, i, &v[i]);
    ck_status st = ck_upload_f64(m->b, t, v, err);
    free(v);
    return st;
}

/* Loads (m != NULL) or only checks the file against g's parameters and buffers. */
static ck_status check_set(ck_model *m, const ck_graph *g, const ck_tensorset *sp,
                           const char *path, ck_error *err);

static ck_status load_or_check(ck_model *m, const ck_graph *g, const char *path, ck_error *err)
{
    ck_tensorset set;
    ck_status st = ck_tensorset_load(path, &set, err);
    if (st != CK_OK)
        return st;
    st = check_set(m, g, &set, path, err);
    ck_tensorset_free(&set);
    return st;
}

ck_status ck_graph_check_weight_set(const ck_graph *g, const ck_tensorset *set, const char *path,
                                    ck_error *err)
{
    return check_set(NULL, g, set, path, err);
}

/* The owner's name ("tok.weight") when name is a parameter a layer shares ("head.weight"),
 * else NULL (static storage). */
static const char *shared_owner(const ck_graph *g, const char *name)
{
    static _Thread_local char owner[160];
    for (int i = 0; i < g->n; i++) {
        const ck_node *nd = &g->nodes[i];
        for (int k = 0; k < nd->n_shares; k++) {
            char mine[160];
            snprintf(mine, sizeof mine, "%s.%s", nd->spec->name, nd->shares[k].suffix);
            if (strcmp(mine, name) != 0)
                continue;
            const ck_node *own = &g->nodes[nd->shares[k].layer];
            snprintf(owner, sizeof owner, "%s.%s", own->spec->name,
                     own->params[nd->shares[k].slot].suffix);
            return owner;
        }
    }
    return NULL;
}

/* Loads (m) or checks (m NULL) every parameter and buffer of g from the set. */
static ck_status check_set(ck_model *m, const ck_graph *g, const ck_tensorset *sp,
                           const char *path, ck_error *err)
{
    ck_tensorset set = *sp; /* read only */
    ck_status st = CK_OK;
    bool *used = calloc((size_t)set.n + 1, sizeof *used);
    if (!used)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory loading %s", path);
    for (int i = 0; i < g->n && st == CK_OK; i++) {
        const ck_node *nd = &g->nodes[i];
        for (int p = 0; p < nd->n_params + nd->n_buffers && st == CK_OK; p++) {
            bool is_param = p < nd->n_params;
            const ck_param_spec *ps = is_param ? &nd->params[p] : &nd->buffers[p - nd->n_params];
            if (m) {
                ck_layer_state *ls = &m->layers[i];
                st = load_one(m, &set, path, is_param ? &ls->param[p] : &ls->buffer[p - nd->n_params],
                              used, err);
                continue;
            }
            char name[160];
            snprintf(name, sizeof name, "%s.%s", nd->spec->name, ps->suffix);
            ck_tensor t = {.name = name, .dtype = ps->dtype == CK_I64 ? CK_I64 : CK_F32,
                           .shape = ps->shape};
            st = load_one(NULL, &set, path, &t, used, err);
        }
    }
    for (int k = 0; k < set.n && st == CK_OK; k++) {
        const char *owner = used[k] ? NULL : shared_owner(g, set.t[k].name);
        if (owner)
            st = ck_fail(err, CK_ERR_INPUT,
                         "%s: `%s` is shared: that layer uses %s (its \"share\"), which the "
                         "file holds once under that name",
                         set.file[k], set.t[k].name, owner);
        else if (!used[k])
            st = ck_fail(err, CK_ERR_INPUT,
                         "%s: `%s` matches no parameter or buffer of case %s (names are "
                         "<layer>.<weight|bias|running_mean|running_var|num_batches_tracked>)",
                         set.file[k], set.t[k].name, g->cs->name);
    }
    free(used);
    return st;
}

ck_status ck_model_load(ck_model *m, const char *path, ck_error *err)
{
    return load_or_check(m, m->g, path, err);
}

ck_status ck_graph_check_weights(const ck_graph *g, const char *path, ck_error *err)
{
    return load_or_check(NULL, g, path, err);
}

/* Calls fn on every gradient tensor of layer i's state that has memory (grad, low_grad,
 * share_low_grad) with its zero-pending flag; stops at the first failure. */
typedef ck_status (*grad_fn)(ck_model *m, ck_tensor *t, bool *pending, ck_error *err);
static ck_status each_grad(ck_model *m, int i, grad_fn fn, ck_error *err)
{
    ck_layer_state *ls = &m->layers[i];
    for (int p = 0; p < m->g->nodes[i].n_params; p++) {
        CK_TRY(fn(m, &ls->grad[p], &ls->grad_pending[p], err));
        if (ls->low_grad[p].data)
            CK_TRY(fn(m, &ls->low_grad[p], &ls->low_grad_pending[p], err));
    }
    for (int k = 0; k < m->g->nodes[i].n_shares; k++)
        if (ls->share_low_grad[k].data)
            CK_TRY(fn(m, &ls->share_low_grad[k], &ls->share_low_grad_pending[k], err));
    return CK_OK;
}

static ck_status zero_now(ck_model *m, ck_tensor *t, bool *pending, ck_error *err)
{
    *pending = false;
    return m->b->zero(m->b, t, err);
}

static ck_status mark_pending(ck_model *m, ck_tensor *t, bool *pending, ck_error *err)
{
    (void)m, (void)t, (void)err;
    *pending = true;
    return CK_OK;
}

/* settles a pending gradient now (zeroes it) */
static ck_status settle(ck_model *m, ck_tensor *t, bool *pending, ck_error *err)
{
    return *pending ? zero_now(m, t, pending, err) : CK_OK;
}

ck_status ck_model_zero_grads(ck_model *m, ck_error *err)
{
    for (int i = 0; i < m->g->n; i++)
        CK_TRY(each_grad(m, i, zero_now, err));
    return CK_OK;
}

void ck_model_zero_grads_lazy(ck_model *m)
{
    for (int i = 0; i < m->g->n; i++)
        each_grad(m, i, mark_pending, NULL);
}

ck_status ck_model_settle_grads(ck_model *m, ck_error *err)
{
    for (int i = 0; i < m->g->n; i++)
        CK_TRY(each_grad(m, i, settle, err));
    return CK_OK;
}

static ck_tensor *share_master(ck_model *m, int i, int k, bool grad);

/* The zero-pending flag of the gradient tensor t bound for layer i (ck_model_bind: its own
 * tensors, or a shared parameter's owner's), or NULL when t is not one of them. */
static bool *pending_of(ck_model *m, int i, const ck_tensor *t)
{
    ck_layer_state *ls = &m->layers[i];
    const ck_node *nd = &m->g->nodes[i];
    for (int p = 0; p < nd->n_params; p++) {
        if (t == &ls->grad[p])
            return &ls->grad_pending[p];
        if (t == &ls->low_grad[p])
            return &ls->low_grad_pending[p];
    }
    for (int k = 0; k < nd->n_shares; k++) {
        if (t == &ls->share_low_grad[k])
            return &ls->share_low_grad_pending[k];
        const ck_param_share *sh = &nd->shares[k];
        if (t == share_master(m, i, k, true))
            return &m->layers[sh->layer].grad_pending[sh->slot];
    }
    return NULL;
}

ck_status ck_model_claim_grads(ck_model *m, int i, ck_op_grads *g, bool fresh, ck_error *err)
{
    ck_tensor *ts[2] = {g->dweight, g->dbias};
    bool *pend[2] = {NULL, NULL};
    bool all_pending = g->dweight || g->dbias;
    for (int q = 0; q < 2; q++) {
        if (!ts[q])
            continue;
        pend[q] = pending_of(m, i, ts[q]);
        all_pending = all_pending && pend[q] && *pend[q];
    }
    g->dparams_fresh = fresh && all_pending;
    for (int q = 0; q < 2; q++) {
        if (!pend[q] || !*pend[q])
            continue;
        if (g->dparams_fresh)
            *pend[q] = false;
        else
            CK_TRY(zero_now(m, ts[q], pend[q], err));
    }
    return CK_OK;
}

/* The owner's master parameter (grad false) or gradient of share k of layer i. */
static ck_tensor *share_master(ck_model *m, int i, int k, bool grad)
{
    const ck_param_share *sh = &m->g->nodes[i].shares[k];
    ck_layer_state *own = &m->layers[sh->layer];
    return grad ? &own->grad[sh->slot] : &own->param[sh->slot];
}

ck_status ck_model_cast_params(ck_model *m, ck_error *err)
{
    for (int i = 0; i < m->g->n; i++)
        for (int p = 0; p < m->g->nodes[i].n_params; p++) {
            ck_layer_state *ls = &m->layers[i];
            if (!ls->low_param[p].data)
                continue;
            ck_status st = m->b->convert(m->b, &ls->low_param[p], &ls->param[p], 1.0, false, err);
            if (st != CK_OK) {
                ck_error_prefix(err, "casting %s to %s", ls->param[p].name,
                                ck_dtype_name(m->dtype));
                return st;
            }
        }
    for (int i = 0; i < m->g->n; i++)
        for (int k = 0; k < m->g->nodes[i].n_shares; k++) {
            ck_tensor *low = &m->layers[i].share_low_param[k];
            if (!low->data)
                continue;
            ck_status st = m->b->convert(m->b, low, share_master(m, i, k, false), 1.0, false, err);
            if (st != CK_OK) {
                ck_error_prefix(err, "casting %s (shared) to %s", low->name,
                                ck_dtype_name(m->dtype));
                return st;
            }
        }
    return CK_OK;
}

/* fp32 -> low -> fp32 in place on the backend, through a low-dtype copy */
static ck_status round_in_place(ck_model *m, ck_tensor *t, ck_dtype low, ck_error *err)
{
    if (t->dtype != CK_F32)
        return CK_OK;
    ck_tensor tmp = {t->name, low, t->shape, NULL};
    ck_status st = m->b->alloc(m->b, ck_tensor_bytes(&tmp), &tmp.data, err);
    if (st == CK_OK)
        st = m->b->convert(m->b, &tmp, t, 1.0, false, err);
    if (st == CK_OK)
        st = m->b->convert(m->b, t, &tmp, 1.0, false, err);
    if (tmp.data)
        m->b->free(m->b, tmp.data);
    if (st != CK_OK)
        ck_error_prefix(err, "rounding %s to %s", t->name, ck_dtype_name(low));
    return st;
}

ck_status ck_model_round_cast_params(ck_model *m, ck_dtype low, ck_error *err)
{
    /* on the backend, through a low-dtype copy: fp32 -> low -> fp32 with the backend's
     * convert (one rounding to nearest even each way, the second exact), so no weight
     * moves through the host. A parameter a linear/conv layer shares is rounded as its
     * owner (rounding twice to the same dtype is rounding once). */
    for (int i = 0; i < m->g->n; i++) {
        const ck_node *nd = &m->g->nodes[i];
        if (nd->op.kind != CK_OP_LINEAR && nd->op.kind != CK_OP_CONV)
            continue;
        for (int p = 0; p < nd->n_params; p++)
            CK_TRY(round_in_place(m, &m->layers[i].param[p], low, err));
        for (int k = 0; k < nd->n_shares; k++)
            CK_TRY(round_in_place(m, share_master(m, i, k, false), low, err));
    }
    return CK_OK;
}

ck_status ck_model_unscale_grads(ck_model *m, double scale, ck_error *err)
{
    double inv = 1.0 / scale;
    for (int i = 0; i < m->g->n; i++)
        for (int p = 0; p < m->g->nodes[i].n_params; p++) {
            ck_layer_state *ls = &m->layers[i];
            ck_status st = CK_OK;
            if (scale != 1.0)
                st = m->b->convert(m->b, &ls->grad[p], &ls->grad[p], inv, false, err);
            if (st == CK_OK && ls->low_grad[p].data)
                st = m->b->convert(m->b, &ls->grad[p], &ls->low_grad[p], inv, true, err);
            if (st != CK_OK) {
                ck_error_prefix(err, "unscaling the gradient of %s", ls->param[p].name);
                return st;
            }
        }
    /* every master gradient is unscaled: add each shared use's, in layer order */
    for (int i = 0; i < m->g->n; i++)
        for (int k = 0; k < m->g->nodes[i].n_shares; k++) {
            ck_tensor *lg = &m->layers[i].share_low_grad[k];
            if (!lg->data)
                continue;
            ck_status st = m->b->convert(m->b, share_master(m, i, k, true), lg, inv, true, err);
            if (st != CK_OK) {
                ck_error_prefix(err, "adding the gradient of %s (shared)", lg->name);
                return st;
            }
        }
    return CK_OK;
}

ck_status ck_model_update(ck_model *m, const ck_optimizer *opt, int64_t step, double grad_scale,
                          ck_error *err)
{
    for (int i = 0; i < m->g->n; i++) {
        ck_layer_state *ls = &m->layers[i];
        for (int p = 0; p < m->g->nodes[i].n_params; p++) {
            ck_status st = m->b->optimizer_step(m->b, opt, step, grad_scale, &ls->param[p],
                                                &ls->grad[p], &ls->state0[p], &ls->state1[p], err);
            if (st != CK_OK) {
                ck_error_prefix(err, "optimizer step for %s", ls->param[p].name);
                return st;
            }
        }
    }
    return CK_OK;
}

static void free_state_tensor(ck_model *m, ck_tensor *t)
{
    if (t->data)
        m->b->free(m->b, t->data);
    free((char *)t->name);
    memset(t, 0, sizeof *t);
}

void ck_model_free(ck_model *m)
{
    if (!m->layers)
        return;
    for (int i = 0; i < m->g->n; i++) {
        ck_layer_state *ls = &m->layers[i];
        for (int p = 0; p < 2; p++) {
            free_state_tensor(m, &ls->share_low_param[p]);
            free_state_tensor(m, &ls->share_low_grad[p]);
            free_state_tensor(m, &ls->low_param[p]);
            free_state_tensor(m, &ls->low_grad[p]);
            free_state_tensor(m, &ls->param[p]);
            free_state_tensor(m, &ls->grad[p]);
            free_state_tensor(m, &ls->state0[p]);
            free_state_tensor(m, &ls->state1[p]);
        }
        for (int k = 0; k < 3; k++)
            free_state_tensor(m, &ls->buffer[k]);
    }
    free(m->layers);
    m->layers = NULL;
}

void ck_model_bind(ck_model *m, int i, bool master, ck_op_io *io, ck_op_grads *g)
{
    const ck_node *nd = &m->g->nodes[i];
    ck_layer_state *ls = &m->layers[i];
    for (int p = 0; p < nd->n_params + nd->n_shares; p++) {
        const int k = p - nd->n_params; /* >= 0: shares[k], the owner's tensor */
        bool low = !master && (k < 0 ? ls->low_param[p].data : ls->share_low_param[k].data);
        ck_tensor *param, *grad;
        if (k < 0) {
            param = low ? &ls->low_param[p] : &ls->param[p];
            grad = low ? &ls->low_grad[p] : &ls->grad[p];
        } else {
            param = low ? &ls->share_low_param[k] : share_master(m, i, k, false);
            grad = low ? &ls->share_low_grad[k] : share_master(m, i, k, true);
        }
        const char *suffix = k < 0 ? nd->params[p].suffix : nd->shares[k].suffix;
        if (strcmp(suffix, "bias") == 0) {
            io->bias = param;
            if (g)
                g->dbias = grad;
        } else {
            io->weight = param;
            if (g)
                g->dweight = grad;
        }
    }
    for (int k = 0; k < nd->n_buffers; k++) {
        const char *sfx = nd->buffers[k].suffix;
        if (strcmp(sfx, "running_mean") == 0)
            io->running_mean = &ls->buffer[k];
        else if (strcmp(sfx, "running_var") == 0)
            io->running_var = &ls->buffer[k];
        else if (strcmp(sfx, "num_batches_tracked") == 0)
            io->num_batches_tracked = &ls->buffer[k];
        else if (strcmp(sfx, "constant") == 0 || strcmp(sfx, "mask") == 0)
            io->constant = &ls->buffer[k];
    }
}
