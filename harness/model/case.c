/*
 * The case-file parser: JSON text -> a validated ck_case (format in cases/README.md).
 *
 * Everything a user can get wrong is checked here before any value is used: syntax
 * (with line and column), duplicate and unknown keys, types, integrality and ranges of
 * every number (cJSON numbers are doubles: 2.5, -1 or 1e300 must not reach an integer
 * conversion), names and references between layers, checkpoint segments. Shapes are
 * checked later by ck_graph_build. The op catalogue and the policy names are in
 * catalogue.c; the typed getters with JSON paths in harness/io/json_get.c.
 */
#include "harness/model/case.h"

#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/io/files.h"
#include "harness/io/json_get.h"
#include "harness/model/op_def.h"

/* Seeds and dims must be exact in a double. */
#define EXACT_INT_MAX 9007199254740991LL /* 2^53 - 1: larger literals are rounded as doubles */
#define MAX_LAYERS 4096
#define MAX_STEPS 1000000
/* A case file is a few kilobytes; this bound keeps a stray device or huge file out. */
#define MAX_FILE_BYTES (16u << 20)
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ------------------------------------------------------------------------------------ */
/* Layers                                                                                */
/* ------------------------------------------------------------------------------------ */

static ck_status parse_window(const ck_jctx *cx, const cJSON *v, const char *jpath, int nsp,
                              int64_t lo, int out[CK_MAX_SPATIAL])
{
    ck_status st;
    int64_t x;
    char item_path[CK_JPATH_MAX];
    if (cJSON_IsNumber(v)) {
        if ((st = ck_jget_int(cx, v, jpath, lo, CK_SIZE_CAP, &x)) != CK_OK)
            return st;
        for (int d = 0; d < nsp; d++)
            out[d] = (int)x;
        return CK_OK;
    }
    if (!cJSON_IsArray(v))
        return ck_jfail(cx, jpath, "must be an integer or a list of %d integers, got %s", nsp,
                       ck_json_type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n != nsp)
        return ck_jfail(cx, jpath,
                       "must be an integer or a list of %d integers (one per spatial dim), "
                       "got a list of %d",
                       nsp, n);
    int d = 0;
    for (const cJSON *c = v->child; c; c = c->next, d++) {
        ck_jpath_index(item_path, sizeof item_path, jpath, d);
        if ((st = ck_jget_int(cx, c, item_path, lo, CK_SIZE_CAP, &x)) != CK_OK)
            return st;
        out[d] = (int)x;
    }
    return CK_OK;
}

static ck_status parse_padding(const ck_jctx *cx, const cJSON *v, const char *jpath,
                               ck_op_params *op)
{
    if (cJSON_IsString(v)) {
        char shown[64];
        if (strcmp(v->valuestring, "same") == 0) {
            op->pad_mode = CK_PAD_SAME;
            return CK_OK;
        }
        if (strcmp(v->valuestring, "valid") == 0) {
            op->pad_mode = CK_PAD_VALID;
            return CK_OK;
        }
        return ck_jfail(cx, jpath,
                       "must be \"same\", \"valid\", an integer or a list of %d integers, "
                       "got \"%s\"",
                       op->nsp, ck_jprintable(v->valuestring, shown, sizeof shown));
    }
    if (!cJSON_IsNumber(v) && !cJSON_IsArray(v))
        return ck_jfail(cx, jpath,
                       "must be \"same\", \"valid\", an integer or a list of %d integers, got %s",
                       op->nsp, ck_json_type_name(v));
    op->pad_mode = CK_PAD_EXPLICIT;
    return parse_window(cx, v, jpath, op->nsp, 0, op->pad);
}

/* DIMLIST (dims -8..7), SHAPE (sizes >= 1, or -1 when range.lo is -1), NORMSHAPE (an int or a
 * list of sizes >= 1): 1 to CK_OP_MAX_DIMS entries, the count at def->count_offset. */
static ck_status parse_int_list(const ck_jctx *cx, const ck_option_def *def, const cJSON *v,
                                const char *jpath, ck_op_params *op)
{
    int *count = (int *)((char *)op + def->count_offset);
    void *field = (char *)op + def->offset;
    const bool dims = def->type == CK_OPTION_DIMLIST;
    const int64_t lo = dims ? -CK_OP_MAX_DIMS
                       : def->type == CK_OPTION_SHAPE && def->range.lo < 0 ? -1
                       : def->type == CK_OPTION_SHAPE && def->range.lo == 0 ? 0 : 1;
    const int64_t hi = dims ? CK_OP_MAX_DIMS - 1 : CK_SIZE_CAP;
    char item_path[CK_JPATH_MAX];
    int64_t x;
    ck_status st;
    if (def->type == CK_OPTION_NORMSHAPE && cJSON_IsNumber(v)) {
        if ((st = ck_jget_int(cx, v, jpath, 1, CK_SIZE_CAP, &x)) != CK_OK)
            return st;
        ((int64_t *)field)[0] = x;
        *count = 1;
        return CK_OK;
    }
    if (!cJSON_IsArray(v))
        return ck_jfail(cx, jpath, "must be a list of 1 to %d integers%s, got %s", CK_OP_MAX_DIMS,
                        def->type == CK_OPTION_NORMSHAPE ? " (or one integer)" : "",
                        ck_json_type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n < 1 || n > CK_OP_MAX_DIMS)
        return ck_jfail(cx, jpath, "must be a list of 1 to %d integers, got a list of %d",
                        CK_OP_MAX_DIMS, n);
    int i = 0, minus_ones = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        ck_jpath_index(item_path, sizeof item_path, jpath, i);
        if ((st = ck_jget_int(cx, c, item_path, lo, hi, &x)) != CK_OK)
            return st;
        if (!dims && lo == -1 && x == 0)
            return ck_jfail(cx, item_path, "must be a positive size or -1, got 0");
        if (x == -1 && !dims && ++minus_ones > 1)
            return ck_jfail(cx, item_path, "only one size may be -1 (inferred)");
        if (dims)
            ((int *)field)[i] = (int)x;
        else
            ((int64_t *)field)[i] = x;
    }
    *count = n;
    return CK_OK;
}

static ck_status parse_option(const ck_jctx *cx, const ck_option_def *def, const cJSON *v,
                              const char *jpath, ck_op_params *op)
{
    void *field = (char *)op + def->offset;
    switch (def->type) {
    case CK_OPTION_SIZE:
        return ck_jget_int(cx, v, jpath, 1, CK_SIZE_CAP, (int64_t *)field);
    case CK_OPTION_WINDOW:
        return parse_window(cx, v, jpath, op->nsp, 1, (int *)field);
    case CK_OPTION_PADDING:
        return parse_padding(cx, v, jpath, op);
    case CK_OPTION_BOOL:
        return ck_jget_bool(cx, v, jpath, (bool *)field);
    case CK_OPTION_REAL:
        return ck_jget_real(cx, v, jpath, &def->range, (double *)field);
    case CK_OPTION_INIT:
        return ck_jget_choice(cx, v, jpath, ck_init_names.names, ck_init_names.n, (int *)field);
    case CK_OPTION_DIM: {
        int64_t x;
        ck_status st = ck_jget_int(cx, v, jpath, -CK_OP_MAX_DIMS, CK_OP_MAX_DIMS - 1, &x);
        if (st == CK_OK)
            *(int *)field = (int)x;
        return st;
    }
    case CK_OPTION_DIMLIST:
    case CK_OPTION_SHAPE:
    case CK_OPTION_NORMSHAPE:
        return parse_int_list(cx, def, v, jpath, op);
    case CK_OPTION_PAD:
        op->pad_mode = CK_PAD_EXPLICIT;
        return parse_window(cx, v, jpath, op->nsp, 0, op->pad);
    case CK_OPTION_WINDOW0:
        return parse_window(cx, v, jpath, op->nsp, 0, (int *)field);
    case CK_OPTION_UPMODE: {
        static const char *const one[] = {"nearest", "linear"}, *const two[] = {"nearest", "bilinear"},
                                 *const three[] = {"nearest", "trilinear"};
        const char *const *names = op->nsp == 1 ? one : op->nsp == 2 ? two : three;
        int choice = 0;
        ck_status st = ck_jget_choice(cx, v, jpath, names, 2, &choice);
        if (st == CK_OK)
            op->mode = choice ? CK_UPSAMPLE_LINEAR : CK_UPSAMPLE_NEAREST;
        return st;
    }
    case CK_OPTION_FLOAT_DTYPE: {
        int choice = 0;
        ck_status st = ck_jget_choice(cx, v, jpath, ck_cast_dtype_names.names,
                                      ck_cast_dtype_names.n, &choice);
        if (st == CK_OK)
            *(int *)field = (int)ck_cast_dtypes[choice];
        return st;
    }
    case CK_OPTION_APPROX: {
        static const char *const names[] = {"none", "tanh"};
        int choice = 0;
        ck_status st = ck_jget_choice(cx, v, jpath, names, 2, &choice);
        if (st == CK_OK)
            op->gelu_tanh = choice == 1;
        return st;
    }
    }
    return ck_fail(cx->err, CK_ERR_INTERNAL, "%s: %s: unknown option type", cx->path, jpath);
}

