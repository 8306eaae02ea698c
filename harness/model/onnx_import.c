/*
 * ONNX graph -> case layers and weights (onnx_import.h). One function per op family maps
 * a node; the rest is bookkeeping: which ONNX value each case layer produces, which values
 * are constants, which names are taken.
 */
#include "harness/model/onnx_import.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/half.h"
#include "harness/io/json_get.h"
#include "harness/model/catalogue.h"
#include "harness/model/onnx_fold.h"
#include "harness/model/onnx_shapes.h"

typedef struct {
    const ck_onnx_model *m;
    const char *path;
    ck_error *err;
    cJSON *layers;
    ck_tensorset *w;
    const char *file; /* path kept by the set (tensor origins) */
    /* ONNX value name -> case layer name ("input" for the model input) */
    int n_vals, cap_vals;
    char **val_name, **val_layer;
    int n_names, cap_names;
    char **names; /* layer names in use */
    bool *folded; /* per node: handled by another node's mapping */
    int n_consts;
    ck_onnx_tensor *consts; /* outputs of nodes folded at import (Concat of constants, ...) */
    const ck_onnx_node *node; /* the node being mapped (messages) */
    /* values inside an attention pattern being matched (see the attention section) */
    int n_pend;
    struct pend *pend;
    ck_onnx_origins *origins; /* NULL: not recorded */
    bool made_up;             /* the weight being added has no initializer behind it */
    const cJSON *input_json;  /* the case's input object (layer shapes) */
    ck_onnx_shape_cache shapes;
    /* folded constants that are a whole initializer in another form (a Gather of every row
     * in order: nn.Embedding(arange)): constant name -> initializer name */
    int n_alias;
    char **alias_of, **alias_src;
} imp;

static ck_status fail_node(imp *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
struct pend;
static struct pend *pend_of(const imp *im, const char *value);
static ck_status value_shape(imp *im, const char *value, ck_shape *out);
static const char *alias_source(const imp *im, const char *value);
static ck_status const_ahead(imp *im, const char *value, int depth, const ck_onnx_tensor **out);
static ck_status map_gather(imp *im, const ck_onnx_node *n);
static ck_status map_repeat_chain(imp *im, int idx);
static int sole_reader(const imp *im, const char *value);
static ck_status one_input_layer(imp *im, const char *name, const char *op,
                                 const char *src_value, const char *out_value, cJSON **Lout);

/* The framework module a node belongs to, from the scope PyTorch's exporter writes into
 * node names: "/blocks.0/attn/Split" -> "blocks.0.attn"; "/layer1/layer1.0/conv1/Conv" ->
 * "layer1.0.conv1" (a scope repeating its parent's path replaces it). "" when the name
 * carries no scope (a top-level node, another exporter's names). */
void ck_onnx_module_of(const char *node_name, char *out, size_t n)
{
    size_t k = 0;
    out[0] = '\0';
    if (node_name[0] != '/' || n == 0)
        return;
    const char *last = strrchr(node_name, '/');
    for (const char *p = node_name + 1; p < last;) {
        const char *slash = strchr(p, '/');
        size_t len = (size_t)(slash - p);
        if (len && k && len > k && strncmp(p, out, k) == 0 && p[k] == '.') {
            k = 0; /* "layer1.0" under "layer1": the full path again */
        } else if (len && k && k + 1 < n) {
            out[k++] = '.';
        }
        for (size_t i = 0; i < len && k + 1 < n; i++)
            out[k++] = p[i];
        out[k] = '\0';
        p = slash + 1;
    }
}

static ck_status fail_node(imp *im, const char *fmt, ...)
{
    char why[512], module[256] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    const ck_onnx_node *n = im->node;
    if (n)
        ck_onnx_module_of(n->name, module, sizeof module);
    return ck_error_one_line(
        im->err, ck_fail(im->err, CK_ERR_INPUT, "%s: %s%s%snode `%s` (%s): %s", im->path,
                         module[0] ? "module " : "", module, module[0] ? ": " : "",
                         n && n->name[0] ? n->name : "(unnamed)", n ? n->op_type : "?", why));
}

static ck_status oom(imp *im)
{
    return ck_fail(im->err, CK_ERR_NOMEM, "%s: out of memory importing the model", im->path);
}

/* ---------------------------------------------------------------------------------- */
/* Names and values                                                                    */
/* ---------------------------------------------------------------------------------- */

static const char *layer_of(const imp *im, const char *value)
{
    for (int i = im->n_vals - 1; i >= 0; i--)
        if (strcmp(im->val_name[i], value) == 0)
            return im->val_layer[i];
    return NULL;
}

static ck_status bind(imp *im, const char *value, const char *layer)
{
    if (im->n_vals == im->cap_vals) {
        int nc = im->cap_vals ? im->cap_vals * 2 : 64;
        char **a = realloc(im->val_name, (size_t)nc * sizeof *a);
        if (!a)
            return oom(im);
        im->val_name = a;
        char **b = realloc(im->val_layer, (size_t)nc * sizeof *b);
        if (!b)
            return oom(im);
        im->val_layer = b;
        im->cap_vals = nc;
    }
    im->val_name[im->n_vals] = strdup(value);
    im->val_layer[im->n_vals] = strdup(layer);
    if (!im->val_name[im->n_vals] || !im->val_layer[im->n_vals]) {
        free(im->val_name[im->n_vals]);
        free(im->val_layer[im->n_vals]);
        return oom(im);
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
static ck_status make_name(imp *im, const char *from, char out[CK_NAME_MAX + 1])
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
            return oom(im);
        im->names = a;
        im->cap_names = nc;
    }
    if (!(im->names[im->n_names] = strdup(out)))
        return oom(im);
    im->n_names++;
    return CK_OK;
}

/* The layer name for a node: its weight's module path when it has one, else its name.
 * A weight transposed in the graph (Transpose of an initializer) is named by the
 * initializer. */
static ck_status name_for(imp *im, const ck_onnx_node *n, const char *weight_value,
                          char out[CK_NAME_MAX + 1])
{
    char from[512];
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
        return make_name(im, from, out);
    }
    snprintf(from, sizeof from, "%s", n->name[0] ? n->name : n->op_type);
    return make_name(im, from, out);
}

/* A constant: an initializer, or the tensor of a Constant node. */
static const ck_onnx_tensor *const_of(const imp *im, const char *value)
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
static int readers(const imp *im, const char *value)
{
    int c = 0;
    for (int i = 0; i < im->m->n_nodes; i++)
        for (int k = 0; k < im->m->nodes[i].n_in; k++)
            c += strcmp(im->m->nodes[i].in[k], value) == 0;
    for (int i = 0; i < im->m->n_outputs; i++)
        c += strcmp(im->m->outputs[i].name, value) == 0;
    return c;
}

static double elem_f64(const ck_onnx_tensor *t, int64_t i)
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
static int64_t elem_i64(const ck_onnx_tensor *t, int64_t i)
{
    double v = elem_f64(t, i);
    const double lim = 4611686018427387904.0;
    return v != v ? 0 : v > lim ? (int64_t)lim : v < -lim ? -(int64_t)lim : (int64_t)v;
}

static bool is_float_type(int t)
{
    return t == CK_ONNX_FLOAT || t == CK_ONNX_DOUBLE || t == CK_ONNX_FLOAT16 ||
           t == CK_ONNX_BFLOAT16;
}

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
            return oom(im);
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
        return oom(im);
    }
    os->n++;
    return CK_OK;
}

/* Adds a parameter or buffer: fp32 data from t (transposed when transpose and 2-D). */
static ck_status add_weight(imp *im, const char *layer, const char *what, const ck_onnx_tensor *t,
                            bool transpose)
{
    char name[160];
    snprintf(name, sizeof name, "%s.%s", layer, what);
    if (!is_float_type(t->data_type))
        return fail_node(im, "initializer `%s` is %s, not a floating-point type", t->name,
                         ck_onnx_type_name(t->data_type));
    size_t bytes = (size_t)t->numel * 4;
    float *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        return oom(im);
    ck_shape sh = ck_shape_make(t->ndim, t->dims);
    if (transpose && t->ndim == 2) {
        int64_t r = t->dims[0], c = t->dims[1];
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++)
                buf[j * r + i] = (float)elem_f64(t, i * c + j);
        int64_t d[2] = {c, r};
        sh = ck_shape_make(2, d);
    } else {
        for (int64_t i = 0; i < t->numel; i++)
            buf[i] = (float)elem_f64(t, i);
    }
    ck_status st = ck_tensorset_keep(im->w, buf, bytes ? bytes : 1, false, im->err);
    if (st == CK_OK)
        st = ck_tensorset_add(im->w, name, CK_FT_F32, &sh, bytes ? buf : NULL, im->file, im->err);
    if (st == CK_OK)
        st = record_origin(im, name, t, transpose && t->ndim == 2);
    return st;
}

static ck_status add_nbt(imp *im, const char *layer)
{
    char name[160];
    snprintf(name, sizeof name, "%s.num_batches_tracked", layer);
    int64_t *z = calloc(1, sizeof *z);
    if (!z)
        return oom(im);
    ck_shape sh = ck_shape_make(0, NULL);
    ck_status st = ck_tensorset_keep(im->w, z, sizeof *z, false, im->err);
    if (st == CK_OK)
        st = ck_tensorset_add(im->w, name, CK_FT_I64, &sh, z, im->file, im->err);
    return st;
}

/* ---------------------------------------------------------------------------------- */
/* Layers                                                                              */
/* ---------------------------------------------------------------------------------- */

static cJSON *new_layer(imp *im, const char *name, const char *op)
{
    cJSON *L = cJSON_CreateObject();
    if (!L || !cJSON_AddStringToObject(L, "name", name) || !cJSON_AddStringToObject(L, "op", op) ||
        !cJSON_AddItemToArray(im->layers, L)) {
        cJSON_Delete(L);
        return NULL;
    }
    return L;
}

static bool add_ints(cJSON *L, const char *key, const int64_t *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    if (!a)
        return false;
    for (int i = 0; i < n; i++) {
        cJSON *x = cJSON_CreateNumber((double)v[i]);
        if (!x || !cJSON_AddItemToArray(a, x)) {
            cJSON_Delete(x);
            cJSON_Delete(a);
            return false;
        }
    }
    return cJSON_AddItemToObject(L, key, a);
}

/* The case layer reading the node's activation inputs (listed by index), named into L. */
static ck_status set_inputs(imp *im, cJSON *L, const ck_onnx_node *n, const int *idx, int k)
{
    cJSON *a = cJSON_CreateArray();
    if (!a || !cJSON_AddItemToObject(L, "inputs", a)) {
        cJSON_Delete(a);
        return oom(im);
    }
    for (int i = 0; i < k; i++) {
        const char *v = idx[i] < n->n_in ? n->in[idx[i]] : "";
        const char *src = layer_of(im, v);
        if (!src) {
            if (pend_of(im, v))
                return fail_node(im, "reads `%s`, a value inside a causal attention pattern "
                                 "(docs/onnx.md), in a way the pattern does not allow", v);
            if (const_of(im, v))
                return fail_node(im, "input `%s` is a constant tensor; the case's ops take "
                                     "activations there", v);
            return fail_node(im, "input `%s` is produced by no supported node", v);
        }
        cJSON *s = cJSON_CreateString(src);
        if (!s || !cJSON_AddItemToArray(a, s)) {
            cJSON_Delete(s);
            return oom(im);
        }
    }
    return CK_OK;
}

static int64_t attr_int(const ck_onnx_node *n, const char *name, int64_t dflt)
{
    const ck_onnx_attr *a = ck_onnx_attr_find(n, name);
    return a ? a->i : dflt;
}

static double attr_float(const ck_onnx_node *n, const char *name, double dflt)
{
    const ck_onnx_attr *a = ck_onnx_attr_find(n, name);
    return a ? a->f : dflt;
}

/* ints attribute of exactly `count` values (absent: all `dflt`) */
static ck_status attr_ints(imp *im, const ck_onnx_node *n, const char *name, int count,
                           int64_t dflt, int64_t *out)
{
    const ck_onnx_attr *a = ck_onnx_attr_find(n, name);
    for (int i = 0; i < count; i++)
        out[i] = dflt;
    if (!a)
        return CK_OK;
    if (a->n_ints != count)
        return fail_node(im, "attribute %s has %d values, expected %d", name, a->n_ints, count);
    for (int i = 0; i < count; i++)
        out[i] = a->ints[i];
    return CK_OK;
}

static const char *nd_op(const char *base, int nsp, char *buf, size_t n)
{
    snprintf(buf, n, "%s%dd", base, nsp);
    return buf;
}

/* Symmetric padding per axis from ONNX pads [b1.., e1..]; false if asymmetric. */
static bool symmetric_pads(const int64_t *pads, int nsp, int64_t *out)
{
    for (int i = 0; i < nsp; i++) {
        if (pads[i] != pads[i + nsp])
            return false;
        out[i] = pads[i];
    }
    return true;
}

static ck_status map_conv(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *W = n->n_in > 1 ? const_of(im, n->in[1]) : NULL;
    if (!W || W->ndim < 3 || W->ndim > 5)
        return fail_node(im, "the weight must be a constant of rank 3 to 5");
    int nsp = W->ndim - 2;
    if (attr_int(n, "group", 1) != 1)
        return fail_node(im, "grouped convolution (group %lld) is not supported",
                         (long long)attr_int(n, "group", 1));
    int64_t stride[3], dil[3], pads[6], pad[3], kshape[3];
    CK_TRY(attr_ints(im, n, "strides", nsp, 1, stride));
    CK_TRY(attr_ints(im, n, "dilations", nsp, 1, dil));
    CK_TRY(attr_ints(im, n, "pads", 2 * nsp, 0, pads));
    CK_TRY(attr_ints(im, n, "kernel_shape", nsp, 0, kshape));
    for (int i = 0; i < nsp; i++)
        if (kshape[i] && kshape[i] != W->dims[2 + i])
            return fail_node(im, "kernel_shape does not match the weight's shape");
    const ck_onnx_attr *ap = ck_onnx_attr_find(n, "auto_pad");
    const char *auto_pad = ap && ap->s ? ap->s : "NOTSET";
    bool same = false;
    if (strcmp(auto_pad, "SAME_UPPER") == 0)
        same = true;
    else if (strcmp(auto_pad, "NOTSET") != 0 && strcmp(auto_pad, "VALID") != 0)
        return fail_node(im, "auto_pad %s is not supported (SAME_LOWER puts the odd pixel first)",
                         auto_pad);
    if (!same && !symmetric_pads(pads, nsp, pad))
        return fail_node(im, "asymmetric padding is not supported");
    const ck_onnx_tensor *B = n->n_in > 2 ? const_of(im, n->in[2]) : NULL;
    if (n->n_in > 2 && n->in[2][0] && !B)
        return fail_node(im, "the bias must be a constant");
    char name[CK_NAME_MAX + 1], op[16];
    CK_TRY(name_for(im, n, n->in[1], name));
    cJSON *L = new_layer(im, name, nd_op("conv", nsp, op, sizeof op));
    if (!L)
        return oom(im);
    int in0 = 0;
    CK_TRY(set_inputs(im, L, n, &in0, 1));
    bool ok = cJSON_AddNumberToObject(L, "filters", (double)W->dims[0]) &&
              add_ints(L, "kernel", W->dims + 2, nsp) && add_ints(L, "stride", stride, nsp) &&
              add_ints(L, "dilation", dil, nsp) &&
              (same ? cJSON_AddStringToObject(L, "padding", "same") != NULL
                    : add_ints(L, "padding", pad, nsp)) &&
              cJSON_AddBoolToObject(L, "bias", B != NULL);
    if (!ok)
        return oom(im);
    CK_TRY(add_weight(im, name, "weight", W, false));
    if (B)
        CK_TRY(add_weight(im, name, "bias", B, false));
    return bind(im, n->out[0], name);
}

