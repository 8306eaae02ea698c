/*
 * Constants computed in the graph, folded at import: Concat/Unsqueeze/Cast/Identity/Transpose
 * of constants here, shape arithmetic through onnx_fold.h, Shape of an activation from the
 * case's static shapes (onnx_shapes.h); and aliases, a folded constant that is a whole
 * initializer in another form (its weights keep the initializer's name).
 */
#include "harness/model/onnx_import_internal.h"

#include <stdlib.h>
#include <string.h>

#include "harness/model/onnx_fold.h"

/* A constant, folding the nodes that compute it now when they come later in the file (a
 * pattern reads a weight's Unsqueeze, a Shape, before the loop reaches them). *out NULL:
 * not a constant. */
ck_status imp_const_ahead(imp *im, const char *value, int depth, const ck_onnx_tensor **out)
{
    *out = imp_const_of(im, value);
    if (*out || depth > 16 || !value[0])
        return CK_OK;
    for (int i = 0; i < im->m->n_nodes; i++) {
        const ck_onnx_node *p = &im->m->nodes[i];
        if (im->folded[i] || p->n_out < 1 || strcmp(p->out[0], value) != 0)
            continue;
        for (int k = 0; k < p->n_in; k++) {
            const ck_onnx_tensor *c;
            if (p->in[k][0] && !imp_layer_of(im, p->in[k]) &&
                (imp_const_ahead(im, p->in[k], depth + 1, &c) != CK_OK || !c))
                return CK_OK;
        }
        const ck_onnx_node *saved = im->node;
        bool done = false;
        im->node = p;
        ck_status st = imp_fold_more(im, i, &done);
        im->node = saved;
        CK_TRY(st);
        if (done)
            im->folded[i] = true;
        *out = imp_const_of(im, value);
        return CK_OK;
    }
    return CK_OK;
}

/* A float constant whose every element equals want. */
bool imp_const_all(const imp *im, const char *value, double want)
{
    const ck_onnx_tensor *c = imp_const_of(im, value);
    if (!c || !imp_is_float_type(c->data_type) || c->numel < 1)
        return false;
    for (int64_t i = 0; i < c->numel; i++)
        if (imp_elem_f64(c, i) != want)
            return false;
    return true;
}

/* Exporters compute small constants in the graph (Resize's scales as a Concat of two
 * Constants, Unsqueeze/Cast of scalars). A node of these kinds whose inputs are all
 * constants is evaluated here and becomes a constant itself. */