/* Where a name that is not an earlier layer actually is, for the message. */
static void describe_missing_layer(const cJSON *layers_json, int this_index, const char *name,
                                   char *buf, size_t n)
{
    int i = 0;
    for (const cJSON *item = layers_json->child; item; item = item->next, i++) {
        if (i < this_index)
            continue;
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(item, "name");
        if (cJSON_IsString(nm) && nm->valuestring && strcmp(nm->valuestring, name) == 0) {
            if (i == this_index)
                snprintf(buf, n, "it is this layer");
            else
                snprintf(buf, n, "it is layers[%d], a later layer", i);
            return;
        }
    }
    snprintf(buf, n, "no layer has that name");
}

/* An `inputs` entry: "input" (-1) or the name of an earlier layer. */
static ck_status resolve_input(const ck_jctx *cx, const ck_case *c, const cJSON *layers_json,
                               int this_index, const cJSON *v, const char *jpath, int *out)
{
    const char *name = NULL;
    ck_status st = ck_jget_string(cx, v, jpath, &name);
    if (st != CK_OK)
        return st;
    if (strcmp(name, "input") == 0) {
        *out = -1;
        return CK_OK;
    }
    for (int i = 0; i < this_index; i++) {
        if (strcmp(c->layers[i].name, name) == 0) {
            *out = i;
            return CK_OK;
        }
    }
    char where[64], shown[64];
    describe_missing_layer(layers_json, this_index, name, where, sizeof where);
    return ck_jfail(cx, jpath, "\"%s\" is not an earlier layer (%s)",
                   ck_jprintable(name, shown, sizeof shown), where);
}

static ck_status parse_inputs(const ck_jctx *cx, const ck_case *c, const cJSON *layers_json,
                              int index, const cJSON *v, const char *lpath, ck_layer_spec *L)
{
    char ipath[CK_JPATH_MAX], item_path[CK_JPATH_MAX];
    bool many = ck_op_takes_many_inputs(L->op.kind);
    int lo = 1, hi = 1;
    ck_op_input_range(L->op.kind, &lo, &hi);
    ck_status st;
    ck_jpath_key(ipath, sizeof ipath, lpath, "inputs");

    if (!many && hi > 1) {
        /* matmul (1 or 2), attention (1 or 3), mul (2) */
        if (!v) {
            if (lo > 1)
                return ck_jfail(cx, ipath, "required for %s: a list of %d earlier layer names",
                                L->op_name, lo);
            L->n_in = 1;
            L->in[0] = index - 1;
            return CK_OK;
        }
        if (cJSON_IsString(v) && lo == 1) {
            L->n_in = 1;
            return resolve_input(cx, c, layers_json, index, v, ipath, &L->in[0]);
        }
        if (!cJSON_IsArray(v))
            return ck_jfail(cx, ipath, "must be a list of layer names, got %s",
                            ck_json_type_name(v));
        int n = cJSON_GetArraySize(v);
        if (!ck_op_inputs_ok(L->op.kind, n)) {
            const char *rule = ck_op_def_of(L->op.kind)->inputs_rule;
            return ck_jfail(cx, ipath, "%s takes %s inputs, got %d", L->op_name,
                            rule ? rule : "exactly 2", n);
        }
        int j = 0;
        for (const cJSON *item = v->child; item; item = item->next, j++) {
            ck_jpath_index(item_path, sizeof item_path, ipath, j);
            if ((st = resolve_input(cx, c, layers_json, index, item, item_path, &L->in[j])) !=
                CK_OK)
                return st;
        }
        L->n_in = n;
        return CK_OK;
    }
    if (!v) {
        if (many && lo > 1)
            return ck_jfail(cx, ipath, "required for %s: a list of 2 to %d earlier layer names",
                           L->op_name, CK_MAX_INPUTS);
        L->n_in = 1;
        L->in[0] = index - 1; /* the previous layer; -1 (the model input) for the first */
        return CK_OK;
    }
    if (cJSON_IsString(v) && (!many || lo == 1)) { /* add with a constant: one name */
        L->n_in = 1;
        return resolve_input(cx, c, layers_json, index, v, ipath, &L->in[0]);
    }
    if (!cJSON_IsArray(v)) {
        if (many && lo == 1) /* add: one name (with a constant) or a list */
            return ck_jfail(cx, ipath, "must be a layer name or a list of 1 to %d, got %s",
                            CK_MAX_INPUTS, ck_json_type_name(v));
        if (many)
            return ck_jfail(cx, ipath, "must be a list of 2 to %d layer names, got %s",
                           CK_MAX_INPUTS, ck_json_type_name(v));
        return ck_jfail(cx, ipath, "must be a layer name or a list of one, got %s",
                       ck_json_type_name(v));
    }
    int n = cJSON_GetArraySize(v);
    if (many && (n < lo || n > CK_MAX_INPUTS))
        return ck_jfail(cx, ipath, "%s needs %d to %d inputs, got %d", L->op_name, lo,
                        CK_MAX_INPUTS, n);
    if (!many && n != 1)
        return ck_jfail(cx, ipath, "%s takes exactly one input, got %d", L->op_name, n);
    int j = 0;
    for (const cJSON *item = v->child; item; item = item->next, j++) {
        ck_jpath_index(item_path, sizeof item_path, ipath, j);
        if ((st = resolve_input(cx, c, layers_json, index, item, item_path, &L->in[j])) != CK_OK)
            return st;
    }
    L->n_in = n;
    return CK_OK;
}

