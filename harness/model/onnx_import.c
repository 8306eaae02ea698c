/*
 * ONNX graph -> case layers and weights (onnx_import.h): the graph walk. Each node, in the
 * file's order, is folded into a constant (onnx_import_constants.c), matched as the start of
 * a pattern (onnx_match_*.c), or mapped by its op family (onnx_map_*.c); what they share is
 * in onnx_import_internal.h.
 */
#include "harness/model/onnx_import_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ck_status map_node(imp *im, int i)
{
    const ck_onnx_node *n = &im->m->nodes[i];
    const char *op = n->op_type;
    im->node = n;
    if (n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
        return imp_fail_node(im, "domain `%s` is not supported", n->domain);
    if (n->n_out < 1 || !n->out[0][0])
        return imp_fail_node(im, "has no output");
    if (strcmp(op, "Constant") == 0)
        return CK_OK; /* read through const_of */
    CK_TRY(imp_low_float_input(im, n));
    if (strcmp(op, "Where") == 0 && n->n_in == 3 && imp_pend_of(im, n->in[2]))
        return imp_attn_where(im, n, imp_pend_of(im, n->in[2]));
    struct pend *p0 = n->n_in > 0 ? imp_pend_of(im, n->in[0]) : NULL;
    struct pend *p1 = n->n_in > 1 ? imp_pend_of(im, n->in[1]) : NULL;
    if (p0 || p1)
        return imp_attn_step(im, i, n, p0, p1);
    bool matched;
    CK_TRY(imp_match_norm(im, i, &matched));
    if (matched)
        return CK_OK;
    if (strcmp(op, "Mul") == 0 || strcmp(op, "Div") == 0) {
        CK_TRY(imp_match_gelu(im, i, &matched));
        if (matched)
            return CK_OK;
        return imp_map_binary(im, i, n); /* the generic path */
    }
    if (strcmp(op, "Sigmoid") == 0) { /* Mul(x, Sigmoid(x)) is SiLU */
        int r = imp_sole_reader(im, n->out[0]);
        if (n->n_in == 1 && imp_binary_of(im, r, "Mul", n->in[0], n->out[0])) {
            char name[CK_NAME_MAX + 1];
            CK_TRY(imp_scoped_name(im, n, "silu", name));
            CK_TRY(imp_one_input_layer(im, name, "silu", n->in[0], im->m->nodes[r].out[0], NULL));
            im->folded[r] = true;
            return CK_OK;
        }
        return imp_map_simple(im, n, "sigmoid", 1);
    }
    if (strcmp(op, "MatMul") == 0 && n->n_in == 2 && !imp_const_of(im, n->in[1]))
        return imp_map_simple(im, n, "matmul", 2);
    if (strcmp(op, "Gather") == 0 || strcmp(op, "Split") == 0 || strcmp(op, "Slice") == 0)
        return imp_map_slicing(im, n);
    if (strcmp(op, "LayerNormalization") == 0)
        return imp_map_layernorm(im, n);
    if (strcmp(op, "ConvTranspose") == 0)
        return imp_map_conv_transpose(im, n);
    if ((strcmp(op, "Softmax") == 0 || strcmp(op, "Transpose") == 0) && n->n_in != 1)
        return imp_fail_node(im, "expected 1 input, got %d", n->n_in);
    if (strcmp(op, "Softmax") == 0) {
        if (im->m->opset < 13)
            return imp_fail_node(im, "Softmax before opset 13 flattens to 2-D; export with opset "
                                     ">= 13");
        char name[CK_NAME_MAX + 1];
        CK_TRY(imp_name_for(im, n, NULL, name));
        cJSON *L = NULL;
        CK_TRY(imp_one_input_layer(im, name, "softmax", n->in[0], n->out[0], &L));
        return cJSON_AddNumberToObject(L, "dim", (double)imp_attr_int(n, "axis", -1)) ? CK_OK
                                                                                      : imp_oom(im);
    }
    if (strcmp(op, "Transpose") == 0) {
        const ck_onnx_attr *pa = ck_onnx_attr_find(n, "perm");
        if (!pa || pa->n_ints < 2 || pa->n_ints > CK_MAX_DIMS)
            return imp_fail_node(im, "perm must be given (2 to %d dims)", CK_MAX_DIMS);
        char name[CK_NAME_MAX + 1];
        CK_TRY(imp_name_for(im, n, NULL, name));
        cJSON *L = NULL;
        CK_TRY(imp_one_input_layer(im, name, "permute", n->in[0], n->out[0], &L));
        return imp_add_ints(L, "dims", pa->ints, pa->n_ints) ? CK_OK : imp_oom(im);
    }
    if (strcmp(op, "Identity") == 0) {
        const char *src = n->n_in ? imp_layer_of(im, n->in[0]) : NULL;
        if (!src)
            return imp_const_of(im, n->n_in ? n->in[0] : NULL)
                       ? imp_fail_node(im, "an identity of a constant is not supported")
                       : imp_fail_node(im, "its input is produced by no supported node");
        return imp_bind(im, n->out[0], src);
    }
    if (strcmp(op, "Conv") == 0)
        return imp_map_conv(im, n);
    if (strcmp(op, "Gemm") == 0 || strcmp(op, "MatMul") == 0)
        return imp_map_linear(im, i, n);
    if (strcmp(op, "BatchNormalization") == 0)
        return imp_map_batchnorm(im, n);
    if (strcmp(op, "Relu") == 0)
        return imp_map_simple(im, n, "relu", 1);
    const char *fn = imp_unary_op(op);
    if (fn)
        return n->n_in == 1 ? imp_map_simple(im, n, fn, 1)
                            : imp_fail_node(im, "expected 1 input, got %d", n->n_in);
    if ((strcmp(op, "Unsqueeze") == 0 || strcmp(op, "Squeeze") == 0) && n->n_in >= 1 &&
        imp_layer_of(im, n->in[0]))
        return imp_map_squeeze(im, i, n);
    if (strcmp(op, "LeakyRelu") == 0)
        return imp_map_simple(im, n, "leaky_relu", 1);
    if (strcmp(op, "Tanh") == 0)
        return imp_map_simple(im, n, "tanh", 1);
    if (strcmp(op, "Sigmoid") == 0)
        return imp_map_simple(im, n, "sigmoid", 1);
    if (strcmp(op, "Gelu") == 0) {
        const ck_onnx_attr *ap = ck_onnx_attr_find(n, "approximate");
        if (ap && ap->s && strcmp(ap->s, "none") != 0)
            return imp_fail_node(im, "approximate=%s is not supported yet", ap->s);
        return imp_map_simple(im, n, "gelu", 1);
    }
    if (strcmp(op, "MaxPool") == 0 || strcmp(op, "AveragePool") == 0)
        return imp_map_pool(im, n, op[0] == 'M');
    if (strcmp(op, "GlobalAveragePool") == 0 || strcmp(op, "GlobalMaxPool") == 0)
        return imp_map_global_pool(im, n, op[6] == 'M');
    if (strcmp(op, "Resize") == 0 || strcmp(op, "Upsample") == 0)
        return imp_map_resize(im, n);
    if (strcmp(op, "Dropout") == 0)
        return imp_map_dropout(im, n);
    if (strcmp(op, "Flatten") == 0) {
        if (imp_attr_int(n, "axis", 1) != 1)
            return imp_fail_node(im, "axis %lld is not supported (only 1)",
                                 (long long)imp_attr_int(n, "axis", 1));
        return imp_map_simple(im, n, "flatten", 1);
    }
    if (strcmp(op, "Reshape") == 0)
        return imp_map_reshape(im, n);
    if (strcmp(op, "Pad") == 0)
        return imp_map_pad(im, n);
    if (strcmp(op, "Add") == 0 || strcmp(op, "Sum") == 0) {
        if (n->n_in < 2 || n->n_in > 8)
            return imp_fail_node(im, "adds %d inputs; 2 to 8 are supported", n->n_in);
        if (n->n_in == 2 && op[0] == 'A') {
            const ck_onnx_tensor *c0 = imp_const_of(im, n->in[0]), *c1 = imp_const_of(im, n->in[1]);
            const ck_onnx_tensor *c = c0 && !c1 ? c0 : c1 && !c0 ? c1 : NULL;
            /* a learned tensor added to every sample (positions: an initializer of rank
             * >= 2); a scalar, a constant computed in the graph or a mask before a Softmax
             * takes the generic path */
            if (c && imp_alias_source(im, c == c0 ? n->in[0] : n->in[1]) && c->numel > 1 &&
                !imp_add_feeds_softmax(im, n))
                return imp_map_positional(im, n, c == c0 ? n->in[1] : n->in[0], c);
            if (c)
                return imp_map_binary(im, i, n);
        }
        return imp_map_simple(im, n, "add", n->n_in);
    }
    bool generic = false; /* Sub, Pow, Max, Min, Reduce*, Where, Expand, Cast, Concat */
    CK_TRY(imp_map_generic(im, i, n, &generic));
    if (generic)
        return CK_OK;
    return imp_fail_node(im, "op type %s is not supported (docs/onnx.md lists the supported ops)",
                         op);
}

/* Whether a layer reads layer `name` (a layer without "inputs" reads the one before it). */
static bool layer_is_read(const cJSON *layers, const char *name)
{
    const cJSON *prev = NULL, *L;
    cJSON_ArrayForEach(L, layers)
    {
        const cJSON *in = cJSON_GetObjectItem(L, "inputs"), *item;
        if (!in && prev && strcmp(cJSON_GetObjectItem(prev, "name")->valuestring, name) == 0)
            return true;
        if (cJSON_IsString(in) && strcmp(in->valuestring, name) == 0)
            return true;
        const cJSON *list = cJSON_IsArray(in) ? in : NULL;
        cJSON_ArrayForEach(item, list)
            if (cJSON_IsString(item) && strcmp(item->valuestring, name) == 0)
                return true;
        prev = L;
    }
    return false;
}

/* Layers nothing reads (on the generic path, a Transpose whose output only a Shape read,
 * folded into a constant) are dropped when they hold no weights; the output's layer stays. */
static void prune_dead_layers(imp *im, const char *last)
{
    for (bool again = true; again;) {
        again = false;
        for (int i = cJSON_GetArraySize(im->layers) - 1; i >= 0; i--) {
            const cJSON *L = cJSON_GetArrayItem(im->layers, i);
            const char *name = cJSON_GetObjectItem(L, "name")->valuestring;
            char prefix[CK_NAME_MAX + 2];
            snprintf(prefix, sizeof prefix, "%s.", name);
            bool weights = false;
            for (int k = 0; k < im->w->n && !weights; k++)
                weights = strncmp(im->w->t[k].name, prefix, strlen(prefix)) == 0;
            if ((last && strcmp(name, last) == 0) || weights || layer_is_read(im->layers, name))
                continue;
            cJSON_DeleteItemFromArray(im->layers, i);
            again = true;
        }
    }
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
            const ck_onnx_tensor *W = n->n_in == 2 ? imp_const_of(im, n->in[0]) : NULL;
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

/* One attempt; no_attention: every node on the generic path. *started: the attention
 * pattern was started. */
static ck_status import_once(const ck_onnx_model *m, const char *path,
                             const ck_onnx_import_opts *o, cJSON **case_json,
                             ck_tensorset *weights, ck_error *err, bool no_attention,
                             bool *started)
{
    imp im = {.m = m, .path = path, .err = err, .w = weights, .origins = o->origins,
              .no_attention_pattern = no_attention};
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
        st = imp_oom(&im);
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
        !imp_add_ints(input, "shape", in->dims, in->ndim) ||
        !cJSON_AddStringToObject(input, "dist", vocab ? "tokens" : "normal") ||
        (vocab && !cJSON_AddNumberToObject(input, "vocab", (double)vocab)) ||
        !(im.layers = cJSON_AddArrayToObject(root, "layers"))) {
        st = imp_oom(&im);
        goto out;
    }
    im.input_json = input;
    if ((st = imp_validate_nodes(&im)) != CK_OK || (st = imp_bind(&im, in->name, "input")) != CK_OK)
        goto out;
    for (int i = 0; i < m->n_nodes && st == CK_OK; i++) {
        if (im.folded[i])
            continue;
        bool done = false;
        im.node = &m->nodes[i];
        if ((st = imp_fold_more(&im, i, &done)) == CK_OK && !done &&
            (st = imp_fold_node(&im, i, &done)) == CK_OK && !done)
            st = map_node(&im, i);
    }
    if (st != CK_OK)
        goto out;
    im.node = NULL;
    const char *last = imp_layer_of(&im, m->outputs[0].name);
    if (no_attention) /* only the generic path leaves layers nothing reads */
        prune_dead_layers(&im, last);
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
    st = imp_add_settings(&im, root, o, in, vocab != 0);
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
    for (int i = 0; i < im.n_tied; i++) {
        free(im.tied_src[i]);
        free(im.tied_param[i]);
    }
    free(im.tied_src);
    free(im.tied_param);
    free(im.tied_transposed);
    ck_onnx_shape_cache_free(&im.shapes);
    for (int i = 0; i < im.n_pend; i++)
        free(im.pend[i].value);
    free(im.pend);
    *started = im.pattern_started;
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

/* The attention pattern is the fast path; when it refuses a graph (a variant it does not
 * know: nn.MultiheadAttention, scaled_dot_product_attention as exported), the graph is
 * imported again on the generic path alone. If that refuses too, the pattern's refusal is
 * the one reported. */
ck_status ck_onnx_import(const ck_onnx_model *m, const char *path, const ck_onnx_import_opts *o,
                         cJSON **case_json, ck_tensorset *weights, ck_error *err)
{
    static const ck_onnx_import_opts none = {0};
    o = o ? o : &none;
    bool started = false;
    ck_status st = import_once(m, path, o, case_json, weights, err, false, &started);
    if (st == CK_OK || !started || st == CK_ERR_NOMEM)
        return st;
    ck_error first = *err;
    if (import_once(m, path, o, case_json, weights, err, true, &started) == CK_OK)
        return CK_OK;
    *err = first;
    return st;
}
