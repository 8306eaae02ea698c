/*
 * Case layers as JSON objects: a new layer, its inputs (the layers producing the node's
 * activation inputs), integer lists; and the node attributes the mappings read.
 */
#include "harness/model/onnx_import_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cJSON *imp_new_layer(imp *im, const char *name, const char *op)
{
    cJSON *L = cJSON_CreateObject();
    if (!L || !cJSON_AddStringToObject(L, "name", name) || !cJSON_AddStringToObject(L, "op", op) ||
        !cJSON_AddItemToArray(im->layers, L)) {
        cJSON_Delete(L);
        return NULL;
    }
    return L;
}

bool imp_add_ints(cJSON *L, const char *key, const int64_t *v, int n)
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
ck_status imp_set_inputs(imp *im, cJSON *L, const ck_onnx_node *n, const int *idx, int k)
{
    cJSON *a = cJSON_CreateArray();
    if (!a || !cJSON_AddItemToObject(L, "inputs", a)) {
        cJSON_Delete(a);
        return imp_oom(im);
    }
    for (int i = 0; i < k; i++) {
        const char *v = idx[i] < n->n_in ? n->in[idx[i]] : "";
        const char *src = imp_layer_of(im, v);
        if (!src) {
            if (imp_pend_of(im, v))
                return imp_fail_node(im,
                                     "reads `%s`, a value inside a causal attention pattern "
                                     "(docs/onnx.md), in a way the pattern does not allow",
                                     v);
            if (imp_const_of(im, v))
                return imp_fail_node(im,
                                     "input `%s` is a constant tensor; the case's ops take "
                                     "activations there",
                                     v);
            return imp_fail_node(im, "input `%s` is produced by no supported node", v);
        }
        cJSON *s = cJSON_CreateString(src);
        if (!s || !cJSON_AddItemToArray(a, s)) {
            cJSON_Delete(s);
            return imp_oom(im);
        }
    }
    return CK_OK;
}

int64_t imp_attr_int(const ck_onnx_node *n, const char *name, int64_t dflt)
{
    const ck_onnx_attr *a = ck_onnx_attr_find(n, name);
    return a ? a->i : dflt;
}

double imp_attr_float(const ck_onnx_node *n, const char *name, double dflt)
{
    const ck_onnx_attr *a = ck_onnx_attr_find(n, name);
    return a ? a->f : dflt;
}

/* ints attribute of exactly `count` values (absent: all `dflt`) */
ck_status imp_attr_ints(imp *im, const ck_onnx_node *n, const char *name, int count, int64_t dflt,
                        int64_t *out)
{
    const ck_onnx_attr *a = ck_onnx_attr_find(n, name);
    for (int i = 0; i < count; i++)
        out[i] = dflt;
    if (!a)
        return CK_OK;
    if (a->n_ints != count)
        return imp_fail_node(im, "attribute %s has %d values, expected %d", name, a->n_ints, count);
    for (int i = 0; i < count; i++)
        out[i] = a->ints[i];
    return CK_OK;
}

const char *imp_nd_op(const char *base, int nsp, char *buf, size_t n)
{
    snprintf(buf, n, "%s%dd", base, nsp);
    return buf;
}

/* Symmetric padding per axis from ONNX pads [b1.., e1..]; false if asymmetric. */
bool imp_symmetric_pads(const int64_t *pads, int nsp, int64_t *out)
{
    for (int i = 0; i < nsp; i++) {
        if (pads[i] != pads[i + nsp])
            return false;
        out[i] = pads[i];
    }
    return true;
}

/* The decimal a float attribute was written from: the shortest %.Ng (6 <= N <= 9) that
 * reads back to the same float (0.9f -> 0.9, 1e-5f -> 1e-05), so a framework's 0.1 stays
 * 0.1 in the case instead of 0.100000024. */
double imp_float_decimal(double f)
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

/* A layer of one activation input reading `src_value`, bound to `out_value`. */
ck_status imp_one_input_layer(imp *im, const char *name, const char *op, const char *src_value,
                              const char *out_value, cJSON **Lout)
{
    const char *src = imp_layer_of(im, src_value);
    if (!src)
        return imp_fail_node(im, "input `%s` is produced by no supported node", src_value);
    cJSON *L = imp_new_layer(im, name, op);
    if (!L || !cJSON_AddStringToObject(L, "inputs", src))
        return imp_oom(im);
    if (Lout)
        *Lout = L;
    return imp_bind(im, out_value, name);
}