/* Rules between one layer's options. */
static ck_status check_layer_options(const ck_jctx *cx, const cJSON *item, const char *lpath,
                                     const ck_op_info *info, ck_op_params *op)
{
    char kpath[CK_JPATH_MAX];
    const bool is_transpose = strcmp(info->name, "transpose") == 0;
    if (info->kind == CK_OP_PERMUTE) {
        const bool has_dims = cJSON_GetObjectItemCaseSensitive(item, "dims") != NULL;
        const bool has_d0 = cJSON_GetObjectItemCaseSensitive(item, "dim0") != NULL;
        const bool has_d1 = cJSON_GetObjectItemCaseSensitive(item, "dim1") != NULL;
        if (is_transpose && has_dims) {
            ck_jpath_key(kpath, sizeof kpath, lpath, "dims");
            return ck_jfail(cx, kpath, "transpose takes dim0 and dim1 (permute takes dims)");
        }
        if (!is_transpose && (has_d0 || has_d1)) {
            ck_jpath_key(kpath, sizeof kpath, lpath, has_d0 ? "dim0" : "dim1");
            return ck_jfail(cx, kpath, "permute takes dims (transpose takes dim0 and dim1)");
        }
        if (is_transpose && (!has_d0 || !has_d1)) {
            ck_jpath_key(kpath, sizeof kpath, lpath, has_d0 ? "dim1" : "dim0");
            return ck_jfail(cx, kpath, "required for transpose");
        }
        if (!is_transpose && !has_dims) {
            ck_jpath_key(kpath, sizeof kpath, lpath, "dims");
            return ck_jfail(cx, kpath, "required for permute");
        }
        if (is_transpose)
            op->n_perm = 0; /* the graph builder fills perm from dim0, dim1 */
    }
    if (info->kind == CK_OP_GROUPNORM) {
        const bool instance = strcmp(info->name, "instancenorm") == 0;
        const bool has_groups = cJSON_GetObjectItemCaseSensitive(item, "groups") != NULL;
        ck_jpath_key(kpath, sizeof kpath, lpath, "groups");
        if (instance && has_groups)
            return ck_jfail(cx, kpath, "instancenorm has one group per channel (for other "
                                       "groups use groupnorm)");
        if (!instance && !has_groups)
            return ck_jfail(cx, kpath, "required for groupnorm");
    }
    if (info->kind == CK_OP_UPSAMPLE && op->mode == CK_UPSAMPLE_NEAREST &&
        cJSON_GetObjectItemCaseSensitive(item, "align_corners")) {
        ck_jpath_key(kpath, sizeof kpath, lpath, "align_corners");
        return ck_jfail(cx, kpath, "applies only to the linear modes (mode \"%s\")",
                        info->nsp == 1 ? "linear" : info->nsp == 2 ? "bilinear" : "trilinear");
    }
    if (info->kind == CK_OP_CONV_TRANSPOSE)
        for (int d = 0; d < info->nsp; d++)
            if (op->out_pad[d] >= op->stride[d] && op->out_pad[d] >= op->dilation[d]) {
                ck_jpath_key(kpath, sizeof kpath, lpath, "output_padding");
                return ck_jfail(cx, kpath,
                                "%d in spatial dim %d must be smaller than stride (%d) or "
                                "dilation (%d), as PyTorch requires",
                                op->out_pad[d], d, op->stride[d], op->dilation[d]);
            }
    if ((info->kind == CK_OP_MAXPOOL || info->kind == CK_OP_AVGPOOL) &&
        op->pad_mode == CK_PAD_EXPLICIT)
        for (int d = 0; d < info->nsp; d++)
            if (2 * op->pad[d] > op->kernel[d]) {
                ck_jpath_key(kpath, sizeof kpath, lpath, "padding");
                return ck_jfail(cx, kpath,
                                "%d in spatial dim %d is more than half the pool window %d "
                                "(PyTorch's limit: every window must hold an input element)",
                                op->pad[d], d, op->kernel[d]);
            }
    return CK_OK;
}

/* "share": "LAYER.weight" (this layer's weight is LAYER's) or {"weight": "LAYER.weight",
 * "bias": "OTHER.bias"}: the syntax here; the names, shapes and cycles in ck_graph_build. */
static ck_status parse_share_target(const ck_jctx *cx, const cJSON *v, const char *jpath,
                                    const char *suffix, ck_layer_spec *L)
{
    const char *t = NULL;
    char shown[64];
    ck_status st = ck_jget_string(cx, v, jpath, &t);
    if (st != CK_OK)
        return st;
    const char *dot = strrchr(t, '.');
    if (!dot || dot == t || !dot[1])
        return ck_jfail(cx, jpath, "must name a parameter of another layer, \"LAYER.weight\" or "
                                   "\"LAYER.bias\", got \"%s\"",
                        ck_jprintable(t, shown, sizeof shown));
    ck_share_spec *sh = &L->shares[L->n_shares];
    if (!(sh->suffix = strdup(suffix)) || !(sh->target = strdup(t)))
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
    L->n_shares++;
    return CK_OK;
}

static ck_status parse_share(const ck_jctx *cx, const cJSON *v, const char *lpath,
                             ck_layer_spec *L)
{
    static const char *const slots[] = {"weight", "bias"};
    char kpath[CK_JPATH_MAX], spath[CK_JPATH_MAX];
    ck_jpath_key(kpath, sizeof kpath, lpath, "share");
    if (cJSON_IsString(v))
        return parse_share_target(cx, v, kpath, "weight", L);
    if (!cJSON_IsObject(v))
        return ck_jfail(cx, kpath, "must be \"LAYER.weight\" (this layer uses the weight of "
                                   "LAYER) or an object {\"weight\": \"LAYER.weight\", \"bias\": "
                                   "\"LAYER.bias\"}, got %s",
                        ck_json_type_name(v));
    ck_status st = ck_jcheck_keys(cx, v, kpath, slots, COUNT(slots), NULL);
    if (st != CK_OK)
        return st;
    if (!v->child)
        return ck_jfail(cx, kpath, "names no parameter: give \"weight\" and/or \"bias\"");
    L->share_object = true;
    for (int k = 0; k < COUNT(slots); k++) {
        const cJSON *item = cJSON_GetObjectItemCaseSensitive(v, slots[k]);
        ck_jpath_key(spath, sizeof spath, kpath, slots[k]);
        if (item && (st = parse_share_target(cx, item, spath, slots[k], L)) != CK_OK)
            return st;
    }
    return CK_OK;
}

static ck_status parse_layer(const ck_jctx *cx, ck_case *c, const cJSON *layers_json,
                             int index, const cJSON *item)
{
    ck_layer_spec *L = &c->layers[index];
    char jpath[CK_JPATH_MAX], lpath[CK_JPATH_MAX], kpath[CK_JPATH_MAX], shown[64];
    const char *name = NULL, *op_name = NULL;
    ck_status st;

    ck_jpath_index(jpath, sizeof jpath, "layers", index);
    if ((st = ck_jget_object(cx, item, jpath)) != CK_OK)
        return st;

    ck_jpath_key(kpath, sizeof kpath, jpath, "name");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(item, "name");
    if (!v)
        return ck_jfail(cx, kpath, "required: every layer needs a name");
    if ((st = ck_jget_name(cx, v, kpath, &name)) != CK_OK)
        return st;
    if (strcmp(name, "input") == 0)
        return ck_jfail(cx, kpath, "\"input\" is reserved for the model input");
    for (int i = 0; i < index; i++)
        if (strcmp(c->layers[i].name, name) == 0)
            return ck_jfail(cx, kpath, "duplicate layer name \"%s\" (also layers[%d])", name, i);
    if (!(L->name = strdup(name)))
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
    ck_jpath_printf(lpath, sizeof lpath, "%s (%s)", jpath, name);

    ck_jpath_key(kpath, sizeof kpath, lpath, "op");
    v = cJSON_GetObjectItemCaseSensitive(item, "op");
    if (!v)
        return ck_jfail(cx, kpath, "required: the layer's op (see 'ckpt-harness list')");
    if ((st = ck_jget_string(cx, v, kpath, &op_name)) != CK_OK)
        return st;
    const ck_op_info *info = ck_op_find(op_name);
    if (!info) {
        int n_ops = 0;
        const ck_op_info *ops = ck_op_catalogue(&n_ops);
        const char *known[64];
        char list[512];
        for (int i = 0; i < n_ops && i < COUNT(known); i++)
            known[i] = ops[i].name;
        ck_join_names(known, n_ops < COUNT(known) ? n_ops : COUNT(known), list, sizeof list);
        return ck_jfail(cx, kpath, "unknown op \"%s\" (known: %s)",
                       ck_jprintable(op_name, shown, sizeof shown), list);
    }
    if (!(L->op_name = strdup(info->name)))
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);

    /* Allowed keys: the common three, then the op's own, straight from the table. */
    const ck_option_def *opts = ck_op_options(info->kind);
    const char *allowed[4 + 12];
    int n_allowed = 0;
    allowed[n_allowed++] = "name";
    allowed[n_allowed++] = "op";
    allowed[n_allowed++] = "inputs";
    for (const ck_option_def *d = opts; d->key && n_allowed < COUNT(allowed) - 1; d++)
        allowed[n_allowed++] = d->key;
    if (ck_op_def_of(info->kind)->state) /* an op that may have parameters may share them */
        allowed[n_allowed++] = "share";
    if ((st = ck_jcheck_keys(cx, item, lpath, allowed, n_allowed, info->name)) != CK_OK)
        return st;

    ck_op_params_default(&L->op, info->kind, info->nsp);
    bool stride_given = false;
    for (const ck_option_def *d = opts; d->key; d++) {
        ck_jpath_key(kpath, sizeof kpath, lpath, d->key);
        v = cJSON_GetObjectItemCaseSensitive(item, d->key);
        if (!v) {
            if (d->required)
                return ck_jfail(cx, kpath, "required for %s", info->name);
            continue;
        }
        if (strcmp(d->key, "stride") == 0)
            stride_given = true;
        if ((st = parse_option(cx, d, v, kpath, &L->op)) != CK_OK)
            return st;
    }
    /* Pools step by their window unless told otherwise (PyTorch's default). */
    if ((info->kind == CK_OP_MAXPOOL || info->kind == CK_OP_AVGPOOL) && !stride_given)
        memcpy(L->op.stride, L->op.kernel, sizeof L->op.stride);
    if ((st = check_layer_options(cx, item, lpath, info, &L->op)) != CK_OK)
        return st;

    if ((st = parse_inputs(cx, c, layers_json, index,
                           cJSON_GetObjectItemCaseSensitive(item, "inputs"), lpath, L)) != CK_OK)
        return st;
    v = cJSON_GetObjectItemCaseSensitive(item, "share");
    if (v && (st = parse_share(cx, v, lpath, L)) != CK_OK)
        return st;
    if (info->kind == CK_OP_MATMUL) {
        ck_jpath_key(kpath, sizeof kpath, lpath, "units");
        if (L->n_in == 1 && L->op.units == 0)
            return ck_jfail(cx, kpath, "required for matmul with one input (it multiplies by a "
                                       "weight of shape [K, units]); or give 2 inputs");
        if (L->n_in == 2 && L->op.units != 0)
            return ck_jfail(cx, kpath, "matmul with 2 inputs has no weight: drop units");
        ck_jpath_key(kpath, sizeof kpath, lpath, "transpose_b");
        if (L->n_in == 1 && L->op.trans_b)
            return ck_jfail(cx, kpath, "applies to a second input; the weight of a one-input "
                                       "matmul is [K, units] as written");
    }
    return CK_OK;
}

