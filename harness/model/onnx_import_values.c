/*
 * Values and names: which case layer produces each ONNX value, the case layer names made from
 * ONNX names, the constants (initializers, Constant nodes, folded values) and their
 * elements, who reads a value, and the small node tests the pattern matchers share.
 */
#include "harness/model/onnx_import_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/half.h"

const char *imp_layer_of(const imp *im, const char *value)
{
    for (int i = im->n_vals - 1; i >= 0; i--)
        if (strcmp(im->val_name[i], value) == 0)
            return im->val_layer[i];
    return NULL;
}

ck_status imp_bind(imp *im, const char *value, const char *layer)
{
    if (im->n_vals == im->cap_vals) {
        int nc = im->cap_vals ? im->cap_vals * 2 : 64;
        char **a = realloc(im->val_name, (size_t)nc * sizeof *a);
        if (!a)
            return imp_oom(im);
        im->val_name = a;
        char **b = realloc(im->val_layer, (size_t)nc * sizeof *b);
        if (!b)
            return imp_oom(im);
        im->val_layer = b;
        im->cap_vals = nc;
    }
    im->val_name[im->n_vals] = strdup(value);
    im->val_layer[im->n_vals] = strdup(layer);
    if (!im->val_name[im->n_vals] || !im->val_layer[im->n_vals]) {
        free(im->val_name[im->n_vals]);
        free(im->val_layer[im->n_vals]);
        return imp_oom(im);
    }
    im->n_vals++;
    return CK_OK;
}

static bool name_taken(const imp *im, const char *s)
{
    if (strcmp(s, "input") == 0)
        return true;
    for (int i = 0; i < im->n_names; i++)
        if (strcmp(im->names[i], s) == 0)
            return true;
    return false;
}

/* A case layer name from an ONNX name: [A-Za-z0-9_-] kept, everything else '_', leading
 * and trailing '_' dropped, at most 56 characters, made unique with "_2", "_3", ... */
ck_status imp_make_name(imp *im, const char *from, char out[CK_NAME_MAX + 1])
{
    char base[57];
    size_t k = 0;
    for (const char *p = from; *p && k < sizeof base - 1; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
        if (!ok)
            c = '_';
        if (c == '_' && (k == 0 || base[k - 1] == '_'))
            continue;
        base[k++] = c;
    }
    while (k > 0 && base[k - 1] == '_')
        k--;
    base[k] = '\0';
    if (!k)
        snprintf(base, sizeof base, "layer%d", im->n_names % 1000000);
    snprintf(out, CK_NAME_MAX + 1, "%s", base);
    for (int i = 2; name_taken(im, out) && i < 1000000; i++)
        snprintf(out, CK_NAME_MAX + 1, "%.50s_%d", base, i); /* 50 + 1 + 11 digits fit */
    if (im->n_names == im->cap_names) {
        int nc = im->cap_names ? im->cap_names * 2 : 64;
        char **a = realloc(im->names, (size_t)nc * sizeof *a);
        if (!a)
            return imp_oom(im);
        im->names = a;
        im->cap_names = nc;
    }
    if (!(im->names[im->n_names] = strdup(out)))
        return imp_oom(im);
    im->n_names++;
    return CK_OK;
}

/* The layer name for a node: its weight's module path when it has one, else its name.
 * A weight transposed in the graph (Transpose of an initializer) is named by the
 * initializer. */
ck_status imp_name_for(imp *im, const ck_onnx_node *n, const char *weight_value,
                       char out[CK_NAME_MAX + 1])
{
    char from[512];
    const char *param = imp_folded_param(im, weight_value);
    if (param)
        weight_value = param; /* a dynamo fold: named after its module's parameter */
    for (int i = 0; weight_value && i < im->n_alias; i++)
        if (strcmp(im->alias_of[i], weight_value) == 0)
            weight_value = im->alias_src[i];
    for (int i = 0; weight_value && i < im->m->n_nodes; i++) {
        const ck_onnx_node *t = &im->m->nodes[i];
        if (strcmp(t->op_type, "Transpose") == 0 && t->n_in == 1 && t->n_out == 1 &&
            strcmp(t->out[0], weight_value) == 0 && ck_onnx_init_find(im->m, t->in[0])) {
            weight_value = t->in[0];
            break;
        }
    }
    if (weight_value && weight_value[0]) {
        snprintf(from, sizeof from, "%s", weight_value);
        char *dot = strrchr(from, '.');
        if (dot && dot != from)
            *dot = '\0';
        return imp_make_name(im, from, out);
    }
    snprintf(from, sizeof from, "%s", n->name[0] ? n->name : n->op_type);
    return imp_make_name(im, from, out);
}

/* A constant: an initializer, or the tensor of a Constant node. */
const ck_onnx_tensor *imp_const_of(const imp *im, const char *value)
{
    if (!value || !value[0])
        return NULL;
    const ck_onnx_tensor *t = ck_onnx_init_find(im->m, value);
    if (t)
        return t;
    for (int i = 0; i < im->n_consts; i++)
        if (strcmp(im->consts[i].name, value) == 0)
            return &im->consts[i];
    for (int i = 0; i < im->m->n_nodes; i++) {
        const ck_onnx_node *n = &im->m->nodes[i];
        if (strcmp(n->op_type, "Constant") == 0 && n->n_out == 1 && strcmp(n->out[0], value) == 0) {
            const ck_onnx_attr *a = ck_onnx_attr_find(n, "value");
            return a ? a->t : NULL;
        }
    }
    return NULL;
}