/* The node (index > from) reading value as an Add with a constant 1-D bias of `units`, if
 * value has no other reader: the bias a MatMul's output gets in a Linear layer. */
static int fused_bias_add(imp *im, int from, const char *value, int64_t units,
                          const ck_onnx_tensor **bias)
{
    if (readers(im, value) != 1)
        return -1;
    for (int i = from + 1; i < im->m->n_nodes; i++) {
        const ck_onnx_node *a = &im->m->nodes[i];
        if (strcmp(a->op_type, "Add") != 0 || a->n_in != 2)
            continue;
        int k = strcmp(a->in[0], value) == 0 ? 1 : strcmp(a->in[1], value) == 0 ? 0 : -1;
        if (k < 0)
            continue;
        const ck_onnx_tensor *b = const_of(im, a->in[k]);
        if (b && b->ndim == 1 && b->dims[0] == units && is_float_type(b->data_type)) {
            *bias = b;
            return i;
        }
        return -1;
    }
    return -1;
}

static ck_status map_linear(imp *im, int idx, const ck_onnx_node *n)
{
    bool gemm = strcmp(n->op_type, "Gemm") == 0;
    const ck_onnx_tensor *W = n->n_in > 1 ? const_of(im, n->in[1]) : NULL;
    if (!W || W->ndim != 2)
        return fail_node(im, "the second input must be a constant 2-D weight (a product of two "
                             "activations is not a linear layer)");
    bool transpose;
    const ck_onnx_tensor *B = NULL;
    int64_t units;
    int fused = -1;
    if (gemm) {
        if (attr_int(n, "transA", 0) != 0 || attr_float(n, "alpha", 1.0) != 1.0 ||
            attr_float(n, "beta", 1.0) != 1.0)
            return fail_node(im, "Gemm with transA, alpha or beta other than 0, 1, 1 is not "
                                 "supported");
        transpose = attr_int(n, "transB", 0) == 0; /* case weights are (units, in) */
        units = transpose ? W->dims[1] : W->dims[0];
        if (n->n_in > 2 && n->in[2][0]) {
            B = const_of(im, n->in[2]);
            if (!B || B->numel != units)
                return fail_node(im, "the bias must be a constant of %lld values", (long long)units);
        }
    } else {
        transpose = true; /* MatMul: x (.., in) @ W (in, units) */
        units = W->dims[1];
        fused = fused_bias_add(im, idx, n->out[0], units, &B);
    }
    char name[CK_NAME_MAX + 1];
    CK_TRY(name_for(im, n, n->in[1], name));
    cJSON *L = new_layer(im, name, "linear");
    if (!L)
        return oom(im);
    int in0 = 0;
    CK_TRY(set_inputs(im, L, n, &in0, 1));
    if (!cJSON_AddNumberToObject(L, "units", (double)units) ||
        !cJSON_AddBoolToObject(L, "bias", B != NULL))
        return oom(im);
    CK_TRY(add_weight(im, name, "weight", W, transpose));
    if (B)
        CK_TRY(add_weight(im, name, "bias", B, false));
    CK_TRY(bind(im, n->out[0], name));
    if (fused >= 0) {
        im->folded[fused] = true;
        CK_TRY(bind(im, im->m->nodes[fused].out[0], name));
    }
    return CK_OK;
}

/* The decimal a float attribute was written from: the shortest %.Ng (6 <= N <= 9) that
 * reads back to the same float (0.9f -> 0.9, 1e-5f -> 1e-05), so a framework's 0.1 stays
 * 0.1 in the case instead of 0.100000024. */
static double float_decimal(double f)
{
    char buf[32];
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, f);
        double d = strtod(buf, NULL);
        if ((float)d == (float)f)
            return d;
    }
    return f;
}

static ck_status map_batchnorm(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *t[4];
    if (n->n_in != 5)
        return fail_node(im, "expected 5 inputs (X, scale, B, mean, var)");
    for (int k = 0; k < 4; k++)
        if (!(t[k] = const_of(im, n->in[k + 1])) || t[k]->ndim != 1)
            return fail_node(im, "input %d must be a constant 1-D tensor", k + 1);
    bool training = attr_int(n, "training_mode", 0) != 0 || n->n_out > 1;
    for (int k = 1; k < n->n_out; k++)
        if (n->out[k][0] && readers(im, n->out[k]) > 0)
            return fail_node(im, "its running-statistics output `%s` is read by another node",
                             n->out[k]);
    /* judged as the user wrote them, before the conversion to the case's convention */
    double momentum = float_decimal(attr_float(n, "momentum", 0.9));
    double eps = float_decimal(attr_float(n, "epsilon", 1e-5));
    if (!(momentum >= 0.0 && momentum <= 1.0))
        return fail_node(im, "momentum %g is outside [0, 1] (ONNX weighs the running statistic "
                         "by it)", momentum);
    if (!(eps > 0.0) || !isfinite(eps))
        return fail_node(im, "epsilon %g must be a positive finite number", eps);
    char buf[32];
    snprintf(buf, sizeof buf, "%.15g", 1.0 - momentum);
    double batch_weight = strtod(buf, NULL);
    char name[CK_NAME_MAX + 1];
    CK_TRY(name_for(im, n, n->in[1], name));
    cJSON *L = new_layer(im, name, "batchnorm");
    if (!L)
        return oom(im);
    int in0 = 0;
    CK_TRY(set_inputs(im, L, n, &in0, 1));
    /* ONNX: running = running * momentum + batch * (1 - momentum); PyTorch and the case
     * weigh the batch by momentum */
    if (!cJSON_AddNumberToObject(L, "momentum", batch_weight) ||
        !cJSON_AddNumberToObject(L, "eps", eps) || !cJSON_AddBoolToObject(L, "eval", !training))
        return oom(im);
    static const char *const what[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int k = 0; k < 4; k++)
        CK_TRY(add_weight(im, name, what[k], t[k], false));
    CK_TRY(add_nbt(im, name));
    return bind(im, n->out[0], name);
}

static ck_status map_simple(imp *im, const ck_onnx_node *n, const char *op, int n_act)
{
    char name[CK_NAME_MAX + 1];
    CK_TRY(name_for(im, n, NULL, name));
    cJSON *L = new_layer(im, name, op);
    if (!L)
        return oom(im);
    int idx[8];
    for (int i = 0; i < n_act && i < 8; i++)
        idx[i] = i;
    CK_TRY(set_inputs(im, L, n, idx, n_act));
    if (strcmp(op, "leaky_relu") == 0 &&
        !cJSON_AddNumberToObject(L, "slope", float_decimal(attr_float(n, "alpha", 0.01))))
        return oom(im);
    return bind(im, n->out[0], name);
}

static ck_status map_pool(imp *im, const ck_onnx_node *n, bool is_max)
{
    const ck_onnx_attr *ks = ck_onnx_attr_find(n, "kernel_shape");
    if (!ks || ks->n_ints < 1 || ks->n_ints > 3)
        return fail_node(im, "kernel_shape must give 1 to 3 sizes");
    int nsp = ks->n_ints;
    int64_t stride[3], pads[6], dil[3];
    CK_TRY(attr_ints(im, n, "strides", nsp, 1, stride));
    CK_TRY(attr_ints(im, n, "pads", 2 * nsp, 0, pads));
    CK_TRY(attr_ints(im, n, "dilations", nsp, 1, dil));
    int64_t pad[3];
    if (!symmetric_pads(pads, nsp, pad))
        return fail_node(im, "asymmetric pooling padding is not supported");
    bool padded = false;
    for (int i = 0; i < nsp; i++) {
        padded = padded || pad[i] != 0;
        if (2 * pad[i] > ks->ints[i])
            return fail_node(im, "padding %lld is more than half the window %lld",
                             (long long)pad[i], (long long)ks->ints[i]);
    }
    for (int i = 0; i < nsp; i++)
        if (dil[i] != 1)
            return fail_node(im, "dilated pooling is not supported");
    if (attr_int(n, "ceil_mode", 0))
        return fail_node(im, "ceil_mode is not supported");
    const ck_onnx_attr *ap = ck_onnx_attr_find(n, "auto_pad");
    if (ap && ap->s && strcmp(ap->s, "NOTSET") != 0 && strcmp(ap->s, "VALID") != 0)
        return fail_node(im, "auto_pad %s is not supported", ap->s);
    if (n->n_out > 1 && n->out[1][0])
        return fail_node(im, "MaxPool's indices output is not supported");
    char name[CK_NAME_MAX + 1], op[16];
    CK_TRY(name_for(im, n, NULL, name));
    cJSON *L = new_layer(im, name, nd_op(is_max ? "maxpool" : "avgpool", nsp, op, sizeof op));
    if (!L)
        return oom(im);
    int in0 = 0;
    CK_TRY(set_inputs(im, L, n, &in0, 1));
    if (!add_ints(L, "pool", ks->ints, nsp) || !add_ints(L, "stride", stride, nsp) ||
        (padded && !add_ints(L, "padding", pad, nsp)) ||
        (padded && !is_max &&
         !cJSON_AddBoolToObject(L, "count_include_pad", attr_int(n, "count_include_pad", 0))))
        return oom(im);
    return bind(im, n->out[0], name);
}

/* ---------------------------------------------------------------------------------- */
/* Slices of activations: Split, Slice, Gather of one index                            */
/* ---------------------------------------------------------------------------------- */

/* A slice layer of `src_value` along dim [a, b), named from the node (suffix k when the
 * node makes several), bound to out_value. */
static ck_status add_slice(imp *im, const ck_onnx_node *n, const char *src_value, int k,
                           int dim, int64_t a, int64_t b, const char *out_value)
{
    char name[CK_NAME_MAX + 1], from[600];
    snprintf(from, sizeof from, "%s%s%d", n->name[0] ? n->name : n->op_type, k ? "_" : "",
             k);
    if (!k)
        snprintf(from, sizeof from, "%s", n->name[0] ? n->name : n->op_type);
    CK_TRY(make_name(im, from, name));
    cJSON *L = NULL;
    CK_TRY(one_input_layer(im, name, "slice", src_value, out_value, &L));
    int64_t r[2] = {a, b};
    if (!cJSON_AddNumberToObject(L, "dim", dim) || !add_ints(L, "range", r, 2))
        return oom(im);
    return CK_OK;
}

static ck_status map_split(imp *im, const ck_onnx_node *n)
{
    ck_shape xs;
    CK_TRY(value_shape(im, n->in[0], &xs));
    int64_t axis = attr_int(n, "axis", 0);
    axis = axis < 0 ? axis + xs.ndim : axis;
    if (axis < 0 || axis >= xs.ndim)
        return fail_node(im, "axis %lld is out of range", (long long)attr_int(n, "axis", 0));
    int64_t sizes[CK_ONNX_MAX_IO], D = xs.dim[axis], total = 0;
    const ck_onnx_attr *sa = ck_onnx_attr_find(n, "split");
    const ck_onnx_tensor *st = n->n_in > 1 && n->in[1][0] ? const_of(im, n->in[1]) : NULL;
    if (n->n_in > 1 && n->in[1][0] && !st)
        return fail_node(im, "the split sizes must be constants");
    for (int k = 0; k < n->n_out; k++) {
        sizes[k] = sa && k < sa->n_ints ? sa->ints[k]
                   : st && k < st->numel ? elem_i64(st, k)
                                         : (D + n->n_out - 1) / n->n_out;
        if (!sa && !st && k == n->n_out - 1)
            sizes[k] = D - total; /* equal parts, the last one smaller */
        if (sizes[k] < 1 || sizes[k] > D)
            return fail_node(im, "output %d has size %lld, outside [1, %lld]", k,
                             (long long)sizes[k], (long long)D);
        total += sizes[k];
    }
    if (total != D)
        return fail_node(im, "splits %lld along axis %lld into parts of %lld in all",
                         (long long)D, (long long)axis, (long long)total);
    int64_t off = 0;
    for (int k = 0; k < n->n_out; k++) {
        if (n->out[k][0])
            CK_TRY(add_slice(im, n, n->in[0], k + 1, (int)axis, off, off + sizes[k], n->out[k]));
        off += sizes[k];
    }
    return CK_OK;
}

/* Slice with constant starts/ends (steps 1): one slice layer per sliced axis. */
static ck_status map_slice(imp *im, const ck_onnx_node *n)
{
    ck_shape xs;
    CK_TRY(value_shape(im, n->in[0], &xs));
    const ck_onnx_tensor *c[4] = {NULL};
    for (int k = 1; k < n->n_in && k < 5; k++)
        if (n->in[k][0] && !(c[k - 1] = const_of(im, n->in[k])))
            return fail_node(im, "starts, ends, axes and steps must be constants");
    if (!c[0] || !c[1] || c[0]->numel != c[1]->numel || c[0]->numel > CK_MAX_DIMS)
        return fail_node(im, "starts and ends must be constants of one length (opset >= 10)");
    const char *src = n->in[0];
    int made = 0, m = (int)c[0]->numel;
    for (int i = 0; i < m; i++) {
        int64_t ax = c[2] ? elem_i64(c[2], i) : i;
        ax = ax < 0 ? ax + xs.ndim : ax;
        if (ax < 0 || ax >= xs.ndim || (c[3] && elem_f64(c[3], i) != 1.0))
            return fail_node(im, "axis out of range or a step other than 1");
        double D = (double)xs.dim[ax], s = elem_f64(c[0], i), e = elem_f64(c[1], i);
        s = s < 0 ? s + D : s;
        e = e < 0 ? e + D : e;
        s = s < 0 ? 0 : s > D ? D : s;
        e = e < 0 ? 0 : e > D ? D : e;
        if (!(s < e))
            return fail_node(im, "an empty slice along axis %lld", (long long)ax);
        if (s == 0 && e == D)
            continue; /* the whole axis */
        bool last = true;
        for (int j = i + 1; j < m; j++) {
            int64_t axj = c[2] ? elem_i64(c[2], j) : j;
            double Dj = (double)xs.dim[axj < 0 ? axj + xs.ndim : axj];
            double sj = elem_f64(c[0], j), ej = elem_f64(c[1], j);
            if (!((sj == 0 || sj == -Dj) && ej >= Dj))
                last = false;
        }
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s#%d", n->out[0], made);
        const char *out = last ? n->out[0] : tmp;
        CK_TRY(add_slice(im, n, src, made ? made + 1 : 0, (int)ax, (int64_t)s, (int64_t)e, out));
        src = out;
        made++;
        if (last)
            break;
    }
    if (!made) { /* every axis whole: the identity */
        const char *l = layer_of(im, n->in[0]);
        return bind(im, n->out[0], l);
    }
    return CK_OK;
}

/* Gather(activation, one constant index, axis): a slice of one and, for a scalar index, a
 * reshape dropping the axis. */
