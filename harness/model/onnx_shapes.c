/*
 * Layer shapes during an import (onnx_shapes.h): a throw-away case of the layers mapped so
 * far, parsed and built by the harness's own graph code; its nodes' out_shapes are cached
 * until another layer is added.
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

static ck_status rebuild(ck_onnx_shape_cache *c, const cJSON *input, const cJSON *layers,
                         const char *path, ck_error *err)
{
    ck_onnx_shape_cache_free(c);
    cJSON *root = cJSON_CreateObject();
    cJSON *in = cJSON_Duplicate(input, true), *ls = cJSON_Duplicate(layers, true);
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
    if (c->n_layers != cJSON_GetArraySize(layers))
        CK_TRY(rebuild(c, input, layers, path, err));
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->names[i], layer) == 0) {
            *out = c->shapes[i];
            return CK_OK;
        }
    return ck_fail(err, CK_ERR_INTERNAL, "%s: layer `%s` has no shape", path, layer);
}
