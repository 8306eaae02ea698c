/*
 * Static shapes during an ONNX import (onnx_import.c): the output shape of a case layer
 * already mapped, from the harness's own shape inference on the layers mapped so far (the
 * case parsed and its graph built), so that Shape nodes, GlobalAveragePool's window and
 * Reshape's 0 dims fold to constants exactly as the case will run them. Never the file's
 * value_info: a shape the graph would not have cannot reach the case.
 */
#ifndef CK_ONNX_SHAPES_H
#define CK_ONNX_SHAPES_H

#include <cjson/cJSON.h>

#include "harness/core/tensor.h"
#include "harness/io/onnx.h"

/* A cache of one build; reset (free) whenever layers are added. */
typedef struct {
    int n_layers;   /* layers the cached build saw; -1: none */
    int n;
    char **names;
    ck_shape *shapes;
} ck_onnx_shape_cache;

void ck_onnx_shape_cache_init(ck_onnx_shape_cache *c);
void ck_onnx_shape_cache_free(ck_onnx_shape_cache *c);

/* The output shape of `layer` ("input": the model input) given the case's `input` object
 * and the `layers` mapped so far. path names the model in messages. */
ck_status ck_onnx_layer_shape(ck_onnx_shape_cache *c, const cJSON *input, const cJSON *layers,
                              const char *layer, const char *path, ck_shape *out,
                              ck_error *err);

#endif