static ck_status map_gather_one(imp *im, const ck_onnx_node *n, const ck_onnx_tensor *ix)
{
    ck_shape xs;
    CK_TRY(value_shape(im, n->in[0], &xs));
    int64_t axis = attr_int(n, "axis", 0);
    axis = axis < 0 ? axis + xs.ndim : axis;
    if (axis < 0 || axis >= xs.ndim || ix->numel != 1 || ix->ndim > 1)
        return fail_node(im, "only a Gather of one constant index of an activation is supported");
    int64_t i = elem_i64(ix, 0);
    i = i < 0 ? i + xs.dim[axis] : i;
    if (i < 0 || i >= xs.dim[axis])
        return fail_node(im, "index %lld is outside [0, %lld)", (long long)elem_f64(ix, 0),
                         (long long)xs.dim[axis]);
    if (ix->ndim == 1)
        return add_slice(im, n, n->in[0], 0, (int)axis, i, i + 1, n->out[0]);
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s#slice", n->out[0]);
    CK_TRY(add_slice(im, n, n->in[0], 1, (int)axis, i, i + 1, tmp));
    int64_t dims[CK_MAX_DIMS];
    int m = 0;
    for (int d = 0; d < xs.ndim; d++)
        if (d != axis)
            dims[m++] = xs.dim[d];
    if (m < 1)
        return fail_node(im, "gathers a scalar");
    char name[CK_NAME_MAX + 1];
    CK_TRY(name_for(im, n, NULL, name));
    cJSON *L = NULL;
    CK_TRY(one_input_layer(im, name, "reshape", tmp, n->out[0], &L));
    return add_ints(L, "shape", dims, m) ? CK_OK : oom(im);
}

/* Gather (an embedding, or one index of an activation), Split, Slice. */
static ck_status map_slicing(imp *im, const ck_onnx_node *n)
{
    const char *op = n->op_type;
    bool act = n->n_in >= 1 && layer_of(im, n->in[0]);
    if (op[0] == 'G' && n->n_in == 2 && act && const_of(im, n->in[1]))
        return map_gather_one(im, n, const_of(im, n->in[1]));
    if (op[0] == 'G')
        return map_gather(im, n);
    if (!act)
        return fail_node(im, "its input is produced by no supported node");
    if (strcmp(op, "Split") == 0)
        return map_split(im, n);
    if (n->n_in < 3)
        return fail_node(im, "starts and ends must be inputs (opset >= 10)");
    return map_slice(im, n);
}

/* A Pad of zeros (AvgPool2d's export) is the identity; any other is refused. */
static ck_status map_pad(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *pads = n->n_in > 1 ? const_of(im, n->in[1]) : NULL;
    const char *src = n->n_in ? layer_of(im, n->in[0]) : NULL;
    bool zero = pads != NULL;
    for (int64_t k = 0; pads && k < pads->numel; k++)
        zero = zero && elem_f64(pads, k) == 0.0;
    if (!zero || !src)
        return fail_node(im, "padding by a non-zero amount is not supported (a case pads only "
                             "inside conv)");
    return bind(im, n->out[0], src);
}

/* The case op of an ONNX unary function node, or NULL. */
static const char *unary_op(const char *op_type)
{
    static const char *const unary[][2] = {{"Sqrt", "sqrt"}, {"Reciprocal", "reciprocal"},
                                           {"Exp", "exp"},   {"Log", "log"},
                                           {"Neg", "neg"},   {"Erf", "erf"},
                                           {"Abs", "abs"}};
    for (size_t k = 0; k < sizeof unary / sizeof unary[0]; k++)
        if (strcmp(op_type, unary[k][0]) == 0)
            return unary[k][1];
    return NULL;
}

/* Unsqueeze / Squeeze of an activation: a reshape to the shape they give (the input's
 * static shape with dims of size 1 inserted or removed). */
static ck_status map_squeeze(imp *im, int idx, const ck_onnx_node *n)
{
    int t = sole_reader(im, n->out[0]);
    if (n->op_type[0] == 'U' && t >= 0 && strcmp(im->m->nodes[t].op_type, "Tile") == 0)
        return map_repeat_chain(im, idx); /* tf2onnx's UpSampling chain */
    ck_shape xs;
    CK_TRY(value_shape(im, n->in[0], &xs));
    const ck_onnx_attr *aa = ck_onnx_attr_find(n, "axes");
    const ck_onnx_tensor *ac = n->n_in > 1 && n->in[1][0] ? const_of(im, n->in[1]) : NULL;
    if (n->n_in > 1 && n->in[1][0] && !ac)
        return fail_node(im, "the axes must be a constant");
    int64_t axes[CK_MAX_DIMS];
    int k = 0;
    for (; aa && k < aa->n_ints && k < CK_MAX_DIMS; k++)
        axes[k] = aa->ints[k];
    for (; !aa && ac && k < ac->numel && k < CK_MAX_DIMS; k++)
        axes[k] = elem_i64(ac, k);
    bool unsq = n->op_type[0] == 'U';
    int r = unsq ? xs.ndim + k : xs.ndim;
    if (r > CK_MAX_DIMS || (unsq && !k))
        return fail_node(im, "axes give a shape of %d dims", r);
    bool mark[CK_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
        if (a < 0 || a >= r || mark[a] || (!unsq && xs.dim[a] != 1))
            return fail_node(im, "axis %lld is out of range%s", (long long)axes[i],
                             unsq ? " or repeated" : " or not a dim of size 1");
        mark[a] = true;
    }
    int64_t dims[CK_MAX_DIMS];
    int m = 0;
    for (int d = 0, src = 0; d < r; d++) {
        if (unsq)
            dims[m++] = mark[d] ? 1 : xs.dim[src++];
        else if (!(k ? mark[d] : xs.dim[d] == 1))
            dims[m++] = xs.dim[d];
    }
    if (m < 1)
        return fail_node(im, "squeezes every dim (a scalar activation is not supported)");
    char name[CK_NAME_MAX + 1];
    CK_TRY(name_for(im, n, NULL, name));
    cJSON *L = NULL;
    CK_TRY(one_input_layer(im, name, "reshape", n->in[0], n->out[0], &L));
    return add_ints(L, "shape", dims, m) ? CK_OK : oom(im);
}

/* GlobalAveragePool / GlobalMaxPool: a pool whose window is the input's spatial dims. */
static ck_status map_global_pool(imp *im, const ck_onnx_node *n, bool is_max)
{
    if (n->n_in != 1)
        return fail_node(im, "expected 1 input, got %d", n->n_in);
    ck_shape xs;
    CK_TRY(value_shape(im, n->in[0], &xs));
    int nsp = xs.ndim - 2;
    if (nsp < 1 || nsp > 3)
        return fail_node(im, "an input of rank %d: only 1 to 3 spatial dims", xs.ndim);
    char name[CK_NAME_MAX + 1], op[16];
    CK_TRY(name_for(im, n, NULL, name));
    cJSON *L = NULL;
    CK_TRY(one_input_layer(im, name, nd_op(is_max ? "maxpool" : "avgpool", nsp, op, sizeof op),
                           n->in[0], n->out[0], &L));
    return add_ints(L, "pool", xs.dim + 2, nsp) ? CK_OK : oom(im);
}

static ck_status map_resize(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_attr *mode = ck_onnx_attr_find(n, "mode");
    if (mode && mode->s && strcmp(mode->s, "nearest") != 0)
        return fail_node(im, "mode %s is not supported (only nearest with integer scales)",
                         mode->s);
    const ck_onnx_attr *ctm = ck_onnx_attr_find(n, "coordinate_transformation_mode");
    if (strcmp(n->op_type, "Resize") == 0 && ctm && ctm->s && strcmp(ctm->s, "asymmetric") != 0)
        return fail_node(im, "coordinate_transformation_mode %s is not supported", ctm->s);
    const ck_onnx_attr *nm = ck_onnx_attr_find(n, "nearest_mode");
    if (nm && nm->s && strcmp(nm->s, "floor") != 0)
        return fail_node(im, "nearest_mode %s is not supported", nm->s);
    /* Upsample (opset 7-9): X, scales; Resize (opset 11+): X, roi, scales[, sizes] */
    int si = strcmp(n->op_type, "Upsample") == 0 ? 1 : 2;
    const ck_onnx_tensor *sc = n->n_in > si ? const_of(im, n->in[si]) : NULL;
    if (!sc || sc->numel < 3 || sc->numel > 5)
        return fail_node(im, "the scales must be a constant of 3 to 5 values (sizes are not "
                             "supported)");
    int nsp = (int)sc->numel - 2;
    int64_t scale[3];
    if (elem_f64(sc, 0) != 1.0 || elem_f64(sc, 1) != 1.0)
        return fail_node(im, "only spatial dims may be scaled");
    for (int i = 0; i < nsp; i++) {
        double s = elem_f64(sc, 2 + i);
        if (!(s >= 1.0) || s != floor(s) || s > CK_SIZE_CAP)
            return fail_node(im, "scale %g is not a positive integer", s);
        scale[i] = (int64_t)s;
    }
    char name[CK_NAME_MAX + 1], op[16];
    CK_TRY(name_for(im, n, NULL, name));
    cJSON *L = new_layer(im, name, nd_op("upsample", nsp, op, sizeof op));
    if (!L)
        return oom(im);
    int in0 = 0;
    CK_TRY(set_inputs(im, L, n, &in0, 1));
    if (!add_ints(L, "scale", scale, nsp))
        return oom(im);
    return bind(im, n->out[0], name);
}

/* A Dropout's rate and whether it is in training mode (constants of the node). */
static ck_status dropout_params(imp *im, const ck_onnx_node *n, double *rate_out,
                                bool *training_out)
{
    double rate = float_decimal(attr_float(n, "ratio", 0.5));
    if (n->n_in > 1 && n->in[1][0]) {
        const ck_onnx_tensor *r = const_of(im, n->in[1]);
        if (!r || r->numel != 1)
            return fail_node(im, "the ratio must be a constant scalar");
        rate = elem_f64(r, 0);
        if (r->data_type == CK_ONNX_FLOAT)
            rate = float_decimal(rate);
    }
    bool training = false;
    if (n->n_in > 2 && n->in[2][0]) {
        const ck_onnx_tensor *t = const_of(im, n->in[2]);
        if (!t || t->numel != 1)
            return fail_node(im, "training_mode must be a constant scalar");
        training = elem_f64(t, 0) != 0.0;
    } else if (im->m->opset > 0 && im->m->opset < 12) {
        training = !attr_int(n, "is_test", 0);
    }
    if (n->n_out > 1 && n->out[1][0] && readers(im, n->out[1]) > 0)
        return fail_node(im, "its mask output is read by another node");
    if (training && rate != 0.0 && !(rate > 0.0 && rate < 1.0))
        return fail_node(im, "ratio %g is outside [0, 1)", rate);
    *rate_out = rate;
    *training_out = training;
    return CK_OK;
}

static ck_status map_dropout(imp *im, const ck_onnx_node *n)
{
    double rate;
    bool training;
    CK_TRY(dropout_params(im, n, &rate, &training));
    const char *src = n->n_in > 0 ? layer_of(im, n->in[0]) : NULL;
    if (!src)
        return fail_node(im, "its input is produced by no supported node");
    if (!training || rate == 0.0) /* inference-mode dropout is the identity */
        return bind(im, n->out[0], src);
    char name[CK_NAME_MAX + 1];
    CK_TRY(name_for(im, n, NULL, name));
    cJSON *L = new_layer(im, name, "dropout");
    if (!L)
        return oom(im);
    int in0 = 0;
    CK_TRY(set_inputs(im, L, n, &in0, 1));
    if (!cJSON_AddNumberToObject(L, "rate", rate))
        return oom(im);
    return bind(im, n->out[0], name);
}

/* ---------------------------------------------------------------------------------- */
/* Transformer ops: embedding, positions, layernorm, GELU and SiLU patterns, attention */
/* ---------------------------------------------------------------------------------- */

/* The index of the one node reading value (graph outputs count as readers), or -1. */
static int sole_reader(const imp *im, const char *value)
{
    if (readers(im, value) != 1)
        return -1;
    for (int i = 0; i < im->m->n_nodes; i++)
        for (int k = 0; k < im->m->nodes[i].n_in; k++)
            if (strcmp(im->m->nodes[i].in[k], value) == 0)
                return i;
    return -1;
}

/* Whether value is a one-element float constant equal to want (to fp32 rounding). */
static bool scalar_is(const imp *im, const char *value, double want)
{
    const ck_onnx_tensor *c = const_of(im, value);
    if (!c || c->numel != 1 || !is_float_type(c->data_type))
        return false;
    return fabs(elem_f64(c, 0) - want) <= 1e-6 * fabs(want);
}

/* Node idx is a binary op_type node reading `a` and a scalar constant `want` (either
 * order; commute false: `a` must come first, as for Div). */
static bool binary_with_scalar(const imp *im, int idx, const char *op_type, const char *a,
                               double want, bool commute)
{
    if (idx < 0)
        return false;
    const ck_onnx_node *n = &im->m->nodes[idx];
    if (strcmp(n->op_type, op_type) != 0 || n->n_in != 2 || n->n_out < 1)
        return false;
    if (strcmp(n->in[0], a) == 0 && scalar_is(im, n->in[1], want))
        return true;
    return commute && strcmp(n->in[1], a) == 0 && scalar_is(im, n->in[0], want);
}

/* Node idx is a binary op_type node reading exactly a and b (either order). */
static bool binary_of(const imp *im, int idx, const char *op_type, const char *a, const char *b)
{
    if (idx < 0)
        return false;
    const ck_onnx_node *n = &im->m->nodes[idx];
    return strcmp(n->op_type, op_type) == 0 && n->n_in == 2 && n->n_out >= 1 &&
           ((strcmp(n->in[0], a) == 0 && strcmp(n->in[1], b) == 0) ||
            (strcmp(n->in[0], b) == 0 && strcmp(n->in[1], a) == 0));
}

/* A layer name from a node name's scope ("/block/attn/Softmax" -> "block_attn_<what>"). */
static ck_status scoped_name(imp *im, const ck_onnx_node *n, const char *what,
                             char out[CK_NAME_MAX + 1])
{
    char from[512];
    snprintf(from, sizeof from, "%s", n->name);
    char *slash = strrchr(from, '/');
    if (slash)
        *slash = '\0';
    size_t k = strlen(from);
    snprintf(from + k, sizeof from - k, "%s%s", k ? "/" : "", what);
    return make_name(im, from, out);
}

/* A layer of one activation input reading `src_value`, bound to `out_value`. */
static ck_status one_input_layer(imp *im, const char *name, const char *op, const char *src_value,
                                 const char *out_value, cJSON **Lout)
{
    const char *src = layer_of(im, src_value);
    if (!src)
        return fail_node(im, "input `%s` is produced by no supported node", src_value);
    cJSON *L = new_layer(im, name, op);
    if (!L || !cJSON_AddStringToObject(L, "inputs", src))
        return oom(im);
    if (Lout)
        *Lout = L;
    return bind(im, out_value, name);
}

/* Gelu as exporters below opset 20 spell it, matched exactly from node idx on:
 *   exact: Div(x, √2) → Erf → Add(·, 1) → Mul(x, ·) → Mul(·, 0.5)
 *   tanh:  Mul(x, x) → Mul(x, ·) → Mul(0.044715, ·) → Add(x, ·) → Mul(√(2/π), ·) → Tanh →
 *          Add(1, ·) → Mul(x, ·) → Mul(0.5, ·)
 * every intermediate value read by the next node only. Returns true when matched (the
 * layer added, the nodes folded). */
