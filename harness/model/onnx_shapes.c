/*
 * Layer shapes during an import (onnx_shapes.h): a throw-away case of the layer asked for
 * and the layers it depends on, parsed and built by the harness's own graph code; their
 * out_shapes are cached until another layer is added.
 */
#include "harness/model/onnx_shapes.h"

#include <stdlib.h>
#include <string.h>

#include "harness/model/case.h"
#include "harness/model/graph.h"

void ck_onnx_shape_cache_init(ck_onnx_shape_cache *c)
{
    memset(c, 0, sizeof *c);
    c->n_layers = -1;
}

void ck_onnx_shape_cache_free(ck_onnx_shape_cache *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->names[i]);
    free(c->names);
    free(c->shapes);
    ck_onnx_shape_cache_init(c);
}

/* The layers `target` depends on, and it, in order (a case refuses layers nobody reads,
 * so the throw-away case holds only these). NULL when out of memory. */
static cJSON *ancestors(const cJSON *layers, const char *target)
{
    int n = cJSON_GetArraySize(layers), t = -1;
    for (int i = 0; i < n && t < 0; i++)
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(layers, i),
                                                            "name")), target) == 0)
            t = i;
    bool *keep = calloc((size_t)n + 1, sizeof *keep);
    cJSON *out = cJSON_CreateArray();
    if (!keep || !out) {
        free(keep);
        cJSON_Delete(out);
        return NULL;
    }
    if (t >= 0)
        keep[t] = true;
    for (int i = t; i >= 0; i--) {
        if (!keep[i])
            continue;
        const cJSON *L = cJSON_GetArrayItem(layers, i), *ins = cJSON_GetObjectItem(L, "inputs");
        if (!ins && i > 0)
            keep[i - 1] = true;
        const cJSON *one = cJSON_IsString(ins) ? ins : NULL, *e;
        const cJSON *list = cJSON_IsArray(ins) ? ins : NULL;
        for (int k = 0; k < n; k++) {
            const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(layers, k),
                                                                       "name"));
            bool used = one && strcmp(one->valuestring, nm) == 0;
            cJSON_ArrayForEach(e, list)
                used = used || (cJSON_IsString(e) && strcmp(e->valuestring, nm) == 0);
            if (used && k < i)
                keep[k] = true;
        }
    }
    for (int i = 0; i <= t; i++)
        if (keep[i] && !cJSON_AddItemToArray(out, cJSON_Duplicate(cJSON_GetArrayItem(layers, i),
                                                                   true))) {
            cJSON_Delete(out);
            out = NULL;
            break;
        }
    free(keep);
    return out;
}

static ck_status rebuild(ck_onnx_shape_cache *c, const cJSON *input, const cJSON *layers,
                         const char *target, const char *path, ck_error *err)
{
    ck_onnx_shape_cache_free(c);
    cJSON *root = cJSON_CreateObject();
    cJSON *in = cJSON_Duplicate(input, true), *ls = ancestors(layers, target);
    cJSON *loss = cJSON_CreateObject();
    char *text = NULL;
    ck_status st = CK_OK;
    if (!root || !in || !ls || !loss || !cJSON_AddStringToObject(root, "name", "shapes") ||
        !cJSON_AddItemToObject(root, "input", in) || !cJSON_AddItemToObject(root, "layers", ls) ||
        !cJSON_AddStringToObject(loss, "op", "mean") ||
        !cJSON_AddItemToObject(root, "loss", loss) || !(text = cJSON_PrintUnformatted(root))) {
        if (!root || !cJSON_GetObjectItem(root, "input"))
            cJSON_Delete(in);
        if (!root || !cJSON_GetObjectItem(root, "layers"))
            cJSON_Delete(ls);
        if (!root || !cJSON_GetObjectItem(root, "loss"))
            cJSON_Delete(loss);
        cJSON_Delete(root);
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
    }
    cJSON_Delete(root);
    ck_case cs;
    ck_graph g;
    memset(&cs, 0, sizeof cs);
    memset(&g, 0, sizeof g);
    if ((st = ck_case_parse(text, strlen(text), path, &cs, err)) == CK_OK &&
        (st = ck_graph_build(&cs, &g, err)) == CK_OK) {
        c->names = calloc((size_t)g.n + 1, sizeof *c->names);
        c->shapes = calloc((size_t)g.n + 1, sizeof *c->shapes);
        if (!c->names || !c->shapes)
            st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
        for (int i = 0; st == CK_OK && i < g.n; i++) {
            if (!(c->names[i] = strdup(g.nodes[i].spec->name))) {
                st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            c->shapes[i] = g.nodes[i].out_shape;
            c->n++;
        }
        if (st == CK_OK) {
            c->names[c->n] = strdup("input");
            c->shapes[c->n] = g.input_shape;
            if (c->names[c->n])
                c->n++;
        }
        ck_graph_free(&g);
    }
    ck_case_free(&cs);
    free(text);
    if (st == CK_OK)
        c->n_layers = cJSON_GetArraySize(layers);
    else
        ck_onnx_shape_cache_free(c);
    return st;
}

ck_status ck_onnx_layer_shape(ck_onnx_shape_cache *c, const cJSON *input, const cJSON *layers,
                              const char *layer, const char *path, ck_shape *out,
                              ck_error *err)
{
    for (int pass = 0; pass < 2; pass++) {
        if (c->n_layers == cJSON_GetArraySize(layers))
            for (int i = 0; i < c->n; i++)
                if (strcmp(c->names[i], layer) == 0) {
                    *out = c->shapes[i];
                    return CK_OK;
                }
        if (pass == 0)
            CK_TRY(rebuild(c, input, layers, layer, path, err));
    }
    return ck_fail(err, CK_ERR_INTERNAL, "%s: layer `%s` has no shape", path, layer);
}