static ck_status parse_layers(const ck_jctx *cx, const cJSON *v, ck_case *c)
{
    ck_status st;
    if (!v)
        return ck_jfail(cx, "layers", "required: a list of at least one layer");
    if (!cJSON_IsArray(v))
        return ck_jfail(cx, "layers", "must be a list of layers, got %s", ck_json_type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n < 1)
        return ck_jfail(cx, "layers", "must hold at least one layer");
    if (n > MAX_LAYERS)
        return ck_jfail(cx, "layers", "at most %d layers are supported, got %d", MAX_LAYERS, n);
    c->layers = calloc((size_t)n, sizeof *c->layers);
    if (!c->layers)
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
    c->n_layers = n; /* names stay NULL until parsed, so ck_case_free works at any point */
    int i = 0;
    for (const cJSON *item = v->child; item; item = item->next, i++)
        if ((st = parse_layer(cx, c, v, i, item)) != CK_OK)
            return st;
    return CK_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Top-level sections                                                                    */
/* ------------------------------------------------------------------------------------ */

static ck_status parse_input(const ck_jctx *cx, const cJSON *v, ck_case *c)
{
    static const char *const keys[] = {"shape", "dist", "vocab"};
    char item_path[CK_JPATH_MAX], dims[128];
    ck_status st;
    int choice;

    if (!v)
        return ck_jfail(cx, "input", "required: {\"shape\": [N, ...]}");
    if ((st = ck_jget_object(cx, v, "input")) != CK_OK)
        return st;
    if ((st = ck_jcheck_keys(cx, v, "input", keys, COUNT(keys), NULL)) != CK_OK)
        return st;

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(v, "shape");
    if (!shape)
        return ck_jfail(cx, "input.shape", "required: a list of 2 to %d dimensions, N first",
                       CK_MAX_DIMS);
    if (!cJSON_IsArray(shape))
        return ck_jfail(cx, "input.shape", "must be a list of 2 to %d positive integers, got %s",
                       CK_MAX_DIMS, ck_json_type_name(shape));
    int n = cJSON_GetArraySize(shape);
    if (n < 2 || n > CK_MAX_DIMS)
        return ck_jfail(cx, "input.shape", "must have 2 to %d dimensions (N first), got %d",
                       CK_MAX_DIMS, n);
    c->input_shape.ndim = n;
    int d = 0;
    for (const cJSON *item = shape->child; item; item = item->next, d++) {
        ck_jpath_index(item_path, sizeof item_path, "input.shape", d);
        if ((st = ck_jget_int(cx, item, item_path, 1, EXACT_INT_MAX, &c->input_shape.dim[d])) !=
            CK_OK)
            return st;
    }
    if (!ck_shape_numel_checked(&c->input_shape, 8, NULL))
        return ck_jfail(cx, "input.shape", "%s has too many elements (the byte count overflows)",
                       ck_shape_str(&c->input_shape, dims, sizeof dims));

    const cJSON *dist = cJSON_GetObjectItemCaseSensitive(v, "dist");
    if (dist) {
        if ((st = ck_jget_choice(cx, dist, "input.dist", ck_dist_names.names, ck_dist_names.n, &choice)) !=
            CK_OK)
            return st;
        c->input_dist = (ck_dist)choice;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(v, "vocab");
    if (c->input_dist == CK_DIST_TOKENS && !vocab)
        return ck_jfail(cx, "input.vocab", "required for \"dist\": \"tokens\": token ids are "
                                           "drawn uniformly from [0, vocab)");
    if (vocab && c->input_dist != CK_DIST_TOKENS)
        return ck_jfail(cx, "input.vocab", "applies only to \"dist\": \"tokens\"");
    if (vocab && (st = ck_jget_int(cx, vocab, "input.vocab", 1, INT32_MAX, &c->input_vocab)) !=
                     CK_OK)
        return st;
    return CK_OK;
}

static ck_status parse_loss(const ck_jctx *cx, const cJSON *v, ck_case *c)
{
    static const char *const keys[] = {"op", "class_dim", "ignore_index", "label_smoothing"};
    static const ck_real_range unit = CK_RANGE_UNIT_CLOSED;
    ck_status st;
    int choice;
    if (!v)
        return CK_OK;
    if ((st = ck_jget_object(cx, v, "loss")) != CK_OK)
        return st;
    if ((st = ck_jcheck_keys(cx, v, "loss", keys, COUNT(keys), NULL)) != CK_OK)
        return st;
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(v, "op");
    if (!op)
        return ck_jfail(cx, "loss.op", "required: one of mean, sum, mse, cross_entropy");
    if ((st = ck_jget_choice(cx, op, "loss.op", ck_loss_names.names, ck_loss_names.n, &choice)) != CK_OK)
        return st;
    c->loss = (ck_loss_kind)choice;
    const cJSON *cd = cJSON_GetObjectItemCaseSensitive(v, "class_dim");
    const cJSON *ig = cJSON_GetObjectItemCaseSensitive(v, "ignore_index");
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(v, "label_smoothing");
    if ((cd || ig || ls) && c->loss != CK_LOSS_CROSS_ENTROPY)
        return ck_jfail(cx,
                        cd   ? "loss.class_dim"
                        : ig ? "loss.ignore_index"
                             : "loss.label_smoothing",
                        "applies only to cross_entropy (this loss is %s)",
                        ck_loss_kind_name(c->loss));
    int64_t x;
    if (cd) {
        if ((st = ck_jget_int(cx, cd, "loss.class_dim", -CK_OP_MAX_DIMS, CK_OP_MAX_DIMS - 1, &x)) !=
            CK_OK)
            return st;
        c->loss_class_dim = (int)x;
    }
    if (ig) {
        if ((st = ck_jget_int(cx, ig, "loss.ignore_index", INT32_MIN, INT32_MAX, &x)) != CK_OK)
            return st;
        c->loss_has_ignore = true;
        c->loss_ignore_index = x;
    }
    /* PyTorch's range: 0 (the default, one-hot targets) to 1 (uniform targets) */
    if (ls && (st = ck_jget_real(cx, ls, "loss.label_smoothing", &unit,
                                 &c->loss_label_smoothing)) != CK_OK)
        return st;
    return CK_OK;
}

/* A segment end: the name of any layer. */
static ck_status resolve_layer(const ck_jctx *cx, const ck_case *c, const cJSON *v,
                               const char *jpath, int *out)
{
    const char *name = NULL;
    char shown[64];
    ck_status st = ck_jget_string(cx, v, jpath, &name);
    if (st != CK_OK)
        return st;
    for (int i = 0; i < c->n_layers; i++) {
        if (strcmp(c->layers[i].name, name) == 0) {
            *out = i;
            return CK_OK;
        }
    }
    return ck_jfail(cx, jpath, "\"%s\" is not a layer", ck_jprintable(name, shown, sizeof shown));
}

static ck_status parse_segments(const ck_jctx *cx, const cJSON *v, ck_case *c)
{
    const char *base = "checkpoint.segments";
    char spath[CK_JPATH_MAX], epath[CK_JPATH_MAX];
    ck_status st;
    if (!cJSON_IsArray(v))
        return ck_jfail(cx, base, "must be a list of [first, last] layer-name pairs, got %s",
                       ck_json_type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n < 1)
        return ck_jfail(cx, base, "must hold at least one [first, last] pair");
    if (n > c->n_layers)
        return ck_jfail(cx, base, "%d segments cannot fit in %d layers without overlapping", n,
                       c->n_layers);
    c->segments = calloc((size_t)n, sizeof *c->segments);
    if (!c->segments)
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
    c->n_segments = n;
    int s = 0;
    for (const cJSON *seg = v->child; seg; seg = seg->next, s++) {
        ck_jpath_index(spath, sizeof spath, base, s);
        if (!cJSON_IsArray(seg) || cJSON_GetArraySize(seg) != 2)
            return ck_jfail(cx, spath, "must be a [first, last] pair of layer names, got %s",
                           cJSON_IsArray(seg) ? "a list of another length" : ck_json_type_name(seg));
        int ends[2], e = 0;
        for (const cJSON *end = seg->child; end; end = end->next, e++) {
            ck_jpath_index(epath, sizeof epath, spath, e);
            if ((st = resolve_layer(cx, c, end, epath, &ends[e])) != CK_OK)
                return st;
        }
        if (ends[0] > ends[1])
            return ck_jfail(cx, spath,
                           "first layer \"%s\" (layers[%d]) comes after last layer \"%s\" "
                           "(layers[%d])",
                           c->layers[ends[0]].name, ends[0], c->layers[ends[1]].name, ends[1]);
        if (s > 0) {
            const int *prev = c->segments[s - 1];
            if (ends[1] < prev[0])
                return ck_jfail(cx, spath, "out of order: comes before segments[%d]", s - 1);
            if (ends[0] <= prev[1])
                return ck_jfail(cx, spath, "overlaps segments[%d] (both hold \"%s\")", s - 1,
                               c->layers[ends[0]].name);
        }
        c->segments[s][0] = ends[0];
        c->segments[s][1] = ends[1];
    }
    return CK_OK;
}

static ck_status parse_checkpoint(const ck_jctx *cx, const cJSON *v, ck_case *c)
{
    static const char *const keys[] = {"segments", "every", "policy"};
    static const char *const policies[] = {"sqrt"};
    ck_status st;
    int choice;
    int64_t every;
    if (!v)
        return CK_OK;
    if ((st = ck_jget_object(cx, v, "checkpoint")) != CK_OK)
        return st;
    if ((st = ck_jcheck_keys(cx, v, "checkpoint", keys, COUNT(keys), NULL)) != CK_OK)
        return st;
    if (cJSON_GetArraySize(v) != 1)
        return ck_jfail(cx, "checkpoint", "must give exactly one of segments, every, policy");

    const cJSON *item = v->child;
    if (strcmp(item->string, "segments") == 0) {
        c->ckpt_kind = CK_CKPT_SEGMENTS;
        return parse_segments(cx, item, c);
    }
    if (strcmp(item->string, "every") == 0) {
        if ((st = ck_jget_int(cx, item, "checkpoint.every", 1, CK_SIZE_CAP, &every)) != CK_OK)
            return st;
        c->ckpt_kind = CK_CKPT_EVERY;
        c->ckpt_every = (int)every;
        return CK_OK;
    }
    if ((st = ck_jget_choice(cx, item, "checkpoint.policy", policies, COUNT(policies), &choice)) !=
        CK_OK)
        return st;
    c->ckpt_kind = CK_CKPT_SQRT;
    return CK_OK;
}

static ck_status parse_train(const ck_jctx *cx, const cJSON *v, ck_case *c)
{
    static const char *const keys[] = {"steps",    "optimizer", "lr",         "weight_decay",
                                       "momentum", "beta1",     "beta2",      "eps",
                                       "loss_scale", "loss_scale_value", "growth_interval"};
    static const ck_real_range positive = CK_RANGE_POSITIVE, non_negative = CK_RANGE_NON_NEGATIVE,
                            unit_closed = CK_RANGE_UNIT_CLOSED, unit_half_open = CK_RANGE_UNIT_HALF_OPEN;
    /* Optimizer-specific keys and the optimizer each belongs to. */
    static const struct {
        const char *key;
        ck_optimizer_kind only_for;
        const ck_real_range *range;
        size_t offset;
    } specific[] = {
        {"momentum", CK_OPT_MOMENTUM, &unit_closed, offsetof(ck_optimizer, momentum)},
        {"beta1", CK_OPT_ADAM, &unit_half_open, offsetof(ck_optimizer, beta1)},
        {"beta2", CK_OPT_ADAM, &unit_half_open, offsetof(ck_optimizer, beta2)},
        {"eps", CK_OPT_ADAM, &positive, offsetof(ck_optimizer, eps)},
    };
    char kpath[CK_JPATH_MAX];
    ck_status st;
    int choice;
    int64_t steps;
    const cJSON *item;

    if (!v)
        return CK_OK;
    if ((st = ck_jget_object(cx, v, "train")) != CK_OK)
        return st;
    if ((st = ck_jcheck_keys(cx, v, "train", keys, COUNT(keys), NULL)) != CK_OK)
        return st;

    if ((item = cJSON_GetObjectItemCaseSensitive(v, "optimizer"))) {
        if ((st = ck_jget_choice(cx, item, "train.optimizer", ck_optimizer_names.names,
                             ck_optimizer_names.n, &choice)) != CK_OK)
            return st;
        c->optimizer.kind = (ck_optimizer_kind)choice;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "steps"))) {
        if ((st = ck_jget_int(cx, item, "train.steps", 1, MAX_STEPS, &steps)) != CK_OK)
            return st;
        c->steps = (int)steps;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "lr")) &&
        (st = ck_jget_real(cx, item, "train.lr", &positive, &c->optimizer.lr)) != CK_OK)
        return st;
    if (c->optimizer.kind == CK_OPT_ADAMW)
        c->optimizer.weight_decay = 0.01; /* PyTorch AdamW's default */
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "weight_decay")) &&
        (st = ck_jget_real(cx, item, "train.weight_decay", &non_negative,
                       &c->optimizer.weight_decay)) != CK_OK)
        return st;
    for (int i = 0; i < COUNT(specific); i++) {
        if (!(item = cJSON_GetObjectItemCaseSensitive(v, specific[i].key)))
            continue;
        ck_jpath_key(kpath, sizeof kpath, "train", specific[i].key);
        /* Accepted only where it has an effect: a setting that silently does nothing
         * would let a wrong case pass. */
        if (c->optimizer.kind != specific[i].only_for &&
            !(specific[i].only_for == CK_OPT_ADAM && c->optimizer.kind == CK_OPT_ADAMW))
            return ck_jfail(cx, kpath, "applies only to optimizer \"%s\" (this case uses \"%s\")",
                           ck_optimizer_kind_name(specific[i].only_for),
                           ck_optimizer_kind_name(c->optimizer.kind));
        if ((st = ck_jget_real(cx, item, kpath, specific[i].range,
                           (double *)((char *)&c->optimizer + specific[i].offset))) != CK_OK)
            return st;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "loss_scale"))) {
        if ((st = ck_jget_choice(cx, item, "train.loss_scale", ck_loss_scale_names.names,
                             ck_loss_scale_names.n, &choice)) != CK_OK)
            return st;
        c->loss_scale = (ck_loss_scale_kind)choice;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "loss_scale_value"))) {
        static const ck_real_range scale_range = {0.0, 1e30, true, false}; /* > 0 */
        if (c->loss_scale == CK_SCALE_NONE)
            return ck_jfail(cx, "train.loss_scale_value",
                           "applies only with train.loss_scale \"static\" or \"dynamic\"");
        if ((st = ck_jget_real(cx, item, "train.loss_scale_value", &scale_range,
                           &c->loss_scale_value)) != CK_OK)
            return st;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "growth_interval"))) {
        int64_t gi;
        if (c->loss_scale != CK_SCALE_DYNAMIC)
            return ck_jfail(cx, "train.growth_interval",
                           "applies only with train.loss_scale \"dynamic\"");
        if ((st = ck_jget_int(cx, item, "train.growth_interval", 1, 1000000000, &gi)) != CK_OK)
            return st;
        c->growth_interval = (int)gi;
    }
    return CK_OK;
}

