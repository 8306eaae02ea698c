/*
 * The case's parameters and buffers from ONNX initializers (fp32, transposed where the case
 * holds them so), and where each one came from (ck_onnx_origins, onnx_import.h).
 *
 * torch's dynamo exporter folds Transpose(fc1.weight) into a new initializer (`val_0`, the
 * weight transposed) and records where it came from (folded_from, onnx.h): such a weight is
 * named and traced after its one parameter, in the parameter's own orientation. One
 * parameter read by two layers (a tied embedding and head) is one case tensor shared with
 * "share", after checking element by element that both reads hold the same values in the
 * same orientation; otherwise the import is refused, never split into two parameters.
 */
#include "harness/model/onnx_import_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ck_onnx_origins_free(ck_onnx_origins *os)
{
    if (!os)
        return;
    for (int i = 0; i < os->n; i++) {
        free(os->o[i].param);
        free(os->o[i].source);
    }
    free(os->o);
    memset(os, 0, sizeof *os);
}

const char *imp_folded_param(const imp *im, const char *value)
{
    const ck_onnx_model *m = im->m;
    const ck_onnx_fold *f = value ? ck_onnx_fold_find(m, value) : NULL;
    if (!f || !ck_onnx_init_find(m, value))
        return NULL;
    const char *s = NULL;
    int k = 0;
    for (int i = 0; i < f->n_src; i++)
        if (m->n_torch_params == 0 || ck_onnx_is_torch_param(m, f->src[i])) {
            s = f->src[i];
            k++;
        }
    if (k != 1 || strcmp(s, value) == 0)
        return NULL;
    for (int i = 0; i < m->n_nodes; i++) /* the name of another value: ambiguous */
        for (int j = 0; j < m->nodes[i].n_out; j++)
            if (strcmp(m->nodes[i].out[j], s) == 0)
                return NULL;
    for (int i = 0; i < m->n_inputs; i++)
        if (strcmp(m->inputs[i].name, s) == 0)
            return NULL;
    return s;
}

/* The initializer behind t: t itself, the initializer a folded alias stands for, the
 * parameter a dynamo fold stands for (imp_folded_param: the case holds it as the module
 * does, *transposed false), or the input of a Transpose that made t (nn.Linear at opset
 * 17), with *transposed flipped then; "" for a made-up weight. */
static const char *weight_source(const imp *im, const ck_onnx_tensor *t, bool *transposed)
{
    if (im->made_up)
        return "";
    const char *param = imp_folded_param(im, t->name);
    if (param) {
        *transposed = false;
        return param;
    }
    const char *source = t->name;
    for (int i = 0; i < im->n_alias; i++)
        if (strcmp(im->alias_of[i], t->name) == 0)
            source = im->alias_src[i];
    for (int i = 0; i < im->m->n_nodes; i++) {
        const ck_onnx_node *n = &im->m->nodes[i];
        if (strcmp(n->op_type, "Transpose") == 0 && n->n_in == 1 && n->n_out == 1 &&
            strcmp(n->out[0], t->name) == 0 && ck_onnx_init_find(im->m, n->in[0])) {
            *transposed = !*transposed;
            return n->in[0];
        }
    }
    return source;
}

/* Records that case tensor `param` holds t (transposed or not), for origins (when asked)
 * and for later shares of the same initializer. */
static ck_status record_origin(imp *im, const char *param, const ck_onnx_tensor *t,
                               bool transposed)
{
    const char *source = weight_source(im, t, &transposed);
    if (source[0] && strrchr(param, '.') && strcmp(strrchr(param, '.'), ".weight") == 0) {
        if (im->n_tied == im->cap_tied) {
            int nc = im->cap_tied ? im->cap_tied * 2 : 16;
            char **a = realloc(im->tied_src, (size_t)nc * sizeof *a);
            if (a)
                im->tied_src = a;
            char **b = realloc(im->tied_param, (size_t)nc * sizeof *b);
            if (b)
                im->tied_param = b;
            bool *c = realloc(im->tied_transposed, (size_t)nc * sizeof *c);
            if (c)
                im->tied_transposed = c;
            if (!a || !b || !c)
                return imp_oom(im);
            im->cap_tied = nc;
        }
        im->tied_src[im->n_tied] = strdup(source);
        im->tied_param[im->n_tied] = strdup(param);
        im->tied_transposed[im->n_tied] = transposed;
        if (!im->tied_src[im->n_tied] || !im->tied_param[im->n_tied]) {
            free(im->tied_src[im->n_tied]);
            free(im->tied_param[im->n_tied]);
            return imp_oom(im);
        }
        im->n_tied++;
    }
    if (!im->origins)
        return CK_OK;
    ck_onnx_origins *os = im->origins;
    if (os->n == os->cap) {
        int nc = os->cap ? os->cap * 2 : 32;
        ck_onnx_origin *g = realloc(os->o, (size_t)nc * sizeof *g);
        if (!g)
            return imp_oom(im);
        os->o = g;
        os->cap = nc;
    }
    ck_onnx_origin *o = &os->o[os->n];
    o->param = strdup(param);
    o->source = strdup(source);
    o->transposed = transposed;
    if (!o->param || !o->source) {
        free(o->param);
        free(o->source);
        return imp_oom(im);
    }
    os->n++;
    return CK_OK;
}