static ck_status match_gelu(imp *im, int idx, bool *matched)
{
    *matched = false;
    const ck_onnx_node *n = &im->m->nodes[idx];
    if (n->n_in != 2 || n->n_out < 1)
        return CK_OK;
    const char *x = n->in[0];
    int chain[9], len = 0;
    bool tanh_form = false;
    bool is_mul = strcmp(n->op_type, "Mul") == 0;
    if (is_mul && scalar_is(im, n->in[0], 1.0 / sqrt(2.0)))
        x = n->in[1]; /* Mul(1/√2, x) */
    if (binary_with_scalar(im, idx, "Div", x, sqrt(2.0), false) ||
        binary_with_scalar(im, idx, "Mul", x, 1.0 / sqrt(2.0), true)) {
        chain[len++] = idx;
        int e = sole_reader(im, n->out[0]);
        if (e < 0 || strcmp(im->m->nodes[e].op_type, "Erf") != 0)
            return CK_OK;
        chain[len++] = e;
        int a = sole_reader(im, im->m->nodes[e].out[0]);
        if (!binary_with_scalar(im, a, "Add", im->m->nodes[e].out[0], 1.0, true))
            return CK_OK;
        chain[len++] = a;
        int m1 = sole_reader(im, im->m->nodes[a].out[0]);
        if (!binary_of(im, m1, "Mul", x, im->m->nodes[a].out[0]))
            return CK_OK;
        chain[len++] = m1;
        int m2 = sole_reader(im, im->m->nodes[m1].out[0]);
        if (!binary_with_scalar(im, m2, "Mul", im->m->nodes[m1].out[0], 0.5, true))
            return CK_OK;
        chain[len++] = m2;
    } else if (strcmp(n->op_type, "Mul") == 0 && strcmp(n->in[0], n->in[1]) == 0) {
        tanh_form = true;
        chain[len++] = idx;
        const char *cur = n->out[0];
        int c3 = sole_reader(im, cur);
        if (!binary_of(im, c3, "Mul", x, cur))
            return CK_OK;
        chain[len++] = c3;
        cur = im->m->nodes[c3].out[0];
        int k1 = sole_reader(im, cur);
        if (!binary_with_scalar(im, k1, "Mul", cur, 0.044715, true))
            return CK_OK;
        chain[len++] = k1;
        cur = im->m->nodes[k1].out[0];
        int ad = sole_reader(im, cur);
        if (!binary_of(im, ad, "Add", x, cur))
            return CK_OK;
        chain[len++] = ad;
        cur = im->m->nodes[ad].out[0];
        int k2 = sole_reader(im, cur);
        if (!binary_with_scalar(im, k2, "Mul", cur, sqrt(2.0 / M_PI), true))
            return CK_OK;
        chain[len++] = k2;
        cur = im->m->nodes[k2].out[0];
        int th = sole_reader(im, cur);
        if (th < 0 || strcmp(im->m->nodes[th].op_type, "Tanh") != 0)
            return CK_OK;
        chain[len++] = th;
        cur = im->m->nodes[th].out[0];
        int one = sole_reader(im, cur);
        if (!binary_with_scalar(im, one, "Add", cur, 1.0, true))
            return CK_OK;
        chain[len++] = one;
        cur = im->m->nodes[one].out[0];
        int mx = sole_reader(im, cur);
        if (!binary_of(im, mx, "Mul", x, cur))
            return CK_OK;
        chain[len++] = mx;
        cur = im->m->nodes[mx].out[0];
        int half = sole_reader(im, cur);
        if (!binary_with_scalar(im, half, "Mul", cur, 0.5, true))
            return CK_OK;
        chain[len++] = half;
    } else {
        return CK_OK;
    }
    char name[CK_NAME_MAX + 1];
    CK_TRY(scoped_name(im, n, "gelu", name));
    cJSON *L = NULL;
    const ck_onnx_node *last = &im->m->nodes[chain[len - 1]];
    CK_TRY(one_input_layer(im, name, "gelu", x, last->out[0], &L));
    if (tanh_form && !cJSON_AddStringToObject(L, "approximate", "tanh"))
        return oom(im);
    for (int i = 1; i < len; i++)
        im->folded[chain[i]] = true;
    *matched = true;
    return CK_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Nearest upsampling spelled as Unsqueeze → Tile → [Transpose] → Reshape chains          */
/* ---------------------------------------------------------------------------------- */

/* tf2onnx writes Keras's UpSampling1D/2D/3D (keras.ops.repeat along each spatial axis) as
 * one Unsqueeze → Tile → Reshape chain per axis, with layout Transposes in between. The
 * chain is followed symbolically: each axis of the current value is a row-major list of
 * factors, a source axis of the chain's input (its size unknown here) or a repeat count.
 * Unsqueeze inserts an empty axis, Tile may only repeat an empty one, Transpose permutes,
 * and Reshape may only merge each axis holding a source factor with the repeat-only axes
 * right after it (the target dims then give the sizes, checked for consistency). The chain
 * is an upsampling iff it ends with the input's axes in their order, N and C unrepeated and
 * each spatial axis a source factor followed by repeats: element s repeated r times. */
#define REP_AXES (CK_MAX_DIMS + 4)
#define REP_FACTORS 8
typedef struct { int n; int f[REP_FACTORS]; } rep_axis; /* f >= 0: source axis; < 0: -repeat */

static ck_status rep_ints(imp *im, const ck_onnx_node *n, int k, const char *attr,
                          int64_t *out, int *count)
{
    const ck_onnx_tensor *c = n->n_in > k ? const_of(im, n->in[k]) : NULL;
    const ck_onnx_attr *a = attr ? ck_onnx_attr_find(n, attr) : NULL;
    int64_t cnt = c ? c->numel : a ? a->n_ints : -1;
    if (cnt < 1 || cnt > REP_AXES || (c && c->data_type != CK_ONNX_INT64))
        return fail_node(im, "expected a constant list of 1 to %d int64 values", REP_AXES);
    for (int64_t i = 0; i < cnt; i++)
        out[i] = c ? (int64_t)elem_f64(c, i) : a->ints[i];
    *count = (int)cnt;
    return CK_OK;
}

static ck_status rep_step(imp *im, const ck_onnx_node *n, rep_axis *ax, int *rank,
                          int64_t *size, int nsrc)
{
    int64_t v[REP_AXES];
    int nv;
    const char *op = n->op_type;
    if (strcmp(op, "Unsqueeze") == 0) {
        CK_TRY(rep_ints(im, n, 1, "axes", v, &nv));
        int a = (int)(v[0] < 0 ? v[0] + *rank + 1 : v[0]);
        if (nv != 1 || a < 0 || a > *rank || *rank + 1 > REP_AXES)
            return fail_node(im, "only one axis inside the rank may be inserted");
        memmove(&ax[a + 1], &ax[a], (size_t)(*rank - a) * sizeof *ax);
        ax[a].n = 0;
        (*rank)++;
    } else if (strcmp(op, "Tile") == 0) {
        CK_TRY(rep_ints(im, n, 1, NULL, v, &nv));
        if (nv != *rank)
            return fail_node(im, "%d repeats for a rank-%d value", nv, *rank);
        for (int i = 0; i < nv; i++) {
            if (v[i] == 1)
                continue;
            if (ax[i].n != 0 || v[i] < 1 || v[i] > CK_SIZE_CAP)
                return fail_node(im, "tiles a non-inserted axis (only repeats of an inserted "
                                     "axis, i.e. nearest upsampling, are supported)");
            ax[i].n = 1;
            ax[i].f[0] = (int)-v[i];
        }
    } else if (strcmp(op, "Transpose") == 0) {
        const ck_onnx_attr *pa = ck_onnx_attr_find(n, "perm");
        rep_axis old[REP_AXES];
        bool used[REP_AXES] = {false};
        if (!pa || pa->n_ints != *rank)
            return fail_node(im, "perm must list the value's %d axes", *rank);
        memcpy(old, ax, sizeof old);
        for (int i = 0; i < *rank; i++) {
            int64_t q = pa->ints[i];
            if (q < 0 || q >= *rank || used[q])
                return fail_node(im, "perm is not a permutation");
            used[q] = true;
            ax[i] = old[q];
        }
    } else { /* Reshape: merge each source axis with the repeat-only axes after it */
        CK_TRY(rep_ints(im, n, 1, NULL, v, &nv));
        rep_axis out[REP_AXES];
        int g = -1;
        for (int i = 0; i < *rank; i++) {
            bool src = ax[i].n > 0 && ax[i].f[0] >= 0;
            for (int k = 1; k < ax[i].n; k++)
                src = src || ax[i].f[k] >= 0;
            if (src) {
                if (++g >= nv)
                    return fail_node(im, "the target shape has fewer dims than the value");
                out[g] = ax[i];
            } else if (g < 0 || out[g].n + ax[i].n > REP_FACTORS) {
                return fail_node(im, "repeats before any source axis (a tiling, not an "
                                     "upsampling)");
            } else {
                memcpy(&out[g].f[out[g].n], ax[i].f, (size_t)ax[i].n * sizeof(int));
                out[g].n += ax[i].n;
            }
        }
        if (g + 1 != nv)
            return fail_node(im, "the target shape splits an axis (only merges are supported)");
        for (int j = 0; j < nv; j++) { /* size of the one source factor of each group */
            int64_t rep = 1;
            int sym = -1;
            for (int k = 0; k < out[j].n; k++) {
                if (out[j].f[k] < 0)
                    rep *= -out[j].f[k];
                else if (sym >= 0)
                    return fail_node(im, "merges two axes of the input");
                else
                    sym = out[j].f[k];
            }
            if (v[j] < 1 || v[j] % rep != 0 || sym >= nsrc ||
                (size[sym] >= 0 && size[sym] != v[j] / rep))
                return fail_node(im, "target dim %lld does not match the value's axis",
                                 (long long)v[j]);
            size[sym] = v[j] / rep;
        }
        memcpy(ax, out, (size_t)nv * sizeof *ax);
        *rank = nv;
    }
    return CK_OK;
}

static bool rep_chain_op(const char *op)
{
    return strcmp(op, "Unsqueeze") == 0 || strcmp(op, "Tile") == 0 ||
           strcmp(op, "Transpose") == 0 || strcmp(op, "Reshape") == 0;
}

/* Node idx is an Unsqueeze of an activation: the chain from it as one upsample layer, or
 * one line naming the node that makes it something else. */
static ck_status map_repeat_chain(imp *im, int idx)
{
    const ck_onnx_node *first = &im->m->nodes[idx];
    int t = sole_reader(im, first->out[0]);
    const ck_onnx_node *tile = t >= 0 ? &im->m->nodes[t] : NULL;
    int64_t reps[REP_AXES];
    int nr;
    if (!layer_of(im, first->in[0]) || !tile || strcmp(tile->op_type, "Tile") != 0)
        return fail_node(im, "an Unsqueeze of an activation is supported only as the start of "
                             "nearest upsampling (Unsqueeze -> Tile -> Reshape, as tf2onnx "
                             "writes UpSampling1D/2D/3D)");
    im->node = tile;
    CK_TRY(rep_ints(im, tile, 1, NULL, reps, &nr));
    int rank = nr - 1, nsrc = rank;
    if (rank < 3 || rank > 5) {
        im->node = first;
        return fail_node(im, "upsampling a rank-%d value (only N, C and 1 to 3 spatial dims)",
                         rank);
    }
    rep_axis ax[REP_AXES];
    int64_t size[REP_AXES];
    for (int i = 0; i < rank; i++) {
        ax[i].n = 1;
        ax[i].f[0] = i;
        size[i] = -1;
    }
    int chain[64], len = 0, cur = idx;
    const char *out = first->out[0];
    while (cur >= 0 && len < 64) {
        const ck_onnx_node *n = &im->m->nodes[cur];
        im->node = n;
        CK_TRY(rep_step(im, n, ax, &rank, size, nsrc));
        chain[len++] = cur;
        out = n->out[0];
        int nx = sole_reader(im, out);
        cur = nx >= 0 && rep_chain_op(im->m->nodes[nx].op_type) ? nx : -1;
    }
    im->node = first;
    int64_t scale[3];
    bool ok = rank == nsrc;
    for (int i = 0; ok && i < rank; i++) {
        int64_t rep = 1;
        ok = ax[i].n >= 1 && ax[i].f[0] == i;
        for (int k = 1; ok && k < ax[i].n; k++)
            rep *= -ax[i].f[k], ok = ax[i].f[k] < 0;
        ok = ok && (i >= 2 || rep == 1);
        if (i >= 2)
            scale[i - 2] = rep;
    }
    if (!ok)
        return fail_node(im, "the Unsqueeze/Tile/Transpose/Reshape chain ending at `%s` is not "
                             "a nearest upsampling of its input (N, C, spatial order kept, "
                             "each spatial element repeated)", out);
    char name[CK_NAME_MAX + 1], op[16];
    CK_TRY(scoped_name(im, first, "upsample", name));
    cJSON *L = NULL;
    CK_TRY(one_input_layer(im, name, nd_op("upsample", nsrc - 2, op, sizeof op), first->in[0],
                           out, &L));
    if (!add_ints(L, "scale", scale, nsrc - 2))
        return oom(im);
    for (int i = 1; i < len; i++)
        im->folded[chain[i]] = true;
    return CK_OK;
}

/* Gather(weight, token ids) along axis 0: nn.Embedding. */
static ck_status map_gather(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *W = n->n_in == 2 ? const_of(im, n->in[0]) : NULL;
    if (!W || W->ndim != 2 || !is_float_type(W->data_type))
        return fail_node(im, "only a Gather of rows of a constant 2-D weight (an embedding) is "
                             "supported");
    if (attr_int(n, "axis", 0) != 0)
        return fail_node(im, "axis %lld is not supported (an embedding gathers rows, axis 0)",
                         (long long)attr_int(n, "axis", 0));
    const char *src = layer_of(im, n->in[1]);
    if (!src || strcmp(src, "input") != 0)
        return fail_node(im, "the indices must be the model's integer input (token ids)");
    char name[CK_NAME_MAX + 1];
    CK_TRY(name_for(im, n, n->in[0], name));
    cJSON *L = new_layer(im, name, "embedding");
    if (!L || !cJSON_AddStringToObject(L, "inputs", "input") ||
        !cJSON_AddNumberToObject(L, "vocab", (double)W->dims[0]) ||
        !cJSON_AddNumberToObject(L, "units", (double)W->dims[1]))
        return oom(im);
    CK_TRY(add_weight(im, name, "weight", W, false));
    return bind(im, n->out[0], name);
}

/* LayerNormalization (opset 17) over the trailing dims its scale covers. */
static ck_status map_layernorm(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *S = n->n_in > 1 ? const_of(im, n->in[1]) : NULL;
    if (!S || S->ndim < 1 || !is_float_type(S->data_type))
        return fail_node(im, "the scale must be a constant");
    const ck_onnx_tensor *B = n->n_in > 2 && n->in[2][0] ? const_of(im, n->in[2]) : NULL;
    if (n->n_in > 2 && n->in[2][0] && (!B || B->numel != S->numel))
        return fail_node(im, "the bias must be a constant shaped as the scale");
    int64_t axis = attr_int(n, "axis", -1);
    if (axis != -S->ndim)
        return fail_node(im, "axis %lld with a scale of rank %d: only the trailing dims the "
                         "scale covers (axis %d) are supported", (long long)axis, S->ndim,
                         -S->ndim);
    if (attr_int(n, "stash_type", 1) != 1)
        return fail_node(im, "stash_type %lld is not supported (only float statistics, 1)",
                         (long long)attr_int(n, "stash_type", 1));
    for (int k = 1; k < n->n_out; k++)
        if (n->out[k][0] && readers(im, n->out[k]) > 0)
            return fail_node(im, "its statistics output `%s` is read by another node", n->out[k]);
    char name[CK_NAME_MAX + 1];
    CK_TRY(name_for(im, n, n->in[1], name));
    cJSON *L = new_layer(im, name, "layernorm");
    if (!L)
        return oom(im);
    int in0 = 0;
    CK_TRY(set_inputs(im, L, n, &in0, 1));
    if (!add_ints(L, "normalized_shape", S->dims, S->ndim) ||
        !cJSON_AddNumberToObject(L, "eps", float_decimal(attr_float(n, "epsilon", 1e-5))))
        return oom(im);
    CK_TRY(add_weight(im, name, "weight", S, false));
    if (B) {
        CK_TRY(add_weight(im, name, "bias", B, false));
    } else { /* no bias: the case's layernorm adds zeros, the same numbers */
        ck_onnx_tensor z = *S;
        z.name = S->name;
        z.data_type = CK_ONNX_FLOAT;
        z.nbytes = (size_t)S->numel * 4;
        z.data = calloc((size_t)S->numel + 1, 4);
        if (!z.data)
            return oom(im);
        im->made_up = true;
        ck_status st = add_weight(im, name, "bias", &z, false);
        im->made_up = false;
        free(z.data);
        CK_TRY(st);
    }
    return bind(im, n->out[0], name);
}

/* Add(x, constant) with the constant of rank >= 2: learned positions shared by the batch.
 * A leading 1 of a rank >= 3 constant (1, L, D) is dropped: the weight is x[1:]; the case
 * refuses a weight of another shape, so a broadcast of another kind is an error. */
static ck_status map_positional(imp *im, const ck_onnx_node *n, const char *act,
                                const ck_onnx_tensor *P)
{
    if (!is_float_type(P->data_type) || P->ndim < 2)
        return fail_node(im, "adding the constant `%s` (rank %d) is not supported (only learned "
                         "positions of rank >= 2 shared by the batch)", P->name, P->ndim);
    ck_onnx_tensor w = *P;
    if (w.ndim >= 3 && w.dims[0] == 1) {
        memmove(w.dims, w.dims + 1, (size_t)(w.ndim - 1) * sizeof w.dims[0]);
        w.ndim--;
    }
    char name[CK_NAME_MAX + 1];
    CK_TRY(name_for(im, n, P->name, name));
    CK_TRY(one_input_layer(im, name, "positional", act, n->out[0], NULL));
    return add_weight(im, name, "weight", &w, false);
}

/* ConvTranspose as conv_transpose1d/2d/3d (groups 1). */
static ck_status map_conv_transpose(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *W = n->n_in > 1 ? const_of(im, n->in[1]) : NULL;
    if (!W || W->ndim < 3 || W->ndim > 5)
        return fail_node(im, "the weight must be a constant of rank 3 to 5");
    int nsp = W->ndim - 2;
    if (attr_int(n, "group", 1) != 1)
        return fail_node(im, "grouped transposed convolution (group %lld) is not supported",
                         (long long)attr_int(n, "group", 1));
    if (ck_onnx_attr_find(n, "output_shape"))
        return fail_node(im, "output_shape is not supported (give pads and output_padding)");
    const ck_onnx_attr *ap = ck_onnx_attr_find(n, "auto_pad");
    if (ap && ap->s && strcmp(ap->s, "NOTSET") != 0 && strcmp(ap->s, "VALID") != 0)
        return fail_node(im, "auto_pad %s is not supported", ap->s);
    int64_t stride[3], dil[3], pads[6], pad[3], kshape[3], opad[3];
    CK_TRY(attr_ints(im, n, "strides", nsp, 1, stride));
    CK_TRY(attr_ints(im, n, "dilations", nsp, 1, dil));
    CK_TRY(attr_ints(im, n, "pads", 2 * nsp, 0, pads));
    CK_TRY(attr_ints(im, n, "kernel_shape", nsp, 0, kshape));
    CK_TRY(attr_ints(im, n, "output_padding", nsp, 0, opad));
    for (int i = 0; i < nsp; i++)
        if (kshape[i] && kshape[i] != W->dims[2 + i])
            return fail_node(im, "kernel_shape does not match the weight's shape");
    if (!symmetric_pads(pads, nsp, pad))
        return fail_node(im, "asymmetric padding is not supported");
    const ck_onnx_tensor *B = n->n_in > 2 ? const_of(im, n->in[2]) : NULL;
    if (n->n_in > 2 && n->in[2][0] && !B)
        return fail_node(im, "the bias must be a constant");
    char name[CK_NAME_MAX + 1], op[24];
    CK_TRY(name_for(im, n, n->in[1], name));
    cJSON *L = new_layer(im, name, nd_op("conv_transpose", nsp, op, sizeof op));
    if (!L)
        return oom(im);
    int in0 = 0;
    CK_TRY(set_inputs(im, L, n, &in0, 1));
    if (!cJSON_AddNumberToObject(L, "filters", (double)W->dims[1]) ||
        !add_ints(L, "kernel", W->dims + 2, nsp) || !add_ints(L, "stride", stride, nsp) ||
        !add_ints(L, "padding", pad, nsp) || !add_ints(L, "output_padding", opad, nsp) ||
        !add_ints(L, "dilation", dil, nsp) || !cJSON_AddBoolToObject(L, "bias", B != NULL))
        return oom(im);
    CK_TRY(add_weight(im, name, "weight", W, false));
    if (B)
        CK_TRY(add_weight(im, name, "bias", B, false));
    return bind(im, n->out[0], name);
}

/* Causal multi-head attention as GPT code writes it out, matched value by value:
 *   q, k, v: Reshape(layer, [B, L, H, d]) → Transpose(0,2,1,3)   (k: (0,2,3,1), or a
 *   further Transpose(0,1,3,2) of (0,2,1,3));
 *   MatMul(q, kᵀ) → [Div or Mul by a scalar] → [Add of a constant causal mask of 0 on and
 *   below the diagonal and −inf above] → Softmax(last axis) → [Dropout] → MatMul(·, v) →
 *   Transpose(0,2,1,3) → Reshape([B, L, H·d])
 * becomes one `attention` layer (q, k, v, heads H, scale, causal, dropout). Each value in
 * between must be read by the next node only; anything else reading one is named. */
enum { P_SPLIT, P_HEADS, P_HEADS_T, P_SCORES, P_PROBS, P_CTX, P_CTX_T };

struct pend {
    char *value;
    int kind;
    char q[CK_NAME_MAX + 1], k[CK_NAME_MAX + 1], v[CK_NAME_MAX + 1];
    int64_t b, l, heads, d;
    double scale;
    bool scaled, causal, masked, dropped;
    double dropout;
    int softmax_node;
};

static struct pend *pend_of(const imp *im, const char *value)
{
    for (int i = 0; i < im->n_pend; i++)
        if (strcmp(im->pend[i].value, value) == 0)
            return &im->pend[i];
    return NULL;
}

/* Records out_value as the next stage of `from` (copied). */
static ck_status pend_next(imp *im, const struct pend *from, const char *out_value, int kind)
{
    if (readers(im, out_value) != 1)
        return fail_node(im, "its output `%s` (inside an attention pattern) is read by %d nodes; "
                         "only the pattern's next node may read it", out_value,
                         readers(im, out_value));
    struct pend cp = *from; /* from may point into im->pend, which moves */
    cp.kind = kind;
    struct pend *p = realloc(im->pend, (size_t)(im->n_pend + 1) * sizeof *p);
    if (!p)
        return oom(im);
    im->pend = p;
    if (!(cp.value = strdup(out_value)))
        return oom(im);
    im->pend[im->n_pend++] = cp;
    return CK_OK;
}

static bool perm_is(const ck_onnx_node *n, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const ck_onnx_attr *p = ck_onnx_attr_find(n, "perm");
    return p && p->n_ints == 4 && p->ints[0] == a && p->ints[1] == b && p->ints[2] == c &&
           p->ints[3] == d;
}

/* Reshape(layer, [B, L, H, d]) read only by a head-splitting Transpose: starts a pattern. */
static ck_status attn_reshape_in(imp *im, const ck_onnx_node *n, const ck_onnx_tensor *s,
                                 bool *matched)
{
    *matched = false;
    const char *src = layer_of(im, n->in[0]);
    if (!src || s->numel != 4 || is_float_type(s->data_type))
        return CK_OK;
    for (int k = 0; k < 4; k++)
        if (!(elem_f64(s, k) >= 1.0 && elem_f64(s, k) <= (double)CK_SIZE_CAP))
            return CK_OK;
    int t = sole_reader(im, n->out[0]);
    if (t < 0 || strcmp(im->m->nodes[t].op_type, "Transpose") != 0 ||
        !(perm_is(&im->m->nodes[t], 0, 2, 1, 3) || perm_is(&im->m->nodes[t], 0, 2, 3, 1)))
        return CK_OK;
    struct pend p;
    memset(&p, 0, sizeof p);
    snprintf(p.q, sizeof p.q, "%s", src);
    p.b = (int64_t)elem_f64(s, 0);
    p.l = (int64_t)elem_f64(s, 1);
    p.heads = (int64_t)elem_f64(s, 2);
    p.d = (int64_t)elem_f64(s, 3);
    p.scale = 1.0;
    p.softmax_node = -1;
    *matched = true;
    return pend_next(im, &p, n->out[0], P_SPLIT);
}

static ck_status attn_broken(imp *im, const char *value)
{
    return fail_node(im, "reads `%s`, a value inside a causal attention pattern (docs/onnx.md), "
                     "in a way the pattern does not allow", value);
}

/* A node reading a pattern value: the next stage, or the finished attention layer. */
static ck_status attn_step(imp *im, int idx, const ck_onnx_node *n, struct pend *in0,
                           struct pend *in1)
{
    const char *op = n->op_type;
    if (strcmp(op, "Transpose") == 0 && in0) {
        if (in0->kind == P_SPLIT && perm_is(n, 0, 2, 1, 3))
            return pend_next(im, in0, n->out[0], P_HEADS);
        if (in0->kind == P_SPLIT && perm_is(n, 0, 2, 3, 1))
            return pend_next(im, in0, n->out[0], P_HEADS_T);
        if (in0->kind == P_HEADS && perm_is(n, 0, 1, 3, 2))
            return pend_next(im, in0, n->out[0], P_HEADS_T);
        if (in0->kind == P_CTX && perm_is(n, 0, 2, 1, 3))
            return pend_next(im, in0, n->out[0], P_CTX_T);
        return attn_broken(im, n->in[0]);
    }
    if (strcmp(op, "MatMul") == 0 && in0 && in1 && n->n_in == 2) {
        bool same = in0->b == in1->b && in0->l == in1->l && in0->heads == in1->heads &&
                    in0->d == in1->d;
        if (same && in0->kind == P_HEADS && in1->kind == P_HEADS_T) {
            struct pend p = *in0;
            snprintf(p.k, sizeof p.k, "%s", in1->q);
            return pend_next(im, &p, n->out[0], P_SCORES);
        }
        if (same && in0->kind == P_PROBS && in1->kind == P_HEADS) {
            struct pend p = *in0;
            snprintf(p.v, sizeof p.v, "%s", in1->q);
            return pend_next(im, &p, n->out[0], P_CTX);
        }
        return attn_broken(im, n->in[in0->kind == P_HEADS || in0->kind == P_PROBS ? 1 : 0]);
    }
    struct pend *p = in0 ? in0 : in1;
    const char *other = n->n_in == 2 ? n->in[in0 ? 1 : 0] : NULL;
    if ((strcmp(op, "Div") == 0 || strcmp(op, "Mul") == 0) && p->kind == P_SCORES &&
        !p->scaled && !p->masked && other && n->n_in == 2 && (in0 || op[0] == 'M')) {
        const ck_onnx_tensor *c = const_of(im, other);
        double v = c && c->numel == 1 && is_float_type(c->data_type) ? elem_f64(c, 0) : 0.0;
        if (!(v > 0.0) || !isfinite(v))
            return fail_node(im, "scales attention scores by `%s`, which is not a positive "
                             "constant scalar", other);
        struct pend q = *p;
        q.scale = op[0] == 'D' ? 1.0 / v : v;
        q.scaled = true;
        return pend_next(im, &q, n->out[0], P_SCORES);
    }
    if (strcmp(op, "Add") == 0 && p->kind == P_SCORES && !p->masked && other && n->n_in == 2) {
        const ck_onnx_tensor *c = const_of(im, other);
        bool causal = c && is_float_type(c->data_type) && c->ndim >= 2 &&
                      c->dims[c->ndim - 1] == p->l && c->dims[c->ndim - 2] == p->l &&
                      c->numel / p->l == p->l && c->numel % p->l == 0;
        for (int64_t i = 0; causal && i < p->l; i++)
            for (int64_t j = 0; causal && j < p->l; j++) {
                double v = elem_f64(c, i * p->l + j);
                causal = j > i ? (isinf(v) && v < 0) : v == 0.0;
            }
        if (!causal)
            return fail_node(im, "adds `%s` to attention scores: only a constant causal mask "
                             "(%lld x %lld, 0 on and below the diagonal, -inf above) is "
                             "supported", other, (long long)p->l, (long long)p->l);
        struct pend q = *p;
        q.masked = q.causal = true;
        return pend_next(im, &q, n->out[0], P_SCORES);
    }
    if (strcmp(op, "Softmax") == 0 && p->kind == P_SCORES && in0) {
        int64_t axis = attr_int(n, "axis", -1);
        if ((axis != -1 && axis != 3) || im->m->opset < 13)
            return fail_node(im, "a softmax of attention scores must be over the keys (axis -1, "
                             "opset >= 13)");
        struct pend q = *p;
        q.softmax_node = idx;
        return pend_next(im, &q, n->out[0], P_PROBS);
    }
    if (strcmp(op, "Dropout") == 0 && p->kind == P_PROBS && in0 && !p->dropped) {
        double rate;
        bool training;
        CK_TRY(dropout_params(im, n, &rate, &training));
        struct pend q = *p;
        q.dropped = true;
        q.dropout = training ? rate : 0.0;
        return pend_next(im, &q, n->out[0], P_PROBS);
    }
    if (strcmp(op, "Reshape") == 0 && p->kind == P_CTX_T && in0) {
        const ck_onnx_tensor *s = n->n_in > 1 ? const_of(im, n->in[1]) : NULL;
        if (!s || s->numel != 3 || elem_f64(s, 0) != (double)p->b ||
            elem_f64(s, 1) != (double)p->l ||
            elem_f64(s, 2) != (double)p->heads * (double)p->d)
            return fail_node(im, "merging attention heads must reshape to [%lld, %lld, %lld]",
                             (long long)p->b, (long long)p->l, (long long)p->heads * (long long)p->d);
        char name[CK_NAME_MAX + 1];
        CK_TRY(scoped_name(im, &im->m->nodes[p->softmax_node], "attention", name));
        cJSON *L = new_layer(im, name, "attention");
        cJSON *ins = cJSON_CreateArray();
        if (!L || !ins || !cJSON_AddItemToObject(L, "inputs", ins)) {
            cJSON_Delete(ins);
            return oom(im);
        }
        const char *qkv[3] = {p->q, p->k, p->v};
        for (int k = 0; k < 3; k++)
            if (!cJSON_AddItemToArray(ins, cJSON_CreateString(qkv[k])))
                return oom(im);
        if (!cJSON_AddNumberToObject(L, "heads", (double)p->heads) ||
            !cJSON_AddBoolToObject(L, "causal", p->causal) ||
            !cJSON_AddNumberToObject(L, "dropout", p->dropout) ||
            !cJSON_AddNumberToObject(L, "scale", p->scale))
            return oom(im);
        return bind(im, n->out[0], name);
    }
    return attn_broken(im, p->value);
}

/* masked_fill of attention scores: Where(mask, -inf, scores) with a constant mask true
 * exactly above the diagonal (nanoGPT's `bias[:, :, :T, :T] == 0`) is the causal mask. */
static ck_status attn_where(imp *im, const ck_onnx_node *n, struct pend *p)
{
    const ck_onnx_tensor *c = NULL, *v = NULL;
    CK_TRY(const_ahead(im, n->in[0], 0, &c));
    CK_TRY(const_ahead(im, n->in[1], 0, &v));
    c = const_of(im, n->in[0]); /* folding v may have moved c */
    bool causal = p->kind == P_SCORES && !p->masked && c && v && v->numel == 1 &&
                  is_float_type(v->data_type) && isinf(elem_f64(v, 0)) && elem_f64(v, 0) < 0 &&
                  c->ndim >= 2 && c->dims[c->ndim - 1] == p->l && c->dims[c->ndim - 2] == p->l &&
                  c->numel == p->l * p->l;
    for (int64_t i = 0; causal && i < p->l; i++)
        for (int64_t j = 0; causal && j < p->l; j++)
            causal = (elem_f64(c, i * p->l + j) != 0.0) == (j > i);
    if (!causal)
        return fail_node(im, "fills attention scores where `%s` holds: only a constant causal "
                         "mask (%lld x %lld, true above the diagonal) filled with -inf is "
                         "supported", n->in[0], (long long)p->l, (long long)p->l);
    struct pend q = *p;
    q.masked = q.causal = true;
    return pend_next(im, &q, n->out[0], P_SCORES);
}

/* Reshape to (N, -1) or (0, -1) is a flatten; to [B, L, H, d] before a head-splitting
 * Transpose, the start of an attention pattern; any other constant shape a reshape. */
static ck_status map_reshape(imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *s = n->n_in > 1 ? const_of(im, n->in[1]) : NULL;
    if (!s)
        return fail_node(im, "the target shape is computed from activations; export with "
                             "constant folding and static shapes");
    bool matched;
    CK_TRY(attn_reshape_in(im, n, s, &matched));
    if (matched)
        return CK_OK;
    if (s->numel == 2 && elem_f64(s, 1) == -1.0)
        return map_simple(im, n, "flatten", 1);
    if (s->numel < 1 || s->numel > CK_MAX_DIMS)
        return fail_node(im, "a target shape of %lld dims is not supported", (long long)s->numel);
    if (is_float_type(s->data_type))
        return fail_node(im, "the target shape is %s, not integers",
                         ck_onnx_type_name(s->data_type));
    int64_t dims[CK_MAX_DIMS];
    ck_shape in_shape = {0};
    bool have_shape = false;
    for (int64_t k = 0; k < s->numel; k++) {
        double v = elem_f64(s, k);
        if (v == 0.0 && !attr_int(n, "allowzero", 0)) { /* 0: the input's dim k */
            if (!have_shape)
                CK_TRY(value_shape(im, n->in[0], &in_shape));
            have_shape = true;
            if (k >= in_shape.ndim)
                return fail_node(im, "target dim %lld is 0 (copy the input's dim) but the input "
                                 "has %d dims", (long long)k, in_shape.ndim);
            v = (double)in_shape.dim[k];
        }
        if (!(v == -1.0 || (v >= 1.0 && v <= (double)CK_SIZE_CAP)))
            return fail_node(im, "target dim %lld is %.0f; only sizes and one -1 are supported "
                             "(0, copy the input's dim, is not)", (long long)k, v);
        dims[k] = (int64_t)v;
    }
    char name[CK_NAME_MAX + 1];
    CK_TRY(name_for(im, n, NULL, name));
    cJSON *L = NULL;
    CK_TRY(one_input_layer(im, name, "reshape", n->in[0], n->out[0], &L));
    return add_ints(L, "shape", dims, (int)s->numel) ? CK_OK : oom(im);
}

/* ---------------------------------------------------------------------------------- */
/* Node validation: a pre-pass over the whole graph before any pattern is matched      */
/* ---------------------------------------------------------------------------------- */

/* Inputs and outputs an op takes (ONNX operator specs, every opset the importer reads);
 * max -1 is variadic. The matchers below index in[] and out[] within these bounds only. */
static const struct node_arity {
    const char *op;
    int min_in, max_in, min_out, max_out;
} node_arities[] = {
    {"Add", 2, 2, 1, 1},        {"AveragePool", 1, 1, 1, 1},
    {"BatchNormalization", 5, 5, 1, 5}, {"Cast", 1, 1, 1, 1},
    {"Concat", 1, -1, 1, 1},    {"Constant", 0, 0, 1, 1},
    {"Conv", 2, 3, 1, 1},       {"ConvTranspose", 2, 3, 1, 1},
    {"Div", 2, 2, 1, 1},        {"Dropout", 1, 3, 1, 2},
    {"Erf", 1, 1, 1, 1},        {"Flatten", 1, 1, 1, 1},
    {"Gather", 2, 2, 1, 1},     {"Gelu", 1, 1, 1, 1},
    {"Gemm", 2, 3, 1, 1},       {"Identity", 1, 1, 1, 1},
    {"LayerNormalization", 2, 3, 1, 3}, {"LeakyRelu", 1, 1, 1, 1},
    {"MatMul", 2, 2, 1, 1},     {"MaxPool", 1, 1, 1, 2},
    {"Mul", 2, 2, 1, 1},        {"Pad", 1, 4, 1, 1},
    {"Pow", 2, 2, 1, 1},        {"Relu", 1, 1, 1, 1},
    {"Reshape", 1, 2, 1, 1},    {"Resize", 1, 4, 1, 1},
    {"Sigmoid", 1, 1, 1, 1},    {"Softmax", 1, 1, 1, 1},
    {"Sqrt", 1, 1, 1, 1},       {"Sub", 2, 2, 1, 1},
    {"Sum", 1, -1, 1, 1},       {"Tanh", 1, 1, 1, 1},
    {"Transpose", 1, 1, 1, 1},  {"Unsqueeze", 1, 2, 1, 1},
    {"Upsample", 1, 2, 1, 1},
};

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every node: a first output that is named, a known op's input and output counts within
 * its spec, required inputs present; every value produced once (by one node, or as a
 * graph input or initializer). Runs before any matcher, which may then read out[0] and
 * the inputs its arity row guarantees. */
static ck_status validate_nodes(imp *im)
{
    const ck_onnx_model *m = im->m;
    for (int i = 0; i < m->n_nodes; i++) {
        const ck_onnx_node *n = &m->nodes[i];
        im->node = n;
        if (n->n_out < 1 || !n->out[0][0])
            return fail_node(im, "has no output");
        /* a NaN or Inf attribute would reach the case as JSON null ("got null") */
        for (int a = 0; a < n->n_attr; a++) {
            const ck_onnx_attr *at = &n->attr[a];
            bool finite = at->type != CK_ONNX_ATTR_FLOAT || isfinite(at->f);
            for (int k = 0; finite && at->type == CK_ONNX_ATTR_FLOATS && k < at->n_floats; k++)
                finite = isfinite(at->floats[k]);
            if (!finite)
                return fail_node(im, "attribute `%s` holds %s", at->name,
                                 at->type == CK_ONNX_ATTR_FLOAT ? (isnan(at->f) ? "NaN" : "an Inf")
                                                                : "a NaN or an Inf");
        }
        for (size_t k = 0; k < sizeof node_arities / sizeof node_arities[0]; k++) {
            const struct node_arity *a = &node_arities[k];
            if (strcmp(a->op, n->op_type) != 0)
                continue;
            if (n->n_in < a->min_in || (a->max_in >= 0 && n->n_in > a->max_in)) {
                char want[48];
                if (a->max_in == a->min_in)
                    snprintf(want, sizeof want, "%d", a->min_in);
                else if (a->max_in < 0)
                    snprintf(want, sizeof want, "at least %d", a->min_in);
                else
                    snprintf(want, sizeof want, "%d to %d", a->min_in, a->max_in);
                return fail_node(im, "has %d inputs; %s takes %s", n->n_in, a->op, want);
            }
            if (n->n_out > a->max_out)
                return fail_node(im, "has %d outputs; %s gives at most %d", n->n_out, a->op,
                                 a->max_out);
            for (int j = 0; j < a->min_in; j++)
                if (!n->in[j][0])
                    return fail_node(im, "input %d is required but omitted", j + 1);
            break;
        }
    }
    im->node = NULL;
    size_t total = (size_t)m->n_inputs + (size_t)m->n_inits;
    for (int i = 0; i < m->n_nodes; i++)
        total += (size_t)m->nodes[i].n_out;
    const char **all = malloc((total ? total : 1) * sizeof *all);
    if (!all)
        return oom(im);
    size_t k = 0;
    for (int i = 0; i < m->n_inputs; i++)
        all[k++] = m->inputs[i].name;
    for (int i = 0; i < m->n_inits; i++) {
        bool is_input = false; /* an initializer may also be listed as a graph input */
        for (int j = 0; j < m->n_inputs && !is_input; j++)
            is_input = strcmp(m->inputs[j].name, m->inits[i].name) == 0;
        if (!is_input)
            all[k++] = m->inits[i].name;
    }
    for (int i = 0; i < m->n_nodes; i++)
        for (int j = 0; j < m->nodes[i].n_out; j++)
            if (m->nodes[i].out[j][0])
                all[k++] = m->nodes[i].out[j];
    qsort(all, k, sizeof *all, cmp_str_ptr);
    ck_status st = CK_OK;
    for (size_t j = 1; j < k && st == CK_OK; j++)
        if (strcmp(all[j - 1], all[j]) == 0)
            st = ck_fail(im->err, CK_ERR_INPUT, "%s: the value `%s` is produced more than once "
                         "(by two nodes, or by a node and a graph input or initializer)",
                         im->path, all[j]);
    free(all);
    return st;
}

/* ---------------------------------------------------------------------------------- */
/* Normalisation patterns: RMSNorm and GroupNorm as exporters spell them               */
/* ---------------------------------------------------------------------------------- */

static ck_status fold_more(imp *im, int idx, bool *done);
static struct pend *pend_of(const imp *im, const char *value);

/* A constant, folding the nodes that compute it now when they come later in the file (a
 * pattern reads a weight's Unsqueeze, a Shape, before the loop reaches them). *out NULL:
 * not a constant. */
static ck_status const_ahead(imp *im, const char *value, int depth, const ck_onnx_tensor **out)
{
    *out = const_of(im, value);
    if (*out || depth > 16 || !value[0])
        return CK_OK;
    for (int i = 0; i < im->m->n_nodes; i++) {
        const ck_onnx_node *p = &im->m->nodes[i];
        if (im->folded[i] || p->n_out < 1 || strcmp(p->out[0], value) != 0)
            continue;
        for (int k = 0; k < p->n_in; k++) {
            const ck_onnx_tensor *c;
            if (p->in[k][0] && !layer_of(im, p->in[k]) &&
                (const_ahead(im, p->in[k], depth + 1, &c) != CK_OK || !c))
                return CK_OK;
        }
        const ck_onnx_node *saved = im->node;
        bool done = false;
        im->node = p;
        ck_status st = fold_more(im, i, &done);
        im->node = saved;
        CK_TRY(st);
        if (done)
            im->folded[i] = true;
        *out = const_of(im, value);
        return CK_OK;
    }
    return CK_OK;
}

/* A float constant whose every element equals want. */
static bool const_all(const imp *im, const char *value, double want)
{
    const ck_onnx_tensor *c = const_of(im, value);
    if (!c || !is_float_type(c->data_type) || c->numel < 1)
        return false;
    for (int64_t i = 0; i < c->numel; i++)
        if (elem_f64(c, i) != want)
            return false;
    return true;
}

/* The input of binary node idx that is not `a` (which it must read), or NULL. */
static const char *other_input(const imp *im, int idx, const char *op_type, const char *a)
{
    if (idx < 0)
        return NULL;
    const ck_onnx_node *n = &im->m->nodes[idx];
    if (strcmp(n->op_type, op_type) != 0 || n->n_in != 2 || n->n_out < 1)
        return NULL;
    return strcmp(n->in[0], a) == 0 ? n->in[1] : strcmp(n->in[1], a) == 0 ? n->in[0] : NULL;
}

/* RMSNorm written out (Llama's): Pow(x, 2) → ReduceMean(last axis, keepdims) → Add(eps) →
 * Sqrt → Reciprocal or Div(1, ·) → Mul(x, ·) → Mul(·, weight of the last dim), every value
 * in between read by the next node only. */
static ck_status match_rmsnorm(imp *im, int idx, bool *matched)
{
    const ck_onnx_node *n = &im->m->nodes[idx];
    *matched = false;
    if (n->n_in != 2 || !scalar_is(im, n->in[1], 2.0) || !layer_of(im, n->in[0]))
        return CK_OK;
    const char *x = n->in[0];
    int chain[7], len = 0;
    chain[len++] = idx;
    int rm = sole_reader(im, n->out[0]);
    if (rm < 0 || strcmp(im->m->nodes[rm].op_type, "ReduceMean") != 0 ||
        attr_int(&im->m->nodes[rm], "keepdims", 1) != 1)
        return CK_OK;
    const ck_onnx_node *r = &im->m->nodes[rm];
    const ck_onnx_attr *axes = ck_onnx_attr_find(r, "axes");
    const ck_onnx_tensor *axes_c = r->n_in > 1 ? const_of(im, r->in[1]) : NULL;
    int64_t axis = axes && axes->n_ints == 1 ? axes->ints[0]
                   : axes_c && axes_c->numel == 1 ? elem_i64(axes_c, 0) : 99;
    ck_shape xs;
    CK_TRY(value_shape(im, x, &xs));
    if (axis != -1 && axis != xs.ndim - 1)
        return CK_OK;
    chain[len++] = rm;
    int ad = sole_reader(im, r->out[0]);
    const char *eps_v = other_input(im, ad, "Add", r->out[0]);
    const ck_onnx_tensor *eps = eps_v ? const_of(im, eps_v) : NULL;
    if (!eps || eps->numel != 1 || !is_float_type(eps->data_type) || !(elem_f64(eps, 0) > 0))
        return CK_OK;
    chain[len++] = ad;
    int sq = sole_reader(im, im->m->nodes[ad].out[0]);
    if (sq < 0 || strcmp(im->m->nodes[sq].op_type, "Sqrt") != 0)
        return CK_OK;
    chain[len++] = sq;
    const char *cur = im->m->nodes[sq].out[0];
    int rc = sole_reader(im, cur);
    if (rc < 0)
        return CK_OK;
    const ck_onnx_node *rn = &im->m->nodes[rc];
    bool recip = strcmp(rn->op_type, "Reciprocal") == 0 ||
                 (strcmp(rn->op_type, "Div") == 0 && rn->n_in == 2 &&
                  strcmp(rn->in[1], cur) == 0 && scalar_is(im, rn->in[0], 1.0));
    if (!recip)
        return CK_OK;
    chain[len++] = rc;
    int m1 = sole_reader(im, rn->out[0]);
    if (!binary_of(im, m1, "Mul", x, rn->out[0]))
        return CK_OK;
    chain[len++] = m1;
    int m2 = sole_reader(im, im->m->nodes[m1].out[0]);
    const char *w_v = other_input(im, m2, "Mul", im->m->nodes[m1].out[0]);
    const ck_onnx_tensor *W = w_v ? const_of(im, w_v) : NULL;
    if (!W || W->ndim != 1 || W->dims[0] != xs.dim[xs.ndim - 1] || !is_float_type(W->data_type))
        return CK_OK;
    chain[len++] = m2;
    char name[CK_NAME_MAX + 1];
    CK_TRY(name_for(im, n, w_v, name));
    cJSON *L = NULL;
    CK_TRY(one_input_layer(im, name, "rmsnorm", x, im->m->nodes[m2].out[0], &L));
    if (!add_ints(L, "normalized_shape", W->dims, 1) ||
        !cJSON_AddNumberToObject(L, "eps", float_decimal(elem_f64(eps, 0))))
        return oom(im);
    CK_TRY(add_weight(im, name, "weight", W, false));
    for (int i = 1; i < len; i++)
        im->folded[chain[i]] = true;
    *matched = true;
    return CK_OK;
}

/* GroupNorm as PyTorch exports it: Reshape(x, [N or 0, G, -1]) → InstanceNormalization
 * (scale 1, bias 0 over the G groups) → Reshape back to x's shape → Mul(·, weight (C, 1..))
 * → Add(·, bias (C, 1..)), every value in between read by the next node only. */
static ck_status match_groupnorm(imp *im, int idx, bool *matched)
{
    const ck_onnx_node *n = &im->m->nodes[idx];
    *matched = false;
    const ck_onnx_tensor *t = n->n_in == 2 ? const_of(im, n->in[1]) : NULL;
    if (!t || t->numel != 3 || elem_f64(t, 2) != -1.0 || !layer_of(im, n->in[0]))
        return CK_OK;
    ck_shape xs;
    CK_TRY(value_shape(im, n->in[0], &xs));
    int64_t G = elem_i64(t, 1), C = xs.ndim >= 2 ? xs.dim[1] : 0;
    if (xs.ndim < 3 || G < 1 || C % G != 0 ||
        (elem_f64(t, 0) != 0.0 && elem_f64(t, 0) != (double)xs.dim[0]))
        return CK_OK;
    int in_ = sole_reader(im, n->out[0]);
    if (in_ < 0 || strcmp(im->m->nodes[in_].op_type, "InstanceNormalization") != 0)
        return CK_OK;
    const ck_onnx_node *inn = &im->m->nodes[in_];
    if (inn->n_in != 3 || !const_all(im, inn->in[1], 1.0) || !const_all(im, inn->in[2], 0.0) ||
        const_of(im, inn->in[1])->numel != G)
        return CK_OK;
    int rb = sole_reader(im, inn->out[0]);
    if (rb < 0 || strcmp(im->m->nodes[rb].op_type, "Reshape") != 0)
        return CK_OK;
    const ck_onnx_tensor *back = NULL;
    if (im->m->nodes[rb].n_in == 2)
        CK_TRY(const_ahead(im, im->m->nodes[rb].in[1], 0, &back));
    if (!back || back->numel != xs.ndim)
        return CK_OK;
    for (int d = 0; back && d < xs.ndim; d++)
        if (elem_f64(back, d) != (double)xs.dim[d] && !(d == 0 && elem_f64(back, d) == 0.0))
            return CK_OK;
    int mu = sole_reader(im, im->m->nodes[rb].out[0]);
    const char *w_v = other_input(im, mu, "Mul", im->m->nodes[rb].out[0]);
    int ad = mu >= 0 ? sole_reader(im, im->m->nodes[mu].out[0]) : -1;
    const char *b_v = ad >= 0 ? other_input(im, ad, "Add", im->m->nodes[mu].out[0]) : NULL;
    const ck_onnx_tensor *W = NULL, *B = NULL;
    if (w_v && b_v) { /* folding may move the constants: look both up afterwards */
        CK_TRY(const_ahead(im, w_v, 0, &W));
        CK_TRY(const_ahead(im, b_v, 0, &B));
        W = const_of(im, w_v);
        B = const_of(im, b_v);
    }
    if (!W || !B || W->numel != C || B->numel != C || W->ndim != xs.ndim - 1 ||
        B->ndim != xs.ndim - 1 || !is_float_type(W->data_type) || !is_float_type(B->data_type))
        return CK_OK;
    char name[CK_NAME_MAX + 1];
    CK_TRY(name_for(im, n, alias_source(im, w_v) ? w_v : NULL, name));
    cJSON *L = NULL;
    CK_TRY(one_input_layer(im, name, "groupnorm", n->in[0], im->m->nodes[ad].out[0], &L));
    if (!cJSON_AddNumberToObject(L, "groups", (double)G) ||
        !cJSON_AddNumberToObject(L, "eps", float_decimal(attr_float(inn, "epsilon", 1e-5))))
        return oom(im);
    ck_onnx_tensor w1 = *W, b1 = *B; /* (C, 1, ..) as the case's (C) */
    w1.ndim = b1.ndim = 1;
    w1.dims[0] = b1.dims[0] = C;
    CK_TRY(add_weight(im, name, "weight", &w1, false));
    CK_TRY(add_weight(im, name, "bias", &b1, false));
    im->folded[in_] = im->folded[rb] = im->folded[mu] = im->folded[ad] = true;
    *matched = true;
    return CK_OK;
}

/* The normalisation patterns starting at node i (Pow: RMSNorm, Reshape: GroupNorm). */
static ck_status match_norm(imp *im, int i, bool *matched)
{
    const char *op = im->m->nodes[i].op_type;
    *matched = false;
    if (strcmp(op, "Pow") == 0)
        return match_rmsnorm(im, i, matched);
    if (strcmp(op, "Reshape") == 0)
        return match_groupnorm(im, i, matched);
    return CK_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Constant folding                                                                    */
/* ---------------------------------------------------------------------------------- */

/* Exporters compute small constants in the graph (Resize's scales as a Concat of two
 * Constants, Unsqueeze/Cast of scalars). A node of these kinds whose inputs are all
 * constants is evaluated here and becomes a constant itself. */
static ck_status fold_node(imp *im, int idx, bool *done)
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
        const ck_onnx_tensor *c = const_of(im, n->in[0]);
        const ck_onnx_attr *pa = ck_onnx_attr_find(n, "perm");
        if (!c || c->ndim != 2 || (pa && (pa->n_ints != 2 || pa->ints[0] != 1 || pa->ints[1] != 0)))
            return CK_OK;
    }
    const ck_onnx_tensor *in[CK_ONNX_MAX_IO];
    int64_t total = 0;
    for (int k = 0; k < n->n_in; k++) {
        if (!(in[k] = const_of(im, n->in[k])))
            return CK_OK; /* reads an activation: mapped as a layer, if it can be */
        total += in[k]->numel;
    }
    if (unsq || cast || ident || transp) /* input 0's data (Unsqueeze's axes are ignored) */
        total = in[0]->numel;
    int type = in[0]->data_type;
    if (cast) {
        int to = (int)attr_int(n, "to", 0);
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
        return oom(im);
    im->consts = g;
    for (int k = 0; k < n->n_in; k++) /* inputs folded earlier moved with the array */
        in[k] = const_of(im, n->in[k]);
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
        return oom(im);
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
            double v = elem_f64(in[0], i);
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
        return oom(im);
    }
    im->consts = g;
    g[im->n_consts++] = *t;
    return CK_OK;
}

