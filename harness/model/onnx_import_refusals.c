/*
 * Refusals: the one line an import that cannot be exact fails with, naming the framework
 * module (from the scope PyTorch's exporter writes into node names), the node and its op
 * type; and the validation pass over every node before any pattern is matched.
 */
#include "harness/model/onnx_import_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* One quoted string of a Python list's repr at *p ('...' or "...", backslash escapes) into
 * out (cut to n - 1 bytes); *p moves past it. false when *p is not such a string. */
static bool py_string(const char **p, char *out, size_t n)
{
    char q = **p;
    size_t k = 0;
    if (q != '\'' && q != '"')
        return false;
    const char *s = *p + 1;
    for (; *s && *s != q; s++) {
        if (*s == '\\' && !*++s)
            return false;
        if (k + 1 < n)
            out[k++] = *s;
    }
    out[k] = '\0';
    if (*s != q)
        return false;
    *p = s + 1;
    return true;
}

/* The last two scopes of torch's dynamo exporter's `pkg.torch.onnx.name_scopes` list (a
 * Python list repr, from the root module down to the node's own op): the module (the one
 * before last) and the op's own scope (the last); false when the list is absent or
 * malformed. */
static bool scopes_last_two(const char *scopes, char *module, char *own, size_t n)
{
    const char *p = scopes ? scopes : "";
    int count = 0;
    module[0] = own[0] = '\0';
    while (*p == ' ')
        p++;
    if (*p++ != '[')
        return false;
    for (;;) {
        while (*p == ' ')
            p++;
        if (*p == ']' && count == 0)
            return false;
        memcpy(module, own, n);
        if (!py_string(&p, own, n))
            return false;
        count++;
        while (*p == ' ')
            p++;
        if (*p == ']')
            break;
        if (*p++ != ',')
            return false;
    }
    if (count < 2)
        module[0] = '\0';
    return true;
}

/* The module scope torch's dynamo exporter records in a node's metadata
 * (`pkg.torch.onnx.name_scopes`: "['', 'h.0', 'h.0.attn', 'view_1']" -> "h.0.attn"); ""
 * when the list is absent, malformed or the node sits in the root module. */
void ck_onnx_scopes_module(const char *scopes, char *out, size_t n)
{
    char module[256], own[256];
    if (n == 0)
        return;
    out[0] = '\0';
    if (scopes_last_two(scopes, module, own, sizeof module))
        snprintf(out, n, "%s", module);
}

void ck_onnx_node_module(const ck_onnx_node *node, char *out, size_t n)
{
    ck_onnx_module_of(node->name, out, n);
    if (n && !out[0])
        ck_onnx_scopes_module(node->torch_scopes, out, n);
}

ck_status imp_fail_node(imp *im, const char *fmt, ...)
{
    char why[512], module[256] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    const ck_onnx_node *n = im->node;
    if (n)
        ck_onnx_node_module(n, module, sizeof module);
    return ck_error_one_line(
        im->err, ck_fail(im->err, CK_ERR_INPUT, "%s: %s%s%snode `%s` (%s): %s", im->path,
                         module[0] ? "module " : "", module, module[0] ? ": " : "",
                         n && n->name[0] ? n->name : "(unnamed)", n ? n->op_type : "?", why));
}

ck_status imp_oom(imp *im)
{
    return ck_fail(im->err, CK_ERR_NOMEM, "%s: out of memory importing the model", im->path);
}

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

/* torch 2.x's dynamo exporter folds each BatchNorm into the convolution before it
 * whatever training= says, and its metadata says so: the Conv's own scope is the
 * BatchNorm op (`_native_batch_norm_legit_functional_3` under module layer1.0.bn1). Any node
 * that is not a BatchNormalization but whose own scope is a batch_norm op computes a
 * BatchNorm the graph no longer has: the case would train another model. */
static ck_status refuse_rewritten_batchnorm(imp *im, const ck_onnx_node *n)
{
    char module[256], own[256];
    if (strcmp(n->op_type, "BatchNormalization") == 0 ||
        !scopes_last_two(n->torch_scopes, module, own, sizeof module) || !strstr(own, "batch_norm"))
        return CK_OK;
    return imp_fail_node(im, "this %s node is the exporter's rewrite of BatchNorm `%s` (its "
                         "metadata says so): the exporter folded BatchNorm into the "
                         "convolutions, so the graph would train another model; export with "
                         "the TorchScript exporter (dynamo=False, "
                         "training=TrainingMode.TRAINING, do_constant_folding=False)",
                         n->op_type, own);
}

/* Every node: a first output that is named, a known op's input and output counts within
 * its spec, required inputs present; every value produced once (by one node, or as a
 * graph input or initializer). Runs before any matcher, which may then read out[0] and
 * the inputs its arity row guarantees. */
ck_status imp_validate_nodes(imp *im)
{
    const ck_onnx_model *m = im->m;
    for (int i = 0; i < m->n_nodes; i++) {
        const ck_onnx_node *n = &m->nodes[i];
        im->node = n;
        if (n->n_out < 1 || !n->out[0][0])
            return imp_fail_node(im, "has no output");
        CK_TRY(refuse_rewritten_batchnorm(im, n));
        /* a NaN or Inf attribute would reach the case as JSON null ("got null") */
        for (int a = 0; a < n->n_attr; a++) {
            const ck_onnx_attr *at = &n->attr[a];
            bool finite = at->type != CK_ONNX_ATTR_FLOAT || isfinite(at->f);
            for (int k = 0; finite && at->type == CK_ONNX_ATTR_FLOATS && k < at->n_floats; k++)
                finite = isfinite(at->floats[k]);
            if (!finite)
                return imp_fail_node(im, "attribute `%s` holds %s", at->name,
                                     at->type == CK_ONNX_ATTR_FLOAT
                                         ? (isnan(at->f) ? "NaN" : "an Inf")
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
                return imp_fail_node(im, "has %d inputs; %s takes %s", n->n_in, a->op, want);
            }
            if (n->n_out > a->max_out)
                return imp_fail_node(im, "has %d outputs; %s gives at most %d", n->n_out, a->op,
                                     a->max_out);
            for (int j = 0; j < a->min_in; j++)
                if (!n->in[j][0])
                    return imp_fail_node(im, "input %d is required but omitted", j + 1);
            break;
        }
    }
    im->node = NULL;
    size_t total = (size_t)m->n_inputs + (size_t)m->n_inits;
    for (int i = 0; i < m->n_nodes; i++)
        total += (size_t)m->nodes[i].n_out;
    const char **all = malloc((total ? total : 1) * sizeof *all);
    if (!all)
        return imp_oom(im);
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