ck_status imp_fold_node(imp *im, int idx, bool *done)
{
    const ck_onnx_node *n = &im->m->nodes[idx];
    const char *op = n->op_type;
    *done = false;
    bool concat = strcmp(op, "Concat") == 0, unsq = strcmp(op, "Unsqueeze") == 0,
         cast = strcmp(op, "Cast") == 0, ident = strcmp(op, "Identity") == 0,
         transp = strcmp(op, "Transpose") == 0;
    if (!(concat || unsq || cast || ident || transp) || n->n_out != 1 || n->n_in < 1)
        return CK_OK;
    if (transp) { /* a weight transposed in the graph (nn.Linear at opset 17): 2-D only */
        const ck_onnx_tensor *c = imp_const_of(im, n->in[0]);
        const ck_onnx_attr *pa = ck_onnx_attr_find(n, "perm");
        if (!c || c->ndim != 2 || (pa && (pa->n_ints != 2 || pa->ints[0] != 1 || pa->ints[1] != 0)))
            return CK_OK;
    }
    const ck_onnx_tensor *in[CK_ONNX_MAX_IO];
    int64_t total = 0;
    for (int k = 0; k < n->n_in; k++) {
        if (!(in[k] = imp_const_of(im, n->in[k])))
            return CK_OK; /* reads an activation: mapped as a layer, if it can be */
        total += in[k]->numel;
    }
    if (unsq || cast || ident || transp) /* input 0's data (Unsqueeze's axes are ignored) */
        total = in[0]->numel;
    int type = in[0]->data_type;
    if (cast) {
        int to = (int)imp_attr_int(n, "to", 0);
        if (to != CK_ONNX_FLOAT && to != CK_ONNX_INT64 && to != CK_ONNX_DOUBLE)
            return CK_OK;
        type = to;
    }
    if (concat)
        for (int k = 0; k < n->n_in; k++)
            if (in[k]->data_type != type || in[k]->ndim > 1)
                return CK_OK; /* only 1-D constants of one type are joined */
    ck_onnx_tensor *g = realloc(im->consts, (size_t)(im->n_consts + 1) * sizeof *g);
    if (!g)
        return imp_oom(im);
    im->consts = g;
    for (int k = 0; k < n->n_in; k++) /* inputs folded earlier moved with the array */
        in[k] = imp_const_of(im, n->in[k]);
    ck_onnx_tensor *t = &g[im->n_consts];
    memset(t, 0, sizeof *t);
    size_t es = ck_onnx_elem_size(type);
    t->name = strdup(n->out[0]);
    t->data_type = type;
    t->numel = total;
    t->nbytes = (size_t)total * es;
    t->data = malloc(t->nbytes ? t->nbytes : 1);
    if (!t->name || !t->data) {
        free(t->name);
        free(t->data);
        return imp_oom(im);
    }
    if (concat) {
        t->ndim = 1;
        t->dims[0] = total;
        size_t off = 0;
        for (int k = 0; k < n->n_in; k++) {
            memcpy((char *)t->data + off, in[k]->data, in[k]->nbytes);
            off += in[k]->nbytes;
        }
    } else if (transp) {
        t->ndim = 2;
        t->dims[0] = in[0]->dims[1];
        t->dims[1] = in[0]->dims[0];
        int64_t r = in[0]->dims[0], c = in[0]->dims[1];
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++)
                memcpy((char *)t->data + es * (size_t)(j * r + i),
                       (const char *)in[0]->data + es * (size_t)(i * c + j), es);
    } else {
        t->ndim = in[0]->ndim;
        memcpy(t->dims, in[0]->dims, sizeof t->dims);
        if (unsq && t->ndim == 0) {
            t->ndim = 1;
            t->dims[0] = 1;
        }
        for (int64_t i = 0; i < total; i++) {
            double v = imp_elem_f64(in[0], i);
            if (type == CK_ONNX_FLOAT) {
                float f = (float)v;
                memcpy((char *)t->data + 4 * i, &f, 4);
            } else if (type == CK_ONNX_DOUBLE) {
                memcpy((char *)t->data + 8 * i, &v, 8);
            } else if (type == CK_ONNX_INT64 && cast) {
                int64_t x = (int64_t)v;
                memcpy((char *)t->data + 8 * i, &x, 8);
            } else {
                memcpy((char *)t->data + es * (size_t)i, (const char *)in[0]->data + es * (size_t)i,
                       es);
            }
        }
    }
    im->n_consts++;
    *done = true;
    return CK_OK;
}

/* Shape arithmetic on constants and on static shapes (onnx_fold.h): a node whose inputs
 * are all constants is evaluated; Shape of an activation reads the shape the case gives
 * the layer producing it (onnx_shapes.h). The result joins the folded constants. */
static ck_status push_const(imp *im, ck_onnx_tensor *t)
{
    ck_onnx_tensor *g = realloc(im->consts, (size_t)(im->n_consts + 1) * sizeof *g);
    if (!g) {
        ck_onnx_tensor_release(t);
        return imp_oom(im);
    }
    im->consts = g;
    g[im->n_consts++] = *t;
    return CK_OK;
}