static ck_status add_alias(imp *im, const char *value, const char *source)
{
    char **a = realloc(im->alias_of, (size_t)(im->n_alias + 1) * sizeof *a);
    if (!a)
        return oom(im);
    im->alias_of = a;
    char **b = realloc(im->alias_src, (size_t)(im->n_alias + 1) * sizeof *b);
    if (!b)
        return oom(im);
    im->alias_src = b;
    a[im->n_alias] = strdup(value);
    b[im->n_alias] = strdup(source);
    if (!a[im->n_alias] || !b[im->n_alias]) {
        free(a[im->n_alias]);
        free(b[im->n_alias]);
        return oom(im);
    }
    im->n_alias++;
    return CK_OK;
}

/* The initializer a constant is (itself, or the one it was folded from without changing
 * its data), or NULL. */
static const char *alias_source(const imp *im, const char *value)
{
    if (ck_onnx_init_find(im->m, value))
        return value;
    for (int i = 0; i < im->n_alias; i++)
        if (strcmp(im->alias_of[i], value) == 0)
            return im->alias_src[i];
    return NULL;
}

/* The shape the case gives the layer producing `value`. */
static ck_status value_shape(imp *im, const char *value, ck_shape *out)
{
    const char *layer = layer_of(im, value);
    if (!layer)
        return fail_node(im, "input `%s` is produced by no supported node", value);
    return ck_onnx_layer_shape(&im->shapes, im->input_json, im->layers, layer, im->path, out,
                               im->err);
}