static ck_status parse_policies(const ck_jctx *cx, const cJSON *v, ck_case *c)
{
    static const char *const keys[] = {"rng", "batchnorm_recompute", "autocast_recompute",
                                       "reduction_dtype", "recompute_filter"};
    static const char *const reduction_names[] = {"fp32", "low"};
    static const char *const filter_names[] = {"all", "fp32_only"};
    ck_status st;
    int choice;
    const cJSON *item;
    if (!v)
        return CK_OK;
    if ((st = ck_jget_object(cx, v, "policies")) != CK_OK)
        return st;
    if ((st = ck_jcheck_keys(cx, v, "policies", keys, COUNT(keys), NULL)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "rng"))) {
        if ((st = ck_jget_choice(cx, item, "policies.rng", ck_rng_policy_names.names,
                             ck_rng_policy_names.n, &choice)) != CK_OK)
            return st;
        c->rng = (ck_rng_policy)choice;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "batchnorm_recompute"))) {
        if ((st = ck_jget_choice(cx, item, "policies.batchnorm_recompute", ck_bn_policy_names.names,
                             ck_bn_policy_names.n, &choice)) != CK_OK)
            return st;
        c->bn = (ck_bn_policy)choice;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "autocast_recompute"))) {
        if ((st = ck_jget_choice(cx, item, "policies.autocast_recompute", ck_autocast_names.names,
                             ck_autocast_names.n, &choice)) != CK_OK)
            return st;
        c->autocast = (ck_autocast_policy)choice;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "reduction_dtype"))) {
        if ((st = ck_jget_choice(cx, item, "policies.reduction_dtype", reduction_names,
                                 COUNT(reduction_names), &choice)) != CK_OK)
            return st;
        c->reduction_low = choice == 1;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "recompute_filter"))) {
        if ((st = ck_jget_choice(cx, item, "policies.recompute_filter", filter_names,
                                 COUNT(filter_names), &choice)) != CK_OK)
            return st;
        c->recompute_fp32_only = choice == 1;
    }
    return CK_OK;
}