static ck_status add_alias(imp *im, const char *value, const char *source)
{
    char **a = realloc(im->alias_of, (size_t)(im->n_alias + 1) * sizeof *a);
    if (!a)
        return imp_oom(im);
    im->alias_of = a;
    char **b = realloc(im->alias_src, (size_t)(im->n_alias + 1) * sizeof *b);
    if (!b)
        return imp_oom(im);
    im->alias_src = b;
    a[im->n_alias] = strdup(value);
    b[im->n_alias] = strdup(source);
    if (!a[im->n_alias] || !b[im->n_alias]) {
        free(a[im->n_alias]);
        free(b[im->n_alias]);
        return imp_oom(im);
    }
    im->n_alias++;
    return CK_OK;
}

/* The initializer a constant is (itself, or the one it was folded from without changing
 * its data), or NULL. */
const char *imp_alias_source(const imp *im, const char *value)
{
    if (ck_onnx_init_find(im->m, value))
        return value;
    for (int i = 0; i < im->n_alias; i++)
        if (strcmp(im->alias_of[i], value) == 0)
            return im->alias_src[i];
    return NULL;
}

/* Gather(initializer W, indices 0, 1, ..., rows - 1) along axis 0 is W itself. */
static bool gathers_every_row(const imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *W = ck_onnx_init_find(im->m, n->in[0]);
    const ck_onnx_tensor *ix = imp_const_of(im, n->in[1]);
    if (!W || !ix || W->ndim < 1 || ix->numel != W->dims[0] || ix->ndim != 1 ||
        imp_attr_int(n, "axis", 0) != 0)
        return false;
    for (int64_t i = 0; i < ix->numel; i++)
        if (imp_elem_f64(ix, i) != (double)i)
            return false;
    return true;
}

ck_status imp_fold_more(imp *im, int idx, bool *done)
{
    const ck_onnx_node *n = &im->m->nodes[idx];
    *done = false;
    if (n->n_out < 1 || !n->out[0][0] || n->n_in < 1 || n->n_in > 8 || n->domain[0])
        return CK_OK;
    ck_onnx_tensor out, shape_of;
    float stand_in_value = 0.0f; /* outlives the fold below */
    const ck_onnx_tensor *in[8] = {NULL};
    bool handled = false;
    char why[256] = "";
    memset(&shape_of, 0, sizeof shape_of);
    if (strcmp(n->op_type, "Shape") == 0 && imp_layer_of(im, n->in[0])) {
        ck_shape sh;
        CK_TRY(imp_value_shape(im, n->in[0], &sh));
        /* a stand-in constant with the activation's dims (no data: only dims are read) */
        shape_of.name = n->in[0];
        shape_of.data_type = CK_ONNX_FLOAT;
        shape_of.ndim = sh.ndim;
        memcpy(shape_of.dims, sh.dim, sizeof sh.dim);
        shape_of.numel = 1; /* the fold reads no value of it */
        shape_of.data = &stand_in_value;
        in[0] = &shape_of;
    } else {
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k][0] && !(in[k] = imp_const_of(im, n->in[k])))
                return CK_OK; /* reads an activation: mapped as a layer, if it can be */
    }
    ck_status st = ck_onnx_fold_eval(n, im->m->opset, in, n->n_in, &out, &handled, why,
                                     sizeof why);
    if (st == CK_ERR_INPUT)
        return imp_fail_node(im, "folding constants: %s", why);
    if (st != CK_OK)
        return imp_oom(im);
    if (!handled)
        return CK_OK;
    const char *src = imp_alias_source(im, n->in[0]);
    bool same_data = strcmp(n->op_type, "Unsqueeze") == 0 || strcmp(n->op_type, "Squeeze") == 0 ||
                     strcmp(n->op_type, "Reshape") == 0 || strcmp(n->op_type, "Identity") == 0;
    if (strcmp(n->op_type, "Gather") == 0 && gathers_every_row(im, n))
        CK_TRY(add_alias(im, n->out[0], n->in[0]));
    else if (src && same_data)
        CK_TRY(add_alias(im, n->out[0], src));
    CK_TRY(push_const(im, &out));
    *done = true;
    return CK_OK;
}
