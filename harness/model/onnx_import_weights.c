/*
 * The case's parameters and buffers from ONNX initializers (fp32, transposed where the case
 * holds them so), and where each one came from (ck_onnx_origins, onnx_import.h).
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

/* Records that case tensor `param` holds t (transposed or not). A constant folded from a
 * Transpose of an initializer (nn.Linear at opset 17) comes from that initializer, with
 * the transposition flipped. */
static ck_status record_origin(imp *im, const char *param, const ck_onnx_tensor *t,
                               bool transposed)
{
    if (!im->origins)
        return CK_OK;
    const char *source = im->made_up ? "" : t->name;
    for (int i = 0; !im->made_up && i < im->n_alias; i++)
        if (strcmp(im->alias_of[i], t->name) == 0)
            source = im->alias_src[i];
    for (int i = 0; !im->made_up && i < im->m->n_nodes; i++) {
        const ck_onnx_node *n = &im->m->nodes[i];
        if (strcmp(n->op_type, "Transpose") == 0 && n->n_in == 1 && n->n_out == 1 &&
            strcmp(n->out[0], t->name) == 0 && ck_onnx_init_find(im->m, n->in[0])) {
            source = n->in[0];
            transposed = !transposed;
            break;
        }
    }
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
    float *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        return imp_oom(im);
    ck_shape sh = ck_shape_make(t->ndim, t->dims);
    if (transpose && t->ndim == 2) {
        int64_t r = t->dims[0], c = t->dims[1];
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++)
                buf[j * r + i] = (float)imp_elem_f64(t, i * c + j);
        int64_t d[2] = {c, r};
        sh = ck_shape_make(2, d);
    } else {
        for (int64_t i = 0; i < t->numel; i++)
            buf[i] = (float)imp_elem_f64(t, i);
    }
    ck_status st = ck_tensorset_keep(im->w, buf, bytes ? bytes : 1, false, im->err);
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