/* {"rtol": r, "atol": a, "rel_l2": l} (all optional) at jpath. rel_l2 (NULL: not
 * accepted) is the norm criterion of low-precision judgements. */
static ck_status parse_rtol_atol(const ck_jctx *cx, const cJSON *v, const char *jpath,
                                 double *rtol, double *atol, double *rel_l2)
{
    static const char *const keys[] = {"rtol", "atol", "rel_l2"};
    static const ck_real_range non_negative = CK_RANGE_NON_NEGATIVE;
    char kpath[CK_JPATH_MAX];
    ck_status st;
    const cJSON *item;
    if ((st = ck_jget_object(cx, v, jpath)) != CK_OK)
        return st;
    if ((st = ck_jcheck_keys(cx, v, jpath, keys, COUNT(keys) - (rel_l2 ? 0 : 1), NULL)) != CK_OK)
        return st;
    ck_jpath_key(kpath, sizeof kpath, jpath, "rel_l2");
    if (rel_l2 && (item = cJSON_GetObjectItemCaseSensitive(v, "rel_l2")) &&
        (st = ck_jget_real(cx, item, kpath, &non_negative, rel_l2)) != CK_OK)
        return st;
    ck_jpath_key(kpath, sizeof kpath, jpath, "rtol");
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "rtol")) &&
        (st = ck_jget_real(cx, item, kpath, &non_negative, rtol)) != CK_OK)
        return st;
    ck_jpath_key(kpath, sizeof kpath, jpath, "atol");
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "atol")) &&
        (st = ck_jget_real(cx, item, kpath, &non_negative, atol)) != CK_OK)
        return st;
    return CK_OK;
}

static ck_status parse_tolerance(const ck_jctx *cx, const cJSON *v, ck_case *c)
{
    static const char *const keys[] = {"rtol", "atol", "fp16", "bf16", "tensors"};
    static const ck_real_range non_negative = CK_RANGE_NON_NEGATIVE;
    ck_status st;
    const cJSON *item;
    if (!v)
        return CK_OK;
    if ((st = ck_jget_object(cx, v, "tolerance")) != CK_OK)
        return st;
    if ((st = ck_jcheck_keys(cx, v, "tolerance", keys, COUNT(keys), NULL)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "rtol")) &&
        (st = ck_jget_real(cx, item, "tolerance.rtol", &non_negative, &c->rtol)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "atol")) &&
        (st = ck_jget_real(cx, item, "tolerance.atol", &non_negative, &c->atol)) != CK_OK)
        return st;
    c->has_fp16_tol = cJSON_GetObjectItemCaseSensitive(v, "fp16") != NULL;
    c->has_bf16_tol = cJSON_GetObjectItemCaseSensitive(v, "bf16") != NULL;
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "fp16")) &&
        (st = parse_rtol_atol(cx, item, "tolerance.fp16", &c->fp16_rtol, &c->fp16_atol,
                               &c->fp16_rel_l2)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "bf16")) &&
        (st = parse_rtol_atol(cx, item, "tolerance.bf16", &c->bf16_rtol, &c->bf16_atol,
                               &c->bf16_rel_l2)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(v, "tensors"))) {
        if ((st = ck_jget_object(cx, item, "tolerance.tensors")) != CK_OK)
            return st;
        int n = cJSON_GetArraySize(item);
        c->tol_patterns = calloc((size_t)n + 1, sizeof *c->tol_patterns);
        if (!c->tol_patterns)
            return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
        const cJSON *pat;
        cJSON_ArrayForEach(pat, item)
        {
            char kpath[CK_JPATH_MAX];
            ck_jpath_key(kpath, sizeof kpath, "tolerance.tensors", pat->string);
            ck_tol_pattern *tp = &c->tol_patterns[c->n_tol_patterns];
            if (!pat->string || !pat->string[0])
                return ck_jfail(cx, kpath, "a tensor name pattern must not be empty");
            tp->rtol = c->rtol;
            tp->atol = c->atol;
            tp->rel_l2 = -1.0;
            if (!(tp->pattern = strdup(pat->string)))
                return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
            c->n_tol_patterns++;
            if ((st = parse_rtol_atol(cx, pat, kpath, &tp->rtol, &tp->atol, &tp->rel_l2)) != CK_OK)
                return st;
        }
    }
    return CK_OK;
}

/* "init": {"from": "weights.safetensors"}; a relative path is relative to the case file. */
static ck_status parse_init(const ck_jctx *cx, const cJSON *v, ck_case *c)
{
    static const char *const keys[] = {"from"};
    ck_status st;
    const char *from = NULL;
    if (!v)
        return CK_OK;
    if ((st = ck_jget_object(cx, v, "init")) != CK_OK)
        return st;
    if ((st = ck_jcheck_keys(cx, v, "init", keys, COUNT(keys), NULL)) != CK_OK)
        return st;
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(v, "from");
    if (!item)
        return ck_jfail(cx, "init.from", "required: a .safetensors, .npy or .npz file or a directory");
    if ((st = ck_jget_string(cx, item, "init.from", &from)) != CK_OK)
        return st;
    if (!from[0])
        return ck_jfail(cx, "init.from", "must not be empty");
    const char *slash = strrchr(cx->path, '/');
    size_t dir = from[0] == '/' || !slash ? 0 : (size_t)(slash - cx->path) + 1;
    size_t n = dir + strlen(from) + 1;
    if (!(c->init_from = malloc(n)))
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
    snprintf(c->init_from, n, "%.*s%s", (int)dir, cx->path, from);
    return CK_OK;
}