/* Gather(initializer W, indices 0, 1, ..., rows - 1) along axis 0 is W itself. */
static bool gathers_every_row(const imp *im, const ck_onnx_node *n)
{
    const ck_onnx_tensor *W = ck_onnx_init_find(im->m, n->in[0]);
    const ck_onnx_tensor *ix = const_of(im, n->in[1]);
    if (!W || !ix || W->ndim < 1 || ix->numel != W->dims[0] || ix->ndim != 1 ||
        attr_int(n, "axis", 0) != 0)
        return false;
    for (int64_t i = 0; i < ix->numel; i++)
        if (elem_f64(ix, i) != (double)i)
            return false;
    return true;
}

static ck_status fold_more(imp *im, int idx, bool *done)
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
    if (strcmp(n->op_type, "Shape") == 0 && layer_of(im, n->in[0])) {
        ck_shape sh;
        CK_TRY(value_shape(im, n->in[0], &sh));
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
            if (n->in[k][0] && !(in[k] = const_of(im, n->in[k])))
                return CK_OK; /* reads an activation: mapped as a layer, if it can be */
    }
    ck_status st = ck_onnx_fold_eval(n, im->m->opset, in, n->n_in, &out, &handled, why,
                                     sizeof why);
    if (st == CK_ERR_INPUT)
        return fail_node(im, "folding constants: %s", why);
    if (st != CK_OK)
        return oom(im);
    if (!handled)
        return CK_OK;
    const char *src = alias_source(im, n->in[0]);
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