/* How many nodes read value (graph outputs count as readers too). */
int imp_readers(const imp *im, const char *value)
{
    int c = 0;
    for (int i = 0; i < im->m->n_nodes; i++)
        for (int k = 0; k < im->m->nodes[i].n_in; k++)
            c += strcmp(im->m->nodes[i].in[k], value) == 0;
    for (int i = 0; i < im->m->n_outputs; i++)
        c += strcmp(im->m->outputs[i].name, value) == 0;
    return c;
}

double imp_elem_f64(const ck_onnx_tensor *t, int64_t i)
{
    const unsigned char *d = t->data;
    switch (t->data_type) {
    case CK_ONNX_FLOAT: { float x; memcpy(&x, d + 4 * i, 4); return x; }
    case CK_ONNX_DOUBLE: { double x; memcpy(&x, d + 8 * i, 8); return x; }
    case CK_ONNX_FLOAT16: { uint16_t h; memcpy(&h, d + 2 * i, 2); return ck_f16_to_f32(h); }
    case CK_ONNX_BFLOAT16: { uint16_t h; memcpy(&h, d + 2 * i, 2); return ck_bf16_to_f32(h); }
    case CK_ONNX_INT64: { int64_t x; memcpy(&x, d + 8 * i, 8); return (double)x; }
    case CK_ONNX_INT32: { int32_t x; memcpy(&x, d + 4 * i, 4); return x; }
    case CK_ONNX_INT8: return (double)(int8_t)d[i];
    default: return (double)d[i];
    }
}

/* An element as an integer without undefined behaviour (NaN 0, clamped to +-2^62); the
 * callers check the range they need. */
int64_t imp_elem_i64(const ck_onnx_tensor *t, int64_t i)
{
    double v = imp_elem_f64(t, i);
    const double lim = 4611686018427387904.0;
    return v != v ? 0 : v > lim ? (int64_t)lim : v < -lim ? -(int64_t)lim : (int64_t)v;
}

bool imp_is_float_type(int t)
{
    return t == CK_ONNX_FLOAT || t == CK_ONNX_DOUBLE || t == CK_ONNX_FLOAT16 ||
           t == CK_ONNX_BFLOAT16;
}

/* The index of the one node reading value (graph outputs count as readers), or -1. */
int imp_sole_reader(const imp *im, const char *value)
{
    if (imp_readers(im, value) != 1)
        return -1;
    for (int i = 0; i < im->m->n_nodes; i++)
        for (int k = 0; k < im->m->nodes[i].n_in; k++)
            if (strcmp(im->m->nodes[i].in[k], value) == 0)
                return i;
    return -1;
}

/* Whether value is a one-element float constant equal to want (to fp32 rounding). */
bool imp_scalar_is(const imp *im, const char *value, double want)
{
    const ck_onnx_tensor *c = imp_const_of(im, value);
    if (!c || c->numel != 1 || !imp_is_float_type(c->data_type))
        return false;
    return fabs(imp_elem_f64(c, 0) - want) <= 1e-6 * fabs(want);
}

/* Node idx is a binary op_type node reading `a` and a scalar constant `want` (either
 * order; commute false: `a` must come first, as for Div). */
bool imp_binary_with_scalar(const imp *im, int idx, const char *op_type, const char *a, double want,
                            bool commute)
{
    if (idx < 0)
        return false;
    const ck_onnx_node *n = &im->m->nodes[idx];
    if (strcmp(n->op_type, op_type) != 0 || n->n_in != 2 || n->n_out < 1)
        return false;
    if (strcmp(n->in[0], a) == 0 && imp_scalar_is(im, n->in[1], want))
        return true;
    return commute && strcmp(n->in[1], a) == 0 && imp_scalar_is(im, n->in[0], want);
}

/* Node idx is a binary op_type node reading exactly a and b (either order). */
bool imp_binary_of(const imp *im, int idx, const char *op_type, const char *a, const char *b)
{
    if (idx < 0)
        return false;
    const ck_onnx_node *n = &im->m->nodes[idx];
    return strcmp(n->op_type, op_type) == 0 && n->n_in == 2 && n->n_out >= 1 &&
           ((strcmp(n->in[0], a) == 0 && strcmp(n->in[1], b) == 0) ||
            (strcmp(n->in[0], b) == 0 && strcmp(n->in[1], a) == 0));
}

/* A layer name from a node name's scope ("/block/attn/Softmax" -> "block_attn_<what>"). */
ck_status imp_scoped_name(imp *im, const ck_onnx_node *n, const char *what,
                          char out[CK_NAME_MAX + 1])
{
    char from[512];
    snprintf(from, sizeof from, "%s", n->name);
    char *slash = strrchr(from, '/');
    if (slash)
        *slash = '\0';
    size_t k = strlen(from);
    snprintf(from + k, sizeof from - k, "%s%s", k ? "/" : "", what);
    return imp_make_name(im, from, out);
}

/* The input of binary node idx that is not `a` (which it must read), or NULL. */
const char *imp_other_input(const imp *im, int idx, const char *op_type, const char *a)
{
    if (idx < 0)
        return NULL;
    const ck_onnx_node *n = &im->m->nodes[idx];
    if (strcmp(n->op_type, op_type) != 0 || n->n_in != 2 || n->n_out < 1)
        return NULL;
    return strcmp(n->in[0], a) == 0 ? n->in[1] : strcmp(n->in[1], a) == 0 ? n->in[0] : NULL;
}

/* The shape the case gives the layer producing `value`. */
ck_status imp_value_shape(imp *im, const char *value, ck_shape *out)
{
    const char *layer = imp_layer_of(im, value);
    if (!layer)
        return imp_fail_node(im, "input `%s` is produced by no supported node", value);
    return ck_onnx_layer_shape(&im->shapes, im->input_json, im->layers, layer, im->path, out,
                               im->err);
}