static ck_status parse_precision(const ck_jctx *cx, const cJSON *v, ck_case *c)
{
    ck_status st;
    int choice;
    if (!v)
        return CK_OK;
    if (cJSON_IsString(v)) {
        if ((st = ck_jget_choice(cx, v, "precision", ck_precision_names.names, ck_precision_names.n,
                             &choice)) != CK_OK)
            return st;
        c->precisions[0] = ck_precision_dtypes[choice];
        c->n_precisions = 1;
        return CK_OK;
    }
    if (!cJSON_IsArray(v))
        return ck_jfail(cx, "precision", "must be \"fp32\", \"fp16\", \"bf16\" or a list of them, got %s",
                       ck_json_type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n < 1 || n > CK_MAX_PRECISIONS)
        return ck_jfail(cx, "precision", "must list 1 to %d precisions, got %d", CK_MAX_PRECISIONS, n);
    c->n_precisions = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, v)
    {
        char ipath[CK_JPATH_MAX];
        ck_jpath_index(ipath, sizeof ipath, "precision", c->n_precisions);
        if ((st = ck_jget_choice(cx, item, ipath, ck_precision_names.names, ck_precision_names.n,
                             &choice)) != CK_OK)
            return st;
        for (int k = 0; k < c->n_precisions; k++)
            if (c->precisions[k] == ck_precision_dtypes[choice])
                return ck_jfail(cx, ipath, "\"%s\" is listed twice", ck_precision_names.names[choice]);
        c->precisions[c->n_precisions++] = ck_precision_dtypes[choice];
    }
    return CK_OK;
}

static ck_status parse_description(const ck_jctx *cx, const cJSON *v, ck_case *c)
{
    if (!v)
        return CK_OK;
    /* Free text; any other JSON value is kept as its compact JSON text. */
    if (cJSON_IsString(v)) {
        c->description = strdup(v->valuestring);
    } else {
        char *printed = cJSON_PrintUnformatted(v);
        c->description = printed ? strdup(printed) : NULL;
        cJSON_free(printed);
    }
    if (!c->description)
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);
    return CK_OK;
}

static ck_status parse_case_object(const ck_jctx *cx, const cJSON *root, ck_case *c)
{
    static const char *const keys[] = {
        "name",   "description", "seed",     "input",     "layers",
        "loss",   "checkpoint",  "train",    "policies",  "tolerance",
        "min_memory_saving",     "expect",   "expect_memory", "precision",
        "expect_precision",      "init",     "expect_vacuous", "expect_nonfinite",
    };
    static const ck_real_range saving_range = CK_RANGE_UNIT_HALF_OPEN;
    ck_status st;
    const char *name = NULL;
    const cJSON *item;
    int choice;
    int64_t seed;

    if (!cJSON_IsObject(root))
        return ck_jfail(cx, "top level", "must be an object, got %s", ck_json_type_name(root));
    if ((st = ck_jcheck_keys(cx, root, "", keys, COUNT(keys), NULL)) != CK_OK)
        return st;

    if (!(item = cJSON_GetObjectItemCaseSensitive(root, "name")))
        return ck_jfail(cx, "name", "required: the case's name");
    if ((st = ck_jget_name(cx, item, "name", &name)) != CK_OK)
        return st;
    if (!(c->name = strdup(name)))
        return ck_fail(cx->err, CK_ERR_NOMEM, "%s: out of memory", cx->path);

    if ((st = parse_description(cx, cJSON_GetObjectItemCaseSensitive(root, "description"), c)) !=
        CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "seed"))) {
        if ((st = ck_jget_int(cx, item, "seed", 0, EXACT_INT_MAX, &seed)) != CK_OK)
            return st;
        c->seed = (uint64_t)seed;
    }
    if ((st = parse_input(cx, cJSON_GetObjectItemCaseSensitive(root, "input"), c)) != CK_OK)
        return st;
    if ((st = parse_layers(cx, cJSON_GetObjectItemCaseSensitive(root, "layers"), c)) != CK_OK)
        return st;
    if ((st = parse_loss(cx, cJSON_GetObjectItemCaseSensitive(root, "loss"), c)) != CK_OK)
        return st;
    if ((st = parse_checkpoint(cx, cJSON_GetObjectItemCaseSensitive(root, "checkpoint"), c)) !=
        CK_OK)
        return st;
    if ((st = parse_train(cx, cJSON_GetObjectItemCaseSensitive(root, "train"), c)) != CK_OK)
        return st;
    if ((st = parse_policies(cx, cJSON_GetObjectItemCaseSensitive(root, "policies"), c)) != CK_OK)
        return st;
    if ((st = parse_tolerance(cx, cJSON_GetObjectItemCaseSensitive(root, "tolerance"), c)) !=
        CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "min_memory_saving"))) {
        if ((st = ck_jget_real(cx, item, "min_memory_saving", &saving_range,
                           &c->min_memory_saving)) != CK_OK)
            return st;
        c->has_min_memory_saving = true;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "expect")) && cJSON_IsObject(item)) {
        /* per dtype: a canary of a low-precision bug is identical in fp32 */
        if (!item->child)
            return ck_jfail(cx, "expect", "an empty object: give \"identical\", \"close\" or "
                                          "\"mismatch\", or one of them per dtype the case runs in");
        if ((st = ck_jcheck_keys(cx, item, "expect", ck_precision_names.names, ck_precision_names.n, NULL)) !=
            CK_OK)
            return st;
        for (int k = 0; k < ck_precision_names.n; k++) {
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(item, ck_precision_names.names[k]);
            char kpath[CK_JPATH_MAX];
            ck_jpath_key(kpath, sizeof kpath, "expect", ck_precision_names.names[k]);
            if (!e)
                continue;
            if ((st = ck_jget_choice(cx, e, kpath, ck_expect_names.names, ck_expect_names.n, &choice)) !=
                CK_OK)
                return st;
            c->has_expect_dtype[k] = true;
            c->expect_dtype[k] = (ck_expect)choice;
        }
    } else if (item) {
        if ((st = ck_jget_choice(cx, item, "expect", ck_expect_names.names, ck_expect_names.n, &choice)) !=
            CK_OK)
            return st;
        c->expect = (ck_expect)choice;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "expect_memory"))) {
        if ((st = ck_jget_choice(cx, item, "expect_memory", ck_expect_memory_names.names,
                             ck_expect_memory_names.n, &choice)) != CK_OK)
            return st;
        c->expect_memory_met = choice == 0;
    }
    if ((st = parse_precision(cx, cJSON_GetObjectItemCaseSensitive(root, "precision"), c)) != CK_OK)
        return st;
    if ((st = parse_init(cx, cJSON_GetObjectItemCaseSensitive(root, "init"), c)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "expect_vacuous")) &&
        (st = ck_jget_bool(cx, item, "expect_vacuous", &c->expect_vacuous)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "expect_nonfinite")) &&
        (st = ck_jget_bool(cx, item, "expect_nonfinite", &c->expect_nonfinite)) != CK_OK)
        return st;
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "expect_precision"))) {
        c->has_expect_precision = true;
        /* the low-precision run against fp32 is never expected to be bitwise identical:
         * "close" or "mismatch", for every low dtype or per dtype {"fp16": ..., "bf16": ...} */
        static const char *const names[] = {"close", "mismatch", "any"};
        static const ck_expect as_expect[] = {CK_EXPECT_CLOSE, CK_EXPECT_MISMATCH, CK_EXPECT_ANY};
        static const char *const dtype_keys[] = {"fp16", "bf16"};
        if (cJSON_IsObject(item)) {
            if ((st = ck_jcheck_keys(cx, item, "expect_precision", dtype_keys, COUNT(dtype_keys), NULL)) != CK_OK)
                return st;
            const cJSON *e16 = cJSON_GetObjectItemCaseSensitive(item, "fp16");
            const cJSON *eb16 = cJSON_GetObjectItemCaseSensitive(item, "bf16");
            if (e16) {
                if ((st = ck_jget_choice(cx, e16, "expect_precision.fp16", names, COUNT(names),
                                     &choice)) != CK_OK)
                    return st;
                c->expect_fp16 = as_expect[choice];
            }
            if (eb16) {
                if ((st = ck_jget_choice(cx, eb16, "expect_precision.bf16", names, COUNT(names),
                                     &choice)) != CK_OK)
                    return st;
                c->expect_bf16 = as_expect[choice];
            }
        } else {
            if ((st = ck_jget_choice(cx, item, "expect_precision", names, COUNT(names), &choice)) !=
                CK_OK)
                return st;
            c->expect_fp16 = c->expect_bf16 = as_expect[choice];
        }
    }
    return CK_OK;
}