/* ---------------------------------------------------------------------------------- */
/* The graph                                                                           */
/* ---------------------------------------------------------------------------------- */

static ck_status map_node(imp *im, int i)
{
    const ck_onnx_node *n = &im->m->nodes[i];
    const char *op = n->op_type;
    im->node = n;
    if (n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
        return fail_node(im, "domain `%s` is not supported", n->domain);
    if (n->n_out < 1 || !n->out[0][0])
        return fail_node(im, "has no output");
    if (strcmp(op, "Constant") == 0)
        return CK_OK; /* read through const_of */
    if (strcmp(op, "Where") == 0 && n->n_in == 3 && pend_of(im, n->in[2]))
        return attn_where(im, n, pend_of(im, n->in[2]));
    struct pend *p0 = n->n_in > 0 ? pend_of(im, n->in[0]) : NULL;
    struct pend *p1 = n->n_in > 1 ? pend_of(im, n->in[1]) : NULL;
    if (p0 || p1)
        return attn_step(im, i, n, p0, p1);
    bool matched;
    CK_TRY(match_norm(im, i, &matched));
    if (matched)
        return CK_OK;
    if (strcmp(op, "Mul") == 0 || strcmp(op, "Div") == 0) {
        CK_TRY(match_gelu(im, i, &matched));
        if (matched)
            return CK_OK;
        if (op[0] == 'M' && n->n_in == 2 && layer_of(im, n->in[0]) && layer_of(im, n->in[1]))
            return map_simple(im, n, "mul", 2);
        return fail_node(im, "only a product of two activations (mul) or the GELU patterns "
                             "are supported; scaling by a constant is not");
    }
    if (strcmp(op, "Sigmoid") == 0) { /* Mul(x, Sigmoid(x)) is SiLU */
        int r = sole_reader(im, n->out[0]);
        if (n->n_in == 1 && binary_of(im, r, "Mul", n->in[0], n->out[0])) {
            char name[CK_NAME_MAX + 1];
            CK_TRY(scoped_name(im, n, "silu", name));
            CK_TRY(one_input_layer(im, name, "silu", n->in[0], im->m->nodes[r].out[0], NULL));
            im->folded[r] = true;
            return CK_OK;
        }
        return map_simple(im, n, "sigmoid", 1);
    }
    if (strcmp(op, "MatMul") == 0 && n->n_in == 2 && !const_of(im, n->in[1]))
        return map_simple(im, n, "matmul", 2);
    if (strcmp(op, "Gather") == 0 || strcmp(op, "Split") == 0 || strcmp(op, "Slice") == 0)
        return map_slicing(im, n);
    if (strcmp(op, "LayerNormalization") == 0)
        return map_layernorm(im, n);
    if (strcmp(op, "ConvTranspose") == 0)
        return map_conv_transpose(im, n);
    if ((strcmp(op, "Softmax") == 0 || strcmp(op, "Transpose") == 0) && n->n_in != 1)
        return fail_node(im, "expected 1 input, got %d", n->n_in);
    if (strcmp(op, "Softmax") == 0) {
        if (im->m->opset < 13)
            return fail_node(im, "Softmax before opset 13 flattens to 2-D; export with opset "
                                 ">= 13");
        char name[CK_NAME_MAX + 1];
        CK_TRY(name_for(im, n, NULL, name));
        cJSON *L = NULL;
        CK_TRY(one_input_layer(im, name, "softmax", n->in[0], n->out[0], &L));
        return cJSON_AddNumberToObject(L, "dim", (double)attr_int(n, "axis", -1)) ? CK_OK
                                                                                 : oom(im);
    }
    if (strcmp(op, "Transpose") == 0) {
        const ck_onnx_attr *pa = ck_onnx_attr_find(n, "perm");
        if (!pa || pa->n_ints < 2 || pa->n_ints > CK_MAX_DIMS)
            return fail_node(im, "perm must be given (2 to %d dims)", CK_MAX_DIMS);
        char name[CK_NAME_MAX + 1];
        CK_TRY(name_for(im, n, NULL, name));
        cJSON *L = NULL;
        CK_TRY(one_input_layer(im, name, "permute", n->in[0], n->out[0], &L));
        return add_ints(L, "dims", pa->ints, pa->n_ints) ? CK_OK : oom(im);
    }
    if (strcmp(op, "Identity") == 0) {
        const char *src = n->n_in ? layer_of(im, n->in[0]) : NULL;
        if (!src)
            return const_of(im, n->n_in ? n->in[0] : NULL)
                       ? fail_node(im, "an identity of a constant is not supported")
                       : fail_node(im, "its input is produced by no supported node");
        return bind(im, n->out[0], src);
    }
    if (strcmp(op, "Conv") == 0)
        return map_conv(im, n);
    if (strcmp(op, "Gemm") == 0 || strcmp(op, "MatMul") == 0)
        return map_linear(im, i, n);
    if (strcmp(op, "BatchNormalization") == 0)
        return map_batchnorm(im, n);
    if (strcmp(op, "Relu") == 0)
        return map_simple(im, n, "relu", 1);
    const char *fn = unary_op(op);
    if (fn)
        return n->n_in == 1 ? map_simple(im, n, fn, 1)
                            : fail_node(im, "expected 1 input, got %d", n->n_in);
    if ((strcmp(op, "Unsqueeze") == 0 || strcmp(op, "Squeeze") == 0) && n->n_in >= 1 &&
        layer_of(im, n->in[0]))
        return map_squeeze(im, i, n);
    if (strcmp(op, "LeakyRelu") == 0)
        return map_simple(im, n, "leaky_relu", 1);
    if (strcmp(op, "Tanh") == 0)
        return map_simple(im, n, "tanh", 1);
    if (strcmp(op, "Sigmoid") == 0)
        return map_simple(im, n, "sigmoid", 1);
    if (strcmp(op, "Gelu") == 0) {
        const ck_onnx_attr *ap = ck_onnx_attr_find(n, "approximate");
        if (ap && ap->s && strcmp(ap->s, "none") != 0)
            return fail_node(im, "approximate=%s is not supported yet", ap->s);
        return map_simple(im, n, "gelu", 1);
    }
    if (strcmp(op, "MaxPool") == 0 || strcmp(op, "AveragePool") == 0)
        return map_pool(im, n, op[0] == 'M');
    if (strcmp(op, "GlobalAveragePool") == 0 || strcmp(op, "GlobalMaxPool") == 0)
        return map_global_pool(im, n, op[6] == 'M');
    if (strcmp(op, "Resize") == 0 || strcmp(op, "Upsample") == 0)
        return map_resize(im, n);
    if (strcmp(op, "Dropout") == 0)
        return map_dropout(im, n);
    if (strcmp(op, "Flatten") == 0) {
        if (attr_int(n, "axis", 1) != 1)
            return fail_node(im, "axis %lld is not supported (only 1)",
                             (long long)attr_int(n, "axis", 1));
        return map_simple(im, n, "flatten", 1);
    }
    if (strcmp(op, "Reshape") == 0)
        return map_reshape(im, n);
    if (strcmp(op, "Pad") == 0)
        return map_pad(im, n);
    if (strcmp(op, "Add") == 0 || strcmp(op, "Sum") == 0) {
        if (n->n_in < 2 || n->n_in > 8)
            return fail_node(im, "adds %d inputs; 2 to 8 are supported", n->n_in);
        if (n->n_in == 2 && op[0] == 'A') {
            const ck_onnx_tensor *c0 = const_of(im, n->in[0]), *c1 = const_of(im, n->in[1]);
            if (c0 && !c1)
                return map_positional(im, n, n->in[1], c0);
            if (c1 && !c0)
                return map_positional(im, n, n->in[0], c1);
        }
        return map_simple(im, n, "add", n->n_in);
    }
    if (strcmp(op, "Concat") == 0) {
        if (attr_int(n, "axis", 0) != 1)
            return fail_node(im, "axis %lld is not supported (only the channels, 1)",
                             (long long)attr_int(n, "axis", 0));
        if (n->n_in < 2 || n->n_in > 8)
            return fail_node(im, "joins %d inputs; 2 to 8 are supported", n->n_in);
        return map_simple(im, n, "concat", n->n_in);
    }
    return fail_node(im, "op type %s is not supported (docs/onnx.md lists the supported ops)",
                     op);
}

/* The one activation input: a graph input that is not an initializer. */
static ck_status find_input(imp *im, const ck_onnx_value **in, int64_t *vocab)
{
    *in = NULL;
    for (int i = 0; i < im->m->n_inputs; i++) {
        const ck_onnx_value *v = &im->m->inputs[i];
        if (ck_onnx_init_find(im->m, v->name))
            continue;
        if (*in)
            return ck_fail(im->err, CK_ERR_INPUT, "%s: the model has more than one input (`%s`, "
                           "`%s`); a case has one", im->path, (*in)->name, v->name);
        *in = v;
    }
    if (!*in)
        return ck_fail(im->err, CK_ERR_INPUT, "%s: the model has no input", im->path);
    const ck_onnx_value *v = *in;
    *vocab = 0;
    if (v->elem_type == CK_ONNX_INT64 || v->elem_type == CK_ONNX_INT32) {
        /* token ids: read by an embedding (Gather of a weight's rows), whose rows are the
         * vocabulary */
        for (int i = 0; i < im->m->n_nodes && !*vocab; i++) {
            const ck_onnx_node *n = &im->m->nodes[i];
            const ck_onnx_tensor *W = n->n_in == 2 ? const_of(im, n->in[0]) : NULL;
            if (W && strcmp(n->op_type, "Gather") == 0 && strcmp(n->in[1], v->name) == 0 &&
                W->ndim == 2 && W->dims[0] >= 1 && W->dims[0] <= INT32_MAX)
                *vocab = W->dims[0];
        }
        if (!*vocab)
            return ck_fail(im->err, CK_ERR_INPUT, "%s: input `%s` is %s and no embedding "
                           "(Gather of a constant 2-D weight) reads it; an integer input must "
                           "be token ids", im->path, v->name, ck_onnx_type_name(v->elem_type));
    } else if (v->elem_type != CK_ONNX_FLOAT) {
        return ck_fail(im->err, CK_ERR_INPUT, "%s: input `%s` is %s; only float inputs and "
                       "integer token ids are supported", im->path, v->name,
                       ck_onnx_type_name(v->elem_type));
    }
    if (v->ndim < 2)
        return ck_fail(im->err, CK_ERR_INPUT, "%s: input `%s` has no static shape of rank >= 2",
                       im->path, v->name);
    for (int d = 0; d < v->ndim; d++) {
        if (v->dims[d] == 0)
            return ck_fail(im->err, CK_ERR_INPUT, "%s: input `%s` dim %d is 0: an empty input "
                           "trains nothing", im->path, v->name, d);
        if (v->dims[d] < 0)
            return ck_fail(im->err, CK_ERR_INPUT, "%s: input `%s` dim %d is symbolic; export "
                           "with a fixed input shape", im->path, v->name, d);
    }
    return CK_OK;
}

/* cross_entropy's class dim when --class-dim is not given (onnx_import.h). */
static int infer_class_dim(const imp *im, const ck_onnx_value *in, bool tokens)
{
    if (tokens)
        return -1;
    const ck_onnx_value *out = &im->m->outputs[0];
    if (out->ndim == 3 && in->ndim >= 2 && out->dims[0] == in->dims[0] &&
        out->dims[1] == in->dims[1] && out->dims[1] > 0)
        return -1;
    return 1;
}

static ck_status add_loss(imp *im, cJSON *root, const ck_onnx_import_opts *o,
                          const ck_onnx_value *in, bool tokens)
{
    const char *kind = o->loss ? o->loss : "mean";
    cJSON *loss = cJSON_AddObjectToObject(root, "loss");
    if (!loss || !cJSON_AddStringToObject(loss, "op", kind))
        return oom(im);
    bool ce = strcmp(kind, "cross_entropy") == 0;
    if (!ce && (o->has_class_dim || o->has_ignore_index))
        return ck_fail(im->err, CK_ERR_INPUT, "--%s applies to --loss cross_entropy only",
                       o->has_class_dim ? "class-dim" : "ignore-index");
    if (!ce)
        return CK_OK;
    int cd = o->has_class_dim ? o->class_dim : infer_class_dim(im, in, tokens);
    if (!cJSON_AddNumberToObject(loss, "class_dim", cd) ||
        (o->has_ignore_index && !cJSON_AddNumberToObject(loss, "ignore_index",
                                                          (double)o->ignore_index)))
        return oom(im);
    return CK_OK;
}

static ck_status add_settings(imp *im, cJSON *root, const ck_onnx_import_opts *o,
                              const ck_onnx_value *in, bool tokens)
{
    CK_TRY(add_loss(im, root, o, in, tokens));
    if (o->optimizer || o->lr > 0 || o->steps > 0) {
        cJSON *tr = cJSON_AddObjectToObject(root, "train");
        if (!tr || (o->optimizer && !cJSON_AddStringToObject(tr, "optimizer", o->optimizer)) ||
            (o->lr > 0 && !cJSON_AddNumberToObject(tr, "lr", o->lr)) ||
            (o->steps > 0 && !cJSON_AddNumberToObject(tr, "steps", o->steps)))
            return oom(im);
    }
    const char *ck = o->checkpoint ? o->checkpoint : "sqrt";
    cJSON *cp = cJSON_AddObjectToObject(root, "checkpoint");
    if (!cp)
        return oom(im);
    if (strcmp(ck, "sqrt") == 0) {
        if (!cJSON_AddStringToObject(cp, "policy", "sqrt"))
            return oom(im);
    } else if (strncmp(ck, "every:", 6) == 0) {
        char *end = NULL;
        long k = strtol(ck + 6, &end, 10);
        if (!end || *end || k < 1 || k > CK_SIZE_CAP)
            return ck_fail(im->err, CK_ERR_INPUT, "--checkpoint %s: expected every:K with K >= 1",
                           ck);
        if (!cJSON_AddNumberToObject(cp, "every", (double)k))
            return oom(im);
    } else if (strncmp(ck, "segments:", 9) == 0) {
        cJSON *segs = cJSON_AddArrayToObject(cp, "segments");
        if (!segs)
            return oom(im);
        char buf[2048];
        snprintf(buf, sizeof buf, "%s", ck + 9);
        for (char *save = NULL, *s = strtok_r(buf, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
            char *dots = strstr(s, "..");
            if (!dots || dots == s || !dots[2])
                return ck_fail(im->err, CK_ERR_INPUT, "--checkpoint: segment \"%s\": expected "
                               "FIRST..LAST (layer names)", s);
            *dots = '\0';
            cJSON *pair = cJSON_CreateArray();
            if (!pair || !cJSON_AddItemToArray(segs, pair) ||
                !cJSON_AddItemToArray(pair, cJSON_CreateString(s)) ||
                !cJSON_AddItemToArray(pair, cJSON_CreateString(dots + 2)))
                return oom(im);
        }
    } else {
        return ck_fail(im->err, CK_ERR_INPUT, "--checkpoint %s: expected sqrt, every:K or "
                       "segments:FIRST..LAST,...", ck);
    }
    if (o->weights_path) {
        cJSON *init = cJSON_AddObjectToObject(root, "init");
        if (!init || !cJSON_AddStringToObject(init, "from", o->weights_path))
            return oom(im);
    }
    if (o->precision && !cJSON_AddStringToObject(root, "precision", o->precision))
        return oom(im);
    return CK_OK;
}

ck_status ck_onnx_import(const ck_onnx_model *m, const char *path, const ck_onnx_import_opts *o,
                         cJSON **case_json, ck_tensorset *weights, ck_error *err)
{
    static const ck_onnx_import_opts none = {0};
    o = o ? o : &none;
    imp im = {.m = m, .path = path, .err = err, .w = weights, .origins = o->origins};
    ck_onnx_shape_cache_init(&im.shapes);
    *case_json = NULL;
    ck_tensorset_init(weights);
    if (o->origins)
        memset(o->origins, 0, sizeof *o->origins);
    ck_status st = CK_OK;
    const ck_onnx_tensor *pending = ck_onnx_external_pending(m);
    if (pending)
        return ck_error_one_line(
            err, ck_fail(err, CK_ERR_INPUT, "%s: tensor `%s`: its external data (`%s`) was not "
                         "loaded", path, pending->name, pending->ext_location));
    cJSON *root = cJSON_CreateObject();
    im.folded = calloc((size_t)m->n_nodes + 1, sizeof *im.folded);
    im.file = ck_tensorset_keep_string(weights, path);
    if (!root || !im.folded || !im.file) {
        st = oom(&im);
        goto out;
    }
    const ck_onnx_value *in;
    int64_t vocab = 0;
    if ((st = find_input(&im, &in, &vocab)) != CK_OK)
        goto out;
    if (m->n_outputs != 1) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: the model has %d outputs; a case has one (the loss "
                     "reads it)", path, m->n_outputs);
        goto out;
    }
    char desc[512];
    snprintf(desc, sizeof desc, "imported from %s (%s, ONNX IR %lld, opset %lld)", path,
             m->producer[0] ? m->producer : "unknown producer", (long long)m->ir_version,
             (long long)m->opset);
    cJSON *input = NULL;
    if (!cJSON_AddStringToObject(root, "name", o->name ? o->name : "onnx_model") ||
        !cJSON_AddStringToObject(root, "description", desc) ||
        !(input = cJSON_AddObjectToObject(root, "input")) ||
        !add_ints(input, "shape", in->dims, in->ndim) ||
        !cJSON_AddStringToObject(input, "dist", vocab ? "tokens" : "normal") ||
        (vocab && !cJSON_AddNumberToObject(input, "vocab", (double)vocab)) ||
        !(im.layers = cJSON_AddArrayToObject(root, "layers"))) {
        st = oom(&im);
        goto out;
    }
    im.input_json = input;
    if ((st = validate_nodes(&im)) != CK_OK || (st = bind(&im, in->name, "input")) != CK_OK)
        goto out;
    for (int i = 0; i < m->n_nodes && st == CK_OK; i++) {
        if (im.folded[i])
            continue;
        bool done = false;
        im.node = &m->nodes[i];
        if ((st = fold_more(&im, i, &done)) == CK_OK && !done &&
            (st = fold_node(&im, i, &done)) == CK_OK && !done)
            st = map_node(&im, i);
    }
    if (st != CK_OK)
        goto out;
    im.node = NULL;
    const char *last = layer_of(&im, m->outputs[0].name);
    int n_layers = cJSON_GetArraySize(im.layers);
    if (!last || n_layers == 0 || strcmp(last, "input") == 0) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: the output `%s` is produced by no layer", path,
                     m->outputs[0].name);
        goto out;
    }
    const cJSON *tail = cJSON_GetArrayItem(im.layers, n_layers - 1);
    const char *tail_name = cJSON_GetObjectItem(tail, "name")->valuestring;
    if (strcmp(tail_name, last) != 0) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: the output `%s` comes from layer `%s`, not the last "
                     "layer `%s`: nodes after it are not read by the output", path,
                     m->outputs[0].name, last, tail_name);
        goto out;
    }
    st = add_settings(&im, root, o, in, vocab != 0);
out:
    for (int i = 0; i < im.n_vals; i++) {
        free(im.val_name[i]);
        free(im.val_layer[i]);
    }
    free(im.val_name);
    free(im.val_layer);
    for (int i = 0; i < im.n_names; i++)
        free(im.names[i]);
    free(im.names);
    free(im.folded);
    for (int i = 0; i < im.n_consts; i++) {
        free(im.consts[i].name);
        free(im.consts[i].data);
    }
    free(im.consts);
    for (int i = 0; i < im.n_alias; i++) {
        free(im.alias_of[i]);
        free(im.alias_src[i]);
    }
    free(im.alias_of);
    free(im.alias_src);
    ck_onnx_shape_cache_free(&im.shapes);
    for (int i = 0; i < im.n_pend; i++)
        free(im.pend[i].value);
    free(im.pend);
    if (st != CK_OK) {
        ck_error_one_line(err, st); /* names from the file may hold control characters */
        ck_onnx_origins_free(o->origins);
        cJSON_Delete(root);
        ck_tensorset_free(weights);
        ck_tensorset_init(weights);
        return st;
    }
    *case_json = root;
    return CK_OK;
}