/* t's values as the case holds them (fp32, transposed when transpose and 2-D), malloc'd. */
static float *case_values(const ck_onnx_tensor *t, bool transpose, ck_shape *sh)
{
    size_t bytes = (size_t)t->numel * 4;
    float *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        return NULL;
    *sh = ck_shape_make(t->ndim, t->dims);
    if (transpose && t->ndim == 2) {
        int64_t r = t->dims[0], c = t->dims[1];
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++)
                buf[j * r + i] = (float)imp_elem_f64(t, i * c + j);
        int64_t d[2] = {c, r};
        *sh = ck_shape_make(2, d);
    } else {
        for (int64_t i = 0; i < t->numel; i++)
            buf[i] = (float)imp_elem_f64(t, i);
    }
    return buf;
}

/* Whether values v of shape sh equal the fp32 tensor `other` exactly, element by element
 * (bitwise: a tie is only made between identical tensors). */
static bool same_values(const float *v, const ck_shape *sh, const ck_shape *osh,
                        const float *other)
{
    if (!ck_shape_equal(sh, osh))
        return false;
    int64_t n = ck_shape_numel(sh);
    return n == 0 || memcmp(v, other, (size_t)n * sizeof *v) == 0;
}

/* A dynamo fold of a parameter that is itself an initializer of the file (the other read
 * of a tied weight): the fold, as the case holds it, must be that initializer exactly. */
static ck_status check_fold_equal(imp *im, const ck_onnx_tensor *t, const float *v,
                                  const ck_shape *sh)
{
    const char *param = imp_folded_param(im, t->name);
    const ck_onnx_tensor *p = param ? ck_onnx_init_find(im->m, param) : NULL;
    if (!p)
        return CK_OK;
    ck_shape psh;
    float *pv = case_values(p, false, &psh);
    if (!pv)
        return imp_oom(im);
    bool same = same_values(v, sh, &psh, pv);
    free(pv);
    if (!same)
        return imp_fail_node(im, "initializer `%s` is recorded as folded from the parameter `%s` "
                                 "(folded_from) but is not that parameter (transposed) element "
                                 "by element: not imported as `%s`",
                             t->name, param, param);
    return CK_OK;
}

ck_status imp_shared_weight(imp *im, const ck_onnx_tensor *t, bool transpose, char *owner,
                            size_t n)
{
    owner[0] = '\0';
    bool transposed = transpose && t->ndim == 2;
    const char *source = weight_source(im, t, &transposed);
    for (int i = 0; source[0] && i < im->n_tied; i++) {
        if (strcmp(im->tied_src[i], source) != 0)
            continue;
        if (im->tied_transposed[i] != transposed)
            return imp_fail_node(im, "parameter `%s` would be held here %s and by %s %s: a "
                                     "case cannot tie a parameter to its transpose (a share "
                                     "has one orientation), and two parameters would train "
                                     "apart",
                                 source, transposed ? "transposed" : "as stored",
                                 im->tied_param[i], transposed ? "as stored" : "transposed");
        const ck_named_tensor *o = ck_tensorset_find(im->w, im->tied_param[i]);
        ck_shape sh;
        float *v = o ? case_values(t, transpose, &sh) : NULL;
        if (o && !v)
            return imp_oom(im);
        bool same = o && o->dtype == CK_FT_F32 && same_values(v, &sh, &o->shape, o->data);
        free(v);
        if (!same)
            return imp_fail_node(im, "`%s` (from `%s`) is not equal element by element to %s, "
                                 "which holds the same parameter: not tied",
                                 t->name, source, im->tied_param[i]);
        snprintf(owner, n, "%s", im->tied_param[i]);
        break;
    }
    return CK_OK;
}

/* Adds a parameter or buffer: fp32 data from t (transposed when transpose and 2-D). */
ck_status imp_add_weight(imp *im, const char *layer, const char *what, const ck_onnx_tensor *t,
                         bool transpose)
{
    char name[160];
    snprintf(name, sizeof name, "%s.%s", layer, what);
    if (!imp_is_float_type(t->data_type))
        return imp_fail_node(im, "initializer `%s` is %s, not a floating-point type", t->name,
                             ck_onnx_type_name(t->data_type));
    size_t bytes = (size_t)t->numel * 4;
    ck_shape sh;
    float *buf = case_values(t, transpose, &sh);
    if (!buf)
        return imp_oom(im);
    ck_status st = check_fold_equal(im, t, buf, &sh);
    if (st != CK_OK) {
        free(buf);
        return st;
    }
    st = ck_tensorset_keep(im->w, buf, bytes ? bytes : 1, false, im->err);
    if (st == CK_OK)
        st = ck_tensorset_add(im->w, name, CK_FT_F32, &sh, bytes ? buf : NULL, im->file, im->err);
    if (st == CK_OK)
        st = record_origin(im, name, t, transpose && t->ndim == 2);
    return st;
}

ck_status imp_add_nbt(imp *im, const char *layer)
{
    char name[160];
    snprintf(name, sizeof name, "%s.num_batches_tracked", layer);
    int64_t *z = calloc(1, sizeof *z);
    if (!z)
        return imp_oom(im);
    ck_shape sh = ck_shape_make(0, NULL);
    ck_status st = ck_tensorset_keep(im->w, z, sizeof *z, false, im->err);
    if (st == CK_OK)
        st = ck_tensorset_add(im->w, name, CK_FT_I64, &sh, z, im->file, im->err);
    return st;
}
