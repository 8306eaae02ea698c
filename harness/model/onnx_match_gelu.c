/*
 * GELU as exporters below opset 20 write it out (exact and tanh forms), matched into one
 * gelu layer.
 */
#include "harness/model/onnx_import_internal.h"

#include <math.h>
#include <string.h>

/* Gelu as exporters below opset 20 spell it, matched exactly from node idx on:
 *   exact: Div(x, √2) → Erf → Add(·, 1) → Mul(x, ·) → Mul(·, 0.5)
 *   tanh:  Mul(x, x) → Mul(x, ·) → Mul(0.044715, ·) → Add(x, ·) → Mul(√(2/π), ·) → Tanh →
 *          Add(1, ·) → Mul(x, ·) → Mul(0.5, ·)
 * every intermediate value read by the next node only. Returns true when matched (the
 * layer added, the nodes folded). */
ck_status imp_match_gelu(imp *im, int idx, bool *matched)
{
    *matched = false;
    const ck_onnx_node *n = &im->m->nodes[idx];
    if (n->n_in != 2 || n->n_out < 1)
        return CK_OK;
    const char *x = n->in[0];
    int chain[9], len = 0;
    bool tanh_form = false;
    bool is_mul = strcmp(n->op_type, "Mul") == 0;
    if (is_mul && imp_scalar_is(im, n->in[0], 1.0 / sqrt(2.0)))
        x = n->in[1]; /* Mul(1/√2, x) */
    if (imp_binary_with_scalar(im, idx, "Div", x, sqrt(2.0), false) ||
        imp_binary_with_scalar(im, idx, "Mul", x, 1.0 / sqrt(2.0), true)) {
        chain[len++] = idx;
        int e = imp_sole_reader(im, n->out[0]);
        if (e < 0 || strcmp(im->m->nodes[e].op_type, "Erf") != 0)
            return CK_OK;
        chain[len++] = e;
        int a = imp_sole_reader(im, im->m->nodes[e].out[0]);
        if (!imp_binary_with_scalar(im, a, "Add", im->m->nodes[e].out[0], 1.0, true))
            return CK_OK;
        chain[len++] = a;
        int m1 = imp_sole_reader(im, im->m->nodes[a].out[0]);
        if (!imp_binary_of(im, m1, "Mul", x, im->m->nodes[a].out[0]))
            return CK_OK;
        chain[len++] = m1;
        int m2 = imp_sole_reader(im, im->m->nodes[m1].out[0]);
        if (!imp_binary_with_scalar(im, m2, "Mul", im->m->nodes[m1].out[0], 0.5, true))
            return CK_OK;
        chain[len++] = m2;
    } else if (strcmp(n->op_type, "Mul") == 0 && strcmp(n->in[0], n->in[1]) == 0) {
        tanh_form = true;
        chain[len++] = idx;
        const char *cur = n->out[0];
        int c3 = imp_sole_reader(im, cur);
        if (!imp_binary_of(im, c3, "Mul", x, cur))
            return CK_OK;
        chain[len++] = c3;
        cur = im->m->nodes[c3].out[0];
        int k1 = imp_sole_reader(im, cur);
        if (!imp_binary_with_scalar(im, k1, "Mul", cur, 0.044715, true))
            return CK_OK;
        chain[len++] = k1;
        cur = im->m->nodes[k1].out[0];
        int ad = imp_sole_reader(im, cur);
        if (!imp_binary_of(im, ad, "Add", x, cur))
            return CK_OK;
        chain[len++] = ad;
        cur = im->m->nodes[ad].out[0];
        int k2 = imp_sole_reader(im, cur);
        if (!imp_binary_with_scalar(im, k2, "Mul", cur, sqrt(2.0 / M_PI), true))
            return CK_OK;
        chain[len++] = k2;
        cur = im->m->nodes[k2].out[0];
        int th = imp_sole_reader(im, cur);
        if (th < 0 || strcmp(im->m->nodes[th].op_type, "Tanh") != 0)
            return CK_OK;
        chain[len++] = th;
        cur = im->m->nodes[th].out[0];
        int one = imp_sole_reader(im, cur);
        if (!imp_binary_with_scalar(im, one, "Add", cur, 1.0, true))
            return CK_OK;
        chain[len++] = one;
        cur = im->m->nodes[one].out[0];
        int mx = imp_sole_reader(im, cur);
        if (!imp_binary_of(im, mx, "Mul", x, cur))
            return CK_OK;
        chain[len++] = mx;
        cur = im->m->nodes[mx].out[0];
        int half = imp_sole_reader(im, cur);
        if (!imp_binary_with_scalar(im, half, "Mul", cur, 0.5, true))
            return CK_OK;
        chain[len++] = half;
    } else {
        return CK_OK;
    }
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_scoped_name(im, n, "gelu", name));
    cJSON *L = NULL;
    const ck_onnx_node *last = &im->m->nodes[chain[len - 1]];
    CK_TRY(imp_one_input_layer(im, name, "gelu", x, last->out[0], &L));
    if (tanh_form && !cJSON_AddStringToObject(L, "approximate", "tanh"))
        return imp_oom(im);
    for (int i = 1; i < len; i++)
        im->folded[chain[i]] = true;
    *matched = true;
    return CK_OK;
}