static void set_case_defaults(ck_case *c)
{
    memset(c, 0, sizeof *c);
    c->seed = 0;
    c->input_dist = CK_DIST_UNIFORM;
    c->loss = CK_LOSS_MEAN;
    c->loss_class_dim = 1;
    c->loss_ignore_index = -100;
    c->ckpt_kind = CK_CKPT_SQRT;
    c->steps = 1;
    c->optimizer.kind = CK_OPT_SGD;
    c->optimizer.lr = 0.01;
    c->optimizer.momentum = 0.9;
    c->optimizer.beta1 = 0.9;
    c->optimizer.beta2 = 0.999;
    c->optimizer.eps = 1e-8;
    c->optimizer.weight_decay = 0.0;
    c->rng = CK_RNG_COUNTER;
    c->bn = CK_BN_SKIP;
    c->rtol = 1.3e-6;
    c->atol = 1e-5;
    c->expect = CK_EXPECT_CLOSE;
    c->expect_memory_met = true;
    c->n_precisions = 1;
    c->precisions[0] = CK_F32;
    c->loss_scale = CK_SCALE_NONE;
    c->loss_scale_value = 65536.0;
    c->growth_interval = 2000;
    c->autocast = CK_AUTOCAST_RESTORE;
    c->fp16_rtol = 1e-3;
    c->fp16_atol = 1e-5;
    c->bf16_rtol = 1.6e-2;
    c->bf16_atol = 1e-5;
    c->fp16_rel_l2 = -1.0;
    c->bf16_rel_l2 = -1.0;
    c->expect_fp16 = CK_EXPECT_CLOSE;
    c->expect_bf16 = CK_EXPECT_CLOSE;
}

/* ------------------------------------------------------------------------------------ */
/* Public entry points                                                                   */
/* ------------------------------------------------------------------------------------ */

ck_status ck_case_parse(const char *text, size_t len, const char *path, ck_case *out,
                        ck_error *err)
{
    ck_jctx cx = {path ? path : "(case)", err};
    cJSON *root = NULL;
    ck_status st;

    set_case_defaults(out);
    if (!(out->path = strdup(cx.path))) {
        st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", cx.path);
        goto cleanup;
    }
    if ((st = ck_jparse_document(&cx, text, len, &root)) != CK_OK)
        goto cleanup;
    if ((st = ck_jcheck_duplicate_keys(&cx, root, "")) != CK_OK)
        goto cleanup;
    st = parse_case_object(&cx, root, out);
cleanup:
    cJSON_Delete(root);
    if (st != CK_OK)
        ck_case_free(out);
    return st;
}

ck_status ck_case_load(const char *path, ck_case *out, ck_error *err)
{
    char *text = NULL;
    size_t len = 0;
    ck_status st;
    memset(out, 0, sizeof *out);
    if ((st = ck_read_file(path, MAX_FILE_BYTES, &text, &len, err)) != CK_OK)
        goto cleanup;
    if (len == 0) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: empty file", path);
        goto cleanup;
    }
    st = ck_case_parse(text, len, path, out, err);
cleanup:
    free(text);
    return st;
}

void ck_case_free(ck_case *c)
{
    if (!c)
        return;
    for (int i = 0; c->layers && i < c->n_layers; i++) {
        free(c->layers[i].name);
        free(c->layers[i].op_name);
        for (int k = 0; k < c->layers[i].n_shares; k++) {
            free(c->layers[i].shares[k].suffix);
            free(c->layers[i].shares[k].target);
        }
    }
    free(c->layers);
    free(c->segments);
    for (int i = 0; c->tol_patterns && i < c->n_tol_patterns; i++)
        free(c->tol_patterns[i].pattern);
    free(c->tol_patterns);
    free(c->path);
    free(c->name);
    free(c->description);
    free(c->init_from);
    memset(c, 0, sizeof *c);
}

void ck_case_precision_tolerance(const ck_case *c, ck_dtype dt, const char *kind,
                                 const char *name, double *rtol, double *atol, double *rel_l2,
                                 bool *from_case)
{
    *from_case = true;
    char qualified[256];
    snprintf(qualified, sizeof qualified, "%s:%s", kind, name);
    for (int i = 0; i < c->n_tol_patterns; i++) {
        if (fnmatch(c->tol_patterns[i].pattern, qualified, 0) == 0 ||
            fnmatch(c->tol_patterns[i].pattern, name, 0) == 0) {
            *rtol = c->tol_patterns[i].rtol;
            *atol = c->tol_patterns[i].atol;
            *rel_l2 = c->tol_patterns[i].rel_l2;
            return;
        }
    }
    *rel_l2 = -1.0;
    if (dt == CK_BF16) {
        *rtol = c->bf16_rtol;
        *atol = c->bf16_atol;
        *rel_l2 = c->bf16_rel_l2;
        *from_case = c->has_bf16_tol;
    } else if (dt == CK_F16) {
        *rtol = c->fp16_rtol;
        *atol = c->fp16_atol;
        *rel_l2 = c->fp16_rel_l2;
        *from_case = c->has_fp16_tol;
    } else {
        *rtol = c->rtol;
        *atol = c->atol;
    }
}

ck_expect ck_case_expect_vs_fp32(const ck_case *c, ck_dtype dt)
{
    return dt == CK_BF16 ? c->expect_bf16 : c->expect_fp16;
}

ck_expect ck_case_expect(const ck_case *c, ck_dtype dt)
{
    for (int k = 0; k < COUNT(ck_precision_dtypes); k++)
        if (ck_precision_dtypes[k] == dt && c->has_expect_dtype[k])
            return c->expect_dtype[k];
    return c->expect;
}

int ck_case_unused_settings(const ck_case *c, const ck_dtype *dts, int n,
                            char (*notes)[CK_CASE_NOTE_MAX], int max)
{
    int k = 0;
    bool runs_low = false;
    for (int d = 0; d < n; d++)
        runs_low = runs_low || dts[d] != CK_F32;
    for (int p = 0; p < COUNT(ck_precision_dtypes) && k < max; p++) {
        if (!c->has_expect_dtype[p])
            continue;
        bool runs = false;
        for (int d = 0; d < n; d++)
            runs = runs || dts[d] == ck_precision_dtypes[p];
        if (!runs)
            snprintf(notes[k++], CK_CASE_NOTE_MAX,
                     "%s: expect.%s: not used, this run is not in %s (precision or --dtype)",
                     c->path, ck_dtype_name(ck_precision_dtypes[p]),
                     ck_dtype_name(ck_precision_dtypes[p]));
    }
    if (!runs_low && c->has_expect_precision && k < max)
        snprintf(notes[k++], CK_CASE_NOTE_MAX,
                 "%s: expect_precision: not used, this run is fp32 only", c->path);
    if (!runs_low && c->loss_scale != CK_SCALE_NONE && k < max)
        snprintf(notes[k++], CK_CASE_NOTE_MAX,
                 "%s: train.loss_scale: meant for fp16/bf16 runs, this run is fp32 only", c->path);
    return k;
}
